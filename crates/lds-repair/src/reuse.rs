//! Which free slots repair writes its chunks to (docs/reliability.md I10: repair never loses
//! what `lds salvage` can read). A slot no version references may still hold data salvage
//! reads: a chunk the lost versions wrote, a stale chunk (the input of a finished compaction,
//! or keys since deleted whose tombstones a compaction dropped), a value chunk. Repair takes,
//! in slot order:
//! 1. the free slots salvage reads nothing from (zeros, another volume's chunk, bytes with no
//!    block whose checksum holds);
//! 2. once those run out, the free slots whose every entry the rebuilt tree holds at the same
//!    or a newer sequence number (in what it rewrites, or by a lookup in a chunk it keeps):
//!    writing over them loses nothing salvage would return;
//!
//! and never a slot holding an entry nothing else keeps, or a value chunk of this volume
//! (which pointers salvage may follow name). Where those are all that is left, repair
//! refuses with nothing written (`RepairError::NoSpace`), and `lds salvage` copies the
//! volume out instead.
//!
//! Each slot is read at most once, and only as far as repair needs slots: the first kind is
//! told by two probes where the slot is empty, and by one read of the slot otherwise.

use std::collections::{BTreeMap, HashMap, VecDeque};

use lds_format::chunk::{decode_block, SubChunkView};
use lds_format::codec::compare_keys;
use lds_format::label::Geometry;
use lds_format::salvage::{salvage_sub_chunk, salvage_value_chunk, Entry};
use lds_format::version::ChunkMeta;
use lds_volume::volume::read_tolerant;
use lds_volume::{BlockDevice, DeviceError};

/// Bytes read at each end of a slot to tell an empty one (a chunk starts with a block and
/// ends with its footer; a value chunk ends with its footer).
const PROBE_LEN: u64 = 4096;
/// Slot images kept for lookups in kept chunks; the cache is emptied when it holds more.
const CACHED_SLOTS_MAX: usize = 32;

/// What the rebuilt tree of one instance holds: the newest sequence number of each key it
/// rewrites, and the chunks it keeps where they are.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    rewritten: HashMap<Vec<u8>, u64>,
    kept: Vec<ChunkMeta>,
}

impl Holds {
    /// What a plan keeps (`kept`) and rewrites (`runs`' entries).
    pub(crate) fn new<'a>(kept: &[ChunkMeta], entries: impl Iterator<Item = &'a Entry>) -> Self {
        let mut rewritten: HashMap<Vec<u8>, u64> = HashMap::new();
        for entry in entries {
            let newest = rewritten.entry(entry.key.clone()).or_insert(0);
            *newest = (*newest).max(entry.sequence);
        }
        Self { rewritten, kept: kept.to_vec() }
    }
}

/// What a free slot holds that salvage reads.
enum Content {
    /// Nothing.
    Nothing,
    /// A value chunk of this volume.
    ValueChunk,
    /// Entries of an instance.
    Entries(u32, Vec<Entry>),
}

/// The free slots repair may write, in the order it takes them (see the module
/// documentation).
pub(crate) struct FreeSlots<'a> {
    device: &'a dyn BlockDevice,
    /// Whether slots are examined at all (repair); `lds resize` and `lds device` take the
    /// free slots in order, as they always did.
    examine: bool,
    geometry: &'a Geometry,
    /// Not examined yet, in slot order.
    pending: VecDeque<u64>,
    /// Examined and holding entries: tried once `pending` is empty.
    deferred: VecDeque<(u64, u32, Vec<Entry>)>,
    /// What each instance's rebuilt tree holds.
    holds: BTreeMap<u32, Holds>,
    /// Slot images read for lookups in kept chunks.
    cache: HashMap<u64, Vec<u8>>,
    /// Free slots left alone: they hold data salvage reads that nothing else keeps.
    pub(crate) left: usize,
}

impl<'a> FreeSlots<'a> {
    /// The free slots `candidates` (in slot order) of a volume whose rebuilt trees hold
    /// `holds`; with `examine` false, every candidate in order.
    pub(crate) fn new(
        device: &'a dyn BlockDevice,
        geometry: &'a Geometry,
        candidates: impl Iterator<Item = u64>,
        holds: BTreeMap<u32, Holds>,
        examine: bool,
    ) -> Self {
        Self {
            device,
            examine,
            geometry,
            pending: candidates.collect(),
            deferred: VecDeque::new(),
            holds,
            cache: HashMap::new(),
            left: 0,
        }
    }

    /// The next slot repair may write, or `None` when none is left.
    pub(crate) fn next_slot(&mut self) -> Result<Option<u64>, DeviceError> {
        // Each turn removes a slot from `pending` or `deferred`: bounded by their length.
        while let Some(slot) = self.pending.pop_front() {
            match self.content(slot)? {
                Content::Nothing => return Ok(Some(slot)),
                Content::ValueChunk => self.left += 1,
                Content::Entries(instance, entries) => self.deferred.push_back((slot, instance, entries)),
            }
        }
        while let Some((slot, instance, entries)) = self.deferred.pop_front() {
            if self.all_held(instance, &entries)? {
                return Ok(Some(slot));
            }
            self.left += 1;
        }
        Ok(None)
    }

    /// Up to `count` slots (fewer when no more are left).
    pub(crate) fn take(&mut self, count: usize) -> Result<Vec<u64>, DeviceError> {
        let mut slots = Vec::with_capacity(count);
        while slots.len() < count {
            match self.next_slot()? {
                Some(slot) => slots.push(slot),
                None => break,
            }
        }
        Ok(slots)
    }

    /// What salvage reads from `slot` (as `lds_repair::salvage` reads every slot).
    fn content(&self, slot: u64) -> Result<Content, DeviceError> {
        if !self.examine {
            return Ok(Content::Nothing);
        }
        let (geometry, sector) = (self.geometry, self.geometry.sector());
        let offset = geometry.slot_offset(slot);
        let probe = PROBE_LEN.min(geometry.slot_size);
        let zeros = |bytes: &[u8]| bytes.iter().all(|&byte| byte == 0);
        let (head, _) = read_tolerant(self.device, offset, probe, sector)?;
        if zeros(&head) && zeros(&read_tolerant(self.device, offset + geometry.slot_size - probe, probe, sector)?.0) {
            return Ok(Content::Nothing);
        }
        let (image, _) = read_tolerant(self.device, offset, geometry.slot_size, sector)?;
        match salvage_value_chunk(&image, offset) {
            Some(Ok(chunk)) if chunk.footer.volume_uuid == geometry.volume_uuid => return Ok(Content::ValueChunk),
            Some(_) => return Ok(Content::Nothing),
            None => {}
        }
        let read = salvage_sub_chunk(&image, offset);
        let instance = match &read.footer {
            Some(footer) if footer.volume_uuid == geometry.volume_uuid => footer.instance,
            Some(_) => return Ok(Content::Nothing),
            // A lost tail: salvage keeps its blocks where they can only be one instance's.
            None if geometry.instance_count == 1 => 0,
            None => return Ok(Content::Nothing),
        };
        if read.entries.is_empty() {
            return Ok(Content::Nothing);
        }
        Ok(Content::Entries(instance, read.entries))
    }

    /// Whether the rebuilt tree of `instance` holds every one of `entries` at the same or a
    /// newer sequence number.
    fn all_held(&mut self, instance: u32, entries: &[Entry]) -> Result<bool, DeviceError> {
        let Some(holds) = self.holds.get(&instance) else { return Ok(false) };
        let mut unsure = Vec::new();
        for entry in entries {
            match holds.rewritten.get(&entry.key) {
                Some(&newest) if newest >= entry.sequence => {}
                _ => unsure.push(entry),
            }
        }
        let kept: Vec<ChunkMeta> = holds.kept.clone();
        for entry in unsure {
            let mut held = false;
            for chunk in kept.iter().filter(|chunk| {
                chunk.largest_seq >= entry.sequence
                    && chunk.smallest_key.as_slice() <= entry.key.as_slice()
                    && entry.key.as_slice() <= chunk.largest_key.as_slice()
            }) {
                if self.newest_in(chunk, &entry.key)?.is_some_and(|newest| newest >= entry.sequence) {
                    held = true;
                    break;
                }
            }
            if !held {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The newest sequence number of `key` in a kept chunk, by its block index.
    fn newest_in(&mut self, chunk: &ChunkMeta, key: &[u8]) -> Result<Option<u64>, DeviceError> {
        // The sub-chunks are in key order: the first whose last key is not below `key` is
        // the only one that may hold it.
        for slot in chunk.slots() {
            if slot >= self.geometry.num_slots {
                return Ok(None);
            }
            if self.cache.len() >= CACHED_SLOTS_MAX && !self.cache.contains_key(&slot) {
                self.cache.clear();
            }
            let offset = self.geometry.slot_offset(slot);
            if !self.cache.contains_key(&slot) {
                let (image, _) = read_tolerant(self.device, offset, self.geometry.slot_size, self.geometry.sector())?;
                self.cache.insert(slot, image);
            }
            let Some(image) = self.cache.get(&slot) else { return Ok(None) };
            let Ok(view) = SubChunkView::open(image, offset) else { return Ok(None) };
            // Entries are in internal order (key ascending, newest first): the newest of
            // `key` is in the first block whose last key is not below it.
            let Some(number) =
                view.index.iter().position(|entry| compare_keys(&entry.last_key, key) != std::cmp::Ordering::Less)
            else {
                continue;
            };
            let Ok(block) = decode_block(view.block(number), offset) else { return Ok(None) };
            return Ok(block.iter().find(|entry| entry.key == key).map(|entry| entry.sequence));
        }
        Ok(None)
    }
}
