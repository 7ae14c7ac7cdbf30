//! Write batches: the atomic unit of `Db::write`, one backup log object (SPEC.md §7).

use lds_format::batch::BatchEntry;
use lds_format::entry::EntryKind;

/// An atomic group of puts and deletes.
#[derive(Debug, Clone, Default)]
pub struct WriteBatch {
    pub(crate) entries: Vec<BatchEntry>,
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        self.entries.push(BatchEntry { kind: EntryKind::Put, key: key.to_vec(), value: value.to_vec() });
        self
    }

    /// Deletes `key`.
    pub fn delete(&mut self, key: &[u8]) -> &mut Self {
        self.entries.push(BatchEntry { kind: EntryKind::Delete, key: key.to_vec(), value: Vec::new() });
        self
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of the batch's backup log payload (SPEC.md §7).
    pub fn encoded_len(&self) -> usize {
        lds_format::batch::entries_encoded_len(&self.entries)
    }
}
