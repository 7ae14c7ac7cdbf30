//! Leveled compaction (LevelDB's, on LDS slots): `pick` chooses, `merge` builds the outputs,
//! and `run` writes them and commits one delta version after which the input slots are freed
//! (once no reader holds them).

pub(crate) mod merge;
pub(crate) mod pick;

use std::sync::Arc;

use lds_format::version::{CompactPointer, DeletedChunk, DeltaVersion, CHUNK_FLAG_ODD};

use crate::compaction::merge::{merge, MergeContext};
use crate::compaction::pick::{key_range, Choice, Plan};
use crate::error::Result;
use crate::state::Shared;
use crate::table::build::ChunkFormat;
use crate::table::write::write_chunks;
use crate::version::commit::{commit, flush_device};

fn deleted_of(chunks: &[lds_format::version::ChunkMeta]) -> Vec<DeletedChunk> {
    chunks.iter().map(|chunk| DeletedChunk { chunk_id: chunk.chunk_id, level: chunk.level }).collect()
}

/// Where the round-robin choice of the source level resumes after this compaction.
fn compact_pointer(plan: &Plan) -> Option<CompactPointer> {
    let (_, victims_largest) = key_range(&plan.victims);
    (plan.source_level > 0 && plan.target_level > plan.source_level)
        .then_some(CompactPointer { level: plan.source_level, key: victims_largest })
}

/// Runs one compaction: a trivial move, or a merge committed by one delta version.
pub(crate) fn run(shared: &Shared, choice: &Choice) -> Result<()> {
    match choice {
        Choice::DoNothing => Ok(()),
        Choice::Move(plan) => {
            // Trivial move (paper §2.1 footnote 1): the chunks change level, not slot.
            let moved = plan
                .victims
                .iter()
                .map(|victim| {
                    let mut moved = victim.clone();
                    moved.level = plan.target_level;
                    moved.flags &= !CHUNK_FLAG_ODD;
                    moved
                })
                .collect();
            let mut state = shared.lock_state();
            let version = Arc::clone(&state.version);
            let delta = DeltaVersion {
                last_sequence: version.last_sequence,
                ofs_backup_start: version.ofs_backup_start,
                lsn_backup_start: version.lsn_backup_start,
                compaction_id: 0,
                deleted: deleted_of(&plan.victims),
                compact_pointers: compact_pointer(plan).into_iter().collect(),
                added: moved,
            };
            commit(shared, &mut state, &delta, &[])
        }
        Choice::Merge(plan) => {
            let version = Arc::clone(&shared.lock_state().version);
            let context = MergeContext {
                device: shared.device.as_ref(),
                geometry: &shared.geometry,
                format: ChunkFormat::new(&shared.geometry, shared.instance, &shared.options),
                version: &version,
                smallest_snapshot: shared.smallest_snapshot(),
            };
            let mut output = merge(&context, plan)?;
            let added = write_chunks(shared, &mut output.built, &output.placement)?;
            // The outputs must be durable before the delta version that names them.
            flush_device(shared)?;
            let mut state = shared.lock_state();
            // A flush may have committed since `version` was taken; the delta applies to the
            // current version, which still holds every input (only this thread deletes chunks).
            let delta = DeltaVersion {
                last_sequence: state.version.last_sequence,
                ofs_backup_start: state.version.ofs_backup_start,
                lsn_backup_start: state.version.lsn_backup_start,
                compaction_id: 0,
                deleted: deleted_of(&output.inputs),
                compact_pointers: compact_pointer(plan).into_iter().collect(),
                added,
            };
            commit(shared, &mut state, &delta, &output.inputs)
        }
    }
}
