//! Command-line parsing (clap derive); the doc comments are the help text.

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::bench::BenchOptions;
use crate::crashtest::CrashtestOptions;
use crate::dump::{DumpOptions, DumpWhat};
use crate::fsck::FsckOptions;
use crate::kv::{LoadFormat, ScanRange, Target};
use crate::mkfs::MkfsOptions;

/// LDS: an LSM-tree key-value store directly on a block device or image file.
#[derive(Debug, Parser)]
#[command(name = "lds", version, about, long_about = None)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Format a block device or image file as an LDS volume.
    ///
    /// An image file that does not exist is created and pre-allocated (give --size). mkfs
    /// refuses a device that holds an LDS volume or another known signature unless --force,
    /// and reads back what it wrote before it reports success.
    ///
    /// Defaults (SPEC.md §3): 4096-byte sectors, 64 MiB version log, 16 MiB backup log and
    /// 4 MiB slots, scaled down for volumes below 4 GiB.
    ///
    /// Example: lds mkfs --size 1GiB volume.img
    #[command(verbatim_doc_comment)]
    Mkfs(MkfsOptions),
    /// Check a volume completely, read-only.
    ///
    /// Labels, both logs of every instance, every chunk the trees reference (footer, index,
    /// filter, every block's checksum, key order and range; with --deep the digest (xxh3-128,
    /// blake3 for chunks written before format 1.3) and every key against its filter), value
    /// chunks and pointers, the online map and the compaction journal. One line per
    /// problem with a stable code (E errors, W warnings, I info), then a summary.
    /// Exit codes as fsck(8): 0 clean, 4 errors left uncorrected, 8 operational error,
    /// 16 usage error. Refuses a volume another process holds unless --force-readonly.
    ///
    /// Example: lds fsck --deep volume.img
    #[command(verbatim_doc_comment)]
    Fsck(FsckOptions),
    /// Repair a volume offline: -n reports, -p fixes what loses no data, -y fixes everything.
    ///
    /// Checks the volume as fsck --deep does, then rebuilds each damaged instance from what is
    /// still readable: damaged chunks keep their readable blocks, a damaged version log is
    /// rebuilt from its last good base version and the chunks in the slots, a damaged backup
    /// log keeps every batch before the damage. Each fix names its problem code, what it
    /// changed and what data it dropped. The new state is switched to by one sector write, so
    /// a crash leaves the old state or the new one; before its first write repair saves
    /// every byte it overwrites to an undo file (lds undo restores them).
    /// Exit codes as e2fsck: 0 nothing to fix, 1 errors corrected, 4 errors left,
    /// 8 operational error, 16 usage error. Refuses a volume another process holds.
    ///
    /// Examples:
    ///   lds repair -n volume.img
    ///   lds repair -y volume.img
    #[command(verbatim_doc_comment)]
    Repair(crate::repair::RepairArgs),
    /// Restore a volume from the undo file a writing tool left (e2undo).
    ///
    /// Verifies the whole undo file first (a file truncated or damaged since it was written is
    /// refused, nothing written), checks that the device is the one recorded and that every
    /// sector the tool wrote holds either its original bytes or bytes the tool wrote (else
    /// refuses: something else changed the volume since), then writes the original bytes
    /// back. Safe to run again after a crash. -n prints what it would restore and writes
    /// nothing; --force restores anyway, from a damaged file only the records that verify.
    /// Exit 0 restored, 1 refused (nothing written) or forced and only part restored, 8 could
    /// not run.
    ///
    /// Examples:
    ///   lds undo -n volume.img.lds-undo volume.img
    ///   lds undo volume.img.lds-undo volume.img
    #[command(verbatim_doc_comment)]
    Undo(crate::undo::UndoArgs),
    /// Grow or shrink a volume offline.
    ///
    /// Grows or shrinks the slot area; an image file is extended first, a block device must
    /// already be long enough. Shrinking first moves the chunks in the removed slots below the
    /// new end. The labels switch by one sector write, so a crash leaves the old or the new
    /// geometry with every committed key; run lds resize again to finish. --dry-run prints
    /// the plan, --min the smallest size. Saves an undo file before writing (lds undo).
    /// A shrunk image file is truncated only with --no-undo. Exit 0 done, 1 refused, 8
    /// operational error, 16 usage error. Refuses a volume in use.
    ///
    /// Examples:
    ///   lds resize --min volume.img
    ///   lds resize --size 2GiB volume.img
    #[command(verbatim_doc_comment)]
    Resize(crate::resize::ResizeArgs),
    /// A volume on several devices: add a device, remove one, list them.
    ///
    /// A volume spans up to 7 devices (block devices or image files, SPEC.md §4.3); the first
    /// holds the labels' authority and every log, the others hold slots. Every command takes
    /// any device of the volume and finds the others by their labels among the files beside
    /// it, the block devices of /proc/partitions and the paths in LDS_DEVICES (colon-separated).
    /// Examples:
    ///   lds device add volume.img volume-2.img --size 1GiB
    ///   lds device list volume.img
    ///   lds device remove volume.img volume-2.img
    #[command(subcommand, verbatim_doc_comment)]
    Device(crate::device::DeviceCommand),
    /// Write a metadata image of a volume for a bug report (values removed, keys replaced).
    ///
    /// Labels, both logs and every chunk's structure, with every value zeroed and every key
    /// replaced by one of the same length that keeps the keys' order (unless --keep-keys):
    /// lengths, offsets, chains and tree shape stay the original's and checksums are
    /// recomputed, so lds fsck (without --deep) and lds dump read it as they read the
    /// original. OUT is a sparse file as long as the volume. Never writes to the volume.
    ///
    /// Example: lds metadump volume.img report.img
    #[command(verbatim_doc_comment)]
    Metadump(crate::metadump::MetadumpArgs),
    /// Copy what is readable from a volume repair cannot rebuild to a new volume.
    ///
    /// For the worst case (both labels or the whole version log lost): reads every slot's
    /// chunk (footer, index and blocks, or its blocks alone where the tail is lost) and every
    /// valid batch of the backup logs, keeps each key's entry with the highest sequence
    /// number, and writes the live keys to a new volume formatted with the source's layout
    /// (or prints them as NDJSON). Without a label the slot area is found from the chunk
    /// footers and the backup logs are not read. The source is never written. Keys deleted
    /// long ago may come back from chunks in free slots. Exit 0 everything read was intact,
    /// 1 some data could not be read (listed), 8 operational error, 16 usage error.
    ///
    /// Examples:
    ///   lds salvage damaged.img --output new.img
    ///   lds salvage damaged.img --export ndjson > keys.ndjson
    #[command(verbatim_doc_comment)]
    Salvage(crate::salvage::SalvageArgs),
    /// Check crash consistency on a simulated device.
    ///
    /// Runs a workload (basic, wrap, compaction, or random by seed) on the real engine over a
    /// simulated device that records every write and flush, then builds every crash state:
    /// the durable image plus each subset of the unflushed writes (all up to --exhaustive,
    /// sampled past it) and each write torn at a sector boundary. Each distinct image is
    /// recovered and checked: fsck clean (I3), the state equals the model after an operation
    /// between the last synced and the last issued (I1, I2), a second recovery agrees (I5).
    /// Exit 0 with no failure, 1 with failures (a reproducer is written), 2 on usage errors.
    ///
    /// Example: lds crashtest --workload random --seed 1 --runs 20 --unbuffered
    #[command(verbatim_doc_comment)]
    Crashtest(CrashtestOptions),
    /// Benchmark LDS (or a peer built into this binary) with db_bench's workloads and YCSB.
    ///
    /// Runs the benchmarks in order; each fill starts from a fresh store (an LDS volume is
    /// formatted, a peer's directory emptied). Reports ops/s, MB/s, latency p50/p99/p99.9,
    /// CPU seconds per million operations, write amplification and flushes per operation
    /// (from the block device's counters), and peak memory. --device-limits measures the
    /// device instead: O_DIRECT sequential bandwidth and one sector write plus flush.
    ///
    /// Example: lds bench --size 4GiB --benchmarks fillrandom,readrandom bench.img
    #[command(verbatim_doc_comment)]
    Bench(BenchOptions),
    /// Print a volume's structures. Never writes; any number of readers run at once.
    ///
    /// WHAT is one of: label, volume, version-log, backup-log, slots, chunk ID, tree,
    /// value-chunks (every instance's value chunks, format 1.4, with their footers and
    /// digests checked). JSON output follows the schema lds-dump/1 (docs/dump-json.md).
    ///
    /// Examples:
    ///   lds dump volume.img label
    ///   lds dump volume.img version-log --json
    ///   lds dump volume.img chunk 12 --entries
    ///   lds dump volume.img chunk 12 --resolve
    ///   lds dump volume.img value-chunks
    #[command(verbatim_doc_comment)]
    Dump {
        /// Block device or image file.
        path: PathBuf,
        /// What to print: label, volume, version-log, backup-log, slots, chunk, tree,
        /// value-chunks.
        what: String,
        /// The chunk id, for `chunk`.
        id: Option<u64>,
        /// The instance, for per-instance views.
        #[arg(long, default_value_t = 0)]
        instance: u32,
        /// Print the chunk's entries (keys and values).
        #[arg(long)]
        entries: bool,
        /// With `chunk`: print the entries, and follow each log reference (entry kind 3 of a
        /// log chunk, format 1.6) into the backup log to print the value it names, or why it
        /// does not resolve (SPEC.md §8.9).
        #[arg(long)]
        resolve: bool,
        /// Print JSON (schema lds-dump/1).
        #[arg(long)]
        json: bool,
        /// While a writer holds the volume, wait for it up to this many seconds (60 when
        /// given without a value) instead of failing at once.
        #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "60")]
        wait: Option<u64>,
    },
    /// Set a key. Example: lds put volume.img user:1 alice --sync
    Put {
        /// The volume.
        #[command(flatten)]
        target: Target,
        /// The key.
        key: String,
        /// The value.
        value: String,
        /// Durable before returning (one backup log append and a flush).
        #[arg(long)]
        sync: bool,
    },
    /// Print values; exit 1 when any key is absent.
    ///
    /// One key prints its value; several keys (or --stdin, one key per line) print
    /// key TAB value per line. Opens the volume read-only (any number of readers at once;
    /// the backup log is replayed in memory, nothing is written).
    /// Example: lds get volume.img user:1
    Get {
        /// The volume.
        #[command(flatten)]
        target: Target,
        /// The keys.
        keys: Vec<String>,
        /// Also read keys from standard input, one per line.
        #[arg(long)]
        stdin: bool,
    },
    /// Delete a key. Example: lds delete volume.img user:1
    Delete {
        /// The volume.
        #[command(flatten)]
        target: Target,
        /// The key.
        key: String,
        /// Durable before returning.
        #[arg(long)]
        sync: bool,
    },
    /// List keys and values in key order (key TAB value, or JSON lines).
    ///
    /// TSV escapes what a line cannot hold: \\ \t \n \r, and \xHH for control characters
    /// and bytes that are not UTF-8, so that `lds scan a.img | lds load b.img` copies every
    /// byte. With --hex, keys and values are hex (in JSON too: key_hex, value_hex).
    /// Example: lds scan volume.img --prefix user: --json
    #[command(verbatim_doc_comment)]
    Scan {
        /// The volume.
        #[command(flatten)]
        target: Target,
        /// First key (inclusive).
        #[arg(long)]
        start: Option<String>,
        /// Stop before this key.
        #[arg(long)]
        end: Option<String>,
        /// Only keys starting with this.
        #[arg(long)]
        prefix: Option<String>,
        /// At most this many entries.
        #[arg(long)]
        limit: Option<usize>,
        /// JSON lines: {"key": .., "value": ..} (key_hex/value_hex for binary).
        #[arg(long)]
        json: bool,
    },
    /// Load key/value lines from standard input in batches of 1000.
    ///
    /// NDJSON lines {"key": "..", "value": ".."} (or key_hex/value_hex), or key TAB value
    /// with the escapes `lds scan` writes (\\ \t \n \r \xHH; a backslash is written \\);
    /// without --format the first non-blank line decides (NDJSON when it starts with '{').
    /// Example: lds load volume.img < pairs.tsv
    Load {
        /// The volume.
        #[command(flatten)]
        target: Target,
        /// Input format (default: detected from the first non-blank line).
        #[arg(long, value_enum)]
        format: Option<LoadFormat>,
        /// Make every batch durable before the next.
        #[arg(long)]
        sync: bool,
    },
    /// Unfinished journaled compactions: show them, resume one, or abort one.
    ///
    /// A journaled compaction that a crash interrupted is resumed by the next open for
    /// writing; until then reads are redirected by its journal record (SPEC.md §12).
    /// Examples:
    ///   lds compaction show volume.img
    ///   lds compaction resume volume.img
    #[command(subcommand, verbatim_doc_comment)]
    Compaction(crate::compaction::CompactionCommand),
    /// Recover the volume (SPEC.md §9), write replayed entries to chunks, and report.
    ///
    /// Example: lds recover volume.img --json
    Recover {
        /// The volume.
        #[command(flatten)]
        target: Target,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// The undo file (recover writes the replayed entries to chunks).
        #[command(flatten)]
        undo: crate::session::UndoChoice,
    },
    /// Print a shell completion script for lds.
    ///
    /// Examples:
    ///   lds completions bash > /etc/bash_completion.d/lds
    ///   lds completions zsh > "${fpath[1]}/_lds"
    ///   lds completions fish > ~/.config/fish/completions/lds.fish
    #[command(verbatim_doc_comment)]
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Write the man pages of lds and of each subcommand (lds.1, lds-mkfs.1, ...) to a directory.
    ///
    /// Example: lds man /usr/local/share/man/man1
    #[command(verbatim_doc_comment)]
    Man {
        /// The directory to write into (created if missing); existing pages are replaced.
        directory: PathBuf,
    },
}

/// Runs a parsed command; returns the process exit code.
pub fn run(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match cli.command {
        Command::Mkfs(options) => crate::mkfs::run(&options, out, err),
        Command::Fsck(options) => crate::fsck::run(&options, out, err),
        Command::Repair(args) => crate::repair::run(&args, out, err),
        Command::Undo(args) => crate::undo::run(&args, out, err),
        Command::Salvage(args) => crate::salvage::run(&args, out, err),
        Command::Metadump(args) => crate::metadump::run(&args, out, err),
        Command::Resize(args) => crate::resize::run(&args, out, err),
        Command::Device(command) => crate::device::run(&command, out, err),
        Command::Crashtest(options) => crate::crashtest::run_crashtest(&options, out, err),
        Command::Bench(options) => crate::bench::run(&options, out, err),
        Command::Put { target, key, value, sync } => crate::kv::put(&target, &key, &value, sync, err),
        Command::Get { target, keys, stdin } => {
            let mut input = std::io::stdin().lock();
            let input: Option<&mut dyn std::io::BufRead> = if stdin { Some(&mut input) } else { None };
            crate::kv::get(&target, &keys, input, out, err)
        }
        Command::Delete { target, key, sync } => crate::kv::delete(&target, &key, sync, err),
        Command::Scan { target, start, end, prefix, limit, json } => {
            crate::kv::scan(&target, &ScanRange { start, end, prefix, limit, json }, out, err)
        }
        Command::Load { target, format, sync } => {
            crate::kv::load(&target, format, sync, &mut std::io::stdin().lock(), out, err)
        }
        Command::Recover { target, json, undo } => crate::kv::recover(&target, json, &undo, out, err),
        Command::Completions { shell } => {
            crate::manual::completions(<Cli as clap::CommandFactory>::command(), shell, out, err)
        }
        Command::Man { directory } => {
            crate::manual::man_pages(&<Cli as clap::CommandFactory>::command(), &directory, out, err)
        }
        Command::Compaction(command) => crate::compaction::run(&command, out, err),
        Command::Dump { path, what, id, instance, entries, resolve, json, wait } => {
            if resolve && what != "chunk" {
                let _ = writeln!(err, "lds dump: --resolve goes with `chunk ID`, not with '{what}'");
                return 16;
            }
            let what = match (what.as_str(), id) {
                ("label", None) => DumpWhat::Label,
                ("volume", None) => DumpWhat::Volume,
                ("version-log", None) => DumpWhat::VersionLog,
                ("backup-log", None) => DumpWhat::BackupLog,
                ("slots", None) => DumpWhat::Slots,
                ("tree", None) => DumpWhat::Tree,
                ("value-chunks", None) => DumpWhat::ValueChunks,
                ("chunk", Some(id)) if resolve => DumpWhat::ChunkResolved(id),
                ("chunk", Some(id)) => DumpWhat::Chunk(id),
                ("chunk", None) => {
                    let _ = writeln!(err, "lds dump: `chunk` needs a chunk id, e.g. lds dump volume.img chunk 12");
                    return 16;
                }
                (other, _) => {
                    let _ = writeln!(
                        err,
                        "lds dump: unknown view '{other}'{}: use label, volume, version-log, backup-log, slots, chunk ID, tree or value-chunks",
                        if id.is_some() { " with an id" } else { "" }
                    );
                    return 16;
                }
            };
            let wait = std::time::Duration::from_secs(wait.unwrap_or(0));
            crate::dump::run(&DumpOptions { path, what, instance, json, entries, wait }, out, err)
        }
    }
}
