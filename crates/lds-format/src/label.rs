//! The volume label (SPEC.md §4): its two copies, the features it names, and the rule that
//! chooses between the copies (§4.2).

use crate::codec::{crc32c, Reader, Writer};
use crate::device_table::{DeviceTable, DEVICE_TABLE_LEN};
use crate::digest::DigestKind;
use crate::error::FormatError;
use crate::geometry::{Geometry, GEOMETRY_LEN};

/// `"LDSLABEL"`, SPEC.md §4.
pub const LABEL_MAGIC: [u8; 8] = *b"LDSLABEL";
/// Bytes of the label structure (the rest of its sector is reserved).
pub const LABEL_LEN: usize = 512;
/// The format's major version.
pub const VERSION_MAJOR: u16 = 1;
/// The format's minor version written by this code.
pub const VERSION_MINOR: u16 = 0;
/// Bytes of `volume_name`.
pub const VOLUME_NAME_LEN: usize = 64;

const OFFSET_GEOMETRY: usize = 40;
const OFFSET_GENERATION: usize = OFFSET_GEOMETRY + GEOMETRY_LEN;
const OFFSET_VOLUME_NAME: usize = OFFSET_GENERATION + 8;
const OFFSET_RESERVED: usize = OFFSET_VOLUME_NAME + VOLUME_NAME_LEN;
const OFFSET_CRC: usize = LABEL_LEN - 4;
const RESERVED_LEN: usize = OFFSET_CRC - OFFSET_RESERVED;
const _: () = assert!(OFFSET_GENERATION == 136);
const _: () = assert!(OFFSET_VOLUME_NAME == 144);
const _: () = assert!(RESERVED_LEN == 300);
const _: () = assert!(RESERVED_LEN == DEVICE_TABLE_LEN);
/// The volume label (SPEC.md §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// Minor format version.
    pub version_minor: u16,
    /// Features a reader may ignore.
    pub features_compat: u64,
    /// Features a reader must not write without knowing.
    pub features_ro_compat: u64,
    /// Features a reader must know.
    pub features_incompat: u64,
    /// Where everything lies.
    pub geometry: Geometry,
    /// Incremented by each label rewrite.
    pub generation: u64,
    /// For people; UTF-8, at most 64 bytes.
    pub volume_name: String,
    /// The devices of a volume on several devices (feature `multi_device`, SPEC.md §4.3).
    pub devices: Option<DeviceTable>,
}

/// Features this build knows (SPEC.md §17).
pub const FEATURES_COMPAT_KNOWN: u64 = 0;
/// Read-only-compatible features this build knows.
pub const FEATURES_RO_COMPAT_KNOWN: u64 = 0;
/// Incompatible feature `sync_watermark` (version 1.1): write batches carry the lsn below
/// which the backup log was durable (SPEC.md §7.1), a field a 1.0 reader requires to be zero.
pub const FEATURE_INCOMPAT_SYNC_WATERMARK: u64 = 1;
/// Incompatible feature `multi_device` (version 1.2): the volume spans several devices, whose
/// table the label's last 300 bytes hold (SPEC.md §4.3), bytes a 1.1 reader requires to be zero.
pub const FEATURE_INCOMPAT_MULTI_DEVICE: u64 = 2;
/// Incompatible feature `fast_digest` (version 1.3): chunks written to the volume record an
/// xxh3-128 digest (footer flag bit 1, SPEC.md §8.3), which a 1.2 reader rejects.
pub const FEATURE_INCOMPAT_FAST_DIGEST: u64 = 4;
/// Incompatible feature `value_chunks` (version 1.4): value chunks in slots, value pointers
/// in batches and blocks, value references in chunk metadata and value sections in versions
/// (SPEC.md §8.6), all of which a 1.3 reader rejects.
pub const FEATURE_INCOMPAT_VALUE_CHUNKS: u64 = 8;
/// Incompatible feature bit 4 (format 1.5): chunks written by flushes carry a key sketch
/// (SPEC.md §8.7), named by footer bytes earlier builds require to be zero.
pub const FEATURE_INCOMPAT_CHUNK_SKETCHES: u64 = 16;
/// Incompatible feature `log_tables` (format 1.6): level-0 chunks of flushes may hold log
/// references (entry kind 3) into the backup log, whose retained objects writers keep
/// (SPEC.md §8.9); a 1.5 reader rejects the entry kind and the chunk metadata flag.
pub const FEATURE_INCOMPAT_LOG_TABLES: u64 = 32;
/// Incompatible feature `compact_entries` (format 1.7): blocks may hold compact entries, whose
/// sequence, kind and lengths are varints (block trailer flag bit 31, SPEC.md §8.2), which a
/// 1.6 reader takes for a bad entry count.
pub const FEATURE_INCOMPAT_COMPACT_ENTRIES: u64 = 64;
/// Incompatible features this build knows.
pub const FEATURES_INCOMPAT_KNOWN: u64 = FEATURE_INCOMPAT_SYNC_WATERMARK
    | FEATURE_INCOMPAT_MULTI_DEVICE
    | FEATURE_INCOMPAT_FAST_DIGEST
    | FEATURE_INCOMPAT_VALUE_CHUNKS
    | FEATURE_INCOMPAT_CHUNK_SKETCHES
    | FEATURE_INCOMPAT_LOG_TABLES
    | FEATURE_INCOMPAT_COMPACT_ENTRIES;

/// Each incompatible feature and the minor version that defined it (SPEC.md §17): a label
/// with the feature has at least that `version_minor`.
const FEATURE_INCOMPAT_MINOR: [(u64, u16); 7] = [
    (FEATURE_INCOMPAT_SYNC_WATERMARK, 1),
    (FEATURE_INCOMPAT_MULTI_DEVICE, 2),
    (FEATURE_INCOMPAT_FAST_DIGEST, 3),
    (FEATURE_INCOMPAT_VALUE_CHUNKS, 4),
    (FEATURE_INCOMPAT_CHUNK_SKETCHES, 5),
    (FEATURE_INCOMPAT_LOG_TABLES, 6),
    (FEATURE_INCOMPAT_COMPACT_ENTRIES, 7),
];

/// The least `version_minor` of a label with the incompatible features `features`.
fn minor_for(features: u64) -> u16 {
    FEATURE_INCOMPAT_MINOR.iter().filter(|(bit, _)| features & bit != 0).map(|&(_, minor)| minor).max().unwrap_or(0)
}

impl Label {
    /// A version 1.0 label with no features, generation 1 (mkfs adds
    /// [`Label::with_sync_watermark`]).
    pub fn new(geometry: Geometry, volume_name: &str) -> Self {
        Self {
            version_minor: VERSION_MINOR,
            features_compat: 0,
            features_ro_compat: 0,
            features_incompat: 0,
            geometry,
            generation: 1,
            volume_name: volume_name.to_string(),
            devices: None,
        }
    }

    /// The label of format version 1.1 (SPEC.md §17): this one with feature
    /// `sync_watermark`, which mkfs sets on new volumes.
    pub fn with_sync_watermark(self) -> Self {
        self.with_feature(FEATURE_INCOMPAT_SYNC_WATERMARK)
    }

    /// This label with the incompatible feature `bit`, its minor version at least the one that
    /// defined the feature.
    fn with_feature(mut self, bit: u64) -> Self {
        self.features_incompat |= bit;
        self.version_minor = self.version_minor.max(minor_for(bit));
        self
    }

    /// True when write batches carry a sync watermark (SPEC.md §7.1).
    pub fn has_sync_watermark(&self) -> bool {
        self.features_incompat & FEATURE_INCOMPAT_SYNC_WATERMARK != 0
    }

    /// The label of format version 1.3 (SPEC.md §17): this one with feature `fast_digest`,
    /// which mkfs sets on new volumes (with `sync_watermark`).
    pub fn with_fast_digest(self) -> Self {
        self.with_feature(FEATURE_INCOMPAT_FAST_DIGEST)
    }

    /// The label of format version 1.4 (SPEC.md §17): this one with feature `value_chunks`
    /// (`lds mkfs --value-chunks`).
    pub fn with_value_chunks(self) -> Self {
        self.with_feature(FEATURE_INCOMPAT_VALUE_CHUNKS)
    }

    /// The label of format version 1.5 (SPEC.md §17): this one with feature `chunk_sketches`
    /// (`lds mkfs --chunk-sketches`).
    pub fn with_chunk_sketches(self) -> Self {
        self.with_feature(FEATURE_INCOMPAT_CHUNK_SKETCHES)
    }

    /// The label of format version 1.6 (SPEC.md §17): this one with feature `log_tables`
    /// (`lds mkfs --log-tables`).
    pub fn with_log_tables(self) -> Self {
        self.with_feature(FEATURE_INCOMPAT_LOG_TABLES)
    }

    /// The label of format version 1.7 (SPEC.md §17): this one with feature `compact_entries`,
    /// which mkfs sets on new volumes (with `sync_watermark` and `fast_digest`).
    pub fn with_compact_entries(self) -> Self {
        self.with_feature(FEATURE_INCOMPAT_COMPACT_ENTRIES)
    }

    /// True when new chunks' blocks hold compact entries (SPEC.md §8.2).
    pub fn has_compact_entries(&self) -> bool {
        self.features_incompat & FEATURE_INCOMPAT_COMPACT_ENTRIES != 0
    }

    /// True when level-0 chunks may hold log references into the backup log (SPEC.md §8.9).
    pub fn has_log_tables(&self) -> bool {
        self.features_incompat & FEATURE_INCOMPAT_LOG_TABLES != 0
    }

    /// True when flushes write a key sketch with each chunk (SPEC.md §8.7).
    pub fn has_chunk_sketches(&self) -> bool {
        self.features_incompat & FEATURE_INCOMPAT_CHUNK_SKETCHES != 0
    }

    /// True when the volume may hold value chunks and pointers (SPEC.md §8.6).
    pub fn has_value_chunks(&self) -> bool {
        self.features_incompat & FEATURE_INCOMPAT_VALUE_CHUNKS != 0
    }

    /// The digest new chunks of the volume record (SPEC.md §8.3).
    pub fn digest_kind(&self) -> DigestKind {
        if self.features_incompat & FEATURE_INCOMPAT_FAST_DIGEST != 0 {
            DigestKind::Xxh3
        } else {
            DigestKind::Blake3
        }
    }

    /// This label with the device table `devices` (feature `multi_device`, version 1.2), or,
    /// with `None`, the label of a volume on one device again (the feature cleared and the
    /// minor version back to what the other features need), SPEC.md §4.3, §17.
    pub fn with_devices(mut self, devices: Option<DeviceTable>) -> Self {
        match devices {
            Some(_) => self.features_incompat |= FEATURE_INCOMPAT_MULTI_DEVICE,
            None => {
                self.features_incompat &= !FEATURE_INCOMPAT_MULTI_DEVICE;
                if self.version_minor == 2 {
                    self.version_minor = 0;
                }
            }
        }
        self.version_minor = self.version_minor.max(minor_for(self.features_incompat));
        self.devices = devices;
        self
    }

    /// The device offset of this copy's backup label on the device it was read from: the
    /// last sector of `len_device` on a volume of several devices, of `volume_len` otherwise
    /// (SPEC.md §4.3).
    pub fn ofs_backup_label_on_device(&self) -> u64 {
        match self.devices.as_ref().and_then(DeviceTable::this_device) {
            Some(entry) => entry.len_device - self.geometry.sector(),
            None => self.geometry.ofs_backup_label(),
        }
    }

    /// True when some device holds `slot` (always, on a volume of one device; a slot a removed
    /// device held is in no device, SPEC.md §4.3).
    pub fn slot_present(&self, slot: u64) -> bool {
        slot < self.geometry.num_slots && self.devices.as_ref().is_none_or(|table| table.device_of_slot(slot).is_some())
    }

    /// Encodes the 512-byte label.
    pub fn encode(&self) -> [u8; LABEL_LEN] {
        let mut writer = Writer::with_capacity(LABEL_LEN);
        writer
            .bytes(&LABEL_MAGIC)
            .u16(VERSION_MAJOR)
            .u16(self.version_minor)
            .u32(LABEL_LEN as u32)
            .u64(self.features_compat)
            .u64(self.features_ro_compat)
            .u64(self.features_incompat);
        self.geometry.encode(&mut writer);
        writer.u64(self.generation);
        let name = self.volume_name.as_bytes();
        let name_len = name.len().min(VOLUME_NAME_LEN);
        writer.bytes(&name[..name_len]).zeros(VOLUME_NAME_LEN - name_len);
        match &self.devices {
            Some(table) => table.encode(&mut writer),
            None => {
                writer.zeros(RESERVED_LEN);
            }
        }
        debug_assert_eq!(writer.len(), OFFSET_CRC);
        let crc = crc32c(writer.as_slice());
        writer.u32(crc);
        let mut label = [0u8; LABEL_LEN];
        label.copy_from_slice(writer.as_slice());
        label
    }

    /// Decodes and validates a label read at `offset`: magic, checksum, version, reserved
    /// bytes, feature bits and geometry invariants.
    pub fn decode(bytes: &[u8], offset: u64) -> Result<Self, FormatError> {
        const S: &str = "label";
        let mut reader = Reader::new(bytes, S, offset);
        let magic: [u8; 8] = reader.array()?;
        if magic != LABEL_MAGIC {
            return Err(FormatError::BadMagic { structure: S, offset, found: magic.to_vec() });
        }
        if bytes.len() < LABEL_LEN {
            return Err(FormatError::Truncated {
                structure: S,
                offset,
                needed: LABEL_LEN as u64,
                available: bytes.len() as u64,
            });
        }
        let stored = u32::from_le_bytes([
            bytes[OFFSET_CRC],
            bytes[OFFSET_CRC + 1],
            bytes[OFFSET_CRC + 2],
            bytes[OFFSET_CRC + 3],
        ]);
        let actual = crc32c(&bytes[..OFFSET_CRC]);
        if stored != actual {
            return Err(FormatError::ChecksumMismatch { structure: S, offset, expected: stored, actual });
        }
        let major = reader.u16()?;
        let minor = reader.u16()?;
        if major != VERSION_MAJOR {
            return Err(FormatError::UnsupportedVersion { structure: S, offset, major, minor });
        }
        let len_label = reader.u32()?;
        if len_label as usize != LABEL_LEN {
            return Err(FormatError::invalid(S, "len_label", offset + 12, format!("{len_label}, expected 512")));
        }
        let features_compat = reader.u64()?;
        let features_ro_compat = reader.u64()?;
        let features_incompat = reader.u64()?;
        let unknown = features_incompat & !FEATURES_INCOMPAT_KNOWN;
        if unknown != 0 {
            return Err(FormatError::invalid(
                S,
                "features_incompat",
                offset + 32,
                format!("unknown incompatible features {unknown:#x}: this build cannot read the volume"),
            ));
        }
        let geometry = Geometry::decode(&mut reader)?;
        geometry.validate(offset + OFFSET_GEOMETRY as u64)?;
        let generation = reader.u64()?;
        let name_bytes = reader.bytes(VOLUME_NAME_LEN)?;
        let name_len = name_bytes.iter().rposition(|&byte| byte != 0).map_or(0, |last| last + 1);
        let volume_name = std::str::from_utf8(&name_bytes[..name_len])
            .map_err(|_| FormatError::invalid(S, "volume_name", offset + OFFSET_VOLUME_NAME as u64, "not UTF-8"))?
            .to_string();
        let devices = if features_incompat & FEATURE_INCOMPAT_MULTI_DEVICE != 0 {
            let table = DeviceTable::decode(&mut reader)?;
            table.validate(&geometry, offset + OFFSET_RESERVED as u64)?;
            Some(table)
        } else {
            reader.reserved(RESERVED_LEN)?;
            None
        };
        if generation == 0 {
            return Err(FormatError::invalid(S, "generation", offset + OFFSET_GENERATION as u64, "0 (starts at 1)"));
        }
        Ok(Self {
            version_minor: minor,
            features_compat,
            features_ro_compat,
            features_incompat,
            geometry,
            generation,
            volume_name,
            devices,
        })
    }

    /// True when this build may write the volume (no unknown ro_compat features).
    pub fn writable(&self) -> bool {
        self.features_ro_compat & !FEATURES_RO_COMPAT_KNOWN == 0
    }
}

/// Which copy a reader chose, SPEC.md §4.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelChoice {
    /// Both copies valid and equal.
    Both,
    /// Only the primary is valid, or it has the higher generation.
    Primary,
    /// Only the backup is valid, or it has the higher generation.
    Backup,
}

/// The outcome of reading both label copies.
#[derive(Debug, Clone)]
pub struct LabelPair {
    /// The primary copy, decoded or the reason it is not valid.
    pub primary: Result<Label, FormatError>,
    /// The backup copy, decoded or the reason it is not valid.
    pub backup: Result<Label, FormatError>,
}

/// Why no label could be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelChoiceError {
    /// Neither copy is valid.
    NoValidLabel,
    /// Both are valid, differ, and have the same generation.
    Conflict,
}

impl LabelPair {
    /// Applies the rule of SPEC.md §4.2.
    pub fn choose(&self) -> Result<(LabelChoice, &Label), LabelChoiceError> {
        match (&self.primary, &self.backup) {
            (Ok(primary), Ok(backup)) if primary == backup => Ok((LabelChoice::Both, primary)),
            (Ok(primary), Ok(backup)) => match primary.generation.cmp(&backup.generation) {
                std::cmp::Ordering::Greater => Ok((LabelChoice::Primary, primary)),
                std::cmp::Ordering::Less => Ok((LabelChoice::Backup, backup)),
                std::cmp::Ordering::Equal => Err(LabelChoiceError::Conflict),
            },
            (Ok(primary), Err(_)) => Ok((LabelChoice::Primary, primary)),
            (Err(_), Ok(backup)) => Ok((LabelChoice::Backup, backup)),
            (Err(_), Err(_)) => Err(LabelChoiceError::NoValidLabel),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geometry::{plan_layout, LayoutRequest};

    pub(crate) fn sample_label() -> Label {
        let request = LayoutRequest { volume_len: 64 << 20, ..LayoutRequest::default() };
        Label::new(plan_layout(&request, [7u8; 16]).expect("layout"), "test")
    }

    #[test]
    fn round_trip() {
        let label = sample_label();
        let bytes = label.encode();
        assert_eq!(Label::decode(&bytes, 0), Ok(label));
    }

    #[test]
    fn flip_any_byte_is_detected() {
        let bytes = sample_label().encode();
        for index in 0..LABEL_LEN {
            for bit in [0x01u8, 0x80] {
                let mut flipped = bytes;
                flipped[index] ^= bit;
                assert!(Label::decode(&flipped, 0).is_err(), "flip at byte {index} bit {bit:#x} went unnoticed");
            }
        }
    }

    #[test]
    fn unknown_incompat_feature_is_refused() {
        let mut label = sample_label();
        label.features_incompat = 128;
        let error = Label::decode(&label.encode(), 0).err();
        assert!(matches!(error, Some(FormatError::InvalidField { field: "features_incompat", .. })));
    }

    #[test]
    fn a_label_with_a_device_table_round_trips_and_every_flip_is_detected() {
        use crate::device_table::{member_ofs_slot_area, volume_len_for, DeviceEntry, DeviceTable};
        let base = sample_label();
        let geometry = base.geometry;
        let first = DeviceEntry {
            device_uuid: [1; 16],
            first_slot: 0,
            num_slots: geometry.num_slots,
            len_device: geometry.volume_len,
        };
        let len_device = member_ofs_slot_area(&geometry) + 5 * geometry.slot_size + geometry.sector();
        let second = DeviceEntry { device_uuid: [2; 16], first_slot: geometry.num_slots, num_slots: 5, len_device };
        let num_slots = geometry.num_slots + 5;
        let mut label =
            base.clone().with_devices(Some(DeviceTable { device_uuid: [2; 16], devices: vec![first, second] }));
        label.geometry = Geometry { num_slots, volume_len: volume_len_for(&geometry, num_slots), ..geometry };
        assert_eq!(label.version_minor, 2);
        let bytes = label.encode();
        assert_eq!(Label::decode(&bytes, 0), Ok(label.clone()));
        assert_eq!(label.ofs_backup_label_on_device(), len_device - geometry.sector());
        assert!(label.slot_present(num_slots - 1));
        assert!(!label.slot_present(num_slots));
        for index in 0..LABEL_LEN {
            let mut flipped = bytes;
            flipped[index] ^= 0x10;
            assert!(Label::decode(&flipped, 0).is_err(), "flip at byte {index} went unnoticed");
        }
        let single = label.with_devices(None);
        assert_eq!(single.features_incompat, 0);
        assert_eq!(single.version_minor, 0);
        assert!(base.clone().with_sync_watermark().with_devices(None).version_minor == 1);
    }

    #[test]
    fn choose_between_copies() {
        let label = sample_label();
        let mut newer = label.clone();
        newer.generation = 2;
        let missing = || Err(FormatError::BadMagic { structure: "label", offset: 0, found: vec![] });
        let pair = LabelPair { primary: Ok(label.clone()), backup: Ok(label.clone()) };
        assert!(matches!(pair.choose(), Ok((LabelChoice::Both, _))));
        let pair = LabelPair { primary: Ok(label.clone()), backup: Ok(newer.clone()) };
        assert!(matches!(pair.choose(), Ok((LabelChoice::Backup, chosen)) if chosen.generation == 2));
        let pair = LabelPair { primary: missing(), backup: Ok(label.clone()) };
        assert!(matches!(pair.choose(), Ok((LabelChoice::Backup, _))));
        let pair = LabelPair { primary: Ok(label.clone()), backup: missing() };
        assert!(matches!(pair.choose(), Ok((LabelChoice::Primary, _))));
        let mut renamed = label.clone();
        renamed.volume_name = "other".into();
        let pair = LabelPair { primary: Ok(label), backup: Ok(renamed) };
        assert_eq!(pair.choose().err(), Some(LabelChoiceError::Conflict));
        let pair = LabelPair { primary: missing(), backup: missing() };
        assert_eq!(pair.choose().err(), Some(LabelChoiceError::NoValidLabel));
    }
}
