//! `lds crashtest`: run workloads on the simulated device and check every crash state
//! (docs/reliability.md L2). On a failure it reports the first failing image at once, then
//! minimizes the workload within a budget of tries and seconds (delta debugging: the fewest
//! operations, and the shortest values, that still fail the same oracle at some crash point),
//! writes a reproducer (the crash image and the operation list), and exits 1.

use std::io::{IsTerminal, Write};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use lds_sim::device_changes::{device_cases, enumerate_change, record_change};
use lds_sim::enumerate::{enumerate, Bounds, Counts, Failure};
use lds_sim::minimize::{minimize_failure, Budget, Progress};
use lds_sim::mkfs::{enumerate_mkfs, mkfs_cases, record_mkfs};
use lds_sim::repair::{damaged_volumes, enumerate_repair, record_repair};
use lds_sim::resize::{enumerate_resize, record_resize, resize_cases};
use lds_sim::workload::{formatted_image, named, run, seeded, Op, Workload};
use lds_sim::SimError;
use serde_json::json;

/// Options of `lds crashtest`.
#[derive(Debug, Clone, clap::Args)]
pub struct CrashtestOptions {
    /// Workload: basic, wrap, compaction, journal (named), or random, random-wrap,
    /// random-journal, random-values, random-level0 (one per seed; random-wrap wraps the backup
    /// log often with many unflushed writes at each wrap; journal and random-journal run merges
    /// large enough to be journaled and clean inputs early; random-level0 fills level 0 with
    /// chunks that share few keys, for --technique triad-disk; random-tiered writes values of
    /// 500 to 3,000 bytes, for --technique size-tiered; random-forest writes runs of fresh
    /// keys among overwrites, for --technique forest; random-log writes mostly fresh keys, a
    /// few values larger than a write buffer, flushes, compactions and reopens, for
    /// --technique triad-log). `repair`: crashes during `lds repair -y` on damaged
    /// volumes, each crash image checked to undo to the damaged original and to be finished by
    /// a second repair. `resize`: crashes during `lds resize` growing and shrinking a volume
    /// and during `lds device add|remove`; `devices`: the device changes alone. `mkfs`:
    /// crashes during `lds mkfs` over an engine-written volume and over zeros, each crash
    /// image checked to be the old volume, refused, or the new one, and mkfs again to finish
    /// it. `instances`:
    /// random workloads (one per seed) sent to the two instances of a volume opened together
    /// in one process (`Db::open_instances`), each instance checked against its own model.
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
    /// Spend at most this many seconds minimizing one reproducer (the candidate running
    /// when it runs out finishes); the smallest failing workload found by then is kept.
    #[arg(long, default_value_t = 120)]
    pub minimize_seconds: u64,
    /// Print the counts as JSON.
    #[arg(long)]
    pub json: bool,
    /// Switch engine techniques on for every store of the run, NAME[,NAME] (see `lds bench
    /// --technique`): level-pinning, kv-separation (the volume gets feature value_chunks;
    /// `--workload random-values` writes values up to 80 KiB), triad-disk (feature
    /// chunk_sketches; `--workload random-level0`), triad-mem, size-tiered (`--workload
    /// random-tiered`), forest (`--workload random-forest`), triad-log (feature log_tables, a
    /// 12 KiB backup log, 1 KiB write buffers and a level-0 trigger of 8, so that flushes write
    /// log chunks, the retained log calls for early merges and the ring wraps over what they
    /// release; `--workload random-log`). The volume gets every feature the techniques need
    /// (`--technique triad-mem,triad-disk,triad-log`: chunk_sketches and log_tables); a set
    /// the engine refuses (triad-log with size-tiered or forest) is a usage error. The
    /// offline tools' workloads (repair, resize, devices) and instances run on volumes the
    /// engine wrote with the techniques.
    #[arg(long, value_name = "NAME[,NAME]", default_value = "")]
    pub technique: String,
}

/// The workload of one run: a named one, or the seeded generator's.
fn workload_for(options: &CrashtestOptions, seed: u64) -> Option<Workload> {
    seeded(&options.workload, seed, options.ops).or_else(|| named(&options.workload))
}

/// Runs the crash test; returns the exit code (0 no failure, 1 failures, 2 could not run).
pub fn run_crashtest(options: &CrashtestOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if let Err(error) =
        lds_sim::workload::set_techniques(&options.technique).and_then(|()| lds_sim::workload::check_techniques())
    {
        let _ = writeln!(err, "lds crashtest: --technique: {error}");
        return 2;
    }
    // The random-forest workload's chunks are a few KiB: its drains move chunks of any size.
    lds_sim::workload::set_small_chunk_moves(options.workload == "random-forest");
    if options.workload == "repair" {
        return run_repair_crashtest(options, out, err);
    }
    if options.workload == "resize" || options.workload == "devices" {
        return run_resize_crashtest(options, out, err);
    }
    if options.workload == "instances" {
        return run_instances_crashtest(options, out, err);
    }
    if options.workload == "mkfs" {
        return run_mkfs_crashtest(options, out, err);
    }
    let started = Instant::now();
    let mut total = Counts::default();
    let mut workloads = 0u64;
    let mut reproducers = Vec::new();
    let mut reproducer_operations = Vec::new();
    let runs = if seeded(&options.workload, 0, 0).is_some() { options.runs } else { 1 };
    if workload_for(options, options.seed).is_none() {
        let _ = writeln!(
            err,
            "lds crashtest: unknown workload '{}': use basic, wrap, compaction, journal, random, random-wrap, random-journal, random-values, random-level0, random-tiered, random-forest, random-log, repair, resize, devices, mkfs or instances",
            options.workload
        );
        return 2;
    }
    let terminal = std::io::stderr().is_terminal();
    let bar = if terminal && runs > 1 {
        let bar = ProgressBar::new(runs);
        bar.set_style(
            ProgressStyle::with_template("{spinner} {pos}/{len} workloads [{bar:30}] {elapsed} (eta {eta}) {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    for index in 0..runs {
        let seed = options.seed + index;
        let Some(workload) = workload_for(options, seed) else { return 2 };
        bar.set_message(format!("{}: {} failures so far", workload.name, total.failures));
        let image = match formatted_image() {
            Ok(image) => image,
            Err(error) => {
                bar.finish_and_clear();
                let _ = writeln!(err, "lds crashtest: {error}");
                return 2;
            }
        };
        let recorded = match run(&workload, image, options.unbuffered) {
            Ok(recorded) => recorded,
            Err(error) => {
                bar.finish_and_clear();
                let _ = writeln!(err, "lds crashtest: {}: the workload itself failed: {error}", workload.name);
                return 1;
            }
        };
        let bounds =
            Bounds { exhaustive_max: options.exhaustive, samples: options.samples, tears: !options.no_tears, seed };
        let mut failures = Vec::new();
        let counts = enumerate(&recorded, &bounds, options.unbuffered, &mut |failure| failures.push(failure));
        workloads += 1;
        bar.inc(1);
        total.crash_points += counts.crash_points;
        total.images += counts.images;
        total.distinct_images += counts.distinct_images;
        total.failures += counts.failures;
        if let Some(first) = failures.first() {
            // The failure first, at once: minimizing can take minutes.
            bar.suspend(|| {
                let _ = writeln!(
                    err,
                    "lds crashtest: {}: {} failures; first: {} {} at crash point {} ({})",
                    workload.name,
                    failures.len(),
                    first.oracle,
                    first.message,
                    first.crash_point,
                    first.state
                );
            });
            let reproducer = reproduce(&workload, first, &bounds, options, terminal, err);
            let folder = options.out.join(&workload.name);
            bar.suspend(|| {
                let _ = match write_reproducer(&folder, &workload, &reproducer) {
                    Ok(()) => writeln!(
                        err,
                        "lds crashtest: {}: reproducer of {} operations ({}) in {}",
                        workload.name,
                        reproducer.ops.len(),
                        reproducer.note,
                        folder.display()
                    ),
                    Err(error) => {
                        writeln!(err, "lds crashtest: {}: cannot write the reproducer: {error}", workload.name)
                    }
                };
            });
            reproducers.push(folder.display().to_string());
            reproducer_operations.push(reproducer.ops.len());
        }
    }
    bar.finish_and_clear();
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
            "techniques": options.technique,
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

/// `--workload repair`: every crash state of `lds repair -y` on each damaged volume of
/// `lds_sim::repair::damaged_volumes`, checked against U (the undo file at the crash restores
/// the damaged original), A (no problem the damaged volume did not have: the switch is atomic),
/// R (a second repair ends where the completed one did) and I10 (repair keeps what salvage
/// reads, or names it dropped).
fn run_repair_crashtest(options: &CrashtestOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let started = Instant::now();
    let (volume, cases) = match damaged_volumes() {
        Ok(found) => found,
        Err(error) => {
            let _ = writeln!(err, "lds crashtest: cannot build the damaged volumes: {error}");
            return 2;
        }
    };
    let bounds = tool_bounds(options);
    let runs = cases.iter().map(|case| {
        let recorded = record_repair(case, volume.geometry.sector())
            .map_err(SimError::within(format!("repair of {}", case.name)))?;
        let (counts, first) = first_of(|on_failure| enumerate_repair(&recorded, &bounds, on_failure));
        let summary =
            format!("repair exits {}, {} writes", recorded.completed.exit_code, recorded.history.writes.len());
        Ok(ToolRun { name: case.name.clone(), summary, counts, first, initial: recorded.history.initial.to_vec() })
    });
    report_tool_runs(
        "repair",
        "U (undo restores the damaged volume), A (atomic switch), R (a second repair finishes it) and I10 (repair keeps what salvage reads)",
        (cases.len(), runs),
        options,
        started,
        out,
        err,
    )
}

/// `--workload resize`: every crash state of `lds resize` growing and shrinking (with chunk
/// moves) an engine-written volume, checked against I3, I1/I2, W (the engine writes), R (a
/// second resize finishes) and U (the undo file restores the volume); then (and alone with
/// `--workload devices`) of `lds device add|remove` joining a device and removing one that
/// holds chunks, checked against I3, I1/I2, W and R (the same change again finishes it).
fn run_resize_crashtest(options: &CrashtestOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let started = Instant::now();
    let resizes = if options.workload == "devices" { Ok(Vec::new()) } else { resize_cases() };
    let (resizes, changes) = match (resizes, device_cases()) {
        (Ok(resizes), Ok(changes)) => (resizes, changes),
        (Err(error), _) | (_, Err(error)) => {
            let _ = writeln!(err, "lds crashtest: cannot build the volumes to resize: {error}");
            return 2;
        }
    };
    let bounds = tool_bounds(options);
    let resize_runs = resizes.iter().map(|case| {
        let recorded = record_resize(case, lds_sim::sim_device::SECTOR_SIZE_DEFAULT)?;
        let (counts, first) = first_of(|on_failure| enumerate_resize(&recorded, &bounds, on_failure));
        let summary = format!("{} chunks moved, {} writes", recorded.moves, recorded.history.writes.len());
        Ok(ToolRun { name: case.name.clone(), summary, counts, first, initial: recorded.history.initial.to_vec() })
    });
    let change_runs = changes.iter().map(|case| {
        let recorded = record_change(case, lds_sim::sim_device::SECTOR_SIZE_DEFAULT)?;
        let (counts, first) = first_of(|on_failure| enumerate_change(&recorded, &bounds, on_failure));
        let summary = format!("{} writes", recorded.history.writes.len());
        Ok(ToolRun { name: case.name.clone(), summary, counts, first, initial: recorded.history.initial.to_vec() })
    });
    let count = resizes.len() + changes.len();
    report_tool_runs(
        &options.workload,
        "I3, I1/I2, W (the engine writes), R (running it again finishes) and, for resize, U (undo restores the volume)",
        (count, resize_runs.chain(change_runs)),
        options,
        started,
        out,
        err,
    )
}

/// `--workload mkfs`: every crash state of mkfs's writes over an engine-written volume (the
/// same layout, a longer version log over its slots, and that with the volume's own uuid)
/// and over zeros, checked against M
/// (the old volume, a refusal, or the new volume) and R (mkfs again finishes it).
fn run_mkfs_crashtest(options: &CrashtestOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let started = Instant::now();
    let cases = match mkfs_cases() {
        Ok(cases) => cases,
        Err(error) => {
            let _ = writeln!(err, "lds crashtest: cannot build the volumes to format over: {error}");
            return 2;
        }
    };
    let bounds = tool_bounds(options);
    let runs = cases.iter().map(|case| {
        let recorded = record_mkfs(case, lds_sim::sim_device::SECTOR_SIZE_DEFAULT)?;
        let (counts, first) = first_of(|on_failure| enumerate_mkfs(&recorded, &bounds, on_failure));
        let summary = format!("{} writes", recorded.history.writes.len());
        Ok(ToolRun { name: case.name.clone(), summary, counts, first, initial: recorded.history.initial.to_vec() })
    });
    report_tool_runs(
        "mkfs",
        "M (the old volume, a refusal, or the new volume) and R (mkfs again finishes it)",
        (cases.len(), runs),
        options,
        started,
        out,
        err,
    )
}

/// `--workload instances`: a random workload per seed on both instances of a volume opened
/// together, every crash state checked against I3 and, per instance, I1/I2 and I5.
fn run_instances_crashtest(options: &CrashtestOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let started = Instant::now();
    let bounds = tool_bounds(options);
    let runs = (options.seed..options.seed + options.runs).map(|seed| {
        let recorded = lds_sim::instances::record(seed, options.ops, options.unbuffered)?;
        let (counts, first) = first_of(|on_failure| lds_sim::instances::enumerate(&recorded, &bounds, on_failure));
        let per_instance: Vec<String> = recorded.models.iter().map(|models| (models.len() - 1).to_string()).collect();
        let summary =
            format!("{} operations per instance, {} writes", per_instance.join(" + "), recorded.history.writes.len());
        Ok(ToolRun {
            name: format!("instances seed {seed}"),
            summary,
            counts,
            first,
            initial: recorded.history.initial.to_vec(),
        })
    });
    report_tool_runs(
        "instances",
        "I3 and, per instance, I1/I2 and I5",
        (options.runs as usize, runs),
        options,
        started,
        out,
        err,
    )
}

/// One offline tool's run under the crash enumerator.
struct ToolRun {
    name: String,
    summary: String,
    counts: Counts,
    first: Option<Failure>,
    initial: Vec<u8>,
}

fn tool_bounds(options: &CrashtestOptions) -> Bounds {
    Bounds {
        exhaustive_max: options.exhaustive,
        samples: options.samples,
        tears: !options.no_tears,
        seed: options.seed,
    }
}

/// Runs an enumeration, keeping its first failure.
fn first_of(enumerate: impl FnOnce(&mut dyn FnMut(Failure) -> ControlFlow<()>) -> Counts) -> (Counts, Option<Failure>) {
    let mut first: Option<Failure> = None;
    let counts = enumerate(&mut |failure| {
        first.get_or_insert(failure);
        ControlFlow::Continue(())
    });
    (counts, first)
}

/// Prints each tool run as it ends (a progress bar on a terminal), writes the first failing
/// crash image of each to `--out/TOOL/case-N/`, and the totals; returns the exit code.
fn report_tool_runs(
    tool: &str,
    oracles: &str,
    runs: (usize, impl Iterator<Item = Result<ToolRun, SimError>>),
    options: &CrashtestOptions,
    started: Instant,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let (count, runs) = runs;
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::new(count as u64).with_style(
            ProgressStyle::with_template("{spinner} {pos}/{len} runs [{bar:30}] {elapsed}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        )
    } else {
        ProgressBar::hidden()
    };
    let mut total = Counts::default();
    let mut reproducers = Vec::new();
    for (index, run) in runs.enumerate() {
        let run = match run {
            Ok(run) => run,
            Err(error) => {
                bar.suspend(|| writeln!(err, "lds crashtest: {error}")).ok();
                total.failures += 1;
                continue;
            }
        };
        let counts = run.counts;
        bar.suspend(|| {
            writeln!(
                err,
                "{}: {}; {} crash points, {} images ({} distinct): {} failures",
                run.name, run.summary, counts.crash_points, counts.images, counts.distinct_images, counts.failures
            )
        })
        .ok();
        total.crash_points += counts.crash_points;
        total.images += counts.images;
        total.distinct_images += counts.distinct_images;
        total.failures += counts.failures;
        if let Some(failure) = run.first {
            let folder = options.out.join(tool).join(format!("case-{index}"));
            let text = format!(
                "{}\n{} at crash point {} ({}): {}\n",
                run.name, failure.oracle, failure.crash_point, failure.state, failure.message
            );
            let written = std::fs::create_dir_all(&folder)
                .and_then(|()| write_new(&folder.join("before.img"), &run.initial))
                .and_then(|()| write_new(&folder.join("crash.img"), &failure.image))
                .and_then(|()| write_new(&folder.join("failure.txt"), text.as_bytes()));
            bar.suspend(|| match written {
                Ok(()) => writeln!(
                    err,
                    "lds crashtest: {}: first failure {} {} ({}); images in {}",
                    run.name,
                    failure.oracle,
                    failure.message,
                    failure.state,
                    folder.display()
                ),
                Err(error) => writeln!(err, "lds crashtest: cannot write the reproducer: {error}"),
            })
            .ok();
            reproducers.push(folder.display().to_string());
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    if options.json {
        let document = json!({
            "schema": "lds-crashtest/1",
            "workloads": count,
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
            "{count} {tool} runs, {} crash points, {} crash images ({} distinct) checked against {oracles}: {} failures in {seconds:.1} s",
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

/// Minimizes the failing workload (unless `--minimize 0`) within the budget, with a spinner
/// on a terminal; falls back to the whole workload and its first failure.
fn reproduce(
    workload: &Workload,
    first: &Failure,
    bounds: &Bounds,
    options: &CrashtestOptions,
    terminal: bool,
    err: &mut dyn Write,
) -> Reproducer {
    let whole = || Reproducer { ops: workload.ops.clone(), failure: first.clone(), note: "not minimized".into() };
    if options.minimize == 0 {
        return whole();
    }
    let budget = Budget { tries_max: options.minimize, time_max: Some(Duration::from_secs(options.minimize_seconds)) };
    let spinner = if terminal { ProgressBar::new_spinner() } else { ProgressBar::hidden() };
    spinner.enable_steady_tick(Duration::from_millis(200));
    if !terminal {
        let _ = writeln!(
            err,
            "lds crashtest: {}: minimizing (at most {} tries, {} s)",
            workload.name, options.minimize, options.minimize_seconds
        );
    }
    let mut on_progress = |progress: Progress| {
        spinner.set_message(format!(
            "minimizing {}: {} tries, {} operations still fail, {:.0} s of {} s",
            workload.name,
            progress.tries,
            progress.operations,
            progress.elapsed.as_secs_f64(),
            options.minimize_seconds
        ));
    };
    let (shrunk, failure) =
        minimize_failure(workload, first.oracle, bounds, options.unbuffered, budget, &mut on_progress);
    spinner.finish_and_clear();
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

/// Writes `bytes` to a new file at `path`: an entry already there (a reproducer of an earlier
/// run, or a symlink planted in its place) is removed first, never followed, and the file is
/// created with `O_EXCL | O_NOFOLLOW`, so that a reproducer never writes through a link to
/// somewhere else (docs/safety.md).
fn write_new(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt;
    if std::fs::symlink_metadata(path).is_ok_and(|metadata| !metadata.is_dir()) {
        std::fs::remove_file(path)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    file.write_all(bytes)
}

/// Writes crash.img, operations.txt (the reproducer's), operations-original.txt (the whole
/// workload's, when minimized) and failure.txt.
fn write_reproducer(folder: &std::path::Path, workload: &Workload, reproducer: &Reproducer) -> std::io::Result<()> {
    std::fs::create_dir_all(folder)?;
    let failure = &reproducer.failure;
    write_new(&folder.join("crash.img"), &failure.image)?;
    write_new(&folder.join("operations.txt"), describe(&reproducer.ops).as_bytes())?;
    if reproducer.ops.len() != workload.ops.len() {
        write_new(&folder.join("operations-original.txt"), describe(&workload.ops).as_bytes())?;
    }
    write_new(
        &folder.join("failure.txt"),
        format!(
            "crash point {} ({})\n{}: {}\n{} operations, {}\ntechniques: {}\n",
            failure.crash_point,
            failure.state,
            failure.oracle,
            failure.message,
            reproducer.ops.len(),
            reproducer.note,
            match lds_sim::workload::techniques() {
                names if names.is_empty() => "none".to_string(),
                names => names,
            }
        )
        .as_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimized_reproducer_keeps_the_original_operations_beside_it() {
        let workload = lds_sim::workload::random(1, 12);
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
        // A reproducer written again over a symlink planted in its place replaces the link,
        // not the file it names.
        let target = folder.with_extension("target");
        assert!(std::fs::write(&target, b"keep").is_ok());
        assert!(std::fs::remove_file(folder.join("crash.img")).is_ok());
        assert!(std::os::unix::fs::symlink(&target, folder.join("crash.img")).is_ok());
        let again = write_reproducer(&folder, &workload, &reproducer);
        assert!(again.is_ok(), "{again:?}");
        assert_eq!(std::fs::read(&target).unwrap_or_default(), b"keep");
        assert!(std::fs::symlink_metadata(folder.join("crash.img")).is_ok_and(|metadata| metadata.is_file()));
        assert_eq!(std::fs::read(folder.join("crash.img")).unwrap_or_default(), [1, 2, 3]);
        let _ = std::fs::remove_file(&target);
        let _ = std::fs::remove_dir_all(&folder);
    }
}
