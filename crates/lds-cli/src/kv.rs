//! Scripting commands over the engine: `put`, `get`, `delete`, `scan`, `load`, `recover`.
//!
//! Keys and values on the command line are UTF-8 text, or hex with `--hex`. JSON lines carry
//! `key`/`value` as strings when they are UTF-8 and `key_hex`/`value_hex` otherwise; `load`
//! reads the same shape.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use lds_engine::{Db, Error, Options, WriteOptions};
use lds_format::error::hex;
use lds_tools::load::{decode, escape_tsv, Batches, HexError, LoadError};
use lds_tools::SessionError;
use lds_volume::DeviceError;
use serde_json::{json, Value};

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code of `get`: no such key.
pub const EXIT_NOT_FOUND: i32 = 1;
/// Exit code: the operation failed (the message says what and where).
pub const EXIT_ERROR: i32 = 2;

/// Why a data command failed; each names what and, through the engine's errors, where.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    /// A key or value given as hex does not decode.
    #[error("{0}")]
    Hex(#[from] HexError),
    /// The engine refuses the techniques asked for.
    #[error("{0}")]
    Techniques(String),
    /// Another process holds the volume.
    #[error("{0}; try again later, or wait for it with --wait")]
    InUse(Error),
    /// The engine failed (opening, reading, writing, closing).
    #[error("{0}")]
    Engine(#[from] Error),
    /// Reading keys or writing the output failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Standard input could not be read (`lds load`).
    #[error("reading standard input: {0}")]
    StandardInput(std::io::Error),
    /// A line of input is not a key and a value (`lds load`).
    #[error("{0}")]
    Line(LoadError),
    /// A batch failed after `loaded` entries were written (`lds load`).
    #[error("after {loaded} entries: {source}")]
    Written {
        /// Entries written before.
        loaded: u64,
        /// Why.
        source: Error,
    },
    /// The session of `lds recover` could not start.
    #[error("{}", crate::session::open_error(.0, true))]
    Session(#[from] SessionError),
    /// Recovery ran, but writing what it replayed to chunks failed.
    #[error("recovered, but writing the replayed entries failed: {0}")]
    Replayed(Error),
}

/// Options common to the data commands.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// Block device or image file holding the volume.
    pub path: PathBuf,
    /// The instance to open.
    #[arg(long, default_value_t = 0)]
    pub instance: u32,
    /// Keys and values are hex strings.
    #[arg(long)]
    pub hex: bool,
    /// When another process holds the volume (a writer, or for writing commands any reader),
    /// wait for it up to this many seconds (60 when given without a value) instead of
    /// failing at once.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "60")]
    pub wait: Option<u64>,
    /// Engine techniques for the writes, NAME[,NAME] (see `lds bench --technique`):
    /// `kv-separation` keeps values of 1 KiB and more in value chunks (a volume made with
    /// `lds mkfs --value-chunks`). Reads need none: pointers are always followed.
    #[arg(long, value_name = "NAME[,NAME]", default_value = "")]
    pub technique: String,
}

impl Target {
    fn options(&self) -> Result<Options, KvError> {
        Options { instance: self.instance, ..Options::default() }
            .with_techniques(&self.technique)
            .map_err(KvError::Techniques)
    }

    fn wait(&self) -> Duration {
        Duration::from_secs(self.wait.unwrap_or(0))
    }
}

/// An error opening a volume, with the way out when another process holds it.
fn open_error(error: Error) -> KvError {
    match error {
        error @ Error::Device(DeviceError::Locked { .. }) => KvError::InUse(error),
        error => KvError::Engine(error),
    }
}

/// Opens for writing: an exclusive lock, recovery, background work.
fn open_writer(target: &Target) -> Result<Db, KvError> {
    Db::open_waiting(&target.path, target.options()?, target.wait()).map(|(db, _)| db).map_err(open_error)
}

/// Opens read-only: a shared lock, the backup log replayed into memory, nothing written.
fn open_reader(target: &Target) -> Result<Db, KvError> {
    Db::open_read_only(&target.path, target.options()?, target.wait()).map(|(db, _)| db).map_err(open_error)
}

fn render(bytes: &[u8], is_hex: bool) -> String {
    if is_hex {
        return hex(bytes);
    }
    String::from_utf8_lossy(bytes).into_owned()
}

fn fail(err: &mut dyn Write, command: &str, error: &KvError) -> i32 {
    let _ = writeln!(err, "lds {command}: {error}");
    EXIT_ERROR
}

/// Sets `key` to `value` in an open store (`value` None: deletes it) and closes the store
/// (which writes out what is buffered); fails when the write or anything the close writes out
/// fails, buffered or not (an exit status must not hide a lost write).
pub fn put_on(db: Db, key: &[u8], value: Option<&[u8]>, sync: bool) -> Result<(), KvError> {
    let options = WriteOptions { sync };
    let written = match value {
        Some(value) => db.put(key, value, options),
        None => db.delete(key, options),
    };
    let closed = db.close();
    written?;
    Ok(closed?)
}

/// `lds put`.
pub fn put(target: &Target, key: &str, value: &str, sync: bool, err: &mut dyn Write) -> i32 {
    let result = (|| {
        let key = decode(key, target.hex)?;
        let value = decode(value, target.hex)?;
        put_on(open_writer(target)?, &key, Some(&value), sync)
    })();
    result.map_or_else(|error| fail(err, "put", &error), |()| EXIT_OK)
}

/// `lds delete`.
pub fn delete(target: &Target, key: &str, sync: bool, err: &mut dyn Write) -> i32 {
    let result = (|| {
        let key = decode(key, target.hex)?;
        put_on(open_writer(target)?, &key, None, sync)
    })();
    result.map_or_else(|error| fail(err, "delete", &error), |()| EXIT_OK)
}

/// `lds get`: prints the value of one key, or `key<TAB>value` for each of several keys (from
/// the arguments, or one per line of `input` with `--stdin`). Exit 1 when any key is absent.
pub fn get(
    target: &Target,
    keys: &[String],
    input: Option<&mut dyn BufRead>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let db = match open_reader(target) {
        Ok(db) => db,
        Err(error) => return fail(err, "get", &error),
    };
    let mut lookup = |text: &str, labelled: bool, missing: &mut u64| -> Result<(), KvError> {
        let key = decode(text, target.hex)?;
        match db.get(&key)? {
            Some(value) if labelled => Ok(writeln!(out, "{text}\t{}", render(&value, target.hex))?),
            Some(value) => Ok(writeln!(out, "{}", render(&value, target.hex))?),
            None => {
                *missing += 1;
                Ok(writeln!(err, "lds get: {text}: not found")?)
            }
        }
    };
    let mut missing = 0u64;
    let labelled = keys.len() > 1 || input.is_some();
    for key in keys {
        if let Err(error) = lookup(key, labelled, &mut missing) {
            return fail(err, "get", &error);
        }
    }
    if let Some(input) = input {
        for line in input.lines() {
            let result = line.map_err(KvError::Io).and_then(|line| {
                let key = line.trim_end_matches('\r');
                if key.is_empty() {
                    Ok(())
                } else {
                    lookup(key, true, &mut missing)
                }
            });
            if let Err(error) = result {
                return fail(err, "get", &error);
            }
        }
    }
    if missing > 0 {
        EXIT_NOT_FOUND
    } else {
        EXIT_OK
    }
}

/// What `lds scan` lists.
#[derive(Debug, Clone, Default)]
pub struct ScanRange {
    /// First key (inclusive).
    pub start: Option<String>,
    /// Last key (exclusive).
    pub end: Option<String>,
    /// Only keys with this prefix.
    pub prefix: Option<String>,
    /// At most this many.
    pub limit: Option<usize>,
    /// JSON lines.
    pub json: bool,
}

/// The smallest key greater than every key with `prefix`, if any.
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// The `[start, end)` bounds a scan asks for, with a prefix turned into a range.
fn scan_bounds(target: &Target, range: &ScanRange) -> Result<(Vec<u8>, Option<Vec<u8>>), KvError> {
    let mut start = range.start.as_deref().map(|text| decode(text, target.hex)).transpose()?.unwrap_or_default();
    let mut end = range.end.as_deref().map(|text| decode(text, target.hex)).transpose()?;
    if let Some(prefix) = &range.prefix {
        let prefix = decode(prefix, target.hex)?;
        start = start.max(prefix.clone());
        end = match (end, prefix_end(&prefix)) {
            (Some(end), Some(limit)) => Some(end.min(limit)),
            (end, limit) => end.or(limit),
        };
    }
    Ok((start, end))
}

/// `lds scan`: key and value per line, tab-separated with TSV's escapes (`\t`, `\n`, `\\`,
/// `\xHH` for bytes that are not UTF-8 text) or hex, or JSON lines (`key_hex`/`value_hex`
/// for binary, or always with `--hex`). `lds load` reads each form back exactly.
pub fn scan(target: &Target, range: &ScanRange, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let opened = scan_bounds(target, range).and_then(|(start, end)| Ok((open_reader(target)?, start, end)));
    let (db, start, end) = match opened {
        Ok(opened) => opened,
        Err(error) => return fail(err, "scan", &error),
    };
    let pairs = match db.range(&start, end.as_deref()) {
        Ok(pairs) => pairs,
        Err(error) => return fail(err, "scan", &error.into()),
    };
    for pair in pairs.take(range.limit.unwrap_or(usize::MAX)) {
        let (key, value) = match pair {
            Ok(pair) => pair,
            Err(error) => return fail(err, "scan", &error.into()),
        };
        let line = match (range.json, target.hex) {
            (true, false) => crate::render::pair_json(&key, &value).to_string(),
            (true, true) => json!({ "key_hex": hex(&key), "value_hex": hex(&value) }).to_string(),
            (false, true) => format!("{}\t{}", hex(&key), hex(&value)),
            // Escaped so that `lds load` reads every byte back (docs/kv.md).
            (false, false) => format!("{}\t{}", escape_tsv(&key), escape_tsv(&value)),
        };
        if writeln!(out, "{line}").is_err() {
            break;
        }
    }
    EXIT_OK
}

/// Input format of `lds load`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LoadFormat {
    /// One JSON object per line: `{"key": .., "value": ..}` (or `key_hex`/`value_hex`).
    Ndjson,
    /// `key<TAB>value` per line.
    Tsv,
}

impl LoadFormat {
    /// The library's form.
    fn of(self) -> lds_tools::load::LoadFormat {
        match self {
            Self::Ndjson => lds_tools::load::LoadFormat::Ndjson,
            Self::Tsv => lds_tools::load::LoadFormat::Tsv,
        }
    }
}

/// Entries per write batch in `lds load` (fewer when the backup log is small).
const LOAD_BATCH_ENTRIES: usize = 1000;

/// `lds load`: reads key/value lines from `input` and writes them in batches; a progress
/// line on a terminal. Without `format`, the first non-blank line decides (NDJSON when it
/// starts with `{`, else TSV). Stops at the first bad line, naming it.
pub fn load(
    target: &Target,
    format: Option<LoadFormat>,
    sync: bool,
    input: &mut dyn BufRead,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let db = match open_writer(target) {
        Ok(db) => db,
        Err(error) => return fail(err, "load", &error),
    };
    let started = Instant::now();
    match load_into(&db, target.hex, format, sync, input) {
        Ok(loaded) => {
            if let Err(source) = db.close() {
                return fail(err, "load", &KvError::Written { loaded, source });
            }
            let _ = writeln!(out, "loaded {loaded} entries in {:.2} s", started.elapsed().as_secs_f64());
            EXIT_OK
        }
        Err(error) => {
            let _ = db.close();
            fail(err, "load", &error)
        }
    }
}

/// Loads every line of `input` into an open store (`lds_tools::load::Batches` parses and
/// gathers them) and flushes it; returns the entries loaded.
pub fn load_into(
    db: &Db,
    is_hex: bool,
    format: Option<LoadFormat>,
    sync: bool,
    input: &mut dyn BufRead,
) -> Result<u64, KvError> {
    let bar = if std::io::stderr().is_terminal() {
        indicatif::ProgressBar::new_spinner()
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} loaded {pos} entries ({per_sec}) {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    // Leave room for one more entry of the largest size the volume takes.
    let bytes_max = db.batch_len_max() / 2;
    let mut batches = Batches::new(input, format.map(LoadFormat::of), is_hex, LOAD_BATCH_ENTRIES, bytes_max);
    let mut loaded = 0u64;
    let options = WriteOptions { sync };
    for batch in &mut batches {
        let batch = batch.map_err(|error| match error {
            LoadError::Read(error) => KvError::StandardInput(error),
            error => KvError::Line(error),
        })?;
        db.write(&batch, options).map_err(|source| KvError::Written { loaded, source })?;
        loaded += batch.len() as u64;
        bar.set_position(loaded);
    }
    let batch = batches.rest();
    db.write(&batch, options).and_then(|()| db.flush()).map_err(|source| KvError::Written { loaded, source })?;
    loaded += batch.len() as u64;
    bar.finish_and_clear();
    Ok(loaded)
}

/// `lds recover`: opens the volume (running recovery), writes the replayed memtable to
/// chunks, and reports what it did.
pub fn recover(
    target: &Target,
    json_output: bool,
    undo: &crate::session::UndoChoice,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let mut session = match crate::session::open(&target.path, "recover", target.wait(), err) {
        Ok(session) => session,
        Err(error) => return fail(err, "recover", &error.into()),
    };
    if let Err(error) = session.keep_undo(&undo.choice()) {
        return fail(err, "recover", &error.into());
    }
    let options = match target.options() {
        Ok(options) => options,
        Err(error) => return fail(err, "recover", &error),
    };
    let (db, report) = match Db::open_device(session.shared(), &target.path, options) {
        Ok(opened) => opened,
        Err(error) => return fail(err, "recover", &open_error(error)),
    };
    let chunks_before = db.level_chunk_counts().iter().sum::<usize>();
    let flushed = db.flush();
    let chunks_written = db.level_chunk_counts().iter().sum::<usize>().saturating_sub(chunks_before);
    let closed = flushed.and_then(|()| db.close());
    crate::session::report_finished(&session.finish(), &target.path, "recover", err);
    if let Err(error) = closed {
        return fail(err, "recover", &KvError::Replayed(error));
    }
    if json_output {
        let mut document = crate::json::document("recover", &target.path.display().to_string());
        document.insert("instance".into(), json!(target.instance));
        document.insert("sn".into(), json!(report.sn));
        document.insert("base_offset".into(), json!(report.base_offset));
        document.insert("deltas_replayed".into(), json!(report.deltas_replayed));
        document.insert("chunks".into(), json!(report.chunks));
        document.insert("batches_replayed".into(), json!(report.batches_replayed));
        document.insert("entries_replayed".into(), json!(report.entries_replayed));
        document.insert("chunks_written".into(), json!(chunks_written));
        document.insert("last_sequence".into(), json!(report.last_sequence));
        document.insert("slots_in_use".into(), json!(report.slots_in_use));
        let _ = writeln!(out, "{}", Value::Object(document));
        return EXIT_OK;
    }
    let _ = writeln!(
        out,
        "recovered instance {}: base version sn {} at offset {} with {} delta versions, {} chunks; \
         replayed {} write batches ({} entries) from the backup log and wrote them to {} chunks; \
         last sequence {}; {} slots in use",
        target.instance,
        report.sn,
        report.base_offset,
        report.deltas_replayed,
        report.chunks,
        report.batches_replayed,
        report.entries_replayed,
        chunks_written,
        report.last_sequence,
        report.slots_in_use
    );
    EXIT_OK
}
