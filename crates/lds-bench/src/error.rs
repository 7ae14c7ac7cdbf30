//! Why a benchmark could not run: each variant names what and where (the engine and its
//! operation, the file and the offset, the option or benchmark asked for).

use std::path::PathBuf;

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// An operation of LDS failed.
    #[error("lds: {operation}: {source}")]
    Lds {
        /// The operation (`open`, `put`, `seek`, ...).
        operation: &'static str,
        /// Why.
        source: Box<lds_engine::Error>,
    },
    /// The engine failed on the full-compaction benchmark's store.
    #[error("{0}")]
    Engine(Box<lds_engine::Error>),
    /// An operation of a peer failed, in the peer's own words.
    #[error("{engine}: {operation}: {message}")]
    Peer {
        /// The peer.
        engine: &'static str,
        /// The operation.
        operation: &'static str,
        /// The peer's error.
        message: String,
    },
    /// A peer's directory path holds a NUL byte (the peer's C API cannot take it).
    #[error("{engine}: path holds a NUL")]
    NulInPath {
        /// The peer.
        engine: &'static str,
    },
    /// LDS failed on a benchmark's own volume (opening it to measure recovery, a compaction
    /// run).
    #[error("{}: {what}{source}", path.display())]
    Volume {
        /// The volume.
        path: PathBuf,
        /// What was done (`open: `), or nothing.
        what: &'static str,
        /// Why.
        source: Box<lds_engine::Error>,
    },
    /// The engine asked for is not built into this binary.
    #[error(
        "engine '{0}' is not built into this binary: build with `--features {0}` (or `peers`); tools/bench/run.sh does"
    )]
    NotBuilt(String),
    /// The engine asked for is not one this crate knows.
    #[error("unknown engine '{name}' (known: lds, {known})")]
    UnknownEngine {
        /// The name asked for.
        name: String,
        /// The peers known.
        known: String,
    },
    /// A file or directory could not be created, written, read, emptied or sized.
    #[error("{}: {what}: {source}", path.display())]
    File {
        /// The path.
        path: PathBuf,
        /// What failed (`cannot create`, ...).
        what: &'static str,
        /// Why.
        source: std::io::Error,
    },
    /// A write or flush of the device's limits failed at an offset.
    #[error("{}: {what} at offset {offset}: {source}", path.display())]
    At {
        /// The path.
        path: PathBuf,
        /// `write` or `flush`.
        what: &'static str,
        /// The offset.
        offset: u64,
        /// Why.
        source: std::io::Error,
    },
    /// A peer's directory holds data a benchmark did not leave there.
    #[error(
        "{}: a directory this benchmark did not make (no {marker} in it) and not empty; give --force to delete what it holds",
        path.display()
    )]
    NotOurs {
        /// The directory.
        path: PathBuf,
        /// The file a benchmark leaves in the directories it makes.
        marker: &'static str,
    },
    /// A peer needs a directory, and the path is something else.
    #[error("{}: a peer needs a directory", path.display())]
    PeerNeedsDirectory {
        /// The path.
        path: PathBuf,
    },
    /// An engine option given is not `NAME=VALUE`.
    #[error("--lds-option {option}: NAME=VALUE")]
    OptionSyntax {
        /// The option as given.
        option: String,
    },
    /// An engine option's value is not a number.
    #[error("--lds-option {name}={value}: not a number")]
    NotANumber {
        /// The option.
        name: String,
        /// Its value.
        value: String,
    },
    /// An engine option's value is not on or off.
    #[error("--lds-option {name}={value}: on or off")]
    NotASwitch {
        /// The option.
        name: String,
        /// Its value.
        value: String,
    },
    /// An engine option this benchmark does not know.
    #[error(
        "--lds-option {name}: one of compaction_journal, dynamic_levels, journal_min_input_slots, journal_every_outputs, level0_compaction_trigger, level0_stop_writes_trigger, technique, block_size, pinned_levels, tail_cache_bytes, search_threads, search_always_parallel"
    )]
    UnknownOption {
        /// The option.
        name: String,
    },
    /// The engine refuses the techniques asked for.
    #[error("{0}")]
    Techniques(String),
    /// No benchmark was asked for.
    #[error("no benchmarks given")]
    NoBenchmarks,
    /// A benchmark this crate does not know.
    #[error("unknown benchmark '{name}' (known: {known})")]
    UnknownBenchmark {
        /// The name asked for.
        name: String,
        /// The benchmarks known.
        known: &'static str,
    },
    /// A YCSB workload this crate does not know.
    #[error("unknown YCSB workload '{0}'")]
    UnknownYcsb(char),
    /// A YCSB workload run before its records were loaded.
    #[error("ycsb-{0} needs loaded records: run ycsb-load first")]
    NeedsLoad(char),
    /// The value sizes asked for are not in order, or too large.
    #[error("values from {min} to {max} bytes: need value-min <= value-max <= 64 MiB")]
    ValueSizes {
        /// The smallest asked for.
        min: usize,
        /// The largest asked for.
        max: usize,
    },
    /// A block device's statistics are not there.
    #[error("{}: no such block device statistics", path.display())]
    NoBlockStat {
        /// The stat file.
        path: PathBuf,
    },
    /// A block device's statistics could not be read.
    #[error("{}: {source}", path.display())]
    BlockStat {
        /// The stat file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A block device's statistics have too few fields.
    #[error("{}: expected at least 11 fields, found {found}", path.display())]
    BlockStatFields {
        /// The stat file.
        path: PathBuf,
        /// The fields found.
        found: usize,
    },
    /// The device failed.
    #[error("{0}")]
    Device(#[from] lds_volume::DeviceError),
    /// An image could not be built.
    #[error("{0}")]
    Format(#[from] lds_format::FormatError),
    /// A version could not be appended to an image.
    #[error("{0}")]
    Append(lds_format::algorithms::writer::AppendError),
    /// The volume could not be formatted.
    #[error("{0}")]
    Mkfs(#[from] lds_tools::mkfs::MkfsError),
    /// The path holds data a benchmark may not replace without `--force`.
    #[error("{0}")]
    Refused(#[from] lds_volume::safety::SafetyError),
    /// The full-compaction benchmark's image file exists already.
    #[error("{}: exists; give a new image file path", path.display())]
    Exists {
        /// The path.
        path: PathBuf,
    },
    /// Copying an image failed.
    #[error("{} -> {}: {source}", from.display(), to.display())]
    Copy {
        /// The source.
        from: PathBuf,
        /// The copy.
        to: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The crashing child of the full-compaction benchmark could not be started.
    #[error("{0}")]
    Child(std::io::Error),
    /// After a crash and a resume the store does not hold what it held.
    #[error(
        "{}: after the crash and resume the store holds {} entries (digest {:016x}), not the {} (digest {:016x}) it held",
        path.display(), found.0, found.1, held.0, held.1
    )]
    Content {
        /// The store.
        path: PathBuf,
        /// Entries and digest found.
        found: (u64, u64),
        /// Entries and digest it held.
        held: (u64, u64),
    },
    /// Writing the report failed.
    #[error("{0}")]
    Output(#[from] std::io::Error),
}

impl BenchError {
    /// The engine failing on the full-compaction benchmark's store.
    pub fn engine(source: lds_engine::Error) -> Self {
        Self::Engine(Box::new(source))
    }

    /// A failed operation of LDS.
    pub fn lds(operation: &'static str) -> impl FnOnce(lds_engine::Error) -> Self {
        move |source| Self::Lds { operation, source: Box::new(source) }
    }

    /// A failed operation of a peer.
    pub fn peer(engine: &'static str, operation: &'static str) -> impl FnOnce(String) -> Self {
        move |message| Self::Peer { engine, operation, message }
    }

    /// A file operation that failed on `path`.
    pub fn file(path: &std::path::Path, what: &'static str) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::File { path, what, source }
    }
}
