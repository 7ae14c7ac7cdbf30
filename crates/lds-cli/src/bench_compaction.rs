//! `lds bench --full-compaction`: what journaled compactions buy on one large merge (SPEC.md
//! §12, SifrDB §4.2). The volume (an image file) is filled with random keys and compacted to
//! its last level; then the last level is rewritten whole (a bottommost manual compaction: one
//! merge of every live chunk, whose inputs have narrow, disjoint key ranges):
//! 1. without the journal and with it: the most slots in use at once (the engine's count)
//!    against the live slots (early cleaning's space claim), and the time of the merge;
//! 2. with the journal, in a child process that aborts itself (as kill -9 would) once half the
//!    merge's journal records are durable; then the time to open and resume the rest, against
//!    the time of the whole merge (what a crash costs without the journal: redoing it).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lds_bench::gen::{key, Rng};
use lds_engine::{Db, Options, WriteBatch, WriteOptions};
use serde_json::json;

/// Rounds of each rewrite (the median is reported).
const ROUNDS: usize = 3;

/// One rewrite of the last level.
struct Rewrite {
    seconds: f64,
    live_slots: u64,
    peak_slots: u64,
    journal_records: u64,
    outputs: u64,
}

fn options(journal: bool) -> Options {
    Options { compaction_journal: journal, ..Options::default() }
}

/// Copies the prepared image and makes the copy durable, so that no run pays for writing back
/// the copy's pages.
fn copy(from: &Path, to: &Path) -> Result<(), String> {
    let fail = |error: std::io::Error| format!("{} -> {}: {error}", from.display(), to.display());
    std::fs::copy(from, to).map_err(fail)?;
    std::fs::File::open(to).and_then(|file| file.sync_all()).map_err(fail)
}

/// The median of the rounds' rewrites (by time); the peak is the largest of all rounds.
fn median(mut rounds: Vec<Rewrite>) -> Rewrite {
    let peak = rounds.iter().map(|rewrite| rewrite.peak_slots).max().unwrap_or(0);
    rounds.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let mut middle = rounds.swap_remove(rounds.len() / 2);
    middle.peak_slots = peak;
    middle
}

/// The number of live entries and a digest of them (FNV-1a over keys and values in order):
/// the resumed merge must leave the store's content as it was.
fn content(db: &Db) -> Result<(u64, u64), String> {
    let (mut count, mut digest) = (0u64, 0xcbf2_9ce4_8422_2325u64);
    for entry in db.iter().map_err(|error| error.to_string())? {
        let (key, value) = entry.map_err(|error| error.to_string())?;
        count += 1;
        for byte in key.iter().chain(&(value.len() as u64).to_le_bytes()).chain(&value) {
            digest = (digest ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    Ok((count, digest))
}

/// Fills `path` with `num` random entries and compacts everything to the last level.
fn prepare(path: &Path, num: u64, value_len: usize) -> Result<(u64, (u64, u64)), String> {
    let db = Db::open(path, Options::default()).map_err(|error| error.to_string())?;
    let mut rng = Rng::new(1);
    let mut batch = WriteBatch::new();
    let mut bytes = [0u8; 16];
    for index in 0..num {
        key(rng.below(num), &mut bytes);
        let value = vec![b'a' + (index % 26) as u8; value_len];
        batch.put(&bytes, &value);
        if batch.len() >= 1000 {
            db.write(&batch, WriteOptions::default()).map_err(|error| error.to_string())?;
            batch = WriteBatch::new();
        }
    }
    db.write(&batch, WriteOptions::default()).map_err(|error| error.to_string())?;
    db.compact_range().map_err(|error| error.to_string())?;
    let slots = db.slots_in_use();
    let content = content(&db)?;
    db.close().map_err(|error| error.to_string())?;
    Ok((slots, content))
}

/// Rewrites the last level (one merge); the engine counts the most slots in use at once.
fn rewrite(path: &Path, journal: bool) -> Result<Rewrite, String> {
    let db = Db::open(path, options(journal)).map_err(|error| error.to_string())?;
    let live_slots = db.slots_in_use();
    let started = Instant::now();
    db.compact_range().map_err(|error| error.to_string())?;
    let seconds = started.elapsed().as_secs_f64();
    let stats = db.stats();
    db.close().map_err(|error| error.to_string())?;
    Ok(Rewrite {
        seconds,
        live_slots,
        peak_slots: stats.peak_slots_in_use,
        journal_records: stats.journal_records,
        outputs: stats.merge_outputs,
    })
}

/// The child's part: rewrite the last level with the journal and abort the process (no
/// cleanup, as kill -9) once `records` journal records are durable.
pub fn crash_child(path: &Path, records: u64) -> ! {
    let db = match Db::open(path, options(true)) {
        Ok(db) => Arc::new(db),
        Err(error) => {
            eprintln!("lds bench: crash child: {error}");
            std::process::exit(2);
        }
    };
    let watcher = Arc::clone(&db);
    std::thread::spawn(move || {
        // Bounded by the merge: it aborts the process at the given record, or the merge ends.
        loop {
            if watcher.stats().journal_records >= records {
                std::process::abort();
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    });
    let _ = db.compact_range();
    eprintln!("lds bench: crash child: the merge ended before {records} journal records");
    std::process::exit(3);
}

/// Runs the benchmark on image file `path` (created, `size` bytes).
#[expect(clippy::too_many_arguments, reason = "the benchmark's knobs, from `lds bench`'s options")]
pub fn run(
    path: &Path,
    size: u64,
    slot_size: u64,
    num: u64,
    value_len: usize,
    format: &dyn Fn(&Path) -> Result<(), String>,
    json_output: bool,
    out: &mut dyn Write,
) -> Result<(), String> {
    if path.exists() {
        return Err(format!("{}: exists; give a new image file path", path.display()));
    }
    format(path)?;
    let (prepared_slots, prepared_content) = prepare(path, num, value_len)?;
    let scratch = PathBuf::from(format!("{}.run", path.display()));
    // Alternating rounds, so that neither side always runs first (or after the other).
    let (mut plain_rounds, mut journaled_rounds) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS * 2 {
        let journal = round % 2 == 1;
        copy(path, &scratch)?;
        let result = rewrite(&scratch, journal)?;
        if journal {
            journaled_rounds.push(result)
        } else {
            plain_rounds.push(result)
        }
    }
    let (plain, journaled) = (&median(plain_rounds), &median(journaled_rounds));
    // The crash: half the records of the journaled rewrite.
    let crash_at = (journaled.journal_records / 2).max(1);
    copy(path, &scratch)?;
    let exe = std::env::current_exe().map_err(|error| error.to_string())?;
    let status = std::process::Command::new(exe)
        .arg("bench")
        .arg("--compaction-crash-child")
        .arg(crash_at.to_string())
        .arg(&scratch)
        .status()
        .map_err(|error| error.to_string())?;
    let crashed = !status.success();
    let started = Instant::now();
    let db = Db::open(&scratch, Options { background: false, ..options(true) }).map_err(|error| error.to_string())?;
    let unfinished = db.compaction_journal();
    let resumed = db.finish_compaction().map_err(|error| error.to_string())?;
    let resume_seconds = started.elapsed().as_secs_f64();
    let resumed_content = content(&db)?;
    db.close().map_err(|error| error.to_string())?;
    if resumed_content != prepared_content {
        return Err(format!(
            "{}: after the crash and resume the store holds {} entries (digest {:016x}), not the {} (digest {:016x}) it held",
            scratch.display(),
            resumed_content.0,
            resumed_content.1,
            prepared_content.0,
            prepared_content.1
        ));
    }
    let _ = std::fs::remove_file(&scratch);
    let persisted = unfinished.as_ref().map_or(0, |journal| journal.outputs.len());
    let slot_mib = slot_size as f64 / f64::from(1 << 20);
    if json_output {
        let rewrite_json = |rewrite: &Rewrite| {
            json!({
                "seconds": rewrite.seconds,
                "live_slots": rewrite.live_slots,
                "peak_slots": rewrite.peak_slots,
                "extra_slots": rewrite.peak_slots - rewrite.live_slots,
                "journal_records": rewrite.journal_records,
                "outputs": rewrite.outputs,
            })
        };
        let document = json!({
            "schema": "lds-bench-compaction/1",
            "path": path.display().to_string(),
            "size": size,
            "slot_size": slot_size,
            "entries": num,
            "live_entries": prepared_content.0,
            "value_bytes": value_len,
            "slots_after_fill": prepared_slots,
            "without_journal": rewrite_json(plain),
            "with_journal": rewrite_json(journaled),
            "crash": {
                "after_records": crash_at,
                "process_aborted": crashed,
                "outputs_persisted": persisted,
                "resumed_compaction_id": resumed,
                "resume_seconds": resume_seconds,
                "redo_seconds": plain.seconds,
                "content_verified": true,
            },
        });
        let _ = writeln!(out, "{}", serde_json::to_string_pretty(&document).unwrap_or_default());
        return Ok(());
    }
    let _ = writeln!(
        out,
        "rewrite of the last level: {} live slots of {slot_mib} MiB ({} entries of {value_len} bytes; median of {ROUNDS} rounds)",
        plain.live_slots, num
    );
    for (name, rewrite) in [("without journal", plain), ("with journal", journaled)] {
        let _ = writeln!(
            out,
            "  {name:16} {:6.2} s, peak {} slots in use ({} beyond the live ones), {} outputs, {} journal records",
            rewrite.seconds,
            rewrite.peak_slots,
            rewrite.peak_slots - rewrite.live_slots,
            rewrite.outputs,
            rewrite.journal_records
        );
    }
    let _ = writeln!(
        out,
        "  crash after {crash_at} records ({}): {persisted} outputs persisted; open and resume {:.2} s against redoing the merge {:.2} s; all {} entries read back",
        if crashed { "process aborted" } else { "the merge ended first" },
        resume_seconds,
        plain.seconds,
        prepared_content.0
    );
    Ok(())
}
