//! Command-line parsing (clap derive); the doc comments are the help text.

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::dump::{DumpOptions, DumpWhat};
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
    /// Print a volume's structures. Never writes.
    ///
    /// WHAT is one of: label, volume, version-log, backup-log, slots, chunk ID, tree.
    /// JSON output follows the schema lds-dump/1 (docs/dump-json.md).
    ///
    /// Examples:
    ///   lds dump volume.img label
    ///   lds dump volume.img version-log --json
    ///   lds dump volume.img chunk 12 --entries
    #[command(verbatim_doc_comment)]
    Dump {
        /// Block device or image file.
        path: PathBuf,
        /// What to print: label, volume, version-log, backup-log, slots, chunk, tree.
        what: String,
        /// The chunk id, for `chunk`.
        id: Option<u64>,
        /// The instance, for per-instance views.
        #[arg(long, default_value_t = 0)]
        instance: u32,
        /// Print the chunk's entries (keys and values).
        #[arg(long)]
        entries: bool,
        /// Print JSON (schema lds-dump/1).
        #[arg(long)]
        json: bool,
    },
}

/// Runs a parsed command; returns the process exit code.
pub fn run(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match cli.command {
        Command::Mkfs(options) => crate::mkfs::run(&options, out, err),
        Command::Dump { path, what, id, instance, entries, json } => {
            let what = match (what.as_str(), id) {
                ("label", None) => DumpWhat::Label,
                ("volume", None) => DumpWhat::Volume,
                ("version-log", None) => DumpWhat::VersionLog,
                ("backup-log", None) => DumpWhat::BackupLog,
                ("slots", None) => DumpWhat::Slots,
                ("tree", None) => DumpWhat::Tree,
                ("chunk", Some(id)) => DumpWhat::Chunk(id),
                ("chunk", None) => {
                    let _ = writeln!(err, "lds dump: `chunk` needs a chunk id, e.g. lds dump volume.img chunk 12");
                    return 16;
                }
                (other, _) => {
                    let _ = writeln!(
                        err,
                        "lds dump: unknown view '{other}'{}: use label, volume, version-log, backup-log, slots, chunk ID or tree",
                        if id.is_some() { " with an id" } else { "" }
                    );
                    return 16;
                }
            };
            crate::dump::run(&DumpOptions { path, what, instance, json, entries }, out, err)
        }
    }
}
