//! What a fix drops, in words and as ranges of entries (docs/reliability.md I10): every
//! entry repair leaves out that `lds salvage` of the damaged volume may still read is named
//! by a [`Lost`] range of one of the fixes, so that an oracle can tell a reported drop from a
//! silent loss.

use lds_format::codec::display_key;
use lds_format::entry::Entry;
use lds_format::version::meta::ChunkMeta;

/// The lower end of a key range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyFrom {
    /// From the first key.
    First,
    /// From this key, inclusive.
    Key(Vec<u8>),
    /// After this key (a damaged stretch of a chunk after the last key read).
    After(Vec<u8>),
}

/// Entries of one instance that a fix drops: those whose key lies in the key range and whose
/// sequence number lies in the sequence range (both inclusive, but for [`KeyFrom::After`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    /// The instance.
    pub instance: u32,
    /// The lower end of the key range.
    pub from: KeyFrom,
    /// The upper end of the key range, inclusive; `None`: to the last key.
    pub through: Option<Vec<u8>>,
    /// The smallest sequence number.
    pub smallest_seq: u64,
    /// The largest sequence number.
    pub largest_seq: u64,
}

impl Lost {
    /// Every entry of `instance` with a sequence number in `smallest_seq..=largest_seq`.
    pub fn sequences(instance: u32, smallest_seq: u64, largest_seq: u64) -> Self {
        Self { instance, from: KeyFrom::First, through: None, smallest_seq, largest_seq }
    }

    /// One entry.
    pub fn entry(instance: u32, key: &[u8], sequence: u64) -> Self {
        Self {
            instance,
            from: KeyFrom::Key(key.to_vec()),
            through: Some(key.to_vec()),
            smallest_seq: sequence,
            largest_seq: sequence,
        }
    }

    /// The key and sequence ranges a chunk's metadata gives.
    pub fn chunk(instance: u32, meta: &ChunkMeta) -> Self {
        Self {
            instance,
            from: KeyFrom::Key(meta.smallest_key.clone()),
            through: Some(meta.largest_key.clone()),
            smallest_seq: meta.smallest_seq,
            largest_seq: meta.largest_seq.max(meta.smallest_seq),
        }
    }

    /// Whether the entry (`key`, `sequence`) of `instance` is in the range.
    pub fn covers(&self, instance: u32, key: &[u8], sequence: u64) -> bool {
        self.covers_key(instance, key) && (self.smallest_seq..=self.largest_seq).contains(&sequence)
    }

    /// Whether the range drops an entry of `key` of `instance` at `sequence` or a newer one:
    /// a newer entry of the key dropped means the value the repaired volume lacks is that
    /// newer one's, whatever older copy of the same bytes salvage also read.
    pub fn covers_at_or_after(&self, instance: u32, key: &[u8], sequence: u64) -> bool {
        self.covers_key(instance, key) && self.largest_seq >= sequence
    }

    fn covers_key(&self, instance: u32, key: &[u8]) -> bool {
        let above = match &self.from {
            KeyFrom::First => true,
            KeyFrom::Key(from) => key >= from.as_slice(),
            KeyFrom::After(after) => key > after.as_slice(),
        };
        let below = self.through.as_ref().is_none_or(|through| key <= through.as_slice());
        instance == self.instance && above && below
    }
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let from = match &self.from {
            KeyFrom::First => "the first key".to_string(),
            KeyFrom::Key(key) => display_key(key),
            KeyFrom::After(key) => format!("after {}", display_key(key)),
        };
        let through = self.through.as_deref().map_or("the last key".to_string(), display_key);
        write!(
            f,
            "instance {} keys {from} to {through}, sequences {} to {}",
            self.instance, self.smallest_seq, self.largest_seq
        )
    }
}

/// One thing a fix drops: what it is, in words, and the entries it covers (none for what
/// holds no entries, such as a log object past the damage whose data is kept elsewhere).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dropped {
    /// What, in words (keys or key ranges, sequence ranges, chunks, log objects, and why).
    pub what: String,
    /// The entries it covers.
    pub lost: Vec<Lost>,
}

impl Dropped {
    /// A drop in words, covering `lost`.
    pub fn new(what: impl Into<String>, lost: Vec<Lost>) -> Self {
        Self { what: what.into(), lost }
    }

    /// A drop of one entry, described with `why`.
    pub fn entry(instance: u32, entry: &Entry, why: &str) -> Self {
        Self::new(
            format!("key {} (sequence {}): {why}", display_key(&entry.key), entry.sequence),
            vec![Lost::entry(instance, &entry.key, entry.sequence)],
        )
    }

    /// The same drop, its words prefixed (`chunk 7: ...`).
    pub fn prefixed(self, prefix: &str) -> Self {
        Self { what: format!("{prefix}{}", self.what), lost: self.lost }
    }
}

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_covers_exactly_its_keys_sequences_and_instance() {
        let lost = Lost {
            instance: 1,
            from: KeyFrom::After(b"b".to_vec()),
            through: Some(b"d".to_vec()),
            smallest_seq: 10,
            largest_seq: 20,
        };
        assert!(lost.covers(1, b"c", 10));
        assert!(lost.covers(1, b"d", 20));
        assert!(!lost.covers(1, b"b", 15), "after b excludes b");
        assert!(!lost.covers(1, b"da", 15));
        assert!(!lost.covers(1, b"c", 9));
        assert!(!lost.covers(1, b"c", 21));
        assert!(!lost.covers(0, b"c", 15));
        let from = Lost { from: KeyFrom::Key(b"b".to_vec()), ..lost.clone() };
        assert!(from.covers(1, b"b", 15));
        let every = Lost::sequences(1, 5, 5);
        assert!(every.covers(1, b"", 5) && every.covers(1, b"zzz", 5));
        assert!(!every.covers(1, b"a", 6));
        let one = Lost::entry(0, b"k", 7);
        assert!(one.covers(0, b"k", 7));
        assert!(!one.covers(0, b"k", 8) && !one.covers(0, b"j", 7));
    }
}
