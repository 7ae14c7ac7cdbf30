//! Scheduling the background work: one thread (or, with `Options::background` false, the
//! writing thread, inline) flushes frozen memtables and runs compactions, one step at a time.
//! It decides what runs; `flush` and `compaction` do the work.

use std::sync::{Arc, MutexGuard};
use std::thread::JoinHandle;

use crate::compaction::pick::{choose, Choice, Limits};
use crate::error::Error;
use crate::state::{Shared, TreeState};

/// Starts the thread.
pub(crate) fn spawn(shared: Arc<Shared>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("lds-background".into()).spawn(move || run(&shared))
}

/// True when a compaction should run now.
pub(crate) fn compaction_wanted(shared: &Shared, state: &TreeState) -> bool {
    next_choice(shared, state) != Choice::DoNothing
}

/// The next compaction: a step of a manual compaction first, then whatever is over its
/// limit.
fn next_choice(shared: &Shared, state: &TreeState) -> Choice {
    if state.compaction_stalled {
        return Choice::DoNothing;
    }
    let limits = Limits::new(&shared.options, shared.geometry.slot_size);
    choose(&state.version, &limits, state.manual_compaction, shared.geometry.slot_size)
}

/// One unit of background work: flush the frozen memtable, or run one compaction. Returns
/// the state lock again and whether anything was done.
pub(crate) fn step<'a>(shared: &'a Shared, mut state: MutexGuard<'a, TreeState>) -> (MutexGuard<'a, TreeState>, bool) {
    if state.poisoned.is_some() {
        return (state, false);
    }
    if let Some(frozen) = state.imm.as_ref().filter(|_| !state.space_full) {
        let table = Arc::clone(&frozen.table);
        let (backup_start, last_sequence) = (frozen.backup_start, frozen.last_sequence);
        drop(state);
        let result = crate::flush::flush_frozen(shared, &table, backup_start, last_sequence);
        state = shared.lock_state();
        match result {
            Ok(()) => {
                state.imm = None;
                state.backup_start_update = Some(backup_start);
            }
            Err(Error::SpaceFull { .. }) => state.space_full = true,
            Err(error) => {
                shared.poison(&mut state, error);
            }
        }
        shared.progress.notify_all();
        return (state, true);
    }
    if state.shutting_down {
        return (state, false);
    }
    let choice = next_choice(shared, &state);
    if let Choice::Move(plan) | Choice::Merge(plan) = &choice {
        drop(state);
        let result = crate::compaction::run(shared, &choice);
        state = shared.lock_state();
        match result {
            Ok(()) if plan.manual => state.manual_compaction = Some(plan.source_level + 1),
            Ok(()) => {}
            Err(Error::SpaceFull { .. }) => {
                state.compaction_stalled = true;
                state.manual_compaction = None;
            }
            Err(error) => {
                shared.poison(&mut state, error);
            }
        }
        shared.progress.notify_all();
        return (state, true);
    }
    if state.manual_compaction.take().is_some() {
        shared.progress.notify_all();
    }
    (state, false)
}

/// Runs every step there is to do, in the calling thread (`Options::background` false).
pub(crate) fn run_inline<'a>(shared: &'a Shared, mut state: MutexGuard<'a, TreeState>) -> MutexGuard<'a, TreeState> {
    // Bounded by the work there is: each step flushes the frozen memtable or commits one
    // compaction, and compactions stop once every level is within its limits (a failed step
    // poisons the store or stalls compaction, and ends the loop).
    loop {
        let (guard, worked) = step(shared, state);
        state = guard;
        if !worked {
            return state;
        }
    }
}

fn run(shared: &Shared) {
    let mut state = shared.lock_state();
    // Runs until the store closes or is poisoned; an idle round waits at most
    // LOG_BUFFER_AGE_MAX.
    loop {
        if state.poisoned.is_some() {
            return;
        }
        let (guard, worked) = step(shared, state);
        state = guard;
        if worked {
            continue;
        }
        if state.shutting_down {
            return;
        }
        let (guard, waited) =
            shared.work.wait_timeout(state, LOG_BUFFER_AGE_MAX).unwrap_or_else(std::sync::PoisonError::into_inner);
        state = guard;
        if waited.timed_out() {
            // Idle: write out gathered backup log appends (lock order: writer, then state).
            drop(state);
            let drained = match shared.writer.try_lock() {
                Ok(mut writer) => writer.drain(shared.device.as_ref()),
                Err(_) => Ok(()),
            };
            state = shared.lock_state();
            if let Err(error) = drained {
                shared.poison(&mut state, error.into());
            }
        }
    }
}

/// Gathered unsynced appends reach the device at least this often.
const LOG_BUFFER_AGE_MAX: std::time::Duration = std::time::Duration::from_millis(100);
