//! Command-line parsing (clap derive); the doc comments are the help text.

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::dump::{DumpOptions, DumpWhat};
use crate::mkfs::{parse_uuid, MkfsOptions};
use crate::units::parse_size;

/// LDS: an LSM-tree key-value store directly on a block device or image file.
#[derive(Debug, Parser)]
#[command(name = "lds", version, about, long_about = None)]
pub struct Cli {
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

fn size(text: &str) -> Result<u64, String> {
    parse_size(text)
}

fn sector(text: &str) -> Result<u32, String> {
    let value = parse_size(text)?;
    u32::try_from(value).map_err(|_| format!("'{text}' is too large for a sector size"))
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
    Mkfs {
        /// Block device or image file.
        path: PathBuf,
        /// Volume size, with units (64MiB, 1G); required to create an image file.
        #[arg(long, value_parser = size)]
        size: Option<u64>,
        /// Slot size (default 4MiB, scaled down for small volumes).
        #[arg(long, value_parser = size)]
        slot_size: Option<u64>,
        /// Version log size per instance (default 64MiB, scaled down).
        #[arg(long, value_parser = size)]
        version_log_size: Option<u64>,
        /// Backup log size per instance (default 16MiB, scaled down).
        #[arg(long, value_parser = size)]
        backup_log_size: Option<u64>,
        /// Sector size: the atomic write unit (default 4096).
        #[arg(long, value_parser = sector)]
        sector_size: Option<u32>,
        /// Number of LSM-tree instances sharing the slot area (default 1).
        #[arg(long)]
        instances: Option<u32>,
        /// A name for the volume (at most 64 bytes).
        #[arg(long = "name", default_value = "")]
        name: String,
        /// Use this uuid instead of a random one.
        #[arg(long, value_parser = parse_uuid)]
        uuid: Option<[u8; 16]>,
        /// Print the layout and usable capacity; write nothing.
        #[arg(short = 'n', long)]
        dry_run: bool,
        /// Format even over an existing LDS volume or another signature.
        #[arg(short, long)]
        force: bool,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
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
        Command::Mkfs {
            path,
            size,
            slot_size,
            version_log_size,
            backup_log_size,
            sector_size,
            instances,
            name,
            uuid,
            dry_run,
            force,
            json,
        } => {
            let options = MkfsOptions {
                path,
                size,
                slot_size,
                version_log_size,
                backup_log_size,
                sector_size,
                instances,
                name,
                uuid,
                dry_run,
                force,
                json,
            };
            crate::mkfs::run(&options, out, err)
        }
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
