//! What the pickers' unit tests share.

use std::collections::BTreeMap;

use lds_format::version::meta::ChunkMeta;
use lds_format::version::Version;

/// A version of `num_levels` levels holding `chunks` (their slots theirs).
pub(crate) fn version(num_levels: u32, chunks: &[ChunkMeta]) -> Version {
    let mut version = Version {
        num_levels,
        last_sequence: 0,
        label_generation: 1,
        ofs_backup_start: 0,
        lsn_backup_start: 1,
        compact_pointers: BTreeMap::new(),
        chunks: BTreeMap::new(),
        slot_owner: BTreeMap::new(),
        num_slots: 1000,
        value_chunks: BTreeMap::new(),
        value_live: BTreeMap::new(),
        next_value_chunk_id: 1,
        has_values: false,
    };
    for chunk in chunks {
        for slot in chunk.slots() {
            version.slot_owner.insert(slot, chunk.chunk_id);
        }
        version.chunks.insert(chunk.chunk_id, chunk.clone());
    }
    version
}
