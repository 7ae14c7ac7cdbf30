//! Entries, the unit of every key's history (SPEC.md §7, §8.2): their kinds, the sequence
//! numbers they carry, the `seq_kind` tag that packs the two, and the internal-key order
//! every block, index and merge keeps. The shape a kind's value must have is checked by the
//! structure that defines it (`value::is_pointer_shaped`, `logref::is_log_ref_shaped`).

use crate::codec::compare_keys;

/// Largest sequence number (SPEC.md §16: 56 bits).
pub const SEQUENCE_MAX: u64 = (1 << 56) - 1;

/// Whether an entry sets or deletes a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntryKind {
    /// A tombstone.
    Delete,
    /// A value.
    Put,
    /// A value in value chunks: the entry's value is a value pointer (SPEC.md §8.6, format
    /// 1.4, feature `value_chunks`).
    Pointer,
    /// A put whose value stays in the backup log: the entry's value is a log reference
    /// (SPEC.md §8.9, format 1.6, feature `log_tables`). Only in blocks of log chunks, never
    /// in a write batch.
    LogRef,
}

impl EntryKind {
    /// The on-disk code: 1 put, 0 delete, 2 pointer, 3 log reference.
    pub fn code(self) -> u8 {
        match self {
            Self::Delete => 0,
            Self::Put => 1,
            Self::Pointer => 2,
            Self::LogRef => 3,
        }
    }

    /// The kind for a code.
    pub fn from_code(code: u8) -> Option<Self> {
        match code {
            0 => Some(Self::Delete),
            1 => Some(Self::Put),
            2 => Some(Self::Pointer),
            3 => Some(Self::LogRef),
            _ => None,
        }
    }

    /// `put`, `delete`, `pointer` or `log_ref`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Delete => "delete",
            Self::Put => "put",
            Self::Pointer => "pointer",
            Self::LogRef => "log_ref",
        }
    }

    /// True for a put, a pointer or a log reference: the key has a value (inline, in value
    /// chunks or in the backup log).
    pub fn has_value(self) -> bool {
        self != Self::Delete
    }
}

/// Packs a sequence number and kind (SPEC.md §8.2).
pub fn pack_seq_kind(sequence: u64, kind: EntryKind) -> u64 {
    (sequence << 8) | u64::from(kind.code())
}

/// Unpacks `seq_kind`.
pub fn unpack_seq_kind(seq_kind: u64) -> Option<(u64, EntryKind)> {
    let kind = EntryKind::from_code((seq_kind & 0xff) as u8)?;
    Some((seq_kind >> 8, kind))
}

/// Orders internal keys: user key ascending, then `seq_kind` descending (newest first).
pub fn compare_internal(key_a: &[u8], seq_kind_a: u64, key_b: &[u8], seq_kind_b: u64) -> std::cmp::Ordering {
    compare_keys(key_a, key_b).then(seq_kind_b.cmp(&seq_kind_a))
}

/// An entry that owns its key and value: what salvage and repair keep of a block whose
/// checksum holds, ordered as in a chunk by [`Entry::cmp_internal`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// User key.
    pub key: Vec<u8>,
    /// Sequence number.
    pub sequence: u64,
    /// Put or delete.
    pub kind: EntryKind,
    /// Value (empty for a delete).
    pub value: Vec<u8>,
}

impl Entry {
    /// Orders entries as in a chunk: key ascending, newest version first.
    pub fn cmp_internal(&self, other: &Self) -> std::cmp::Ordering {
        compare_internal(
            &self.key,
            pack_seq_kind(self.sequence, self.kind),
            &other.key,
            pack_seq_kind(other.sequence, other.kind),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seq_kind_holds_every_kind_and_the_largest_sequence() {
        for kind in [EntryKind::Delete, EntryKind::Put, EntryKind::Pointer, EntryKind::LogRef] {
            for sequence in [0, 1, 255, 256, SEQUENCE_MAX] {
                assert_eq!(unpack_seq_kind(pack_seq_kind(sequence, kind)), Some((sequence, kind)), "{kind:?}");
            }
            assert_eq!(EntryKind::from_code(kind.code()), Some(kind));
        }
        assert_eq!(unpack_seq_kind((7 << 8) | 4), None, "kind 4 is no kind");
        assert_eq!(EntryKind::from_code(4), None);
    }

    #[test]
    fn internal_keys_sort_by_key_then_newest_first() {
        let at = |sequence, kind| pack_seq_kind(sequence, kind);
        assert!(compare_internal(b"a", at(1, EntryKind::Put), b"b", at(9, EntryKind::Put)).is_lt());
        assert!(compare_internal(b"a", at(9, EntryKind::Put), b"a", at(1, EntryKind::Put)).is_lt());
        // At one sequence number the larger kind code comes first (`seq_kind` descends).
        assert!(compare_internal(b"a", at(5, EntryKind::Pointer), b"a", at(5, EntryKind::Put)).is_lt());
        assert!(compare_internal(b"a", at(5, EntryKind::Put), b"a", at(5, EntryKind::Put)).is_eq());
    }
}
