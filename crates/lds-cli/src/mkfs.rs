//! `lds mkfs`: format a block device or image file (SPEC.md §3, §4), then read back and
//! check what was written.

use std::io::Write;
use std::path::{Path, PathBuf};

use lds_format::algorithms::image::format_writes;
use lds_format::algorithms::recovery::recover_version_log;
use lds_format::geometry::{plan_layout, Geometry, LayoutRequest, LogKind};
use lds_format::label::{Label, VOLUME_NAME_LEN};
use lds_volume::volume::Volume;
use lds_volume::{Device, DeviceKind, OpenMode};

use crate::json;
use crate::units::format_size;

/// Options of `lds mkfs`; also its command-line arguments.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct MkfsOptions {
    /// Block device or image file.
    pub path: PathBuf,
    /// Volume size, with units (64MiB, 1G); required to create an image file.
    #[arg(long, value_parser = crate::units::parse_size)]
    pub size: Option<u64>,
    /// Slot size (default 4MiB, scaled down for small volumes).
    #[arg(long, value_parser = crate::units::parse_size)]
    pub slot_size: Option<u64>,
    /// Version log size per instance (default 64MiB, scaled down).
    #[arg(long, value_parser = crate::units::parse_size)]
    pub version_log_size: Option<u64>,
    /// Backup log size per instance (default 16MiB, scaled down).
    #[arg(long, value_parser = crate::units::parse_size)]
    pub backup_log_size: Option<u64>,
    /// Sector size: the atomic write unit (default 4096).
    #[arg(long, value_parser = parse_sector_size)]
    pub sector_size: Option<u32>,
    /// Number of LSM-tree instances sharing the slot area (default 1).
    #[arg(long)]
    pub instances: Option<u32>,
    /// A name for the volume (at most 64 bytes).
    #[arg(long, default_value = "")]
    pub name: String,
    /// Use this uuid instead of a random one.
    #[arg(long, value_parser = parse_uuid)]
    pub uuid: Option<[u8; 16]>,
    /// Print the layout and usable capacity; write nothing.
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// Format even over an existing LDS volume or another signature.
    #[arg(short, long)]
    pub force: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Format version: 1.7 (the default: blocks hold compact entries, SPEC.md §8.2, chunks
    /// record an xxh3-128 digest, §8.3, and write batches a sync watermark, §7.1); 1.3 (the
    /// same with fixed-size entry headers: readable by builds from 1.3 on); 1.1 or 1.2 (a blake3
    /// digest: readable by builds from 1.1 on; 1.2 adds nothing a new volume has) or 1.0
    /// (readable by every build); 1.4 is 1.3 with `--value-chunks`, 1.5 with
    /// `--chunk-sketches`, 1.6 with `--log-tables`. Those three options also go with 1.7.
    #[arg(long, default_value = "1.7", value_parser = ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7"])]
    pub format_version: String,
    /// Allow value chunks (format 1.4, feature `value_chunks`, SPEC.md §8.6): the engine's
    /// key-value separation (`--technique kv-separation`) keeps large values there, up to 1 GiB
    /// each. Builds before 1.4 refuse such a volume. `--format-version 1.4` implies it.
    #[arg(long)]
    pub value_chunks: bool,
    /// Key sketches on level-0 chunks (format 1.5, feature `chunk_sketches`, SPEC.md §8.7),
    /// which the engine's deferred level-0 merges (`--technique triad-disk`) estimate overlap
    /// with. Builds before 1.5 refuse such a volume. `--format-version 1.5` implies it.
    #[arg(long)]
    pub chunk_sketches: bool,
    /// Log chunks (format 1.6, feature `log_tables`, SPEC.md §8.9): level-0 chunks whose puts
    /// name their batches in the backup log instead of holding the values, which the engine's
    /// `--technique triad-log` writes (a larger `--backup-log-size` lets it keep more). Builds
    /// before 1.6 refuse such a volume. `--format-version 1.6` implies it.
    #[arg(long)]
    pub log_tables: bool,
}

fn parse_sector_size(text: &str) -> Result<u32, String> {
    let value = crate::units::parse_size(text)?;
    u32::try_from(value).map_err(|_| format!("'{text}' is too large for a sector size"))
}

/// Parses a uuid in 8-4-4-4-12 or plain hex form.
pub fn parse_uuid(text: &str) -> Result<[u8; 16], String> {
    let digits: String = text.chars().filter(|&c| c != '-').collect();
    if digits.len() != 32 || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("'{text}' is not a uuid (32 hex digits)"));
    }
    let mut uuid = [0u8; 16];
    for (index, byte) in uuid.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&digits[2 * index..2 * index + 2], 16).map_err(|error| error.to_string())?;
    }
    Ok(uuid)
}

/// A random (version 4) uuid from /dev/urandom.
pub fn random_uuid() -> Result<[u8; 16], String> {
    use std::io::Read;
    let mut uuid = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut file| file.read_exact(&mut uuid))
        .map_err(|error| format!("cannot read /dev/urandom for a uuid: {error}"))?;
    uuid[6] = (uuid[6] & 0x0f) | 0x40;
    uuid[8] = (uuid[8] & 0x3f) | 0x80;
    Ok(uuid)
}

/// Prints the layout table.
pub fn print_layout(out: &mut dyn Write, geometry: &Geometry) -> std::io::Result<()> {
    let instances = u64::from(geometry.instance_count);
    writeln!(out, "volume uuid      {}", json::uuid(&geometry.volume_uuid))?;
    writeln!(out, "volume size      {} ({} bytes)", format_size(geometry.volume_len), geometry.volume_len)?;
    writeln!(out, "sector size      {}", geometry.sector_size)?;
    writeln!(out, "instances        {}", geometry.instance_count)?;
    writeln!(out, "area             offset        length")?;
    writeln!(out, "primary label    {:<13} {}", 0, geometry.sector_size)?;
    writeln!(
        out,
        "version logs     {:<13} {} x {}",
        geometry.ofs_version_log,
        instances,
        format_size(geometry.len_version_log)
    )?;
    writeln!(
        out,
        "backup logs      {:<13} {} x {}",
        geometry.ofs_backup_log,
        instances,
        format_size(geometry.len_backup_log)
    )?;
    writeln!(
        out,
        "slot area        {:<13} {} slots x {}",
        geometry.ofs_slot_area,
        geometry.num_slots,
        format_size(geometry.slot_size)
    )?;
    writeln!(out, "backup label     {:<13} {}", geometry.ofs_backup_label(), geometry.sector_size)?;
    writeln!(
        out,
        "usable capacity  {} ({:.1}% of the volume)",
        format_size(geometry.usable_capacity()),
        100.0 * geometry.usable_capacity() as f64 / geometry.volume_len as f64
    )
}

/// Runs mkfs; returns the exit code (0 success, 1 error).
pub fn run(options: &MkfsOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match mkfs(options, out) {
        Ok(()) => 0,
        Err(message) => {
            let _ = writeln!(err, "lds mkfs: {message}");
            1
        }
    }
}

fn mkfs(options: &MkfsOptions, out: &mut dyn Write) -> Result<(), String> {
    let path = options.path.as_path();
    if options.name.len() > VOLUME_NAME_LEN {
        return Err(format!("the volume name is {} bytes; at most {VOLUME_NAME_LEN}", options.name.len()));
    }
    let exists = path.exists();
    let existing_len = if exists {
        let device = Device::open(path, OpenMode::ReadOnly).map_err(|error| error.to_string())?;
        Some((device.len(), device.kind()))
    } else {
        None
    };
    let volume_len = match (existing_len, options.size) {
        (None, None) => return Err(format!("{}: does not exist; give --size to create an image file", path.display())),
        (None, Some(size)) => size,
        (Some((device_len, DeviceKind::BlockDevice)), Some(size)) if size > device_len => {
            return Err(format!("{}: --size {size} exceeds the device's {device_len} bytes", path.display()));
        }
        (Some(_), Some(size)) => size,
        (Some((device_len, _)), None) => device_len,
    };
    let uuid = match options.uuid {
        Some(uuid) => uuid,
        None => random_uuid()?,
    };
    // A block device says which unit it writes atomically (SPEC.md §2): the sector size is at
    // least that, by default exactly that.
    let block_sizes = if existing_len.is_some_and(|(_, kind)| kind == DeviceKind::BlockDevice) {
        Device::open(path, OpenMode::ReadOnly).ok().and_then(|device| device.block_sizes())
    } else {
        None
    };
    let sector_size = match (options.sector_size, block_sizes) {
        (Some(asked), Some((logical, physical))) if asked < logical.max(physical) => {
            return Err(format!(
                "{}: --sector-size {asked} is below the device's {} ({}-byte logical, {physical}-byte physical blocks): a sector write would not be atomic (SPEC.md §2)",
                path.display(),
                logical.max(physical),
                logical
            ));
        }
        (Some(asked), _) => Some(asked),
        (None, Some((logical, physical))) => Some(logical.max(physical).clamp(512, 65536)),
        (None, None) => None,
    };
    let request = LayoutRequest {
        volume_len,
        sector_size,
        slot_size: options.slot_size,
        len_version_log: options.version_log_size,
        len_backup_log: options.backup_log_size,
        instance_count: options.instances,
    };
    let geometry =
        plan_layout(&request, uuid).map_err(|error| format!("{}: cannot lay out a volume: {error}", path.display()))?;
    // 1.7 unless an earlier version is asked for (`MkfsOptions::default()` leaves the field
    // empty).
    let label = match options.format_version.as_str() {
        "1.0" => Label::new(geometry, &options.name),
        "1.1" | "1.2" => Label::new(geometry, &options.name).with_sync_watermark(),
        "1.3" | "1.4" | "1.5" | "1.6" => Label::new(geometry, &options.name).with_sync_watermark().with_fast_digest(),
        _ => Label::new(geometry, &options.name).with_sync_watermark().with_fast_digest().with_compact_entries(),
    };
    let label = match (options.value_chunks || options.format_version == "1.4", options.format_version.as_str()) {
        (true, "1.0" | "1.1" | "1.2") => {
            return Err(format!(
                "{}: --value-chunks needs format 1.4 (it is asked with --format-version {})",
                path.display(),
                options.format_version
            ))
        }
        (true, _) => label.with_value_chunks(),
        (false, _) => label,
    };
    let label = match (options.chunk_sketches || options.format_version == "1.5", options.format_version.as_str()) {
        (true, "1.0" | "1.1" | "1.2" | "1.4") => {
            return Err(format!(
                "{}: --chunk-sketches needs format 1.5 (it is asked with --format-version {})",
                path.display(),
                options.format_version
            ))
        }
        (true, _) => label.with_chunk_sketches(),
        (false, _) => label,
    };
    let label = match (options.log_tables || options.format_version == "1.6", options.format_version.as_str()) {
        (true, "1.0" | "1.1" | "1.2" | "1.4" | "1.5") => {
            return Err(format!(
                "{}: --log-tables needs format 1.6 (it is asked with --format-version {})",
                path.display(),
                options.format_version
            ))
        }
        (true, _) => label.with_log_tables(),
        (false, _) => label,
    };
    if options.dry_run {
        return report(out, options, "mkfs-plan", &format!("dry run: nothing written to {}", path.display()), &label);
    }
    let device = if exists {
        let device = Device::open(path, OpenMode::ReadWrite).map_err(|error| error.to_string())?;
        lds_volume::safety::refuse_replacing(&device, options.force, "lds mkfs", |_| false)
            .map_err(|error| error.to_string())?;
        if device.kind() == DeviceKind::ImageFile && device.len() < volume_len {
            device.allocate(volume_len).map_err(|error| error.to_string())?;
        }
        device
    } else {
        Device::create_image(path, volume_len).map_err(|error| error.to_string())?
    };
    write_volume(&device, &label).map_err(|error| format!("{error}; the volume is not usable, run mkfs again"))?;
    drop(device);
    verify(path, &label)?;
    report(out, options, "mkfs", &format!("formatted {} as an LDS volume", path.display()), &label)
}

/// Prints the layout, as text under `heading` or as a JSON document `what`.
fn report(out: &mut dyn Write, options: &MkfsOptions, what: &str, heading: &str, label: &Label) -> Result<(), String> {
    let io = |error: std::io::Error| error.to_string();
    if options.json {
        let mut document = json::document(what, &options.path.display().to_string());
        document.insert("label".into(), json::label(label));
        document.insert("usable_capacity".into(), serde_json::json!(label.geometry.usable_capacity()));
        return writeln!(out, "{}", serde_json::Value::Object(document)).map_err(io);
    }
    writeln!(out, "{heading}").map_err(io)?;
    print_layout(out, &label.geometry).map_err(io)
}

/// Zeroes the log areas, writes the labels and initial base versions, and flushes.
fn write_volume(device: &Device, label: &Label) -> Result<(), lds_volume::DeviceError> {
    const ZERO_CHUNK: usize = 1 << 20;
    let geometry = &label.geometry;
    let zeros = vec![0u8; ZERO_CHUNK];
    // Old contents of the log areas could only confuse inspection (recovery ignores them by
    // volume uuid); zero them so a new volume reads clean.
    let log_start = geometry.ofs_version_log;
    let log_end = geometry.ofs_slot_area;
    let mut offset = log_start;
    while offset < log_end {
        let len = ((log_end - offset) as usize).min(ZERO_CHUNK);
        device.write_at(offset, &zeros[..len])?;
        offset += len as u64;
    }
    let writes = format_writes(label);
    let (backup_label, rest) = writes.split_at(1);
    for write in backup_label {
        device.write_at(write.offset, &write.bytes)?;
    }
    device.flush()?;
    for write in rest {
        device.write_at(write.offset, &write.bytes)?;
    }
    device.flush()
}

/// Reads the volume back as a reader would and checks it is what was meant (ZenFS #199).
fn verify(path: &Path, label: &Label) -> Result<(), String> {
    let inspector = Volume::open(path, std::time::Duration::ZERO)
        .map_err(|error| format!("verification after writing failed: {error}"))?;
    if inspector.label != *label || inspector.choice != lds_format::label::LabelChoice::Both {
        return Err(format!("{}: verification failed: the labels read back differ from those written", path.display()));
    }
    for instance in 0..label.geometry.instance_count {
        let area = inspector.read_area(LogKind::Version, instance).map_err(|error| error.to_string())?;
        let context = inspector.area_context(LogKind::Version, instance);
        let state = recover_version_log(&area, &context)
            .map_err(|error| format!("{}: verification failed: instance {instance}: {error}", path.display()))?;
        if !state.version.chunks.is_empty() || state.sn != 1 {
            return Err(format!("{}: verification failed: instance {instance} is not an empty tree", path.display()));
        }
    }
    Ok(())
}
