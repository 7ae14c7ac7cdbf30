//! `lds dump`: print any structure of a volume, human-readable or as JSON (schema
//! `lds-dump/1`, docs/dump-json.md). Dump opens the volume read-only and never writes.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;

use lds_engine::device::DeviceError;
use lds_engine::inspect::{read_labels, InspectError, Inspector, ReadAt};
use lds_format::chunk::{unpack_seq_kind, Footer, SubChunkView, FOOTER_LEN};
use lds_format::error::hex;
use lds_format::image::area_context;
use lds_format::label::{Geometry, Label, LabelChoice, LabelPair, LogKind};
use lds_format::log::{AreaContext, ObjectHeader, ObjectType, HEADER_LEN};
use lds_format::recovery::{
    online_map, physical_walk, read_valid_object, recover_backup_log, recover_version_log, BackupLogState,
    VersionLogState,
};
use lds_format::version::ChunkMeta;
use serde_json::{json, Map, Value};

use crate::json;

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
    /// The recovered levels and chunks.
    Tree,
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
}

/// Runs dump; returns the exit code (0 success, 1 the volume cannot be read as asked).
pub fn run(options: &DumpOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let result = Inspector::open(&options.path)
        .map_err(|error| error.to_string())
        .and_then(|inspector| dump(&Volume::of_inspector(&inspector), options, out));
    exit_code(result, err)
}

/// Runs dump on a volume read through `device` (an image in memory, for the fuzzers) instead
/// of `options.path`, which only names it in messages; returns the exit code as `run` does.
pub fn run_on(device: &dyn ReadAt, options: &DumpOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let result = Volume::open(device, &device_name(options)).and_then(|volume| dump(&volume, options, out));
    exit_code(result, err)
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
struct Volume<'a> {
    device: &'a dyn ReadAt,
    labels: LabelPair,
    label: Label,
    choice: LabelChoice,
}

impl<'a> Volume<'a> {
    fn of_inspector(inspector: &'a Inspector) -> Self {
        Self {
            device: &inspector.device,
            labels: inspector.labels.clone(),
            label: inspector.label.clone(),
            choice: inspector.choice,
        }
    }

    /// Chooses the label as `Inspector::open` does, with the same messages.
    fn open(device: &'a dyn ReadAt, name: &str) -> Result<Self, String> {
        let labels = read_labels(device).map_err(|error| error.to_string())?;
        let (choice, label) = labels.choose().map_err(|choice| {
            InspectError::Label {
                path: name.to_string(),
                choice,
                primary: labels.primary.as_ref().err().cloned().map(Box::new),
                backup: labels.backup.as_ref().err().cloned().map(Box::new),
            }
            .to_string()
        })?;
        let label = label.clone();
        if label.geometry.volume_len > device.len() {
            let truncated = InspectError::Truncated {
                path: name.to_string(),
                volume_len: label.geometry.volume_len,
                device_len: device.len(),
            };
            return Err(truncated.to_string());
        }
        Ok(Self { device, labels, label, choice })
    }

    fn geometry(&self) -> &Geometry {
        &self.label.geometry
    }

    fn area_context(&self, kind: LogKind, instance: u32) -> AreaContext {
        area_context(&self.label.geometry, kind, instance)
    }

    fn read_area(&self, kind: LogKind, instance: u32) -> Result<Vec<u8>, DeviceError> {
        let (offset, len) = self.label.geometry.log_area(kind, instance);
        self.device.read_vec(offset, len)
    }

    fn read_footer(&self, slot: u64) -> Result<Vec<u8>, DeviceError> {
        let geometry = &self.label.geometry;
        let offset = geometry.slot_offset(slot) + geometry.slot_size - FOOTER_LEN as u64;
        self.device.read_vec(offset, FOOTER_LEN as u64)
    }

    fn read_slot(&self, slot: u64) -> Result<Vec<u8>, DeviceError> {
        let geometry = &self.label.geometry;
        self.device.read_vec(geometry.slot_offset(slot), geometry.slot_size)
    }
}

fn device_name(options: &DumpOptions) -> String {
    options.path.display().to_string()
}

fn emit(out: &mut dyn Write, value: Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(&value).map_err(|error| error.to_string())?;
    writeln!(out, "{text}").map_err(|error| error.to_string())
}

fn dump(volume: &Volume<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), String> {
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
        DumpWhat::Chunk(chunk_id) => dump_chunk(volume, options, *chunk_id, out),
        DumpWhat::Tree => dump_tree(volume, options, out),
    }
}

fn io(error: std::io::Error) -> String {
    error.to_string()
}

fn dump_label(volume: &Volume<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), String> {
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
    crate::mkfs::print_layout(out, &label.geometry).map_err(io)
}

/// The JSON and liveness of every object a physical walk finds.
struct WalkedObject {
    offset: u64,
    header: ObjectHeader,
    payload: Value,
    valid: Result<(), String>,
}

fn walk(area: &[u8], start: u64, volume: &Volume<'_>, kind: LogKind, instance: u32) -> Vec<WalkedObject> {
    let context = volume.area_context(kind, instance);
    physical_walk(area, start, u64::from(context.sector_size))
        .into_iter()
        .map(|(offset, header)| {
            let at = offset as usize + HEADER_LEN;
            let bytes = &area[at..at + header.len_payload as usize];
            let device_offset = context.ofs_area + offset + HEADER_LEN as u64;
            let payload = json::payload(header.object_type_code, bytes, device_offset).unwrap_or(Value::Null);
            let valid = read_valid_object(area, offset, &context).map(|_| ()).map_err(|error| error.to_string());
            WalkedObject { offset, header, payload, valid }
        })
        .collect()
}

fn right_start(area: &[u8], left: &[WalkedObject]) -> Option<u64> {
    let first = left.first()?;
    if first.header.object_type_code != ObjectType::WrapLeft.code() || first.offset != 0 {
        return None;
    }
    // SPEC.md §15: `ofs_first_live` is read raw, whether or not the rest of the payload
    // decodes.
    if first.header.len_payload < 16 {
        return None;
    }
    let raw: [u8; 8] = area.get(HEADER_LEN..HEADER_LEN + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(raw)).filter(|&start| start < area.len() as u64)
}

/// The version-log liveness of each offset: live objects, and superseded ones in the chain.
fn version_liveness(state: &Result<VersionLogState, String>) -> (BTreeSet<u64>, BTreeMap<u64, u64>) {
    let mut live = BTreeSet::new();
    let mut superseded = BTreeMap::new();
    if let Ok(state) = state {
        let base_offset = state.base_offset;
        for (index, object) in state.sequence.iter().enumerate() {
            if index >= state.base_index {
                live.insert(object.offset);
            } else {
                superseded.insert(object.offset, base_offset);
            }
        }
    }
    (live, superseded)
}

fn object_json(object: &WalkedObject, status: Value) -> Value {
    let mut map = json::object_header(&object.header);
    map.insert("log_offset".into(), json!(object.offset));
    map.insert("payload".into(), object.payload.clone());
    map.insert("status".into(), status);
    Value::Object(map)
}

fn version_status(
    object: &WalkedObject,
    live: &BTreeSet<u64>,
    superseded: &BTreeMap<u64, u64>,
    right_obsolete: bool,
) -> Value {
    if let Err(reason) = &object.valid {
        return json!({"valid": false, "live": false, "reason": reason});
    }
    if live.contains(&object.offset) {
        return json!({"valid": true, "live": true, "reason": "live"});
    }
    let reason = if let Some(base) = superseded.get(&object.offset) {
        format!("before the live base version (at offset {base})")
    } else if right_obsolete {
        "right portion obsolete: the left portion has a base version".to_string()
    } else {
        format!("not in the recovered chain: stale (lsn {}) from an earlier lap or past the head", object.header.lsn)
    };
    json!({"valid": true, "live": false, "reason": reason})
}

fn backup_status(object: &WalkedObject, live: &BTreeSet<u64>) -> Value {
    if let Err(reason) = &object.valid {
        return json!({"valid": false, "live": false, "reason": reason});
    }
    if live.contains(&object.offset) {
        return json!({"valid": true, "live": true, "reason": "live"});
    }
    json!({"valid": true, "live": false, "reason": format!("not after the backup start point, or past the head (lsn {})", object.header.lsn)})
}

struct InstanceLogs {
    version_area: Vec<u8>,
    backup_area: Vec<u8>,
    version: Result<VersionLogState, String>,
    backup: Option<Result<BackupLogState, String>>,
}

fn recover_instance(volume: &Volume<'_>, instance: u32) -> Result<InstanceLogs, String> {
    let version_area = volume.read_area(LogKind::Version, instance).map_err(|error| error.to_string())?;
    let backup_area = volume.read_area(LogKind::Backup, instance).map_err(|error| error.to_string())?;
    let context = volume.area_context(LogKind::Version, instance);
    let version = recover_version_log(&version_area, &context).map_err(|error| error.to_string());
    let backup = version.as_ref().ok().map(|state| {
        let context = volume.area_context(LogKind::Backup, instance);
        recover_backup_log(
            &backup_area,
            &context,
            state.version.ofs_backup_start,
            state.version.lsn_backup_start,
            state.version.last_sequence,
            state.sn,
        )
        .map_err(|error| error.to_string())
    });
    Ok(InstanceLogs { version_area, backup_area, version, backup })
}

fn backup_live(logs: &InstanceLogs) -> BTreeSet<u64> {
    match &logs.backup {
        Some(Ok(state)) => state.objects.iter().map(|object| object.offset).collect(),
        _ => BTreeSet::new(),
    }
}

fn version_walks(volume: &Volume<'_>, logs: &InstanceLogs, instance: u32) -> (Vec<Value>, Vec<Value>) {
    let (live, superseded) = version_liveness(&logs.version);
    let left = walk(&logs.version_area, 0, volume, LogKind::Version, instance);
    let right = right_start(&logs.version_area, &left)
        .map_or_else(Vec::new, |start| walk(&logs.version_area, start, volume, LogKind::Version, instance));
    let left_has_base = left
        .iter()
        .any(|object| object.header.object_type_code == ObjectType::BaseVersion.code() && object.valid.is_ok());
    let left_json =
        left.iter().map(|object| object_json(object, version_status(object, &live, &superseded, false))).collect();
    let right_json = right
        .iter()
        .map(|object| object_json(object, version_status(object, &live, &superseded, left_has_base)))
        .collect();
    (left_json, right_json)
}

fn backup_walks(volume: &Volume<'_>, logs: &InstanceLogs, instance: u32) -> (Vec<Value>, Vec<Value>) {
    let live = backup_live(logs);
    let left = walk(&logs.backup_area, 0, volume, LogKind::Backup, instance);
    let right = right_start(&logs.backup_area, &left)
        .map_or_else(Vec::new, |start| walk(&logs.backup_area, start, volume, LogKind::Backup, instance));
    let left_json = left.iter().map(|object| object_json(object, backup_status(object, &live))).collect();
    let right_json = right.iter().map(|object| object_json(object, backup_status(object, &live))).collect();
    (left_json, right_json)
}

/// The left walk, then the objects of the right walk not already listed (both walks can reach
/// the same objects when the right portion runs into stale bytes).
fn merge_walks(left: Vec<Value>, right: Vec<Value>) -> Vec<Value> {
    let mut seen: BTreeSet<u64> =
        left.iter().filter_map(|object| object.get("log_offset").and_then(Value::as_u64)).collect();
    let mut merged = left;
    for object in right {
        if object.get("log_offset").and_then(Value::as_u64).is_some_and(|offset| seen.insert(offset)) {
            merged.push(object);
        }
    }
    merged
}

fn footer_of(volume: &Volume<'_>, slot: u64) -> Result<Option<Footer>, String> {
    let bytes = volume.read_footer(slot).map_err(|error| error.to_string())?;
    if !Footer::has_magic(&bytes) {
        return Ok(None);
    }
    let offset = volume.geometry().slot_offset(slot) + volume.geometry().slot_size - bytes.len() as u64;
    Ok(Footer::parse_raw(&bytes, offset).ok())
}

fn dump_volume(volume: &Volume<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), String> {
    let geometry = *volume.geometry();
    let mut instances = Vec::new();
    for instance in 0..geometry.instance_count {
        let logs = recover_instance(volume, instance)?;
        let (version_left, version_right) = version_walks(volume, &logs, instance);
        let (backup_left, backup_right) = backup_walks(volume, &logs, instance);
        instances.push(json!({
            "instance": instance,
            "version_log": {"left": version_left, "right": version_right},
            "backup_log": {"left": backup_left, "right": backup_right},
        }));
    }
    let mut slots = Vec::new();
    for slot in 0..geometry.num_slots {
        let footer = footer_of(volume, slot)?;
        slots.push(json!({"slot": slot, "footer": footer.as_ref().map_or(Value::Null, json::footer)}));
    }
    let mut document = json::document("volume", &device_name(options));
    document.insert(
        "labels".into(),
        json!({
            "primary": volume.labels.primary.as_ref().map_or(Value::Null, json::label),
            "backup": volume.labels.backup.as_ref().map_or(Value::Null, json::label),
        }),
    );
    document.insert("instances".into(), Value::Array(instances));
    document.insert("slots".into(), Value::Array(slots));
    if options.json {
        return emit(out, Value::Object(document));
    }
    // The human form of the whole volume is the sum of the other views.
    for what in [DumpWhat::Label, DumpWhat::VersionLog, DumpWhat::BackupLog, DumpWhat::Slots, DumpWhat::Tree] {
        let mut sub = options.clone();
        sub.what = what;
        for instance in 0..geometry.instance_count {
            sub.instance = instance;
            dump(volume, &sub, out)?;
            writeln!(out).map_err(io)?;
            if matches!(sub.what, DumpWhat::Label | DumpWhat::Slots) {
                break;
            }
        }
    }
    Ok(())
}

fn print_objects(out: &mut dyn Write, title: &str, objects: &[Value]) -> Result<(), String> {
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
    match object_type {
        "base_version" => format!("{} chunks, last_sequence {}", number("num_chunks"), number("last_sequence")),
        "delta_version" => format!(
            "-{} +{} chunks, last_sequence {}, backup start {}",
            number("num_deleted"),
            number("num_added"),
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

fn dump_version_log(volume: &Volume<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), String> {
    let logs = recover_instance(volume, options.instance)?;
    let (left, right) = version_walks(volume, &logs, options.instance);
    let objects = merge_walks(left, right);
    let mut document = json::document("version-log", &device_name(options));
    document.insert("instance".into(), json!(options.instance));
    match &logs.version {
        Ok(state) => {
            document.insert("head".into(), json!(state.head.offset));
            document.insert("next_lsn".into(), json!(state.head.next_lsn));
            document.insert("sn".into(), json!(state.sn));
            document.insert("live_base_version_offset".into(), json!(state.base_offset));
            document.insert("recovery".into(), json!("ok"));
        }
        Err(error) => {
            document.insert("recovery".into(), json!(error));
        }
    }
    document.insert("objects".into(), Value::Array(objects.clone()));
    if options.json {
        return emit(out, Value::Object(document));
    }
    let title =
        format!("version log of instance {} ({} objects by the physical walk)", options.instance, objects.len());
    print_objects(out, &title, &objects)?;
    match &logs.version {
        Ok(state) => writeln!(
            out,
            "recovery: live base version at offset {} (sn {}), {} live objects, head at {} (next lsn {})",
            state.base_offset,
            state.sn,
            state.sequence.len() - state.base_index,
            state.head.offset,
            state.head.next_lsn
        )
        .map_err(io),
        Err(error) => writeln!(out, "recovery fails: {error}").map_err(io),
    }
}

fn dump_backup_log(volume: &Volume<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), String> {
    let logs = recover_instance(volume, options.instance)?;
    let (left, right) = backup_walks(volume, &logs, options.instance);
    let objects = merge_walks(left, right);
    let mut document = json::document("backup-log", &device_name(options));
    document.insert("instance".into(), json!(options.instance));
    if let Ok(version) = &logs.version {
        document.insert("ofs_backup_start".into(), json!(version.version.ofs_backup_start));
        document.insert("lsn_backup_start".into(), json!(version.version.lsn_backup_start));
    }
    match &logs.backup {
        Some(Ok(state)) => {
            document.insert("head".into(), json!(state.head.offset));
            document.insert("next_lsn".into(), json!(state.head.next_lsn));
            document.insert("start_found".into(), json!(state.start_found));
            document.insert("replayed_batches".into(), json!(state.batches.len()));
            document.insert("recovery".into(), json!("ok"));
        }
        Some(Err(error)) => {
            document.insert("recovery".into(), json!(error));
        }
        None => {
            document.insert("recovery".into(), json!("the version log cannot be recovered"));
        }
    }
    document.insert("objects".into(), Value::Array(objects.clone()));
    if options.json {
        return emit(out, Value::Object(document));
    }
    let title = format!("backup log of instance {} ({} objects by the physical walk)", options.instance, objects.len());
    print_objects(out, &title, &objects)?;
    match &logs.backup {
        Some(Ok(state)) if state.start_found => writeln!(
            out,
            "recovery: {} batches to replay, head at {} (next lsn {})",
            state.batches.len(),
            state.head.offset,
            state.head.next_lsn
        )
        .map_err(io),
        Some(Ok(state)) => writeln!(
            out,
            "recovery: the reset object at {} (lsn {}) was never written: nothing to replay",
            state.head.offset, state.head.next_lsn
        )
        .map_err(io),
        Some(Err(error)) => writeln!(out, "recovery fails: {error}").map_err(io),
        None => writeln!(out, "recovery: the version log cannot be recovered").map_err(io),
    }
}

fn all_versions(volume: &Volume<'_>) -> Result<Vec<(u32, VersionLogState)>, String> {
    let geometry = volume.geometry();
    let mut states = Vec::new();
    for instance in 0..geometry.instance_count {
        let area = volume.read_area(LogKind::Version, instance).map_err(|error| error.to_string())?;
        let context = volume.area_context(LogKind::Version, instance);
        match recover_version_log(&area, &context) {
            Ok(state) => states.push((instance, state)),
            Err(error) => return Err(format!("instance {instance}: {error}")),
        }
    }
    Ok(states)
}

fn dump_slots(volume: &Volume<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), String> {
    let geometry = *volume.geometry();
    let states = all_versions(volume)?;
    let map = online_map(
        geometry.num_slots,
        states.iter().map(|(instance, state)| (*instance, &state.version, &state.unfinished_compactions)),
    )
    .map_err(|conflict| {
        format!(
            "slot {} is referenced by instances {} and {}",
            conflict.slot, conflict.instances.0, conflict.instances.1
        )
    })?;
    let mut slots = Vec::new();
    let mut counts = BTreeMap::new();
    for slot in 0..geometry.num_slots {
        let footer = footer_of(volume, slot)?;
        let state = match (map[slot as usize], &footer) {
            (true, _) => "live",
            (false, Some(_)) => "stale",
            (false, None) => "free",
        };
        *counts.entry(state).or_insert(0u64) += 1;
        let mut entry = Map::new();
        entry.insert("slot".into(), json!(slot));
        entry.insert("state".into(), json!(state));
        if let Some(footer) = footer {
            entry.insert("chunk_id".into(), json!(footer.chunk_id));
            entry.insert("instance".into(), json!(footer.instance));
            entry.insert("level".into(), json!(footer.level));
            entry.insert("sub_chunk_index".into(), json!(footer.sub_chunk_index));
        }
        slots.push(Value::Object(entry));
    }
    if options.json {
        let mut document = json::document("slots", &device_name(options));
        document.insert("num_slots".into(), json!(geometry.num_slots));
        document.insert("slots".into(), Value::Array(slots));
        return emit(out, Value::Object(document));
    }
    writeln!(
        out,
        "slots: {} in all, {} live, {} stale (a chunk no live version references), {} free",
        geometry.num_slots,
        counts.get("live").unwrap_or(&0),
        counts.get("stale").unwrap_or(&0),
        counts.get("free").unwrap_or(&0)
    )
    .map_err(io)?;
    // One character a slot, 64 a line: L live, s stale, . free.
    for (row, chunk) in slots.chunks(64).enumerate() {
        let line: String = chunk
            .iter()
            .map(|slot| match slot.get("state").and_then(Value::as_str) {
                Some("live") => 'L',
                Some("stale") => 's',
                _ => '.',
            })
            .collect();
        writeln!(out, "  {:>8}  {line}", row * 64).map_err(io)?;
    }
    Ok(())
}

fn find_meta(states: &[(u32, VersionLogState)], chunk_id: u64) -> Option<(u32, ChunkMeta)> {
    states
        .iter()
        .find_map(|(instance, state)| state.version.chunks.get(&chunk_id).map(|meta| (*instance, meta.clone())))
}

fn dump_chunk(volume: &Volume<'_>, options: &DumpOptions, chunk_id: u64, out: &mut dyn Write) -> Result<(), String> {
    let geometry = *volume.geometry();
    if chunk_id >= geometry.num_slots {
        return Err(format!(
            "{}: chunk {chunk_id} is beyond the slot area ({} slots)",
            device_name(options),
            geometry.num_slots
        ));
    }
    let states = all_versions(volume).unwrap_or_default();
    let meta = find_meta(&states, chunk_id);
    let slots: Vec<u64> = meta.as_ref().map_or_else(|| vec![chunk_id], |(_, meta)| meta.slots().collect());
    let mut sub_chunks = Vec::new();
    let mut text = Vec::new();
    for slot in slots {
        let image = volume.read_slot(slot).map_err(|error| error.to_string())?;
        let offset = geometry.slot_offset(slot);
        let view = SubChunkView::open(&image, offset)
            .map_err(|error| format!("{}: slot {slot}: {error}", device_name(options)))?;
        let digest = match view.verify_digest(offset) {
            Ok(()) => "ok".to_string(),
            Err(error) => error.to_string(),
        };
        let index: Vec<Value> = view
            .index
            .iter()
            .map(|entry| {
                let (sequence, kind) = unpack_seq_kind(entry.last_seq_kind).map_or((0, "?"), |(sequence, kind)| (sequence, kind.name()));
                json!({"ofs_block": entry.ofs_block, "len_block": entry.len_block, "last_seq": sequence, "last_kind": kind, "last_key": hex(&entry.last_key)})
            })
            .collect();
        let mut sub = Map::new();
        sub.insert("slot".into(), json!(slot));
        sub.insert("footer".into(), json::footer(&view.footer));
        sub.insert("index".into(), Value::Array(index));
        sub.insert("filter".into(), json!({"num_probes": view.filter.num_probes, "num_bits": view.filter.num_bits()}));
        sub.insert("status".into(), json!({"digest": digest}));
        text.push(format!(
            "slot {slot}: sub-chunk {} of {}, level {}, {} entries in {} blocks, sequences {}..{}, body {} bytes, tail {} bytes, digest {digest}",
            view.footer.sub_chunk_index,
            view.footer.num_sub_chunks,
            view.footer.level,
            view.footer.num_entries,
            view.footer.num_blocks,
            view.footer.smallest_seq,
            view.footer.largest_seq,
            view.footer.len_body,
            geometry.slot_size - u64::from(view.footer.ofs_index)
        ));
        if options.entries {
            let entries =
                view.entries(offset).map_err(|error| format!("{}: slot {slot}: {error}", device_name(options)))?;
            let mut listed = Vec::new();
            for entry in entries {
                listed.push(json!({"key": hex(entry.key), "seq": entry.sequence, "kind": entry.kind.name(), "value": hex(entry.value)}));
                text.push(format!(
                    "  {} @{} {} {}",
                    printable(entry.key),
                    entry.sequence,
                    entry.kind.name(),
                    printable(entry.value)
                ));
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
            "chunk {chunk_id}: instance {instance}, level {}{}, keys {}..{}, {} entries, {} bytes",
            meta.level,
            if meta.is_odd() { " (odd)" } else { "" },
            printable(&meta.smallest_key),
            printable(&meta.largest_key),
            meta.num_entries,
            meta.len_data
        ),
        None => writeln!(out, "chunk {chunk_id}: not referenced by any live version (stale slot)"),
    }
    .map_err(io)?;
    for line in text {
        writeln!(out, "{line}").map_err(io)?;
    }
    Ok(())
}

/// Bytes as text when printable ASCII, else hex with a `0x` prefix.
fn printable(bytes: &[u8]) -> String {
    if !bytes.is_empty() && bytes.iter().all(|&byte| (0x20..0x7f).contains(&byte)) {
        String::from_utf8_lossy(bytes).into_owned()
    } else {
        format!("0x{}", hex(bytes))
    }
}

fn dump_tree(volume: &Volume<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), String> {
    let area = volume.read_area(LogKind::Version, options.instance).map_err(|error| error.to_string())?;
    let context = volume.area_context(LogKind::Version, options.instance);
    let state = recover_version_log(&area, &context)
        .map_err(|error| format!("{}: instance {}: {error}", device_name(options), options.instance))?;
    let version = &state.version;
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
        document.insert("levels".into(), Value::Array(levels));
        document.insert("unfinished_compaction".into(), unfinished);
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
                "    chunk {:>6}{}  {} .. {}  {} entries  seq {}..{}",
                chunk.chunk_id,
                if chunk.is_odd() { " odd" } else { "    " },
                printable(&chunk.smallest_key),
                printable(&chunk.largest_key),
                chunk.num_entries,
                chunk.smallest_seq,
                chunk.largest_seq
            )
            .map_err(io)?;
        }
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
