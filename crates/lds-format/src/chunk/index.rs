//! The block index (SPEC.md §8.2): each block's place and last internal key, in order.

use crate::chunk::block::{BLOCK_TRAILER_LEN, COMPACT_ENTRY_MIN_LEN};
use crate::chunk::footer::Footer;
use crate::codec::{crc32c, Reader};
use crate::entry::{compare_internal, unpack_seq_kind};
use crate::error::FormatError;

/// Fixed bytes of a block index entry before the key.
pub const INDEX_ENTRY_FIXED_LEN: usize = 18;

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
