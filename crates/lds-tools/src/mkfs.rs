//! Formatting a volume (SPEC.md §3, §4): the layout and label asked for, the crash-relevant
//! order of mkfs's writes, and the read-back that checks them.
//!
//! The order of writes (`write_volume`) is what makes any crash of mkfs over an old volume
//! leave the old volume, a device that readers refuse, or a whole new volume (`lds crashtest
//! --workload mkfs` checks every crash state): the log areas are zeroed first, then the
//! backup label is written and flushed, then the primary label and the initial base
//! versions, and a last flush. A reader takes the primary label when it is valid (SPEC.md
//! §4.2), so until the new primary lands a reader sees the old label, whose logs are gone or
//! going, and refuses; once it lands, the new volume is whole but for the base versions
//! written with it, which the last flush makes durable.

use std::path::{Path, PathBuf};

use lds_format::algorithms::image::format_writes;
use lds_format::algorithms::recovery::{recover_version_log, VersionLogError};
use lds_format::geometry::{plan_layout, LayoutRequest, LogKind};
use lds_format::label::{Label, LabelChoice, VOLUME_NAME_LEN};
use lds_format::log::area_context;
use lds_format::FormatError;
use lds_volume::safety::SafetyError;
use lds_volume::{volume::choose_label, ReadAt};
use lds_volume::{BlockDevice, Device, DeviceError, DeviceKind, OpenMode, Volume, VolumeError};

/// Why mkfs refused or failed; each names the path and what is wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MkfsError {
    /// The volume name is longer than a label holds.
    #[error("the volume name is {len} bytes; at most {VOLUME_NAME_LEN}")]
    NameTooLong {
        /// Its length.
        len: usize,
    },
    /// The target does not exist and no size was given to create it.
    #[error("{}: does not exist; give --size to create an image file", path.display())]
    NoSize {
        /// The path.
        path: PathBuf,
    },
    /// The size asked for exceeds the block device.
    #[error("{}: --size {size} exceeds the device's {device_len} bytes", path.display())]
    TooLarge {
        /// The path.
        path: PathBuf,
        /// The size asked for.
        size: u64,
        /// The device's bytes.
        device_len: u64,
    },
    /// No random uuid could be read.
    #[error("cannot read /dev/urandom for a uuid: {0}")]
    Uuid(std::io::Error),
    /// The sector size asked for is below what the device writes atomically (SPEC.md §2).
    #[error(
        "{}: --sector-size {asked} is below the device's {} ({logical}-byte logical, {physical}-byte physical blocks): a sector write would not be atomic (SPEC.md §2)",
        path.display(), logical.max(physical)
    )]
    SectorTooSmall {
        /// The path.
        path: PathBuf,
        /// The sector size asked for.
        asked: u32,
        /// The device's logical block size.
        logical: u32,
        /// Its physical block size.
        physical: u32,
    },
    /// No layout fits the request (SPEC.md §3).
    #[error("{}: cannot lay out a volume: {source}", path.display())]
    Layout {
        /// The path.
        path: PathBuf,
        /// Why.
        source: FormatError,
    },
    /// A feature asked for needs a later format version than the one asked for.
    #[error("{}: --{feature} needs format {needs} (it is asked with --format-version {asked})", path.display())]
    FeatureNeedsVersion {
        /// The path.
        path: PathBuf,
        /// The feature's option (`value-chunks`, `chunk-sketches`, `log-tables`).
        feature: &'static str,
        /// The first version with it.
        needs: &'static str,
        /// The version asked for.
        asked: String,
    },
    /// The target holds data and `force` was not given (docs/safety.md).
    #[error("{0}")]
    Refused(#[from] SafetyError),
    /// The device cannot be opened, created or read.
    #[error("{0}")]
    Device(#[from] DeviceError),
    /// A write or flush of the format failed: the device holds no usable volume.
    #[error("{0}; the volume is not usable, run mkfs again")]
    Write(DeviceError),
    /// The volume written cannot be opened again.
    #[error("verification after writing failed: {0}")]
    Reopen(VolumeError),
    /// The labels read back are not both the label written.
    #[error("{path}: verification failed: the labels read back differ from those written")]
    LabelsDiffer {
        /// The device.
        path: String,
    },
    /// An instance's version log does not recover.
    #[error("{path}: verification failed: instance {instance}: {source}")]
    NotRecovered {
        /// The device.
        path: String,
        /// The instance.
        instance: u32,
        /// Why.
        source: VersionLogError,
    },
    /// An instance's version log recovers to something other than an empty tree.
    #[error("{path}: verification failed: instance {instance} is not an empty tree")]
    NotEmpty {
        /// The device.
        path: String,
        /// The instance.
        instance: u32,
    },
}

/// What to format: the target, the layout (each `None` takes the default of SPEC.md §3,
/// scaled down for small volumes), the label's name, uuid and format version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The block device or image file (created when it does not exist).
    pub path: PathBuf,
    /// The volume's bytes (default: the device's).
    pub size: Option<u64>,
    /// Slot size.
    pub slot_size: Option<u64>,
    /// Version log bytes per instance.
    pub version_log_size: Option<u64>,
    /// Backup log bytes per instance.
    pub backup_log_size: Option<u64>,
    /// Sector size (default: the block device's atomic write unit, else 4096).
    pub sector_size: Option<u32>,
    /// Instances.
    pub instances: Option<u32>,
    /// The volume name.
    pub name: String,
    /// The uuid (default: random).
    pub uuid: Option<[u8; 16]>,
    /// The minor format version (`1.MINOR`, 0 to 7).
    pub format_minor: u8,
    /// Feature `value_chunks` (format 1.4).
    pub value_chunks: bool,
    /// Feature `chunk_sketches` (format 1.5).
    pub chunk_sketches: bool,
    /// Feature `log_tables` (format 1.6).
    pub log_tables: bool,
    /// Replace what the target holds (docs/safety.md).
    pub force: bool,
}

impl Request {
    /// Formatting `path` with the defaults: format 1.7, the device's size.
    pub fn new(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            size: None,
            slot_size: None,
            version_log_size: None,
            backup_log_size: None,
            sector_size: None,
            instances: None,
            name: String::new(),
            uuid: None,
            format_minor: FORMAT_MINOR_DEFAULT,
            value_chunks: false,
            chunk_sketches: false,
            log_tables: false,
            force: false,
        }
    }
}

/// The format version mkfs writes unless asked for another: 1.7.
pub const FORMAT_MINOR_DEFAULT: u8 = 7;

/// A random (version 4) uuid from /dev/urandom.
pub fn random_uuid() -> Result<[u8; 16], MkfsError> {
    use std::io::Read;
    let mut uuid = [0u8; 16];
    std::fs::File::open("/dev/urandom").and_then(|mut file| file.read_exact(&mut uuid)).map_err(MkfsError::Uuid)?;
    uuid[6] = (uuid[6] & 0x0f) | 0x40;
    uuid[8] = (uuid[8] & 0x3f) | 0x80;
    Ok(uuid)
}

/// The label `request` asks for, checked against the device it names (its size, and the
/// unit a block device writes atomically); reads the device, writes nothing.
pub fn plan(request: &Request) -> Result<Label, MkfsError> {
    let path = request.path.as_path();
    if request.name.len() > VOLUME_NAME_LEN {
        return Err(MkfsError::NameTooLong { len: request.name.len() });
    }
    let existing = if path.exists() {
        let device = Device::open(path, OpenMode::ReadOnly)?;
        Some((device.len(), device.kind()))
    } else {
        None
    };
    let volume_len = match (existing, request.size) {
        (None, None) => return Err(MkfsError::NoSize { path: path.to_path_buf() }),
        (None, Some(size)) => size,
        (Some((device_len, DeviceKind::BlockDevice)), Some(size)) if size > device_len => {
            return Err(MkfsError::TooLarge { path: path.to_path_buf(), size, device_len });
        }
        (Some(_), Some(size)) => size,
        (Some((device_len, _)), None) => device_len,
    };
    let uuid = match request.uuid {
        Some(uuid) => uuid,
        None => random_uuid()?,
    };
    // A block device says which unit it writes atomically (SPEC.md §2): the sector size is at
    // least that, by default exactly that.
    let block_sizes = if existing.is_some_and(|(_, kind)| kind == DeviceKind::BlockDevice) {
        Device::open(path, OpenMode::ReadOnly).ok().and_then(|device| device.block_sizes())
    } else {
        None
    };
    let sector_size = match (request.sector_size, block_sizes) {
        (Some(asked), Some((logical, physical))) if asked < logical.max(physical) => {
            return Err(MkfsError::SectorTooSmall { path: path.to_path_buf(), asked, logical, physical });
        }
        (Some(asked), _) => Some(asked),
        (None, Some((logical, physical))) => Some(logical.max(physical).clamp(512, 65536)),
        (None, None) => None,
    };
    let layout = LayoutRequest {
        volume_len,
        sector_size,
        slot_size: request.slot_size,
        len_version_log: request.version_log_size,
        len_backup_log: request.backup_log_size,
        instance_count: request.instances,
    };
    let geometry =
        plan_layout(&layout, uuid).map_err(|source| MkfsError::Layout { path: path.to_path_buf(), source })?;
    label_of(request, Label::new(geometry, &request.name))
}

/// `label` with the features of `request`'s format version and options.
fn label_of(request: &Request, label: Label) -> Result<Label, MkfsError> {
    let minor = request.format_minor;
    let label = match minor {
        0 => label,
        1 | 2 => label.with_sync_watermark(),
        3..=6 => label.with_sync_watermark().with_fast_digest(),
        _ => label.with_sync_watermark().with_fast_digest().with_compact_entries(),
    };
    // Each feature needs its version (or a later one), except that 1.4, 1.5 and 1.6 are the
    // versions of exactly one feature each: 1.5 has no value chunks, 1.6 neither of the two.
    let needs = |feature: &'static str, needs: &'static str| MkfsError::FeatureNeedsVersion {
        path: request.path.clone(),
        feature,
        needs,
        asked: format!("1.{minor}"),
    };
    let label = match (request.value_chunks || minor == 4, minor) {
        (true, 0..=2) => return Err(needs("value-chunks", "1.4")),
        (true, _) => label.with_value_chunks(),
        (false, _) => label,
    };
    let label = match (request.chunk_sketches || minor == 5, minor) {
        (true, 0..=2 | 4) => return Err(needs("chunk-sketches", "1.5")),
        (true, _) => label.with_chunk_sketches(),
        (false, _) => label,
    };
    match (request.log_tables || minor == 6, minor) {
        (true, 0..=2 | 4 | 5) => Err(needs("log-tables", "1.6")),
        (true, _) => Ok(label.with_log_tables()),
        (false, _) => Ok(label),
    }
}

/// Formats the device `request` names with `label` (from `plan`): refuses one holding data
/// unless `force`, creates an image file that does not exist, writes in the crash-safe order
/// of `write_volume`, then opens the volume again as a reader does and checks it.
pub fn format(request: &Request, label: &Label) -> Result<(), MkfsError> {
    let path = request.path.as_path();
    let volume_len = label.geometry.volume_len;
    let device = if path.exists() {
        let device = Device::open(path, OpenMode::ReadWrite)?;
        lds_volume::safety::refuse_replacing(&device, request.force, "lds mkfs", |_| false)?;
        if device.kind() == DeviceKind::ImageFile && device.len() < volume_len {
            device.allocate(volume_len)?;
        }
        device
    } else {
        Device::create_image(path, volume_len)?
    };
    write_volume(&device, label).map_err(MkfsError::Write)?;
    drop(device);
    let volume = Volume::open(path, std::time::Duration::ZERO).map_err(MkfsError::Reopen)?;
    verify(&volume.device, &path.display().to_string(), label)
}

/// Writes a new volume with `label` on `device`: zeroes the log areas, writes the backup
/// label and flushes, then the primary label and the initial base versions, and flushes.
/// Any crash leaves the old volume, one readers refuse, or the new one (module docs).
pub fn write_volume(device: &dyn BlockDevice, label: &Label) -> Result<(), DeviceError> {
    const ZERO_CHUNK: usize = 1 << 20;
    let geometry = &label.geometry;
    let zeros = vec![0u8; ZERO_CHUNK];
    // Old contents of the log areas could only confuse inspection (recovery ignores them by
    // volume uuid); zero them so a new volume reads clean. Each step writes a chunk of the
    // areas, which end at the slot area.
    let log_end = geometry.ofs_slot_area;
    let mut offset = geometry.ofs_version_log;
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

/// Reads the volume on `device` (named `name`) back as a reader would and checks it is what
/// `label` describes: both label copies equal to it, and every instance an empty tree
/// (ZenFS #199).
pub fn verify(device: &(impl ReadAt + ?Sized), name: &str, label: &Label) -> Result<(), MkfsError> {
    let (_, choice, read) = choose_label(device, name).map_err(MkfsError::Reopen)?;
    if read != *label || choice != LabelChoice::Both {
        return Err(MkfsError::LabelsDiffer { path: name.to_string() });
    }
    let geometry = &label.geometry;
    for instance in 0..geometry.instance_count {
        let (offset, len) = geometry.log_area(LogKind::Version, instance);
        let area = device.read_vec(offset, len)?;
        let context = area_context(geometry, LogKind::Version, instance);
        let state = recover_version_log(&area, &context).map_err(|source| MkfsError::NotRecovered {
            path: name.to_string(),
            instance,
            source,
        })?;
        if !state.version.chunks.is_empty() || state.sn != 1 {
            return Err(MkfsError::NotEmpty { path: name.to_string(), instance });
        }
    }
    Ok(())
}
