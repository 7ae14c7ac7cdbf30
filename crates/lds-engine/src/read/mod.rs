//! Reads over a consistent view: the memtables and the version at one moment.

pub(crate) mod get;
pub(crate) mod iter;
pub(crate) mod parallel;

use std::sync::Arc;

use crate::memtable::MemTable;
use crate::state::Shared;
use crate::version::published::Published;

/// What a reader works from: the memtables and version at one moment.
pub(crate) struct View {
    pub(crate) mem: Arc<MemTable>,
    pub(crate) imm: Option<Arc<MemTable>>,
    /// The version and, while a compaction is unfinished, its redirection of reads.
    pub(crate) published: Arc<Published>,
}

pub(crate) fn view(shared: &Shared) -> View {
    let state = shared.lock_state();
    View {
        mem: Arc::clone(&state.mem),
        imm: state.imm.as_ref().map(|frozen| Arc::clone(&frozen.table)),
        published: Arc::clone(&state.published),
    }
}
