//! `lds dump`: print any structure of a volume, human-readable or as JSON (schema
//! `lds-dump/1`, docs/dump-json.md). Dump opens the volume read-only and never writes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use lds_format::algorithms::instance::{BackupRecovery, InstanceRecovery};
use lds_format::algorithms::recovery::VersionLogError;
use lds_format::chunk::footer::{Footer, FOOTER_LEN};
use lds_format::entry::{unpack_seq_kind, EntryKind};
use lds_format::error::hex;
use lds_format::geometry::{Geometry, LogKind};
use lds_format::label::{Label, LabelChoice, LabelPair, FEATURE_INCOMPAT_VALUE_CHUNKS};
use lds_format::log::{area_context, AreaContext, LogPosition};
use lds_format::logref::{LogBatch, LogRef};
use lds_format::value::{ValueFooter, ValuePointer, VALUE_FOOTER_LEN};
use lds_format::version::Version;
use lds_volume::inspect::{self, Liveness, WalkedObject};
use lds_volume::{volume::choose_label, ReadAt};
use serde_json::{json, Map, Value};

use crate::json;
use crate::json_stream::JsonStream;

/// What to dump.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DumpWhat {
    /// Both labels.
    Label,
    /// Every structure (the inspection walks of SPEC.md §15).
    Volume,
    /// Every version log object with its liveness.
    VersionLog,
    /// Every backup log object with its liveness.
    BackupLog,
    /// The allocation map.
    Slots,
    /// One chunk.
    Chunk(u64),
    /// One chunk with its entries, each log reference (entry kind 3, format 1.6) followed into
    /// the backup log of the chunk's instance and shown with the value it names, or why it does
    /// not resolve (SPEC.md §8.9): `lds dump IMAGE chunk ID --resolve`.
    ChunkResolved(u64),
    /// The recovered levels and chunks.
    Tree,
    /// The value chunks of every instance (SPEC.md §8.6), with their footers checked.
    ValueChunks,
}

/// Options of `lds dump`.
#[derive(Debug, Clone)]
pub struct DumpOptions {
    /// Device or image.
    pub path: PathBuf,
    /// What.
    pub what: DumpWhat,
    /// Instance for per-instance dumps.
    pub instance: u32,
    /// JSON output.
    pub json: bool,
    /// Include entries (chunk dump).
    pub entries: bool,
    /// How long to wait for a writer to release the volume.
    pub wait: Duration,
}

/// Runs dump; returns the exit code (0 success, 1 the volume cannot be read as asked). The
/// volume is opened read-only under a shared lock (any number of readers at once).
pub fn run(options: &DumpOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let mut out = std::io::BufWriter::with_capacity(OUTPUT_BUFFER_LEN, out);
    let result = match lds_volume::Volume::open(&options.path, options.wait) {
        Ok(volume) => {
            let view = View {
                device: &volume.device,
                labels: volume.labels.clone(),
                label: volume.label.clone(),
                choice: volume.choice,
            };
            dump(&view, options, &mut out)
        }
        // Media cut short (SPEC.md §4: the label gives more bytes than the device has): the
        // labels are still shown, with the mismatch (fsck reports it as 106).
        Err(lds_volume::VolumeError::Truncated { volume_len, device_len, .. }) if options.what == DumpWhat::Label => {
            truncated_label(options, volume_len, device_len, &mut out)
        }
        Err(error) => Err(error.to_string()),
    };
    exit_code(flushed(result, out), err)
}

/// Bytes of output gathered before a write: dump writes a line (or less) at a time, and a
/// terminal's or pipe's stdout would otherwise take a system call per line.
const OUTPUT_BUFFER_LEN: usize = 64 << 10;

/// `result`, or the failure to write out what `out` still holds.
fn flushed(result: Result<(), String>, mut out: std::io::BufWriter<&mut dyn Write>) -> Result<(), String> {
    let flush = out.flush().map_err(io);
    result.and(flush)
}

/// `dump label` of a volume larger than its device: both copies, and the mismatch.
fn truncated_label(options: &DumpOptions, volume_len: u64, device_len: u64, out: &mut dyn Write) -> Result<(), String> {
    let device = lds_volume::Members::open(&options.path, lds_volume::OpenMode::ReadOnlyLocked, options.wait)
        .map_err(|error| error.to_string())?;
    let labels = lds_volume::read_labels(&device).map_err(|error| error.to_string())?;
    let (choice, label) = labels.choose().map_err(|_| format!("{}: no usable label", device_name(options)))?;
    let (choice, label) = (choice, label.clone());
    let mismatch = format!(
        "the label says the volume is {volume_len} bytes but the device has {device_len}: {} bytes are missing (the media was cut short; lds salvage reads what remains)",
        volume_len - device_len
    );
    if options.json {
        let mut buffer = Vec::new();
        dump_label(&View { device: &device, labels, label, choice }, options, &mut buffer)?;
        let mut document: Value = serde_json::from_slice(&buffer).map_err(|error| error.to_string())?;
        if let Some(map) = document.as_object_mut() {
            map.insert("device_len".into(), json!(device_len));
            map.insert("truncated".into(), json!(mismatch));
        }
        return emit(out, document);
    }
    writeln!(out, "truncated        {mismatch}").map_err(io)?;
    dump_label(&View { device: &device, labels, label, choice }, options, out)
}

/// Runs dump on a volume read through `device` (an image in memory, for the fuzzers) instead
/// of `options.path`, which only names it in messages; returns the exit code as `run` does.
pub fn run_on(device: &dyn ReadAt, options: &DumpOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let mut out = std::io::BufWriter::with_capacity(OUTPUT_BUFFER_LEN, out);
    let result = choose_label(device, &device_name(options))
        .map_err(|error| error.to_string())
        .and_then(|(labels, choice, label)| dump(&View { device, labels, label, choice }, options, &mut out));
    exit_code(flushed(result, out), err)
}

fn exit_code(result: Result<(), String>, err: &mut dyn Write) -> i32 {
    match result {
        Ok(()) => 0,
        Err(message) => {
            let _ = writeln!(err, "lds dump: {message}");
            1
        }
    }
}

/// A volume opened for dumping: its device, both label copies and the chosen label.
struct View<'a> {
    device: &'a dyn ReadAt,
    labels: LabelPair,
    label: Label,
    choice: LabelChoice,
}

impl View<'_> {
    fn geometry(&self) -> &Geometry {
        &self.label.geometry
    }
}

fn device_name(options: &DumpOptions) -> String {
    options.path.display().to_string()
}

fn emit(out: &mut dyn Write, value: Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(&value).map_err(|error| error.to_string())?;
    writeln!(out, "{text}").map_err(|error| error.to_string())
}

fn dump(volume: &View<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), String> {
    let instance_count = volume.geometry().instance_count;
    if options.instance >= instance_count {
        return Err(format!(
            "{}: instance {} does not exist (the volume has {instance_count})",
            device_name(options),
            options.instance
        ));
    }
    match &options.what {
        DumpWhat::Label => dump_label(volume, options, out),
        DumpWhat::Volume => dump_volume(volume, options, out),
        DumpWhat::VersionLog => dump_version_log(volume, options, out),
        DumpWhat::BackupLog => dump_backup_log(volume, options, out),
        DumpWhat::Slots => dump_slots(volume, options, out),
        DumpWhat::Chunk(chunk_id) => dump_chunk(volume, options, *chunk_id, false, out),
        DumpWhat::ChunkResolved(chunk_id) => dump_chunk(volume, options, *chunk_id, true, out),
        DumpWhat::Tree => dump_tree(volume, options, out),
        DumpWhat::ValueChunks => dump_value_chunks(volume, options, out),
    }
}

fn io(error: std::io::Error) -> String {
    error.to_string()
}

fn dump_label(volume: &View<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), String> {
    let chosen = match volume.choice {
        LabelChoice::Both => "both",
        LabelChoice::Primary => "primary",
        LabelChoice::Backup => "backup",
    };
    let status = |copy: &Result<Label, lds_format::FormatError>| match copy {
        Ok(_) => "valid".to_string(),
        Err(error) => error.to_string(),
    };
    if options.json {
        let mut document = json::document("label", &device_name(options));
        document.insert("chosen".into(), json!(chosen));
        document.insert("primary".into(), volume.labels.primary.as_ref().map_or(Value::Null, json::label));
        document.insert("backup".into(), volume.labels.backup.as_ref().map_or(Value::Null, json::label));
        document.insert(
            "status".into(),
            json!({"primary": status(&volume.labels.primary), "backup": status(&volume.labels.backup)}),
        );
        return emit(out, Value::Object(document));
    }
    let label = &volume.label;
    writeln!(
        out,
        "label copies     primary: {}; backup: {}; using: {chosen}",
        status(&volume.labels.primary),
        status(&volume.labels.backup)
    )
    .map_err(io)?;
    writeln!(out, "format version   {}.{}", lds_format::label::VERSION_MAJOR, label.version_minor).map_err(io)?;
    writeln!(out, "volume name      {:?}", label.volume_name).map_err(io)?;
    writeln!(out, "generation       {}", label.generation).map_err(io)?;
    writeln!(
        out,
        "features         compat {:#x}, ro_compat {:#x}, incompat {:#x}",
        label.features_compat, label.features_ro_compat, label.features_incompat
    )
    .map_err(io)?;
    crate::mkfs::print_layout(out, &label.geometry).map_err(io)?;
    if let Some(table) = &label.devices {
        writeln!(out, "devices          {} (this label's: {})", table.devices.len(), json::uuid(&table.device_uuid))
            .map_err(io)?;
        for (index, entry) in table.devices.iter().enumerate() {
            writeln!(
                out,
                "  device {index}       {}  slots {} to {} ({}), {} bytes",
                json::uuid(&entry.device_uuid),
                entry.first_slot,
                entry.end_slot() - 1,
                entry.num_slots,
                entry.len_device
            )
            .map_err(io)?;
        }
    }
    Ok(())
}

/// An object of a walk as JSON. `retention` is the backup log region the live version retains
/// for its log chunks (format 1.6, only on volumes with feature `log_tables`): in the backup
/// log, `status` then says of each object whether it is `retained` (SPEC.md §8.9).
fn object_json(object: &WalkedObject<'_>, kind: LogKind, retention: Option<&Retention>) -> Value {
    let mut map = json::object_header(&object.header);
    map.insert("log_offset".into(), json!(object.offset));
    let payload =
        json::payload(object.header.object_type_code, object.payload, object.payload_offset).unwrap_or(Value::Null);
    map.insert("payload".into(), payload);
    let valid = !matches!(object.liveness, Liveness::Invalid(_));
    let live = object.liveness == Liveness::Live;
    // Recovery does not replay a retained object (its entries are in chunks), but log
    // references read it: it is not garbage.
    let retained = match (retention, kind) {
        (Some(retention), LogKind::Backup) => Some(valid && !live && retention.holds(object.header.lsn)),
        _ => None,
    };
    let reason = match (retained, retention) {
        (Some(true), Some(retention)) => format!(
            "retained for log chunks (from the retention start, lsn {}, to the backup start, lsn {})",
            retention.start.lsn, retention.backup_start.lsn
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
fn stream_walk(
    stream: &mut JsonStream<'_>,
    key: &str,
    walk: &inspect::LogWalk<'_>,
    kind: LogKind,
    retention: Option<&Retention>,
) -> std::io::Result<()> {
    stream.begin_object(Some(key))?;
    stream.begin_array(Some("left"))?;
    for object in walk.left() {
        stream.value(None, &object_json(&object, kind, retention))?;
    }
    stream.end_array()?;
    stream.begin_array(Some("right"))?;
    for object in walk.right() {
        stream.value(None, &object_json(&object, kind, retention))?;
    }
    stream.end_array()?;
    stream.end_object()
}

fn recover(
    volume: &View<'_>,
    instance: u32,
) -> Result<(inspect::InstanceAreas, Result<InstanceRecovery, VersionLogError>), String> {
    inspect::recover(volume.device, volume.geometry(), instance).map_err(|error| error.to_string())
}

/// The backup log region a version retains for its log chunks (SPEC.md §8.9, format 1.6):
/// from the retention start (the oldest log start of its log chunks, or the backup start) to
/// the backup start. Recovery does not replay these objects; log references read them, and
/// writers do not overwrite them.
struct Retention {
    /// The retention start.
    start: LogPosition,
    /// The backup start.
    backup_start: LogPosition,
    /// Bytes of the ring from the retention start to the backup start.
    bytes: u64,
    /// The version's log chunks.
    log_chunks: usize,
}

impl Retention {
    /// The retention of `version`, in a backup log area of `len_backup_log` bytes.
    fn of(version: &Version, len_backup_log: u64) -> Self {
        Self {
            start: version.retention_start(),
            backup_start: version.backup_start(),
            bytes: version.retained_bytes(len_backup_log),
            log_chunks: version.chunks.values().filter(|chunk| chunk.is_log_chunk()).count(),
        }
    }

    /// The retention of a recovered instance on a volume with feature `log_tables`; `None`
    /// on other volumes (whose documents stay what lds-dump/1 always gave) or when the
    /// version log cannot be recovered.
    fn of_recovery(volume: &View<'_>, recovery: &Result<InstanceRecovery, VersionLogError>) -> Option<Self> {
        let recovery = recovery.as_ref().ok().filter(|_| volume.label.has_log_tables())?;
        Some(Self::of(&recovery.version_log.version, volume.geometry().len_backup_log))
    }

    /// True when the backup log object with `lsn` lies in the retained region.
    fn holds(&self, lsn: u64) -> bool {
        self.start.lsn <= lsn && lsn < self.backup_start.lsn
    }

    /// `ofs_retention_start`, `lsn_retention_start`, `retained_bytes` and `num_log_chunks`,
    /// added to `map`.
    fn insert_into(&self, map: &mut Map<String, Value>) {
        map.insert("ofs_retention_start".into(), json!(self.start.offset));
        map.insert("lsn_retention_start".into(), json!(self.start.lsn));
        map.insert("retained_bytes".into(), json!(self.bytes));
        map.insert("num_log_chunks".into(), json!(self.log_chunks));
    }

    /// One line for people.
    fn describe(&self) -> String {
        format!(
            "retention start {} (lsn {}): {} bytes of the backup log retained for {} log chunks",
            self.start.offset, self.start.lsn, self.bytes, self.log_chunks
        )
    }
}

fn dump_volume(volume: &View<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), String> {
    let geometry = *volume.geometry();
    if !options.json {
        return dump_volume_text(volume, options, out);
    }
    // Written as it is made: the walks list every object of every log area, and a log may
    // hold hundreds of thousands (docs/tools.md, "Memory").
    let mut stream = JsonStream::new(out);
    stream.begin_object(None).map_err(io)?;
    stream.members(&json::document("volume", &device_name(options))).map_err(io)?;
    let labels = json!({
        "primary": volume.labels.primary.as_ref().map_or(Value::Null, json::label),
        "backup": volume.labels.backup.as_ref().map_or(Value::Null, json::label),
    });
    stream.value(Some("labels"), &labels).map_err(io)?;
    stream.begin_array(Some("instances")).map_err(io)?;
    for instance in 0..geometry.instance_count {
        let (areas, recovery) = recover(volume, instance)?;
        let retention = Retention::of_recovery(volume, &recovery);
        let version = inspect::walk_log(&areas.version, &geometry, LogKind::Version, instance, &recovery);
        let backup = inspect::walk_log(&areas.backup, &geometry, LogKind::Backup, instance, &recovery);
        stream.begin_object(None).map_err(io)?;
        stream.value(Some("instance"), &json!(instance)).map_err(io)?;
        stream_walk(&mut stream, "version_log", &version, LogKind::Version, retention.as_ref()).map_err(io)?;
        stream_walk(&mut stream, "backup_log", &backup, LogKind::Backup, retention.as_ref()).map_err(io)?;
        // What recovery says of the backup log, on a volume with feature `log_tables` only:
        // an annotation (a `status` key), like the liveness of each object.
        if volume.label.has_log_tables() {
            stream.value(Some("status"), &instance_status(&recovery, retention.as_ref())).map_err(io)?;
        }
        stream.end_object().map_err(io)?;
    }
    stream.end_array().map_err(io)?;
    stream.begin_array(Some("slots")).map_err(io)?;
    for slot in 0..geometry.num_slots {
        // A slot no device holds (SPEC.md §4.3) has no footer to read.
        let (footer, value_footer) = match volume.label.slot_present(slot) {
            true => slot_footers(volume, slot)?,
            false => (None, None),
        };
        let mut entry = json!({"slot": slot, "footer": footer.as_ref().map_or(Value::Null, json::footer)});
        // Only on a slot holding a value chunk (format 1.4), so that the JSON of other
        // volumes stays what lds-dump/1 always gave.
        if let (Some(value_footer), Value::Object(map)) = (value_footer, &mut entry) {
            map.insert("value_footer".into(), value_footer);
        }
        stream.value(None, &entry).map_err(io)?;
    }
    stream.end_array().map_err(io)?;
    stream.end_object().map_err(io)?;
    stream.finish().map_err(io)
}

/// The human form of the whole volume: the sum of the other views (the value chunks on a
/// volume with feature `value_chunks`).
fn dump_volume_text(volume: &View<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), String> {
    let geometry = *volume.geometry();
    let mut views = vec![DumpWhat::Label, DumpWhat::VersionLog, DumpWhat::BackupLog, DumpWhat::Slots, DumpWhat::Tree];
    if volume.label.features_incompat & FEATURE_INCOMPAT_VALUE_CHUNKS != 0 {
        views.push(DumpWhat::ValueChunks);
    }
    for what in views {
        let mut sub = options.clone();
        sub.what = what;
        for instance in 0..geometry.instance_count {
            sub.instance = instance;
            dump(volume, &sub, out)?;
            writeln!(out).map_err(io)?;
            if matches!(sub.what, DumpWhat::Label | DumpWhat::Slots | DumpWhat::ValueChunks) {
                break;
            }
        }
    }
    Ok(())
}

/// The `status` of an instance of the volume view on a volume with feature `log_tables`:
/// `recovery` (`"ok"` or why the version log cannot be recovered), the backup start, and the
/// retention of §8.9.
fn instance_status(recovery: &Result<InstanceRecovery, VersionLogError>, retention: Option<&Retention>) -> Value {
    let mut status = Map::new();
    match (recovery, retention) {
        (Ok(_), Some(retention)) => {
            status.insert("recovery".into(), json!("ok"));
            status.insert("ofs_backup_start".into(), json!(retention.backup_start.offset));
            status.insert("lsn_backup_start".into(), json!(retention.backup_start.lsn));
            retention.insert_into(&mut status);
        }
        (Ok(_), None) => {
            status.insert("recovery".into(), json!("ok"));
        }
        (Err(error), _) => {
            status.insert("recovery".into(), json!(error.to_string()));
        }
    }
    Value::Object(status)
}

/// The footer at the end of `slot`, read whatever its checksum says (SPEC.md §15): a chunk
/// footer (magic "LDSCHUNK"), or the fields of a value chunk footer (magic "LDSVALUE").
fn slot_footers(volume: &View<'_>, slot: u64) -> Result<(Option<Footer>, Option<Value>), String> {
    let geometry = volume.geometry();
    let offset = geometry.slot_offset(slot) + geometry.slot_size - FOOTER_LEN as u64;
    let bytes = volume.device.read_vec(offset, FOOTER_LEN as u64).map_err(|error| error.to_string())?;
    if Footer::has_magic(&bytes) {
        return Ok((Footer::parse_raw(&bytes, offset).ok(), None));
    }
    Ok((None, json::value_footer(&bytes)))
}

/// Lists the objects of a walk for people, one line each, under `title`; `objects` gives each
/// object's JSON (made one at a time).
fn print_objects(out: &mut dyn Write, title: &str, objects: impl Iterator<Item = Value>) -> Result<(), String> {
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
    retention: Option<&Retention>,
) -> Result<(), String> {
    let mut stream = JsonStream::new(out);
    stream.begin_object(None).map_err(io)?;
    stream.members(document).map_err(io)?;
    stream.begin_array(Some("objects")).map_err(io)?;
    for object in walk.merged() {
        stream.value(None, &object_json(&object, kind, retention)).map_err(io)?;
    }
    stream.end_array().map_err(io)?;
    stream.end_object().map_err(io)?;
    stream.finish().map_err(io)
}

fn dump_version_log(volume: &View<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), String> {
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

fn dump_backup_log(volume: &View<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), String> {
    let (areas, recovery) = recover(volume, options.instance)?;
    let retention = Retention::of_recovery(volume, &recovery);
    let walk = inspect::walk_log(&areas.backup, volume.geometry(), LogKind::Backup, options.instance, &recovery);
    let mut document = json::document("backup-log", &device_name(options));
    document.insert("instance".into(), json!(options.instance));
    let failure = match &recovery {
        Ok(recovery) => {
            let version = &recovery.version_log.version;
            document.insert("ofs_backup_start".into(), json!(version.ofs_backup_start));
            document.insert("lsn_backup_start".into(), json!(version.lsn_backup_start));
            if let Some(retention) = &retention {
                retention.insert_into(&mut document);
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
        return stream_merged(out, &document, &walk, LogKind::Backup, retention.as_ref());
    }
    let title =
        format!("backup log of instance {} ({} objects by the physical walk)", options.instance, walk.merged_len());
    let objects = walk.merged().map(|object| object_json(&object, LogKind::Backup, retention.as_ref()));
    print_objects(out, &title, objects)?;
    if let Some(retention) = &retention {
        writeln!(out, "{}", retention.describe()).map_err(io)?;
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

/// The slots the value pointers of each instance's replayed batches name for value chunks
/// its version does not list (SPEC.md §8.6, §9.4: in use, named only by a backup log).
fn pending_value_slots(volume: &View<'_>) -> Result<BTreeSet<u64>, String> {
    let geometry = *volume.geometry();
    let mut slots = BTreeSet::new();
    for instance in 0..geometry.instance_count {
        let (areas, recovery) = recover(volume, instance)?;
        if let Ok(recovery) = recovery {
            let context = area_context(&geometry, LogKind::Backup, instance);
            // A batch whose pointer does not decode ends nothing here: fsck reports it.
            if let Ok(pending) = recovery.pending_value_chunks(&areas.backup, &context) {
                slots.extend(pending.into_values());
            }
        }
    }
    Ok(slots)
}

fn dump_slots(volume: &View<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), String> {
    let geometry = *volume.geometry();
    let states = inspect::slots(volume.device, &volume.label).map_err(|error| error.to_string())?;
    let mut slots = Vec::new();
    let mut counts = BTreeMap::new();
    let mut pending: Option<BTreeSet<u64>> = None;
    let mut value_slots = BTreeSet::new();
    for (slot, (state, footer)) in states.into_iter().enumerate() {
        let mut name = state.name();
        let mut entry = Map::new();
        entry.insert("slot".into(), json!(slot));
        if let Some(footer) = footer {
            entry.insert("chunk_id".into(), json!(footer.chunk_id));
            entry.insert("instance".into(), json!(footer.instance));
            entry.insert("level".into(), json!(footer.level));
            entry.insert("sub_chunk_index".into(), json!(footer.sub_chunk_index));
        } else if state != inspect::SlotState::Absent {
            // A value chunk (format 1.4, SPEC.md §8.6): live when a version lists it or a
            // replayed batch points to it (§9.4), else stale.
            if let (_, Some(value_footer)) = slot_footers(volume, slot as u64)? {
                value_slots.insert(slot);
                if state == inspect::SlotState::Free {
                    if pending.is_none() {
                        pending = Some(pending_value_slots(volume)?);
                    }
                    let named = pending.as_ref().is_some_and(|pending| pending.contains(&(slot as u64)));
                    name = if named { "live" } else { "stale" };
                }
                entry.insert("value_chunk_id".into(), value_footer["value_chunk_id"].clone());
                entry.insert("instance".into(), value_footer["instance"].clone());
            }
        }
        *counts.entry(name).or_insert(0u64) += 1;
        let mut ordered = Map::new();
        ordered.insert("slot".into(), json!(slot));
        ordered.insert("state".into(), json!(name));
        ordered.extend(entry.into_iter().filter(|(key, _)| key != "slot"));
        slots.push(Value::Object(ordered));
    }
    if options.json {
        let mut document = json::document("slots", &device_name(options));
        document.insert("num_slots".into(), json!(geometry.num_slots));
        document.insert("slots".into(), Value::Array(slots));
        return emit(out, Value::Object(document));
    }
    writeln!(
        out,
        "slots: {} in all, {} live, {} stale (a chunk no live version references), {} free{}{}",
        geometry.num_slots,
        counts.get("live").unwrap_or(&0),
        counts.get("stale").unwrap_or(&0),
        counts.get("free").unwrap_or(&0),
        counts.get("absent").map_or(String::new(), |absent| format!(", {absent} in no device (-)")),
        match value_slots.len() {
            0 => String::new(),
            count => format!("; {count} hold value chunks (V live, v stale)"),
        }
    )
    .map_err(io)?;
    // One character a slot, 64 a line: L live, s stale, . free, - in no device; V and v for
    // value chunks.
    for (row, chunk) in slots.chunks(64).enumerate() {
        let line: String = chunk
            .iter()
            .enumerate()
            .map(|(index, slot)| {
                let value = value_slots.contains(&(row * 64 + index));
                match (slot.get("state").and_then(Value::as_str), value) {
                    (Some("live"), false) => 'L',
                    (Some("live"), true) => 'V',
                    (Some("stale"), false) => 's',
                    (Some("stale"), true) => 'v',
                    (Some("absent"), _) => '-',
                    _ => '.',
                }
            })
            .collect();
        writeln!(out, "  {:>8}  {line}", row * 64).map_err(io)?;
    }
    Ok(())
}

/// Dumps chunk `chunk_id`; with `resolve`, its entries with each log reference followed
/// (SPEC.md §8.9).
fn dump_chunk(
    volume: &View<'_>,
    options: &DumpOptions,
    chunk_id: u64,
    resolve: bool,
    out: &mut dyn Write,
) -> Result<(), String> {
    let geometry = *volume.geometry();
    let chunk = match inspect::chunk(volume.device, &geometry, chunk_id, options.entries || resolve) {
        Ok(chunk) => chunk,
        Err(error) => {
            // A value chunk's slot is not a chunk: say where to look.
            let value_chunk = volume.label.slot_present(chunk_id)
                && slot_footers(volume, chunk_id).is_ok_and(|(_, value_footer)| value_footer.is_some());
            let hint = match value_chunk {
                true => " (the slot holds a value chunk: see lds dump IMAGE value-chunks)",
                false => "",
            };
            return Err(format!("{}: {error}{hint}", device_name(options)));
        }
    };
    let meta = chunk.meta;
    // The instance whose backup log the references name: the one whose version lists the
    // chunk, else (a stale slot) the one its footer names.
    let owner =
        meta.as_ref().map(|(instance, _)| *instance).or(chunk.sub_chunks.first().map(|sub| sub.footer.instance));
    let mut resolver = match (resolve, owner) {
        (true, Some(instance)) => Some(LogResolver::new(volume, instance)),
        _ => None,
    };
    let mut sub_chunks = Vec::new();
    let mut text = Vec::new();
    for sub_chunk in chunk.sub_chunks {
        let slot = sub_chunk.slot;
        let footer = &sub_chunk.footer;
        let digest = match &sub_chunk.digest {
            Ok(()) => "ok".to_string(),
            Err(error) => error.to_string(),
        };
        let index: Vec<Value> = sub_chunk
            .index
            .iter()
            .map(|entry| {
                let (sequence, kind) = unpack_seq_kind(entry.last_seq_kind).map_or((0, "?"), |(sequence, kind)| (sequence, kind.name()));
                json!({"ofs_block": entry.ofs_block, "len_block": entry.len_block, "last_seq": sequence, "last_kind": kind, "last_key": hex(&entry.last_key)})
            })
            .collect();
        let mut sub = Map::new();
        sub.insert("slot".into(), json!(slot));
        sub.insert("footer".into(), json::footer(footer));
        sub.insert("index".into(), Value::Array(index));
        sub.insert(
            "filter".into(),
            json!({"num_probes": sub_chunk.filter.num_probes, "num_bits": sub_chunk.filter.num_bits()}),
        );
        let sketch = match &sub_chunk.sketch {
            Ok(None) => Value::Null,
            Ok(Some(sketch)) => {
                json!({"precision": sketch.precision(), "distinct_keys": sketch.estimate().round() as u64})
            }
            Err(error) => json!({"error": error.to_string()}),
        };
        let sketch_text = match &sub_chunk.sketch {
            Ok(None) => String::new(),
            Ok(Some(sketch)) => format!(", key sketch: about {:.0} distinct keys", sketch.estimate()),
            Err(error) => format!(", key sketch: {error}"),
        };
        sub.insert("sketch".into(), sketch);
        sub.insert("status".into(), json!({"digest": digest}));
        text.push(format!(
            "slot {slot}: sub-chunk {} of {}, level {}, {} entries in {} blocks, sequences {}..{}, body {} bytes, tail {} bytes, digest {digest}{sketch_text}",
            footer.sub_chunk_index,
            footer.num_sub_chunks,
            footer.level,
            footer.num_entries,
            footer.num_blocks,
            footer.smallest_seq,
            footer.largest_seq,
            footer.len_body,
            geometry.slot_size - u64::from(footer.ofs_index)
        ));
        if let Some(entries) = &sub_chunk.entries {
            let mut listed = Vec::new();
            for entry in entries {
                let mut listed_entry = json::block_entry(&entry.key, entry.sequence, entry.kind, &entry.value);
                let mut value = match entry.kind {
                    EntryKind::Pointer => describe_pointer(&entry.value),
                    EntryKind::LogRef => describe_log_ref(&entry.value),
                    _ => printable(&entry.value),
                };
                if let (Some(resolver), EntryKind::LogRef, Value::Object(map)) =
                    (resolver.as_mut(), entry.kind, &mut listed_entry)
                {
                    let resolved = resolver.resolve(&entry.key, entry.sequence, &entry.value);
                    value.push_str(&match &resolved {
                        Ok(found) => format!(" = {}", printable(found)),
                        Err(error) => format!(": does not resolve: {error}"),
                    });
                    map.insert("resolved".into(), resolved.as_ref().map_or(Value::Null, |found| json!(hex(found))));
                    let status = resolved.as_ref().map_or_else(|error| error.clone(), |_| "ok".to_string());
                    map.insert("status".into(), json!({ "log_ref": status }));
                }
                listed.push(listed_entry);
                text.push(format!("  {} @{} {} {value}", printable(&entry.key), entry.sequence, entry.kind.name()));
            }
            sub.insert("entries".into(), Value::Array(listed));
        }
        sub_chunks.push(Value::Object(sub));
    }
    if options.json {
        let mut document = json::document("chunk", &device_name(options));
        document.insert("chunk_id".into(), json!(chunk_id));
        document.insert("meta".into(), meta.as_ref().map_or(Value::Null, |(_, meta)| json::chunk_meta(meta)));
        document.insert("sub_chunks".into(), Value::Array(sub_chunks));
        return emit(out, Value::Object(document));
    }
    match &meta {
        Some((instance, meta)) => writeln!(
            out,
            "chunk {chunk_id}: instance {instance}, level {}{}, keys {}..{}, {} entries, {} bytes{}",
            meta.level,
            if meta.is_odd() { " (odd)" } else { "" },
            printable(&meta.smallest_key),
            printable(&meta.largest_key),
            meta.num_entries,
            meta.len_data,
            describe_log_start(meta)
        ),
        None => writeln!(out, "chunk {chunk_id}: not referenced by any live version (stale slot)"),
    }
    .map_err(io)?;
    for line in text {
        writeln!(out, "{line}").map_err(io)?;
    }
    Ok(())
}

/// A pointer entry's value for people: the value's length and where its extents are.
fn describe_pointer(value: &[u8]) -> String {
    match ValuePointer::decode(value, 0) {
        Ok(pointer) => {
            let extents: Vec<String> = pointer
                .extents
                .iter()
                .map(|extent| {
                    format!(
                        "value chunk {} (slot {}) bytes {}..{}",
                        extent.value_chunk_id,
                        extent.slot,
                        extent.offset,
                        u64::from(extent.offset) + u64::from(extent.len)
                    )
                })
                .collect();
            format!("-> {} bytes, crc32c {:#010x}, in {}", pointer.len_value, pointer.value_crc32c, extents.join(", "))
        }
        Err(error) => format!("-> a pointer that does not decode ({error})"),
    }
}

/// A log reference entry's value for people: where the put it names is in the backup log.
fn describe_log_ref(value: &[u8]) -> String {
    match LogRef::decode(value, 0) {
        Ok(reference) => format!(
            "-> {} bytes: entry {} of the write batch at offset {} of the backup log (lsn {})",
            reference.len_value, reference.entry_index, reference.ofs_object, reference.lsn
        ),
        Err(error) => format!("-> a log reference that does not decode ({error})"),
    }
}

/// `", log chunk (flag log_refs), log start ..."` for a log chunk (SPEC.md §6.4, §8.9), else
/// nothing.
fn describe_log_start(meta: &lds_format::version::meta::ChunkMeta) -> String {
    match (meta.is_log_chunk(), meta.log_start) {
        (true, Some(start)) => format!(
            ", log chunk (flag log_refs): log start at offset {} of the backup log (lsn {})",
            start.offset, start.lsn
        ),
        (true, None) => ", log chunk (flag log_refs)".to_string(),
        (false, _) => String::new(),
    }
}

/// Follows the log references of one instance's chunks (SPEC.md §8.9): reads the backup log
/// area once, and checks and decodes each write batch once however many references name it.
struct LogResolver {
    /// The area of the instance's backup log.
    context: AreaContext,
    /// Its bytes, or why they cannot be read.
    area: Result<Vec<u8>, String>,
    /// The batches read so far, by offset, or why the object there is not one.
    batches: HashMap<u64, Result<LogBatch, String>>,
}

impl LogResolver {
    /// A resolver for the references of `instance`'s chunks.
    fn new(volume: &View<'_>, instance: u32) -> Self {
        let geometry = volume.geometry();
        // A stale slot's footer may name any instance: where the area of one the volume does
        // not have would be is not computed (it may not fit in 64 bits).
        let context = area_context(geometry, LogKind::Backup, instance.min(geometry.instance_count.saturating_sub(1)));
        let area = if instance >= geometry.instance_count {
            Err(format!("the chunk names instance {instance}, which the volume does not have"))
        } else {
            volume.device.read_vec(context.ofs_area, context.len_area).map_err(|error| error.to_string())
        };
        Self { context, area, batches: HashMap::new() }
    }

    /// The value the log reference `value` of the entry (`key`, `sequence`) names, checked by
    /// SPEC.md §8.9; `Err` says why it does not resolve, naming the object's offset in the
    /// area and on the device.
    fn resolve(&mut self, key: &[u8], sequence: u64, value: &[u8]) -> Result<Vec<u8>, String> {
        let reference = LogRef::decode(value, 0).map_err(|error| error.to_string())?;
        let area = self.area.as_ref().map_err(Clone::clone)?;
        let context = &self.context;
        let at = format!(
            "the backup log object at offset {} of instance {} (device offset {})",
            reference.ofs_object,
            context.instance,
            context.ofs_area.saturating_add(reference.ofs_object)
        );
        // The object's bytes: the area from the reference's offset on (empty past its end,
        // which the reader reports as a truncated object at that offset).
        let object = usize::try_from(reference.ofs_object).ok().and_then(|start| area.get(start..)).unwrap_or(&[]);
        let batch = self.batches.entry(reference.ofs_object).or_insert_with(|| {
            LogBatch::read(object, reference.ofs_object, context).map_err(|error| error.to_string())
        });
        let batch = batch.as_ref().map_err(|error| format!("{at}: {error}"))?;
        batch
            .value(object, &reference, context, key, sequence)
            .map(<[u8]>::to_vec)
            .map_err(|error| format!("{at}: {error}"))
    }
}

/// Bytes as text when printable ASCII, else hex with a `0x` prefix.
fn printable(bytes: &[u8]) -> String {
    if !bytes.is_empty() && bytes.iter().all(|&byte| (0x20..0x7f).contains(&byte)) {
        String::from_utf8_lossy(bytes).into_owned()
    } else {
        format!("0x{}", hex(bytes))
    }
}

fn dump_tree(volume: &View<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), String> {
    let (_, recovery) = recover(volume, options.instance)?;
    let recovery =
        recovery.map_err(|error| format!("{}: instance {}: {error}", device_name(options), options.instance))?;
    let state = &recovery.version_log;
    let version = &state.version;
    // Only on a volume with feature `log_tables` (format 1.6), so that the documents of other
    // volumes stay what lds-dump/1 always gave.
    let retention = volume.label.has_log_tables().then(|| Retention::of(version, volume.geometry().len_backup_log));
    let levels: Vec<Value> = (0..version.num_levels as u8)
        .map(|level| {
            let chunks = version.level(level);
            json!({
                "level": level,
                "num_chunks": chunks.len(),
                "len_data": chunks.iter().map(|chunk| chunk.len_data).sum::<u64>(),
                "chunks": chunks.iter().map(|chunk| json::chunk_meta(chunk)).collect::<Vec<_>>(),
            })
        })
        .collect();
    let unfinished = state.unfinished_compactions.values().next_back().map_or(Value::Null, |journal| {
        json!({
            "compaction_id": journal.compaction_id,
            "resume_key": hex(&journal.resume_key),
            "inputs": journal.inputs,
            "outputs": journal.outputs.iter().map(|output| output.chunk_id).collect::<Vec<_>>(),
            "cleaned": journal.cleaned,
        })
    });
    if options.json {
        let mut document = json::document("tree", &device_name(options));
        document.insert("instance".into(), json!(options.instance));
        document.insert("sn".into(), json!(state.sn));
        document.insert("last_sequence".into(), json!(version.last_sequence));
        document.insert("ofs_backup_start".into(), json!(version.ofs_backup_start));
        document.insert("lsn_backup_start".into(), json!(version.lsn_backup_start));
        if let Some(retention) = &retention {
            retention.insert_into(&mut document);
        }
        document.insert("levels".into(), Value::Array(levels));
        document.insert("unfinished_compaction".into(), unfinished);
        // Only with a value section (feature `value_chunks`, format 1.4).
        if version.has_values {
            document.insert("values".into(), tree_values(version));
        }
        return emit(out, Value::Object(document));
    }
    writeln!(
        out,
        "tree of instance {}: sn {}, last sequence {}, backup start {} (lsn {}), {} chunks",
        options.instance,
        state.sn,
        version.last_sequence,
        version.ofs_backup_start,
        version.lsn_backup_start,
        version.chunks.len()
    )
    .map_err(io)?;
    if let Some(retention) = &retention {
        writeln!(out, "  {}", retention.describe()).map_err(io)?;
    }
    for level in 0..version.num_levels as u8 {
        let chunks = version.level(level);
        if chunks.is_empty() {
            continue;
        }
        let bytes: u64 = chunks.iter().map(|chunk| chunk.len_data).sum();
        writeln!(out, "  level {level}: {} chunks, {} bytes", chunks.len(), bytes).map_err(io)?;
        for chunk in chunks {
            writeln!(
                out,
                "    chunk {:>6}{}  {} .. {}  {} entries  seq {}..{}{}",
                chunk.chunk_id,
                if chunk.is_odd() { " odd" } else { "    " },
                printable(&chunk.smallest_key),
                printable(&chunk.largest_key),
                chunk.num_entries,
                chunk.smallest_seq,
                chunk.largest_seq,
                chunk.log_start.filter(|_| chunk.is_log_chunk()).map_or(String::new(), |start| format!(
                    "  log chunk, log start {} (lsn {})",
                    start.offset, start.lsn
                ))
            )
            .map_err(io)?;
        }
    }
    if version.has_values {
        let len_body: u64 = version.value_chunks.values().map(|chunk| u64::from(chunk.len_body)).sum();
        let live: u64 = version.value_chunks.keys().map(|&id| version.live_bytes(id)).sum();
        writeln!(
            out,
            "  value chunks: {} (next id {}), {len_body} bytes of values, {live} live",
            version.value_chunks.len(),
            version.next_value_chunk_id
        )
        .map_err(io)?;
    }
    if let Some(journal) = state.unfinished_compactions.values().next_back() {
        writeln!(
            out,
            "  unfinished compaction {}: level {} -> {}, resume after {}, {} outputs persisted, {} inputs cleaned",
            journal.compaction_id,
            journal.source_level,
            journal.target_level,
            printable(&journal.resume_key),
            journal.outputs.len(),
            journal.cleaned.len()
        )
        .map_err(io)?;
    }
    Ok(())
}

/// The value chunks of a recovered version with their live bytes, for `what: "tree"`.
fn tree_values(version: &Version) -> Value {
    let chunks: Vec<Value> = version
        .value_chunks
        .values()
        .map(|chunk| {
            let mut value = json::value_chunk_meta(chunk);
            if let Value::Object(map) = &mut value {
                map.insert("live_bytes".into(), json!(version.live_bytes(chunk.value_chunk_id)));
            }
            value
        })
        .collect();
    json!({
        "next_value_chunk_id": version.next_value_chunk_id,
        "num_value_chunks": chunks.len(),
        "value_chunks": chunks,
    })
}

/// What checking one value chunk found: its footer's fields, raw (null without the magic),
/// and whether the footer and the digest check.
struct ValueCheck {
    footer: Value,
    footer_status: String,
    digest_status: String,
}

/// Reads value chunk `id` of `instance` at `slot` and checks it (SPEC.md §8.6): the footer
/// decodes (magic, checksum, version, reserved bytes, flags, `slot_size`, `len_body`) and names
/// the id, the instance and the volume, and agrees with `meta` (`len_body`, `digest`) when the
/// version lists it; then the digest over the body.
fn check_value_chunk(
    volume: &View<'_>,
    instance: u32,
    id: u64,
    slot: u64,
    meta: Option<&lds_format::value::ValueChunkMeta>,
) -> Result<ValueCheck, String> {
    let geometry = *volume.geometry();
    if !volume.label.slot_present(slot) {
        let why = format!("slot {slot} is not on any device of the volume (num_slots {})", geometry.num_slots);
        return Ok(ValueCheck { footer: Value::Null, footer_status: why, digest_status: "not checked".into() });
    }
    let ofs_slot = geometry.slot_offset(slot);
    let ofs_footer = ofs_slot + geometry.slot_size - VALUE_FOOTER_LEN as u64;
    let bytes = volume.device.read_vec(ofs_footer, VALUE_FOOTER_LEN as u64).map_err(|error| error.to_string())?;
    let raw = json::value_footer(&bytes).unwrap_or(Value::Null);
    let footer = match ValueFooter::decode(&bytes, ofs_footer, geometry.slot_size) {
        Ok(footer) => footer,
        Err(error) => {
            let digest_status = "not checked: the footer does not decode".to_string();
            return Ok(ValueCheck { footer: raw, footer_status: error.to_string(), digest_status });
        }
    };
    let problems: Vec<String> =
        footer.mismatches(&geometry.volume_uuid, instance, id, meta).iter().map(ToString::to_string).collect();
    let footer_status = match problems.is_empty() {
        true => "ok".to_string(),
        false => format!("value chunk footer at offset {ofs_footer}: {}", problems.join("; ")),
    };
    let body = volume.device.read_vec(ofs_slot, u64::from(footer.len_body)).map_err(|error| error.to_string())?;
    let digest_status = match footer.verify_digest(&body, ofs_slot) {
        Ok(()) => "ok".to_string(),
        Err(error) => error.to_string(),
    };
    Ok(ValueCheck { footer: raw, footer_status, digest_status })
}

fn dump_value_chunks(volume: &View<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), String> {
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
            let check = check_value_chunk(volume, instance, id, meta.slot, Some(meta))?;
            let live = version.live_bytes(id);
            let mut entry = match json::value_chunk_meta(meta) {
                Value::Object(map) => map,
                _ => Map::new(),
            };
            entry.insert("live_bytes".into(), json!(live));
            entry.insert("garbage_bytes".into(), json!(u64::from(meta.len_body).saturating_sub(live)));
            entry.insert("footer".into(), check.footer);
            entry.insert("status".into(), json!({"footer": check.footer_status, "digest": check.digest_status}));
            listed.push(Value::Object(entry));
        }
        let mut named = Vec::new();
        for (&id, &slot) in &pending {
            let check = check_value_chunk(volume, instance, id, slot, None)?;
            named.push(json!({
                "value_chunk_id": id,
                "slot": slot,
                "footer": check.footer,
                "status": {"footer": check.footer_status, "digest": check.digest_status},
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

fn print_value_chunks(out: &mut dyn Write, instance: &Value) -> Result<(), String> {
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
