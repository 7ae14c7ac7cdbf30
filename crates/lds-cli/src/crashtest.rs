//! `lds crashtest`: run workloads on the simulated device and check every crash state
//! (RELIABILITY.md L2). On a failure it minimizes the workload (delta debugging: the fewest
//! operations, and the shortest values, that still fail the same oracle at some crash point)
//! and writes a reproducer (the crash image and the operation list), and exits 1.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use lds_sim::enumerate::{enumerate, Bounds, Counts, Failure};
use lds_sim::minimize::minimize_failure;
use lds_sim::workload::{formatted_image, named, random, run, Op, Workload};
use serde_json::json;

/// Options of `lds crashtest`.
#[derive(Debug, Clone, clap::Args)]
pub struct CrashtestOptions {
    /// Workload: basic, wrap, compaction, or random.
    #[arg(long, default_value = "random")]
    pub workload: String,
    /// First seed (random workloads and sampling).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Random workloads to run, with seeds from --seed on.
    #[arg(long, default_value_t = 1)]
    pub runs: u64,
    /// Operations per random workload.
    #[arg(long, default_value_t = 150)]
    pub ops: usize,
    /// Every subset of the unflushed writes is tried up to this many writes.
    #[arg(long, default_value_t = 6)]
    pub exhaustive: usize,
    /// Past that, this many random subsets (plus none, all, each left out, each prefix).
    #[arg(long, default_value_t = 16)]
    pub samples: usize,
    /// Do not tear writes at sector boundaries.
    #[arg(long)]
    pub no_tears: bool,
    /// Write every batch to the device (no log buffer), for more crash points.
    #[arg(long)]
    pub unbuffered: bool,
    /// Where reproducers go.
    #[arg(long, default_value = "crashtest-failures")]
    pub out: PathBuf,
    /// On a failure, try at most this many smaller workloads to minimize the reproducer
    /// (each is a run and, when it passes, a whole enumeration); 0 keeps the whole workload.
    #[arg(long, default_value_t = 200)]
    pub minimize: u64,
    /// Print the counts as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs the crash test; returns the exit code (0 no failure, 1 failures, 2 could not run).
pub fn run_crashtest(options: &CrashtestOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let started = Instant::now();
    let mut total = Counts::default();
    let mut workloads = 0u64;
    let mut reproducers = Vec::new();
    let mut reproducer_operations = Vec::new();
    let runs = if options.workload == "random" { options.runs } else { 1 };
    for index in 0..runs {
        let seed = options.seed + index;
        let workload = if options.workload == "random" {
            random(seed, options.ops)
        } else {
            match named(&options.workload) {
                Some(workload) => workload,
                None => {
                    let _ = writeln!(
                        err,
                        "lds crashtest: unknown workload '{}': use basic, wrap, compaction or random",
                        options.workload
                    );
                    return 2;
                }
            }
        };
        let image = match formatted_image() {
            Ok(image) => image,
            Err(error) => {
                let _ = writeln!(err, "lds crashtest: {error}");
                return 2;
            }
        };
        let recorded = match run(&workload, image, options.unbuffered) {
            Ok(recorded) => recorded,
            Err(error) => {
                let _ = writeln!(err, "lds crashtest: {}: the workload itself failed: {error}", workload.name);
                return 1;
            }
        };
        let bounds =
            Bounds { exhaustive_max: options.exhaustive, samples: options.samples, tears: !options.no_tears, seed };
        let mut failures = Vec::new();
        let counts = enumerate(&recorded, &bounds, options.unbuffered, &mut |failure| failures.push(failure));
        workloads += 1;
        total.crash_points += counts.crash_points;
        total.images += counts.images;
        total.distinct_images += counts.distinct_images;
        total.failures += counts.failures;
        if let Some(first) = failures.first() {
            let reproducer = reproduce(&workload, first, &bounds, options);
            let folder = options.out.join(&workload.name);
            let _ = match write_reproducer(&folder, &workload, &reproducer) {
                Ok(()) => writeln!(
                    err,
                    "lds crashtest: {}: {} failures; first: {} {} (reproducer of {} operations, {}, in {})",
                    workload.name,
                    failures.len(),
                    first.oracle,
                    first.message,
                    reproducer.ops.len(),
                    reproducer.note,
                    folder.display()
                ),
                Err(error) => writeln!(
                    err,
                    "lds crashtest: {}: {} failures; cannot write the reproducer: {error}",
                    workload.name,
                    failures.len()
                ),
            };
            reproducers.push(folder.display().to_string());
            reproducer_operations.push(reproducer.ops.len());
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    if options.json {
        let document = json!({
            "schema": "lds-crashtest/1",
            "workloads": workloads,
            "crash_points": total.crash_points,
            "images": total.images,
            "distinct_images": total.distinct_images,
            "failures": total.failures,
            "reproducers": reproducers,
            "reproducer_operations": reproducer_operations,
            "seconds": seconds,
        });
        let _ = writeln!(out, "{document}");
    } else {
        let _ = writeln!(
            out,
            "{workloads} workloads, {} crash points, {} crash images ({} distinct) checked against I1, I2, I3 and I5: {} failures in {seconds:.1} s",
            total.crash_points, total.images, total.distinct_images, total.failures
        );
    }
    i32::from(total.failures > 0)
}

/// What a reproducer holds: the operations, the failure they lead to, and how they were
/// found.
struct Reproducer {
    ops: Vec<Op>,
    failure: Failure,
    note: String,
}

/// Minimizes the failing workload (unless `--minimize 0`); falls back to the whole workload
/// and its first failure.
fn reproduce(workload: &Workload, first: &Failure, bounds: &Bounds, options: &CrashtestOptions) -> Reproducer {
    let whole = || Reproducer { ops: workload.ops.clone(), failure: first.clone(), note: "not minimized".into() };
    if options.minimize == 0 {
        return whole();
    }
    let (shrunk, failure) = minimize_failure(workload, first.oracle, bounds, options.unbuffered, options.minimize);
    match failure {
        Some(failure) => Reproducer {
            note: format!(
                "minimized from {} in {} tries{}",
                workload.ops.len(),
                shrunk.tries,
                if shrunk.budget_exhausted { ", budget exhausted" } else { "" }
            ),
            ops: shrunk.workload.ops,
            failure,
        },
        None => whole(),
    }
}

fn describe(ops: &[Op]) -> String {
    ops.iter().enumerate().map(|(index, op)| format!("{index}: {}\n", op.describe())).collect()
}

/// Writes crash.img, operations.txt (the reproducer's), operations-original.txt (the whole
/// workload's, when minimized) and failure.txt.
fn write_reproducer(folder: &std::path::Path, workload: &Workload, reproducer: &Reproducer) -> std::io::Result<()> {
    std::fs::create_dir_all(folder)?;
    let failure = &reproducer.failure;
    std::fs::write(folder.join("crash.img"), &failure.image)?;
    std::fs::write(folder.join("operations.txt"), describe(&reproducer.ops))?;
    if reproducer.ops.len() != workload.ops.len() {
        std::fs::write(folder.join("operations-original.txt"), describe(&workload.ops))?;
    }
    std::fs::write(
        folder.join("failure.txt"),
        format!(
            "crash point {} ({})\n{}: {}\n{} operations, {}\n",
            failure.crash_point,
            failure.state,
            failure.oracle,
            failure.message,
            reproducer.ops.len(),
            reproducer.note
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimized_reproducer_keeps_the_original_operations_beside_it() {
        let workload = random(1, 12);
        let failure = Failure {
            crash_point: 7,
            state: "unflushed writes [3] with mask 0x1".into(),
            oracle: "I3",
            message: "fsck: 207".into(),
            image: vec![1, 2, 3],
        };
        let reproducer = Reproducer { ops: workload.ops[..2].to_vec(), failure, note: "minimized from 12".into() };
        let folder = std::env::temp_dir().join(format!("lds-crashtest-reproducer-{}", std::process::id()));
        let written = write_reproducer(&folder, &workload, &reproducer);
        assert!(written.is_ok(), "{written:?}");
        let read = |name: &str| std::fs::read_to_string(folder.join(name)).unwrap_or_default();
        assert_eq!(read("operations.txt").lines().count(), 2);
        assert_eq!(read("operations-original.txt").lines().count(), 12);
        assert!(
            read("failure.txt").contains("I3: fsck: 207\n2 operations, minimized from 12"),
            "{}",
            read("failure.txt")
        );
        assert_eq!(std::fs::read(folder.join("crash.img")).unwrap_or_default(), [1, 2, 3]);
        let _ = std::fs::remove_dir_all(&folder);
    }
}
