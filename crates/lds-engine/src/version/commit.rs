//! Committing a change to the tree (SPEC.md §10.2): one delta version appended to the version
//! log and flushed is the commit point; a base version replaces it when the log needs a trim
//! (§10.3). Then the new version is installed and the deleted chunks' slots wait for their
//! readers to finish.

use std::sync::{Arc, MutexGuard};

use lds_format::log::ObjectType;
use lds_format::version::{ChunkMeta, DeltaVersion};
use lds_format::writer::AppendError;

use crate::error::{Error, Result};
use crate::state::{Shared, TreeState};
use crate::version::levels::Levels;
use crate::version::slots::reclaim;

/// Makes every completed write durable (SPEC.md §2.5).
pub(crate) fn flush_device(shared: &Shared) -> Result<()> {
    Ok(shared.device.flush()?)
}

/// Appends the delta version, or a new base version holding it when the version log needs a
/// trim (SPEC.md §10.3), makes it durable (the commit point), installs the new version, and
/// queues the deleted chunks' slots for freeing.
pub(crate) fn commit(
    shared: &Shared,
    state: &mut MutexGuard<'_, TreeState>,
    delta: &DeltaVersion,
    deleted: &[ChunkMeta],
) -> Result<()> {
    commit_as(shared, state, delta, deleted, false)
}

/// Raises the SN with a new base version of the current version (a trim, SPEC.md §10.3), so
/// that every backup log append after it carries an SN no object of an earlier session has:
/// a stale object of a crashed session standing after the head can then never continue the
/// chain (SPEC.md §9.1: an object with a smaller SN does not), whatever its lsn. Without it,
/// an unsynced batch that a crash cut from the chain came back once a new append of the same
/// length filled the gap before it (found by the repeated-crash enumeration).
pub(crate) fn raise_sn(shared: &Shared, state: &mut MutexGuard<'_, TreeState>) -> Result<()> {
    let version = Arc::clone(&state.version);
    let delta = DeltaVersion {
        last_sequence: version.last_sequence,
        ofs_backup_start: version.ofs_backup_start,
        lsn_backup_start: version.lsn_backup_start,
        compaction_id: 0,
        deleted: Vec::new(),
        compact_pointers: Vec::new(),
        added: Vec::new(),
    };
    commit_as(shared, state, &delta, &[], true)
}

fn version_log_full(shared: &Shared, error: &AppendError) -> Error {
    match error {
        AppendError::LsnExhausted { .. } => Error::Exhausted { what: "version log sequence numbers" },
        _ => Error::VersionLogFull { path: shared.path_string(), instance: shared.instance, reason: error.to_string() },
    }
}

fn commit_as(
    shared: &Shared,
    state: &mut MutexGuard<'_, TreeState>,
    delta: &DeltaVersion,
    deleted: &[ChunkMeta],
    force_base: bool,
) -> Result<()> {
    assert!(!shared.read_only, "a commit on a read-only store");
    let mut next = (*state.version).clone();
    next.apply(delta)
        .map_err(|error| Error::Invariant { what: format!("a new delta version contradicts the version: {error}") })?;
    let levels = Levels::of(&next);
    if let Some((first, second)) = levels.overlap() {
        return Err(Error::Invariant {
            what: format!(
                "a commit would make chunks {} and {} of level {} overlap",
                first.chunk_id, second.chunk_id, first.level
            ),
        });
    }
    let delta_payload = delta.encode();
    let base_len = next.to_base(shared.geometry, shared.instance).encode().len();
    let ofs_area = state.version_log.context().ofs_area;
    // Trim while a base version still fits after this delta with room to grow: the next
    // commit's base is larger by what its delta adds.
    let base_reserve = base_len + base_len / 4 + delta_payload.len() + shared.geometry.sector_size as usize;
    let (object_type, sn, payload) = if !force_base && state.version_log.fits(&[delta_payload.len(), base_reserve]) {
        (ObjectType::DeltaVersion, state.sn, delta_payload)
    } else {
        (ObjectType::BaseVersion, state.sn + 1, next.to_base(shared.geometry, shared.instance).encode())
    };
    let pending =
        state.version_log.append(object_type, sn, &payload).map_err(|error| version_log_full(shared, &error))?;
    // Recovery reaches the live base version through offset 0 (SPEC.md §9.2): when the log
    // wraps, the WOR must be durable before the WOL, and the WOL before anything overwrites
    // the start of the old chain (SPEC.md §10.1).
    for write in &pending {
        shared.device.write_at(ofs_area + write.offset, &write.bytes)?;
        if write.object_type.is_wrap() {
            flush_device(shared)?;
        }
    }
    flush_device(shared)?;
    if object_type == ObjectType::BaseVersion {
        let last = pending.last().map(|write| (write.offset, write.lsn)).unwrap_or_default();
        state.version_log.set_live_start(last.0, last.1);
        state.version_log.set_sn(sn);
        state.sn = sn;
    }
    state.levels = Arc::new(levels);
    let previous = std::mem::replace(&mut state.version, Arc::new(next));
    let slots = deleted.iter().flat_map(|chunk| chunk.slots().collect::<Vec<_>>()).collect();
    state.pending_free.push((previous, slots));
    state.compaction_stalled = false;
    state.commits += 1;
    reclaim(state, &shared.cache);
    Ok(())
}
