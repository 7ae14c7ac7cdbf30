//! Joining and removing devices (`lds device add|remove`, SPEC.md §4.3), offline.
//!
//! Adding device D, each step flushed before the next:
//! 1. D's labels (backup, then primary): the volume's new table, its own uuid. Nothing reads
//!    them yet: the first device's labels do not name D.
//! 2. The first device's backup label with the new table and `generation + 1`: the switch (a
//!    reader takes the copy with the higher generation, SPEC.md §4.2); then its primary.
//! 3. Each instance switches to a base version replicating the new geometry (until then the
//!    engine allocates only slots both geometries hold, so D's slots wait for this step).
//!
//! Removing device D:
//! 1. Every chunk in D's slots is copied to slots of the other devices and each instance
//!    switches to a base version of the same tree referencing the copies (as `lds resize`
//!    moves chunks, SPEC.md §14); the old table still holds.
//! 2. The first device's labels (backup, then primary) with the table without D and
//!    `generation + 1`: the switch. With only the first device left, the label is a one-device
//!    label again (feature `multi_device` cleared).
//! 3. Each instance switches to a base version replicating the new geometry.
//! 4. D's labels are zeroed: it is a free device again.
//!
//! A crash leaves the old volume or the new one with every committed key, and the same
//! command run again finishes it (or, for a device already removed, zeroes its labels).

use lds_check::Code;
use lds_format::device_table::{member_layout, volume_len_for, DeviceEntry, DeviceTable, DEVICES_COUNT_MAX};
use lds_format::geometry::Geometry;
use lds_format::label::Label;
use lds_volume::BlockDevice;
use lds_volume::{labels::read_device_labels, Members};

use crate::resize::{
    label_of, moves_off, rebase_all, refuse_pending, refuse_problems, slots_used, versions, Move, ResizeError,
};
use crate::{write_all, PlannedWrite, Written};

/// The uuids a join gives: the new device's, and the first device's when the volume had one
/// device until now (it has no uuid yet).
#[derive(Debug, Clone, Copy)]
pub struct JoinUuids {
    /// The first device's uuid, used when the volume is on one device.
    pub first: [u8; 16],
    /// The joining device's uuid.
    pub joining: [u8; 16],
}

/// What a device change will do or did.
#[derive(Debug, Clone)]
pub struct DevicePlan {
    /// The first device's label now.
    pub old: Label,
    /// The first device's label after the change.
    pub new: Label,
    /// The place of the device added (in `new`'s table) or removed (in `old`'s).
    pub index: usize,
    /// Chunks and value chunks to move off a device being removed.
    pub moves: Vec<Move>,
    /// Instances whose base version does not replicate the new geometry yet.
    pub rebase: Vec<u32>,
    /// The labels already name the change (an earlier run was interrupted): only the steps
    /// after the switch are left.
    pub finishing: bool,
}

impl DevicePlan {
    /// Bytes of chunk data to copy.
    pub fn bytes_to_copy(&self) -> u64 {
        self.moves.iter().map(|moved| moved.bytes).sum()
    }

    /// Nothing is left to do.
    pub fn done(&self) -> bool {
        self.old == self.new && self.rebase.is_empty() && self.moves.is_empty()
    }
}

fn name(device: &dyn BlockDevice) -> String {
    device.name().display().to_string()
}

fn refused(device: &dyn BlockDevice, reason: String) -> ResizeError {
    ResizeError::Refused { device: name(device), reason }
}

/// The label of the first device with `table` (or none) and `generation`, its geometry's slot
/// count and length following the table (SPEC.md §4.3).
fn relabel(label: &Label, table: Option<DeviceTable>, generation: u64) -> Label {
    let mut next = label.clone().with_devices(None);
    next.generation = generation;
    match table {
        Some(table) => {
            let num_slots = table.devices.iter().map(DeviceEntry::end_slot).max().unwrap_or(0);
            next.geometry =
                Geometry { num_slots, volume_len: volume_len_for(&label.geometry, num_slots), ..label.geometry };
            next.with_devices(Some(table))
        }
        None => {
            // Back on one device: its own slots and length.
            let first = label.devices.as_ref().and_then(|table| table.devices.first().copied());
            if let Some(first) = first {
                next.geometry = Geometry { num_slots: first.num_slots, volume_len: first.len_device, ..label.geometry };
            }
            next
        }
    }
}

/// The same label as it sits on device `uuid` of its table.
fn on_device(label: &Label, uuid: [u8; 16]) -> Label {
    let mut label = label.clone();
    if let Some(table) = &mut label.devices {
        table.device_uuid = uuid;
    }
    label
}

/// Instances whose base version does not replicate `label`'s geometry and generation.
fn lagging(volume: &dyn BlockDevice, label: &Label) -> Result<Vec<u32>, ResizeError> {
    Ok(versions(volume, &label.geometry)?
        .iter()
        .filter(|(source, _)| {
            source.base_geometry() != Some(label.geometry) || source.base_label_generation() < label.generation
        })
        .map(|(source, _)| source.instance)
        .collect())
}

/// Refuses a volume fsck finds problems in, but those a device change left half done: labels
/// of different generations (104) and device labels out of date (108).
fn gate(volume: &dyn BlockDevice) -> Result<(), ResizeError> {
    refuse_problems(volume, &[Code::LabelsGenerationsDiffer, Code::DeviceLabelInvalid])
}

/// The uuid of the device of this volume that `device`'s labels name, if they name one.
pub fn device_uuid_of(volume_uuid: &[u8; 16], device: &dyn BlockDevice) -> Result<Option<[u8; 16]>, ResizeError> {
    Ok(read_device_labels(device)?
        .choose()
        .ok()
        .filter(|(_, label)| label.geometry.volume_uuid == *volume_uuid)
        .and_then(|(_, label)| label.devices.as_ref().map(|table| table.device_uuid)))
}

/// Plans joining a device of `joining_len` bytes whose labels name it device `joining_uuid`
/// of this volume, if they do (an earlier run got past the switch when the table lists it).
pub fn plan_add(
    volume: &dyn BlockDevice,
    joining_len: u64,
    joining_uuid: Option<[u8; 16]>,
    uuids: JoinUuids,
) -> Result<DevicePlan, ResizeError> {
    let old = label_of(volume)?;
    let geometry = old.geometry;
    let joined = joining_uuid.and_then(|uuid| old.devices.as_ref().and_then(|table| table.index_of(&uuid)));
    if let Some(index) = joined.filter(|&index| index > 0) {
        let new = old.clone();
        let rebase = lagging(volume, &new)?;
        return Ok(DevicePlan { old: old.clone(), new, index, moves: Vec::new(), rebase, finishing: true });
    }
    let mut table = old.devices.clone().unwrap_or_else(|| DeviceTable {
        device_uuid: uuids.first,
        devices: vec![DeviceEntry {
            device_uuid: uuids.first,
            first_slot: 0,
            num_slots: geometry.num_slots,
            len_device: geometry.volume_len,
        }],
    });
    if table.devices.len() >= DEVICES_COUNT_MAX {
        return Err(refused(
            volume,
            format!("the volume has {DEVICES_COUNT_MAX} devices, the most it can (SPEC.md §16)"),
        ));
    }
    if table.index_of(&uuids.joining).is_some() || uuids.joining == [0; 16] {
        return Err(refused(volume, "the joining device's uuid is taken".into()));
    }
    let Some((num_slots, len_device)) = member_layout(&geometry, joining_len) else {
        return Err(refused(
            volume,
            format!(
                "the joining device's {joining_len} bytes hold no slot of {} bytes after its label and before its backup label",
                geometry.slot_size
            ),
        ));
    };
    // The first gap between devices' slots that fits (a removed device's), else the end.
    let mut windows: Vec<(u64, u64)> = table.devices.iter().map(|entry| (entry.first_slot, entry.end_slot())).collect();
    windows.sort_unstable();
    let first_slot =
        windows.windows(2).find(|pair| pair[1].0 - pair[0].1 >= num_slots).map_or(geometry.num_slots, |pair| pair[0].1);
    table.devices.push(DeviceEntry { device_uuid: uuids.joining, first_slot, num_slots, len_device });
    table.device_uuid = table.devices[0].device_uuid;
    let new = relabel(&old, Some(table), old.generation + 1);
    let rebase = (0..geometry.instance_count).collect();
    let index = new.devices.as_ref().map_or(0, |table| table.devices.len() - 1);
    Ok(DevicePlan { old, new, index, moves: Vec::new(), rebase, finishing: false })
}

/// The writes that make the first device's labels `label` (the backup first: the switch).
fn first_device_labels(volume: &dyn BlockDevice, label: &Label) -> Vec<PlannedWrite> {
    let bytes = lds_volume::members::label_bytes(label);
    let backup = PlannedWrite {
        offset: label.ofs_backup_label_on_device(),
        bytes: bytes.clone(),
        structure: format!("backup label of {} (generation {}): the switch", name(volume), label.generation),
    };
    let primary = PlannedWrite { offset: 0, bytes, structure: format!("primary label of {}", name(volume)) };
    vec![backup, primary]
}

/// Writes each label copy of the first device that differs from `label`.
fn settle_first_device<D: BlockDevice>(
    volume: &Members<D>,
    label: &Label,
    done: &mut Vec<Written>,
) -> Result<(), ResizeError> {
    let first: &dyn BlockDevice = volume.first();
    let labels = read_device_labels(first)?;
    let [backup, primary] = <[PlannedWrite; 2]>::try_from(first_device_labels(first, label))
        .map_err(|_| ResizeError::Refused { device: name(first), reason: "label writes".into() })?;
    // The backup before the primary: the copy with the higher generation is the volume's.
    if labels.backup.as_ref().ok() != Some(label) {
        write_all(first, &[backup], done)?;
    }
    if labels.primary.as_ref().ok() != Some(label) {
        write_all(first, &[primary], done)?;
    }
    Ok(())
}

/// Joins `joining` to the volume (opened for writing by the caller with every device's lock,
/// `joining`'s included), or finishes an interrupted join. Returns the plan and the writes.
pub fn add_device<D: BlockDevice>(
    volume: &Members<D>,
    joining: &dyn BlockDevice,
    uuids: JoinUuids,
) -> Result<(DevicePlan, Vec<Written>), ResizeError> {
    gate(volume)?;
    let volume_uuid = label_of(volume)?.geometry.volume_uuid;
    let plan = plan_add(volume, joining.len(), device_uuid_of(&volume_uuid, joining)?, uuids)?;
    let mut done = Vec::new();
    if !plan.finishing {
        // 1. The joining device's labels, where nothing reads them yet.
        let label = on_device(&plan.new, uuids.joining);
        let bytes = lds_volume::members::label_bytes(&label);
        let backup = PlannedWrite {
            offset: label.ofs_backup_label_on_device(),
            bytes: bytes.clone(),
            structure: format!("backup label of {} (joining)", name(joining)),
        };
        write_all(joining, &[backup], &mut done)?;
        write_all(
            joining,
            &[PlannedWrite { offset: 0, bytes, structure: format!("primary label of {}", name(joining)) }],
            &mut done,
        )?;
    }
    // 2. The switch, then the other copy.
    settle_first_device(volume, &plan.new, &mut done)?;
    // 3. Base versions of the new geometry (no chunk moves: every slot stays usable).
    let geometry = plan.new.geometry;
    if !lagging(volume, &plan.new)?.is_empty() {
        rebase_all(volume, &geometry, &|slot| plan.old.slot_present(slot), &geometry, plan.new.generation, &mut done)?;
    }
    Ok((plan, done))
}

/// Plans removing device `index` (1 or more) of the volume.
pub fn plan_remove(volume: &dyn BlockDevice, index: usize) -> Result<DevicePlan, ResizeError> {
    let old = label_of(volume)?;
    let Some(table) = old.devices.clone() else {
        return Err(refused(volume, "the volume has one device: nothing to remove".into()));
    };
    if index == 0 {
        return Err(refused(
            volume,
            "the first device holds the labels and every log and cannot be removed (SPEC.md §4.3)".into(),
        ));
    }
    let Some(&entry) = table.devices.get(index) else {
        return Err(refused(volume, format!("the volume has no device {index}")));
    };
    let all = versions(volume, &old.geometry)?;
    let moves = moves_off(&all, &|slot| entry.holds(slot));
    refuse_pending(volume, &all, &|slot| entry.holds(slot))?;
    let used = slots_used(&all);
    let free_elsewhere = (0..old.geometry.num_slots)
        .filter(|&slot| old.slot_present(slot) && !entry.holds(slot) && !used.contains(&slot))
        .count() as u64;
    let to_move: u64 = moves.iter().map(|moved| moved.slots.len() as u64).sum();
    if to_move > free_elsewhere {
        return Err(refused(
            volume,
            format!(
                "device {index} holds {to_move} slots of chunks and the other devices have {free_elsewhere} free: add a device first"
            ),
        ));
    }
    let mut remaining = table.clone();
    remaining.devices.remove(index);
    remaining.device_uuid = remaining.devices[0].device_uuid;
    let remaining = (remaining.devices.len() > 1).then_some(remaining);
    let new = relabel(&old, remaining, old.generation + 1);
    let rebase = (0..old.geometry.instance_count).collect();
    Ok(DevicePlan { old, new, index, moves, rebase, finishing: false })
}

/// Removes device `index` of the volume (opened for writing by the caller with every device's
/// lock), moving its chunks to the other devices first. Returns the plan and the writes.
pub fn remove_device<D: BlockDevice>(
    volume: &Members<D>,
    index: usize,
) -> Result<(DevicePlan, Vec<Written>), ResizeError> {
    gate(volume)?;
    let plan = plan_remove(volume, index)?;
    let mut done = Vec::new();
    let old = &plan.old.geometry;
    let leaving = plan.old.devices.as_ref().and_then(|table| table.devices.get(index).copied());
    let Some(leaving) = leaving else { return Err(refused(volume, format!("the volume has no device {index}"))) };
    let usable = |slot: u64| plan.old.slot_present(slot) && !leaving.holds(slot);
    // 1. Chunks off the device, under the old table.
    if !plan.moves.is_empty() {
        rebase_all(volume, old, &usable, old, plan.old.generation, &mut done)?;
    }
    // 2. The switch.
    settle_first_device(volume, &plan.new, &mut done)?;
    // 3. Base versions of the new geometry.
    let geometry = plan.new.geometry;
    rebase_all(volume, &geometry, &|slot| plan.new.slot_present(slot), &geometry, plan.new.generation, &mut done)?;
    // 4. The device is free again.
    let sector = old.sector() as usize;
    let zeros = vec![0u8; sector];
    let device = &volume.devices()[index];
    let wipe = [0, leaving.len_device - old.sector()].map(|offset| PlannedWrite {
        offset,
        bytes: zeros.clone(),
        structure: format!("label of {} (removed): zeroed", device.name().display()),
    });
    write_all(device, &wipe, &mut done)?;
    Ok((plan, done))
}

/// Finishes the removal of a device the first device's table no longer lists (an interrupted
/// `remove` got past its switch): the first device's other label copy, the base versions of
/// the new geometry, and the device's labels zeroed (when a crash left them). A device with
/// no label of this volume (its labels zeroed already) has nothing left to zero. Refuses a
/// device of another volume, or one the table lists.
pub fn finish_removal<D: BlockDevice>(
    volume: &Members<D>,
    device: &dyn BlockDevice,
) -> Result<Vec<Written>, ResizeError> {
    let label = label_of(volume)?;
    let labels = read_device_labels(device)?;
    let stale = match labels.choose() {
        Ok((_, stale)) if stale.geometry.volume_uuid != label.geometry.volume_uuid => {
            return Err(refused(device, "it is a device of another volume".into()));
        }
        Ok((_, stale)) => {
            let own = stale.devices.as_ref().map(|table| table.device_uuid);
            let Some(own) = own else {
                return Err(refused(device, "it holds this volume's one-device label: it is the volume".into()));
            };
            if label.devices.as_ref().is_some_and(|table| table.index_of(&own).is_some()) {
                return Err(refused(
                    device,
                    "it is a device of the volume; lds device remove moves its chunks first".into(),
                ));
            }
            Some(stale.clone())
        }
        Err(_) => None,
    };
    gate(volume)?;
    let mut done = Vec::new();
    settle_first_device(volume, &label, &mut done)?;
    if !lagging(volume, &label)?.is_empty() {
        let geometry = label.geometry;
        rebase_all(volume, &geometry, &|slot| label.slot_present(slot), &geometry, label.generation, &mut done)?;
    }
    if let Some(stale) = stale {
        let sector = stale.geometry.sector();
        let zeros = vec![0u8; sector as usize];
        let wipe = [0, stale.ofs_backup_label_on_device()].map(|offset| PlannedWrite {
            offset,
            bytes: zeros.clone(),
            structure: format!("label of {} (removed): zeroed", name(device)),
        });
        write_all(device, &wipe, &mut done)?;
    }
    Ok(done)
}
