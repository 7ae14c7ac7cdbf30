//! Log object framing shared by the version log and the backup log (SPEC.md §5): where an
//! instance's log areas lie, what an object must match to be valid there, and positions of
//! objects along the ring.

use crate::codec::{align8, crc32c, Reader, Writer};
use crate::error::FormatError;
use crate::geometry::{Geometry, LogKind};

/// `"LDSO"`, SPEC.md §5.
pub const OBJECT_MAGIC: [u8; 4] = *b"LDSO";
/// Bytes of a log object header.
pub const HEADER_LEN: usize = 64;
const OFFSET_LEN_PAYLOAD: usize = 40;
const _: () = assert!(OFFSET_LEN_PAYLOAD + 4 + 4 + 16 == HEADER_LEN);

/// `object_type`, SPEC.md §5.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectType {
    /// A complete version (BV).
    BaseVersion,
    /// A change to the version (DV).
    DeltaVersion,
    /// The state of an unfinished compaction (CJ).
    CompactionJournal,
    /// A write batch of the write-ahead log (WB).
    WriteBatch,
    /// Wrapping object at the left (WOL).
    WrapLeft,
    /// Wrapping object at the right (WOR).
    WrapRight,
}

impl ObjectType {
    /// The on-disk code.
    pub fn code(self) -> u8 {
        match self {
            Self::BaseVersion => 1,
            Self::DeltaVersion => 2,
            Self::CompactionJournal => 3,
            Self::WriteBatch => 4,
            Self::WrapLeft => 5,
            Self::WrapRight => 6,
        }
    }

    /// The type for a code, if any.
    pub fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => Self::BaseVersion,
            2 => Self::DeltaVersion,
            3 => Self::CompactionJournal,
            4 => Self::WriteBatch,
            5 => Self::WrapLeft,
            6 => Self::WrapRight,
            _ => return None,
        })
    }

    /// The name used by SPEC.md and the JSON schema.
    pub fn name(self) -> &'static str {
        match self {
            Self::BaseVersion => "base_version",
            Self::DeltaVersion => "delta_version",
            Self::CompactionJournal => "compaction_journal",
            Self::WriteBatch => "write_batch",
            Self::WrapLeft => "wrap_left",
            Self::WrapRight => "wrap_right",
        }
    }

    /// Whether this type may appear in a log of `kind`.
    pub fn allowed_in(self, kind: LogKind) -> bool {
        match self {
            Self::BaseVersion | Self::DeltaVersion | Self::CompactionJournal => kind == LogKind::Version,
            Self::WriteBatch => kind == LogKind::Backup,
            Self::WrapLeft | Self::WrapRight => true,
        }
    }

    /// True for WOL and WOR.
    pub fn is_wrap(self) -> bool {
        matches!(self, Self::WrapLeft | Self::WrapRight)
    }
}

/// The decoded 64-byte header (SPEC.md §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectHeader {
    /// `header_crc32c` as stored.
    pub header_crc32c: u32,
    /// `object_type` code as stored.
    pub object_type_code: u8,
    /// `log_kind` as stored.
    pub log_kind: u8,
    /// `flags` as stored.
    pub flags: u16,
    /// Owning instance.
    pub instance: u32,
    /// SN of the live base version when written.
    pub sn: u64,
    /// Log sequence number.
    pub lsn: u64,
    /// Offset from the start of the log area.
    pub log_offset: u64,
    /// Bytes of payload.
    pub len_payload: u32,
    /// crc32c of the payload.
    pub payload_crc32c: u32,
    /// The volume's uuid.
    pub volume_uuid: [u8; 16],
}

impl ObjectHeader {
    /// The object type, if the code is known.
    pub fn object_type(&self) -> Option<ObjectType> {
        ObjectType::from_code(self.object_type_code)
    }

    /// Total bytes the object occupies, with padding to 8.
    pub fn total_len(&self) -> u64 {
        align8(HEADER_LEN as u64 + u64::from(self.len_payload))
    }

    /// Offset of the next object after this one.
    pub fn next_offset(&self) -> u64 {
        self.log_offset + self.total_len()
    }

    /// Reads the header fields without checking anything but the length (the physical walk of
    /// SPEC.md §15 needs the raw fields).
    pub fn parse_raw(bytes: &[u8], offset: u64) -> Result<Self, FormatError> {
        let mut reader = Reader::new(bytes, "log object header", offset);
        let magic: [u8; 4] = reader.array()?;
        if magic != OBJECT_MAGIC {
            return Err(FormatError::BadMagic { structure: "log object header", offset, found: magic.to_vec() });
        }
        Ok(Self {
            header_crc32c: reader.u32()?,
            object_type_code: reader.u8()?,
            log_kind: reader.u8()?,
            flags: reader.u16()?,
            instance: reader.u32()?,
            sn: reader.u64()?,
            lsn: reader.u64()?,
            log_offset: reader.u64()?,
            len_payload: reader.u32()?,
            payload_crc32c: reader.u32()?,
            volume_uuid: reader.array()?,
        })
    }
}

impl ObjectHeader {
    /// Reads the 64 header bytes whatever they hold (redb's tolerant header parse): the
    /// fields as stored, whether the magic is there, and whether `header_crc32c` checks. A
    /// checker uses it to say what it saw where a strict parse can only fail.
    pub fn parse_tolerant(bytes: &[u8; HEADER_LEN]) -> TolerantHeader {
        let field = |range: std::ops::Range<usize>| {
            bytes[range].iter().rev().fold(0u64, |value, &byte| (value << 8) | u64::from(byte))
        };
        let mut volume_uuid = [0u8; 16];
        volume_uuid.copy_from_slice(&bytes[48..64]);
        let header = Self {
            header_crc32c: field(4..8) as u32,
            object_type_code: bytes[8],
            log_kind: bytes[9],
            flags: field(10..12) as u16,
            instance: field(12..16) as u32,
            sn: field(16..24),
            lsn: field(24..32),
            log_offset: field(32..40),
            len_payload: field(40..44) as u32,
            payload_crc32c: field(44..48) as u32,
            volume_uuid,
        };
        TolerantHeader {
            header,
            magic_ok: bytes[..4] == OBJECT_MAGIC,
            crc_ok: crc32c(&bytes[8..]) == header.header_crc32c,
        }
    }
}

/// A header read by [`ObjectHeader::parse_tolerant`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TolerantHeader {
    /// The fields as stored (untrusted unless `crc_ok`).
    pub header: ObjectHeader,
    /// The magic is `"LDSO"`.
    pub magic_ok: bool,
    /// `header_crc32c` checks.
    pub crc_ok: bool,
}

impl TolerantHeader {
    /// How many of the fields that identify an append differ from the append expected at
    /// `offset` of the area with `lsn` (SPEC.md §9.6): magic, `object_type` (one allowed in
    /// the area, or exactly `only_type`), `log_kind`, `flags`, `instance`, `lsn`,
    /// `log_offset` and `volume_uuid`. A sector is written whole or not at all (SPEC.md §2),
    /// so a header inside one sector that the append wrote differs in none of them unless
    /// damaged, and one bit of damage changes at most one. Stale bytes an earlier lap left
    /// there differ at least in `lsn` and, when partly overwritten by another append (which
    /// is what breaks their checksum), in the field it overwrote as well.
    pub fn identity_mismatches(
        &self,
        context: &AreaContext,
        offset: u64,
        lsn: u64,
        only_type: Option<ObjectType>,
    ) -> usize {
        let header = &self.header;
        let type_ok = match (header.object_type(), only_type) {
            (Some(found), Some(wanted)) => found == wanted,
            (Some(found), None) => found.allowed_in(context.kind),
            (None, _) => false,
        };
        [
            self.magic_ok,
            type_ok,
            header.log_kind == context.kind.code(),
            header.flags == 0,
            header.instance == context.instance,
            header.lsn == lsn,
            header.log_offset == offset,
            header.volume_uuid == context.volume_uuid,
        ]
        .iter()
        .filter(|&&matched| !matched)
        .count()
    }
}

/// What an object must match to be valid where it was read (SPEC.md §5).
#[derive(Debug, Clone, Copy)]
pub struct AreaContext {
    /// Which log.
    pub kind: LogKind,
    /// Owning instance.
    pub instance: u32,
    /// The volume's uuid.
    pub volume_uuid: [u8; 16],
    /// Bytes of the area.
    pub len_area: u64,
    /// Sector size.
    pub sector_size: u32,
    /// Offset of the area on the device, for messages.
    pub ofs_area: u64,
}

impl AreaContext {
    /// The largest payload an object may have in this area (SPEC.md §16).
    pub fn payload_len_max(&self) -> u64 {
        self.len_area.saturating_sub(3 * u64::from(self.sector_size) + HEADER_LEN as u64)
    }

    /// The payload length of a WOL or WOR.
    pub fn wrap_payload_len(&self) -> u32 {
        self.sector_size - HEADER_LEN as u32
    }
}

/// The area context of an instance's log: where its area lies in `geometry` and what its
/// objects must name.
pub fn area_context(geometry: &Geometry, kind: LogKind, instance: u32) -> AreaContext {
    let (ofs_area, len_area) = geometry.log_area(kind, instance);
    AreaContext {
        kind,
        instance,
        volume_uuid: geometry.volume_uuid,
        len_area,
        sector_size: geometry.sector_size,
        ofs_area,
    }
}

/// A backup log object's place: its offset in the area and its lsn. Ordered by lsn, which
/// increases along the log across wraps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LogPosition {
    /// Offset in the backup log area.
    pub offset: u64,
    /// The object's lsn.
    pub lsn: u64,
}

impl Ord for LogPosition {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.lsn.cmp(&other.lsn).then(self.offset.cmp(&other.offset))
    }
}

impl PartialOrd for LogPosition {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Bytes from `from` to `to` along a log area of `len_area` bytes, the ring its objects wrap
/// around: the backup log's retained region when `from` is a version's retention start and
/// `to` its backup start (SPEC.md §8.9).
/// - The whole ring when either offset lies outside it (`len_area` or more): only damage puts
///   one there, and a writer that cannot tell where the retained objects lie must keep them
///   all (§8.9, §10.1).
/// - 0 when `to` is not later than `from` (by lsn): nothing lies between them.
/// - Otherwise from `from`'s offset on to `to`'s, across the wrap when `to`'s is not past
///   `from`'s (a whole lap when both offsets are equal).
pub fn ring_distance(from: LogPosition, to: LogPosition, len_area: u64) -> u64 {
    if from.offset >= len_area || to.offset >= len_area {
        len_area
    } else if to.lsn <= from.lsn {
        0
    } else if to.offset > from.offset {
        to.offset - from.offset
    } else {
        len_area - from.offset + to.offset
    }
}

/// A valid object: header plus its payload bytes.
#[derive(Debug, Clone, Copy)]
pub struct RawObject<'a> {
    /// The header.
    pub header: ObjectHeader,
    /// The object type (known, allowed in the area).
    pub object_type: ObjectType,
    /// The payload, checksum verified.
    pub payload: &'a [u8],
}

/// Checks the object at `offset` of `area` (the whole area's bytes) by every rule of
/// SPEC.md §5 except payload decoding, which the caller does by type.
pub fn read_object<'a>(area: &'a [u8], offset: u64, context: &AreaContext) -> Result<RawObject<'a>, FormatError> {
    const S: &str = "log object";
    let device_offset = context.ofs_area + offset;
    let start =
        usize::try_from(offset).map_err(|_| FormatError::invalid(S, "log_offset", device_offset, "out of range"))?;
    let bytes = area.get(start..).unwrap_or(&[]);
    check_object(bytes, offset, area.len() as u64, context)
}

/// Checks the object at `offset` of its area as [`read_object`] does, from `bytes` read from
/// the area at that offset (at least the whole object; the rest of the area unread): a
/// reader following a log reference (SPEC.md §8.9) reads one object, not the area.
pub fn read_object_at<'a>(bytes: &'a [u8], offset: u64, context: &AreaContext) -> Result<RawObject<'a>, FormatError> {
    check_object(bytes, offset, context.len_area, context)
}

/// The checks of SPEC.md §5 on `bytes`, which start at `offset` of an area of `area_len`
/// bytes.
fn check_object<'a>(
    bytes: &'a [u8],
    offset: u64,
    area_len: u64,
    context: &AreaContext,
) -> Result<RawObject<'a>, FormatError> {
    const S: &str = "log object";
    let device_offset = context.ofs_area + offset;
    if offset % 8 != 0 {
        return Err(FormatError::invalid(S, "log_offset", device_offset, "not 8-byte aligned"));
    }
    let in_area = area_len.saturating_sub(offset);
    if offset >= area_len || (HEADER_LEN as u64) > in_area || HEADER_LEN > bytes.len() {
        return Err(FormatError::Truncated {
            structure: S,
            offset: device_offset,
            needed: HEADER_LEN as u64,
            available: in_area.min(bytes.len() as u64),
        });
    }
    let header_bytes = &bytes[..HEADER_LEN];
    let header = ObjectHeader::parse_raw(header_bytes, device_offset)?;
    let actual = crc32c(&header_bytes[8..]);
    if actual != header.header_crc32c {
        return Err(FormatError::ChecksumMismatch {
            structure: "log object header",
            offset: device_offset,
            expected: header.header_crc32c,
            actual,
        });
    }
    let invalid = |field: &'static str, reason: String| FormatError::invalid(S, field, device_offset, reason);
    if header.log_kind != context.kind.code() {
        return Err(invalid(
            "log_kind",
            format!("{} found in the {} (misdirected write)", header.log_kind, context.kind.name()),
        ));
    }
    if header.instance != context.instance {
        return Err(invalid(
            "instance",
            format!("{} found in the area of instance {}", header.instance, context.instance),
        ));
    }
    if header.log_offset != offset {
        return Err(invalid("log_offset", format!("{} but read at {offset} (misdirected write)", header.log_offset)));
    }
    if header.volume_uuid != context.volume_uuid {
        return Err(invalid("volume_uuid", "belongs to another volume".to_string()));
    }
    if header.flags != 0 {
        return Err(FormatError::ReservedNotZero { structure: S, offset: device_offset + 10 });
    }
    let object_type = header
        .object_type()
        .ok_or_else(|| invalid("object_type", format!("unknown type {}", header.object_type_code)))?;
    if !object_type.allowed_in(context.kind) {
        return Err(invalid(
            "object_type",
            format!("{} is not allowed in the {}", object_type.name(), context.kind.name()),
        ));
    }
    if u64::from(header.len_payload) > context.payload_len_max() {
        return Err(invalid(
            "len_payload",
            format!("{} exceeds the limit {}", header.len_payload, context.payload_len_max()),
        ));
    }
    if object_type.is_wrap() {
        if header.len_payload != context.wrap_payload_len() {
            return Err(invalid("len_payload", format!("{} but a wrap object is one sector", header.len_payload)));
        }
        if offset % u64::from(context.sector_size) != 0 {
            return Err(invalid("log_offset", "wrap object not sector-aligned".to_string()));
        }
    }
    let payload_end = HEADER_LEN as u64 + u64::from(header.len_payload);
    if payload_end > in_area {
        return Err(invalid("len_payload", "object extends past the end of the area".to_string()));
    }
    let payload = bytes.get(HEADER_LEN..payload_end as usize).ok_or(FormatError::Truncated {
        structure: S,
        offset: device_offset,
        needed: payload_end,
        available: bytes.len() as u64,
    })?;
    let actual = crc32c(payload);
    if actual != header.payload_crc32c && !cfg!(feature = "fault-skip-payload-checksum") {
        return Err(FormatError::ChecksumMismatch {
            structure: "log object payload",
            offset: device_offset + HEADER_LEN as u64,
            expected: header.payload_crc32c,
            actual,
        });
    }
    Ok(RawObject { header, object_type, payload })
}

/// The fields a writer chooses for a new object.
#[derive(Debug, Clone, Copy)]
pub struct NewObject {
    /// The type.
    pub object_type: ObjectType,
    /// The log.
    pub kind: LogKind,
    /// Owning instance.
    pub instance: u32,
    /// SN.
    pub sn: u64,
    /// LSN.
    pub lsn: u64,
    /// Where it goes in the area.
    pub log_offset: u64,
    /// The volume.
    pub volume_uuid: [u8; 16],
}

/// Encodes a complete object (header, payload, zero padding to 8 bytes).
pub fn encode_object(object: &NewObject, payload: &[u8]) -> Vec<u8> {
    let len_payload = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let total = align8(HEADER_LEN as u64 + u64::from(len_payload)) as usize;
    let mut writer = Writer::with_capacity(total);
    writer.bytes(&encode_header(object, len_payload, crc32c(payload)));
    writer.bytes(payload);
    writer.zeros(total - writer.len());
    writer.into_bytes()
}

/// Encodes an object's header for a payload of `len_payload` bytes whose crc32c is
/// `payload_crc32c` (a writer that grows an object before writing it out encodes its header
/// once, at the end).
pub fn encode_header(object: &NewObject, len_payload: u32, payload_crc32c: u32) -> [u8; HEADER_LEN] {
    let mut writer = Writer::with_capacity(HEADER_LEN);
    writer
        .bytes(&OBJECT_MAGIC)
        .u32(0)
        .u8(object.object_type.code())
        .u8(object.kind.code())
        .u16(0)
        .u32(object.instance)
        .u64(object.sn)
        .u64(object.lsn)
        .u64(object.log_offset)
        .u32(len_payload)
        .u32(payload_crc32c)
        .bytes(&object.volume_uuid);
    let header_crc = crc32c(&writer.as_slice()[8..HEADER_LEN]);
    writer.as_mut_slice()[4..8].copy_from_slice(&header_crc.to_le_bytes());
    let mut header = [0u8; HEADER_LEN];
    header.copy_from_slice(writer.as_slice());
    header
}

/// The payload of a WOL (SPEC.md §5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrapLeft {
    /// Offset of the first live object when the log wrapped.
    pub ofs_first_live: u64,
    /// Its LSN.
    pub lsn_first_live: u64,
}

impl WrapLeft {
    /// Encodes the one-sector payload.
    pub fn encode(&self, sector_size: u32) -> Vec<u8> {
        let mut writer = Writer::new();
        writer.u64(self.ofs_first_live).u64(self.lsn_first_live);
        writer.zeros(sector_size as usize - HEADER_LEN - 16);
        writer.into_bytes()
    }

    /// Decodes the payload; the rest of it must be zero.
    pub fn decode(payload: &[u8], offset: u64) -> Result<Self, FormatError> {
        let mut reader = Reader::new(payload, "wrap_left", offset);
        let wrap = Self { ofs_first_live: reader.u64()?, lsn_first_live: reader.u64()? };
        reader.reserved(reader.remaining())?;
        Ok(wrap)
    }
}

/// Encodes the all-zero payload of a WOR.
pub fn wrap_right_payload(sector_size: u32) -> Vec<u8> {
    vec![0; sector_size as usize - HEADER_LEN]
}

/// Checks a WOR payload (all zero).
pub fn check_wrap_right(payload: &[u8], offset: u64) -> Result<(), FormatError> {
    Reader::new(payload, "wrap_right", offset).reserved(payload.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_distances_follow_the_lsn_and_the_wrap() {
        let at = |offset, lsn| LogPosition { offset, lsn };
        assert_eq!(ring_distance(at(100, 5), at(300, 9), 1000), 200);
        assert_eq!(ring_distance(at(800, 5), at(100, 9), 1000), 300, "across the wrap");
        assert_eq!(ring_distance(at(800, 5), at(200, 9), 1000), 400, "across the wrap");
        assert_eq!(ring_distance(at(400, 5), at(400, 9), 1000), 1000, "a whole lap");
        assert_eq!(ring_distance(at(100, 5), at(100, 5), 1000), 0, "the same place");
        assert_eq!(ring_distance(at(100, 5), at(300, 5), 1000), 0, "not later");
        assert_eq!(ring_distance(at(300, 9), at(100, 5), 1000), 0, "earlier");
        // Outside the ring (damage): all of it, whichever end and whatever the lsns.
        assert_eq!(ring_distance(at(1200, 5), at(100, 9), 1000), 1000, "the start past the area");
        assert_eq!(ring_distance(at(100, 5), at(1200, 9), 1000), 1000, "the end past the area");
        assert_eq!(ring_distance(at(100, 5), at(1000, 9), 1000), 1000, "the end at the area's end");
        assert_eq!(ring_distance(at(1200, 9), at(100, 5), 1000), 1000, "outside and not later");
        assert_eq!(ring_distance(at(u64::MAX, 1), at(u64::MAX - 8, 2), u64::MAX), u64::MAX, "no overflow");
    }

    fn context() -> AreaContext {
        AreaContext {
            kind: LogKind::Version,
            instance: 0,
            volume_uuid: [9; 16],
            len_area: 64 * 1024,
            sector_size: 512,
            ofs_area: 0,
        }
    }

    fn object(offset: u64) -> NewObject {
        NewObject {
            object_type: ObjectType::DeltaVersion,
            kind: LogKind::Version,
            instance: 0,
            sn: 3,
            lsn: 7,
            log_offset: offset,
            volume_uuid: [9; 16],
        }
    }

    #[test]
    fn round_trip() {
        let mut area = vec![0u8; 64 * 1024];
        let bytes = encode_object(&object(8), b"hello payload");
        assert_eq!(bytes.len() % 8, 0);
        area[8..8 + bytes.len()].copy_from_slice(&bytes);
        let raw = read_object(&area, 8, &context()).expect("valid");
        assert_eq!(raw.payload, b"hello payload");
        assert_eq!(raw.header.lsn, 7);
        assert_eq!(raw.header.sn, 3);
        assert_eq!(raw.object_type, ObjectType::DeltaVersion);
        assert_eq!(raw.header.next_offset(), 8 + bytes.len() as u64);
    }

    #[test]
    fn flip_any_byte_is_detected() {
        let bytes = encode_object(&object(0), b"payload bytes");
        let used = HEADER_LEN + b"payload bytes".len();
        for index in 0..used {
            let mut area = vec![0u8; 64 * 1024];
            area[..bytes.len()].copy_from_slice(&bytes);
            area[index] ^= 0x10;
            assert!(read_object(&area, 0, &context()).is_err(), "flip at {index} went unnoticed");
        }
    }

    #[test]
    fn misdirected_objects_are_invalid() {
        let mut area = vec![0u8; 64 * 1024];
        let bytes = encode_object(&object(8), b"x");
        area[16..16 + bytes.len()].copy_from_slice(&bytes);
        assert!(matches!(
            read_object(&area, 16, &context()),
            Err(FormatError::InvalidField { field: "log_offset", .. })
        ));
        let mut backup = context();
        backup.kind = LogKind::Backup;
        area[8..8 + bytes.len()].copy_from_slice(&bytes);
        assert!(matches!(read_object(&area, 8, &backup), Err(FormatError::InvalidField { field: "log_kind", .. })));
        let mut other = context();
        other.volume_uuid = [1; 16];
        assert!(matches!(read_object(&area, 8, &other), Err(FormatError::InvalidField { field: "volume_uuid", .. })));
    }

    #[test]
    fn truncated_at_area_end() {
        let area = vec![0u8; 100];
        assert!(read_object(&area, 64, &context()).is_err());
        assert!(read_object(&area, u64::MAX - 7, &context()).is_err());
    }

    #[test]
    fn wrap_left_round_trip_and_flip() {
        let wrap = WrapLeft { ofs_first_live: 4096, lsn_first_live: 42 };
        let payload = wrap.encode(512);
        assert_eq!(payload.len(), 512 - HEADER_LEN);
        assert_eq!(WrapLeft::decode(&payload, 0), Ok(wrap));
        let mut dirty = payload.clone();
        dirty[100] = 1;
        assert!(WrapLeft::decode(&dirty, 0).is_err());
        assert!(check_wrap_right(&wrap_right_payload(512), 0).is_ok());
        assert!(check_wrap_right(&payload, 0).is_err());
    }
}
