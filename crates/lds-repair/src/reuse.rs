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

use lds_format::algorithms::salvage::{salvage_sub_chunk, salvage_value_chunk};
use lds_format::chunk::block::decode_block;
use lds_format::chunk::view::SubChunkView;
use lds_format::codec::compare_keys;
use lds_format::entry::Entry;
use lds_format::geometry::Geometry;
use lds_format::version::meta::ChunkMeta;
use lds_volume::block::read_tolerant;
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
            // A checked footer proves another volume's value chunk.
            Some(Ok(_)) => return Ok(Content::Nothing),
            // A value chunk footer's magic whose footer does not check: nothing proves it is
            // not this volume's (salvage reads its values where a version lists the slot,
            // and a damaged uuid field would name any volume), so it is left alone.
            Some(Err(_)) => return Ok(Content::ValueChunk),
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
        for entry in entries {
            if holds.rewritten.get(&entry.key).is_some_and(|&newest| newest >= entry.sequence) {
                continue;
            }
            let mut held = false;
            for chunk in holds.kept.iter().filter(|chunk| {
                chunk.largest_seq >= entry.sequence
                    && chunk.smallest_key.as_slice() <= entry.key.as_slice()
                    && entry.key.as_slice() <= chunk.largest_key.as_slice()
            }) {
                let newest = newest_in(self.device, self.geometry, &mut self.cache, chunk, &entry.key)?;
                if newest.is_some_and(|newest| newest >= entry.sequence) {
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
}

/// The newest sequence number of `key` in a kept chunk, by its block index (its slot images
/// read through `cache`).
fn newest_in(
    device: &dyn BlockDevice,
    geometry: &Geometry,
    cache: &mut HashMap<u64, Vec<u8>>,
    chunk: &ChunkMeta,
    key: &[u8],
) -> Result<Option<u64>, DeviceError> {
    // The sub-chunks are in key order: the first whose last key is not below `key` is
    // the only one that may hold it.
    for slot in chunk.slots() {
        if slot >= geometry.num_slots {
            return Ok(None);
        }
        if cache.len() >= CACHED_SLOTS_MAX && !cache.contains_key(&slot) {
            cache.clear();
        }
        let offset = geometry.slot_offset(slot);
        let image = match cache.entry(slot) {
            std::collections::hash_map::Entry::Occupied(cached) => cached.into_mut(),
            std::collections::hash_map::Entry::Vacant(vacant) => {
                vacant.insert(read_tolerant(device, offset, geometry.slot_size, geometry.sector())?.0)
            }
        };
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

#[cfg(test)]
mod tests {
    use super::*;
    use lds_format::algorithms::image::ImageBuilder;
    use lds_format::entry::EntryKind;
    use lds_format::geometry::{plan_layout, LayoutRequest};
    use lds_format::label::Label;
    use lds_format::value::{ValueFormat, ValuePacker};

    fn expect<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
        result.unwrap_or_else(|error| panic!("{error}"))
    }

    fn puts(keys: &[(&str, u64)]) -> Vec<(Vec<u8>, u64, EntryKind, Vec<u8>)> {
        keys.iter().map(|(key, sequence)| (key.as_bytes().to_vec(), *sequence, EntryKind::Put, b"v".to_vec())).collect()
    }

    /// A volume whose slot 3 holds a chunk the rebuilt tree keeps (a@10, b@11, c@12, f@20);
    /// free slots: 0 a stale chunk the tree holds newer (a@5, b@6), 1 one with a key held
    /// nowhere else (d@7), 2 one held by the rewritten entries (e@8, rewritten at e@9), 4 a
    /// value chunk of the volume, 5 and 6 empty, 7 a stale f@30 (newer than the tree's f), 8 a
    /// value chunk of the volume whose footer is damaged.
    #[test]
    fn a_free_slot_is_taken_when_salvage_reads_nothing_there_or_the_tree_holds_all_of_it() {
        let request = LayoutRequest {
            volume_len: 4 << 20,
            sector_size: Some(4096),
            slot_size: Some(64 << 10),
            ..Default::default()
        };
        let mut image = ImageBuilder::format(Label::new(expect(plan_layout(&request, [0x4a; 16])), "reuse"));
        let geometry = image.label.geometry;
        let kept = image.write_chunk(0, 3, 1, 0, &puts(&[("a", 10), ("b", 11), ("c", 12), ("f", 20)]));
        let _ = image.write_chunk(0, 0, 0, 0, &puts(&[("a", 5), ("b", 6)]));
        let _ = image.write_chunk(0, 1, 0, 0, &puts(&[("d", 7)]));
        let _ = image.write_chunk(0, 2, 0, 0, &puts(&[("e", 8)]));
        let _ = image.write_chunk(0, 7, 0, 0, &puts(&[("f", 30)]));
        let format = ValueFormat {
            slot_size: geometry.slot_size,
            instance: 0,
            volume_uuid: geometry.volume_uuid,
            digest: lds_format::digest::DigestKind::Blake3,
        };
        let mut packer = ValuePacker::new(format);
        expect(packer.add(&[7u8; 3000], || Ok::<_, String>((1, 4))));
        for built in packer.finish() {
            let at = geometry.slot_offset(built.slot) as usize;
            let bytes = built.slot_image();
            image.bytes[at..at + bytes.len()].copy_from_slice(&bytes);
        }
        // Slot 8: a value chunk of the volume whose footer is damaged (a flipped bit in it).
        let mut packer = ValuePacker::new(format);
        expect(packer.add(&[8u8; 3000], || Ok::<_, String>((2, 8))));
        for built in packer.finish() {
            let at = geometry.slot_offset(built.slot) as usize;
            let mut bytes = built.slot_image();
            let footer = bytes.len() - lds_format::value::VALUE_FOOTER_LEN;
            bytes[footer + 20] ^= 1;
            image.bytes[at..at + bytes.len()].copy_from_slice(&bytes);
        }
        let path = std::env::temp_dir().join(format!("lds-repair-reuse-{}.img", std::process::id()));
        expect(std::fs::write(&path, &image.bytes));
        let device = expect(lds_volume::Device::open(&path, lds_volume::OpenMode::ReadOnly));
        let rewritten = [Entry { key: b"e".to_vec(), sequence: 9, kind: EntryKind::Put, value: b"w".to_vec() }];
        let holds = || BTreeMap::from([(0, Holds::new(std::slice::from_ref(&kept), rewritten.iter()))]);
        let candidates = [0, 1, 2, 4, 5, 6, 7, 8];
        let mut free = FreeSlots::new(&device, &geometry, candidates.into_iter(), holds(), true);
        let taken = expect(free.take(candidates.len()));
        assert_eq!(taken, vec![5, 6, 0, 2], "the empty slots first, then those the tree holds, in order");
        assert_eq!(free.left, 4, "d@7, the value chunk, f@30 and the damaged value chunk stay");
        // As many as asked for, the empty ones first.
        let mut free = FreeSlots::new(&device, &geometry, candidates.into_iter(), holds(), true);
        assert_eq!(expect(free.take(1)), vec![5]);
        // Another instance's tree holds nothing of instance 0.
        let other = BTreeMap::from([(1, Holds::new(std::slice::from_ref(&kept), rewritten.iter()))]);
        let mut free = FreeSlots::new(&device, &geometry, candidates.into_iter(), other, true);
        assert_eq!(expect(free.take(candidates.len())), vec![5, 6]);
        // Without examining (lds resize, lds device): every candidate in order.
        let mut plain = FreeSlots::new(&device, &geometry, candidates.into_iter(), holds(), false);
        assert_eq!(expect(plain.take(candidates.len())), candidates.to_vec());
        drop(device);
        let _ = std::fs::remove_file(&path);
    }
}
