//! Scheduling the background work: one thread (or, with `Options::background` false, the
//! writing thread, inline) flushes frozen memtables and runs compactions, one step at a time.
//! It decides what runs; `flush` and `compaction` do the work.

use std::sync::{Arc, MutexGuard};
use std::thread::JoinHandle;

use lds_format::version::payload::CompactionJournal;

use crate::compaction::merge::Merger;
use crate::compaction::pick::{choose, Choice, Limits, Plan};
use crate::error::{Error, Result};
use crate::state::{Shared, TreeState};
use crate::table::build::chunk_format;

/// Starts the thread.
pub(crate) fn spawn(shared: Arc<Shared>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("lds-background".into()).spawn(move || run(&shared))
}

/// True when a compaction should run now.
pub(crate) fn compaction_wanted(shared: &Shared, state: &TreeState) -> bool {
    !state.compaction_stalled
        && (state.merging || state.resume.is_some() || next_choice(shared, state) != Choice::DoNothing)
}

/// The next compaction: a step of a manual compaction first, then whatever is over its
/// limit.
fn next_choice(shared: &Shared, state: &TreeState) -> Choice {
    if state.compaction_stalled {
        return Choice::DoNothing;
    }
    // Size-tiered compaction replaces the leveled choice (`compaction::tiered`).
    let threshold = shared.options.size_tiered_threshold;
    if threshold > 0 {
        return crate::compaction::tiered::pick(state.version(), threshold, state.manual_compaction.is_some())
            .map_or(Choice::DoNothing, Choice::Merge);
    }
    // The split forest replaces it too (`compaction::forest`).
    if shared.options.forest_fanout > 0 {
        return crate::compaction::forest::choose(
            state.version(),
            shared.options.forest_fanout,
            shared.options.level0_compaction_trigger,
            shared.geometry.slot_size * u64::from(shared.options.forest_move_min_percent.min(100)) / 100,
            state.manual_compaction.is_some(),
        );
    }
    let mut limits = Limits::new(&shared.options, shared.geometry.slot_size);
    // The retained region of the backup log leaves too little room (TRIAD-LOG): level 0
    // merges now, waiting for nothing (`crate::logs::pressure`).
    limits.level0_urgent = crate::logs::pressure(shared, state);
    limits.level0_deferred = !limits.level0_urgent
        && crate::compaction::defer::level0_deferred(&shared.options, state.version(), &state.level0_sketches);
    let walks = |level: u8| {
        shared
            .counters
            .level_walks
            .get(usize::from(level))
            .map_or(0, |walks| walks.load(std::sync::atomic::Ordering::Relaxed))
    };
    limits.level0_streaming = streaming(shared, state);
    // Level 0 whenever it is not deferred; the levels below it once writes are quiet.
    let version = state.version();
    let levels = if writes_quiet(shared, state) { version.num_levels.min(32) as u8 } else { 1 };
    for level in u8::from(limits.level0_deferred)..levels {
        if crate::compaction::pick::read_triggered(version, level, walks(level)) {
            limits.read_triggered |= 1 << level;
        }
    }
    // Value chunks are collected only where new ones are written (separation on).
    let gc = shared.value_separation_min.map(|_| shared.options.value_gc_live_percent);
    choose(state.version(), &limits, state.manual_compaction, shared.geometry.slot_size, gc)
}

/// True while writes stream in: the background thread flushed a memtable less than
/// `STREAM_WINDOW` ago. Level 0 then merges at twice its trigger, below the count that stops
/// writes (`Limits::level0_streaming`): a level-0 merge of random keys rewrites every chunk of
/// the level below, so taking 8 chunks at a time rather than 4 halves those rewrites (500,000
/// random puts: write amplification 3.30 -> 2.52). Once the stream pauses the idle thread,
/// which looks again every `LOG_BUFFER_AGE_MAX`, merges at the trigger, so that reads after
/// the writes find level 0 as short as without it. Writing threads that run the work inline
/// (`Options::background` false) keep the trigger: their merges happen at points the tests
/// and the crash simulator fix. So do TRIAD-LOG (level-0 chunks hold the backup log, and log
/// pressure times their merges) and TRIAD-DISK (which defers level 0 by the overlap of its
/// chunks).
fn streaming(shared: &Shared, state: &TreeState) -> bool {
    shared.options.background
        && !shared.log_tables
        && shared.options.level0_overlap_min.is_none()
        && state.last_flush.is_some_and(|at| at.elapsed() < STREAM_WINDOW)
}

/// True when the background thread has flushed no memtable for `QUIET_WINDOW`: the store
/// reads more than it writes, and a level below level 0 that reads walk often merges
/// down (`Limits::read_triggered`) rather than fill again at once. Inline work
/// (`Options::background` false) never counts as quiet: its merges stay where the tests and
/// the crash simulator fix them.
fn writes_quiet(shared: &Shared, state: &TreeState) -> bool {
    shared.options.background && state.last_flush.is_none_or(|at| at.elapsed() >= QUIET_WINDOW)
}

/// See `writes_quiet`.
const QUIET_WINDOW: std::time::Duration = std::time::Duration::from_secs(1);

/// See `streaming`: at the rate of a fast stream of small puts, 4 MiB memtables fill every
/// 50 ms.
const STREAM_WINDOW: std::time::Duration = std::time::Duration::from_millis(200);

/// An upper bound of the delta version a flush of the frozen memtable commits.
fn flush_delta_estimate(shared: &Shared, state: &TreeState) -> usize {
    // Blocks and indexes at their largest, and filters of `bloom_bits_per_key` per key.
    let bits_per_key = shared.options.bloom_bits_per_key as usize;
    let bytes = state
        .imm
        .as_ref()
        .map_or(0, |frozen| frozen.table.chunk_bytes_max() + (frozen.table.len() * bits_per_key).div_ceil(8))
        as u64;
    let chunks = (bytes / shared.geometry.slot_size + 2) as usize;
    48 + chunks * (48 + 40 + 2 * (2 + usize::from(u16::MAX).min(1024)))
}

/// Runs the unfinished merge (in progress, or left by a crash) to its end: a base version may
/// follow, which cannot happen while it is unfinished. Bounded by the merge's inputs.
pub(crate) fn finish_merge(shared: &Shared) -> Result<()> {
    loop {
        let resume = {
            let mut state = shared.lock_state();
            if !state.merging && state.resume.is_none() {
                return Ok(());
            }
            state.resume.take()
        };
        if merge_step(shared, None, resume)?.is_some() {
            return Ok(());
        }
    }
}

/// What a finished merge was, for a manual compaction to go on from.
struct Finished {
    manual: bool,
    source_level: u8,
}

/// Runs one step of the merge in progress, starting it from `plan` or from the journal record
/// of an unfinished compaction first when there is none; `Some` when the merge finished.
fn merge_step(shared: &Shared, plan: Option<&Plan>, resume: Option<CompactionJournal>) -> Result<Option<Finished>> {
    let mut slot = shared.merger.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if slot.is_none() {
        if let Some(plan) = plan {
            *slot = Some(crate::compact::start(shared, plan)?);
        } else if let Some(journal) = resume {
            let version = Arc::clone(shared.lock_state().version());
            let format = chunk_format(&shared.geometry, shared.instance, &shared.options, shared.encoding);
            let forest = (shared.options.forest_fanout > 0).then_some(shared.options.forest_fanout);
            let mut merger = Merger::resume(&journal, &version, shared.smallest_snapshot(), format, forest)?;
            crate::compact::read_log_region(shared, &mut merger, &version)?;
            *slot = Some(merger);
            shared.lock_state().merging = true;
        }
    }
    let Some(merger) = slot.as_mut() else { return Ok(None) };
    match crate::compact::step(shared, merger) {
        Ok(false) => return Ok(None),
        Ok(true) => {}
        Err(error) => {
            // An unjournaled merge that failed (no free slot, say) is given up: its outputs
            // so far are freed and a later merge starts from the version, which still holds
            // every input. A journaled one goes on from where it stopped (its record names
            // the outputs it cleaned inputs for).
            if let Some(merger) = slot.take_if(|merger| !merger.journaled()) {
                crate::compact::abandon(shared, merger);
            }
            return Err(error);
        }
    }
    let finished = Finished { manual: merger.manual, source_level: merger.source_level };
    crate::compact::keep_log_region_buffer(shared, merger);
    *slot = None;
    Ok(Some(finished))
}

/// One unit of background work: flush the frozen memtable, or run one compaction step (a
/// trivial move, a whole unjournaled merge, or one journaled step). Returns the state lock
/// again and whether anything was done.
pub(crate) fn step<'a>(shared: &'a Shared, mut state: MutexGuard<'a, TreeState>) -> (MutexGuard<'a, TreeState>, bool) {
    if state.poisoned.is_some() {
        return (state, false);
    }
    // While a journaled compaction is unfinished no trim may happen (SPEC.md §10.3): a flush
    // whose delta version would leave too little room waits for the compaction to finish.
    let flush_waits = state.last_journal.is_some() && {
        let estimate = flush_delta_estimate(shared, &state);
        !crate::commit::room_for(shared, &state, &[estimate, state.merge_delta_reserve])
    };
    if let Some(frozen) = state.imm.as_ref().filter(|_| !state.space_full && !flush_waits) {
        let table = Arc::clone(&frozen.table);
        let (backup_start, last_sequence) = (frozen.backup_start, frozen.last_sequence);
        let held = frozen.held.clone();
        // TRIAD-LOG: a log chunk while the ring has room to retain its part (`crate::logs`).
        let log_chunk = crate::logs::log_chunk_wanted(shared, &state, frozen);
        unlock_dropping_freed_pages(shared, state);
        let result = crate::flush::flush_frozen(shared, &table, &held, backup_start, last_sequence, log_chunk);
        state = shared.lock_state();
        match result {
            // The commit moved the backup start and the writer's live region with it
            // (`crate::logs::after_commit`).
            Ok(()) => {
                state.imm = None;
                state.last_flush = Some(std::time::Instant::now());
            }
            Err(Error::SpaceFull { .. }) => state.space_full = true,
            Err(error) => {
                shared.poison(&mut state, error);
            }
        }
        shared.progress.notify_all();
        return (state, true);
    }
    if state.shutting_down || state.compaction_stalled {
        return (state, false);
    }
    // A merge in progress, or one to resume, goes on before anything new starts.
    let mut choice =
        if state.merging || state.resume.is_some() { Choice::DoNothing } else { next_choice(shared, &state) };
    // The split forest's stages need every level the format has: the version gets them by a
    // base version before its first compaction (not at open: recovery writes nothing).
    if shared.options.forest_fanout > 0 && choice != Choice::DoNothing {
        let levels = crate::compaction::forest::levels_wanted(shared.options.forest_fanout);
        if state.version().num_levels < levels {
            if let Err(error) = crate::commit::grow_levels(shared, &mut state, levels) {
                shared.poison(&mut state, error);
                return (state, true);
            }
            choice = next_choice(shared, &state);
        }
    }
    if matches!(&choice, Choice::Merge(plan) if plan.source_level == 0) && crate::logs::pressure(shared, &state) {
        shared.counters.log_pressure_merges.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    let resume = state.resume.take();
    let working = state.merging || resume.is_some() || choice != Choice::DoNothing;
    if !working {
        if state.manual_compaction.take().is_some() {
            shared.progress.notify_all();
        }
        return (state, false);
    }
    unlock_dropping_freed_pages(shared, state);
    let result = match &choice {
        Choice::Move(plan) => crate::compact::trivial_move(shared, plan)
            .map(|()| Some(Finished { manual: plan.manual, source_level: plan.source_level })),
        Choice::Merge(plan) => merge_step(shared, Some(plan), None),
        Choice::DoNothing => merge_step(shared, None, resume),
    };
    state = shared.lock_state();
    match result {
        Ok(Some(finished)) if finished.manual => state.manual_compaction = Some(finished.source_level + 1),
        Ok(_) => {}
        Err(Error::SpaceFull { .. }) => {
            state.compaction_stalled = true;
            state.manual_compaction = None;
        }
        Err(error) => {
            shared.poison(&mut state, error);
        }
    }
    shared.progress.notify_all();
    (state, true)
}

/// Unlocks the state, then tells the device that the slots freed since the last call hold
/// nothing anyone reads (outside the state lock: a call per slot). Their pages leave the page cache, so the next chunks written take pages
/// just freed instead of growing the cache over the whole device as threaded logging moves
/// on: perf had the kernel's copy into newly allocated page-cache pages at 29% of the
/// background thread's samples in overwrite. A slot taken again meanwhile loses nothing: the
/// hint drops clean pages only.
fn unlock_dropping_freed_pages(shared: &Shared, mut state: MutexGuard<'_, TreeState>) {
    let slots = std::mem::take(&mut state.uncached);
    drop(state);
    for slot in slots {
        shared.device.drop_cached(shared.geometry.slot_offset(slot), shared.geometry.slot_size);
    }
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
    // Work done since the worker was last idle for a round: the memory it freed goes back
    // to the system then (`heap`).
    let mut busy = false;
    // Runs until the store closes or is poisoned; an idle round waits at most
    // LOG_BUFFER_AGE_MAX.
    loop {
        if state.poisoned.is_some() {
            return;
        }
        let (guard, worked) = step(shared, state);
        state = guard;
        if worked {
            busy = true;
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
            // Idle for a whole round after work: not between the flushes of a stream of
            // writes, where the memory would be taken again at once.
            if std::mem::take(&mut busy) {
                crate::heap::release_free_memory();
            }
            state = shared.lock_state();
            if let Err(error) = drained {
                shared.poison(&mut state, error.into());
            }
        }
    }
}

/// Gathered unsynced appends reach the device at least this often.
const LOG_BUFFER_AGE_MAX: std::time::Duration = std::time::Duration::from_millis(100);
