//! Reads over a consistent view: the memtables and the version at one moment.

pub(crate) mod get;
pub(crate) mod iter;

use std::sync::Arc;

use lds_format::version::Version;

use crate::memtable::MemTable;
use crate::state::Shared;
use crate::version::levels::Levels;

/// What a reader works from: the memtables and version at one moment.
pub(crate) struct View {
    pub(crate) mem: Arc<MemTable>,
    pub(crate) imm: Option<Arc<MemTable>>,
    pub(crate) version: Arc<Version>,
    pub(crate) levels: Arc<Levels>,
}

pub(crate) fn view(shared: &Shared) -> View {
    let state = shared.lock_state();
    View {
        mem: Arc::clone(&state.mem),
        imm: state.imm.as_ref().map(|frozen| Arc::clone(&frozen.table)),
        version: Arc::clone(&state.version),
        levels: Arc::clone(&state.levels),
    }
}
