//! Chunk tails and blocks read from the slots, decoded and verified once, and cached: the
//! tail (block index and filter) of every sub-chunk in use, and decoded blocks up to a byte
//! budget, evicted first-in first-out.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use lds_format::batch::EntryKind;
use lds_format::chunk::{decode_index, visit_block, Filter, Footer, IndexEntry, FOOTER_LEN};
use lds_format::label::Geometry;
use lds_format::version::SubChunkRef;
use lds_volume::BlockDevice;

use crate::error::{Error, Result};
use crate::memtable::Entry;

/// The decoded tail of one sub-chunk (SPEC.md §8.2, §8.3).
#[derive(Debug)]
pub(crate) struct Tail {
    pub(crate) index: Vec<IndexEntry>,
    pub(crate) filter: Filter,
}

/// A block whose checksum was verified once, when it was read, with the position of each
/// entry, so that lookups binary-search it and iterators copy only what they return.
#[derive(Debug)]
pub(crate) struct Block {
    bytes: Vec<u8>,
    pub(crate) entries: Vec<BlockEntry>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockEntry {
    pub(crate) key: (u32, u32),
    pub(crate) sequence: u64,
    pub(crate) kind: EntryKind,
    pub(crate) value: (u32, u32),
}

impl Block {
    fn decode(bytes: Vec<u8>, offset: u64) -> std::result::Result<Self, lds_format::FormatError> {
        let base = bytes.as_ptr() as usize;
        // Positions within `bytes`, which moves into the block without moving its contents.
        let at = |part: &[u8]| match part.len() {
            0 => (0, 0),
            len => ((part.as_ptr() as usize - base) as u32, len as u32),
        };
        // One pass, straight into the positions, sized by the trailer's entry count (checked
        // by `visit_block`; bounded here by what the bytes can hold).
        let count = bytes
            .len()
            .checked_sub(8)
            .and_then(|at| bytes.get(at..at + 4))
            .map_or(0, |count| u32::from_le_bytes([count[0], count[1], count[2], count[3]]) as usize);
        let mut entries = Vec::with_capacity(count.min(bytes.len() / 15));
        visit_block(&bytes, offset, |found| {
            entries.push(BlockEntry {
                key: at(found.key),
                sequence: found.sequence,
                kind: found.kind,
                value: at(found.value),
            })
        })?;
        Ok(Self { bytes, entries })
    }

    pub(crate) fn slice(&self, (start, len): (u32, u32)) -> &[u8] {
        &self.bytes[start as usize..(start + len) as usize]
    }

    /// The first entry whose user key is at or after `key`.
    pub(crate) fn seek(&self, key: &[u8]) -> usize {
        self.entries.partition_point(|entry| self.slice(entry.key) < key)
    }

    pub(crate) fn owned(&self, index: usize) -> Entry {
        let entry = &self.entries[index];
        (self.slice(entry.key).to_vec(), entry.sequence, entry.kind, self.slice(entry.value).to_vec())
    }

    fn footprint(&self) -> usize {
        self.bytes.len() + self.entries.len() * std::mem::size_of::<BlockEntry>()
    }
}

/// Decoded blocks by (slot, block offset), evicted first-in first-out past a byte budget.
struct BlockCache {
    budget: usize,
    bytes: usize,
    blocks: HashMap<(u64, u32), Arc<Block>>,
    order: VecDeque<(u64, u32)>,
}

impl BlockCache {
    fn new(budget: usize) -> Self {
        Self { budget, bytes: 0, blocks: HashMap::new(), order: VecDeque::new() }
    }

    fn get(&self, key: (u64, u32)) -> Option<Arc<Block>> {
        self.blocks.get(&key).cloned()
    }

    fn insert(&mut self, key: (u64, u32), block: Arc<Block>) {
        if block.footprint() > self.budget || self.blocks.contains_key(&key) {
            return;
        }
        self.bytes += block.footprint();
        self.blocks.insert(key, block);
        self.order.push_back(key);
        while self.bytes > self.budget {
            let Some(oldest) = self.order.pop_front() else { break };
            if let Some(evicted) = self.blocks.remove(&oldest) {
                self.bytes -= evicted.footprint();
            }
        }
    }

    /// Drops a freed slot's blocks.
    fn remove_slot(&mut self, slot: u64) {
        let keys: Vec<(u64, u32)> = self.blocks.keys().filter(|key| key.0 == slot).copied().collect();
        for key in keys {
            if let Some(removed) = self.blocks.remove(&key) {
                self.bytes -= removed.footprint();
            }
        }
        self.order.retain(|key| key.0 != slot);
    }
}

/// A valid footer whose digest is not the one the version records for the slot.
pub(crate) fn footer_not_the_versions(footer_offset: u64, slot: u64) -> lds_format::FormatError {
    lds_format::FormatError::invalid(
        "chunk footer",
        "digest",
        footer_offset,
        format!("slot {slot} holds another chunk than the version names (a stale or misdirected footer)"),
    )
}

/// The tails and blocks of chunks read so far.
pub(crate) struct TableCache {
    tails: Mutex<HashMap<u64, Arc<Tail>>>,
    blocks: Mutex<BlockCache>,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn corrupt(device: &dyn BlockDevice, source: lds_format::FormatError) -> Error {
    Error::Corrupt { path: device.name().display().to_string(), source }
}

impl TableCache {
    /// An empty cache holding at most `block_bytes` of decoded blocks.
    pub(crate) fn new(block_bytes: usize) -> Self {
        Self { tails: Mutex::new(HashMap::new()), blocks: Mutex::new(BlockCache::new(block_bytes)) }
    }

    /// The decoded tail of the sub-chunk in `sub_chunk.slot`.
    pub(crate) fn tail(
        &self,
        device: &dyn BlockDevice,
        geometry: &Geometry,
        sub_chunk: &SubChunkRef,
    ) -> Result<Arc<Tail>> {
        let slot = sub_chunk.slot;
        if let Some(tail) = locked(&self.tails).get(&slot) {
            return Ok(Arc::clone(tail));
        }
        let slot_offset = geometry.slot_offset(slot);
        let slot_size = geometry.slot_size;
        let footer_offset = slot_offset + slot_size - FOOTER_LEN as u64;
        let footer_bytes = device.read_vec(footer_offset, FOOTER_LEN as u64)?;
        let footer = Footer::decode(&footer_bytes, footer_offset, slot_size).map_err(|error| corrupt(device, error))?;
        // A valid footer of another chunk (the slot's previous chunk after a lost write, or a
        // misdirected read) must not be used: the version names the sub-chunk by its digest,
        // which covers the footer's identity fields (SPEC.md §6.4, §8.3).
        if footer.digest != sub_chunk.digest {
            return Err(corrupt(device, footer_not_the_versions(footer_offset, slot)));
        }
        let tail_bytes = device.read_vec(
            slot_offset + u64::from(footer.ofs_index),
            u64::from(footer.len_index) + u64::from(footer.len_filter),
        )?;
        let (index_bytes, filter_bytes) = tail_bytes.split_at(footer.len_index as usize);
        let index = decode_index(index_bytes, slot_offset + u64::from(footer.ofs_index), &footer)
            .map_err(|error| corrupt(device, error))?;
        let filter = Filter::decode(filter_bytes, slot_offset + u64::from(footer.ofs_filter), &footer)
            .map_err(|error| corrupt(device, error))?;
        let tail = Arc::new(Tail { index, filter });
        locked(&self.tails).insert(slot, Arc::clone(&tail));
        Ok(tail)
    }

    /// One block of the sub-chunk in `slot`, verified and decoded once.
    pub(crate) fn block(
        &self,
        device: &dyn BlockDevice,
        geometry: &Geometry,
        slot: u64,
        entry: &IndexEntry,
    ) -> Result<Arc<Block>> {
        let key = (slot, entry.ofs_block);
        if let Some(block) = locked(&self.blocks).get(key) {
            return Ok(block);
        }
        let offset = geometry.slot_offset(slot) + u64::from(entry.ofs_block);
        let bytes = device.read_vec(offset, u64::from(entry.len_block))?;
        let block = Arc::new(Block::decode(bytes, offset).map_err(|error| corrupt(device, error))?);
        locked(&self.blocks).insert(key, Arc::clone(&block));
        Ok(block)
    }

    /// Forgets a freed slot's tail and blocks (a later chunk may take the slot).
    pub(crate) fn forget_slot(&self, slot: u64) {
        locked(&self.tails).remove(&slot);
        locked(&self.blocks).remove_slot(slot);
    }
}
