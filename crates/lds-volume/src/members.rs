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

use lds_format::device_table::{DeviceTable, Extent};
use lds_format::label::{Label, LabelPair, LABEL_LEN};
use lds_format::FormatError;

use crate::block::{Access, BlockDevice, DeviceError, PageCache, ReadAt};
use crate::error::VolumeError;
use crate::identity::{identity, Identity};
use crate::labels::{read_device_labels, read_label_at};
use crate::os_device::{Device, OpenMode};

/// Environment variable listing more paths to look for a volume's devices in.
pub const DEVICES_VARIABLE: &str = "LDS_DEVICES";

/// Directory entries read at most when looking for a volume's devices beside the path given.
const DIRECTORY_ENTRIES_MAX: usize = 10_000;

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

impl<D: BlockDevice> Members<D> {
    /// The one device of a volume on one device, as the page-cache operations reach it.
    fn only_device(&self) -> Option<&dyn BlockDevice> {
        self.layout.is_none().then(|| &self.devices[0] as &dyn BlockDevice)
    }
}

impl<D: BlockDevice> ReadAt for Members<D> {
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
    fn read_bulk(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        if self.layout.is_none() {
            return self.devices[0].read_bulk(offset, buffer);
        }
        self.read_at(offset, buffer)
    }
    fn member(&self, index: usize) -> Option<&dyn ReadAt> {
        match &self.layout {
            Some(_) => self.devices.get(index).map(|device| device as &dyn ReadAt),
            None => self.devices[0].member(index),
        }
    }
}

impl<D: BlockDevice> BlockDevice for Members<D> {
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
    fn page_cache(&self) -> Option<&dyn PageCache> {
        Some(self)
    }
}

/// The page-cache operations of the devices: on one device, that device's own; on several, by
/// the pieces of the range where each device's own can serve (a mapped read within one
/// device, dropping pages), else the plain operation.
impl<D: BlockDevice> PageCache for Members<D> {
    fn write_direct(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        // Several devices: through `write_at`, which marks what it wrote.
        match self.only_device() {
            Some(device) => device.write_direct(offset, bytes),
            None => self.write_at(offset, bytes),
        }
    }
    fn read_mapped(&self, offset: u64, len: u64, into: &mut Vec<u8>, access: Access) -> Result<(), DeviceError> {
        // One device (no layout) is one piece too.
        match self.pieces(offset, len).as_deref() {
            Ok([(device, device_offset, _, _)]) => {
                (&self.devices[*device] as &dyn BlockDevice).read_mapped(*device_offset, len, into, access)
            }
            _ => {
                *into = self.read_vec(offset, len)?;
                Ok(())
            }
        }
    }
    fn drop_cached(&self, offset: u64, len: u64) {
        for (device, device_offset, _, piece) in self.pieces(offset, len).unwrap_or_default() {
            (&self.devices[device] as &dyn BlockDevice).drop_cached(device_offset, piece as u64);
        }
    }
    fn flush_except(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        // Several devices: all of them (the range could span devices).
        match self.only_device() {
            Some(device) => device.flush_except(offset, len),
            None => self.flush(),
        }
    }
}

/// The label copies of every device but the first of the volume that `volume` presents, when
/// it presents several (`ReadAt::member`), at the places `label`'s device table gives them
/// (SPEC.md §4.3); empty for a volume on one device.
pub fn member_labels(volume: &(impl ReadAt + ?Sized), label: &Label) -> Vec<MemberLabels> {
    let Some(table) = &label.devices else { return Vec::new() };
    let sector = label.geometry.sector();
    // Bounded by the table's entries (at most DEVICES_COUNT_MAX).
    table
        .devices
        .iter()
        .enumerate()
        .skip(1)
        .filter_map(|(index, entry)| {
            let device = volume.member(index)?;
            let ofs_backup_label = entry.len_device.saturating_sub(sector);
            let labels = read_label_at(device, 0)
                .and_then(|primary| Ok(LabelPair { primary, backup: read_label_at(device, ofs_backup_label)? }));
            Some(MemberLabels { index, name: device.name().to_path_buf(), labels, ofs_backup_label })
        })
        .collect()
}

/// The volume and device a device's labels name: (volume uuid, device uuid, the label).
fn identify(device: &(impl ReadAt + ?Sized)) -> Option<([u8; 16], [u8; 16], Label)> {
    let labels = read_device_labels(device).ok()?;
    let (_, label) = labels.choose().ok()?;
    let table = label.devices.as_ref()?;
    Some((label.geometry.volume_uuid, table.device_uuid, label.clone()))
}

/// Paths that may hold a volume's devices, in the order they are tried, each with whether the
/// user named it (`LDS_DEVICES`).
fn candidates(given: &Path) -> Vec<(PathBuf, bool)> {
    let mut paths = Vec::new();
    if let Some(list) = std::env::var_os(DEVICES_VARIABLE) {
        paths.extend(std::env::split_paths(&list).filter(|path| !path.as_os_str().is_empty()).map(|path| (path, true)));
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
            paths.extend(files.into_iter().map(|path| (path, false)));
        }
    }
    if let Ok(partitions) = std::fs::read_to_string("/proc/partitions") {
        // "major minor #blocks name", after a header line.
        paths.extend(
            partitions
                .lines()
                .filter_map(|line| line.split_whitespace().nth(3))
                .filter(|name| *name != "name")
                .map(|name| (Path::new("/dev").join(name), false)),
        );
    }
    paths
}

/// A device whose labels name the volume being opened.
struct Claimant {
    path: PathBuf,
    identity: Option<Identity>,
    device_uuid: [u8; 16],
    label: Label,
    /// In `LDS_DEVICES`.
    listed: bool,
}

/// Every device among the candidates whose labels name `volume_uuid`, the one at `given`
/// first; paths that name the same bytes as one already found (a symlink, a loop device
/// over a file found) are left out.
fn claimants(given: &Path, own_uuid: [u8; 16], own_label: Label, volume_uuid: [u8; 16]) -> Vec<Claimant> {
    let mut found = vec![Claimant {
        path: given.to_path_buf(),
        identity: identity(given).ok(),
        device_uuid: own_uuid,
        label: own_label,
        listed: false,
    }];
    // Bounded by the candidate list (LDS_DEVICES, DIRECTORY_ENTRIES_MAX files, the kernel's
    // block devices).
    for (candidate, listed) in candidates(given) {
        let candidate_identity = identity(&candidate).ok();
        let known = found.iter_mut().find(|claimant| match (&claimant.identity, &candidate_identity) {
            (Some(known), Some(candidate)) => known.overlap(candidate).is_some(),
            _ => claimant.path == candidate,
        });
        if let Some(known) = known {
            known.listed |= listed;
            continue;
        }
        let Ok(probe) = Device::open(&candidate, OpenMode::ReadOnly) else { continue };
        let Some((candidate_volume, device_uuid, label)) = identify(&probe) else { continue };
        if candidate_volume != volume_uuid {
            continue;
        }
        found.push(Claimant { path: candidate, identity: candidate_identity, device_uuid, label, listed });
    }
    found
}

/// The one claimant of device `index` (uuid `device_uuid`): refuses two or more (a clone, or a
/// copy of a member's labels, would otherwise win by search order) unless exactly one of
/// them is listed in `LDS_DEVICES`.
fn claimant_of<'a>(
    found: &'a [Claimant],
    path: &Path,
    index: usize,
    entry: &lds_format::device_table::DeviceEntry,
) -> Result<&'a Claimant, VolumeError> {
    let all: Vec<&Claimant> = found.iter().filter(|claimant| claimant.device_uuid == entry.device_uuid).collect();
    let listed: Vec<&Claimant> = all.iter().copied().filter(|claimant| claimant.listed).collect();
    match (all.as_slice(), listed.as_slice()) {
        ([], _) => Err(VolumeError::MissingDevice {
            path: path.display().to_string(),
            index,
            device_uuid: entry.device_uuid,
            first_slot: entry.first_slot,
            num_slots: entry.num_slots,
        }),
        ([one], _) | (_, [one]) => Ok(one),
        (several, _) => Err(VolumeError::AmbiguousDevice {
            path: path.display().to_string(),
            index,
            device_uuid: entry.device_uuid,
            candidates: several.iter().map(|claimant| claimant.path.clone()).collect(),
        }),
    }
}

/// Opens `claimant`'s device in `mode` (waiting at most `wait` for its lock) and proves it is
/// the device the probe judged: the descriptor opened names the same file or block device as
/// the path did when it was probed (`fstat`, not the path again), and its labels, read again
/// now that the lock is held, are the ones probed. A path swapped or relabeled between the
/// probe and the open (another file renamed over it, a device node replaced) is refused
/// instead of written.
fn open_claimant(claimant: &Claimant, mode: OpenMode, wait: Duration) -> Result<Device, VolumeError> {
    let device = Device::open_waiting(&claimant.path, mode, wait)?;
    let changed = |what: &str| VolumeError::Devices {
        path: claimant.path.display().to_string(),
        reason: format!("{what} between the search for the volume's devices and its open; run the command again"),
    };
    let opened = device.identity().ok();
    let same = match (&claimant.identity, &opened) {
        (Some(probed), Some(opened)) => probed.same(opened),
        _ => false,
    };
    if !same {
        return Err(changed("it was replaced by another file or device"));
    }
    match identify(&device) {
        Some((_, device_uuid, label)) if device_uuid == claimant.device_uuid && label == claimant.label => Ok(device),
        _ => Err(changed("its labels changed")),
    }
}

impl Members<Device> {
    /// Opens the volume that the device at `path` belongs to, every device of it in `mode`
    /// (waiting at most `wait` for each lock). A device without a usable label, or with the
    /// label of a volume on one device, opens alone: reading its labels is the caller's.
    ///
    /// The other devices are found by their labels (module docs). Every candidate is looked
    /// at, so that two devices claiming one member are refused, naming both, instead of
    /// the first found winning (docs/safety.md); listing one in `LDS_DEVICES` chooses it.
    /// Opened for writing, every device but the first must also agree with the first
    /// device's table (its own entry as the table has it, SPEC.md §4.3): a device that
    /// cannot be proved a member is never written.
    pub fn open(path: &Path, mode: OpenMode, wait: Duration) -> Result<Self, VolumeError> {
        let device = Device::open_waiting(path, mode, wait)?;
        let Some((volume_uuid, own_uuid, own_label)) = identify(&device) else {
            return Ok(Self::single(device));
        };
        // The first device's labels are the authority (SPEC.md §4.3).
        let own_table = own_label.devices.clone().ok_or_else(|| VolumeError::Devices {
            path: path.display().to_string(),
            reason: "its label has no device table".into(),
        })?;
        let found = claimants(path, own_uuid, own_label, volume_uuid);
        let first_claimant = claimant_of(&found, path, 0, &own_table.devices[0])?;
        let first_is_given = std::ptr::eq(first_claimant, &found[0]);
        let first_path = first_claimant.path.clone();
        // The device given is opened once: a second open of it would wait on its own lock.
        let mut given = Some(device);
        let first = match given.take_if(|_| first_is_given) {
            Some(device) => device,
            None => open_claimant(first_claimant, mode, wait)?,
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
            if !first_is_given {
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
            let claimant = claimant_of(&found, path, index, entry)?;
            if mode == OpenMode::ReadWrite {
                if let Some(problem) = member_label_problem(&authority, index, &Ok(claimant.label.clone())) {
                    return Err(VolumeError::Devices {
                        path: claimant.path.display().to_string(),
                        reason: format!(
                            "it claims to be device {index} of the volume on {} but {problem}; it is not written (lds fsck reports it)",
                            first_path.display()
                        ),
                    });
                }
            }
            let device = match given.take_if(|_| std::ptr::eq(claimant, &found[0])) {
                Some(device) => device,
                None => open_claimant(claimant, mode, wait)?,
            };
            devices.push(device);
        }
        if given.is_some() {
            // The path named claims a device whose place another device was chosen for (by
            // LDS_DEVICES): it is a copy, not the volume's.
            return Err(VolumeError::Devices {
                path: path.display().to_string(),
                reason: format!(
                    "its labels claim a device of the volume on {}, but another device listed in LDS_DEVICES is that device; this one is a copy",
                    first_path.display()
                ),
            });
        }
        Self::assemble(devices, &authority)
    }
}

impl<D: BlockDevice> Members<D> {
    /// The devices a writer of this volume writes, for the line a writing command prints
    /// before its first write (docs/safety.md): `None` for a volume on one device.
    pub fn describe(&self) -> Option<String> {
        self.layout.as_ref()?;
        let names: Vec<String> = self
            .devices
            .iter()
            .enumerate()
            .map(|(index, device)| format!("{} (device {index})", device.name().display()))
            .collect();
        Some(names.join(", "))
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

#[cfg(test)]
mod tests {
    use super::*;
    use lds_format::geometry::{plan_layout, LayoutRequest};

    fn scratch(name: &str) -> PathBuf {
        let directory = std::env::temp_dir().join(format!("lds-members-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&directory);
        directory.join(name)
    }

    /// A device probed, then swapped or relabeled before its open for writing, is refused.
    #[test]
    fn a_device_changed_between_probe_and_open_is_refused() {
        let Ok(geometry) = plan_layout(&LayoutRequest { volume_len: 64 << 20, ..LayoutRequest::default() }, [7; 16])
        else {
            panic!("layout")
        };
        let label = Label::new(geometry, "probed");
        let path = scratch("member.img");
        let other = scratch("other.img");
        assert!(std::fs::write(&path, vec![0u8; 1 << 16]).is_ok());
        assert!(std::fs::write(&other, vec![0u8; 1 << 16]).is_ok());
        let claimant = |identity| Claimant {
            path: path.clone(),
            identity,
            device_uuid: [1; 16],
            label: label.clone(),
            listed: false,
        };
        let probed = claimant(identity(&path).ok());
        // Another file renamed over the path after the probe.
        assert!(std::fs::rename(&other, &path).is_ok());
        let swapped = open_claimant(&probed, OpenMode::ReadWrite, Duration::ZERO);
        assert!(
            matches!(&swapped, Err(VolumeError::Devices { reason, .. }) if reason.contains("replaced by another file")),
            "{:?}",
            swapped.err()
        );
        // The same file, but its labels are not the ones probed (here: none).
        let relabeled = open_claimant(&claimant(identity(&path).ok()), OpenMode::ReadWrite, Duration::ZERO);
        assert!(
            matches!(&relabeled, Err(VolumeError::Devices { reason, .. }) if reason.contains("labels changed")),
            "{:?}",
            relabeled.err()
        );
        let _ = std::fs::remove_file(&path);
    }
}
