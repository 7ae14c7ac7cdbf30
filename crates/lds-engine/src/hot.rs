//! TRIAD-MEM (technique `triad-mem`): when a full memtable is frozen, the newest versions of
//! its hot keys (updated at least twice and more often than the average key, the most
//! updated first, within `Options::hot_buffer_percent` of the write buffer: TRIAD's PERC_HOT)
//! stay in memory: they are written again to
//! the backup log as one batch with new sequence numbers, just after the frozen memtable's
//! part of the log, and inserted into the new memtable; the flush leaves them out of level 0.
//! A skewed workload then writes its hot keys to level 0 once per several flushes instead of
//! once per flush.
//!
//! Adapted from TRIAD §4.1 to a log that is one ring (SPEC.md §10.1): TRIAD writes the hot
//! entries to the new memtable's commit log; here they go after the frozen memtable's backup
//! start, so that the flush's delta version, which moves the backup start there, leaves them
//! in the live part of the log. The batch is written out to the device at once, and the
//! flush flushes the device before its delta version: once the old part of the log stops
//! being replayed, the hot entries are durable in the new part. No key is held while a
//! snapshot is live (a snapshot older than the new sequence numbers would miss them), and
//! neither is a value pointer (its value chunk would have to stay pending, SPEC.md §8.6).

use lds_format::entry::EntryKind;

use crate::memtable::MemTable;

/// The hot entries of `table`: the newest version (put or delete) of each key with at least
/// two versions and more than the average key, the most updated first, within
/// `bytes_max` bytes as the memtable counts them (`MemTable::entry_bytes`).
pub(crate) fn select(table: &MemTable, bytes_max: usize) -> Vec<(EntryKind, Vec<u8>, Vec<u8>)> {
    let mut counts: Vec<(u64, Vec<u8>)> = Vec::new();
    let (mut keys, mut entries) = (0u64, 0u64);
    let mut current: Option<(Vec<u8>, u64)> = None;
    table.visit(|key, _, _, _| {
        entries += 1;
        match current.as_mut() {
            Some((current_key, count)) if current_key.as_slice() == key => *count += 1,
            _ => {
                keys += 1;
                if let Some((done, count)) = current.replace((key.to_vec(), 1)) {
                    if count >= 2 {
                        counts.push((count, done));
                    }
                }
            }
        }
    });
    if let Some((done, count)) = current {
        if count >= 2 {
            counts.push((count, done));
        }
    }
    if keys == 0 {
        return Vec::new();
    }
    // More updates than the mean per key (TRIAD's rule), the most updated first.
    counts.retain(|(count, _)| *count * keys > entries);
    counts.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let mut hot = Vec::new();
    let mut bytes = 0usize;
    for (_, key) in counts {
        let Some((_, kind, value)) = table.get(&key, u64::MAX) else { continue };
        let size = MemTable::entry_bytes(&key, &value);
        if kind == EntryKind::Pointer || bytes + size > bytes_max {
            continue;
        }
        bytes += size;
        hot.push((kind, key, value));
    }
    hot
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_updated_more_than_the_average_are_hot_the_most_updated_first() {
        let table = MemTable::default();
        let mut sequence = 0;
        let mut put = |key: &str, times: u64, kind: EntryKind| {
            for time in 0..times {
                sequence += 1;
                table.insert(key.as_bytes(), sequence, kind, format!("{key}-{time}").as_bytes());
            }
        };
        for number in 0..200 {
            put(&format!("cold-{number:03}"), 1, EntryKind::Put);
        }
        put("warm", 2, EntryKind::Put);
        put("hot-a", 9, EntryKind::Put);
        put("hot-b", 5, EntryKind::Put);
        put("hot-deleted", 4, EntryKind::Delete);
        put("pointer", 7, EntryKind::Pointer);
        // The pointer is never held; the others, most updated first.
        let hot = select(&table, 1 << 20);
        let names: Vec<&[u8]> = hot.iter().map(|(_, key, _)| key.as_slice()).collect();
        assert_eq!(names, vec![b"hot-a".as_slice(), b"hot-b", b"hot-deleted", b"warm"]);
        assert_eq!(hot[0].2, b"hot-a-8", "the newest version");
        assert_eq!(hot[2].0, EntryKind::Delete);
        // The byte budget (as the memtable counts bytes) leaves out what does not fit.
        let hot = select(&table, 2 * MemTable::entry_bytes(b"hot-a", b"hot-a-8"));
        assert_eq!(hot.len(), 2, "{hot:?}");
        // Nothing above the average: nothing is hot.
        let uniform = MemTable::default();
        for number in 0..50u64 {
            uniform.insert(format!("k{number}").as_bytes(), number * 2 + 1, EntryKind::Put, b"a");
            uniform.insert(format!("k{number}").as_bytes(), number * 2 + 2, EntryKind::Put, b"b");
        }
        assert!(select(&uniform, 1 << 20).is_empty());
        assert!(select(&MemTable::default(), 1 << 20).is_empty());
    }
}
