//! The memtable: a concurrent skiplist of entries not yet in chunks, ordered by user key and
//! then newest first (SPEC.md §8.1 order). Writers insert under the engine's write lock;
//! readers search without locks.

use std::cmp::Reverse;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};

use crossbeam_skiplist::SkipMap;
use lds_format::batch::EntryKind;

/// A user key, ordered as bytes (`lds_format::codec::compare_keys`: its first 8 bytes as one
/// integer first, so that most comparisons of a skiplist search call no `memcmp`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserKey(pub Vec<u8>);

impl Ord for UserKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        lds_format::codec::compare_keys(&self.0, &other.0)
    }
}

impl PartialOrd for UserKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// An entry's position: user key ascending, sequence descending.
pub type InternalKey = (UserKey, Reverse<u64>);

/// One entry, owned.
pub type Entry = (Vec<u8>, u64, EntryKind, Vec<u8>);

/// Sorted entries with their approximate memory footprint.
#[derive(Debug, Default)]
pub struct MemTable {
    entries: SkipMap<InternalKey, (EntryKind, Vec<u8>)>,
    bytes: AtomicUsize,
}

/// Per-entry bookkeeping counted in `approximate_bytes` (skiplist node and vectors).
const ENTRY_OVERHEAD_BYTES: usize = 96;

impl MemTable {
    /// The bytes an entry adds to `approximate_bytes`.
    pub fn entry_bytes(key: &[u8], value: &[u8]) -> usize {
        key.len() + value.len() + ENTRY_OVERHEAD_BYTES
    }

    /// Inserts one entry.
    pub fn insert(&self, key: &[u8], sequence: u64, kind: EntryKind, value: &[u8]) {
        self.bytes.fetch_add(Self::entry_bytes(key, value), Ordering::Relaxed);
        self.entries.insert((UserKey(key.to_vec()), Reverse(sequence)), (kind, value.to_vec()));
    }

    /// The newest version of `key` at or below `snapshot`: its sequence number, kind and value.
    pub fn get(&self, key: &[u8], snapshot: u64) -> Option<(u64, EntryKind, Vec<u8>)> {
        let start = (UserKey(key.to_vec()), Reverse(snapshot));
        let entry = self.entries.range((Bound::Included(start), Bound::Unbounded)).next()?;
        let (found, Reverse(sequence)) = entry.key();
        if found.0.as_slice() != key {
            return None;
        }
        let (kind, value) = entry.value();
        Some((*sequence, *kind, value.clone()))
    }

    /// Calls `visit` with every entry in internal-key order, borrowed (a flush copies them
    /// straight into chunks).
    pub fn visit(&self, mut visit: impl FnMut(&[u8], u64, EntryKind, &[u8])) {
        for entry in self.entries.iter() {
            let ((key, Reverse(sequence)), (kind, value)) = (entry.key(), entry.value());
            visit(&key.0, *sequence, *kind, value);
        }
    }

    /// At most `limit` entries from `from` (an internal-key bound) below the user key `end`.
    pub fn batch(&self, from: &Bound<InternalKey>, end: Option<&[u8]>, limit: usize) -> Vec<Entry> {
        self.entries
            .range((from.clone(), Bound::Unbounded))
            .take_while(|entry| end.is_none_or(|end| entry.key().0 .0.as_slice() < end))
            .take(limit)
            .map(|entry| owned(entry.key(), entry.value()))
            .collect()
    }

    /// Approximate bytes held.
    pub fn approximate_bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

fn owned(key: &InternalKey, value: &(EntryKind, Vec<u8>)) -> Entry {
    (key.0 .0.clone(), key.1 .0, value.0, value.1.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_visible_version_wins() {
        let table = MemTable::default();
        table.insert(b"a", 1, EntryKind::Put, b"one");
        table.insert(b"a", 3, EntryKind::Delete, b"");
        table.insert(b"a", 5, EntryKind::Put, b"five");
        table.insert(b"b", 2, EntryKind::Put, b"bee");
        assert_eq!(table.get(b"a", 10), Some((5, EntryKind::Put, b"five".to_vec())));
        assert_eq!(table.get(b"a", 4), Some((3, EntryKind::Delete, Vec::new())));
        assert_eq!(table.get(b"a", 2), Some((1, EntryKind::Put, b"one".to_vec())));
        assert_eq!(table.get(b"a", 0), None);
        assert_eq!(table.get(b"c", 10), None);
        let mut order: Vec<(Vec<u8>, u64)> = Vec::new();
        table.visit(|key, sequence, _, _| order.push((key.to_vec(), sequence)));
        assert_eq!(order, vec![(b"a".to_vec(), 5), (b"a".to_vec(), 3), (b"a".to_vec(), 1), (b"b".to_vec(), 2)]);
        assert_eq!(
            table.batch(&Bound::Included((UserKey(b"a".to_vec()), Reverse(u64::MAX))), Some(b"b"), usize::MAX).len(),
            3
        );
        assert_eq!(
            table.batch(&Bound::Included((UserKey(b"b".to_vec()), Reverse(u64::MAX))), None, usize::MAX).len(),
            1
        );
        assert_eq!(table.batch(&Bound::Included((UserKey(b"a".to_vec()), Reverse(u64::MAX))), None, 2).len(), 2);
    }
}
