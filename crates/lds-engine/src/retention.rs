//! Which versions a flush or compaction keeps (LevelDB's rule): a version hidden by a newer
//! one that every snapshot sees is dropped; a tombstone that every snapshot sees is dropped
//! where no deeper level can hold an older version of its key.

use lds_format::batch::EntryKind;

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

#[cfg(test)]
mod tests {
    use super::*;

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
