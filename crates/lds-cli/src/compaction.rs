//! `lds compaction show|resume|abort`: the unfinished journaled compactions of a volume
//! (SPEC.md §6.3, §12). `show` reads under a shared lock and never writes; `resume` and
//! `abort` take the exclusive lock, refuse a volume another process holds, and save every byte
//! they overwrite to an undo file first (`lds undo` restores it).

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use lds_engine::{Db, Error, Options};
use lds_format::error::hex;
use lds_format::version::payload::CompactionJournal;
use lds_volume::DeviceError;
use serde_json::json;

/// What to do.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum CompactionCommand {
    /// List each unfinished compaction: id, instance, levels, inputs, outputs so far, resume
    /// key, cleaned inputs. Never writes.
    ///
    /// Example: lds compaction show volume.img --json
    Show {
        /// Block device or image file.
        path: PathBuf,
        /// Print JSON (schema lds-compaction/1).
        #[arg(long)]
        json: bool,
    },
    /// Finish the unfinished compaction of an instance now, offline, and report.
    ///
    /// Example: lds compaction resume volume.img
    Resume {
        /// Block device or image file.
        path: PathBuf,
        /// The instance.
        #[arg(long, default_value_t = 0)]
        instance: u32,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// The undo file.
        #[command(flatten)]
        undo: crate::session::UndoChoice,
    },
    /// Roll the unfinished compaction of an instance back: its outputs are freed, its inputs
    /// stay. Refused once it has cleaned an input (resume is the only safe way then).
    ///
    /// Example: lds compaction abort volume.img
    Abort {
        /// Block device or image file.
        path: PathBuf,
        /// The instance.
        #[arg(long, default_value_t = 0)]
        instance: u32,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// The undo file.
        #[command(flatten)]
        undo: crate::session::UndoChoice,
    },
}

/// Exit codes: 0 done (or nothing to do), 1 refused (abort after cleaning), 2 failure.
pub const EXIT_REFUSED: i32 = 1;
/// Exit code: the operation failed.
pub const EXIT_ERROR: i32 = 2;

fn journal_json(instance: u32, journal: &CompactionJournal) -> serde_json::Value {
    json!({
        "instance": instance,
        "compaction_id": journal.compaction_id,
        "source_level": journal.source_level,
        "target_level": journal.target_level,
        "inputs": journal.inputs,
        "outputs": journal.outputs.iter().map(|output| output.chunk_id).collect::<Vec<_>>(),
        "resume_key_hex": hex(&journal.resume_key),
        "cleaned": journal.cleaned,
    })
}

fn describe(instance: u32, journal: &CompactionJournal) -> String {
    format!(
        "instance {instance}: compaction {} from level {} to {}: {} inputs {:?}, {} outputs so far {:?}, resume after key 0x{}, {} inputs cleaned {:?}",
        journal.compaction_id,
        journal.source_level,
        journal.target_level,
        journal.inputs.len(),
        journal.inputs,
        journal.outputs.len(),
        journal.outputs.iter().map(|output| output.chunk_id).collect::<Vec<_>>(),
        hex(&journal.resume_key),
        journal.cleaned.len(),
        journal.cleaned
    )
}

fn open_error(error: &Error) -> String {
    match error {
        Error::Device(DeviceError::Locked { .. }) => format!("{error}; refusing a volume in use"),
        _ => error.to_string(),
    }
}

/// Runs a `compaction` command; returns the exit code.
pub fn run(command: &CompactionCommand, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match command {
        CompactionCommand::Show { path, json } => show(path, *json, out, err),
        CompactionCommand::Resume { path, instance, json, undo } => {
            change(path, *instance, *json, false, undo, out, err)
        }
        CompactionCommand::Abort { path, instance, json, undo } => change(path, *instance, *json, true, undo, out, err),
    }
}

fn show(path: &std::path::Path, json_output: bool, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let volume = match lds_volume::Volume::open(path, Duration::ZERO) {
        Ok(volume) => volume,
        Err(error) => {
            let _ = writeln!(err, "lds compaction show: {error}");
            return EXIT_ERROR;
        }
    };
    let geometry = *volume.geometry();
    let mut found = Vec::new();
    for instance in 0..geometry.instance_count {
        match lds_volume::inspect::recover(&volume.device, &geometry, instance) {
            Ok((_, Ok(recovery))) => {
                found.extend(
                    recovery.version_log.unfinished_compactions.into_values().map(|journal| (instance, journal)),
                );
            }
            Ok((_, Err(error))) => {
                let _ = writeln!(err, "lds compaction show: {}: instance {instance}: {error}", path.display());
                return EXIT_ERROR;
            }
            Err(error) => {
                let _ = writeln!(err, "lds compaction show: {error}");
                return EXIT_ERROR;
            }
        }
    }
    if json_output {
        let document = json!({
            "schema": "lds-compaction/1",
            "device": path.display().to_string(),
            "unfinished": found.iter().map(|(instance, journal)| journal_json(*instance, journal)).collect::<Vec<_>>(),
        });
        let _ = writeln!(out, "{document}");
    } else if found.is_empty() {
        let _ = writeln!(out, "{}: no unfinished compaction", path.display());
    } else {
        for (instance, journal) in &found {
            let _ = writeln!(out, "{}", describe(*instance, journal));
        }
    }
    0
}

fn change(
    path: &std::path::Path,
    instance: u32,
    json_output: bool,
    abort: bool,
    undo: &crate::session::UndoChoice,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let verb = if abort { "abort" } else { "resume" };
    let command = format!("compaction {verb}");
    let mut session = match crate::session::open(path, &command, Duration::ZERO, err) {
        Ok(session) => session,
        Err(error) => {
            let _ = writeln!(err, "lds {command}: {}", crate::session::open_error(&error, true));
            return EXIT_ERROR;
        }
    };
    if let Err(error) = session.keep_undo(&undo.choice()) {
        let _ = writeln!(err, "lds {command}: {error}");
        return EXIT_ERROR;
    }
    let options = Options { instance, background: false, ..Options::default() };
    let db = match Db::open_device(session.shared(), path, options) {
        Ok((db, _)) => db,
        Err(error) => {
            let _ = writeln!(err, "lds compaction {verb}: {}", open_error(&error));
            return EXIT_ERROR;
        }
    };
    let journal = db.compaction_journal();
    let started = Instant::now();
    let result = if abort { db.abort_compaction() } else { db.finish_compaction() };
    let closed = db.close();
    crate::session::report_finished(&session.finish(), path, &command, err);
    let (code, message) = match (result, closed) {
        (Ok(None), Ok(())) => (0, format!("{}: instance {instance}: no unfinished compaction", path.display())),
        (Ok(Some(id)), Ok(())) => (
            0,
            format!(
                "{}: instance {instance}: compaction {id} {} in {:.2} s",
                path.display(),
                if abort { "aborted: its outputs are free, its inputs stay" } else { "resumed and finished" },
                started.elapsed().as_secs_f64()
            ),
        ),
        (Err(error @ Error::CompactionCleaned { .. }), _) => (EXIT_REFUSED, error.to_string()),
        (Err(error), _) | (_, Err(error)) => (EXIT_ERROR, error.to_string()),
    };
    if json_output {
        let document = json!({
            "schema": "lds-compaction/1",
            "device": path.display().to_string(),
            "action": verb,
            "instance": instance,
            "compaction": journal.as_ref().map(|journal| journal_json(instance, journal)),
            "exit_code": code,
            "message": message,
            "seconds": started.elapsed().as_secs_f64(),
        });
        let _ = writeln!(out, "{document}");
    } else if code == 0 {
        let _ = writeln!(out, "{message}");
    } else {
        let _ = writeln!(err, "lds compaction {verb}: {message}");
    }
    code
}
