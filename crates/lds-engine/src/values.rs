//! Values in value chunks (SPEC.md §8.6; the technique `kv-separation`, after WiscKey and
//! LSM-KVD): large values leave the tree for value chunks in slots of their own, and the tree
//! holds pointers to them.
//!
//! - A flush moves the memtable's values of at least `Options::value_separation_min` bytes
//!   into new value chunks written with the level-0 chunks (`Separator`).
//! - A value of at least `Shared::value_direct_min` bytes (too large for the backup log, or
//!   large enough that copying it through the log costs more than its slot) is written to
//!   value chunks of its own and flushed before its batch is appended (`write_direct`): the
//!   batch carries the pointer. Until its memtable is flushed, such a value chunk is
//!   *pending*: named only by the backup log, its slot marked in use.
//! - Every commit deletes the value chunks it leaves without live bytes
//!   (`commit`); merges relocate the values of chunks with much garbage
//!   (`compaction`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;

use lds_format::batch::EntryRef;
use lds_format::entry::EntryKind;
use lds_format::geometry::Geometry;
use lds_format::value::{
    read_value, BuiltValueChunk, ValueChunkMeta, ValueFooter, ValueFormat, ValuePacker, ValuePointer, VALUE_FOOTER_LEN,
};
use lds_format::version::Version;
use lds_volume::BlockDevice;

use crate::error::{Error, Result};
use crate::slots::{allocate as allocate_slots, release};
use crate::state::Shared;

/// The value chunks of `shared`'s instance.
pub(crate) fn format(shared: &Shared) -> ValueFormat {
    ValueFormat {
        slot_size: shared.geometry.slot_size,
        instance: shared.instance,
        volume_uuid: shared.geometry.volume_uuid,
        digest: shared.encoding.digest,
    }
}

/// An id and a slot for a new value chunk.
pub(crate) fn allocate(shared: &Shared) -> Result<(u64, u64)> {
    let slot = {
        let mut state = shared.lock_state();
        allocate_slots(&mut state, &shared.slots, &shared.cache, 1, false)?[0]
    };
    Ok((shared.next_value_id.fetch_add(1, Ordering::AcqRel), slot))
}

/// Writes value chunks to their slots (not flushed).
pub(crate) fn write(shared: &Shared, chunks: &[BuiltValueChunk]) -> Result<()> {
    for chunk in chunks {
        let offset = shared.geometry.slot_offset(chunk.slot);
        shared.device.write_at(offset, &chunk.body)?;
        shared.device.write_at(offset + shared.geometry.slot_size - VALUE_FOOTER_LEN as u64, &chunk.footer.encode())?;
    }
    Ok(())
}

fn corrupt(device: &dyn BlockDevice, source: lds_format::FormatError) -> Error {
    Error::Corrupt { path: device.name().display().to_string(), source }
}

/// The value a pointer entry names, read from its value chunks: each extent from the slot the
/// version lists for its value chunk, or the pointer's own slot for a value chunk the version
/// does not list yet (pending); its crc32c checked.
pub(crate) fn read(shared: &Shared, version: &Version, pointer: &[u8]) -> Result<Vec<u8>> {
    let device = shared.device.as_ref();
    let pointer = ValuePointer::decode(pointer, 0).map_err(|error| corrupt(device, error))?;
    read_value(
        &pointer,
        |extent| {
            let slot = version.value_chunks.get(&extent.value_chunk_id).map_or(extent.slot, |chunk| chunk.slot);
            if slot >= shared.geometry.num_slots {
                return Err(corrupt(
                    device,
                    lds_format::FormatError::invalid(
                        "value pointer",
                        "slot",
                        0,
                        format!("value chunk {} at slot {slot}, past the slots", extent.value_chunk_id),
                    ),
                ));
            }
            let offset = shared.geometry.slot_offset(slot) + u64::from(extent.offset);
            Ok(device.read_vec(offset, u64::from(extent.len))?)
        },
        |error| corrupt(device, error),
    )
}

impl crate::compaction::merge::ValueStore for Shared {
    fn read_value(&self, version: &Version, pointer: &[u8]) -> Result<Vec<u8>> {
        read(self, version, pointer)
    }

    fn allocate_value_chunk(&self) -> Result<(u64, u64)> {
        allocate(self)
    }
}

/// What the entry (`key`, `sequence`) found reads as: `None` for a tombstone, the value of a
/// put, the value a pointer names, the value a log reference names (SPEC.md §8.9).
pub(crate) fn resolve(
    shared: &Shared,
    version: &Version,
    key: &[u8],
    (sequence, kind, value): (u64, EntryKind, Vec<u8>),
) -> Result<Option<Vec<u8>>> {
    match kind {
        EntryKind::Delete => Ok(None),
        EntryKind::Put => Ok(Some(value)),
        EntryKind::Pointer => read(shared, version, &value).map(Some),
        EntryKind::LogRef => crate::logs::read(shared, key, sequence, &value).map(Some),
    }
}

/// Values of a batch written to value chunks of their own before the batch is appended.
pub(crate) struct Direct {
    /// The pointers, by entry index.
    pub(crate) pointers: BTreeMap<usize, Vec<u8>>,
    /// The value chunks, pending until their memtable is flushed.
    pub(crate) chunks: Vec<ValueChunkMeta>,
}

impl Direct {
    /// The batch's entries with the pointers in place of the values they replace.
    pub(crate) fn entries<'a>(&'a self, entries: &[EntryRef<'a>]) -> Vec<EntryRef<'a>> {
        entries
            .iter()
            .enumerate()
            .map(|(index, &(kind, key, value))| match self.pointers.get(&index) {
                Some(pointer) => (EntryKind::Pointer, key, pointer.as_slice()),
                None => (kind, key, value),
            })
            .collect()
    }

    /// Gives the value chunks up (their batch was not appended): no longer pending, their
    /// slots free again.
    pub(crate) fn abandon(&self, shared: &Shared) {
        let mut state = shared.lock_state();
        for chunk in &self.chunks {
            state.pending_values.remove(&chunk.value_chunk_id);
        }
        drop(state);
        release(&shared.slots, &self.chunks.iter().map(|chunk| chunk.slot).collect::<Vec<_>>());
    }
}

/// Writes the values of `entries` of at least `Shared::value_direct_min` bytes to new value
/// chunks and flushes them (SPEC.md §8.6: before the batch that points to them), and marks
/// them pending. `None` when no value is that large.
pub(crate) fn write_direct(shared: &Shared, entries: &[EntryRef<'_>]) -> Result<Option<Direct>> {
    let Some(direct_min) = shared.value_direct_min else { return Ok(None) };
    if !entries.iter().any(|&(kind, _, value)| kind == EntryKind::Put && value.len() >= direct_min) {
        return Ok(None);
    }
    let mut packer = ValuePacker::new(format(shared));
    let mut pointers = BTreeMap::new();
    let written = (|| {
        for (index, &(kind, _, value)) in entries.iter().enumerate() {
            if kind == EntryKind::Put && value.len() >= direct_min {
                pointers.insert(index, packer.add(value, || allocate(shared))?.encode());
            }
        }
        Ok::<_, Error>(())
    })();
    let allocated = packer.allocated();
    let chunks = packer.finish();
    let release_allocated = || release(&shared.slots, &allocated.iter().map(|(_, slot)| *slot).collect::<Vec<_>>());
    if let Err(error) = written {
        // No room for the values: nothing was written.
        release_allocated();
        return Err(error);
    }
    // A failed device write or flush poisons the store (SPEC.md §2.4): what the device holds
    // of earlier unflushed writes is unknown.
    if let Err(error) = write(shared, &chunks).and_then(|()| crate::commit::flush_device(shared)) {
        release_allocated();
        let mut state = shared.lock_state();
        return Err(shared.poison(&mut state, error));
    }
    let metas: Vec<ValueChunkMeta> = chunks.iter().map(BuiltValueChunk::meta).collect();
    let mut state = shared.lock_state();
    for meta in &metas {
        state.pending_values.insert(meta.value_chunk_id, *meta);
    }
    Ok(Some(Direct { pointers, chunks: metas }))
}

/// A flush's values: those of at least `min` bytes go to new value chunks; the pending value
/// chunks its pointers name are added to the version, or freed when the flush drops every
/// pointer to them.
pub(crate) struct Separator {
    min: Option<usize>,
    packer: ValuePacker,
    pointer: Vec<u8>,
    /// Ids of value chunks the kept pointers name, and of those only dropped ones name.
    pub(crate) kept: BTreeSet<u64>,
    pub(crate) dropped: BTreeSet<u64>,
    /// The first failure (the memtable's visit cannot stop).
    pub(crate) failed: Option<Error>,
}

impl Separator {
    pub(crate) fn new(shared: &Shared) -> Self {
        Self {
            min: shared.value_separation_min,
            packer: ValuePacker::new(format(shared)),
            pointer: Vec::new(),
            kept: BTreeSet::new(),
            dropped: BTreeSet::new(),
            failed: None,
        }
    }

    /// The entry to pack for a kept entry: a large put becomes a pointer.
    pub(crate) fn keep<'a>(&'a mut self, shared: &Shared, kind: EntryKind, value: &'a [u8]) -> (EntryKind, &'a [u8]) {
        match kind {
            EntryKind::Put if self.failed.is_none() && self.min.is_some_and(|min| value.len() >= min) => {
                match self.packer.add(value, || allocate(shared)) {
                    Ok(pointer) => {
                        self.pointer = pointer.encode();
                        (EntryKind::Pointer, &self.pointer)
                    }
                    Err(error) => {
                        self.failed = Some(error);
                        (kind, value)
                    }
                }
            }
            EntryKind::Pointer => {
                if let Ok(pointer) = ValuePointer::decode(value, 0) {
                    self.kept.extend(pointer.extents.iter().map(|extent| extent.value_chunk_id));
                }
                (kind, value)
            }
            _ => (kind, value),
        }
    }

    /// Notes a pointer the flush drops.
    pub(crate) fn drop_entry(&mut self, kind: EntryKind, value: &[u8]) {
        if kind == EntryKind::Pointer {
            if let Ok(pointer) = ValuePointer::decode(value, 0) {
                self.dropped.extend(pointer.extents.iter().map(|extent| extent.value_chunk_id));
            }
        }
    }

    /// The slots of the value chunks started so far (to release when the flush fails).
    pub(crate) fn allocated_slots(&self) -> Vec<u64> {
        self.packer.allocated().into_iter().map(|(_, slot)| slot).collect()
    }

    /// The new value chunks, built.
    pub(crate) fn finish(self) -> (Vec<BuiltValueChunk>, BTreeSet<u64>, BTreeSet<u64>, Option<Error>) {
        (self.packer.finish(), self.kept, self.dropped, self.failed)
    }
}

/// The pending value chunks of a recovered instance (SPEC.md §8.6, §9.4): for each pointer of
/// the batches replayed from its backup log whose value chunk the version does not list, the
/// value chunk at the pointer's slot, whose footer must name it.
pub(crate) fn pending_of_replay(
    device: &dyn BlockDevice,
    geometry: &Geometry,
    instance: u32,
    version: &Version,
    pointers: &[Vec<u8>],
) -> std::result::Result<BTreeMap<u64, ValueChunkMeta>, (u64, u64, String)> {
    let mut pending = BTreeMap::new();
    let decoded: Vec<ValuePointer> = pointers.iter().filter_map(|bytes| ValuePointer::decode(bytes, 0).ok()).collect();
    for (id, slot) in version.unlisted_value_chunks(&decoded) {
        let failed = |reason: String| (id, slot, reason);
        if slot >= geometry.num_slots {
            return Err(failed("past the slots".into()));
        }
        let footer_offset = geometry.slot_offset(slot) + geometry.slot_size - VALUE_FOOTER_LEN as u64;
        let bytes =
            device.read_vec(footer_offset, VALUE_FOOTER_LEN as u64).map_err(|error| failed(error.to_string()))?;
        let footer = ValueFooter::decode(&bytes, footer_offset, geometry.slot_size)
            .map_err(|error| failed(error.to_string()))?;
        if !footer.mismatches(&geometry.volume_uuid, instance, id, None).is_empty() {
            return Err(failed(format!(
                "the slot holds value chunk {} of instance {} instead",
                footer.value_chunk_id, footer.instance
            )));
        }
        if version.slot_owner.contains_key(&slot) {
            return Err(failed("the version uses the slot for something else".into()));
        }
        pending.insert(id, ValueChunkMeta::of_footer(&footer, slot));
    }
    Ok(pending)
}
