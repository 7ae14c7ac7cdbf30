//! Writing built chunks into newly allocated slots (SPEC.md §10.2 steps 1 and 2). The
//! caller flushes them before the version that names them.

use lds_format::chunk::builder::BuiltSubChunk;
use lds_format::version::meta::ChunkMeta;

use crate::error::Result;
use crate::state::Shared;
use crate::version::slots::{allocate, release};

/// Allocates a slot for each built chunk (from the running compaction's pool first, with
/// `pool`) and writes it (not yet flushed); returns the metadata of each at its level with
/// its flags. On failure the slots are released.
pub(crate) fn write_chunks(
    shared: &Shared,
    built: &mut [impl AsMut<BuiltSubChunk>],
    placement: &[(u8, u8)],
    pool: bool,
) -> Result<Vec<ChunkMeta>> {
    let slots = allocate(&mut shared.lock_state(), &shared.slots, &shared.cache, built.len() as u64, pool)?;
    let mut metas = Vec::with_capacity(built.len());
    for ((chunk, &slot), &(level, flags)) in built.iter_mut().zip(&slots).zip(placement) {
        let chunk = chunk.as_mut();
        let meta = lds_format::algorithms::pack::place(chunk, slot, level, flags);
        let offset = shared.geometry.slot_offset(slot);
        let tail = chunk.tail();
        let result = shared
            .device
            .write_at(offset, &chunk.body)
            .and_then(|()| shared.device.write_at(offset + shared.geometry.slot_size - tail.len() as u64, &tail));
        if let Err(error) = result {
            release(&shared.slots, &slots);
            return Err(error.into());
        }
        // Nothing of the slot's earlier chunk stays cached (admit_tail forgets it too).
        if level < shared.options.pinned_levels {
            shared.cache.admit_tail(&shared.geometry, slot, &chunk.footer, &chunk.tail_without_footer);
        } else {
            shared.cache.forget_slot(slot);
        }
        metas.push(meta);
    }
    Ok(metas)
}
