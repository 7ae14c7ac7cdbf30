//! `lds bench --full-compaction`: what journaled compactions buy on one large merge (SPEC.md
//! §12, SifrDB §4.2). The volume (an image file) is filled with random keys and compacted to
//! its last level; then the last level is rewritten whole (a bottommost manual compaction: one
//! merge of every live chunk, whose inputs have narrow, disjoint key ranges):
//! 1. without the journal and with it: the most slots in use at once (the engine's count)
//!    against the live slots (early cleaning's space claim), and the time of the merge;
//! 2. with the journal, in a child process that aborts itself (as kill -9 would) once half the
//!    merge's journal records are durable; then the time to open and resume the rest, against
//!    the time of the whole merge (what a crash costs without the journal: redoing it).

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lds_engine::{Db, Options, WriteBatch, WriteOptions};

use crate::error::BenchError;
use crate::gen::{key, Rng};

/// Rounds of each rewrite (the median is reported).
pub const ROUNDS: usize = 3;

/// One rewrite of the last level.
#[derive(Debug, Clone, Copy)]
pub struct Rewrite {
    /// Seconds the merge took.
    pub seconds: f64,
    /// Slots in use before it.
    pub live_slots: u64,
    /// The most slots in use at once during it.
    pub peak_slots: u64,
    /// Journal records it wrote.
    pub journal_records: u64,
    /// Output chunks it wrote.
    pub outputs: u64,
}

/// What the benchmark measured.
#[derive(Debug, Clone, Copy)]
pub struct FullCompaction {
    /// Slots in use after the fill and the first compaction.
    pub slots_after_fill: u64,
    /// Live entries after the fill.
    pub live_entries: u64,
    /// The rewrite without the journal (median of the rounds, the peak of all).
    pub plain: Rewrite,
    /// The rewrite with the journal.
    pub journaled: Rewrite,
    /// The journal records after which the child aborted itself.
    pub crash_at: u64,
    /// Whether the child aborted (else the merge ended first).
    pub crashed: bool,
    /// Outputs the journal had persisted at the crash.
    pub persisted: usize,
    /// The compaction the resume finished.
    pub resumed: Option<u64>,
    /// Seconds to open and resume.
    pub resume_seconds: f64,
}

fn options(journal: bool) -> Options {
    Options { compaction_journal: journal, ..Options::default() }
}

/// Copies the prepared image and makes the copy durable, so that no run pays for writing back
/// the copy's pages.
fn copy(from: &Path, to: &Path) -> Result<(), BenchError> {
    let fail = |source: std::io::Error| BenchError::Copy { from: from.to_path_buf(), to: to.to_path_buf(), source };
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
fn content(db: &Db) -> Result<(u64, u64), BenchError> {
    let (mut count, mut digest) = (0u64, 0xcbf2_9ce4_8422_2325u64);
    for entry in db.iter().map_err(BenchError::engine)? {
        let (key, value) = entry.map_err(BenchError::engine)?;
        count += 1;
        for byte in key.iter().chain(&(value.len() as u64).to_le_bytes()).chain(&value) {
            digest = (digest ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    Ok((count, digest))
}

/// Fills `path` with `num` random entries and compacts everything to the last level.
fn prepare(path: &Path, num: u64, value_len: usize) -> Result<(u64, (u64, u64)), BenchError> {
    let db = Db::open(path, Options::default()).map_err(BenchError::engine)?;
    let mut rng = Rng::new(1);
    let mut batch = WriteBatch::new();
    let mut bytes = [0u8; 16];
    for index in 0..num {
        key(rng.below(num), &mut bytes);
        let value = vec![b'a' + (index % 26) as u8; value_len];
        batch.put(&bytes, &value);
        if batch.len() >= 1000 {
            db.write(&batch, WriteOptions::default()).map_err(BenchError::engine)?;
            batch = WriteBatch::new();
        }
    }
    db.write(&batch, WriteOptions::default()).map_err(BenchError::engine)?;
    db.compact_range().map_err(BenchError::engine)?;
    let slots = db.slots_in_use();
    let content = content(&db)?;
    db.close().map_err(BenchError::engine)?;
    Ok((slots, content))
}

/// Rewrites the last level (one merge); the engine counts the most slots in use at once.
fn rewrite(path: &Path, journal: bool) -> Result<Rewrite, BenchError> {
    let db = Db::open(path, options(journal)).map_err(BenchError::engine)?;
    let live_slots = db.slots_in_use();
    let started = Instant::now();
    db.compact_range().map_err(BenchError::engine)?;
    let seconds = started.elapsed().as_secs_f64();
    let stats = db.stats();
    db.close().map_err(BenchError::engine)?;
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

/// Runs the benchmark on image file `path`: `format` makes the volume (`path` must not exist),
/// `num` random entries of `value_len` bytes fill it, and `crash_child` runs the crashing child
/// (`crash_child` in a new process) on a copy, after the given number of journal records.
pub fn run(
    path: &Path,
    num: u64,
    value_len: usize,
    format: &dyn Fn(&Path) -> Result<(), BenchError>,
    crash_child: &dyn Fn(&Path, u64) -> std::io::Result<ExitStatus>,
) -> Result<FullCompaction, BenchError> {
    if path.exists() {
        return Err(BenchError::Exists { path: path.to_path_buf() });
    }
    format(path)?;
    let (slots_after_fill, prepared_content) = prepare(path, num, value_len)?;
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
    let (plain, journaled) = (median(plain_rounds), median(journaled_rounds));
    // The crash: half the records of the journaled rewrite.
    let crash_at = (journaled.journal_records / 2).max(1);
    copy(path, &scratch)?;
    let status = crash_child(&scratch, crash_at).map_err(BenchError::Child)?;
    let crashed = !status.success();
    let started = Instant::now();
    let db = Db::open(&scratch, Options { background: false, ..options(true) }).map_err(BenchError::engine)?;
    let unfinished = db.compaction_journal();
    let resumed = db.finish_compaction().map_err(BenchError::engine)?;
    let resume_seconds = started.elapsed().as_secs_f64();
    let resumed_content = content(&db)?;
    db.close().map_err(BenchError::engine)?;
    if resumed_content != prepared_content {
        return Err(BenchError::Content { path: scratch, found: resumed_content, held: prepared_content });
    }
    let _ = std::fs::remove_file(&scratch);
    Ok(FullCompaction {
        slots_after_fill,
        live_entries: prepared_content.0,
        plain,
        journaled,
        crash_at,
        crashed,
        persisted: unfinished.as_ref().map_or(0, |journal| journal.outputs.len()),
        resumed,
        resume_seconds,
    })
}
