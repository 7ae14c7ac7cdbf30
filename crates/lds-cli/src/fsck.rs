//! `lds fsck`: check a volume completely, read-only, with fsck(8) exit codes (0 clean, 4
//! errors left uncorrected, 8 operational error, 16 usage). Output: one line per problem with
//! its stable code, then a summary; `--json` follows docs/fsck-json.md (`lds-fsck/1`).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use lds_check::{check, CheckOptions, Report, Severity};
use lds_volume::Members;
use lds_volume::VolumeError;
use lds_volume::{DeviceError, OpenMode};
use serde_json::json;

/// Exit code: an operational error (the check could not run).
pub const EXIT_OPERATIONAL: i32 = 8;

/// Options of `lds fsck`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct FsckOptions {
    /// Block device or image file.
    pub path: PathBuf,
    /// Never write (the only mode: accepted for fsck(8) habits).
    #[arg(short = 'n', long = "no-changes")]
    pub read_only: bool,
    /// Also recompute every chunk's digest (xxh3-128; blake3 before format 1.3), check every
    /// value's crc32c and test every key against its filter.
    #[arg(long)]
    pub deep: bool,
    /// Print JSON (schema lds-fsck/1, docs/fsck-json.md).
    #[arg(long)]
    pub json: bool,
    /// Check even while another process holds the volume (results may be inconsistent).
    #[arg(long)]
    pub force_readonly: bool,
}

/// One line of a problem: `E405 chunk 12 of instance 0 @ 123456: message`.
pub fn problem_line(problem: &lds_check::Problem) -> String {
    problem.line()
}

fn plural(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
}

fn summary_lines(report: &Report, seconds: f64) -> Vec<String> {
    let summary = &report.summary;
    let mut lines = vec![
        format!(
            "checked {} log objects ({} live), {} chunks, {} blocks, {} entries, {} bytes of chunks in {seconds:.2} s",
            summary.log_objects,
            summary.live_log_objects,
            summary.chunks,
            summary.blocks,
            summary.entries,
            summary.bytes_verified
        ),
        format!("slots: {} in use of {}", summary.slots_in_use, summary.slots),
    ];
    if summary.value_chunks > 0 {
        lines.push(format!(
            "value chunks: {} holding {} bytes of values; {} values read and checked",
            summary.value_chunks, summary.value_bytes, summary.values_verified
        ));
    }
    if summary.key_sketches > 0 {
        lines.push(format!("key sketches: {} checked", summary.key_sketches));
    }
    if summary.log_chunks > 0 || summary.log_references > 0 || !summary.log_retained.is_empty() {
        let instances: Vec<String> =
            summary.log_retained.iter().map(|(instance, bytes)| format!("instance {instance}: {bytes}")).collect();
        lines.push(format!(
            "log chunks: {} holding {} log references; backup log retained: {} bytes{}",
            summary.log_chunks,
            summary.log_references,
            summary.log_retained_bytes(),
            if instances.is_empty() { String::new() } else { format!(" ({})", instances.join(", ")) }
        ));
    }
    lines.push(format!(
        "problems: {}, {}, {} info",
        plural(report.count(Severity::Error), "error"),
        plural(report.count(Severity::Warning), "warning"),
        report.count(Severity::Info)
    ));
    lines
}

/// Runs fsck; returns the exit code.
pub fn run(options: &FsckOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let open = |mode| Members::open(&options.path, mode, std::time::Duration::ZERO);
    let device = match open(OpenMode::ReadOnlyLocked) {
        Ok(device) => device,
        Err(VolumeError::Device(DeviceError::Locked { .. })) if options.force_readonly => {
            match open(OpenMode::ReadOnly) {
                Ok(device) => device,
                Err(error) => {
                    let _ = writeln!(err, "lds fsck: {error}");
                    return EXIT_OPERATIONAL;
                }
            }
        }
        Err(VolumeError::Device(DeviceError::Locked { path, .. })) => {
            let _ = writeln!(
                err,
                "lds fsck: {}: in use by another process; refusing to check a live volume (use --force-readonly)",
                path.display()
            );
            return EXIT_OPERATIONAL;
        }
        Err(error) => {
            let _ = writeln!(err, "lds fsck: {error}");
            return EXIT_OPERATIONAL;
        }
    };
    let started = Instant::now();
    // Progress: a bar on a terminal, a line per quarter otherwise; only when the chunks are
    // large enough for it to matter.
    let terminal = std::io::stderr().is_terminal() && !options.json;
    let bar = if terminal { ProgressBar::new(0) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("checking chunks [{bar:20}] {percent:>3}% {bytes}/{total_bytes} {bytes_per_sec}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut last_quarter = 0u64;
    let mut progress = |done: u64, total: u64| {
        if total < (64 << 20) {
            return;
        }
        bar.set_length(total);
        bar.set_position(done);
        let quarter = done * 4 / total.max(1);
        if !terminal && !options.json && quarter != last_quarter {
            let _ = writeln!(std::io::stderr(), "lds fsck: checked {}% of the chunks", quarter * 25);
            last_quarter = quarter;
        }
    };
    let result = check(&device, CheckOptions { deep: options.deep, ..Default::default() }, &mut progress);
    bar.finish_and_clear();
    let report = match result {
        Ok(report) => report,
        Err(error) => {
            let _ = writeln!(err, "lds fsck: {}: {error}", options.path.display());
            return EXIT_OPERATIONAL;
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    let code = report.exit_code();
    if options.json {
        let summary = &report.summary;
        let document = json!({
            "schema": "lds-fsck/1",
            "device": options.path.display().to_string(),
            "deep": options.deep,
            "problems": report.problems.iter().map(|problem| json!({
                "code": problem.code.number(),
                "severity": problem.code.severity().name(),
                "structure": problem.structure,
                "offset": problem.offset,
                "message": problem.message,
            })).collect::<Vec<_>>(),
            "summary": {
                "log_objects": summary.log_objects,
                "live_log_objects": summary.live_log_objects,
                "chunks": summary.chunks,
                "blocks": summary.blocks,
                "entries": summary.entries,
                "bytes_verified": summary.bytes_verified,
                "slots": summary.slots,
                "slots_in_use": summary.slots_in_use,
                "value_chunks": summary.value_chunks,
                "value_bytes": summary.value_bytes,
                "values_verified": summary.values_verified,
                "key_sketches": summary.key_sketches,
                "log_chunks": summary.log_chunks,
                "log_references": summary.log_references,
                "log_retained_bytes": summary.log_retained_bytes(),
                "log_retained": summary.log_retained.iter().map(|&(instance, bytes)| json!({
                    "instance": instance,
                    "bytes": bytes,
                })).collect::<Vec<_>>(),
                "seconds": seconds,
            },
            "counts": {
                "error": report.count(Severity::Error),
                "warning": report.count(Severity::Warning),
                "info": report.count(Severity::Info),
            },
            "exit_code": code,
        });
        let _ = writeln!(out, "{}", serde_json::to_string_pretty(&document).unwrap_or_default());
        return code;
    }
    for problem in &report.problems {
        let _ = writeln!(out, "{}", problem_line(problem));
    }
    for line in summary_lines(&report, seconds) {
        let _ = writeln!(out, "{line}");
    }
    let _ =
        writeln!(out, "{}: {}", options.path.display(), if code == 0 { "clean" } else { "errors left uncorrected" });
    code
}
