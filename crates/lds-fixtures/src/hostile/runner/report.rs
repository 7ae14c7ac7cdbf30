//! What a run reports: each thing an oracle found, and the totals.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// One thing an oracle found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The case.
    pub case: String,
    /// The command, as run in the case's directory.
    pub command: String,
    /// What went wrong.
    pub what: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} | lds {} | {}", self.case, self.command, self.what)
    }
}

/// Totals of a run.
#[derive(Debug, Default, Clone)]
pub struct Summary {
    /// Cases run.
    pub cases: usize,
    /// Distinct command labels run.
    pub commands: BTreeSet<String>,
    /// Command runs.
    pub runs: usize,
    /// What the oracles found.
    pub findings: Vec<Finding>,
    /// Cases that could not be built or set up (not findings of the tools).
    pub errors: Vec<String>,
    /// Peak resident memory of a child, KiB (`ru_maxrss`), and that run. Without a
    /// [`Spawner`], a child forked from the runner counts the runner's resident pages it
    /// inherited until its `exec` (Linux keeps the larger peak across `exec`): an upper bound;
    /// see `baseline_rss_kib`.
    pub worst_rss_kib: u64,
    /// The run of the worst peak.
    pub worst_rss_run: String,
    /// Keys repair lost that its report drops data for without naming them ([`Loss::Unnamed`]).
    pub unnamed_losses: usize,
    /// Repairs that said they corrected the volume, whose keys were checked against salvage.
    pub repairs_checked: usize,
    /// Keys read otherwise than salvage reads them on a volume repair left as it was, where
    /// fsck explains the difference as a crash's unflushed tail (206, 306, 307).
    pub crash_explained: usize,
    /// `ru_maxrss` of `lds --version` run the same way at the end: the least a child counts,
    /// KiB.
    pub baseline_rss_kib: u64,
    /// How often each command ended with each exit code (`signal N` and `timeout` too): how
    /// far the cases get (a command that refuses every case at the label reaches little).
    pub exits: BTreeMap<(String, String), usize>,
    /// Time taken.
    pub elapsed: Duration,
}

impl Summary {
    /// Adds another summary's counts (of cases run elsewhere).
    pub fn merge(&mut self, other: Summary) {
        self.cases += other.cases;
        self.commands.extend(other.commands);
        self.runs += other.runs;
        self.findings.extend(other.findings);
        self.errors.extend(other.errors);
        if other.worst_rss_kib > self.worst_rss_kib {
            self.worst_rss_kib = other.worst_rss_kib;
            self.worst_rss_run = other.worst_rss_run;
        }
        self.unnamed_losses += other.unnamed_losses;
        self.repairs_checked += other.repairs_checked;
        self.crash_explained += other.crash_explained;
        for (key, count) in other.exits {
            *self.exits.entry(key).or_default() += count;
        }
    }
}
