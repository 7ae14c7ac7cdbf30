//! Reproducer minimization for `lds crashtest`: delta debugging over a failing workload. It
//! drops chunks of operations (halving the chunk size when no chunk can go), then single
//! operations, then shrinks what is left (entries of batches, then values), keeping each
//! change only while the failure remains. A budget bounds the candidates tried and the time
//! spent: each candidate is a whole run and, when it passes, a whole enumeration.

use std::time::{Duration, Instant};

use crate::enumerate::{first_failure, Bounds, Failure};
use crate::workload::{formatted_image, run, Op, Workload};

/// How much minimization may do.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    /// Candidates tried at most.
    pub tries_max: u64,
    /// Time spent at most (a candidate already started finishes).
    pub time_max: Option<Duration>,
}

impl Budget {
    /// At most `tries_max` candidates, with no time limit.
    pub fn tries(tries_max: u64) -> Self {
        Self { tries_max, time_max: None }
    }
}

/// Where minimization stands, after each candidate.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Candidates tried.
    pub tries: u64,
    /// Operations of the smallest failing workload so far.
    pub operations: usize,
    /// Time spent.
    pub elapsed: Duration,
}

/// A minimized workload.
#[derive(Debug, Clone)]
pub struct Shrunk {
    /// The smallest failing workload found.
    pub workload: Workload,
    /// Candidates tried.
    pub tries: u64,
    /// The budget ran out before the last pass finished.
    pub budget_exhausted: bool,
}

struct Shrinker<'a> {
    fails: &'a mut dyn FnMut(&Workload) -> bool,
    name: String,
    tries: u64,
    budget: Budget,
    started: Instant,
    smallest: usize,
    progress: &'a mut dyn FnMut(Progress),
}

impl Shrinker<'_> {
    /// Tries a candidate within the budget.
    fn fails(&mut self, ops: &[Op]) -> bool {
        if self.exhausted() || ops.is_empty() {
            return false;
        }
        self.tries += 1;
        let failed = (self.fails)(&Workload { name: self.name.clone(), ops: ops.to_vec() });
        if failed {
            self.smallest = self.smallest.min(ops.len());
        }
        (self.progress)(Progress { tries: self.tries, operations: self.smallest, elapsed: self.started.elapsed() });
        failed
    }

    fn exhausted(&self) -> bool {
        self.tries >= self.budget.tries_max
            || self.budget.time_max.is_some_and(|time_max| self.started.elapsed() >= time_max)
    }

    /// Delta debugging: remove chunks, from halves down to single operations.
    fn drop_chunks(&mut self, mut ops: Vec<Op>) -> Vec<Op> {
        let mut chunks = 2usize;
        while ops.len() >= 2 && !self.exhausted() {
            let size = ops.len().div_ceil(chunks);
            let mut reduced = false;
            for start in (0..ops.len()).step_by(size) {
                let candidate: Vec<Op> =
                    ops[..start].iter().chain(&ops[(start + size).min(ops.len())..]).cloned().collect();
                if self.fails(&candidate) {
                    ops = candidate;
                    chunks = (chunks - 1).max(2);
                    reduced = true;
                    break;
                }
            }
            if !reduced {
                if chunks >= ops.len() {
                    break;
                }
                chunks = (chunks * 2).min(ops.len());
            }
        }
        ops
    }

    /// Removes single operations until none can go.
    fn drop_singles(&mut self, mut ops: Vec<Op>) -> Vec<Op> {
        loop {
            let mut changed = false;
            for index in (0..ops.len()).rev() {
                if index >= ops.len() || self.exhausted() {
                    continue;
                }
                let mut candidate = ops.clone();
                candidate.remove(index);
                if self.fails(&candidate) {
                    ops = candidate;
                    changed = true;
                }
            }
            if !changed || self.exhausted() {
                return ops;
            }
        }
    }

    /// Shrinks batches (dropping entries) and values (to one byte, else by halves).
    fn shrink_values(&mut self, mut ops: Vec<Op>) -> Vec<Op> {
        for index in 0..ops.len() {
            if let Op::Batch { entries, .. } = &ops[index] {
                for entry in (0..entries.len()).rev() {
                    let mut candidate = ops.clone();
                    if let Op::Batch { entries, .. } = &mut candidate[index] {
                        if entries.len() < 2 || entry >= entries.len() {
                            continue;
                        }
                        entries.remove(entry);
                    }
                    if self.fails(&candidate) {
                        ops = candidate;
                    }
                }
            }
            let values = match &ops[index] {
                Op::Put { .. } => 1,
                Op::Batch { entries, .. } => entries.len(),
                _ => 0,
            };
            for value in 0..values {
                let len = value_len(&ops[index], value);
                // One byte first; else halves while it still fails.
                let mut target = 1;
                while target < len && !self.exhausted() {
                    let mut candidate = ops.clone();
                    set_value_len(&mut candidate[index], value, target);
                    if self.fails(&candidate) {
                        ops = candidate;
                        if target == 1 {
                            break;
                        }
                        target /= 2;
                    } else if target == 1 && len / 2 > 1 {
                        target = len / 2;
                    } else {
                        break;
                    }
                }
            }
        }
        ops
    }
}

fn value_len(op: &Op, value: usize) -> usize {
    match op {
        Op::Put { value: bytes, .. } => bytes.len(),
        Op::Batch { entries, .. } => entries.get(value).and_then(|(_, bytes)| bytes.as_ref()).map_or(0, Vec::len),
        _ => 0,
    }
}

fn set_value_len(op: &mut Op, value: usize, len: usize) {
    match op {
        Op::Put { value: bytes, .. } => bytes.truncate(len),
        Op::Batch { entries, .. } => {
            if let Some((_, Some(bytes))) = entries.get_mut(value) {
                bytes.truncate(len);
            }
        }
        _ => {}
    }
}

/// Minimizes `workload` while `fails` holds, within `budget`; `progress` hears after each
/// candidate. `fails` must hold for `workload` itself (it is not asked again).
pub fn shrink(
    workload: &Workload,
    budget: Budget,
    fails: &mut dyn FnMut(&Workload) -> bool,
    progress: &mut dyn FnMut(Progress),
) -> Shrunk {
    let mut shrinker = Shrinker {
        fails,
        name: format!("{}-minimized", workload.name),
        tries: 0,
        budget,
        started: Instant::now(),
        smallest: workload.ops.len(),
        progress,
    };
    let ops = shrinker.drop_chunks(workload.ops.clone());
    let ops = shrinker.drop_singles(ops);
    let ops = shrinker.shrink_values(ops);
    let budget_exhausted = shrinker.exhausted();
    Shrunk { workload: Workload { name: shrinker.name.clone(), ops }, tries: shrinker.tries, budget_exhausted }
}

/// Minimizes a workload whose crash enumeration fails `oracle`: the smallest workload found
/// whose run still has a crash image failing the same oracle, with that failure.
pub fn minimize_failure(
    workload: &Workload,
    oracle: &str,
    bounds: &Bounds,
    unbuffered: bool,
    budget: Budget,
    progress: &mut dyn FnMut(Progress),
) -> (Shrunk, Option<Failure>) {
    let mut last: Option<Failure> = None;
    let wanted = |failure: &Failure| failure.oracle == oracle;
    let mut fails = |candidate: &Workload| {
        let Ok(image) = formatted_image() else { return false };
        let Ok(recorded) = run(candidate, image, unbuffered) else { return false };
        match first_failure(&recorded, bounds, unbuffered, &wanted) {
            Some(failure) => {
                last = Some(failure);
                true
            }
            None => false,
        }
    };
    let shrunk = shrink(workload, budget, &mut fails, progress);
    // Every candidate that fails is kept, so the last failure found is the result's; when
    // none failed, the result is the workload itself.
    let failure = last.or_else(|| {
        let recorded = run(workload, formatted_image().ok()?, unbuffered).ok()?;
        first_failure(&recorded, bounds, unbuffered, &wanted)
    });
    (shrunk, failure)
}
