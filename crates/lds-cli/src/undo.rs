//! `lds undo` (e2undo): restores a volume from the undo file a writing tool left, byte for
//! byte, after the whole file verifies (docs/undo-file.md).

use std::io::Write;
use std::path::PathBuf;

use lds_volume::undo::{check_undo, undo, volume_uuid_of, UndoError, UndoFile};
use lds_volume::VolumeDevice;

use crate::session::EXIT_OPERATIONAL;

/// Options of `lds undo`.
#[derive(Debug, Clone, clap::Args)]
pub struct UndoArgs {
    /// The undo file a writing tool left.
    pub undo_file: PathBuf,
    /// The block device or image file to restore.
    pub path: PathBuf,
    /// Restore even if sectors changed since, the device is not the one recorded, or the undo
    /// file does not verify (then only its records whose checksums verify, exit 1).
    #[arg(long)]
    pub force: bool,
    /// Print what would be restored (sectors, bytes, ranges, the tool and time recorded,
    /// whether the file verified, what the checks say); write nothing.
    #[arg(short = 'n', long = "dry-run")]
    pub dry_run: bool,
}

/// Seconds since the Unix epoch as a UTC date and time (`2024-05-01 12:00:00 UTC`).
fn utc(seconds: u64) -> String {
    let (year, month, day, hour, minute, second) = lds_tools::session::utc_fields(seconds);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02} UTC")
}

/// What an undo file holds and whether it verified, for `lds undo -n` and before a forced run.
fn describe_undo_file(args: &UndoArgs, file: &UndoFile, out: &mut dyn Write) {
    let header = &file.header;
    let _ = writeln!(
        out,
        "undo file {}: LDSUNDO{} written by {} at {} ({}), for volume {} of {} bytes, sectors of {} bytes",
        args.undo_file.display(),
        file.version,
        header.tool,
        utc(header.created),
        header.created,
        lds_format::error::hex(&header.volume_uuid),
        header.device_len,
        header.sector_size
    );
    let run = if file.finished { "the tool finished" } else { "the tool did not finish" };
    if file.damage.is_empty() {
        let torn = if file.torn_tail > 0 {
            format!(
                "; its last batch was torn by the crash ({} bytes left out: their write was never issued)",
                file.torn_tail
            )
        } else {
            String::new()
        };
        let _ = writeln!(out, "verified: {run}; {} batches, {} records{torn}", file.batches, file.records);
    } else {
        let _ = writeln!(
            out,
            "NOT verified ({run}): {} records verified by their own checksums; what does not verify:",
            file.records
        );
        for damage in &file.damage {
            let _ = writeln!(out, "  byte {}: {}", damage.offset, damage.reason);
        }
        let lost = file.unrestorable();
        if !lost.is_empty() {
            let offsets: Vec<String> = lost.iter().map(u64::to_string).collect();
            let _ = writeln!(
                out,
                "  sectors the tool wrote whose original bytes are lost with them (not restorable): {}",
                offsets.join(", ")
            );
        }
    }
    let ranges: Vec<String> = file.ranges().iter().map(|(offset, len)| format!("{offset}..{}", offset + len)).collect();
    let _ = writeln!(
        out,
        "saved: {} sectors ({} bytes) in {} ranges: {}",
        file.originals.len(),
        file.restored_bytes(),
        ranges.len(),
        if ranges.is_empty() { "none".to_string() } else { ranges.join(", ") }
    );
}

/// The exit code of a refusal of `lds undo`: 1 when nothing was written because of what the
/// undo file or the volume holds, 8 when a device or the file could not be read or written.
fn undo_refusal_code(error: &UndoError) -> i32 {
    match error {
        UndoError::File { .. } | UndoError::Device(_) | UndoError::Exists { .. } | UndoError::Closed { .. } => {
            EXIT_OPERATIONAL
        }
        _ => 1,
    }
}

/// Runs `lds undo`; returns the exit code (0 restored; 1 refused, nothing written, or forced
/// and only part restored; 8 could not run).
pub fn run(args: &UndoArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let bytes = match std::fs::read(&args.undo_file) {
        Ok(bytes) => bytes,
        Err(error) => {
            let _ = writeln!(err, "lds undo: {}: {error}", args.undo_file.display());
            return EXIT_OPERATIONAL;
        }
    };
    // Without --force or -n a file must verify whole; with them, the records that verify are
    // read and what does not verify is said.
    let parsed = if args.force || args.dry_run {
        UndoFile::parse_salvaging(&bytes, &args.undo_file)
    } else {
        UndoFile::parse(&bytes, &args.undo_file)
    };
    let file = match parsed {
        Ok(file) => file,
        Err(error) => {
            let code = undo_refusal_code(&error);
            let _ = writeln!(
                err,
                "lds undo: {error}; nothing was written{}",
                if args.force || !matches!(error, UndoError::Damaged { .. }) {
                    ""
                } else {
                    " (--force restores only the records that verify)"
                }
            );
            return code;
        }
    };
    if args.dry_run {
        return match crate::session::open_read(&args.path, "undo", err) {
            Ok(device) => dry_run(args, &file, &device, out),
            Err(code) => code,
        };
    }
    // Undo keeps no undo file of its own: the file it restores from is the way back.
    let session = match crate::session::open(&args.path, "undo", std::time::Duration::ZERO, err) {
        Ok(session) => session,
        Err(error) => {
            let _ = writeln!(err, "lds undo: {}", crate::session::open_error(&error, false));
            return EXIT_OPERATIONAL;
        }
    };
    restore(args, &file, session.device(), out, err)
}

/// `lds undo -n`: what the file holds and what restoring it would do; writes nothing.
fn dry_run(args: &UndoArgs, file: &UndoFile, device: &VolumeDevice, out: &mut dyn Write) -> i32 {
    let uuid = volume_uuid_of(device);
    describe_undo_file(args, file, out);
    match check_undo(file, device, uuid, args.force) {
        Ok(outcome) => {
            let _ = writeln!(
                out,
                "{}: would restore {} sectors ({} bytes); {} already hold their original bytes; nothing was written (-n)",
                args.path.display(),
                outcome.sectors,
                outcome.bytes,
                outcome.unchanged
            );
            i32::from(!file.damage.is_empty())
        }
        Err(error) => {
            let _ = writeln!(out, "{}: would refuse: {error}; nothing was written (-n)", args.path.display());
            undo_refusal_code(&error)
        }
    }
}

/// Restores the volume on `device` from `file`.
fn restore(args: &UndoArgs, file: &UndoFile, device: &VolumeDevice, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let uuid = volume_uuid_of(device);
    if !file.damage.is_empty() {
        describe_undo_file(args, file, err);
    }
    match undo(file, device, uuid, args.force) {
        Ok(outcome) => {
            let _ = writeln!(
                out,
                "{}: restored {} sectors ({} bytes) that {} wrote; {} already held their original bytes",
                args.path.display(),
                outcome.sectors,
                outcome.bytes,
                file.header.tool,
                outcome.unchanged
            );
            if file.damage.is_empty() {
                return 0;
            }
            let _ = writeln!(
                err,
                "lds undo: {}: --force restored only the records that verify; what the parts of the file listed above held is not restored, so the volume is not as it was before {}",
                args.undo_file.display(),
                file.header.tool
            );
            1
        }
        Err(error) => {
            let _ = writeln!(err, "lds undo: {error}");
            undo_refusal_code(&error)
        }
    }
}
