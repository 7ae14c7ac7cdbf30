//! The chunk footer at the end of every slot a chunk uses (SPEC.md §8.3), and the digest it
//! records over the sub-chunk.

use crate::codec::{crc32c, Reader, Writer};
use crate::digest::{DigestKind, DigestState, FOOTER_FLAG_XXH3};
use crate::entry::SEQUENCE_MAX;
use crate::error::FormatError;
use crate::version::meta::LEVELS_COUNT_MAX;

/// `"LDSCHUNK"`, SPEC.md §8.3.
pub const CHUNK_MAGIC: [u8; 8] = *b"LDSCHUNK";
/// Bytes of the footer at the end of every slot.
pub const FOOTER_LEN: usize = 160;
// A value chunk's footer is as long, so that a reader finds either at the slot end (§8.5).
const _: () = assert!(FOOTER_LEN == crate::value::VALUE_FOOTER_LEN);
/// Bytes of footer covered by the digest.
pub const FOOTER_DIGEST_COVERS: usize = 104;
const FOOTER_CRC_OFFSET: usize = FOOTER_LEN - 4;
/// Footer flag bit 0: the chunk is its level's odd chunk (SPEC.md §11).
pub const FOOTER_FLAG_ODD: u8 = 1;

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
        if u32::from(footer.level) >= LEVELS_COUNT_MAX {
            return invalid("level", "at or above the level limit 16".into());
        }
        Ok(footer)
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
