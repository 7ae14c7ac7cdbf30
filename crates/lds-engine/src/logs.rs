//! TRIAD-LOG (technique `triad-log`, SPEC.md §8.9): a flush may write *log chunks*, whose puts
//! are 24-byte references to the batches of the backup log that already hold their values,
//! instead of the values. Adapted to LDS's fixed ring (TRIAD keeps whole commit-log files):
//!
//! 1. Each memtable records where its batches lie in the backup log (`BatchPosition`), so
//!    that its flush can name every put's batch and index.
//! 2. A flush writes a log chunk (`log_chunk_wanted`) only while the ring has room to retain
//!    its part of the log and to take the next two memtables, and when most of its part is
//!    newest versions (TRIAD's condition: retaining a log of overwritten values costs ring
//!    space for nothing). Otherwise it writes an ordinary chunk, as without the technique.
//! 3. The version's *retention start* (the oldest object its log chunks name) is where the
//!    writer's live region of the ring begins; a merge that takes log chunks moves it forward
//!    once no reader holds the version that named them (`writer_start`).
//! 4. When the retained region grows so far that the next flush could not retain its part,
//!    level 0 merges at once (`pressure`), whatever its chunk count: the merge reads the
//!    referenced values (`table::log::LogRegion`) and writes ordinary chunks. A writer that finds the
//!    ring full waits for that merge.
//! 5. Reads follow a reference with one read of its batch (`table::log::read`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use lds_format::geometry::LogKind;
use lds_format::log::{area_context, ring_distance, LogPosition};

use crate::error::Result;
use crate::state::{Frozen, Shared, TreeState};
use crate::version::published::Published;

/// Room the ring keeps beyond a retained region: the next two memtables' parts (the frozen
/// one's and the active one's) and the wrap objects.
fn ring_reserve(shared: &Shared) -> u64 {
    2 * shared.options.write_buffer_size as u64 + 4 * u64::from(shared.geometry.sector_size)
}

/// True when the flush of `frozen` should write a log chunk: the technique is on; the last
/// flush kept most of its part of the log (`record_unique`); the ring can retain everything
/// from the retention start to the frozen memtable's end and still take the next two
/// memtables; and its keys overlap a chunk of level 0 or 1 (or both are empty), so that its
/// chunk will be merged anyway (a chunk that overlaps what is there, as sequential writes
/// make, moves down without rewriting as an ordinary chunk, which a log chunk cannot).
pub(crate) fn log_chunk_wanted(shared: &Shared, state: &TreeState, frozen: &Frozen) -> bool {
    if !shared.log_tables {
        return false;
    }
    let unique = shared.log_unique_percent.load(Ordering::Relaxed);
    if unique < u64::from(shared.options.log_tables_unique_percent.min(100)) {
        return false;
    }
    let end = LogPosition { offset: frozen.backup_start.0, lsn: frozen.backup_start.1 };
    let retained = ring_distance(state.retention, end, shared.geometry.len_backup_log);
    if retained + ring_reserve(shared) > shared.geometry.len_backup_log {
        return false;
    }
    let Some((smallest, largest)) = frozen.table.key_range() else { return false };
    let version = state.version();
    let upper: Vec<&lds_format::version::meta::ChunkMeta> = (0..2u8).flat_map(|level| version.level(level)).collect();
    upper.is_empty()
        || upper.iter().any(|chunk| {
            chunk.smallest_key.as_slice() <= largest.as_slice() && smallest.as_slice() <= chunk.largest_key.as_slice()
        })
}

/// TRIAD's condition, recorded by a flush for the next: it kept at least
/// `Options::log_tables_unique_percent` of the entries its part of the log holds (the rest are
/// overwritten versions the ring would keep for nothing).
pub(crate) fn record_unique(shared: &Shared, kept: u64, logged: u64) {
    if let Some(percent) = (kept * 100).checked_div(logged) {
        shared.log_unique_percent.store(percent, Ordering::Relaxed);
    }
}

/// True when level 0 should merge now, whatever its chunk count: the version has log chunks
/// and the region they retain leaves the ring less room than the next two memtables need.
pub(crate) fn pressure(shared: &Shared, state: &TreeState) -> bool {
    let version = state.version();
    let backup_start = version.backup_start();
    if state.retention == backup_start {
        return false;
    }
    let retained = ring_distance(state.retention, backup_start, shared.geometry.len_backup_log);
    retained + ring_reserve(shared) > shared.geometry.len_backup_log
}

/// After a commit that replaced `previous` by the current version: remembers the oldest
/// object `previous`'s log chunks name when the new version no longer keeps it (a reader
/// holding `previous` may still follow its references), and sets where the writer's live
/// region of the ring starts now (SPEC.md §8.9, §10.1).
pub(crate) fn after_commit(state: &mut TreeState, previous: &Arc<Published>) {
    state.retention = state.version().retention_start();
    let previous_start = previous.version.chunks.values().filter_map(|chunk| chunk.log_start).min();
    if let Some(start) = previous_start.filter(|start| start.lsn < state.retention.lsn) {
        state.log_holds.push((Arc::downgrade(previous), start));
    }
    let start = writer_start(state);
    state.backup_start_update = Some((start.offset, start.lsn));
}

/// Where the writer's live region starts: the oldest retention start of a version a reader
/// still holds, else the current version's. Forgets the holds no reader keeps.
pub(crate) fn writer_start(state: &mut TreeState) -> LogPosition {
    state.log_holds.retain(|(held, _)| held.strong_count() > 0);
    state.log_holds.first().map_or(state.retention, |(_, start)| (*start).min(state.retention))
}

/// The value the log reference `value` of the entry (`key`, `sequence`) names, read from the
/// store's instance's backup log (SPEC.md §8.9).
pub(crate) fn read(shared: &Shared, key: &[u8], sequence: u64, value: &[u8]) -> Result<Vec<u8>> {
    shared.counters.log_reads.fetch_add(1, Ordering::Relaxed);
    let context = area_context(&shared.geometry, LogKind::Backup, shared.instance);
    crate::table::log::read(shared.device.as_ref(), &context, key, sequence, value)
}
