//! Volumes on several devices (SPEC.md §4.3, feature `multi_device`, format 1.2): the device
//! table every label of such a volume carries, and the map from volume offsets (the single
//! address space every other structure is laid out in) to device offsets.

use crate::codec::{Reader, Writer};
use crate::error::FormatError;
use crate::geometry::Geometry;

/// Most devices a volume spans (SPEC.md §16): the table fills the label's 300 spare bytes.
pub const DEVICES_COUNT_MAX: usize = 7;
/// Bytes of one device entry.
pub const DEVICE_ENTRY_LEN: usize = 40;
/// Bytes of the device table in the label.
pub const DEVICE_TABLE_LEN: usize = 16 + 4 + DEVICES_COUNT_MAX * DEVICE_ENTRY_LEN;
const _: () = assert!(DEVICE_TABLE_LEN == 300);

/// Where a member device (any device but the first) keeps its first slot: `min(1 MiB,
/// slot_size)`, so that slots are aligned for direct I/O as on the first device (SPEC.md §4.3).
pub fn member_ofs_slot_area(geometry: &Geometry) -> u64 {
    geometry.slot_size.min(1 << 20)
}

/// The volume length of a multi-device volume: the address space ends right after the last
/// slot with the backup label's sector (SPEC.md §4.3).
pub fn volume_len_for(geometry: &Geometry, num_slots: u64) -> u64 {
    geometry.ofs_slot_area + num_slots * geometry.slot_size + geometry.sector()
}

/// One device of a volume (SPEC.md §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DeviceEntry {
    /// Random when the device joined (for the first device: when the volume first gained a
    /// second one); its labels repeat it.
    pub device_uuid: [u8; 16],
    /// The volume's slot number of the device's first slot.
    pub first_slot: u64,
    /// Slots the device holds.
    pub num_slots: u64,
    /// Bytes of the device the volume uses; its backup label is the last sector of them.
    pub len_device: u64,
}

impl DeviceEntry {
    /// One past the device's last slot number.
    pub fn end_slot(&self) -> u64 {
        self.first_slot + self.num_slots
    }

    /// True when the device holds `slot`.
    pub fn holds(&self, slot: u64) -> bool {
        (self.first_slot..self.end_slot()).contains(&slot)
    }
}

/// The device table (SPEC.md §4.3): every device of the volume, and which one the label that
/// carries it sits on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeviceTable {
    /// The uuid of the device this copy of the label is on.
    pub device_uuid: [u8; 16],
    /// The devices, the first one (labels' authority, every log, slots from 0) first.
    pub devices: Vec<DeviceEntry>,
}

/// A run of volume offsets held by one device at consecutive device offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Volume offset of its first byte.
    pub ofs_volume: u64,
    /// Bytes.
    pub len: u64,
    /// Index of the device in the table.
    pub device: usize,
    /// Device offset of its first byte.
    pub ofs_device: u64,
}

impl DeviceTable {
    /// Encodes the 300 bytes of SPEC.md §4.3.
    pub fn encode(&self, writer: &mut Writer) {
        writer.bytes(&self.device_uuid).u32(self.devices.len() as u32);
        for entry in &self.devices {
            writer.bytes(&entry.device_uuid).u64(entry.first_slot).u64(entry.num_slots).u64(entry.len_device);
        }
        writer.zeros((DEVICES_COUNT_MAX - self.devices.len().min(DEVICES_COUNT_MAX)) * DEVICE_ENTRY_LEN);
    }

    /// Decodes the 300 bytes of SPEC.md §4.3 (checked against the geometry by `validate`).
    pub fn decode(reader: &mut Reader<'_>) -> Result<Self, FormatError> {
        let offset = reader.offset();
        let device_uuid = reader.array()?;
        let num_devices = reader.u32()?;
        if num_devices == 0 || num_devices as usize > DEVICES_COUNT_MAX {
            return Err(FormatError::invalid(
                reader.structure(),
                "num_devices",
                offset + 16,
                format!("{num_devices} is not from 1 to {DEVICES_COUNT_MAX}"),
            ));
        }
        let mut devices = Vec::with_capacity(num_devices as usize);
        for _ in 0..num_devices {
            devices.push(DeviceEntry {
                device_uuid: reader.array()?,
                first_slot: reader.u64()?,
                num_slots: reader.u64()?,
                len_device: reader.u64()?,
            });
        }
        reader.reserved((DEVICES_COUNT_MAX - num_devices as usize) * DEVICE_ENTRY_LEN)?;
        Ok(Self { device_uuid, devices })
    }

    /// Checks the invariants of SPEC.md §4.3 against the label's geometry; `offset` names
    /// where the table was read.
    pub fn validate(&self, geometry: &Geometry, offset: u64) -> Result<(), FormatError> {
        const S: &str = "device table";
        let fail = |field: &'static str, reason: String| Err(FormatError::invalid(S, field, offset, reason));
        let sector = geometry.sector();
        let Some(first) = self.devices.first() else { return fail("num_devices", "0 devices".into()) };
        if first.first_slot != 0 {
            return fail("first_slot", format!("the first device starts at slot {}, not 0", first.first_slot));
        }
        let first_needs = geometry.ofs_slot_area.saturating_add(first.num_slots.saturating_mul(geometry.slot_size));
        let member_start = member_ofs_slot_area(geometry);
        let mut windows: Vec<(u64, u64)> = Vec::new();
        for (index, entry) in self.devices.iter().enumerate() {
            if entry.device_uuid == [0; 16] {
                return fail("device_uuid", format!("device {index} has the nil uuid"));
            }
            if self.devices[..index].iter().any(|other| other.device_uuid == entry.device_uuid) {
                return fail("device_uuid", format!("device {index} repeats the uuid of an earlier device"));
            }
            if entry.num_slots == 0 {
                return fail("num_slots", format!("device {index} holds no slot"));
            }
            let Some(end) = entry.first_slot.checked_add(entry.num_slots) else {
                return fail("num_slots", format!("device {index}: slot numbers overflow"));
            };
            if end > geometry.num_slots {
                return fail("num_slots", format!("device {index} holds slots up to {end}, past num_slots"));
            }
            if windows.iter().any(|&(start, stop)| entry.first_slot < stop && start < end) {
                return fail("first_slot", format!("device {index}'s slots overlap another device's"));
            }
            windows.push((entry.first_slot, end));
            let needs = if index == 0 {
                first_needs
            } else {
                member_start.saturating_add(entry.num_slots.saturating_mul(geometry.slot_size))
            };
            if entry.len_device % sector != 0 || entry.len_device < needs.saturating_add(sector) {
                return fail(
                    "len_device",
                    format!(
                        "device {index}: {} bytes is not a multiple of the sector size holding its slots and its backup label",
                        entry.len_device
                    ),
                );
            }
        }
        if windows.iter().map(|&(_, end)| end).max() != Some(geometry.num_slots) {
            return fail("num_slots", "no device holds the volume's last slot".into());
        }
        if geometry.volume_len != volume_len_for(geometry, geometry.num_slots) {
            return fail(
                "volume_len",
                format!("{} is not the end of the last slot plus one sector", geometry.volume_len),
            );
        }
        if self.index_of(&self.device_uuid).is_none() {
            return fail("device_uuid", "the label's own device is not in its table".into());
        }
        Ok(())
    }

    /// The index of the device with `uuid`.
    pub fn index_of(&self, uuid: &[u8; 16]) -> Option<usize> {
        self.devices.iter().position(|entry| entry.device_uuid == *uuid)
    }

    /// The entry of the device this label is on.
    pub fn this_device(&self) -> Option<&DeviceEntry> {
        self.index_of(&self.device_uuid).map(|index| &self.devices[index])
    }

    /// The index of the device holding `slot`; `None` for a slot of no device (a hole left
    /// by a removed device).
    pub fn device_of_slot(&self, slot: u64) -> Option<usize> {
        self.devices.iter().position(|entry| entry.holds(slot))
    }

    /// Device offset of the first slot of device `index`.
    pub fn ofs_slot_area_of(&self, geometry: &Geometry, index: usize) -> u64 {
        if index == 0 {
            geometry.ofs_slot_area
        } else {
            member_ofs_slot_area(geometry)
        }
    }

    /// The volume's address space as extents, in volume order: the first device's labels,
    /// logs and slots; each device's slots; the first device's backup label (SPEC.md §4.3).
    pub fn extents(&self, geometry: &Geometry) -> Vec<Extent> {
        let mut extents = Vec::new();
        let slot_size = geometry.slot_size;
        for (index, entry) in self.devices.iter().enumerate() {
            let ofs_volume = geometry.slot_offset(entry.first_slot);
            let (ofs_volume, ofs_device) =
                if index == 0 { (0, 0) } else { (ofs_volume, member_ofs_slot_area(geometry)) };
            let end = geometry.slot_offset(entry.end_slot());
            extents.push(Extent { ofs_volume, len: end - ofs_volume, device: index, ofs_device });
        }
        if let Some(first) = self.devices.first() {
            extents.push(Extent {
                ofs_volume: geometry.volume_len - geometry.sector(),
                len: geometry.sector(),
                device: 0,
                ofs_device: first.len_device - geometry.sector(),
            });
        }
        debug_assert!(slot_size > 0);
        extents.sort_by_key(|extent| extent.ofs_volume);
        extents
    }
}

/// A new device's place in the volume: where its slots start, how many it holds, and the
/// bytes of it the volume uses (SPEC.md §4.3). `None` when it holds no slot.
pub fn member_layout(geometry: &Geometry, device_len: u64) -> Option<(u64, u64)> {
    let sector = geometry.sector();
    let start = member_ofs_slot_area(geometry);
    let room = (device_len / sector * sector).checked_sub(start)?.checked_sub(sector)?;
    let num_slots = room / geometry.slot_size;
    (num_slots > 0).then(|| (num_slots, start + num_slots * geometry.slot_size + sector))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::{plan_layout, LayoutRequest};

    fn geometry() -> Geometry {
        plan_layout(&LayoutRequest { volume_len: 64 << 20, ..LayoutRequest::default() }, [7; 16]).expect("layout")
    }

    /// The geometry of `base` with a second device of `slots` slots after its own.
    fn two_devices(base: &Geometry, slots: u64) -> (Geometry, DeviceTable) {
        let first =
            DeviceEntry { device_uuid: [1; 16], first_slot: 0, num_slots: base.num_slots, len_device: base.volume_len };
        let len_device = member_ofs_slot_area(base) + slots * base.slot_size + base.sector();
        let second = DeviceEntry { device_uuid: [2; 16], first_slot: base.num_slots, num_slots: slots, len_device };
        let num_slots = base.num_slots + slots;
        let geometry = Geometry { num_slots, volume_len: volume_len_for(base, num_slots), ..*base };
        (geometry, DeviceTable { device_uuid: [2; 16], devices: vec![first, second] })
    }

    #[test]
    fn round_trip_and_valid() {
        let (geometry, table) = two_devices(&geometry(), 10);
        let mut writer = Writer::new();
        table.encode(&mut writer);
        assert_eq!(writer.len(), DEVICE_TABLE_LEN);
        let bytes = writer.into_bytes();
        let decoded = DeviceTable::decode(&mut Reader::new(&bytes, "label", 0));
        assert_eq!(decoded.as_ref().ok(), Some(&table));
        assert_eq!(table.validate(&geometry, 0), Ok(()));
    }

    #[test]
    fn extents_cover_the_address_space_in_order() {
        let base = geometry();
        let (geometry, table) = two_devices(&base, 10);
        let extents = table.extents(&geometry);
        assert_eq!(extents.len(), 3);
        assert_eq!(extents[0].ofs_volume, 0);
        assert_eq!(extents[0].len, base.slot_offset(base.num_slots));
        assert_eq!(extents[1].ofs_volume, extents[0].len);
        assert_eq!(extents[1].device, 1);
        assert_eq!(extents[1].ofs_device, member_ofs_slot_area(&base));
        assert_eq!(extents[2].ofs_volume + extents[2].len, geometry.volume_len);
        assert_eq!(extents[2].ofs_device, base.volume_len - base.sector());
        assert_eq!(table.device_of_slot(base.num_slots + 9), Some(1));
        assert_eq!(table.device_of_slot(base.num_slots + 10), None);
    }

    #[test]
    fn broken_tables_are_refused() {
        let (geometry, table) = two_devices(&geometry(), 10);
        let mut overlap = table.clone();
        overlap.devices[1].first_slot -= 1;
        assert!(overlap.validate(&geometry, 0).is_err());
        let mut short = table.clone();
        short.devices[1].len_device -= geometry.sector();
        assert!(short.validate(&geometry, 0).is_err());
        let mut stranger = table.clone();
        stranger.device_uuid = [9; 16];
        assert!(stranger.validate(&geometry, 0).is_err());
        let mut twice = table.clone();
        twice.devices[1].device_uuid = [1; 16];
        assert!(twice.validate(&geometry, 0).is_err());
        let longer = Geometry { volume_len: geometry.volume_len + geometry.sector(), ..geometry };
        assert!(table.validate(&longer, 0).is_err());
        let mut hole = table;
        hole.devices[1].first_slot += 1;
        assert!(hole.validate(&geometry, 0).is_err(), "the last slot must be held by a device");
    }

    #[test]
    fn a_member_holds_what_fits_before_its_backup_label() {
        let base = geometry();
        let len = member_ofs_slot_area(&base) + 3 * base.slot_size + base.sector();
        assert_eq!(member_layout(&base, len), Some((3, len)));
        assert_eq!(member_layout(&base, len + base.sector() - 1), Some((3, len)));
        assert_eq!(member_layout(&base, len - 1), Some((2, len - base.slot_size)));
        assert_eq!(member_layout(&base, base.slot_size), None);
    }
}
