//! A volume on one device or on several (SPEC.md §4.3): `Members` presents the volume's single
//! address space, in which every structure is laid out, over the devices that hold it, so
//! that the engine, the checker and the tools read and write a multi-device volume as they
//! read and write one device.
//!
//! Finding the devices: a volume is named by the path of any of its devices. The labels of
//! that device name the volume and the device; the first device's labels hold the table of
//! all of them. The others are found by their labels among the paths in `LDS_DEVICES`
//! (separated by `:`), the regular files in the directory of the path given, and the block
//! devices the kernel lists in `/proc/partitions` (as blkid and `btrfs device scan` look).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lds_format::devices::{DeviceTable, Extent};
use lds_format::label::{Label, LabelPair, LABEL_LEN};
use lds_format::FormatError;

use crate::device::{BlockDevice, Device, DeviceError, OpenMode};
use crate::volume::{ReadAt, VolumeError};

/// Environment variable listing more paths to look for a volume's devices in.
pub const DEVICES_VARIABLE: &str = "LDS_DEVICES";

/// Directory entries read at most when looking for a volume's devices beside the path given.
const DIRECTORY_ENTRIES_MAX: usize = 10_000;

/// Reads both label copies of one device where they lie on that device (SPEC.md §4.2, §4.3):
/// the primary at offset 0; the backup in the last sector of the bytes the primary says the
/// volume uses of this device, or (the primary not valid) found by probing the device's end.
pub fn read_device_labels(device: &(impl ReadAt + ?Sized)) -> Result<LabelPair, DeviceError> {
    crate::volume::read_label_pair(device, Label::ofs_backup_label_on_device)
}

/// The label copies of one device of a volume of several devices, other than the first.
#[derive(Debug)]
pub struct MemberLabels {
    /// The device's place in the table.
    pub index: usize,
    /// Its path.
    pub name: PathBuf,
    /// Its primary copy (offset 0) and backup copy (`ofs_backup_label`), as read.
    pub labels: Result<LabelPair, DeviceError>,
    /// Where its backup copy lies on it: the last sector of the bytes its table entry gives it.
    pub ofs_backup_label: u64,
}

/// A volume's devices and the map from volume offsets to device offsets.
pub struct Members<D> {
    devices: Vec<D>,
    /// The first device's label and the extents of its table (none for one device).
    layout: Option<(Label, Vec<Extent>)>,
    /// Devices written to since their last flush.
    dirty: Vec<AtomicBool>,
    len: u64,
}

/// A volume opened from its paths: its devices are files or block devices.
pub type VolumeDevice = Members<Device>;

impl<D: BlockDevice> Members<D> {
    /// A volume on one device.
    pub fn single(device: D) -> Self {
        let len = device.len();
        Self { devices: vec![device], layout: None, dirty: vec![AtomicBool::new(false)], len }
    }

    /// The volume `label` (its first device's) describes, on `devices` in the order of its
    /// table. Fails when a device is shorter than the table says.
    pub fn assemble(devices: Vec<D>, label: &Label) -> Result<Self, VolumeError> {
        let Some(table) = &label.devices else {
            let mut devices = devices;
            return match devices.len() {
                1 => Ok(Self::single(devices.remove(0))),
                count => Err(VolumeError::Devices {
                    path: name_of(devices.first()),
                    reason: format!("a volume of one device given {count} devices"),
                }),
            };
        };
        if devices.len() != table.devices.len() {
            return Err(VolumeError::Devices {
                path: name_of(devices.first()),
                reason: format!("the volume has {} devices, {} given", table.devices.len(), devices.len()),
            });
        }
        for (device, entry) in devices.iter().zip(&table.devices) {
            if device.len() < entry.len_device {
                return Err(VolumeError::Truncated {
                    path: device.name().display().to_string(),
                    volume_len: entry.len_device,
                    device_len: device.len(),
                });
            }
        }
        let extents = table.extents(&label.geometry);
        let dirty = devices.iter().map(|_| AtomicBool::new(false)).collect();
        Ok(Self { devices, layout: Some((label.clone(), extents)), dirty, len: label.geometry.volume_len })
    }

    /// The devices, in the order of the table (the first device first).
    pub fn devices(&self) -> &[D] {
        &self.devices
    }

    /// The first device (labels, logs, the first slots).
    pub fn first(&self) -> &D {
        &self.devices[0]
    }

    /// The device table the volume was assembled by (`None` on one device).
    pub fn table(&self) -> Option<&DeviceTable> {
        self.layout.as_ref().and_then(|(label, _)| label.devices.as_ref())
    }

    /// The first device's label the volume was assembled by (`None` on one device).
    pub fn label(&self) -> Option<&Label> {
        self.layout.as_ref().map(|(label, _)| label)
    }

    /// Gives back the devices.
    pub fn into_devices(self) -> Vec<D> {
        self.devices
    }

    /// The device of a volume on one device; the volume back when it has several.
    pub fn into_single(mut self) -> Result<D, Box<Self>> {
        if self.layout.is_some() {
            return Err(Box::new(self));
        }
        Ok(self.devices.remove(0))
    }

    /// The pieces of `[offset, offset + len)`: (device index, device offset, offset into the
    /// buffer, bytes), or the first volume offset no device holds.
    fn pieces(&self, offset: u64, len: u64) -> Result<Vec<(usize, u64, usize, usize)>, u64> {
        let Some((_, extents)) = &self.layout else {
            return Ok(vec![(0, offset, 0, len as usize)]);
        };
        let mut pieces = Vec::new();
        let mut at = offset;
        let end = offset.checked_add(len).ok_or(offset)?;
        // Each step consumes one extent's share; there are at most 2 * DEVICES_COUNT_MAX.
        while at < end {
            let index = extents.partition_point(|extent| extent.ofs_volume <= at);
            let extent = index.checked_sub(1).map(|index| &extents[index]);
            let Some(extent) = extent.filter(|extent| at < extent.ofs_volume + extent.len) else { return Err(at) };
            let take = (extent.ofs_volume + extent.len).min(end) - at;
            pieces.push((
                extent.device,
                extent.ofs_device + (at - extent.ofs_volume),
                (at - offset) as usize,
                take as usize,
            ));
            at += take;
        }
        Ok(pieces)
    }

    fn unmapped(&self, at: u64) -> std::io::Error {
        std::io::Error::other(format!(
            "no device of the volume holds offset {at} (a slot of no device: a removed device's, SPEC.md §4.3)"
        ))
    }
}

impl<D: BlockDevice> Members<D> {
    /// The volume whose first device is `devices[0]`, its other devices picked from the rest by
    /// their labels (SPEC.md §4.3: the first device's table names them by uuid); the others
    /// are left out. For devices already open (the crash simulator's).
    pub fn assemble_found(devices: Vec<D>) -> Result<Self, VolumeError> {
        let mut devices = devices.into_iter();
        let Some(first) = devices.next() else {
            return Err(VolumeError::Devices { path: String::new(), reason: "no device given".into() });
        };
        let labels = read_device_labels(&first)?;
        let Some(label) =
            labels.choose().ok().filter(|(_, label)| label.devices.is_some()).map(|(_, label)| label.clone())
        else {
            return Ok(Self::single(first));
        };
        let Some(table) = &label.devices else { return Ok(Self::single(first)) };
        let mut candidates: Vec<(Option<[u8; 16]>, D)> = devices
            .map(|device| {
                let uuid = identify(&device)
                    .filter(|(volume, _, _)| *volume == label.geometry.volume_uuid)
                    .map(|(_, uuid, _)| uuid);
                (uuid, device)
            })
            .collect();
        let mut chosen = vec![first];
        for (index, entry) in table.devices.iter().enumerate().skip(1) {
            let Some(position) = candidates.iter().position(|(uuid, _)| *uuid == Some(entry.device_uuid)) else {
                return Err(VolumeError::MissingDevice {
                    path: chosen[0].name().display().to_string(),
                    index,
                    device_uuid: entry.device_uuid,
                    first_slot: entry.first_slot,
                    num_slots: entry.num_slots,
                });
            };
            chosen.push(candidates.remove(position).1);
        }
        Self::assemble(chosen, &label)
    }
}

impl<D: BlockDevice> std::fmt::Debug for Members<D> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&Path> = self.devices.iter().map(|device| device.name()).collect();
        formatter.debug_struct("Members").field("devices", &names).field("len", &self.len).finish()
    }
}

fn name_of<D: BlockDevice>(device: Option<&D>) -> String {
    device.map(|device| device.name().display().to_string()).unwrap_or_default()
}

impl<D: BlockDevice> BlockDevice for Members<D> {
    fn name(&self) -> &Path {
        self.devices[0].name()
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        if self.layout.is_none() {
            return self.devices[0].read_at(offset, buffer);
        }
        let pieces = self.pieces(offset, buffer.len() as u64).map_err(|at| DeviceError::Read {
            path: self.name().to_path_buf(),
            offset,
            len: buffer.len() as u64,
            source: self.unmapped(at),
        })?;
        for (device, device_offset, start, len) in pieces {
            self.devices[device].read_at(device_offset, &mut buffer[start..start + len])?;
        }
        Ok(())
    }
    fn drop_cached(&self, offset: u64, len: u64) {
        for (device, device_offset, _, piece) in self.pieces(offset, len).unwrap_or_default() {
            self.devices[device].drop_cached(device_offset, piece as u64);
        }
    }
    fn read_mapped(&self, offset: u64, len: u64, into: &mut Vec<u8>) -> Result<(), DeviceError> {
        // One device (no layout) is one piece too.
        match self.pieces(offset, len).as_deref() {
            Ok([(device, device_offset, _, _)]) => self.devices[*device].read_mapped(*device_offset, len, into),
            _ => {
                *into = BlockDevice::read_vec(self, offset, len)?;
                Ok(())
            }
        }
    }
    fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        if self.layout.is_none() {
            return self.devices[0].write_at(offset, bytes);
        }
        let pieces = self.pieces(offset, bytes.len() as u64).map_err(|at| DeviceError::Write {
            path: self.name().to_path_buf(),
            offset,
            len: bytes.len() as u64,
            source: self.unmapped(at),
        })?;
        for (device, device_offset, start, len) in pieces {
            // Marked before the write: a flush that starts after it returns covers it.
            self.dirty[device].store(true, Ordering::Release);
            self.devices[device].write_at(device_offset, &bytes[start..start + len])?;
        }
        Ok(())
    }
    fn write_direct(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        // One device: its own; several: through `write_at`, which marks what it wrote.
        if self.layout.is_none() {
            return self.devices[0].write_direct(offset, bytes);
        }
        self.write_at(offset, bytes)
    }
    fn read_bulk(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        if self.layout.is_none() {
            return self.devices[0].read_bulk(offset, buffer);
        }
        self.read_at(offset, buffer)
    }
    fn flush(&self) -> Result<(), DeviceError> {
        if self.layout.is_none() {
            return self.devices[0].flush();
        }
        // Every device written since its last flush (SPEC.md §2: a flush covers every write
        // issued before it, on whichever device).
        for (device, dirty) in self.devices.iter().zip(&self.dirty) {
            if dirty.swap(false, Ordering::AcqRel) {
                if let Err(error) = device.flush() {
                    dirty.store(true, Ordering::Release);
                    return Err(error);
                }
            }
        }
        Ok(())
    }
    fn flush_except(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        // One device: its own. Several: all of them (the range could span devices).
        if self.layout.is_none() {
            return self.devices[0].flush_except(offset, len);
        }
        self.flush()
    }
    fn flush_range(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        if self.layout.is_none() {
            return self.devices[0].flush_range(offset, len);
        }
        let pieces = self
            .pieces(offset, len)
            .map_err(|at| DeviceError::Flush { path: self.name().to_path_buf(), source: self.unmapped(at) })?;
        for (device, device_offset, _, len) in pieces {
            self.devices[device].flush_range(device_offset, len as u64)?;
        }
        Ok(())
    }
    fn member_labels(&self) -> Vec<MemberLabels> {
        let Some((label, _)) = &self.layout else { return Vec::new() };
        let Some(table) = &label.devices else { return Vec::new() };
        let sector = label.geometry.sector();
        table
            .devices
            .iter()
            .enumerate()
            .skip(1)
            .map(|(index, entry)| {
                let ofs_backup_label = entry.len_device - sector;
                let device = &self.devices[index];
                let labels = crate::volume::read_label_at(device, 0).and_then(|primary| {
                    Ok(LabelPair { primary, backup: crate::volume::read_label_at(device, ofs_backup_label)? })
                });
                MemberLabels { index, name: self.devices[index].name().to_path_buf(), labels, ofs_backup_label }
            })
            .collect()
    }
    fn write_member(&self, index: usize, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        let Some(device) = self.devices.get(index) else {
            return Err(DeviceError::Write {
                path: self.name().to_path_buf(),
                offset,
                len: bytes.len() as u64,
                source: std::io::Error::other(format!("the volume has no device {index}")),
            });
        };
        device.write_at(offset, bytes)?;
        device.flush()
    }
    fn volume_labels(&self) -> Option<Result<LabelPair, DeviceError>> {
        match &self.layout {
            // The first device's labels where they lie on it: the volume's backup label is
            // its last sector, but a copy not yet rewritten to the table (an interrupted
            // `lds device` command) puts it elsewhere in the volume's address space.
            Some(_) => Some(read_device_labels(&self.devices[0])),
            None => self.devices[0].volume_labels(),
        }
    }
}

/// The volume and device a device's labels name: (volume uuid, device uuid, the label).
fn identify(device: &(impl ReadAt + ?Sized)) -> Option<([u8; 16], [u8; 16], Label)> {
    let labels = read_device_labels(device).ok()?;
    let (_, label) = labels.choose().ok()?;
    let table = label.devices.as_ref()?;
    Some((label.geometry.volume_uuid, table.device_uuid, label.clone()))
}

/// Paths that may hold a volume's devices, in the order they are tried.
fn candidates(given: &Path) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    if let Some(list) = std::env::var_os(DEVICES_VARIABLE) {
        paths.extend(std::env::split_paths(&list).filter(|path| !path.as_os_str().is_empty()));
    }
    let directory = given.parent().filter(|parent| !parent.as_os_str().is_empty()).unwrap_or(Path::new("."));
    if given.is_file() {
        if let Ok(entries) = std::fs::read_dir(directory) {
            let mut files: Vec<PathBuf> = entries
                .take(DIRECTORY_ENTRIES_MAX)
                .filter_map(|entry| entry.ok())
                .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_file()))
                .map(|entry| entry.path())
                .collect();
            files.sort();
            paths.extend(files);
        }
    }
    if let Ok(partitions) = std::fs::read_to_string("/proc/partitions") {
        // "major minor #blocks name", after a header line.
        paths.extend(
            partitions
                .lines()
                .filter_map(|line| line.split_whitespace().nth(3))
                .filter(|name| *name != "name")
                .map(|name| Path::new("/dev").join(name)),
        );
    }
    paths
}

fn same_file(first: &Path, second: &Path) -> bool {
    match (std::fs::canonicalize(first), std::fs::canonicalize(second)) {
        (Ok(first), Ok(second)) => first == second,
        _ => first == second,
    }
}

impl Members<Device> {
    /// Opens the volume that the device at `path` belongs to, every device of it in `mode`
    /// (waiting at most `wait` for each lock). A device without a usable label, or with the
    /// label of a volume on one device, opens alone: reading its labels is the caller's.
    pub fn open(path: &Path, mode: OpenMode, wait: Duration) -> Result<Self, VolumeError> {
        let device = Device::open_waiting(path, mode, wait)?;
        let Some((volume_uuid, own_uuid, own_label)) = identify(&device) else {
            return Ok(Self::single(device));
        };
        let mut found: Vec<(PathBuf, [u8; 16], Label)> = vec![(path.to_path_buf(), own_uuid, own_label.clone())];
        let mut search = candidates(path).into_iter();
        let mut find = |uuid: &[u8; 16], found: &mut Vec<(PathBuf, [u8; 16], Label)>| -> Option<usize> {
            if let Some(index) = found.iter().position(|(_, device_uuid, _)| device_uuid == uuid) {
                return Some(index);
            }
            // Bounded by the candidate list.
            for candidate in search.by_ref() {
                if found.iter().any(|(known, _, _)| same_file(known, &candidate)) {
                    continue;
                }
                let Ok(probe) = Device::open(&candidate, OpenMode::ReadOnly) else { continue };
                let Some((candidate_volume, candidate_uuid, label)) = identify(&probe) else { continue };
                if candidate_volume != volume_uuid || found.iter().any(|(_, known, _)| *known == candidate_uuid) {
                    continue;
                }
                found.push((candidate, candidate_uuid, label));
                if candidate_uuid == *uuid {
                    return Some(found.len() - 1);
                }
            }
            None
        };
        // The first device's labels are the authority (SPEC.md §4.3).
        let own_table = own_label.devices.as_ref().ok_or_else(|| VolumeError::Devices {
            path: path.display().to_string(),
            reason: "its label has no device table".into(),
        })?;
        let first_uuid = own_table.devices[0].device_uuid;
        let missing = |index: usize, uuid: [u8; 16], table: &DeviceTable| VolumeError::MissingDevice {
            path: path.display().to_string(),
            index,
            device_uuid: uuid,
            first_slot: table.devices[index].first_slot,
            num_slots: table.devices[index].num_slots,
        };
        let first_index = find(&first_uuid, &mut found).ok_or_else(|| missing(0, first_uuid, own_table))?;
        let first_path = found[first_index].0.clone();
        // The device given is opened once: a second open of it would wait on its own lock.
        let mut given = Some(device);
        let first = if first_index == 0 {
            given.take().ok_or_else(|| VolumeError::Devices {
                path: path.display().to_string(),
                reason: "opened twice".into(),
            })?
        } else {
            Device::open_waiting(&first_path, mode, wait)?
        };
        let labels = read_device_labels(&first)?;
        let Ok((_, authority)) = labels.choose() else {
            return Err(VolumeError::Devices {
                path: first_path.display().to_string(),
                reason: "the first device of the volume has no usable label".into(),
            });
        };
        let authority = authority.clone();
        let Some(table) = authority.devices.clone() else {
            // The first device's label has no table: the volume is on one device again (a
            // device was removed), and the path given, when another, is no longer part of it.
            if first_index != 0 {
                return Err(VolumeError::Devices {
                    path: path.display().to_string(),
                    reason: format!("it was removed from the volume on {}", first_path.display()),
                });
            }
            return Ok(Self::single(first));
        };
        if !table.devices.iter().any(|entry| entry.device_uuid == own_uuid) {
            return Err(VolumeError::Devices {
                path: path.display().to_string(),
                reason: format!("it was removed from the volume on {}", first_path.display()),
            });
        }
        let mut devices = vec![first];
        for (index, entry) in table.devices.iter().enumerate().skip(1) {
            let position =
                find(&entry.device_uuid, &mut found).ok_or_else(|| missing(index, entry.device_uuid, &table))?;
            let device = match given.take_if(|_| position == 0) {
                Some(device) => device,
                None => Device::open_waiting(&found[position].0, mode, wait)?,
            };
            devices.push(device);
        }
        Self::assemble(devices, &authority)
    }
}

/// The label sector of `label` padded to its sector size.
pub fn label_bytes(label: &Label) -> Vec<u8> {
    let mut sector = vec![0u8; (label.geometry.sector_size as usize).max(LABEL_LEN)];
    sector[..LABEL_LEN].copy_from_slice(&label.encode());
    sector
}

/// Why a device's label does not make it the device `index` of the volume `authority` names:
/// `None` when it does.
pub fn member_label_problem(authority: &Label, index: usize, label: &Result<Label, FormatError>) -> Option<String> {
    let table = authority.devices.as_ref()?;
    let entry = table.devices.get(index)?;
    let label = match label {
        Ok(label) => label,
        Err(error) => return Some(error.to_string()),
    };
    let Some(own) = label.devices.as_ref() else { return Some("it has no device table".into()) };
    if label.geometry.volume_uuid != authority.geometry.volume_uuid {
        return Some("it names another volume".into());
    }
    if own.device_uuid != entry.device_uuid {
        return Some("it names another device".into());
    }
    if own.this_device() != Some(entry) {
        return Some("its own entry differs from the first device's table".into());
    }
    None
}
