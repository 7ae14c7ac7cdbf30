//! Flushing a frozen memtable to level-0 chunks (SPEC.md §10.2): build, write, flush the
//! device, then commit one delta version that adds them and moves the backup start.

use std::sync::Arc;

use lds_format::version::DeltaVersion;

use crate::error::Result;
use crate::memtable::MemTable;
use crate::retention::Retention;
use crate::state::Shared;
use crate::table::build::{chunk_format, ChunkPacker};
use crate::table::write::write_chunks;
use crate::version::commit::commit;
#[cfg(not(feature = "fault-drop-chunk-flush"))]
use crate::version::commit::flush_device;

/// Writes a frozen memtable to level-0 chunks and commits them with the new backup start.
pub(crate) fn flush_frozen(
    shared: &Shared,
    table: &MemTable,
    backup_start: (u64, u64),
    last_sequence: u64,
) -> Result<()> {
    let mut retention = Retention::new(shared.smallest_snapshot());
    let format = chunk_format(&shared.geometry, shared.instance, &shared.options, shared.digest);
    let mut packer = ChunkPacker::new(format);
    // Tombstones stay in level 0: older versions may lie below.
    table.visit(|key, sequence, kind, value| {
        if retention.keep(key, sequence, kind, |_| false) {
            packer.push(key, sequence, kind, value);
        }
    });
    let mut built: Vec<_> = packer.finish().into_iter().map(|packed| packed.chunk).collect();
    let placement = vec![(0u8, 0u8); built.len()];
    let added = write_chunks(shared, &mut built, &placement, false)?;
    // The chunks must be durable before the delta version that names them.
    #[cfg(not(feature = "fault-drop-chunk-flush"))]
    flush_device(shared)?;
    let mut state = shared.lock_state();
    let version = Arc::clone(state.version());
    let delta = DeltaVersion {
        last_sequence: last_sequence.max(version.last_sequence),
        ofs_backup_start: backup_start.0,
        lsn_backup_start: backup_start.1,
        compaction_id: 0,
        deleted: Vec::new(),
        compact_pointers: Vec::new(),
        added,
    };
    commit(shared, &mut state, &delta, &[])?;
    shared.counters.memtable_flushes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}
