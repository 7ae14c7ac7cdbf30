//! What readers see: a version, its levels, and, while a journaled compaction is unfinished,
//! the redirection of its searches (SifrDB §4.2, SPEC.md §12): keys at or below the resume
//! key are read from the outputs persisted so far, others from the remaining inputs. Readers
//! hold an `Arc<Published>`; slots a later commit frees wait until no reader holds the one
//! that may read them.

use std::collections::BTreeSet;
use std::sync::Arc;

use lds_format::version::meta::ChunkMeta;
use lds_format::version::payload::CompactionJournal;
use lds_format::version::Version;

use crate::version::levels::Levels;

/// The redirection of an unfinished compaction.
#[derive(Debug, Clone)]
pub(crate) struct Redirect {
    /// The level its outputs go to.
    pub(crate) target_level: u8,
    /// Keys at or below it are in the outputs.
    pub(crate) resume_key: Vec<u8>,
    /// Every input chunk (cleaned or not).
    pub(crate) inputs: BTreeSet<u64>,
    /// Inputs whose slots may already hold something else: never read.
    pub(crate) cleaned: BTreeSet<u64>,
    /// The outputs persisted so far, in key order (disjoint).
    pub(crate) outputs: Vec<ChunkMeta>,
}

impl Redirect {
    /// The redirection the last journal record of a compaction describes.
    pub(crate) fn of(journal: &CompactionJournal) -> Self {
        let mut outputs = journal.outputs.clone();
        outputs.sort_by(|a, b| a.smallest_key.cmp(&b.smallest_key));
        Self {
            target_level: journal.target_level,
            resume_key: journal.resume_key.clone(),
            inputs: journal.inputs.iter().copied().collect(),
            cleaned: journal.cleaned.iter().copied().collect(),
            outputs,
        }
    }

    /// True when `key` is read from the outputs.
    pub(crate) fn to_outputs(&self, key: &[u8]) -> bool {
        key <= self.resume_key.as_slice()
    }
}

/// A version as readers see it.
pub(crate) struct Published {
    pub(crate) version: Arc<Version>,
    pub(crate) levels: Arc<Levels>,
    pub(crate) redirect: Option<Redirect>,
}

impl Published {
    pub(crate) fn new(version: Arc<Version>, redirect: Option<Redirect>) -> Self {
        let levels = Arc::new(Levels::of(&version));
        Self { version, levels, redirect }
    }

    /// The same version with another redirection (after a journal record).
    pub(crate) fn redirected(&self, redirect: Redirect) -> Self {
        Self { version: Arc::clone(&self.version), levels: Arc::clone(&self.levels), redirect: Some(redirect) }
    }

    /// The chunks of `level` that may hold `key`, in the order a lookup searches them (level
    /// 0: every chunk whose range holds the key; deeper levels: the one chunk whose range
    /// holds it), with the redirection of an unfinished compaction applied.
    pub(crate) fn candidates<'a>(&'a self, level: usize, key: &'a [u8]) -> Vec<&'a ChunkMeta> {
        let holds = |chunk: &&ChunkMeta| chunk.smallest_key.as_slice() <= key && key <= chunk.largest_key.as_slice();
        let chunks: &[ChunkMeta] =
            if level == 0 { &self.levels.levels[0] } else { self.levels.starting_at(level, key) };
        let in_level =
            chunks.iter().take_while(|chunk| level == 0 || chunk.smallest_key.as_slice() <= key).filter(holds);
        let Some(redirect) = &self.redirect else { return in_level.collect() };
        let to_outputs = redirect.to_outputs(key);
        let mut found: Vec<&ChunkMeta> = in_level
            .filter(|chunk| {
                let input = redirect.inputs.contains(&chunk.chunk_id);
                !(input && (to_outputs || redirect.cleaned.contains(&chunk.chunk_id)))
            })
            .collect();
        if to_outputs && level == usize::from(redirect.target_level) {
            let first = redirect.outputs.partition_point(|chunk| chunk.largest_key.as_slice() < key);
            found.extend(
                redirect.outputs[first..].iter().take_while(|chunk| chunk.smallest_key.as_slice() <= key).filter(holds),
            );
        }
        found
    }
}
