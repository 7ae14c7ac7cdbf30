//! The memtable: sorted entries not yet in chunks, newest version of a key first.

use std::cmp::Reverse;
use std::collections::BTreeMap;
use std::ops::Bound;

use lds_format::batch::EntryKind;

/// An entry's position: user key ascending, sequence descending (SPEC.md §8.1 order).
pub type InternalKey = (Vec<u8>, Reverse<u64>);

/// Sorted entries with their approximate memory footprint.
#[derive(Debug, Default)]
pub struct MemTable {
    entries: BTreeMap<InternalKey, (EntryKind, Vec<u8>)>,
    bytes: usize,
}

/// Per-entry bookkeeping counted in `approximate_bytes`.
const ENTRY_OVERHEAD_BYTES: usize = 48;

impl MemTable {
    /// Inserts one entry.
    pub fn insert(&mut self, key: &[u8], sequence: u64, kind: EntryKind, value: &[u8]) {
        self.bytes += key.len() + value.len() + ENTRY_OVERHEAD_BYTES;
        self.entries.insert((key.to_vec(), Reverse(sequence)), (kind, value.to_vec()));
    }

    /// The newest version of `key` at or below `snapshot`: `Some(None)` is a tombstone.
    pub fn get(&self, key: &[u8], snapshot: u64) -> Option<Option<&[u8]>> {
        let start = (key.to_vec(), Reverse(snapshot));
        let ((found, _), (kind, value)) = self.entries.range((Bound::Included(start), Bound::Unbounded)).next()?;
        if found.as_slice() != key {
            return None;
        }
        Some(match kind {
            EntryKind::Put => Some(value.as_slice()),
            EntryKind::Delete => None,
        })
    }

    /// Every entry in internal-key order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], u64, EntryKind, &[u8])> {
        self.entries
            .iter()
            .map(|((key, Reverse(sequence)), (kind, value))| (key.as_slice(), *sequence, *kind, value.as_slice()))
    }

    /// Entries from `start` (inclusive) in internal-key order.
    pub fn range_from<'a>(&'a self, start: &[u8]) -> impl Iterator<Item = (&'a [u8], u64, EntryKind, &'a [u8])> + 'a {
        let from = (start.to_vec(), Reverse(u64::MAX));
        self.entries
            .range((Bound::Included(from), Bound::Unbounded))
            .map(|((key, Reverse(sequence)), (kind, value))| (key.as_slice(), *sequence, *kind, value.as_slice()))
    }

    /// Approximate bytes held.
    pub fn approximate_bytes(&self) -> usize {
        self.bytes
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_visible_version_wins() {
        let mut table = MemTable::default();
        table.insert(b"a", 1, EntryKind::Put, b"one");
        table.insert(b"a", 3, EntryKind::Delete, b"");
        table.insert(b"a", 5, EntryKind::Put, b"five");
        table.insert(b"b", 2, EntryKind::Put, b"bee");
        assert_eq!(table.get(b"a", 10), Some(Some(&b"five"[..])));
        assert_eq!(table.get(b"a", 4), Some(None));
        assert_eq!(table.get(b"a", 2), Some(Some(&b"one"[..])));
        assert_eq!(table.get(b"a", 0), None);
        assert_eq!(table.get(b"c", 10), None);
        let order: Vec<(Vec<u8>, u64)> = table.iter().map(|(key, sequence, _, _)| (key.to_vec(), sequence)).collect();
        assert_eq!(order, vec![(b"a".to_vec(), 5), (b"a".to_vec(), 3), (b"a".to_vec(), 1), (b"b".to_vec(), 2)]);
    }
}
