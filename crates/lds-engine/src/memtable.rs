//! The memtable: a concurrent skiplist of entries not yet in chunks, ordered by user key and
//! then newest first (SPEC.md §8.1 order). Writers insert under the engine's write lock;
//! readers search without locks.

use std::borrow::Borrow;
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

/// A position in internal-key order, however it is stored: the skiplist searches by this
/// view, so that a probe borrows the caller's key instead of copying it.
pub(crate) trait KeyView {
    fn user_key(&self) -> &[u8];
    fn sequence(&self) -> u64;
    /// The user key's first 16 bytes, zero-padded, as a big-endian pair of words: ordered as
    /// the keys are where they differ, equal where the keys tie on them.
    fn head(&self) -> (u64, u64) {
        key_head(self.user_key())
    }
}

/// `KeyView::head` of `key`.
fn key_head(key: &[u8]) -> (u64, u64) {
    let mut bytes = [0u8; 16];
    let len = key.len().min(16);
    bytes[..len].copy_from_slice(&key[..len]);
    let (high, low) = bytes.split_at(8);
    let word = |half: &[u8]| half.iter().fold(0u64, |word, &byte| word << 8 | u64::from(byte));
    (word(high), word(low))
}

impl KeyView for InternalKey {
    fn user_key(&self) -> &[u8] {
        &self.0 .0
    }

    fn sequence(&self) -> u64 {
        self.1 .0
    }
}

impl KeyView for (&[u8], u64) {
    fn user_key(&self) -> &[u8] {
        self.0
    }

    fn sequence(&self) -> u64 {
        self.1
    }
}

impl Ord for dyn KeyView + '_ {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // The heads decide most comparisons of a search without loading either key's bytes
        // (a stored key sits in its own allocation, a cache miss per skiplist node).
        self.head()
            .cmp(&other.head())
            .then_with(|| lds_format::codec::compare_keys(self.user_key(), other.user_key()))
            .then_with(|| other.sequence().cmp(&self.sequence()))
    }
}

impl PartialOrd for dyn KeyView + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for dyn KeyView + '_ {}

/// A stored entry: its key and value in one allocation (one allocation and one free per put
/// besides the skiplist node), its sequence number and kind.
#[derive(Debug)]
struct Stored {
    /// `KeyView::head` of the key, kept in the skiplist node.
    head: (u64, u64),
    key_and_value: Box<[u8]>,
    key_len: u32,
    sequence: u64,
    kind: EntryKind,
}

impl Stored {
    fn new(key: &[u8], sequence: u64, kind: EntryKind, value: &[u8]) -> Self {
        let mut key_and_value = Vec::with_capacity(key.len() + value.len());
        key_and_value.extend_from_slice(key);
        key_and_value.extend_from_slice(value);
        // Keys are at most 64 KiB (SPEC.md §7), values fit a batch: the length fits.
        let key_len = u32::try_from(key.len()).unwrap_or(u32::MAX);
        Self { head: key_head(key), key_and_value: key_and_value.into_boxed_slice(), key_len, sequence, kind }
    }

    fn key(&self) -> &[u8] {
        &self.key_and_value[..self.key_len as usize]
    }

    fn value(&self) -> &[u8] {
        &self.key_and_value[self.key_len as usize..]
    }

    fn owned(&self) -> Entry {
        (self.key().to_vec(), self.sequence, self.kind, self.value().to_vec())
    }
}

impl KeyView for Stored {
    fn user_key(&self) -> &[u8] {
        self.key()
    }

    fn sequence(&self) -> u64 {
        self.sequence
    }

    fn head(&self) -> (u64, u64) {
        self.head
    }
}

impl<'a> Borrow<dyn KeyView + 'a> for Stored {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

impl Ord for Stored {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self as &dyn KeyView).cmp(other as &dyn KeyView)
    }
}

impl PartialOrd for Stored {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Stored {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Stored {}

/// Sorted entries with their approximate memory footprint.
#[derive(Debug, Default)]
pub struct MemTable {
    entries: SkipMap<Stored, ()>,
    bytes: AtomicUsize,
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
        let hash = lds_format::chunk::filter_hash(key);
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
    pub(crate) position: lds_format::logref::LogPosition,
}

/// Per-entry bookkeeping counted in `approximate_bytes`: the skiplist node (the `Stored`
/// header, its reference count and height, a tower of 1.33 links on average) and the
/// allocator's headers and rounding of the node and of the key-and-value allocation.
/// Measured with a counting allocator (glibc's 8-byte header, 16-byte rounding): 100 bytes
/// per entry over its key and value, for 100,000 entries of 16-byte keys and 1 to 200-byte
/// values (84 before the node kept the key's 16-byte head; 133 with a key and a value
/// allocated apart).
const ENTRY_OVERHEAD_BYTES: usize = 100;

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
    pub(crate) fn record_batch(
        &self,
        first_sequence: u64,
        num_entries: usize,
        position: lds_format::logref::LogPosition,
    ) {
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

    /// The bytes an entry adds to `approximate_bytes`.
    pub fn entry_bytes(key: &[u8], value: &[u8]) -> usize {
        key.len() + value.len() + ENTRY_OVERHEAD_BYTES
    }

    /// Inserts one entry.
    pub fn insert(&self, key: &[u8], sequence: u64, kind: EntryKind, value: &[u8]) {
        self.bytes.fetch_add(Self::entry_bytes(key, value), Ordering::Relaxed);
        if let Some(filter) = &self.filter {
            filter.add(key);
        }
        self.entries.insert(Stored::new(key, sequence, kind, value), ());
    }

    /// The newest version of `key` at or below `snapshot`: its sequence number, kind and value.
    pub fn get(&self, key: &[u8], snapshot: u64) -> Option<(u64, EntryKind, Vec<u8>)> {
        if !self.may_contain(key) {
            return None;
        }
        let probe = (key, snapshot);
        let entry = self.entries.lower_bound(Bound::Included(&probe as &dyn KeyView))?;
        let found = entry.key();
        if found.key() != key {
            return None;
        }
        Some((found.sequence, found.kind, found.value().to_vec()))
    }

    /// False when the table holds no version of `key` (its filter says so); true when it may.
    pub(crate) fn may_contain(&self, key: &[u8]) -> bool {
        self.filter.as_ref().is_none_or(|filter| filter.may_contain(key))
    }

    /// Calls `visit` with every entry in internal-key order, borrowed (a flush copies them
    /// straight into chunks).
    pub fn visit(&self, mut visit: impl FnMut(&[u8], u64, EntryKind, &[u8])) {
        for entry in self.entries.iter() {
            let stored = entry.key();
            visit(stored.key(), stored.sequence, stored.kind, stored.value());
        }
    }

    /// At most `limit` entries from `from` (an internal-key bound) below the user key `end`.
    pub fn batch(&self, from: &Bound<InternalKey>, end: Option<&[u8]>, limit: usize) -> Vec<Entry> {
        let from: Bound<&dyn KeyView> = match from {
            Bound::Included(key) => Bound::Included(key),
            Bound::Excluded(key) => Bound::Excluded(key),
            Bound::Unbounded => Bound::Unbounded,
        };
        self.entries
            .range::<dyn KeyView, _>((from, Bound::Unbounded))
            .take_while(|entry| end.is_none_or(|end| entry.key().key() < end))
            .take(limit)
            .map(|entry| entry.key().owned())
            .collect()
    }

    /// The smallest and largest user keys it holds.
    pub fn key_range(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        let (first, last) = (self.entries.front()?, self.entries.back()?);
        Some((first.key().key().to_vec(), last.key().key().to_vec()))
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
