//! Read access to a volume: both labels (SPEC.md §4.2), log areas, slots. Never writes.

use std::path::Path;

use lds_format::chunk::footer::FOOTER_LEN;
use lds_format::geometry::{Geometry, LogKind};
use lds_format::label::{Label, LabelChoice, LabelChoiceError, LabelPair, LABEL_LEN};
use lds_format::log::{area_context, AreaContext};
use lds_format::FormatError;

use crate::device::{DeviceError, OpenMode};
use std::time::Duration;

/// Why a volume cannot be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VolumeError {
    /// The device failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// No usable label.
    #[error("{path}: {}{}{}", label_choice(choice), primary.as_ref().map(|error| format!("; primary label: {error}")).unwrap_or_default(), backup.as_ref().map(|error| format!("; backup label: {error}")).unwrap_or_default())]
    Label {
        /// The device path.
        path: String,
        /// Why no copy can be used.
        choice: LabelChoiceError,
        /// The primary copy's error, if any.
        primary: Option<Box<FormatError>>,
        /// The backup copy's error, if any.
        backup: Option<Box<FormatError>>,
    },
    /// The devices of a volume of several devices do not fit together (SPEC.md §4.3).
    #[error("{path}: {reason}")]
    Devices {
        /// The device path.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A device of the volume was not found.
    #[error("{path}: the volume's device {index} (uuid {}, slots {first_slot} to {}) was not found among the files beside it, the block devices of /proc/partitions and LDS_DEVICES; give its path in LDS_DEVICES", uuid_string(device_uuid), first_slot + num_slots - 1)]
    MissingDevice {
        /// The path the volume was named by.
        path: String,
        /// The device's place in the table.
        index: usize,
        /// Its uuid.
        device_uuid: [u8; 16],
        /// Its first slot.
        first_slot: u64,
        /// Its slots.
        num_slots: u64,
    },
    /// Two or more devices claim to be one device of the volume (a clone, or a copy of its
    /// labels): none of them is used, since writing the wrong one would destroy data.
    #[error("{path}: {} devices claim to be the volume's device {index} (uuid {}): {}; refusing to guess (name the right one in LDS_DEVICES, or move the others away)", candidates.len(), uuid_string(device_uuid), candidates.iter().map(|path| path.display().to_string()).collect::<Vec<_>>().join(", "))]
    AmbiguousDevice {
        /// The path the volume was named by.
        path: String,
        /// The device's place in the table.
        index: usize,
        /// Its uuid.
        device_uuid: [u8; 16],
        /// Every path claiming it.
        candidates: Vec<std::path::PathBuf>,
    },
    /// The volume is larger than the device holding it.
    #[error("{path}: the label says the volume is {volume_len} bytes but the device has {device_len}")]
    Truncated {
        /// The device path.
        path: String,
        /// `volume_len` of the label.
        volume_len: u64,
        /// Bytes of the device.
        device_len: u64,
    },
}

/// A uuid in the canonical 8-4-4-4-12 form.
pub fn uuid_string(uuid: &[u8; 16]) -> String {
    let hex: String = uuid.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

fn label_choice(choice: &LabelChoiceError) -> &'static str {
    match choice {
        LabelChoiceError::NoValidLabel => "not an LDS volume: no valid label",
        LabelChoiceError::Conflict => "the primary and backup labels differ with the same generation",
    }
}

/// Positioned reads from a device, an image file or an image in memory.
pub trait ReadAt {
    /// Bytes available.
    fn len(&self) -> u64;
    /// True when there are no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Reads `len` bytes at `offset`.
    fn read_vec(&self, offset: u64, len: u64) -> Result<Vec<u8>, DeviceError>;
    /// Reads `buffer.len()` bytes at `offset` for one pass over much of the volume, around
    /// the page cache where the device can (`BlockDevice::read_bulk`); this default copies
    /// what `read_vec` returns.
    fn read_bulk(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        buffer.copy_from_slice(&self.read_vec(offset, buffer.len() as u64)?);
        Ok(())
    }
    /// The volume's label copies where they lie, when reading them at the places the volume's
    /// address space puts them would not do (a volume of several devices, SPEC.md §4.3).
    fn volume_labels(&self) -> Option<Result<LabelPair, DeviceError>> {
        None
    }
    /// The label copies of the other devices of a volume of several devices (SPEC.md §4.3).
    fn member_labels(&self) -> Vec<crate::members::MemberLabels> {
        Vec::new()
    }
}

impl<T: crate::device::BlockDevice + ?Sized> ReadAt for T {
    fn len(&self) -> u64 {
        crate::device::BlockDevice::len(self)
    }
    fn read_vec(&self, offset: u64, len: u64) -> Result<Vec<u8>, DeviceError> {
        crate::device::BlockDevice::read_vec(self, offset, len)
    }
    fn read_bulk(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        crate::device::BlockDevice::read_bulk(self, offset, buffer)
    }
    fn volume_labels(&self) -> Option<Result<LabelPair, DeviceError>> {
        crate::device::BlockDevice::volume_labels(self)
    }
    fn member_labels(&self) -> Vec<crate::members::MemberLabels> {
        crate::device::BlockDevice::member_labels(self)
    }
}

/// Reads `len` bytes at `offset` as far as the device allows, for the tools that work around
/// bad sectors (fsck, repair, salvage): where the whole read fails, each `sector` is read
/// alone, and the ones that fail are returned as zeros and listed by offset. Fails only when
/// every sector fails (the device itself is gone).
pub fn read_tolerant(
    device: &(impl ReadAt + ?Sized),
    offset: u64,
    len: u64,
    sector: u64,
) -> Result<(Vec<u8>, Vec<u64>), DeviceError> {
    let mut bytes = vec![0u8; len as usize];
    let unreadable = read_tolerant_into(device, offset, &mut bytes, sector)?;
    Ok((bytes, unreadable))
}

/// As [`read_tolerant`], into `buffer` (its whole length, through `ReadAt::read_bulk`):
/// returns the offsets of the sectors that cannot be read, which are left as zeros.
pub fn read_tolerant_into(
    device: &(impl ReadAt + ?Sized),
    offset: u64,
    buffer: &mut [u8],
    sector: u64,
) -> Result<Vec<u64>, DeviceError> {
    let first_error = match device.read_bulk(offset, buffer) {
        Ok(()) => return Ok(Vec::new()),
        Err(error) => error,
    };
    let sector = sector.max(1) as usize;
    let mut unreadable = Vec::new();
    for (index, piece) in buffer.chunks_mut(sector).enumerate() {
        let at = offset + (index * sector) as u64;
        match device.read_vec(at, piece.len() as u64) {
            Ok(read) => piece.copy_from_slice(&read),
            Err(_) => {
                piece.fill(0);
                unreadable.push(at);
            }
        }
    }
    if unreadable.len() == buffer.len().div_ceil(sector) {
        return Err(first_error);
    }
    Ok(unreadable)
}

/// A buffer whose bytes start at a page boundary, as `O_DIRECT` wants (`read_bulk`).
pub struct AlignedBuffer {
    storage: Vec<u8>,
    shift: usize,
    len: usize,
}

impl AlignedBuffer {
    /// The alignment: a page, a multiple of every logical block size Linux supports.
    pub const ALIGN: usize = 4096;

    /// `len` zero bytes.
    pub fn new(len: usize) -> Self {
        let storage = vec![0u8; len + Self::ALIGN];
        let shift = storage.as_ptr().align_offset(Self::ALIGN);
        Self { storage, shift, len }
    }
}

impl std::ops::Deref for AlignedBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.storage[self.shift..self.shift + self.len]
    }
}

impl std::ops::DerefMut for AlignedBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.shift..self.shift + self.len]
    }
}

impl AsRef<[u8]> for AlignedBuffer {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

/// A volume image held in memory (tests, the crash simulator).
pub struct MemoryImage<'a>(pub &'a [u8]);

impl ReadAt for MemoryImage<'_> {
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
    fn read_vec(&self, offset: u64, len: u64) -> Result<Vec<u8>, DeviceError> {
        let start = usize::try_from(offset).ok();
        let end = start.and_then(|start| start.checked_add(usize::try_from(len).ok()?));
        match (start, end) {
            (Some(start), Some(end)) if end <= self.0.len() => Ok(self.0[start..end].to_vec()),
            _ => Err(DeviceError::Read {
                path: "memory image".into(),
                offset,
                len,
                source: std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            }),
        }
    }
}

/// Reads both label copies of the volume (SPEC.md §4.2): the primary at offset 0 and the
/// backup in the last sector of the bytes the primary gives the device (`volume_len`, or on a
/// volume of several devices its table entry's `len_device`, §4.3). A volume of several
/// devices (`Members`) reads them from its first device. A copy whose sector cannot be read
/// counts as invalid, so that the other one is used.
pub fn read_labels(device: &(impl ReadAt + ?Sized)) -> Result<LabelPair, DeviceError> {
    if let Some(labels) = device.volume_labels() {
        return labels;
    }
    read_label_pair(device, Label::ofs_backup_label_on_device)
}

/// Reads the label copy at `offset`: decoded, or why it is not valid (a sector that cannot be
/// read is a copy lost, so that the other one is used, SPEC.md §4.2).
pub(crate) fn read_label_at(
    device: &(impl ReadAt + ?Sized),
    offset: u64,
) -> Result<Result<Label, FormatError>, DeviceError> {
    if offset + LABEL_LEN as u64 > device.len() {
        return Ok(Err(FormatError::Truncated {
            structure: "label",
            offset,
            needed: LABEL_LEN as u64,
            available: device.len().saturating_sub(offset),
        }));
    }
    match device.read_vec(offset, LABEL_LEN as u64) {
        Ok(bytes) => Ok(Label::decode(&bytes, offset)),
        Err(error) => Ok(Err(FormatError::invalid("label", "sector", offset, format!("cannot be read: {error}")))),
    }
}

/// Reads both label copies of `device`, the backup at `backup_offset(primary)` when the
/// primary is valid, else found by probing the device's end for each sector size.
pub(crate) fn read_label_pair(
    device: &(impl ReadAt + ?Sized),
    backup_offset: impl Fn(&Label) -> u64,
) -> Result<LabelPair, DeviceError> {
    let read_label = |offset: u64| read_label_at(device, offset);
    let primary = read_label(0)?;
    let backup = match &primary {
        Ok(label) => read_label(backup_offset(label))?,
        Err(_) => {
            let mut probe = Err(FormatError::BadMagic { structure: "label", offset: device.len(), found: Vec::new() });
            let mut sector = 512u64;
            while sector <= 65536 && sector <= device.len() {
                let candidate = read_label(device.len() - sector)?;
                if candidate.as_ref().is_ok_and(|label| label.geometry.sector() == sector) {
                    probe = candidate;
                    break;
                }
                if sector == 512 {
                    probe = candidate;
                }
                sector *= 2;
            }
            probe
        }
    };
    Ok(LabelPair { primary, backup })
}

/// A volume opened for reading: its device, both label copies and the label chosen by
/// SPEC.md §4.2.
#[derive(Debug)]
pub struct Volume {
    /// The device, or the devices of a volume of several (SPEC.md §4.3).
    pub device: crate::members::VolumeDevice,
    /// Both label copies.
    pub labels: LabelPair,
    /// The label chosen by SPEC.md §4.2.
    pub label: Label,
    /// Which copy.
    pub choice: LabelChoice,
}

/// Chooses the label of a volume on `device` (named `name` in errors) and checks that the
/// device holds the whole volume.
pub fn choose_label(
    device: &(impl ReadAt + ?Sized),
    name: &str,
) -> Result<(LabelPair, LabelChoice, Label), VolumeError> {
    let labels = read_labels(device)?;
    let (choice, label) = labels.choose().map_err(|choice| VolumeError::Label {
        path: name.to_string(),
        choice,
        primary: labels.primary.as_ref().err().cloned().map(Box::new),
        backup: labels.backup.as_ref().err().cloned().map(Box::new),
    })?;
    let label = label.clone();
    if label.geometry.volume_len > device.len() {
        return Err(VolumeError::Truncated {
            path: name.to_string(),
            volume_len: label.geometry.volume_len,
            device_len: device.len(),
        });
    }
    Ok((labels, choice, label))
}

impl Volume {
    /// Opens a volume for reading under a shared lock (any number of readers; fails while a
    /// writer holds it, after waiting at most `wait`) and chooses its label.
    pub fn open(path: &Path, wait: Duration) -> Result<Self, VolumeError> {
        let device = crate::members::Members::open(path, OpenMode::ReadOnlyLocked, wait)?;
        let (labels, choice, label) = choose_label(&device, &path.display().to_string())?;
        Ok(Self { device, labels, label, choice })
    }

    /// The chosen geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.label.geometry
    }

    /// The context of a log area.
    pub fn area_context(&self, kind: LogKind, instance: u32) -> AreaContext {
        area_context(&self.label.geometry, kind, instance)
    }

    /// Reads a whole log area.
    pub fn read_area(&self, kind: LogKind, instance: u32) -> Result<Vec<u8>, DeviceError> {
        let (offset, len) = self.label.geometry.log_area(kind, instance);
        self.device.read_vec(offset, len)
    }

    /// Reads the footer bytes of a slot.
    pub fn read_footer(&self, slot: u64) -> Result<Vec<u8>, DeviceError> {
        let geometry = &self.label.geometry;
        let offset = geometry.slot_offset(slot) + geometry.slot_size - FOOTER_LEN as u64;
        self.device.read_vec(offset, FOOTER_LEN as u64)
    }

    /// Reads a whole slot.
    pub fn read_slot(&self, slot: u64) -> Result<Vec<u8>, DeviceError> {
        let geometry = &self.label.geometry;
        self.device.read_vec(geometry.slot_offset(slot), geometry.slot_size)
    }
}
