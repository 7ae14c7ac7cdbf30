//! A sub-chunk read back from its slot image (SPEC.md §8), every structure checked.

use crate::chunk::block::{decode_block, EntryRef};
use crate::chunk::filter::Filter;
use crate::chunk::footer::{sub_chunk_digest, Footer, FOOTER_LEN};
use crate::chunk::index::{decode_index, IndexEntry};
use crate::entry::pack_seq_kind;
use crate::error::FormatError;
use crate::sketch::Sketch;

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
    pub fn sketch(&self, offset: u64) -> Result<Option<Sketch>, FormatError> {
        if self.footer.len_sketch == 0 {
            return Ok(None);
        }
        let range = self.footer.ofs_sketch as usize..self.footer.ofs_index as usize;
        Sketch::decode(&self.slot[range], offset + u64::from(self.footer.ofs_sketch), self.footer.sketch_crc32c)
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
