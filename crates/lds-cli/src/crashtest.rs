//! `lds crashtest`: run workloads on the simulated device and check every crash state
//! (RELIABILITY.md L2). On a failure it writes a reproducer (the crash image and the
//! operation list) and exits 1.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use lds_sim::enumerate::{enumerate, Bounds, Counts};
use lds_sim::workload::{formatted_image, named, random, run};
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
            let folder = options.out.join(&workload.name);
            let written = std::fs::create_dir_all(&folder).and_then(|()| {
                std::fs::write(folder.join("crash.img"), &first.image)?;
                let ops: String = workload
                    .ops
                    .iter()
                    .enumerate()
                    .map(|(index, op)| format!("{index}: {}\n", op.describe()))
                    .collect();
                std::fs::write(folder.join("operations.txt"), ops)?;
                std::fs::write(
                    folder.join("failure.txt"),
                    format!(
                        "crash point {} ({})\n{}: {}\n",
                        first.crash_point, first.state, first.oracle, first.message
                    ),
                )
            });
            let _ = match written {
                Ok(()) => writeln!(
                    err,
                    "lds crashtest: {}: {} failures; first: {} {} (reproducer in {})",
                    workload.name,
                    failures.len(),
                    first.oracle,
                    first.message,
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
