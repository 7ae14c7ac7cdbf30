//! Guards `lds compaction show|resume|abort` and the engine's journaled compactions end to end
//! (SPEC.md §12): the d_journal fixture reads through the redirection of its unfinished
//! compaction, refuses an abort (it cleaned an input), resumes, and is then fsck-clean with
//! the same contents and no unfinished compaction; a volume a crash left right after a journal
//! record that cleaned nothing aborts cleanly; and the writing subcommands refuse a volume in
//! use.

use std::path::{Path, PathBuf};
use std::time::Duration;

use lds_cli::compaction::{run, CompactionCommand, EXIT_ERROR, EXIT_REFUSED};
use lds_cli::kv::{self, ScanRange, Target, EXIT_OK};
use lds_engine::{Db, Options};
use lds_sim::sim_device::{apply, Event};
use lds_volume::MemoryImage;

struct Image(PathBuf);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn image(name: &str, bytes: &[u8]) -> Image {
    let path = std::env::temp_dir().join(format!("lds-compaction-{}-{name}.img", std::process::id()));
    std::fs::write(&path, bytes).unwrap_or_else(|error| panic!("{error}"));
    Image(path)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn command(command: CompactionCommand) -> (i32, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(&command, &mut out, &mut err);
    (code, text(&out), text(&err))
}

fn scan(path: &Path) -> String {
    let target = Target { path: path.to_path_buf(), instance: 0, hex: false, wait: None, technique: String::new() };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(kv::scan(&target, &ScanRange::default(), &mut out, &mut err), EXIT_OK, "{}", text(&err));
    text(&out)
}

fn fsck_lines(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap_or_else(|error| panic!("{error}"));
    let report = lds_check::check(
        &MemoryImage(&bytes),
        lds_check::CheckOptions { deep: true, ..Default::default() },
        &mut |_, _| {},
    )
    .unwrap_or_else(|error| panic!("{error}"));
    report.problems.iter().map(lds_check::Problem::line).collect()
}

#[test]
fn the_journal_fixture_reads_refuses_an_abort_resumes_and_ends_clean() {
    let fixture = image("fixture", &lds_fixtures::load("d_journal"));
    let path = fixture.0.clone();
    let (code, out, _) = command(CompactionCommand::Show { path: path.clone(), json: true });
    assert_eq!(code, 0);
    let shown: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|error| panic!("{error}: {out}"));
    assert_eq!(shown["unfinished"][0]["compaction_id"], 1, "{out}");
    assert_eq!(shown["unfinished"][0]["cleaned"], serde_json::json!([3]), "{out}");
    let before = scan(&path);
    assert!(before.lines().count() > 40, "{before}");
    let (code, _, err) =
        command(CompactionCommand::Abort { path: path.clone(), instance: 0, json: false, undo: no_undo() });
    assert_eq!(code, EXIT_REFUSED, "{err}");
    assert!(err.contains("only resuming it is safe"), "{err}");
    let (code, out, err) =
        command(CompactionCommand::Resume { path: path.clone(), instance: 0, json: false, undo: no_undo() });
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("compaction 1 resumed and finished"), "{out}");
    assert_eq!(scan(&path), before, "the resumed compaction changed what reads return");
    let lines = fsck_lines(&path);
    assert!(lines.iter().all(|line| line.starts_with('I') && !line.starts_with("I603")), "{lines:#?}");
    let (_, out, _) = command(CompactionCommand::Show { path: path.clone(), json: false });
    assert!(out.contains("no unfinished compaction"), "{out}");
    let (code, out, _) = command(CompactionCommand::Resume { path, instance: 0, json: false, undo: no_undo() });
    assert_eq!(code, 0);
    assert!(out.contains("no unfinished compaction"), "{out}");
}

/// The durable image of the simulator's journal workload at the first flush after which a
/// journal record that cleaned nothing is live.
fn crash_after_a_record_that_cleaned_nothing() -> Vec<u8> {
    let workload = lds_sim::workload::named("journal").unwrap_or_else(|| panic!("journal"));
    let image = lds_sim::workload::formatted_image().unwrap_or_else(|error| panic!("{error}"));
    let run = lds_sim::workload::run(&workload, image, true).unwrap_or_else(|error| panic!("{error}"));
    let mut durable = run.history.initial.as_ref().clone();
    let mut pending = Vec::new();
    for event in &run.history.events {
        match event {
            Event::Write(index) => pending.push(*index),
            Event::Flush(made) => {
                for &index in pending.iter().filter(|index| made.contains(index)) {
                    apply(&mut durable, &run.history.writes[index], run.sector_size, None);
                }
                pending.retain(|index| !made.contains(index));
                let labels = lds_volume::read_labels(&MemoryImage(&durable)).unwrap_or_else(|error| panic!("{error}"));
                let Ok((_, label)) = labels.choose() else { continue };
                let Ok((_, Ok(recovery))) = lds_volume::inspect::recover(&MemoryImage(&durable), &label.geometry, 0)
                else {
                    continue;
                };
                if recovery.version_log.unfinished_compactions.values().any(|journal| journal.cleaned.is_empty()) {
                    return durable;
                }
            }
        }
    }
    panic!("the journal workload never left a record that cleaned nothing")
}

#[test]
fn a_compaction_that_cleaned_nothing_aborts_and_frees_its_outputs() {
    let crashed = image("abort", &crash_after_a_record_that_cleaned_nothing());
    let path = crashed.0.clone();
    let before = scan(&path);
    let (code, out, _) = command(CompactionCommand::Show { path: path.clone(), json: true });
    assert_eq!(code, 0);
    let shown: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|error| panic!("{error}: {out}"));
    let outputs = shown["unfinished"][0]["outputs"].as_array().map_or(0, Vec::len);
    assert!(outputs >= 1, "{out}");
    let (code, out, err) =
        command(CompactionCommand::Abort { path: path.clone(), instance: 0, json: false, undo: no_undo() });
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("aborted"), "{out}");
    assert_eq!(scan(&path), before, "aborting changed what reads return");
    let lines = fsck_lines(&path);
    assert!(lines.iter().all(|line| line.starts_with('I') && !line.starts_with("I603")), "{lines:#?}");
    // The aborted compaction's outputs are free again: the online map no longer holds them.
    let db = Db::open(&path, Options::default()).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(db.unfinished_compaction(), None);
    drop(db);
}

#[test]
fn resume_and_abort_refuse_a_volume_in_use() {
    let fixture = image("in-use", &lds_fixtures::load("d_journal"));
    let path = fixture.0.clone();
    let (held, _) =
        Db::open_read_only(&path, Options::default(), Duration::ZERO).unwrap_or_else(|error| panic!("{error}"));
    for abort in [false, true] {
        let command_to_run = if abort {
            CompactionCommand::Abort { path: path.clone(), instance: 0, json: false, undo: no_undo() }
        } else {
            CompactionCommand::Resume { path: path.clone(), instance: 0, json: false, undo: no_undo() }
        };
        let (code, _, err) = command(command_to_run);
        assert_eq!(code, EXIT_ERROR);
        assert!(
            err.contains("in use by another process") && err.contains("refusing to write to a volume in use"),
            "{err}"
        );
    }
    // Reading while it is held works, through the redirection.
    assert!(!scan(&path).is_empty());
    drop(held);
}

fn no_undo() -> lds_cli::session::UndoChoice {
    lds_cli::session::UndoChoice { undo_file: None, no_undo: true }
}

#[test]
fn a_resume_saves_an_undo_file_that_restores_the_volume_byte_for_byte() {
    let fixture = image("undo", &lds_fixtures::load("d_journal"));
    let path = fixture.0.clone();
    let original = std::fs::read(&path).unwrap_or_default();
    let undo_file = path.with_extension("img.lds-undo");
    let _ = std::fs::remove_file(&undo_file);
    let undo = lds_cli::session::UndoChoice { undo_file: None, no_undo: false };
    let (code, out, err) = command(CompactionCommand::Resume { path: path.clone(), instance: 0, json: false, undo });
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("resumed and finished"), "{out}");
    assert!(err.contains("lds undo"), "the undo file is named: {err}");
    assert!(undo_file.exists(), "no undo file at {}", undo_file.display());
    assert!(std::fs::read(&path).unwrap_or_default() != original, "the resume wrote nothing");
    // A second run finds nothing to resume: it is not refused for the first run's undo file
    // (issue 41), writes nothing, and leaves that file as it was and no other.
    let resumed = std::fs::read(&path).unwrap_or_default();
    let first_undo = std::fs::read(&undo_file).unwrap_or_default();
    let undo = lds_cli::session::UndoChoice { undo_file: None, no_undo: false };
    let (code, _, err) = command(CompactionCommand::Resume { path: path.clone(), instance: 0, json: false, undo });
    assert_eq!(code, 0, "{err}");
    assert!(std::fs::read(&path).unwrap_or_default() == resumed, "the second run wrote");
    assert!(std::fs::read(&undo_file).unwrap_or_default() == first_undo, "the first undo file changed");
    let directory = path.parent().unwrap_or(std::path::Path::new("."));
    let stem = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let others = std::fs::read_dir(directory)
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| {
                    name.starts_with(&stem) && name.ends_with(".lds-undo") && *name != format!("{stem}.lds-undo")
                })
                .count()
        })
        .unwrap_or(0);
    assert_eq!(others, 0, "a run that wrote nothing left an undo file");
    let args =
        lds_cli::undo::UndoArgs { undo_file: undo_file.clone(), path: path.clone(), force: false, dry_run: false };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(lds_cli::undo::run(&args, &mut out, &mut err), 0, "{}", text(&err));
    assert!(std::fs::read(&path).unwrap_or_default() == original, "undo did not restore the volume byte for byte");
    let _ = std::fs::remove_file(&undo_file);
}
