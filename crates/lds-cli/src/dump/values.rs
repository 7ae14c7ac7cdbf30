//! `lds dump IMAGE value-chunks`: every instance's value chunks (format 1.4), those its
//! version lists and those only its backup log names, each with its footer and digest
//! checked (`lds_volume::inspect::check_value_chunk`).

use std::collections::BTreeMap;
use std::io::Write;

use lds_format::geometry::LogKind;
use lds_format::log::area_context;
use lds_format::value::ValueChunkMeta;
use lds_volume::inspect;
use serde_json::{json, Map, Value};

use super::{device_name, emit, io, recover, DumpError, DumpOptions, View};
use crate::json;

/// Value chunk `id` of `instance` at `slot` checked: its footer's fields (null without the
/// magic, or on no device) and its `status` (`footer` and `digest`).
fn checked(
    volume: &View<'_>,
    instance: u32,
    id: u64,
    slot: u64,
    meta: Option<&ValueChunkMeta>,
) -> Result<(Value, Value), DumpError> {
    let check = inspect::check_value_chunk(volume.device, &volume.label, instance, id, slot, meta)?;
    let footer = check.footer.as_deref().and_then(json::value_footer).unwrap_or(Value::Null);
    let status = json!({"footer": check.footer_check.to_string(), "digest": check.digest_check.to_string()});
    Ok((footer, status))
}

pub(super) fn dump_value_chunks(
    volume: &View<'_>,
    options: &DumpOptions,
    out: &mut dyn Write,
) -> Result<(), DumpError> {
    let geometry = *volume.geometry();
    let mut instances = Vec::new();
    for instance in 0..geometry.instance_count {
        let (areas, recovery) = recover(volume, instance)?;
        let mut document = Map::new();
        document.insert("instance".into(), json!(instance));
        let recovery = match recovery {
            Ok(recovery) => recovery,
            Err(error) => {
                document.insert("recovery".into(), json!(error.to_string()));
                instances.push(Value::Object(document));
                continue;
            }
        };
        let version = &recovery.version_log.version;
        let context = area_context(&geometry, LogKind::Backup, instance);
        let (pending, failure) = match recovery.pending_value_chunks(&areas.backup, &context) {
            Ok(pending) => (pending, None),
            Err(error) => (BTreeMap::new(), Some(error.to_string())),
        };
        document.insert("recovery".into(), json!(failure.as_deref().unwrap_or("ok")));
        document.insert(
            "next_value_chunk_id".into(),
            if version.has_values { json!(version.next_value_chunk_id) } else { Value::Null },
        );
        let mut listed = Vec::new();
        for (&id, meta) in &version.value_chunks {
            let (footer, status) = checked(volume, instance, id, meta.slot, Some(meta))?;
            let live = version.live_bytes(id);
            let mut entry = match json::value_chunk_meta(meta) {
                Value::Object(map) => map,
                _ => Map::new(),
            };
            entry.insert("live_bytes".into(), json!(live));
            entry.insert("garbage_bytes".into(), json!(u64::from(meta.len_body).saturating_sub(live)));
            entry.insert("footer".into(), footer);
            entry.insert("status".into(), status);
            listed.push(Value::Object(entry));
        }
        let mut named = Vec::new();
        for (&id, &slot) in &pending {
            let (footer, status) = checked(volume, instance, id, slot, None)?;
            named.push(json!({
                "value_chunk_id": id,
                "slot": slot,
                "footer": footer,
                "status": status,
            }));
        }
        document.insert("num_value_chunks".into(), json!(listed.len()));
        document.insert(
            "len_body".into(),
            json!(version.value_chunks.values().map(|chunk| u64::from(chunk.len_body)).sum::<u64>()),
        );
        document.insert(
            "live_bytes".into(),
            json!(version.value_chunks.keys().map(|&id| version.live_bytes(id)).sum::<u64>()),
        );
        document.insert("value_chunks".into(), Value::Array(listed));
        document.insert("pending".into(), Value::Array(named));
        instances.push(Value::Object(document));
    }
    if options.json {
        let mut document = json::document("value-chunks", &device_name(options));
        document.insert("instances".into(), Value::Array(instances));
        return emit(out, Value::Object(document));
    }
    for instance in &instances {
        print_value_chunks(out, instance)?;
    }
    Ok(())
}

fn print_value_chunks(out: &mut dyn Write, instance: &Value) -> Result<(), DumpError> {
    let number = |value: &Value, name: &str| value.get(name).and_then(Value::as_u64).unwrap_or(0);
    let text = |value: &Value, name: &str| value.get(name).and_then(Value::as_str).unwrap_or("").to_string();
    let id = number(instance, "instance");
    let recovery = text(instance, "recovery");
    let Some(chunks) = instance.get("value_chunks").and_then(Value::as_array) else {
        return writeln!(out, "value chunks of instance {id}: recovery fails: {recovery}").map_err(io);
    };
    let pending = instance.get("pending").and_then(Value::as_array).cloned().unwrap_or_default();
    match instance.get("next_value_chunk_id").and_then(Value::as_u64) {
        None if chunks.is_empty() && pending.is_empty() => {
            return writeln!(out, "value chunks of instance {id}: none (the version has no value section)")
                .map_err(io);
        }
        next => writeln!(
            out,
            "value chunks of instance {id}: {} in the version (next id {}), {} bytes of values, {} live, {} garbage; {} named only by the backup log",
            chunks.len(),
            next.map_or("-".to_string(), |next| next.to_string()),
            number(instance, "len_body"),
            number(instance, "live_bytes"),
            number(instance, "len_body").saturating_sub(number(instance, "live_bytes")),
            pending.len()
        )
        .map_err(io)?,
    }
    if recovery != "ok" {
        writeln!(out, "  the backup log's pointers cannot all be read: {recovery}").map_err(io)?;
    }
    let status = |chunk: &Value, name: &str| {
        chunk.get("status").and_then(|status| status.get(name)).and_then(Value::as_str).unwrap_or("?").to_string()
    };
    if !chunks.is_empty() {
        writeln!(
            out,
            "  {:>8}  {:>8}  {:>10}  {:>10}  {:>10}  footer / digest",
            "id", "slot", "len_body", "live", "garbage"
        )
        .map_err(io)?;
    }
    for chunk in chunks {
        writeln!(
            out,
            "  {:>8}  {:>8}  {:>10}  {:>10}  {:>10}  {} / {}",
            number(chunk, "value_chunk_id"),
            number(chunk, "slot"),
            number(chunk, "len_body"),
            number(chunk, "live_bytes"),
            number(chunk, "garbage_bytes"),
            status(chunk, "footer"),
            status(chunk, "digest")
        )
        .map_err(io)?;
    }
    for chunk in &pending {
        let len_body = chunk.get("footer").and_then(|footer| footer.get("len_body")).and_then(Value::as_u64);
        writeln!(
            out,
            "  {:>8}  {:>8}  {:>10}  {:>10}  {:>10}  {} / {}  (pending: named only by the backup log)",
            number(chunk, "value_chunk_id"),
            number(chunk, "slot"),
            len_body.map_or("?".to_string(), |len| len.to_string()),
            "-",
            "-",
            status(chunk, "footer"),
            status(chunk, "digest")
        )
        .map_err(io)?;
    }
    Ok(())
}
