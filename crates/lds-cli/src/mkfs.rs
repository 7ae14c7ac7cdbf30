//! `lds mkfs`: format a block device or image file (SPEC.md §3, §4), then read back and
//! check what was written. The format itself, and the order of its writes, is
//! `lds_tools::mkfs`; this module parses the options and prints the layout.

use std::io::Write;
use std::path::PathBuf;

use lds_format::label::Label;
use lds_tools::mkfs::{format, plan, MkfsError, Request, FORMAT_MINOR_DEFAULT};

use crate::json;

/// Options of `lds mkfs`; also its command-line arguments.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct MkfsOptions {
    /// Block device or image file.
    pub path: PathBuf,
    /// Volume size, with units (64MiB, 1G); required to create an image file.
    #[arg(long, value_parser = crate::units::parse_size)]
    pub size: Option<u64>,
    /// Slot size (default 4MiB, scaled down for small volumes).
    #[arg(long, value_parser = crate::units::parse_size)]
    pub slot_size: Option<u64>,
    /// Version log size per instance (default 64MiB, scaled down).
    #[arg(long, value_parser = crate::units::parse_size)]
    pub version_log_size: Option<u64>,
    /// Backup log size per instance (default 16MiB, scaled down).
    #[arg(long, value_parser = crate::units::parse_size)]
    pub backup_log_size: Option<u64>,
    /// Sector size: the atomic write unit (default 4096).
    #[arg(long, value_parser = parse_sector_size)]
    pub sector_size: Option<u32>,
    /// Number of LSM-tree instances sharing the slot area (default 1).
    #[arg(long)]
    pub instances: Option<u32>,
    /// A name for the volume (at most 64 bytes).
    #[arg(long, default_value = "")]
    pub name: String,
    /// Use this uuid instead of a random one.
    #[arg(long, value_parser = parse_uuid)]
    pub uuid: Option<[u8; 16]>,
    /// Print the layout and usable capacity; write nothing.
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// Format even over an existing LDS volume or another signature.
    #[arg(short, long)]
    pub force: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Format version: 1.7 (the default: blocks hold compact entries, SPEC.md §8.2, chunks
    /// record an xxh3-128 digest, §8.3, and write batches a sync watermark, §7.1); 1.3 (the
    /// same with fixed-size entry headers: readable by builds from 1.3 on); 1.1 or 1.2 (a blake3
    /// digest: readable by builds from 1.1 on; 1.2 adds nothing a new volume has) or 1.0
    /// (readable by every build); 1.4 is 1.3 with `--value-chunks`, 1.5 with
    /// `--chunk-sketches`, 1.6 with `--log-tables`. Those three options also go with 1.7.
    #[arg(long, default_value = "1.7", value_parser = ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7"])]
    pub format_version: String,
    /// Allow value chunks (format 1.4, feature `value_chunks`, SPEC.md §8.6): the engine's
    /// key-value separation (`--technique kv-separation`) keeps large values there, up to 1 GiB
    /// each. Builds before 1.4 refuse such a volume. `--format-version 1.4` implies it.
    #[arg(long)]
    pub value_chunks: bool,
    /// Key sketches on level-0 chunks (format 1.5, feature `chunk_sketches`, SPEC.md §8.7),
    /// which the engine's deferred level-0 merges (`--technique triad-disk`) estimate overlap
    /// with. Builds before 1.5 refuse such a volume. `--format-version 1.5` implies it.
    #[arg(long)]
    pub chunk_sketches: bool,
    /// Log chunks (format 1.6, feature `log_tables`, SPEC.md §8.9): level-0 chunks whose puts
    /// name their batches in the backup log instead of holding the values, which the engine's
    /// `--technique triad-log` writes (a larger `--backup-log-size` lets it keep more). Builds
    /// before 1.6 refuse such a volume. `--format-version 1.6` implies it.
    #[arg(long)]
    pub log_tables: bool,
}

fn parse_sector_size(text: &str) -> Result<u32, String> {
    let value = crate::units::parse_size(text)?;
    u32::try_from(value).map_err(|_| format!("'{text}' is too large for a sector size"))
}

/// Parses a uuid in 8-4-4-4-12 or plain hex form.
pub fn parse_uuid(text: &str) -> Result<[u8; 16], String> {
    let digits: String = text.chars().filter(|&c| c != '-').collect();
    if digits.len() != 32 || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("'{text}' is not a uuid (32 hex digits)"));
    }
    let mut uuid = [0u8; 16];
    for (index, byte) in uuid.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&digits[2 * index..2 * index + 2], 16).map_err(|error| error.to_string())?;
    }
    Ok(uuid)
}

/// Runs mkfs; returns the exit code (0 success, 1 error).
pub fn run(options: &MkfsOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match mkfs(options, out) {
        Ok(()) => 0,
        Err(message) => {
            let _ = writeln!(err, "lds mkfs: {message}");
            1
        }
    }
}

impl MkfsOptions {
    /// The library's form of the request.
    pub fn request(&self) -> Request {
        Request {
            path: self.path.clone(),
            size: self.size,
            slot_size: self.slot_size,
            version_log_size: self.version_log_size,
            backup_log_size: self.backup_log_size,
            sector_size: self.sector_size,
            instances: self.instances,
            name: self.name.clone(),
            uuid: self.uuid,
            // "1.MINOR" (the parser admits 1.0 to 1.7); the default when none is given.
            format_minor: self
                .format_version
                .strip_prefix("1.")
                .and_then(|minor| minor.parse().ok())
                .unwrap_or(FORMAT_MINOR_DEFAULT),
            value_chunks: self.value_chunks,
            chunk_sketches: self.chunk_sketches,
            log_tables: self.log_tables,
            force: self.force,
        }
    }
}

/// Why `lds mkfs` failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MkfsCommandError {
    /// The layout could not be planned, or the format was refused or failed (the library's
    /// error names the device and what is wrong).
    #[error("{0}")]
    Mkfs(#[from] MkfsError),
    /// The layout could not be printed (standard output closed).
    #[error("{0}")]
    Output(#[from] std::io::Error),
}

fn mkfs(options: &MkfsOptions, out: &mut dyn Write) -> Result<(), MkfsCommandError> {
    let request = options.request();
    let label = plan(&request)?;
    if options.dry_run {
        let heading = format!("dry run: nothing written to {}", options.path.display());
        return report(out, options, "mkfs-plan", &heading, &label);
    }
    format(&request, &label)?;
    report(out, options, "mkfs", &format!("formatted {} as an LDS volume", options.path.display()), &label)
}

/// Prints the layout, as text under `heading` or as a JSON document `what`.
fn report(
    out: &mut dyn Write,
    options: &MkfsOptions,
    what: &str,
    heading: &str,
    label: &Label,
) -> Result<(), MkfsCommandError> {
    if options.json {
        let mut document = json::document(what, &options.path.display().to_string());
        document.insert("label".into(), json::label(label));
        document.insert("usable_capacity".into(), serde_json::json!(label.geometry.usable_capacity()));
        writeln!(out, "{}", serde_json::Value::Object(document))?;
        return Ok(());
    }
    writeln!(out, "{heading}")?;
    Ok(crate::render::print_layout(out, &label.geometry)?)
}
