//! Which versions a flush or compaction keeps (LevelDB's rule): a version hidden by a newer
//! one that every snapshot sees is dropped; a tombstone that every snapshot sees is dropped
//! where no deeper level can hold an older version of its key.

use lds_format::entry::EntryKind;

/// Decides, entry by entry in internal-key order, what a merge keeps.
#[derive(Debug)]
pub(crate) struct Retention {
    /// Sequence number every live snapshot sees (the oldest snapshot, or the latest
    /// sequence when there is none).
    smallest_snapshot: u64,
    /// The key of the entries seen last (reused: no allocation per key), once there is one.
    current_key: Vec<u8>,
    started: bool,
    last_sequence_for_key: u64,
}

impl Retention {
    pub(crate) fn new(smallest_snapshot: u64) -> Self {
        Self { smallest_snapshot, current_key: Vec::new(), started: false, last_sequence_for_key: u64::MAX }
    }

    /// True when the entry is kept. `is_base_level(key)`: no deeper level overlaps `key`.
    pub(crate) fn keep(
        &mut self,
        key: &[u8],
        sequence: u64,
        kind: EntryKind,
        is_base_level: impl FnOnce(&[u8]) -> bool,
    ) -> bool {
        if !self.started || self.current_key != key {
            self.current_key.clear();
            self.current_key.extend_from_slice(key);
            self.started = true;
            self.last_sequence_for_key = u64::MAX;
        }
        let hidden = self.last_sequence_for_key <= self.smallest_snapshot;
        let dead_tombstone = kind == EntryKind::Delete && sequence <= self.smallest_snapshot && is_base_level(key);
        self.last_sequence_for_key = sequence;
        !hidden && !dead_tombstone
    }
}

/// Key ranges (of chunks outside a merge, below its target) that may hold older versions,
/// asked whether any overlaps a key, keys asked in ascending order as a merge meets its
/// tombstones: the ranges sorted by their largest key, with the least smallest key of each
/// suffix, so that a question costs O(1) amortized where testing every range cost a compare
/// per chunk of the deeper levels per tombstone (perf: a third of the compaction thread's
/// time in deleterandom at 5,000,000 keys). A key below the one asked before starts over,
/// so that order is a matter of speed, never of the answer.
#[derive(Debug, Default)]
pub(crate) struct KeyRanges {
    /// (smallest, largest) keys, by largest ascending.
    ranges: Vec<(Vec<u8>, Vec<u8>)>,
    /// For each position, the position at or after it whose smallest key is least.
    least_from: Vec<usize>,
    /// Ranges before this one end below every key asked since the last start over.
    next: usize,
    last: Vec<u8>,
}

impl KeyRanges {
    /// The key ranges of `chunks`.
    pub(crate) fn of<'a>(chunks: impl Iterator<Item = &'a lds_format::version::meta::ChunkMeta>) -> Self {
        Self::new(chunks.map(|chunk| (chunk.smallest_key.clone(), chunk.largest_key.clone())).collect())
    }

    pub(crate) fn new(mut ranges: Vec<(Vec<u8>, Vec<u8>)>) -> Self {
        ranges.sort_by(|a, b| a.1.cmp(&b.1));
        let mut least_from = vec![0; ranges.len()];
        for at in (0..ranges.len()).rev() {
            least_from[at] = match least_from.get(at + 1) {
                Some(&after) if ranges[after].0 < ranges[at].0 => after,
                _ => at,
            };
        }
        Self { ranges, least_from, next: 0, last: Vec::new() }
    }

    /// True when some range holds `key`.
    pub(crate) fn overlap(&mut self, key: &[u8]) -> bool {
        if key < self.last.as_slice() {
            self.next = 0;
        }
        self.last.clear();
        self.last.extend_from_slice(key);
        // Bounded by the ranges: each round passes one, for good until a start over.
        while self.ranges.get(self.next).is_some_and(|range| range.1.as_slice() < key) {
            self.next += 1;
        }
        // Every range from `next` on ends at or past `key`: one holds it when the least
        // smallest key among them is at or below it.
        self.least_from.get(self.next).is_some_and(|&least| self.ranges[least].0.as_slice() <= key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn range() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
        (proptest::collection::vec(0u8..6, 0..3), proptest::collection::vec(0u8..6, 0..3)).prop_map(|(a, b)| {
            if a <= b {
                (a, b)
            } else {
                (b, a)
            }
        })
    }

    proptest! {
        #[test]
        fn key_ranges_answer_as_testing_every_range(
            ranges in proptest::collection::vec(range(), 0..12),
            mut keys in proptest::collection::vec(proptest::collection::vec(0u8..6, 0..3), 0..30),
            sorted in any::<bool>(),
        ) {
            if sorted {
                keys.sort();
            }
            let mut asked = KeyRanges::new(ranges.clone());
            for key in &keys {
                let expected = ranges.iter().any(|(low, high)| low <= key && key <= high);
                prop_assert_eq!(asked.overlap(key), expected, "key {:?}", key);
            }
        }
    }

    fn kept(smallest_snapshot: u64, entries: &[(&str, u64, EntryKind)], base: bool) -> Vec<(String, u64)> {
        let mut retention = Retention::new(smallest_snapshot);
        entries
            .iter()
            .filter(|(key, sequence, kind)| retention.keep(key.as_bytes(), *sequence, *kind, |_| base))
            .map(|(key, sequence, _)| (key.to_string(), *sequence))
            .collect()
    }

    const PUT: EntryKind = EntryKind::Put;
    const DELETE: EntryKind = EntryKind::Delete;

    #[test]
    fn without_snapshots_only_the_newest_version_stays() {
        let entries = [("a", 9, PUT), ("a", 5, PUT), ("a", 2, DELETE), ("b", 7, PUT)];
        assert_eq!(kept(100, &entries, false), vec![("a".into(), 9), ("b".into(), 7)]);
    }

    #[test]
    fn a_snapshot_keeps_the_version_it_sees() {
        let entries = [("a", 9, PUT), ("a", 5, PUT), ("a", 2, PUT)];
        // A snapshot at 6 sees version 5; version 2 is hidden from everyone.
        assert_eq!(kept(6, &entries, false), vec![("a".into(), 9), ("a".into(), 5)]);
    }

    #[test]
    fn tombstones_go_only_at_the_base_level() {
        let entries = [("a", 9, DELETE), ("a", 5, PUT), ("b", 3, PUT)];
        assert_eq!(kept(100, &entries, false), vec![("a".into(), 9), ("b".into(), 3)]);
        assert_eq!(kept(100, &entries, true), vec![("b".into(), 3)]);
        // A snapshot older than the tombstone still needs it and the value below it.
        assert_eq!(kept(6, &entries, true), vec![("a".into(), 9), ("a".into(), 5), ("b".into(), 3)]);
    }
}
