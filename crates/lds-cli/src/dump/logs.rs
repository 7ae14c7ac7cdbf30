//! `lds dump IMAGE version-log|backup-log`: every object of a log area by the physical walk,
//! with its liveness (and, in a backup log kept for log chunks, whether it is kept), and what
//! recovery says of the log.

use std::io::Write;

use lds_format::algorithms::instance::{BackupRecovery, InstanceRecovery};
use lds_format::geometry::LogKind;
use lds_volume::inspect::{self, Liveness, RetainedLog, WalkedObject};
use serde_json::{json, Map, Value};

use super::{describe_retained, device_name, insert_retained, io, recover, retained_of, DumpError, DumpOptions, View};
use crate::json;
use crate::json_stream::JsonStream;

/// An object of a walk as JSON. `kept_log` is the backup log region the live version keeps
/// for its log chunks (format 1.6, only on volumes with feature `log_tables`): in the backup
/// log, `status` then says of each object whether it is `retained` (SPEC.md §8.9).
fn object_json(object: &WalkedObject<'_>, kind: LogKind, kept_log: Option<&RetainedLog>) -> Value {
    let mut map = json::object_header(&object.header);
    map.insert("log_offset".into(), json!(object.offset));
    let payload =
        json::payload(object.header.object_type_code, object.payload, object.payload_offset).unwrap_or(Value::Null);
    map.insert("payload".into(), payload);
    let valid = !matches!(object.liveness, Liveness::Invalid(_));
    let live = object.liveness == Liveness::Live;
    // Recovery does not replay a retained object (its entries are in chunks), but log
    // references read it: it is not garbage.
    let retained = match (kept_log, kind) {
        (Some(kept_log), LogKind::Backup) => Some(valid && !live && kept_log.holds(object.header.lsn)),
        _ => None,
    };
    let reason = match (retained, kept_log) {
        (Some(true), Some(kept_log)) => format!(
            "retained for log chunks (from the retention start, lsn {}, to the backup start, lsn {})",
            kept_log.start.lsn, kept_log.backup_start.lsn
        ),
        _ => object.liveness.reason(kind, object.header.lsn),
    };
    let mut status = json!({"valid": valid, "live": live, "reason": reason});
    if let (Some(retained), Value::Object(status)) = (retained, &mut status) {
        status.insert("retained".into(), json!(retained));
    }
    map.insert("status".into(), status);
    Value::Object(map)
}

/// Both walks of one log area of an instance, as the member `key` of the object `stream` is
/// in: `{"left": [...], "right": [...]}`, an object at a time.
pub(super) fn stream_walk(
    stream: &mut JsonStream<'_>,
    key: &str,
    walk: &inspect::LogWalk<'_>,
    kind: LogKind,
    kept_log: Option<&RetainedLog>,
) -> std::io::Result<()> {
    stream.begin_object(Some(key))?;
    stream.begin_array(Some("left"))?;
    for object in walk.left() {
        stream.value(None, &object_json(&object, kind, kept_log))?;
    }
    stream.end_array()?;
    stream.begin_array(Some("right"))?;
    for object in walk.right() {
        stream.value(None, &object_json(&object, kind, kept_log))?;
    }
    stream.end_array()?;
    stream.end_object()
}

/// Lists the objects of a walk for people, one line each, under `title`; `objects` gives each
/// object's JSON (made one at a time).
fn print_objects(out: &mut dyn Write, title: &str, objects: impl Iterator<Item = Value>) -> Result<(), DumpError> {
    writeln!(out, "{title}").map_err(io)?;
    writeln!(out, "  {:>10}  {:<18}  {:>6}  {:>8}  {:>8}  {:<4}  why", "offset", "type", "sn", "lsn", "size", "live")
        .map_err(io)?;
    for object in objects {
        let field = |name: &str| object.get(name).cloned().unwrap_or(Value::Null);
        let text = |name: &str| field(name).to_string();
        let status = field("status");
        let live = status.get("live").and_then(Value::as_bool).unwrap_or(false);
        let reason = status.get("reason").and_then(Value::as_str).unwrap_or("");
        let summary =
            summarize_payload(object.get("object_type").and_then(Value::as_str).unwrap_or(""), &field("payload"));
        writeln!(
            out,
            "  {:>10}  {:<18}  {:>6}  {:>8}  {:>8}  {:<4}  {}{}",
            text("log_offset"),
            field("object_type").as_str().unwrap_or("?"),
            text("sn"),
            text("lsn"),
            text("len_payload"),
            if live { "yes" } else { "no" },
            if live { String::new() } else { format!("{reason}; ") },
            summary
        )
        .map_err(io)?;
    }
    Ok(())
}

fn summarize_payload(object_type: &str, payload: &Value) -> String {
    let number = |name: &str| payload.get(name).and_then(Value::as_u64).unwrap_or(0);
    let values = payload.get("values").filter(|values| values.is_object());
    let value_number = |name: &str| values.and_then(|values| values.get(name)).and_then(Value::as_u64).unwrap_or(0);
    match object_type {
        "base_version" => format!(
            "{} chunks{}{}, last_sequence {}",
            number("num_chunks"),
            log_chunks_note(payload.get("chunks")),
            values.map_or(String::new(), |_| format!(", {} value chunks", value_number("num_value_chunks"))),
            number("last_sequence")
        ),
        "delta_version" => format!(
            "-{} +{} chunks{}{}, last_sequence {}, backup start {}",
            number("num_deleted"),
            number("num_added"),
            log_chunks_note(payload.get("added")),
            values.map_or(String::new(), |_| format!(
                ", -{} +{} value chunks",
                value_number("num_value_deleted"),
                value_number("num_value_added")
            )),
            number("last_sequence"),
            number("ofs_backup_start")
        ),
        "compaction_journal" => format!(
            "compaction {}: {} inputs, {} outputs, {} cleaned",
            number("compaction_id"),
            number("num_inputs"),
            number("num_outputs"),
            number("num_cleaned")
        ),
        "write_batch" => format!("{} entries from sequence {}", number("num_entries"), number("first_sequence")),
        "wrap_left" => format!("first live object at {} (lsn {})", number("ofs_first_live"), number("lsn_first_live")),
        _ => String::new(),
    }
}

/// `" (N log chunks)"` when `N` of the chunk metadata records of `chunks` (JSON) have flag
/// `log_refs` (SPEC.md §6.4), else nothing.
fn log_chunks_note(chunks: Option<&Value>) -> String {
    let flag = u64::from(lds_format::version::meta::CHUNK_FLAG_LOG_REFS);
    let count = chunks
        .and_then(Value::as_array)
        .map_or(0, |chunks| chunks.iter().filter(|chunk| chunk["flags"].as_u64().unwrap_or(0) & flag != 0).count());
    match count {
        0 => String::new(),
        count => format!(" ({count} log chunks)"),
    }
}

/// A view that lists one log as a single sequence (SPEC.md §15): `document` with the merged
/// walk as its last member, `objects`, written an object at a time.
fn stream_merged(
    out: &mut dyn Write,
    document: &Map<String, Value>,
    walk: &inspect::LogWalk<'_>,
    kind: LogKind,
    kept_log: Option<&RetainedLog>,
) -> Result<(), DumpError> {
    let mut stream = JsonStream::new(out);
    stream.begin_object(None).map_err(io)?;
    stream.members(document).map_err(io)?;
    stream.begin_array(Some("objects")).map_err(io)?;
    for object in walk.merged() {
        stream.value(None, &object_json(&object, kind, kept_log)).map_err(io)?;
    }
    stream.end_array().map_err(io)?;
    stream.end_object().map_err(io)?;
    stream.finish().map_err(io)
}

pub(super) fn dump_version_log(volume: &View<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), DumpError> {
    let (areas, recovery) = recover(volume, options.instance)?;
    let walk = inspect::walk_log(&areas.version, volume.geometry(), LogKind::Version, options.instance, &recovery);
    let mut document = json::document("version-log", &device_name(options));
    document.insert("instance".into(), json!(options.instance));
    match &recovery {
        Ok(recovery) => {
            let state = &recovery.version_log;
            document.insert("head".into(), json!(state.head.offset));
            document.insert("next_lsn".into(), json!(state.head.next_lsn));
            document.insert("sn".into(), json!(state.sn));
            document.insert("live_base_version_offset".into(), json!(state.base_offset));
            document.insert("recovery".into(), json!("ok"));
        }
        Err(error) => {
            document.insert("recovery".into(), json!(error.to_string()));
        }
    }
    if options.json {
        return stream_merged(out, &document, &walk, LogKind::Version, None);
    }
    let title =
        format!("version log of instance {} ({} objects by the physical walk)", options.instance, walk.merged_len());
    let objects = walk.merged().map(|object| object_json(&object, LogKind::Version, None));
    print_objects(out, &title, objects)?;
    match &recovery {
        Ok(recovery) => {
            let state = &recovery.version_log;
            writeln!(
                out,
                "recovery: live base version at offset {} (sn {}), {} live objects, head at {} (next lsn {})",
                state.base_offset,
                state.sn,
                state.live_count(),
                state.head.offset,
                state.head.next_lsn
            )
            .map_err(io)
        }
        Err(error) => writeln!(out, "recovery fails: {error}").map_err(io),
    }
}

pub(super) fn dump_backup_log(volume: &View<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), DumpError> {
    let (areas, recovery) = recover(volume, options.instance)?;
    let kept_log = retained_of(volume, &recovery);
    let walk = inspect::walk_log(&areas.backup, volume.geometry(), LogKind::Backup, options.instance, &recovery);
    let mut document = json::document("backup-log", &device_name(options));
    document.insert("instance".into(), json!(options.instance));
    let failure = match &recovery {
        Ok(recovery) => {
            let version = &recovery.version_log.version;
            document.insert("ofs_backup_start".into(), json!(version.ofs_backup_start));
            document.insert("lsn_backup_start".into(), json!(version.lsn_backup_start));
            if let Some(kept_log) = &kept_log {
                insert_retained(&mut document, kept_log);
            }
            match &recovery.backup {
                BackupRecovery::Recovered { state, .. } => {
                    document.insert("head".into(), json!(state.head.offset));
                    document.insert("next_lsn".into(), json!(state.head.next_lsn));
                    document.insert("start_found".into(), json!(state.start_found));
                    document.insert("replayed_batches".into(), json!(state.batches.len()));
                    document.insert("recovery".into(), json!("ok"));
                    None
                }
                _ => recovery.damage().map(|damage| damage.to_string()),
            }
        }
        Err(_) => Some("the version log cannot be recovered".to_string()),
    };
    if let Some(failure) = &failure {
        document.insert("recovery".into(), json!(failure));
    }
    if options.json {
        return stream_merged(out, &document, &walk, LogKind::Backup, kept_log.as_ref());
    }
    let title =
        format!("backup log of instance {} ({} objects by the physical walk)", options.instance, walk.merged_len());
    let objects = walk.merged().map(|object| object_json(&object, LogKind::Backup, kept_log.as_ref()));
    print_objects(out, &title, objects)?;
    if let Some(kept_log) = &kept_log {
        writeln!(out, "{}", describe_retained(kept_log)).map_err(io)?;
    }
    match (recovery.as_ref().ok().and_then(InstanceRecovery::backup_state), failure) {
        (Some(state), _) if state.start_found => writeln!(
            out,
            "recovery: {} batches to replay, head at {} (next lsn {})",
            state.batches.len(),
            state.head.offset,
            state.head.next_lsn
        )
        .map_err(io),
        (Some(state), _) => writeln!(
            out,
            "recovery: the reset object at {} (lsn {}) was never written: nothing to replay",
            state.head.offset, state.head.next_lsn
        )
        .map_err(io),
        (None, Some(failure)) => writeln!(out, "recovery fails: {failure}").map_err(io),
        (None, None) => writeln!(out, "recovery fails").map_err(io),
    }
}
