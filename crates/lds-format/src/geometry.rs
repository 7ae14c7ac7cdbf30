//! Where every area of a volume lies (SPEC.md §3, §4.1): the geometry every label carries,
//! the limits it keeps, the log areas of each instance, and the layout mkfs plans.

use crate::codec::{Reader, Writer};
use crate::error::FormatError;

/// Bytes of the geometry structure.
pub const GEOMETRY_LEN: usize = 96;
/// Reserved bytes at the end of the geometry.
const GEOMETRY_RESERVED_LEN: usize = 8;
/// Smallest sector size, SPEC.md §2.
pub const SECTOR_SIZE_MIN: u32 = 512;
/// Largest sector size, SPEC.md §2.
pub const SECTOR_SIZE_MAX: u32 = 65536;
/// Default sector size, SPEC.md §2.
pub const SECTOR_SIZE_DEFAULT: u32 = 4096;
/// Smallest slot, SPEC.md §16.
pub const SLOT_SIZE_MIN: u64 = 64 * 1024;
/// Largest slot, SPEC.md §16 (in-slot offsets are u32).
pub const SLOT_SIZE_MAX: u64 = 1 << 30;
/// Fewest slots a volume may have, SPEC.md §3.
pub const SLOTS_COUNT_MIN: u64 = 4;
/// Most instances, SPEC.md §16.
pub const INSTANCES_COUNT_MAX: u32 = 64;
/// A log area holds at least this many sectors, SPEC.md §3.
pub const LOG_AREA_SECTORS_MIN: u64 = 16;

/// Where every area of the volume lies (SPEC.md §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Geometry {
    /// Random at mkfs; repeated in every log object and chunk footer.
    pub volume_uuid: [u8; 16],
    /// The atomic write unit.
    pub sector_size: u32,
    /// Number of instances (trees).
    pub instance_count: u32,
    /// Bytes of the device the volume uses.
    pub volume_len: u64,
    /// Offset of instance 0's version log.
    pub ofs_version_log: u64,
    /// Bytes of each instance's version log.
    pub len_version_log: u64,
    /// Offset of instance 0's backup log.
    pub ofs_backup_log: u64,
    /// Bytes of each instance's backup log.
    pub len_backup_log: u64,
    /// Offset of slot 0.
    pub ofs_slot_area: u64,
    /// Bytes of one slot.
    pub slot_size: u64,
    /// Number of slots.
    pub num_slots: u64,
}

/// Which log area of an instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogKind {
    /// The version log (base and delta versions, compaction journal).
    Version,
    /// The backup log (write-ahead log).
    Backup,
}

impl LogKind {
    /// The `log_kind` byte of SPEC.md §5.
    pub fn code(self) -> u8 {
        match self {
            Self::Version => 1,
            Self::Backup => 2,
        }
    }

    /// A name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Version => "version log",
            Self::Backup => "backup log",
        }
    }
}

impl Geometry {
    /// Encodes the 96 bytes of SPEC.md §4.1.
    pub fn encode(&self, writer: &mut Writer) {
        writer
            .bytes(&self.volume_uuid)
            .u32(self.sector_size)
            .u32(self.instance_count)
            .u64(self.volume_len)
            .u64(self.ofs_version_log)
            .u64(self.len_version_log)
            .u64(self.ofs_backup_log)
            .u64(self.len_backup_log)
            .u64(self.ofs_slot_area)
            .u64(self.slot_size)
            .u64(self.num_slots)
            .zeros(GEOMETRY_RESERVED_LEN);
    }

    /// Decodes the 96 bytes of SPEC.md §4.1 (without checking invariants).
    pub fn decode(reader: &mut Reader<'_>) -> Result<Self, FormatError> {
        Ok(Self {
            volume_uuid: reader.array()?,
            sector_size: reader.u32()?,
            instance_count: reader.u32()?,
            volume_len: reader.u64()?,
            ofs_version_log: reader.u64()?,
            len_version_log: reader.u64()?,
            ofs_backup_log: reader.u64()?,
            len_backup_log: reader.u64()?,
            ofs_slot_area: reader.u64()?,
            slot_size: reader.u64()?,
            num_slots: {
                let num_slots = reader.u64()?;
                reader.reserved(GEOMETRY_RESERVED_LEN)?;
                num_slots
            },
        })
    }

    /// Checks the invariants of SPEC.md §3. `offset` names where the geometry was read.
    pub fn validate(&self, offset: u64) -> Result<(), FormatError> {
        let fail = |field: &'static str, reason: String| Err(FormatError::invalid("geometry", field, offset, reason));
        let sector = u64::from(self.sector_size);
        if !self.sector_size.is_power_of_two() || !(SECTOR_SIZE_MIN..=SECTOR_SIZE_MAX).contains(&self.sector_size) {
            return fail("sector_size", format!("{} is not a power of two from 512 to 65536", self.sector_size));
        }
        if self.instance_count == 0 || self.instance_count > INSTANCES_COUNT_MAX {
            return fail("instance_count", format!("{} is not from 1 to {INSTANCES_COUNT_MAX}", self.instance_count));
        }
        let aligned = [
            ("volume_len", self.volume_len),
            ("ofs_version_log", self.ofs_version_log),
            ("len_version_log", self.len_version_log),
            ("ofs_backup_log", self.ofs_backup_log),
            ("len_backup_log", self.len_backup_log),
            ("ofs_slot_area", self.ofs_slot_area),
            ("slot_size", self.slot_size),
        ];
        for (field, value) in aligned {
            if value % sector != 0 {
                return fail(field, format!("{value} is not a multiple of the sector size {sector}"));
            }
        }
        if !(SLOT_SIZE_MIN..=SLOT_SIZE_MAX).contains(&self.slot_size) {
            return fail("slot_size", format!("{} is not from 64 KiB to 1 GiB", self.slot_size));
        }
        let log_min = LOG_AREA_SECTORS_MIN * sector;
        if self.len_version_log < log_min {
            return fail("len_version_log", format!("{} is below 16 sectors ({log_min})", self.len_version_log));
        }
        if self.len_backup_log < log_min {
            return fail("len_backup_log", format!("{} is below 16 sectors ({log_min})", self.len_backup_log));
        }
        if self.num_slots < SLOTS_COUNT_MIN {
            return fail("num_slots", format!("{} is below {SLOTS_COUNT_MIN}", self.num_slots));
        }
        let instances = u64::from(self.instance_count);
        if self.ofs_version_log < sector {
            return fail("ofs_version_log", "overlaps the primary label".to_string());
        }
        let version_end =
            self.len_version_log.checked_mul(instances).and_then(|len| len.checked_add(self.ofs_version_log));
        if version_end.is_none_or(|end| end > self.ofs_backup_log) {
            return fail("ofs_backup_log", "overlaps the version logs".to_string());
        }
        let backup_end =
            self.len_backup_log.checked_mul(instances).and_then(|len| len.checked_add(self.ofs_backup_log));
        if backup_end.is_none_or(|end| end > self.ofs_slot_area) {
            return fail("ofs_slot_area", "overlaps the backup logs".to_string());
        }
        let slots_end = self.slot_size.checked_mul(self.num_slots).and_then(|len| len.checked_add(self.ofs_slot_area));
        if self.volume_len < sector || slots_end.is_none_or(|end| end > self.volume_len - sector) {
            return fail("num_slots", "the slot area overlaps the backup label or passes the volume end".to_string());
        }
        Ok(())
    }

    /// The sector size as u64.
    pub fn sector(&self) -> u64 {
        u64::from(self.sector_size)
    }

    /// Offset of the backup label (the last sector).
    pub fn ofs_backup_label(&self) -> u64 {
        self.volume_len - self.sector()
    }

    /// The byte range `(offset, len)` of an instance's log area.
    pub fn log_area(&self, kind: LogKind, instance: u32) -> (u64, u64) {
        match kind {
            LogKind::Version => {
                (self.ofs_version_log + u64::from(instance) * self.len_version_log, self.len_version_log)
            }
            LogKind::Backup => (self.ofs_backup_log + u64::from(instance) * self.len_backup_log, self.len_backup_log),
        }
    }

    /// The offset of a slot.
    pub fn slot_offset(&self, slot: u64) -> u64 {
        self.ofs_slot_area + slot * self.slot_size
    }

    /// Bytes that chunks can use (the slot area).
    pub fn usable_capacity(&self) -> u64 {
        self.num_slots * self.slot_size
    }
}

/// Requested sizes for a new volume; `None` means the default of SPEC.md §3.
#[derive(Debug, Clone, Default)]
pub struct LayoutRequest {
    /// Bytes of the device to use.
    pub volume_len: u64,
    /// Sector size.
    pub sector_size: Option<u32>,
    /// Slot size.
    pub slot_size: Option<u64>,
    /// Version log bytes per instance.
    pub len_version_log: Option<u64>,
    /// Backup log bytes per instance.
    pub len_backup_log: Option<u64>,
    /// Number of instances.
    pub instance_count: Option<u32>,
}

fn pow2_floor(value: u64) -> u64 {
    if value == 0 {
        0
    } else {
        1 << (63 - value.leading_zeros())
    }
}

/// Computes a geometry from a request with the defaults and alignment of SPEC.md §3.
/// The result is validated; an impossible request is an error naming the field.
pub fn plan_layout(request: &LayoutRequest, volume_uuid: [u8; 16]) -> Result<Geometry, FormatError> {
    const S: &str = "layout";
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    let sector_size = request.sector_size.unwrap_or(SECTOR_SIZE_DEFAULT);
    let sector = u64::from(sector_size);
    if !sector_size.is_power_of_two() || !(SECTOR_SIZE_MIN..=SECTOR_SIZE_MAX).contains(&sector_size) {
        return Err(FormatError::invalid(
            S,
            "sector_size",
            0,
            format!("{sector_size} is not a power of two from 512 to 65536"),
        ));
    }
    let volume_len = request.volume_len / sector * sector;
    let log_min = LOG_AREA_SECTORS_MIN * sector;
    let scaled = |divisor: u64, low: u64, high: u64| pow2_floor(volume_len / divisor).clamp(low, high).max(log_min);
    let len_version_log = request.len_version_log.unwrap_or_else(|| scaled(16, 64 * KIB, 64 * MIB));
    let len_backup_log = request.len_backup_log.unwrap_or_else(|| scaled(64, 64 * KIB, 16 * MIB));
    let slot_size =
        request.slot_size.unwrap_or_else(|| pow2_floor(volume_len / 64).clamp(SLOT_SIZE_MIN, 4 * MIB).max(sector));
    let instance_count = request.instance_count.unwrap_or(1);
    if slot_size == 0 || slot_size % sector != 0 {
        return Err(FormatError::invalid(
            S,
            "slot_size",
            0,
            format!("{slot_size} is not a multiple of the sector size {sector}"),
        ));
    }
    for (field, value) in [("len_version_log", len_version_log), ("len_backup_log", len_backup_log)] {
        if value % sector != 0 {
            return Err(FormatError::invalid(
                S,
                field,
                0,
                format!("{value} is not a multiple of the sector size {sector}"),
            ));
        }
    }
    let align = slot_size.min(MIB).max(sector);
    let up = |x: u64| x.div_ceil(align) * align;
    let instances = u64::from(instance_count);
    let ofs_version_log = up(sector);
    let ofs_backup_log = up(ofs_version_log.saturating_add(len_version_log.saturating_mul(instances)));
    let ofs_slot_area = up(ofs_backup_log.saturating_add(len_backup_log.saturating_mul(instances)));
    let room = volume_len.saturating_sub(sector).saturating_sub(ofs_slot_area);
    let num_slots = room / slot_size;
    let geometry = Geometry {
        volume_uuid,
        sector_size,
        instance_count,
        volume_len,
        ofs_version_log,
        len_version_log,
        ofs_backup_log,
        len_backup_log,
        ofs_slot_area,
        slot_size,
        num_slots,
    };
    geometry.validate(0)?;
    Ok(geometry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_defaults_for_large_volumes() {
        let request = LayoutRequest { volume_len: 100 << 30, ..LayoutRequest::default() };
        let geometry = plan_layout(&request, [0; 16]).expect("layout");
        assert_eq!(geometry.len_version_log, 64 << 20);
        assert_eq!(geometry.len_backup_log, 16 << 20);
        assert_eq!(geometry.slot_size, 4 << 20);
        assert_eq!(geometry.sector_size, 4096);
    }

    #[test]
    fn small_volumes_scale_down() {
        let request = LayoutRequest { volume_len: 4 << 20, ..LayoutRequest::default() };
        let geometry = plan_layout(&request, [0; 16]).expect("layout");
        assert_eq!(geometry.len_version_log, 256 << 10);
        assert_eq!(geometry.len_backup_log, 64 << 10);
        assert_eq!(geometry.slot_size, 64 << 10);
        assert!(geometry.num_slots >= 50);
    }

    #[test]
    fn too_small_a_volume_is_an_error() {
        let request = LayoutRequest { volume_len: 256 << 10, ..LayoutRequest::default() };
        assert!(plan_layout(&request, [0; 16]).is_err());
    }
}
