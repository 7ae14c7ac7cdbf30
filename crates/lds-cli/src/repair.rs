//! `lds repair` (e2fsck's modes and exit codes): repair runs in a session
//! (`lds_tools::session`) that writes an undo file before it touches the volume; `lds undo`
//! restores the volume from it byte for byte.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use lds_check::Severity;
use lds_repair::{repair, FixClass, FixState, Mode, RepairError, RepairOptions, RepairReport};
use lds_tools::session::UndoKept;
use lds_tools::UndoChoice;
use lds_volume::BlockDevice;
use serde_json::json;

use crate::session::{EXIT_OPERATIONAL, EXIT_USAGE};

/// Options of `lds repair`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RepairArgs {
    /// Block device or image file.
    pub path: PathBuf,
    /// Report what would be fixed; write nothing.
    #[arg(short = 'n', long = "no-changes", conflicts_with_all = ["preen", "yes"])]
    pub dry_run: bool,
    /// Fix only what loses no data (rewrite a label copy, rebuild a filter, ...); leave the rest (exit 4).
    #[arg(short = 'p', long = "preen", conflicts_with = "yes")]
    pub preen: bool,
    /// Fix everything repair can; each drop of data is reported.
    #[arg(short = 'y', long = "yes")]
    pub yes: bool,
    /// Where to save the bytes repair overwrites (default: next to an image file,
    /// PATH.lds-undo; for a block device, NAME.lds-undo in the current directory).
    #[arg(long, value_name = "FILE", conflicts_with = "no_undo")]
    pub undo_file: Option<PathBuf>,
    /// Write no undo file.
    #[arg(long)]
    pub no_undo: bool,
    /// Print JSON (schema lds-repair/1, docs/repair-json.md).
    #[arg(long)]
    pub json: bool,
}

fn state_name(state: &FixState) -> &'static str {
    match state {
        FixState::Applied => "applied",
        FixState::Planned => "planned",
        FixState::Refused(_) => "refused",
    }
}

fn problems_json(report: &lds_check::Report) -> serde_json::Value {
    json!(report
        .problems
        .iter()
        .map(|problem| json!({
            "code": problem.code.number(),
            "severity": problem.code.severity().name(),
            "structure": problem.structure,
            "offset": problem.offset,
            "message": problem.message,
        }))
        .collect::<Vec<_>>())
}

/// One range of entries a fix drops (docs/repair-json.md): keys in lowercase hex.
fn lost_json(lost: &lds_repair::Lost) -> serde_json::Value {
    use lds_format::error::hex;
    let mut value = json!({ "instance": lost.instance });
    if let serde_json::Value::Object(map) = &mut value {
        match &lost.from {
            lds_repair::KeyFrom::First => {}
            lds_repair::KeyFrom::Key(key) => {
                map.insert("key_from".into(), json!(hex(key)));
            }
            lds_repair::KeyFrom::After(key) => {
                map.insert("key_after".into(), json!(hex(key)));
            }
        }
        if let Some(through) = &lost.through {
            map.insert("key_through".into(), json!(hex(through)));
        }
        map.insert("smallest_seq".into(), json!(lost.smallest_seq));
        map.insert("largest_seq".into(), json!(lost.largest_seq));
    }
    value
}

fn print_json(args: &RepairArgs, mode: Mode, report: &RepairReport, undo_file: Option<&UndoKept>, out: &mut dyn Write) {
    let document = json!({
        "schema": "lds-repair/1",
        "device": args.path.display().to_string(),
        "mode": match mode { Mode::DryRun => "n", Mode::Preen => "p", Mode::Yes => "y" },
        "before": problems_json(&report.before),
        "fixes": report.fixes.iter().map(|fix| json!({
            "codes": fix.codes.iter().map(|code| code.number()).collect::<Vec<_>>(),
            "structure": fix.structure,
            "offset": fix.offset,
            "action": fix.action,
            "dropped": fix.dropped.iter().map(|dropped| dropped.what.as_str()).collect::<Vec<_>>(),
            "lost": fix.dropped.iter().flat_map(|dropped| dropped.lost.iter().map(lost_json)).collect::<Vec<_>>(),
            "class": match fix.class { FixClass::Preen => "preen", FixClass::Fix => "fix" },
            "state": state_name(&fix.state),
            "refused_because": match &fix.state { FixState::Refused(why) => Some(why.clone()), _ => None },
        })).collect::<Vec<_>>(),
        "unrepairable": report.unrepairable,
        "writes": report.writes.iter().map(|write| json!({
            "structure": write.structure,
            "offset": write.offset,
            "len": write.len,
        })).collect::<Vec<_>>(),
        "bytes_written": if mode == Mode::DryRun { 0 } else { report.bytes_written() },
        "undo_file": undo_file.map(|kept| json!({ "path": kept.path.display().to_string(), "bytes": kept.bytes })),
        "after": report.after.as_ref().map(problems_json),
        "exit_code": report.exit_code(),
    });
    let _ = writeln!(out, "{}", serde_json::to_string_pretty(&document).unwrap_or_default());
}

fn print_text(args: &RepairArgs, mode: Mode, report: &RepairReport, undo_file: Option<&UndoKept>, out: &mut dyn Write) {
    for problem in &report.before.problems {
        let _ = writeln!(out, "{}", problem.line());
    }
    for fix in &report.fixes {
        let _ = writeln!(out, "{}", fix.line());
        for dropped in &fix.dropped {
            let _ = writeln!(out, "  dropped: {dropped}");
        }
    }
    for what in &report.unrepairable {
        let _ = writeln!(out, "cannot repair {what}");
    }
    match mode {
        Mode::DryRun if !report.writes.is_empty() => {
            let bytes: u64 = report.writes.iter().map(|write| write.len).sum();
            let _ = writeln!(out, "would write {} times, {bytes} bytes; nothing was written (-n)", report.writes.len());
        }
        _ if !report.writes.is_empty() => {
            let _ = writeln!(out, "wrote {} times, {} bytes", report.writes.len(), report.bytes_written());
        }
        _ => {}
    }
    if let Some(kept) = undo_file.filter(|kept| kept.bytes > 0) {
        let _ = writeln!(out, "{}", crate::session::undo_line(kept, &args.path));
    }
    if let Some(after) = &report.after {
        for problem in after.problems.iter().filter(|problem| problem.code.severity() != Severity::Info) {
            let _ = writeln!(out, "after repair: {}", problem.line());
        }
    }
    let verdict = match report.exit_code() {
        0 => "clean, nothing to fix",
        1 => "errors corrected",
        _ => "errors left uncorrected",
    };
    let _ = writeln!(out, "{}: {verdict}", args.path.display());
}

/// Runs `lds repair`; returns the exit code.
pub fn run(args: &RepairArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let mode = match (args.dry_run, args.preen, args.yes) {
        (true, _, _) => Mode::DryRun,
        (_, true, _) => Mode::Preen,
        (_, _, true) => Mode::Yes,
        _ => {
            let _ = writeln!(
                err,
                "lds repair: choose -n (report only), -p (fix what loses no data) or -y (fix everything)"
            );
            return EXIT_USAGE;
        }
    };
    if mode == Mode::DryRun {
        let device = match crate::session::open_read(&args.path, "repair", err) {
            Ok(device) => device,
            Err(code) => return code,
        };
        return match checked(args, mode, &device) {
            Ok(report) => print(args, mode, &report, None, out),
            Err(error) => {
                let _ = writeln!(err, "lds repair: {error}");
                EXIT_OPERATIONAL
            }
        };
    }
    let mut session = match crate::session::open(&args.path, "repair", Duration::ZERO, err) {
        Ok(session) => session,
        Err(error) => {
            let _ = writeln!(err, "lds repair: {}", crate::session::open_error(&error, false));
            return EXIT_OPERATIONAL;
        }
    };
    if let Err(error) = session.keep_undo(&UndoChoice { file: args.undo_file.clone(), none: args.no_undo }) {
        let _ = writeln!(err, "lds repair: {error}");
        return EXIT_OPERATIONAL;
    }
    let result = checked(args, mode, session.target());
    let finished = if result.is_ok() { session.finish() } else { session.abandon() };
    crate::session::report_error(&finished, "repair", err);
    match result {
        Ok(report) => print(args, mode, &report, finished.undo_file.as_ref(), out),
        Err(error) => {
            let _ = writeln!(err, "lds repair: {error}");
            if let Some(kept) = finished.written() {
                let _ = writeln!(
                    err,
                    "lds repair: the undo file {} ({} bytes) restores what was written: lds undo {} {}",
                    kept.path.display(),
                    kept.bytes,
                    kept.path.display(),
                    args.path.display()
                );
            }
            EXIT_OPERATIONAL
        }
    }
}

/// Runs the repair on `target`, with a progress bar on a terminal.
fn checked(args: &RepairArgs, mode: Mode, target: &dyn BlockDevice) -> Result<RepairReport, RepairError> {
    let terminal = std::io::stderr().is_terminal() && !args.json;
    let bar = if terminal { ProgressBar::new(0) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("checking chunks [{bar:20}] {percent:>3}% {bytes}/{total_bytes}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut progress = |done: u64, total: u64| {
        if total >= (64 << 20) {
            bar.set_length(total);
            bar.set_position(done);
        }
    };
    let result = repair(target, RepairOptions::new(mode), &mut progress);
    bar.finish_and_clear();
    result
}

/// Prints the report (text or JSON); returns its exit code.
fn print(
    args: &RepairArgs,
    mode: Mode,
    report: &RepairReport,
    undo_file: Option<&UndoKept>,
    out: &mut dyn Write,
) -> i32 {
    if args.json {
        print_json(args, mode, report, undo_file, out);
    } else {
        print_text(args, mode, report, undo_file, out);
    }
    report.exit_code()
}
