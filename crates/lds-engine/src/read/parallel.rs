//! Parallel search (SifrDB §4.3): a point lookup with several candidate chunks searches them
//! at once, on the calling thread and the threads of a [`SearchPool`], and takes the answer
//! of the highest-priority candidate that has one, without waiting for lower ones.
//!
//! SifrDB hands every candidate tree to a search thread. Adapted: the caller first asks each
//! candidate's filter and block index (its tail is usually in the tail cache, and a probe
//! costs less than handing it to another thread), and the candidates whose filters may hold
//! the key are searched in parallel, the first on the calling thread, only when two or more
//! of them would read the device (their blocks are not cached) and a device read takes
//! longer than a hand-off to another thread, both measured as they happen (on this
//! project's test machine a read the block cache misses is served from the page cache in
//! microseconds, and parallel search lost 0.71x there): parallel search overlaps device
//! reads, and costs a hand-off otherwise. The priority is SifrDB's: level 0's chunks
//! first (the newest version among them wins, so all of them are waited for), then each
//! deeper level in order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use lds_format::version::meta::ChunkMeta;

use crate::error::Result;
use crate::pool::{poll, SearchPool};
use crate::state::Shared;

/// A found version: its sequence number, kind and value.
pub(crate) type Found = (u64, lds_format::entry::EntryKind, Vec<u8>);

/// SifrDB's query object: each candidate's result (`LOCALR`) as it comes, and whether the
/// answer is known (`GLOBALR`), so that searches not started yet are skipped.
struct Query {
    results: Mutex<Vec<Option<Result<Option<Found>>>>>,
    done: Condvar,
    decided: std::sync::atomic::AtomicBool,
    /// Results stored so far (polled without the lock).
    stored: AtomicUsize,
}

/// How one chunk is searched: the newest version of a key at or below a snapshot in it.
pub(crate) type FindInChunk = fn(&Shared, &ChunkMeta, &[u8], u64) -> Result<Option<Found>>;

/// Searches `candidates` (in priority order; the first `level0` of them are level 0's) for
/// `key` at `snapshot` with `find`, the first on this thread and the others on the pool's.
/// Returns the answer: the newest version among level 0's, else the first deeper one found.
pub(crate) fn search(
    shared: &Arc<Shared>,
    pool: &SearchPool,
    find: FindInChunk,
    candidates: Vec<ChunkMeta>,
    level0: usize,
    key: &[u8],
    snapshot: u64,
) -> Result<Option<Found>> {
    let count = candidates.len();
    let query = Arc::new(Query {
        results: Mutex::new((0..count).map(|_| None).collect()),
        done: Condvar::new(),
        decided: std::sync::atomic::AtomicBool::new(false),
        stored: AtomicUsize::new(0),
    });
    let mut candidates = candidates.into_iter();
    let first = candidates.next();
    for (index, chunk) in candidates.enumerate().map(|(index, chunk)| (index + 1, chunk)) {
        let (shared, query, key) = (Arc::clone(shared), Arc::clone(&query), key.to_vec());
        pool.submit(Box::new(move || {
            let result = if query.decided.load(std::sync::atomic::Ordering::Acquire) {
                Ok(None)
            } else {
                find(&shared, &chunk, &key, snapshot)
            };
            {
                // Stored and counted under the lock the waiting lookup checks the count under.
                let mut results = query.results.lock().unwrap_or_else(PoisonError::into_inner);
                results[index] = Some(result);
                query.stored.fetch_add(1, Ordering::Release);
            }
            query.done.notify_all();
        }));
    }
    if let Some(chunk) = first {
        let result = find(shared, &chunk, key, snapshot);
        query.results.lock().unwrap_or_else(PoisonError::into_inner)[0] = Some(result);
        query.stored.fetch_add(1, Ordering::Release);
    }
    // Bounded by the candidates: each round either decides or waits for one more result.
    loop {
        let seen = query.stored.load(Ordering::Acquire);
        let mut results = query.results.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(answer) = decide(&mut results, level0) {
            query.decided.store(true, Ordering::Release);
            return answer;
        }
        // Poll for the next result first; sleep if it is slow (a device read).
        drop(results);
        if !poll(|| query.stored.load(Ordering::Acquire) > seen) {
            let results = query.results.lock().unwrap_or_else(PoisonError::into_inner);
            if query.stored.load(Ordering::Acquire) == seen {
                drop(query.done.wait(results).unwrap_or_else(PoisonError::into_inner));
            }
        }
    }
}

/// The answer if the results so far decide it: level 0's newest when all of level 0's are
/// in and one found the key, else the first deeper result in order that found it once all
/// before it are in (an error decides too). `None`: a result it needs is missing.
fn decide(results: &mut [Option<Result<Option<Found>>>], level0: usize) -> Option<Result<Option<Found>>> {
    let mut best: Option<Found> = None;
    for (index, slot) in results.iter_mut().enumerate() {
        if index == level0 {
            if let Some(found) = best.take() {
                return Some(Ok(Some(found)));
            }
        }
        match slot.take()? {
            Err(error) => return Some(Err(error)),
            Ok(None) => *slot = Some(Ok(None)),
            Ok(Some(found)) if index < level0 => {
                if best.as_ref().is_none_or(|best| found.0 > best.0) {
                    best = Some(found.clone());
                }
                *slot = Some(Ok(Some(found)));
            }
            Ok(Some(found)) => return Some(Ok(Some(found))),
        }
    }
    Some(Ok(best))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lds_format::entry::EntryKind;

    fn found(sequence: u64) -> Option<Result<Option<Found>>> {
        Some(Ok(Some((sequence, EntryKind::Put, sequence.to_le_bytes().to_vec()))))
    }

    fn sequence(answer: Option<Result<Option<Found>>>) -> Option<Option<u64>> {
        answer.map(|answer| answer.unwrap_or_else(|error| panic!("{error}")).map(|found| found.0))
    }

    #[test]
    fn the_highest_priority_answer_wins_without_waiting_for_lower_ones() {
        // Level 0: two chunks; then three deeper levels.
        let mut results = vec![Some(Ok(None)), found(7), None, found(3), found(2)];
        // Level 0 found 7: the deeper ones do not matter, even missing.
        assert_eq!(sequence(decide(&mut results, 2)), Some(Some(7)));
        // Level 0 waits for all of its chunks: the newest of them wins.
        let mut results = vec![found(5), None, found(3)];
        assert_eq!(sequence(decide(&mut results, 2)), None);
        let mut results = vec![found(5), found(9), found(3)];
        assert_eq!(sequence(decide(&mut results, 2)), Some(Some(9)));
        // Nothing in level 0: the first deeper level that found it, once those before are in.
        let mut results = vec![Some(Ok(None)), None, found(3)];
        assert_eq!(sequence(decide(&mut results, 1)), None);
        let mut results = vec![Some(Ok(None)), Some(Ok(None)), found(3), None];
        assert_eq!(sequence(decide(&mut results, 1)), Some(Some(3)));
        // Not found anywhere.
        let mut results = vec![Some(Ok(None)), Some(Ok(None))];
        assert_eq!(sequence(decide(&mut results, 0)), Some(None));
    }
}
