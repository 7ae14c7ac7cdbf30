//! Chunks in the slot area (SPEC.md §8): blocks, block index, filter, footer, and a
//! builder that packs sorted entries into one slot with the tail right-aligned.

use crate::batch::{EntryKind, SEQUENCE_MAX};
use crate::codec::{crc32c, Reader, Writer};
use crate::error::FormatError;

/// `"LDSCHUNK"`, SPEC.md §8.3.
pub const CHUNK_MAGIC: [u8; 8] = *b"LDSCHUNK";
/// Bytes of the footer at the end of every slot.
pub const FOOTER_LEN: usize = 160;
/// Bytes of footer covered by the digest.
pub const FOOTER_DIGEST_COVERS: usize = 104;
const FOOTER_CRC_OFFSET: usize = FOOTER_LEN - 4;
/// Bytes of a block trailer.
pub const BLOCK_TRAILER_LEN: usize = 8;
/// Fixed bytes of an entry before key and value.
pub const ENTRY_FIXED_LEN: usize = 14;
/// Bit 31 of a block trailer's `num_entries` (format 1.7, feature `compact_entries`): the
/// block's entries are compact, their header three varints (SPEC.md §8.2).
pub const BLOCK_FLAG_COMPACT: u32 = 1 << 31;
/// Most bytes a compact entry's header takes: sequence and kind in 9 varint bytes (2^59),
/// `len_key` in 3 (2^16), `len_value` in 5 (2^32).
pub const COMPACT_ENTRY_HEADER_MAX_LEN: usize = 17;
/// Fewest bytes a compact entry takes: three 1-byte varints and a 1-byte key.
const COMPACT_ENTRY_MIN_LEN: usize = 4;
/// Fixed bytes of a block index entry before the key.
pub const INDEX_ENTRY_FIXED_LEN: usize = 18;
/// Bytes of the filter header.
pub const FILTER_HEADER_LEN: usize = 8;
/// Most probes a filter may use.
pub const FILTER_PROBES_MAX: u8 = 30;

/// Packs a sequence number and kind (SPEC.md §8.2).
pub fn pack_seq_kind(sequence: u64, kind: EntryKind) -> u64 {
    (sequence << 8) | u64::from(kind.code())
}

/// Unpacks `seq_kind`.
pub fn unpack_seq_kind(seq_kind: u64) -> Option<(u64, EntryKind)> {
    let kind = EntryKind::from_code((seq_kind & 0xff) as u8)?;
    Some((seq_kind >> 8, kind))
}

/// Bytes of `value` as an LEB128 varint.
fn varint_len(value: u64) -> usize {
    (64 - (value | 1).leading_zeros() as usize).div_ceil(7)
}

#[cfg(test)]
fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// The varint at `bytes[*at..]` of at most `max_len` bytes, in its shortest form; advances
/// `at`. `Err(true)` when the bytes end inside it, `Err(false)` when it is longer than
/// `max_len` or than its value needs.
#[inline]
fn get_varint(bytes: &[u8], at: &mut usize, max_len: usize) -> Result<u64, bool> {
    // Most lengths are one byte.
    match bytes.get(*at) {
        Some(&byte) if byte < 0x80 => {
            *at += 1;
            return Ok(u64::from(byte));
        }
        None => return Err(true),
        Some(_) => {}
    }
    let mut value = 0u64;
    for index in 0..max_len {
        let Some(&byte) = bytes.get(*at + index) else {
            return Err(true);
        };
        value |= u64::from(byte & 0x7f) << (7 * index);
        if byte < 0x80 {
            if byte == 0 && index > 0 {
                return Err(false);
            }
            *at += index + 1;
            return Ok(value);
        }
    }
    Err(false)
}

/// The varint that leads a compact entry (SPEC.md §8.2): `(sequence << 1) | 1` for a put,
/// the common kind, `(sequence << 3) | (kind << 1)` for the others, so that a put's
/// sequence below 2^20 takes 3 bytes.
fn compact_tag(sequence: u64, kind: EntryKind) -> u64 {
    match kind {
        EntryKind::Put => (sequence << 1) | 1,
        _ => (sequence << 3) | (u64::from(kind.code()) << 1),
    }
}

/// The `seq_kind` of a compact entry's tag; `None` for a tag that names a put the long way
/// or a sequence above `SEQUENCE_MAX` (which `seq_kind` could not hold).
fn compact_seq_kind(tag: u64) -> Option<u64> {
    if tag & 1 == 1 {
        let sequence = tag >> 1;
        return (sequence <= SEQUENCE_MAX).then(|| pack_seq_kind(sequence, EntryKind::Put));
    }
    let (sequence, code) = (tag >> 3, (tag >> 1) & 3);
    (sequence <= SEQUENCE_MAX && code != u64::from(EntryKind::Put.code())).then_some((sequence << 8) | code)
}

/// Bytes of an entry's header before its key: 14 fixed bytes, or (format 1.7) three varints.
pub fn entry_header_len(compact: bool, sequence: u64, kind: EntryKind, len_key: usize, len_value: usize) -> usize {
    if compact {
        varint_len(compact_tag(sequence, kind)) + varint_len(len_key as u64) + varint_len(len_value as u64)
    } else {
        ENTRY_FIXED_LEN
    }
}

/// Appends one block entry (SPEC.md §8.2): fixed, or compact (`compact`, format 1.7). The
/// key is at most 65535 bytes and the value below 4 GiB (§16).
pub fn encode_entry(out: &mut Vec<u8>, compact: bool, key: &[u8], sequence: u64, kind: EntryKind, value: &[u8]) {
    debug_assert!(key.len() <= usize::from(u16::MAX) && u32::try_from(value.len()).is_ok() && sequence <= SEQUENCE_MAX);
    if compact {
        // The three varints into one buffer, then one copy (a merge writes every entry).
        let mut header = [0u8; COMPACT_ENTRY_HEADER_MAX_LEN];
        let mut len = 0;
        for mut field in [compact_tag(sequence, kind), key.len() as u64, value.len() as u64] {
            while field >= 0x80 {
                header[len] = field as u8 | 0x80;
                field >>= 7;
                len += 1;
            }
            header[len] = field as u8;
            len += 1;
        }
        out.extend_from_slice(&header[..len]);
    } else {
        out.extend_from_slice(&pack_seq_kind(sequence, kind).to_le_bytes());
        out.extend_from_slice(&(key.len() as u16).to_le_bytes());
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// The chunk footer (SPEC.md §8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    /// `version_major`.
    pub version_major: u16,
    /// Level when written.
    pub level: u8,
    /// Flags (bit 0 odd, bit 1 the digest is xxh3-128: `FOOTER_FLAG_*`).
    pub flags: u8,
    /// Owning instance.
    pub instance: u32,
    /// Slot of sub-chunk 0.
    pub chunk_id: u64,
    /// Index of this sub-chunk.
    pub sub_chunk_index: u16,
    /// Sub-chunks in the chunk.
    pub num_sub_chunks: u16,
    /// Blocks in the body.
    pub num_blocks: u32,
    /// Entries in this sub-chunk.
    pub num_entries: u64,
    /// Smallest sequence number.
    pub smallest_seq: u64,
    /// Largest sequence number.
    pub largest_seq: u64,
    /// Bytes of blocks.
    pub len_body: u32,
    /// Offset of the index in the slot.
    pub ofs_index: u32,
    /// Bytes of the index.
    pub len_index: u32,
    /// crc32c of the index.
    pub index_crc32c: u32,
    /// Offset of the filter in the slot.
    pub ofs_filter: u32,
    /// Bytes of the filter.
    pub len_filter: u32,
    /// crc32c of the filter.
    pub filter_crc32c: u32,
    /// Slot size it was written for.
    pub slot_size: u32,
    /// The volume.
    pub volume_uuid: [u8; 16],
    /// The digest of body, index, filter and footer bytes 0..104: blake3, or (flag
    /// `FOOTER_FLAG_XXH3`) xxh3-128 and 16 zero bytes (SPEC.md §8.3).
    pub digest: [u8; 32],
    /// Offset of the key sketch in the slot (format 1.5, SPEC.md §8.7; 0 without one).
    pub ofs_sketch: u32,
    /// Bytes of the key sketch (0: none).
    pub len_sketch: u32,
    /// crc32c of the key sketch (0 without one).
    pub sketch_crc32c: u32,
    /// crc32c of footer bytes 0..156.
    pub footer_crc32c: u32,
}

impl Footer {
    /// Encodes the footer with its checksum; `digest` must already be set.
    pub fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut bytes = [0u8; FOOTER_LEN];
        let covered = self.encode_digest_covered();
        bytes[..FOOTER_DIGEST_COVERS].copy_from_slice(&covered);
        bytes[FOOTER_DIGEST_COVERS..FOOTER_DIGEST_COVERS + 32].copy_from_slice(&self.digest);
        bytes[136..140].copy_from_slice(&self.ofs_sketch.to_le_bytes());
        bytes[140..144].copy_from_slice(&self.len_sketch.to_le_bytes());
        bytes[144..148].copy_from_slice(&self.sketch_crc32c.to_le_bytes());
        let crc = crc32c(&bytes[..FOOTER_CRC_OFFSET]);
        bytes[FOOTER_CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// The first 104 bytes (what the digest covers).
    pub fn encode_digest_covered(&self) -> [u8; FOOTER_DIGEST_COVERS] {
        let mut writer = Writer::with_capacity(FOOTER_DIGEST_COVERS);
        writer
            .bytes(&CHUNK_MAGIC)
            .u16(self.version_major)
            .u8(self.level)
            .u8(self.flags)
            .u32(self.instance)
            .u64(self.chunk_id)
            .u16(self.sub_chunk_index)
            .u16(self.num_sub_chunks)
            .u32(self.num_blocks)
            .u64(self.num_entries)
            .u64(self.smallest_seq)
            .u64(self.largest_seq)
            .u32(self.len_body)
            .u32(self.ofs_index)
            .u32(self.len_index)
            .u32(self.index_crc32c)
            .u32(self.ofs_filter)
            .u32(self.len_filter)
            .u32(self.filter_crc32c)
            .u32(self.slot_size)
            .bytes(&self.volume_uuid);
        let mut bytes = [0u8; FOOTER_DIGEST_COVERS];
        bytes.copy_from_slice(writer.as_slice());
        bytes
    }

    /// True when the bytes start with the chunk magic (SPEC.md §15: an empty slot otherwise).
    pub fn has_magic(bytes: &[u8]) -> bool {
        bytes.len() >= 8 && bytes[..8] == CHUNK_MAGIC
    }

    /// Decodes the raw fields after checking the magic only (for inspection).
    pub fn parse_raw(bytes: &[u8], offset: u64) -> Result<Self, FormatError> {
        const S: &str = "chunk footer";
        let mut reader = Reader::new(bytes, S, offset);
        let magic: [u8; 8] = reader.array()?;
        if magic != CHUNK_MAGIC {
            return Err(FormatError::BadMagic { structure: S, offset, found: magic.to_vec() });
        }
        let footer = Self {
            version_major: reader.u16()?,
            level: reader.u8()?,
            flags: reader.u8()?,
            instance: reader.u32()?,
            chunk_id: reader.u64()?,
            sub_chunk_index: reader.u16()?,
            num_sub_chunks: reader.u16()?,
            num_blocks: reader.u32()?,
            num_entries: reader.u64()?,
            smallest_seq: reader.u64()?,
            largest_seq: reader.u64()?,
            len_body: reader.u32()?,
            ofs_index: reader.u32()?,
            len_index: reader.u32()?,
            index_crc32c: reader.u32()?,
            ofs_filter: reader.u32()?,
            len_filter: reader.u32()?,
            filter_crc32c: reader.u32()?,
            slot_size: reader.u32()?,
            volume_uuid: reader.array()?,
            digest: reader.array()?,
            ofs_sketch: reader.u32()?,
            len_sketch: reader.u32()?,
            sketch_crc32c: reader.u32()?,
            footer_crc32c: {
                reader.bytes(8)?;
                reader.u32()?
            },
        };
        Ok(footer)
    }

    /// Decodes and checks a footer: magic, checksum, version, reserved bytes and the
    /// layout invariants of SPEC.md §8.3 against `slot_size`.
    pub fn decode(bytes: &[u8], offset: u64, slot_size: u64) -> Result<Self, FormatError> {
        const S: &str = "chunk footer";
        let footer = Self::parse_raw(bytes, offset)?;
        if bytes.len() < FOOTER_LEN {
            return Err(FormatError::Truncated {
                structure: S,
                offset,
                needed: FOOTER_LEN as u64,
                available: bytes.len() as u64,
            });
        }
        let actual = crc32c(&bytes[..FOOTER_CRC_OFFSET]);
        if actual != footer.footer_crc32c {
            return Err(FormatError::ChecksumMismatch { structure: S, offset, expected: footer.footer_crc32c, actual });
        }
        if footer.version_major != 1 {
            return Err(FormatError::UnsupportedVersion {
                structure: S,
                offset,
                major: footer.version_major,
                minor: 0,
            });
        }
        Reader::new(&bytes[148..156], S, offset + 148).reserved(8)?;
        let invalid = |field: &'static str, reason: String| Err(FormatError::invalid(S, field, offset, reason));
        if footer.flags & !(FOOTER_FLAG_ODD | FOOTER_FLAG_XXH3) != 0 {
            return invalid("flags", "reserved bits set".into());
        }
        if footer.flags & FOOTER_FLAG_XXH3 != 0 && footer.digest[16..] != [0; 16] {
            return invalid("digest", "an xxh3-128 digest with its last 16 bytes not zero".into());
        }
        if u64::from(footer.slot_size) != slot_size {
            return invalid("slot_size", format!("{} but the volume's slots are {slot_size} bytes", footer.slot_size));
        }
        let tail_end = slot_size - FOOTER_LEN as u64;
        if u64::from(footer.ofs_filter) + u64::from(footer.len_filter) != tail_end {
            return invalid("ofs_filter", "the filter does not end where the footer starts".into());
        }
        if u64::from(footer.ofs_index) + u64::from(footer.len_index) != u64::from(footer.ofs_filter) {
            return invalid("ofs_index", "the index does not end where the filter starts".into());
        }
        if footer.len_body > footer.ofs_index {
            return invalid("len_body", "the body overlaps the index".into());
        }
        if footer.len_sketch == 0 && (footer.ofs_sketch != 0 || footer.sketch_crc32c != 0) {
            return invalid("ofs_sketch", "no key sketch, but its offset or crc32c is set".into());
        }
        if footer.len_sketch != 0
            && (footer.ofs_sketch < footer.len_body
                || u64::from(footer.ofs_sketch) + u64::from(footer.len_sketch) != u64::from(footer.ofs_index))
        {
            return invalid(
                "ofs_sketch",
                "the key sketch does not lie between the body and the index (SPEC.md §8.7)".into(),
            );
        }
        if footer.num_sub_chunks == 0 || footer.sub_chunk_index >= footer.num_sub_chunks {
            return invalid("sub_chunk_index", format!("{} of {}", footer.sub_chunk_index, footer.num_sub_chunks));
        }
        if footer.num_blocks == 0 || footer.num_entries == 0 {
            return invalid("num_entries", "an empty chunk".into());
        }
        if footer.smallest_seq > footer.largest_seq || footer.largest_seq > SEQUENCE_MAX {
            return invalid("smallest_seq", "sequence range is not ordered or exceeds 2^56".into());
        }
        if u64::from(footer.level) >= 16 {
            return invalid("level", "at or above the level limit 16".into());
        }
        Ok(footer)
    }
}

/// One block index entry (SPEC.md §8.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    /// Offset of the block in the slot.
    pub ofs_block: u32,
    /// Bytes of the block with its trailer.
    pub len_block: u32,
    /// `seq_kind` of the block's last entry.
    pub last_seq_kind: u64,
    /// The block's last user key.
    pub last_key: Vec<u8>,
}

/// Decodes the block index and checks it against the footer: crc, count, contiguous blocks
/// ending at `len_body`, last keys in order.
pub fn decode_index(bytes: &[u8], offset: u64, footer: &Footer) -> Result<Vec<IndexEntry>, FormatError> {
    const S: &str = "block index";
    let actual = crc32c(bytes);
    if actual != footer.index_crc32c {
        return Err(FormatError::ChecksumMismatch { structure: S, offset, expected: footer.index_crc32c, actual });
    }
    let mut reader = Reader::new(bytes, S, offset);
    let count = reader.count(u64::from(footer.num_blocks), INDEX_ENTRY_FIXED_LEN, "num_blocks")?;
    let mut entries: Vec<IndexEntry> = Vec::with_capacity(count);
    let mut expected_offset = 0u32;
    for _ in 0..count {
        let entry_offset = reader.offset();
        let entry = IndexEntry {
            ofs_block: reader.u32()?,
            len_block: reader.u32()?,
            last_seq_kind: reader.u64()?,
            last_key: reader.key()?.to_vec(),
        };
        if entry.ofs_block != expected_offset || (entry.len_block as usize) < BLOCK_TRAILER_LEN + COMPACT_ENTRY_MIN_LEN
        {
            return Err(FormatError::invalid(
                S,
                "ofs_block",
                entry_offset,
                "blocks are not contiguous from the slot start",
            ));
        }
        if unpack_seq_kind(entry.last_seq_kind).is_none() {
            return Err(FormatError::invalid(S, "last_seq_kind", entry_offset, "unknown kind"));
        }
        if let Some(previous) = entries.last() {
            if compare_internal(&previous.last_key, previous.last_seq_kind, &entry.last_key, entry.last_seq_kind)
                != std::cmp::Ordering::Less
            {
                return Err(FormatError::invalid(S, "last_key", entry_offset, "blocks are not in key order"));
            }
        }
        expected_offset = entry
            .ofs_block
            .checked_add(entry.len_block)
            .ok_or_else(|| FormatError::invalid(S, "len_block", entry_offset, "overflows"))?;
        entries.push(entry);
    }
    reader.finish()?;
    if expected_offset != footer.len_body {
        return Err(FormatError::invalid(
            S,
            "len_block",
            offset,
            format!("blocks end at {expected_offset}, len_body is {}", footer.len_body),
        ));
    }
    Ok(entries)
}

/// Orders internal keys: user key ascending, then `seq_kind` descending (newest first).
pub fn compare_internal(key_a: &[u8], seq_kind_a: u64, key_b: &[u8], seq_kind_b: u64) -> std::cmp::Ordering {
    crate::codec::compare_keys(key_a, key_b).then(seq_kind_b.cmp(&seq_kind_a))
}

/// One decoded entry, borrowing the block's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryRef<'a> {
    /// User key.
    pub key: &'a [u8],
    /// Sequence number.
    pub sequence: u64,
    /// Put or delete.
    pub kind: EntryKind,
    /// Value (empty for a delete).
    pub value: &'a [u8],
}

/// Why an entry header could not be read (`entry_header`).
pub(crate) enum BadHeader {
    /// The bytes end at `at`, `needed` short.
    Truncated { at: usize, needed: usize },
    /// A compact entry's varint `field` is longer than its field allows, too large, or not
    /// in its shortest form.
    Varint(&'static str),
}

/// The header of the entry at `body[at..]` (SPEC.md §8.2): `(seq_kind, len_key, len_value,
/// where the key starts)`; `compact` (block trailer flag) says which encoding.
pub(crate) fn entry_header(body: &[u8], at: usize, compact: bool) -> Result<(u64, usize, usize, usize), BadHeader> {
    if compact {
        let mut cursor = at;
        let mut varint = |field: &'static str, max_len: usize, limit: u64| match get_varint(body, &mut cursor, max_len)
        {
            Ok(value) if value <= limit => Ok(value),
            Err(true) => Err(BadHeader::Truncated { at: body.len(), needed: 1 }),
            _ => Err(BadHeader::Varint(field)),
        };
        let tag = varint("seq_kind", 9, (SEQUENCE_MAX << 3) | 7)?;
        let seq_kind = compact_seq_kind(tag).ok_or(BadHeader::Varint("seq_kind"))?;
        let len_key = varint("len_key", 3, u64::from(u16::MAX))? as usize;
        let len_value = varint("len_value", 5, u64::from(u32::MAX))? as usize;
        Ok((seq_kind, len_key, len_value, cursor))
    } else {
        let Some(fixed) = body.get(at..at + ENTRY_FIXED_LEN) else {
            return Err(BadHeader::Truncated { at, needed: ENTRY_FIXED_LEN });
        };
        let seq_kind =
            u64::from_le_bytes([fixed[0], fixed[1], fixed[2], fixed[3], fixed[4], fixed[5], fixed[6], fixed[7]]);
        let len_key = usize::from(u16::from_le_bytes([fixed[8], fixed[9]]));
        let len_value = u32::from_le_bytes([fixed[10], fixed[11], fixed[12], fixed[13]]) as usize;
        Ok((seq_kind, len_key, len_value, at + ENTRY_FIXED_LEN))
    }
}

/// Checks a block's trailer crc and decodes its entries in order.
pub fn decode_block(bytes: &[u8], offset: u64) -> Result<Vec<EntryRef<'_>>, FormatError> {
    let mut entries = Vec::new();
    visit_block(bytes, offset, |entry| entries.push(entry))?;
    Ok(entries)
}

/// Checks a block's crc and calls `visit` for each entry, in order, checking that entries are
/// sorted.
pub fn visit_block<'a>(bytes: &'a [u8], offset: u64, visit: impl FnMut(EntryRef<'a>)) -> Result<u32, FormatError> {
    visit_block_checked(bytes, offset, true, visit)
}

/// As [`visit_block`], with the order of entries checked only when `sorted` (repair reads the
/// entries of a block whose checksum holds even when they are out of order, and sorts them).
pub fn visit_block_checked<'a>(
    bytes: &'a [u8],
    offset: u64,
    sorted: bool,
    mut visit: impl FnMut(EntryRef<'a>),
) -> Result<u32, FormatError> {
    const S: &str = "block";
    if bytes.len() < BLOCK_TRAILER_LEN {
        return Err(FormatError::Truncated {
            structure: S,
            offset,
            needed: BLOCK_TRAILER_LEN as u64,
            available: bytes.len() as u64,
        });
    }
    let crc_at = bytes.len() - 4;
    let stored = u32::from_le_bytes([bytes[crc_at], bytes[crc_at + 1], bytes[crc_at + 2], bytes[crc_at + 3]]);
    let actual = crc32c(&bytes[..crc_at]);
    if stored != actual {
        return Err(FormatError::ChecksumMismatch { structure: S, offset, expected: stored, actual });
    }
    let count_at = bytes.len() - BLOCK_TRAILER_LEN;
    let trailer_count =
        u32::from_le_bytes([bytes[count_at], bytes[count_at + 1], bytes[count_at + 2], bytes[count_at + 3]]);
    let compact = trailer_count & BLOCK_FLAG_COMPACT != 0;
    let num_entries = trailer_count & !BLOCK_FLAG_COMPACT;
    let body = &bytes[..count_at];
    let entry_min = if compact { COMPACT_ENTRY_MIN_LEN } else { ENTRY_FIXED_LEN + 1 };
    let count = Reader::new(body, S, offset).count(u64::from(num_entries), entry_min, "num_entries")?;
    if count == 0 {
        return Err(FormatError::invalid(S, "num_entries", offset, "an empty block"));
    }
    // A tight parse (reads decode every block they load): each entry's header, then its key
    // and value, every length checked against the bytes that remain before it is used.
    let truncated = |at: usize, needed: usize| FormatError::Truncated {
        structure: S,
        offset: offset + at as u64,
        needed: needed as u64,
        available: (body.len() - at) as u64,
    };
    let mut at = 0usize;
    let mut previous: Option<(&[u8], u64)> = None;
    for _ in 0..count {
        let entry_offset = offset + at as u64;
        let (seq_kind, len_key, len_value, key_start) = entry_header(body, at, compact).map_err(|bad| match bad {
            BadHeader::Truncated { at, needed } => truncated(at, needed),
            BadHeader::Varint(field) => {
                FormatError::invalid(S, field, entry_offset, "a varint longer or larger than its field allows")
            }
        })?;
        let Some(key) = body.get(key_start..key_start + len_key) else {
            return Err(truncated(key_start, len_key));
        };
        let value_start = key_start + len_key;
        let Some(value) = value_start.checked_add(len_value).and_then(|end| body.get(value_start..end)) else {
            return Err(truncated(value_start, len_value));
        };
        at = value_start + len_value;
        let (sequence, kind) = unpack_seq_kind(seq_kind)
            .ok_or_else(|| FormatError::invalid(S, "seq_kind", entry_offset, "unknown kind"))?;
        if key.is_empty() {
            return Err(FormatError::invalid(S, "len_key", entry_offset, "empty key"));
        }
        if kind == EntryKind::Pointer && !crate::value::is_pointer_shaped(value) {
            return Err(FormatError::invalid(
                S,
                "len_value",
                entry_offset,
                "a pointer entry whose value is no pointer",
            ));
        }
        if kind == EntryKind::LogRef && !crate::logref::is_log_ref_shaped(value) {
            return Err(FormatError::invalid(
                S,
                "len_value",
                entry_offset,
                "a log reference entry whose value is no log reference",
            ));
        }
        if let Some((previous_key, previous_seq_kind)) = previous.filter(|_| sorted) {
            if compare_internal(previous_key, previous_seq_kind, key, seq_kind) != std::cmp::Ordering::Less {
                return Err(FormatError::invalid(S, "key", entry_offset, "entries are not sorted"));
            }
        }
        previous = Some((key, seq_kind));
        visit(EntryRef { key, sequence, kind, value });
    }
    if at != body.len() {
        return Err(FormatError::TrailingBytes {
            structure: S,
            offset: offset + at as u64,
            len: (body.len() - at) as u64,
        });
    }
    Ok(num_entries)
}

/// A Bloom filter over user keys (SPEC.md §8.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// Probes per key.
    pub num_probes: u8,
    /// The bit array; its length times 8 is `num_bits`.
    pub bits: Vec<u8>,
}

/// The hash the filter uses.
pub fn filter_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(key)
}

impl Filter {
    /// Builds a filter from key hashes with `bits_per_key` bits each (0 gives no filter).
    pub fn build(hashes: &[u64], bits_per_key: u32) -> Self {
        if bits_per_key == 0 || hashes.is_empty() {
            return Self { num_probes: 0, bits: Vec::new() };
        }
        let num_bits = (hashes.len() as u64 * u64::from(bits_per_key)).max(64).div_ceil(8) * 8;
        let num_probes = ((f64::from(bits_per_key) * 0.69).round() as u8).clamp(1, FILTER_PROBES_MAX);
        let mut bits = vec![0u8; (num_bits / 8) as usize];
        for &hash in hashes {
            for bit in probe_bits(hash, num_probes, num_bits as u32) {
                bits[(bit / 8) as usize] |= 1 << (bit % 8);
            }
        }
        Self { num_probes, bits }
    }

    /// Bytes a filter for `num_keys` keys takes.
    pub fn encoded_len(num_keys: usize, bits_per_key: u32) -> usize {
        if bits_per_key == 0 || num_keys == 0 {
            return FILTER_HEADER_LEN;
        }
        FILTER_HEADER_LEN + ((num_keys as u64 * u64::from(bits_per_key)).max(64).div_ceil(8)) as usize
    }

    /// `num_bits`.
    pub fn num_bits(&self) -> u32 {
        (self.bits.len() * 8) as u32
    }

    /// False only when the key is certainly absent.
    pub fn may_contain(&self, key: &[u8]) -> bool {
        let num_bits = self.num_bits();
        if num_bits == 0 || self.num_probes == 0 {
            return true;
        }
        probe_bits(filter_hash(key), self.num_probes, num_bits)
            .all(|bit| self.bits[(bit / 8) as usize] & (1 << (bit % 8)) != 0)
    }

    /// Encodes the filter.
    pub fn encode(&self, writer: &mut Writer) {
        writer.u8(self.num_probes).zeros(3).u32(self.num_bits()).bytes(&self.bits);
    }

    /// Decodes a filter after checking its crc against the footer.
    pub fn decode(bytes: &[u8], offset: u64, footer: &Footer) -> Result<Self, FormatError> {
        const S: &str = "filter";
        let actual = crc32c(bytes);
        if actual != footer.filter_crc32c {
            return Err(FormatError::ChecksumMismatch { structure: S, offset, expected: footer.filter_crc32c, actual });
        }
        let mut reader = Reader::new(bytes, S, offset);
        let num_probes = reader.u8()?;
        reader.reserved(3)?;
        let num_bits = reader.u32()?;
        if num_bits % 8 != 0 || num_probes > FILTER_PROBES_MAX || (num_bits == 0) != (num_probes == 0) {
            return Err(FormatError::invalid(
                S,
                "num_bits",
                offset,
                format!("{num_bits} bits with {num_probes} probes"),
            ));
        }
        let bits = reader.bytes((num_bits / 8) as usize)?.to_vec();
        reader.finish()?;
        Ok(Self { num_probes, bits })
    }
}

fn probe_bits(hash: u64, num_probes: u8, num_bits: u32) -> impl Iterator<Item = u32> {
    let h1 = hash as u32;
    let h2 = (hash >> 32) as u32;
    let modulo = Modulo::new(num_bits);
    (0..u32::from(num_probes)).map(move |i| modulo.of(h1.wrapping_add(i.wrapping_mul(h2))))
}

/// `x % divisor` for any 32-bit `x` by two multiplications instead of a division (Lemire,
/// Kaser and Kurz, "Faster remainder by direct computation", 2019): exact for every 32-bit
/// dividend and divisor. Filters probe seven bits per key, on every lookup and every key
/// `fsck --deep` checks.
#[derive(Debug, Clone, Copy)]
struct Modulo {
    divisor: u64,
    /// ceil(2^64 / divisor), which wraps to 0 for divisor 1 (every remainder is then 0).
    magic: u64,
}

impl Modulo {
    fn new(divisor: u32) -> Self {
        let divisor = u64::from(divisor.max(1));
        Self { divisor, magic: (u64::MAX / divisor).wrapping_add(1) }
    }

    fn of(self, x: u32) -> u32 {
        let fraction = self.magic.wrapping_mul(u64::from(x));
        ((u128::from(fraction) * u128::from(self.divisor)) >> 64) as u32
    }
}

/// What a sub-chunk is, for its footer.
#[derive(Debug, Clone, Copy)]
pub struct ChunkIdentity {
    /// The volume.
    pub volume_uuid: [u8; 16],
    /// Owning instance.
    pub instance: u32,
    /// Slot of sub-chunk 0.
    pub chunk_id: u64,
    /// Index of this sub-chunk.
    pub sub_chunk_index: u16,
    /// Sub-chunks in the chunk (may be patched by `BuiltSubChunk::set_sub_chunk_count`).
    pub num_sub_chunks: u16,
    /// Level.
    pub level: u8,
    /// Flags.
    pub flags: u8,
}

/// Options for building chunks.
#[derive(Debug, Clone, Copy)]
pub struct ChunkOptions {
    /// Slot size of the volume.
    pub slot_size: u64,
    /// Target uncompressed block size.
    pub block_size: usize,
    /// Bloom filter bits per key (0: no filter).
    pub bloom_bits_per_key: u32,
    /// The digest the footer records (xxh3-128 on volumes with feature `fast_digest`).
    pub digest: DigestKind,
    /// The precision of the key sketch each sub-chunk carries (SPEC.md §8.7, volumes with
    /// feature `chunk_sketches`); 0 for none.
    pub sketch_precision: u8,
    /// Blocks hold compact entries (SPEC.md §8.2, volumes with feature `compact_entries`).
    pub compact_entries: bool,
}

impl ChunkOptions {
    /// Bytes of the key sketch each sub-chunk carries.
    pub fn sketch_len(&self) -> usize {
        if self.sketch_precision == 0 {
            0
        } else {
            crate::sketch::Sketch::encoded_len(self.sketch_precision)
        }
    }
}

/// Footer flag bit 0: the chunk is its level's odd chunk (SPEC.md §11).
pub const FOOTER_FLAG_ODD: u8 = 1;
/// Footer flag bit 1 (format 1.3, feature `fast_digest`): the digest is xxh3-128 followed by
/// 16 zero bytes, not blake3 (SPEC.md §8.3).
pub const FOOTER_FLAG_XXH3: u8 = 2;

/// Which function a chunk's digest is (SPEC.md §8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DigestKind {
    /// blake3, 32 bytes (format 1.0 to 1.2).
    #[default]
    Blake3,
    /// xxh3-128, then 16 zero bytes (format 1.3, feature `fast_digest`): about ten times
    /// cheaper, and as good against stale or misdirected sectors (nothing here is adversarial).
    Xxh3,
}

impl DigestKind {
    /// The kind a footer's flags name.
    pub fn of_flags(flags: u8) -> Self {
        if flags & FOOTER_FLAG_XXH3 != 0 {
            Self::Xxh3
        } else {
            Self::Blake3
        }
    }

    /// The footer flag bit it sets.
    pub fn flag(self) -> u8 {
        match self {
            Self::Blake3 => 0,
            Self::Xxh3 => FOOTER_FLAG_XXH3,
        }
    }
}

/// A digest being computed, either kind.
#[derive(Clone)]
pub(crate) enum DigestState {
    Blake3(Box<blake3::Hasher>),
    Xxh3(Box<xxhash_rust::xxh3::Xxh3>),
}

impl std::fmt::Debug for DigestState {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(match self {
            Self::Blake3(_) => "DigestState::Blake3",
            Self::Xxh3(_) => "DigestState::Xxh3",
        })
    }
}

impl DigestState {
    pub(crate) fn new(kind: DigestKind) -> Self {
        match kind {
            DigestKind::Blake3 => Self::Blake3(Box::new(blake3::Hasher::new())),
            DigestKind::Xxh3 => Self::Xxh3(Box::new(xxhash_rust::xxh3::Xxh3::new())),
        }
    }

    pub(crate) fn update(&mut self, bytes: &[u8]) {
        match self {
            Self::Blake3(hasher) => {
                hasher.update(bytes);
            }
            Self::Xxh3(hasher) => hasher.update(bytes),
        }
    }

    pub(crate) fn finish(&self) -> [u8; 32] {
        match self {
            Self::Blake3(hasher) => *hasher.finalize().as_bytes(),
            Self::Xxh3(hasher) => {
                let mut digest = [0u8; 32];
                digest[..16].copy_from_slice(&hasher.digest128().to_le_bytes());
                digest
            }
        }
    }
}

/// Packs sorted entries into one slot.
pub struct ChunkBuilder {
    options: ChunkOptions,
    body: Vec<u8>,
    block_start: usize,
    block_entries: u32,
    index: Writer,
    num_blocks: u32,
    key_hashes: Vec<u64>,
    last_key: Vec<u8>,
    last_seq_kind: u64,
    first_key: Vec<u8>,
    num_entries: u64,
    smallest_seq: u64,
    largest_seq: u64,
    /// Bytes the pointer entries hold in each value chunk (SPEC.md §6.4, §8.6).
    value_refs: std::collections::BTreeMap<u64, u64>,
    /// The oldest backup log object the log references name (SPEC.md §8.9).
    log_start: Option<crate::logref::LogPosition>,
}

impl ChunkBuilder {
    /// An empty builder.
    pub fn new(options: ChunkOptions) -> Self {
        Self {
            options,
            body: Vec::with_capacity(options.slot_size as usize),
            block_start: 0,
            block_entries: 0,
            index: Writer::new(),
            num_blocks: 0,
            key_hashes: Vec::new(),
            last_key: Vec::new(),
            last_seq_kind: 0,
            first_key: Vec::new(),
            num_entries: 0,
            smallest_seq: u64::MAX,
            largest_seq: 0,
            value_refs: std::collections::BTreeMap::new(),
            log_start: None,
        }
    }

    /// Entries added so far.
    pub fn num_entries(&self) -> u64 {
        self.num_entries
    }

    /// True when nothing was added.
    pub fn is_empty(&self) -> bool {
        self.num_entries == 0
    }

    /// Bytes the finished slot content would use now (body, open block trailer, tail).
    pub fn estimated_len(&self) -> usize {
        let open_block =
            if self.block_entries > 0 { BLOCK_TRAILER_LEN + INDEX_ENTRY_FIXED_LEN + self.last_key.len() } else { 0 };
        self.body.len()
            + open_block
            + self.index.len()
            + Filter::encoded_len(self.key_hashes.len(), self.options.bloom_bits_per_key)
            + self.options.sketch_len()
            + FOOTER_LEN
    }

    /// Adds an entry if it fits the slot; returns false (adding nothing) when it does not.
    /// Entries must come in internal-key order.
    pub fn add(&mut self, key: &[u8], sequence: u64, kind: EntryKind, value: &[u8]) -> bool {
        let compact = self.options.compact_entries;
        let entry_len = entry_header_len(compact, sequence, kind, key.len(), value.len()) + key.len() + value.len();
        let new_key = usize::from(self.num_entries == 0 || self.last_key != key);
        let close_first = self.block_entries > 0
            && self.body.len() - self.block_start + entry_len + BLOCK_TRAILER_LEN > self.options.block_size;
        // The finished length if this entry is added: closing the open block first fixes its
        // trailer and index entry; the block holding the entry then ends with this key.
        let (body_len, index_len) = if close_first {
            (
                self.body.len() + BLOCK_TRAILER_LEN + entry_len,
                self.index.len() + INDEX_ENTRY_FIXED_LEN + self.last_key.len() + INDEX_ENTRY_FIXED_LEN + key.len(),
            )
        } else {
            (self.body.len() + entry_len, self.index.len() + INDEX_ENTRY_FIXED_LEN + key.len())
        };
        let needed = body_len
            + BLOCK_TRAILER_LEN
            + index_len
            + Filter::encoded_len(self.key_hashes.len() + new_key, self.options.bloom_bits_per_key)
            + self.options.sketch_len()
            + FOOTER_LEN;
        if needed > self.options.slot_size as usize {
            return false;
        }
        if close_first {
            self.close_block();
        }
        let seq_kind = pack_seq_kind(sequence, kind);
        debug_assert!(
            self.num_entries == 0 || compare_internal(&self.last_key, self.last_seq_kind, key, seq_kind).is_lt()
        );
        encode_entry(&mut self.body, compact, key, sequence, kind, value);
        if new_key == 1 {
            self.key_hashes.push(filter_hash(key));
        }
        if kind == EntryKind::Pointer {
            crate::value::pointer_refs(value, &mut self.value_refs);
        }
        if kind == EntryKind::LogRef {
            if let Ok(reference) = crate::logref::LogRef::decode(value, 0) {
                let position = reference.position();
                self.log_start = Some(self.log_start.map_or(position, |start| start.min(position)));
            }
        }
        if self.num_entries == 0 {
            self.first_key = key.to_vec();
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.last_seq_kind = seq_kind;
        self.block_entries += 1;
        self.num_entries += 1;
        self.smallest_seq = self.smallest_seq.min(sequence);
        self.largest_seq = self.largest_seq.max(sequence);
        true
    }

    fn close_block(&mut self) {
        if self.block_entries == 0 {
            return;
        }
        let flag = if self.options.compact_entries { BLOCK_FLAG_COMPACT } else { 0 };
        self.body.extend_from_slice(&(self.block_entries | flag).to_le_bytes());
        let crc = crc32c(&self.body[self.block_start..]);
        self.body.extend_from_slice(&crc.to_le_bytes());
        let len_block = (self.body.len() - self.block_start) as u32;
        self.index.u32(self.block_start as u32).u32(len_block).u64(self.last_seq_kind).key(&self.last_key);
        self.num_blocks += 1;
        self.block_start = self.body.len();
        self.block_entries = 0;
    }

    /// Finishes the sub-chunk. Returns `None` when no entry was added.
    pub fn finish(mut self, identity: ChunkIdentity) -> Option<BuiltSubChunk> {
        if self.num_entries == 0 {
            return None;
        }
        self.close_block();
        let mut tail = Writer::with_capacity(self.index.len() + 64 + FOOTER_LEN);
        tail.bytes(self.index.as_slice());
        let len_index = self.index.len() as u32;
        let filter = Filter::build(&self.key_hashes, self.options.bloom_bits_per_key);
        filter.encode(&mut tail);
        let len_filter = tail.len() as u32 - len_index;
        let slot_size = self.options.slot_size;
        let tail_len = tail.len() + FOOTER_LEN;
        let sketch = if self.options.sketch_precision == 0 {
            Vec::new()
        } else {
            let mut sketch = crate::sketch::Sketch::new(self.options.sketch_precision);
            for &hash in &self.key_hashes {
                sketch.add_hash(hash);
            }
            sketch.encode()
        };
        assert!(self.body.len() + sketch.len() + tail_len <= slot_size as usize, "builder overflowed its slot");
        let ofs_index = (slot_size as usize - tail_len) as u32;
        let (ofs_sketch, sketch_crc32c) =
            if sketch.is_empty() { (0, 0) } else { (ofs_index - sketch.len() as u32, crc32c(&sketch)) };
        let footer = Footer {
            version_major: 1,
            level: identity.level,
            flags: identity.flags | self.options.digest.flag(),
            instance: identity.instance,
            chunk_id: identity.chunk_id,
            sub_chunk_index: identity.sub_chunk_index,
            num_sub_chunks: identity.num_sub_chunks,
            num_blocks: self.num_blocks,
            num_entries: self.num_entries,
            smallest_seq: self.smallest_seq,
            largest_seq: self.largest_seq,
            len_body: self.body.len() as u32,
            ofs_index,
            len_index,
            index_crc32c: crc32c(&tail.as_slice()[..len_index as usize]),
            ofs_filter: ofs_index + len_index,
            len_filter,
            filter_crc32c: crc32c(&tail.as_slice()[len_index as usize..]),
            slot_size: slot_size as u32,
            volume_uuid: identity.volume_uuid,
            digest: [0; 32],
            ofs_sketch,
            len_sketch: sketch.len() as u32,
            sketch_crc32c,
            footer_crc32c: 0,
        };
        let tail_without_footer = tail.into_bytes();
        // The digest covers the body and the tail, then footer bytes 0..104: the first part
        // is hashed once, and each reseal (a level, flags or identity set later) hashes only
        // the footer's bytes after it.
        let mut digest_prefix = DigestState::new(self.options.digest);
        digest_prefix.update(&self.body);
        digest_prefix.update(&tail_without_footer);
        let mut built = BuiltSubChunk {
            body: self.body,
            tail_without_footer,
            footer,
            first_key: self.first_key,
            last_key: self.last_key,
            value_refs: self.value_refs.into_iter().collect(),
            log_start: self.log_start,
            sketch,
            digest_prefix,
        };
        built.seal();
        Some(built)
    }
}

/// A finished sub-chunk: the body goes at the slot start, the tail at the slot end.
#[derive(Debug, Clone)]
pub struct BuiltSubChunk {
    /// Blocks.
    pub body: Vec<u8>,
    /// Index and filter.
    pub tail_without_footer: Vec<u8>,
    /// The footer (digest and checksum set).
    pub footer: Footer,
    /// Smallest user key.
    pub first_key: Vec<u8>,
    /// Largest user key.
    pub last_key: Vec<u8>,
    /// Bytes its pointer entries hold in each value chunk, by value chunk id (SPEC.md §6.4).
    pub value_refs: Vec<(u64, u64)>,
    /// The oldest backup log object its log references name (SPEC.md §8.9), if it has any.
    pub log_start: Option<crate::logref::LogPosition>,
    /// The encoded key sketch (SPEC.md §8.7), written just before the index; empty for none.
    pub sketch: Vec<u8>,
    /// The digest's hasher after the body and the tail (see `ChunkBuilder::finish`).
    digest_prefix: DigestState,
}

impl AsMut<BuiltSubChunk> for BuiltSubChunk {
    fn as_mut(&mut self) -> &mut BuiltSubChunk {
        self
    }
}

impl BuiltSubChunk {
    fn seal(&mut self) {
        let mut hasher = self.digest_prefix.clone();
        hasher.update(&self.footer.encode_digest_covered());
        self.footer.digest = hasher.finish();
        // (Checked while the body is kept: a writer may drop it once written.)
        debug_assert!(
            self.body.len() != self.footer.len_body as usize
                || self.footer.digest == sub_chunk_digest(&self.body, &self.tail_without_footer, &self.footer)
        );
        let encoded = self.footer.encode();
        self.footer.footer_crc32c = u32::from_le_bytes([encoded[156], encoded[157], encoded[158], encoded[159]]);
    }

    /// Changes the chunk identity fields (after the writer knows its slots) and reseals.
    pub fn set_identity(&mut self, chunk_id: u64, sub_chunk_index: u16, num_sub_chunks: u16) {
        self.footer.chunk_id = chunk_id;
        self.footer.sub_chunk_index = sub_chunk_index;
        self.footer.num_sub_chunks = num_sub_chunks;
        self.seal();
    }

    /// Changes the level and flags (the odd flag is decided after a merge ends) and reseals.
    pub fn set_level_and_flags(&mut self, level: u8, flags: u8) {
        self.footer.level = level;
        // The digest's kind stays what the chunk was built with; of the chunk metadata's
        // flags only `odd` is a footer flag (SPEC.md §6.4, §8.3).
        self.footer.flags = (flags & FOOTER_FLAG_ODD) | (self.footer.flags & FOOTER_FLAG_XXH3);
        self.seal();
    }

    /// The tail bytes (key sketch, index, filter, footer) to write at the slot end.
    pub fn tail(&self) -> Vec<u8> {
        let mut tail = Vec::with_capacity(self.sketch.len() + self.tail_without_footer.len() + FOOTER_LEN);
        tail.extend_from_slice(&self.sketch);
        tail.extend_from_slice(&self.tail_without_footer);
        tail.extend_from_slice(&self.footer.encode());
        tail
    }

    /// Bytes used in the slot.
    pub fn len_data(&self) -> u64 {
        // From the footer: a writer may drop the body once it is written (a chunk of several
        // sub-chunks whose identities are set after all of them are written).
        (self.footer.len_body as usize + self.sketch.len() + self.tail_without_footer.len() + FOOTER_LEN) as u64
    }

    /// The whole slot image, padding zeroed (for tests, fixtures and simple writers).
    pub fn slot_image(&self) -> Vec<u8> {
        let slot_size = self.footer.slot_size as usize;
        let mut image = vec![0u8; slot_size];
        image[..self.body.len()].copy_from_slice(&self.body);
        let tail = self.tail();
        image[slot_size - tail.len()..].copy_from_slice(&tail);
        image
    }
}

/// The digest of a sub-chunk (SPEC.md §8.3), blake3 or xxh3-128 as its footer flags say: its body, its tail
/// before the footer (index and filter), and the footer's bytes before the digest.
pub fn sub_chunk_digest(body: &[u8], tail: &[u8], footer: &Footer) -> [u8; 32] {
    let mut digest = SubChunkDigest::new(footer);
    digest.body(body);
    digest.finish(tail)
}

/// A sub-chunk's digest (`sub_chunk_digest`) computed as its parts are read, for a reader that
/// holds only part of a slot at a time: the body in order, in pieces of any size, then the
/// tail before the footer.
#[derive(Debug)]
pub struct SubChunkDigest {
    state: DigestState,
    covered: [u8; FOOTER_DIGEST_COVERS],
}

impl SubChunkDigest {
    /// The digest of the sub-chunk whose footer is `footer`, with nothing hashed yet.
    pub fn new(footer: &Footer) -> Self {
        Self { state: DigestState::new(DigestKind::of_flags(footer.flags)), covered: footer.encode_digest_covered() }
    }

    /// Hashes the next bytes of the body.
    pub fn body(&mut self, piece: &[u8]) {
        self.state.update(piece);
    }

    /// Hashes the tail before the footer (index and filter) and the footer's covered bytes.
    pub fn finish(mut self, tail: &[u8]) -> [u8; 32] {
        self.state.update(tail);
        self.state.update(&self.covered);
        self.state.finish()
    }
}

/// A sub-chunk decoded from a whole slot image, with every check of SPEC.md §8.
#[derive(Debug, Clone)]
pub struct SubChunkView<'a> {
    /// The footer.
    pub footer: Footer,
    /// The block index.
    pub index: Vec<IndexEntry>,
    /// The filter.
    pub filter: Filter,
    /// The slot image.
    pub slot: &'a [u8],
}

impl<'a> SubChunkView<'a> {
    /// Decodes the tail of a slot image (`slot.len()` is the slot size); `offset` is the
    /// slot's device offset.
    pub fn open(slot: &'a [u8], offset: u64) -> Result<Self, FormatError> {
        let slot_size = slot.len() as u64;
        if slot.len() < FOOTER_LEN {
            return Err(FormatError::Truncated {
                structure: "slot",
                offset,
                needed: FOOTER_LEN as u64,
                available: slot_size,
            });
        }
        let footer_at = slot.len() - FOOTER_LEN;
        let footer = Footer::decode(&slot[footer_at..], offset + footer_at as u64, slot_size)?;
        let index_range = footer.ofs_index as usize..footer.ofs_filter as usize;
        let index = decode_index(&slot[index_range], offset + u64::from(footer.ofs_index), &footer)?;
        let filter_range = footer.ofs_filter as usize..footer_at;
        let filter = Filter::decode(&slot[filter_range], offset + u64::from(footer.ofs_filter), &footer)?;
        Ok(Self { footer, index, filter, slot })
    }

    /// The key sketch (SPEC.md §8.7), checked against its crc32c; `None` when the sub-chunk
    /// has none.
    pub fn sketch(&self, offset: u64) -> Result<Option<crate::sketch::Sketch>, FormatError> {
        if self.footer.len_sketch == 0 {
            return Ok(None);
        }
        let range = self.footer.ofs_sketch as usize..self.footer.ofs_index as usize;
        crate::sketch::Sketch::decode(
            &self.slot[range],
            offset + u64::from(self.footer.ofs_sketch),
            self.footer.sketch_crc32c,
        )
        .map(Some)
    }

    /// Recomputes the blake3 digest and compares it with the footer's (fsck --deep, and
    /// every compaction input).
    pub fn verify_digest(&self, offset: u64) -> Result<(), FormatError> {
        let body = &self.slot[..self.footer.len_body as usize];
        let tail = &self.slot[self.footer.ofs_index as usize..self.slot.len() - FOOTER_LEN];
        if sub_chunk_digest(body, tail, &self.footer) != self.footer.digest {
            return Err(FormatError::DigestMismatch { structure: "sub-chunk", offset });
        }
        Ok(())
    }

    /// The bytes of block `index`.
    pub fn block(&self, index: usize) -> &'a [u8] {
        let entry = &self.index[index];
        &self.slot[entry.ofs_block as usize..(entry.ofs_block + entry.len_block) as usize]
    }

    /// Every entry, in order, verifying each block.
    pub fn entries(&self, offset: u64) -> Result<Vec<EntryRef<'a>>, FormatError> {
        let mut entries = Vec::new();
        for (number, entry) in self.index.iter().enumerate() {
            let block = self.block(number);
            let block_entries = decode_block(block, offset + u64::from(entry.ofs_block))?;
            let last = block_entries.last().map(|last| (last.key, pack_seq_kind(last.sequence, last.kind)));
            if last != Some((entry.last_key.as_slice(), entry.last_seq_kind)) {
                return Err(FormatError::invalid(
                    "block",
                    "last_key",
                    offset + u64::from(entry.ofs_block),
                    "does not match the block index",
                ));
            }
            entries.extend(block_entries);
        }
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_remainder_is_the_remainder() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let divisors = [1u32, 2, 3, 7, 64, 4096, 31_337, 1 << 20, (1 << 31) + 11, u32::MAX - 1, u32::MAX];
        for divisor in divisors {
            let modulo = Modulo::new(divisor);
            for dividend in [0, 1, divisor - 1, divisor, divisor.wrapping_add(1), u32::MAX - 1, u32::MAX] {
                assert_eq!(modulo.of(dividend), dividend % divisor, "{dividend} % {divisor}");
            }
            for _ in 0..10_000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let dividend = x as u32;
                assert_eq!(modulo.of(dividend), dividend % divisor, "{dividend} % {divisor}");
            }
        }
    }

    const SLOT: u64 = 64 * 1024;

    fn options() -> ChunkOptions {
        ChunkOptions {
            slot_size: SLOT,
            block_size: 1024,
            bloom_bits_per_key: 10,
            digest: DigestKind::Blake3,
            sketch_precision: 0,
            compact_entries: false,
        }
    }

    fn identity() -> ChunkIdentity {
        ChunkIdentity {
            volume_uuid: [3; 16],
            instance: 0,
            chunk_id: 9,
            sub_chunk_index: 0,
            num_sub_chunks: 1,
            level: 1,
            flags: 0,
        }
    }

    fn key(number: u32) -> Vec<u8> {
        format!("key-{number:06}").into_bytes()
    }

    fn build(count: u32) -> BuiltSubChunk {
        let mut builder = ChunkBuilder::new(options());
        for number in 0..count {
            let kind = if number % 7 == 3 { EntryKind::Delete } else { EntryKind::Put };
            let value = if kind == EntryKind::Put { vec![number as u8; (number % 50) as usize] } else { Vec::new() };
            assert!(builder.add(&key(number), u64::from(number) + 1, kind, &value));
        }
        builder.finish(identity()).expect("not empty")
    }

    /// Entries of every length class a varint has: sequences near each 7-bit boundary and the
    /// largest, keys of 10 to 300 bytes, values of 0 to 20,000, puts and deletes.
    fn varied_entries() -> Vec<(Vec<u8>, u64, EntryKind, Vec<u8>)> {
        let sequences = [1u64, 31, 32, 127, 128, 1 << 19, (1 << 19) - 1, 1 << 26, SEQUENCE_MAX - 1, SEQUENCE_MAX];
        let mut entries = Vec::new();
        for number in 0..400u32 {
            let mut key = key(number);
            key.resize(key.len().max((number as usize * 37) % 300), b'k');
            let kind = if number % 5 == 2 { EntryKind::Delete } else { EntryKind::Put };
            let len_value = [0usize, 1, 127, 128, 300, 16_383, 16_384, 20_000][number as usize % 8];
            let value = if kind == EntryKind::Put { vec![number as u8; len_value] } else { Vec::new() };
            entries.push((key, sequences[number as usize % sequences.len()], kind, value));
        }
        entries.sort_by(|a, b| compare_internal(&a.0, pack_seq_kind(a.1, a.2), &b.0, pack_seq_kind(b.1, b.2)));
        entries.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
        entries
    }

    fn build_entries(options: ChunkOptions, entries: &[(Vec<u8>, u64, EntryKind, Vec<u8>)]) -> BuiltSubChunk {
        let mut builder = ChunkBuilder::new(options);
        for (key, sequence, kind, value) in entries {
            assert!(builder.add(key, *sequence, *kind, value), "fits the slot");
        }
        builder.finish(identity()).expect("not empty")
    }

    #[test]
    fn compact_entries_read_back_as_written_and_take_fewer_bytes() {
        let entries = varied_entries();
        let options = ChunkOptions { slot_size: 4 << 20, ..options() };
        let fixed = build_entries(options, &entries);
        let compact = build_entries(ChunkOptions { compact_entries: true, ..options }, &entries);
        for (built, flag) in [(&fixed, 0), (&compact, BLOCK_FLAG_COMPACT)] {
            let image = built.slot_image();
            let view = SubChunkView::open(&image, 0).expect("opens");
            view.verify_digest(0).expect("digest");
            let read: Vec<_> = view
                .entries(0)
                .expect("decodes")
                .into_iter()
                .map(|entry| (entry.key.to_vec(), entry.sequence, entry.kind, entry.value.to_vec()))
                .collect();
            assert_eq!(read, entries);
            for index in 0..view.index.len() {
                let block = view.block(index);
                let trailer = u32::from_le_bytes(block[block.len() - 8..block.len() - 4].try_into().expect("4"));
                assert_eq!(trailer & BLOCK_FLAG_COMPACT, flag, "block {index}");
            }
        }
        // Each header is exactly what `entry_header_len` says: the bodies differ by the sum.
        let saved: usize = entries
            .iter()
            .map(|(key, sequence, kind, value)| {
                ENTRY_FIXED_LEN - entry_header_len(true, *sequence, *kind, key.len(), value.len())
            })
            .sum();
        assert!(saved > 0);
        let blocks = |built: &BuiltSubChunk| built.footer.num_blocks as usize;
        assert_eq!(blocks(&fixed), blocks(&compact), "same block boundaries at this size");
        assert_eq!(fixed.footer.len_body as usize - compact.footer.len_body as usize, saved);
    }

    #[test]
    fn varints_are_shortest_form_and_bounded() {
        for value in [0u64, 1, 127, 128, 16_383, 16_384, u64::from(u32::MAX), (SEQUENCE_MAX << 3) | 7, u64::MAX] {
            let mut bytes = Vec::new();
            put_varint(&mut bytes, value);
            assert_eq!(bytes.len(), varint_len(value), "{value}");
            let mut at = 0;
            assert_eq!(get_varint(&bytes, &mut at, 10), Ok(value));
            assert_eq!(at, bytes.len());
            // One byte short: truncated.
            let mut at = 0;
            assert_eq!(get_varint(&bytes[..bytes.len() - 1], &mut at, 10), Err(true), "{value}");
            if bytes.len() > 1 {
                // Longer than the field allows.
                assert_eq!(get_varint(&bytes, &mut 0, bytes.len() - 1), Err(false), "{value}");
            }
        }
        // Not the shortest form: 1 written as two bytes.
        assert_eq!(get_varint(&[0x81, 0x00], &mut 0, 10), Err(false));
    }

    #[test]
    fn a_compact_tag_names_every_kind_once() {
        for sequence in [0u64, 1, (1 << 19) - 1, 1 << 19, SEQUENCE_MAX] {
            for kind in [EntryKind::Delete, EntryKind::Put, EntryKind::Pointer, EntryKind::LogRef] {
                let tag = compact_tag(sequence, kind);
                assert_eq!(compact_seq_kind(tag), Some(pack_seq_kind(sequence, kind)), "{sequence} {kind:?}");
            }
        }
        // A put below 2^20 takes 3 bytes, a delete 4.
        assert_eq!(varint_len(compact_tag((1 << 20) - 1, EntryKind::Put)), 3);
        assert_eq!(varint_len(compact_tag((1 << 20) - 1, EntryKind::Delete)), 4);
        // A put spelt the long way is refused, and so is a sequence above 2^56 - 1 (which
        // `seq_kind` would silently cut to another sequence).
        assert_eq!(compact_seq_kind((5 << 3) | (1 << 1)), None);
        assert_eq!(compact_seq_kind(((SEQUENCE_MAX + 6) << 1) | 1), None);
        assert_eq!(compact_seq_kind((SEQUENCE_MAX + 1) << 3), None);
        let mut block = Vec::new();
        block.extend_from_slice(&[0x8b, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02, 1, 1, b'k', b'v']);
        let block = compact_block(&block, 1);
        let error = decode_block(&block, 0).expect_err("a put at sequence 2^56 + 5");
        assert!(matches!(error, FormatError::InvalidField { field: "seq_kind", .. }), "{error:?}");
    }

    /// A one-block slot image of `entries` with the compact flag, crc fixed after `edit`.
    fn compact_block(body: &[u8], num_entries: u32) -> Vec<u8> {
        let mut block = body.to_vec();
        block.extend_from_slice(&(num_entries | BLOCK_FLAG_COMPACT).to_le_bytes());
        let crc = crc32c(&block);
        block.extend_from_slice(&crc.to_le_bytes());
        block
    }

    #[test]
    fn a_compact_block_with_a_bad_varint_is_refused_naming_the_field() {
        // tag (sequence 5, put), len_key 3, len_value 2, key, value.
        let good = [(5 << 1) | 1, 3, 2, b'a', b'b', b'c', b'x', b'y'];
        let block = compact_block(&good, 1);
        let entries = decode_block(&block, 0).expect("decodes");
        assert_eq!(entries, vec![EntryRef { key: b"abc", sequence: 5, kind: EntryKind::Put, value: b"xy" }]);
        // len_key in two bytes where one does.
        let overlong = [(5 << 1) | 1, 0x83, 0x00, 2, b'a', b'b', b'c', b'x', b'y'];
        let error = decode_block(&compact_block(&overlong, 1), 4096).expect_err("overlong");
        assert!(matches!(error, FormatError::InvalidField { field: "len_key", offset: 4096, .. }), "{error:?}");
        // len_key above 65535.
        let large = [(5 << 1) | 1, 0x80, 0x80, 0x04, 2, b'a'];
        let error = decode_block(&compact_block(&large, 1), 0).expect_err("too large");
        assert!(matches!(error, FormatError::InvalidField { field: "len_key", .. }), "{error:?}");
        // The value runs past the block.
        let short = [(5 << 1) | 1, 3, 9, b'a', b'b', b'c', b'x'];
        let error = decode_block(&compact_block(&short, 1), 0).expect_err("truncated");
        assert!(matches!(error, FormatError::Truncated { .. }), "{error:?}");
        // The same bytes without the flag are not read as compact.
        let mut unflagged = good.to_vec();
        unflagged.extend_from_slice(&1u32.to_le_bytes());
        let crc = crc32c(&unflagged);
        unflagged.extend_from_slice(&crc.to_le_bytes());
        assert!(decode_block(&unflagged, 0).is_err());
    }

    #[test]
    fn a_key_sketch_lies_before_the_index_and_counts_the_keys() {
        let mut builder = ChunkBuilder::new(ChunkOptions { sketch_precision: 10, ..options() });
        for number in 0..800 {
            // Two versions of each key: the sketch counts keys, not entries.
            assert!(builder.add(&key(number), 2_000 - u64::from(number), EntryKind::Put, b"v"));
            assert!(builder.add(&key(number), 1_000 - u64::from(number), EntryKind::Put, b"w"));
        }
        let built = builder.finish(identity()).expect("not empty");
        assert_eq!(built.footer.len_sketch as usize, 4 + 1024);
        assert_eq!(built.footer.ofs_sketch + built.footer.len_sketch, built.footer.ofs_index);
        let image = built.slot_image();
        let view = SubChunkView::open(&image, 0).expect("opens");
        view.verify_digest(0).expect("the digest does not cover the sketch");
        let estimate = view.sketch(0).expect("checks").expect("present").estimate();
        assert!((estimate - 800.0).abs() < 80.0, "800 keys estimated as {estimate}");
        // A damaged sketch is named, and the chunk still opens.
        let mut damaged = image.clone();
        damaged[built.footer.ofs_sketch as usize + 9] ^= 0x40;
        let view = SubChunkView::open(&damaged, 0).expect("opens");
        assert!(view.sketch(0).expect_err("crc").to_string().contains("key sketch"));
        // The footer's sketch fields must describe the place before the index.
        let mut footer = built.footer;
        footer.ofs_sketch -= 1;
        let bytes = footer.encode();
        assert!(Footer::decode(&bytes, 0, SLOT).is_err());
        let mut footer = built.footer;
        footer.len_sketch = 0;
        assert!(Footer::decode(&footer.encode(), 0, SLOT).is_err(), "an offset without a sketch");
        assert_eq!(build(10).footer.len_sketch, 0);
    }

    #[test]
    fn round_trip_through_a_slot_image() {
        let built = build(500);
        let image = built.slot_image();
        let view = SubChunkView::open(&image, 0).expect("opens");
        assert_eq!(view.footer, built.footer);
        view.verify_digest(0).expect("digest");
        let entries = view.entries(0).expect("entries");
        assert_eq!(entries.len(), 500);
        assert_eq!(entries[3].kind, EntryKind::Delete);
        assert_eq!(entries[11].key, key(11).as_slice());
        assert_eq!(entries[11].value, vec![11u8; 11].as_slice());
        assert!(view.index.len() > 1);
        for number in 0..500 {
            assert!(view.filter.may_contain(&key(number)));
        }
        let false_positives = (1000..3000).filter(|&number| view.filter.may_contain(&key(number))).count();
        assert!(false_positives < 100, "{false_positives} false positives of 2000");
    }

    #[test]
    fn a_digest_hashed_in_pieces_is_the_footers_and_sees_one_changed_byte() {
        for digest in [DigestKind::Blake3, DigestKind::Xxh3] {
            let mut builder = ChunkBuilder::new(ChunkOptions { digest, ..options() });
            for number in 0..500 {
                assert!(builder.add(&key(number), u64::from(number) + 1, EntryKind::Put, b"value"));
            }
            let built = builder.finish(identity()).expect("not empty");
            let image = built.slot_image();
            let footer = built.footer;
            let tail = &image[footer.ofs_index as usize..image.len() - FOOTER_LEN];
            let in_pieces = |image: &[u8], piece: usize| {
                let mut hashed = SubChunkDigest::new(&footer);
                for part in image[..footer.len_body as usize].chunks(piece) {
                    hashed.body(part);
                }
                hashed.finish(tail)
            };
            for piece in [1, 7, 4096, footer.len_body as usize] {
                assert_eq!(in_pieces(&image, piece), footer.digest, "{digest:?} in pieces of {piece}");
            }
            let mut changed = image.clone();
            changed[footer.len_body as usize / 2] ^= 1;
            assert_ne!(in_pieces(&changed, 1000), footer.digest, "{digest:?}: a changed body byte");
        }
    }

    #[test]
    fn builder_refuses_what_does_not_fit_and_the_result_fits() {
        let mut builder = ChunkBuilder::new(options());
        let value = vec![7u8; 1000];
        let mut added = 0u32;
        while builder.add(&key(added), u64::from(added) + 1, EntryKind::Put, &value) {
            added += 1;
            assert!(builder.estimated_len() <= SLOT as usize);
        }
        assert!(added > 50);
        let built = builder.finish(identity()).expect("not empty");
        assert!(built.len_data() <= SLOT);
        let image = built.slot_image();
        assert_eq!(SubChunkView::open(&image, 0).expect("opens").entries(0).expect("entries").len(), added as usize);
    }

    #[test]
    fn multiple_versions_of_one_key_are_ordered_newest_first() {
        let mut builder = ChunkBuilder::new(options());
        assert!(builder.add(b"a", 9, EntryKind::Put, b"new"));
        assert!(builder.add(b"a", 4, EntryKind::Delete, b""));
        assert!(builder.add(b"b", 1, EntryKind::Put, b"x"));
        let built = builder.finish(identity()).expect("not empty");
        let image = built.slot_image();
        let view = SubChunkView::open(&image, 0).expect("opens");
        let sequences: Vec<u64> = view.entries(0).expect("entries").iter().map(|entry| entry.sequence).collect();
        assert_eq!(sequences, vec![9, 4, 1]);
    }

    #[test]
    fn flip_any_tail_byte_is_detected() {
        let built = build(40);
        let image = built.slot_image();
        let tail_start = SLOT as usize - built.tail().len();
        for index in tail_start..SLOT as usize {
            if (SLOT as usize - FOOTER_LEN + 136..SLOT as usize - 4).contains(&index) {
                continue; // reserved bytes: covered by the footer crc, checked below
            }
            let mut flipped = image.clone();
            flipped[index] ^= 0x04;
            let opened = SubChunkView::open(&flipped, 0);
            let detected = match opened {
                Err(_) => true,
                Ok(view) => view.verify_digest(0).is_err(),
            };
            assert!(detected, "flip at {index} went unnoticed");
        }
        let mut reserved = image.clone();
        reserved[SLOT as usize - 10] ^= 1;
        assert!(SubChunkView::open(&reserved, 0).is_err());
    }

    #[test]
    fn flip_any_body_byte_is_detected_by_the_block_crc() {
        let built = build(40);
        let image = built.slot_image();
        for index in 0..built.body.len() {
            let mut flipped = image.clone();
            flipped[index] ^= 0x20;
            let view = SubChunkView::open(&flipped, 0).expect("tail intact");
            assert!(view.entries(0).is_err(), "flip at {index} went unnoticed");
            assert!(view.verify_digest(0).is_err());
        }
    }

    #[test]
    fn empty_builder_gives_nothing() {
        assert!(ChunkBuilder::new(options()).finish(identity()).is_none());
    }

    #[test]
    fn set_identity_reseals() {
        let mut built = build(10);
        built.set_identity(33, 1, 2);
        let image = built.slot_image();
        let view = SubChunkView::open(&image, 0).expect("opens");
        assert_eq!(view.footer.chunk_id, 33);
        assert_eq!(view.footer.sub_chunk_index, 1);
        view.verify_digest(0).expect("digest");
    }
}
