//! `lds dump`: print any structure of a volume, human-readable or as JSON (schema
//! `lds-dump/1`, docs/dump-json.md). Dump opens the volume read-only and never writes. What
//! it shows is read and checked by `lds_volume::inspect`; these modules only render it, one
//! per view: the labels and the whole volume here, the logs (`logs`), the slots (`slots`), a
//! chunk (`chunk`), the tree (`tree`) and the value chunks (`values`).

mod chunk;
mod logs;
mod slots;
mod tree;
mod values;

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use lds_format::algorithms::instance::InstanceRecovery;
use lds_format::algorithms::recovery::VersionLogError;
use lds_format::geometry::{Geometry, LogKind};
use lds_format::label::{Label, LabelChoice, LabelPair, FEATURE_INCOMPAT_VALUE_CHUNKS};
use lds_volume::inspect::{self, ChunkError, RetainedLog, SlotsError};
use lds_volume::{volume::choose_label, ReadAt};
use lds_volume::{DeviceError, VolumeError};
use serde_json::{json, Map, Value};

use crate::json;
use crate::json_stream::JsonStream;

/// Why dump could not show what was asked; each names the device, and the instance or chunk.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DumpError {
    /// The volume cannot be opened (no usable label, cut short, in use, ...).
    #[error("{0}")]
    Volume(#[from] VolumeError),
    /// A read failed.
    #[error("{0}")]
    Device(#[from] DeviceError),
    /// Writing the output failed.
    #[error("{0}")]
    Output(#[from] std::io::Error),
    /// A JSON document could not be made.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// Neither label copy is usable.
    #[error("{device}: no usable label")]
    NoLabel {
        /// The device.
        device: String,
    },
    /// The instance asked for is not one of the volume's.
    #[error("{device}: instance {instance} does not exist (the volume has {count})")]
    NoInstance {
        /// The device.
        device: String,
        /// The instance asked for.
        instance: u32,
        /// The volume's instances.
        count: u32,
    },
    /// The instance's version log does not recover.
    #[error("{device}: instance {instance}: {source}")]
    Recovery {
        /// The device.
        device: String,
        /// The instance.
        instance: u32,
        /// Why.
        source: VersionLogError,
    },
    /// The chunk cannot be read (`hint` says where to look instead).
    #[error("{device}: {source}{hint}")]
    Chunk {
        /// The device.
        device: String,
        /// Why.
        source: ChunkError,
        /// Where to look instead, or nothing.
        hint: &'static str,
    },
    /// The slots cannot be listed.
    #[error("{0}")]
    Slots(#[from] SlotsError),
}

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
        Err(error) => Err(error.into()),
    };
    exit_code(flushed(result, out), err)
}

/// Bytes of output gathered before a write: dump writes a line (or less) at a time, and a
/// terminal's or pipe's stdout would otherwise take a system call per line.
const OUTPUT_BUFFER_LEN: usize = 64 << 10;

/// `result`, or the failure to write out what `out` still holds.
fn flushed(result: Result<(), DumpError>, mut out: std::io::BufWriter<&mut dyn Write>) -> Result<(), DumpError> {
    let flush = out.flush().map_err(io);
    result.and(flush)
}

/// `dump label` of a volume larger than its device: both copies, and the mismatch.
fn truncated_label(
    options: &DumpOptions,
    volume_len: u64,
    device_len: u64,
    out: &mut dyn Write,
) -> Result<(), DumpError> {
    let device = lds_volume::Members::open(&options.path, lds_volume::OpenMode::ReadOnlyLocked, options.wait)?;
    let labels = lds_volume::read_labels(&device)?;
    let (choice, label) = labels.choose().map_err(|_| DumpError::NoLabel { device: device_name(options) })?;
    let (choice, label) = (choice, label.clone());
    let mismatch = format!(
        "the label says the volume is {volume_len} bytes but the device has {device_len}: {} bytes are missing (the media was cut short; lds salvage reads what remains)",
        volume_len - device_len
    );
    if options.json {
        let mut buffer = Vec::new();
        dump_label(&View { device: &device, labels, label, choice }, options, &mut buffer)?;
        let mut document: Value = serde_json::from_slice(&buffer)?;
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
        .map_err(DumpError::from)
        .and_then(|(labels, choice, label)| dump(&View { device, labels, label, choice }, options, &mut out));
    exit_code(flushed(result, out), err)
}

fn exit_code(result: Result<(), DumpError>, err: &mut dyn Write) -> i32 {
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

fn emit(out: &mut dyn Write, value: Value) -> Result<(), DumpError> {
    let text = serde_json::to_string_pretty(&value)?;
    Ok(writeln!(out, "{text}")?)
}

fn dump(volume: &View<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), DumpError> {
    let instance_count = volume.geometry().instance_count;
    if options.instance >= instance_count {
        return Err(DumpError::NoInstance {
            device: device_name(options),
            instance: options.instance,
            count: instance_count,
        });
    }
    match &options.what {
        DumpWhat::Label => dump_label(volume, options, out),
        DumpWhat::Volume => dump_volume(volume, options, out),
        DumpWhat::VersionLog => logs::dump_version_log(volume, options, out),
        DumpWhat::BackupLog => logs::dump_backup_log(volume, options, out),
        DumpWhat::Slots => slots::dump_slots(volume, options, out),
        DumpWhat::Chunk(chunk_id) => chunk::dump_chunk(volume, options, *chunk_id, false, out),
        DumpWhat::ChunkResolved(chunk_id) => chunk::dump_chunk(volume, options, *chunk_id, true, out),
        DumpWhat::Tree => tree::dump_tree(volume, options, out),
        DumpWhat::ValueChunks => values::dump_value_chunks(volume, options, out),
    }
}

fn io(error: std::io::Error) -> DumpError {
    DumpError::Output(error)
}

fn dump_label(volume: &View<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), DumpError> {
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
    crate::render::print_layout(out, &label.geometry).map_err(io)?;
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

fn recover(
    volume: &View<'_>,
    instance: u32,
) -> Result<(inspect::InstanceAreas, Result<InstanceRecovery, VersionLogError>), DumpError> {
    Ok(inspect::recover(volume.device, volume.geometry(), instance)?)
}

/// The backup log the recovered version of an instance keeps for its log chunks, on a volume
/// with feature `log_tables`; `None` on other volumes (whose documents stay what lds-dump/1
/// always gave) or when the version log cannot be recovered.
fn retained_of(volume: &View<'_>, recovery: &Result<InstanceRecovery, VersionLogError>) -> Option<RetainedLog> {
    let recovery = recovery.as_ref().ok().filter(|_| volume.label.has_log_tables())?;
    Some(RetainedLog::of(&recovery.version_log.version, volume.geometry().len_backup_log))
}

/// `ofs_retention_start`, `lsn_retention_start`, `retained_bytes` and `num_log_chunks`, added
/// to `map`.
fn insert_retained(map: &mut Map<String, Value>, retained: &RetainedLog) {
    map.insert("ofs_retention_start".into(), json!(retained.start.offset));
    map.insert("lsn_retention_start".into(), json!(retained.start.lsn));
    map.insert("retained_bytes".into(), json!(retained.bytes));
    map.insert("num_log_chunks".into(), json!(retained.log_chunks));
}

/// The kept backup log in one line, for people.
fn describe_retained(retained: &RetainedLog) -> String {
    format!(
        "retention start {} (lsn {}): {} bytes of the backup log retained for {} log chunks",
        retained.start.offset, retained.start.lsn, retained.bytes, retained.log_chunks
    )
}

fn dump_volume(volume: &View<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), DumpError> {
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
        let retained = retained_of(volume, &recovery);
        let version = inspect::walk_log(&areas.version, &geometry, LogKind::Version, instance, &recovery);
        let backup = inspect::walk_log(&areas.backup, &geometry, LogKind::Backup, instance, &recovery);
        stream.begin_object(None).map_err(io)?;
        stream.value(Some("instance"), &json!(instance)).map_err(io)?;
        logs::stream_walk(&mut stream, "version_log", &version, LogKind::Version, retained.as_ref()).map_err(io)?;
        logs::stream_walk(&mut stream, "backup_log", &backup, LogKind::Backup, retained.as_ref()).map_err(io)?;
        // What recovery says of the backup log, on a volume with feature `log_tables` only:
        // an annotation (a `status` key), like the liveness of each object.
        if volume.label.has_log_tables() {
            stream.value(Some("status"), &instance_status(&recovery, retained.as_ref())).map_err(io)?;
        }
        stream.end_object().map_err(io)?;
    }
    stream.end_array().map_err(io)?;
    stream.begin_array(Some("slots")).map_err(io)?;
    for slot in 0..geometry.num_slots {
        // A slot no device holds (SPEC.md §4.3) has no footer to read.
        let footers = match volume.label.slot_present(slot) {
            true => inspect::slot_footers(volume.device, volume.geometry(), slot)?,
            false => inspect::SlotFooters::default(),
        };
        let mut entry = json!({"slot": slot, "footer": footers.chunk.as_ref().map_or(Value::Null, json::footer)});
        // Only on a slot holding a value chunk (format 1.4), so that the JSON of other
        // volumes stays what lds-dump/1 always gave.
        let value_footer = footers.value.as_deref().and_then(json::value_footer);
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
fn dump_volume_text(volume: &View<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), DumpError> {
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
/// backup log kept for log chunks (§8.9).
fn instance_status(recovery: &Result<InstanceRecovery, VersionLogError>, retained: Option<&RetainedLog>) -> Value {
    let mut status = Map::new();
    match (recovery, retained) {
        (Ok(_), Some(retained)) => {
            status.insert("recovery".into(), json!("ok"));
            status.insert("ofs_backup_start".into(), json!(retained.backup_start.offset));
            status.insert("lsn_backup_start".into(), json!(retained.backup_start.lsn));
            insert_retained(&mut status, retained);
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
