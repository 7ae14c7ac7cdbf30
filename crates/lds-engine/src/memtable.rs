//! The memtable: a skiplist of entries not yet in chunks, ordered by user key and then
//! newest first (SPEC.md §8.1 order), its nodes packed in an arena (`list`). Writers insert
//! one at a time (under the engine's write lock, and the list's own); readers search without
//! locks.

mod list;

use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};

use lds_format::entry::EntryKind;

/// A position in internal-key order: a user key and a sequence number (newest first within
/// a key, SPEC.md §8.1).
pub(crate) type InternalKey = (Vec<u8>, u64);

/// Entries copied out of a memtable (`MemTable::batch`): their keys and values end to end in
/// one buffer, so that a batch costs no allocation per entry, and a batch reused costs none.
#[derive(Debug, Default)]
pub(crate) struct Copied {
    bytes: Vec<u8>,
    entries: Vec<CopiedEntry>,
}

#[derive(Debug, Clone, Copy)]
struct CopiedEntry {
    /// Where its key starts in `bytes`; its value follows the key.
    start: usize,
    key_len: u32,
    value_len: u32,
    sequence: u64,
    kind: EntryKind,
}

impl Copied {
    /// The entries held.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// The last entry.
    pub(crate) fn last(&self) -> Option<(&[u8], u64, EntryKind, &[u8])> {
        self.get(self.len().checked_sub(1)?)
    }

    /// The `at`th entry: key, sequence number, kind and value.
    pub(crate) fn get(&self, at: usize) -> Option<(&[u8], u64, EntryKind, &[u8])> {
        let entry = self.entries.get(at)?;
        let key_end = entry.start + entry.key_len as usize;
        let key = &self.bytes[entry.start..key_end];
        let value = &self.bytes[key_end..key_end + entry.value_len as usize];
        Some((key, entry.sequence, entry.kind, value))
    }

    fn clear(&mut self) {
        self.bytes.clear();
        self.entries.clear();
    }

    fn push(&mut self, key: &[u8], sequence: u64, kind: EntryKind, value: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(value);
        // Within u32: a memtable entry's key and value lengths are (`list::List::insert`).
        self.entries.push(CopiedEntry {
            start,
            key_len: key.len() as u32,
            value_len: value.len() as u32,
            sequence,
            kind,
        });
    }
}

/// Sorted entries with their approximate memory footprint.
#[derive(Debug, Default)]
pub struct MemTable {
    entries: list::List,
    /// `chunk_bytes_max`.
    chunk_bytes_max: AtomicUsize,
    /// Entries inserted.
    len: AtomicUsize,
    /// A Bloom filter of its keys (`with_capacity`): a read of a key it does not hold skips
    /// the skiplist search (a tenth of a random read's time).
    filter: Option<KeyFilter>,
    /// Where its batches lie in the backup log, in sequence order (TRIAD-LOG,
    /// `logs`): recorded only when `track_batches` was called.
    batches: Option<std::sync::Mutex<Vec<BatchPosition>>>,
}

/// A Bloom filter over user keys that grows no bigger than it was made: bits set before the
/// entry is inserted, so that a reader that can see an entry sees its bits.
#[derive(Debug)]
struct KeyFilter {
    words: Vec<std::sync::atomic::AtomicU64>,
}

impl KeyFilter {
    const BITS_PER_KEY: usize = 10;
    const PROBES: u64 = 6;

    fn new(keys: usize) -> Self {
        let words = (keys.max(64) * Self::BITS_PER_KEY).div_ceil(64);
        Self { words: (0..words).map(|_| std::sync::atomic::AtomicU64::new(0)).collect() }
    }

    fn bits(&self, key: &[u8]) -> impl Iterator<Item = (usize, u64)> {
        let hash = lds_format::chunk::filter::filter_hash(key);
        let (first, step) = (hash, (hash >> 32) | 1);
        let bits = self.words.len() as u64 * 64;
        (0..Self::PROBES).map(move |probe| {
            let bit = first.wrapping_add(probe.wrapping_mul(step)) % bits;
            ((bit / 64) as usize, 1u64 << (bit % 64))
        })
    }

    fn add(&self, key: &[u8]) {
        for (word, mask) in self.bits(key) {
            self.words[word].fetch_or(mask, Ordering::Relaxed);
        }
    }

    fn may_contain(&self, key: &[u8]) -> bool {
        self.bits(key).all(|(word, mask)| self.words[word].load(Ordering::Relaxed) & mask != 0)
    }
}

/// Where a batch of a memtable's entries lies in the backup log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchPosition {
    /// The sequence number of its first entry.
    pub(crate) first_sequence: u64,
    /// Its entries.
    pub(crate) num_entries: u32,
    /// The object.
    pub(crate) position: lds_format::log::LogPosition,
}

/// Per-entry bytes of the memtable over its key and value, on average (`list`): a
/// skiplist node's header, 4/3 links and alignment.
const ENTRY_OVERHEAD_BYTES: usize = list::mean_entry_bytes(0, 0);

/// At most the bytes an entry takes in the blocks and block index of a chunk (SPEC.md §8.2):
/// its header at its longest (fixed or compact), key and value and, were it alone in its
/// block, the block's trailer and index entry (which repeats the key).
fn chunk_bytes_max(key: &[u8], value: &[u8]) -> usize {
    use lds_format::chunk::block::{BLOCK_TRAILER_LEN, COMPACT_ENTRY_HEADER_MAX_LEN, ENTRY_FIXED_LEN};
    use lds_format::chunk::index::INDEX_ENTRY_FIXED_LEN;
    ENTRY_FIXED_LEN.max(COMPACT_ENTRY_HEADER_MAX_LEN)
        + BLOCK_TRAILER_LEN
        + INDEX_ENTRY_FIXED_LEN
        + 2 * key.len()
        + value.len()
}

impl MemTable {
    /// An empty memtable for about `bytes` of entries, with a filter of its keys sized for
    /// them (more still work, with more false positives).
    pub fn with_capacity(bytes: usize) -> Self {
        let keys = bytes / (ENTRY_OVERHEAD_BYTES + 16);
        Self { filter: Some(KeyFilter::new(keys)), ..Self::default() }
    }

    /// This memtable, recording where its batches lie in the backup log (`record_batch`).
    pub(crate) fn tracking_batches(mut self) -> Self {
        self.batches = Some(std::sync::Mutex::new(Vec::new()));
        self
    }

    /// Records the backup log object holding the entries from `first_sequence` on (their
    /// inserts follow, under the same writer lock); nothing unless it tracks batches.
    pub(crate) fn record_batch(&self, first_sequence: u64, num_entries: usize, position: lds_format::log::LogPosition) {
        if let Some(batches) = &self.batches {
            let mut batches = batches.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let num_entries = u32::try_from(num_entries).unwrap_or(u32::MAX);
            // A batch that joined the object of the one before (SPEC.md §7): one object, its
            // entries indexed from the object's first.
            match batches.last_mut().filter(|last| last.position == position) {
                Some(last) => last.num_entries = last.num_entries.saturating_add(num_entries),
                None => batches.push(BatchPosition { first_sequence, num_entries, position }),
            }
        }
    }

    /// The batches recorded, in sequence order (`None` unless it tracks them).
    pub(crate) fn batches(&self) -> Option<Vec<BatchPosition>> {
        let batches = self.batches.as_ref()?;
        Some(batches.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
    }

    /// The bytes an entry adds to `approximate_bytes`, on average.
    pub fn entry_bytes(key: &[u8], value: &[u8]) -> usize {
        key.len() + value.len() + ENTRY_OVERHEAD_BYTES
    }

    /// Inserts one entry (a second one at the same key and sequence number is ignored: it
    /// could only repeat the first).
    pub fn insert(&self, key: &[u8], sequence: u64, kind: EntryKind, value: &[u8]) {
        if let Some(filter) = &self.filter {
            filter.add(key);
        }
        if self.entries.insert(key, sequence, kind, value) {
            self.chunk_bytes_max.fetch_add(chunk_bytes_max(key, value), Ordering::Relaxed);
            self.len.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The newest version of `key` at or below `snapshot`: its sequence number, kind and value.
    pub fn get(&self, key: &[u8], snapshot: u64) -> Option<(u64, EntryKind, Vec<u8>)> {
        if !self.may_contain(key) {
            return None;
        }
        let found = self.entries.seek(key, snapshot, true)?;
        if found.key() != key {
            return None;
        }
        Some((found.sequence(), found.kind(), found.value().to_vec()))
    }

    /// False when the table holds no version of `key` (its filter says so); true when it may.
    pub(crate) fn may_contain(&self, key: &[u8]) -> bool {
        self.filter.as_ref().is_none_or(|filter| filter.may_contain(key))
    }

    /// Calls `visit` with every entry in internal-key order, borrowed (a flush copies them
    /// straight into chunks).
    pub fn visit(&self, mut visit: impl FnMut(&[u8], u64, EntryKind, &[u8])) {
        let mut node = self.entries.first();
        while let Some(current) = node {
            visit(current.key(), current.sequence(), current.kind(), current.value());
            node = current.successor();
        }
    }

    /// Copies at most `limit` entries from `from` (an internal-key bound) below the user key
    /// `end` into `into` (whose contents they replace, its buffers reused).
    pub(crate) fn batch(&self, from: &Bound<InternalKey>, end: Option<&[u8]>, limit: usize, into: &mut Copied) {
        let mut node = match from {
            Bound::Included((key, sequence)) => self.entries.seek(key, *sequence, true),
            Bound::Excluded((key, sequence)) => self.entries.seek(key, *sequence, false),
            Bound::Unbounded => self.entries.first(),
        };
        into.clear();
        while let Some(current) = node.filter(|_| into.len() < limit) {
            if end.is_some_and(|end| current.key() >= end) {
                break;
            }
            into.push(current.key(), current.sequence(), current.kind(), current.value());
            node = current.successor();
        }
    }

    /// The smallest and largest user keys it holds.
    pub fn key_range(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        let (first, last) = (self.entries.first()?, self.entries.last()?);
        Some((first.key().to_vec(), last.key().to_vec()))
    }

    /// Approximate bytes held: the arena's, less its unused tail.
    pub fn approximate_bytes(&self) -> usize {
        self.entries.used_bytes()
    }

    /// At most the bytes its entries take in the blocks and block indexes of chunks: each as
    /// if alone in its block (`chunk_bytes_max`). The memtable's own bytes are no bound: an
    /// entry takes about 40 bytes over its key and value here, and its key twice in a chunk
    /// where it ends a block.
    pub fn chunk_bytes_max(&self) -> usize {
        self.chunk_bytes_max.load(Ordering::Relaxed)
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.entries.first().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Keys over a small alphabet around the 16-byte head: shared starts, prefixes of one
    /// another, zero bytes against zero padding.
    fn key() -> impl Strategy<Value = Vec<u8>> {
        (0usize..3, proptest::collection::vec(prop_oneof![Just(0u8), Just(1u8), Just(255u8)], 0..6))
            .prop_map(|(shared, tail)| [&b"00000000000000"[..shared * 7], &tail[..]].concat())
    }

    proptest! {
        #[test]
        fn heads_order_entries_as_their_keys_and_sequences_do(
            entries in proptest::collection::vec((key(), 0u64..4), 1..30),
        ) {
            let table = MemTable::default();
            for (key, sequence) in &entries {
                table.insert(key, *sequence, EntryKind::Put, b"");
            }
            let mut expected: Vec<(Vec<u8>, u64)> = entries.clone();
            expected.sort_by(|a, b| lds_format::codec::compare_keys(&a.0, &b.0).then(b.1.cmp(&a.1)));
            expected.dedup();
            let mut found = Vec::new();
            table.visit(|key, sequence, _, _| found.push((key.to_vec(), sequence)));
            prop_assert_eq!(&found, &expected);
            for (key, sequence) in &expected {
                let newest = expected.iter().find(|(other, _)| other == key).map(|entry| entry.1);
                prop_assert_eq!(table.get(key, u64::MAX).map(|found| found.0), newest);
                prop_assert_eq!(table.get(key, *sequence).map(|found| found.0), Some(*sequence));
            }
        }
    }

    #[test]
    fn the_key_filter_never_hides_a_key_and_skips_most_others() {
        let table = MemTable::with_capacity(64 << 10);
        for number in 0..2_000u64 {
            table.insert(format!("key-{number}").as_bytes(), number + 1, EntryKind::Put, b"v");
        }
        for number in 0..2_000u64 {
            assert!(table.get(format!("key-{number}").as_bytes(), u64::MAX).is_some(), "key-{number}");
        }
        let filter = table.filter.as_ref().expect("a filter");
        let passed = (0..10_000).filter(|number| filter.may_contain(format!("other-{number}").as_bytes())).count();
        // Sized for about 560 keys, holding 2,000: still most misses are skipped.
        assert!(passed < 5_000, "{passed} of 10,000 absent keys pass");
        let sized = MemTable::with_capacity(1 << 20);
        for number in 0..2_000u64 {
            sized.insert(format!("key-{number}").as_bytes(), number + 1, EntryKind::Put, b"v");
        }
        let filter = sized.filter.as_ref().expect("a filter");
        let passed = (0..10_000).filter(|number| filter.may_contain(format!("other-{number}").as_bytes())).count();
        assert!(passed < 200, "{passed} of 10,000 absent keys pass a filter of its size");
    }

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
        let from = |key: &[u8]| Bound::Included((key.to_vec(), u64::MAX));
        let mut copied = Copied::default();
        table.batch(&from(b"a"), Some(b"b"), usize::MAX, &mut copied);
        let entries: Vec<_> = (0..copied.len()).filter_map(|at| copied.get(at)).collect();
        assert_eq!(
            entries,
            vec![
                (&b"a"[..], 5, EntryKind::Put, &b"five"[..]),
                (&b"a"[..], 3, EntryKind::Delete, &b""[..]),
                (&b"a"[..], 1, EntryKind::Put, &b"one"[..])
            ]
        );
        table.batch(&from(b"b"), None, usize::MAX, &mut copied);
        assert_eq!(copied.len(), 1);
        assert_eq!(copied.get(0), Some((&b"b"[..], 2, EntryKind::Put, &b"bee"[..])));
        table.batch(&Bound::Excluded((b"a".to_vec(), 5)), None, 2, &mut copied);
        assert_eq!(copied.get(0).map(|entry| entry.1), Some(3));
        assert_eq!(copied.len(), 2);
    }
}
