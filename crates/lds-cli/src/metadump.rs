//! `lds metadump`: a metadata image for bug reports (see `lds_repair::metadump`), written as a
//! sparse file: only pages that are not zeros take space.

use std::io::{IsTerminal, Write};
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use lds_repair::metadump::{metadump, MetadumpError};
use serde_json::json;

/// Bytes of the pages the image is written in (all-zero pages are left as holes).
const PAGE: usize = 4096;

/// Arguments of `lds metadump`.
#[derive(Debug, Clone, clap::Args)]
pub struct MetadumpArgs {
    /// The volume (read only).
    pub path: PathBuf,
    /// The image file to write (sparse, as long as the volume).
    pub output: PathBuf,
    /// Keep the keys as they are (values are always removed).
    #[arg(long)]
    pub keep_keys: bool,
    /// Overwrite an existing output file.
    #[arg(long)]
    pub force: bool,
    /// Print the report as JSON (lds-metadump/1).
    #[arg(long)]
    pub json: bool,
}

/// Where the image is written until it is whole: the output's name with a suffix, beside it.
fn partial_path(output: &std::path::Path) -> PathBuf {
    let mut name = output.as_os_str().to_owned();
    name.push(".lds-metadump-partial");
    PathBuf::from(name)
}

/// A new file of `len` bytes, all holes. Created with `O_CREAT | O_EXCL | O_NOFOLLOW`: a file
/// (or a symlink, to anything) already at `path` is never opened, so never truncated.
fn create_image(path: &std::path::Path, len: u64) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o644)
        .open(path)?;
    file.set_len(len)?;
    Ok(file)
}

/// Refuses to write the image at `output` (through `partial`): either path naming the same
/// bytes as the volume or one of its devices, or in use (docs/safety.md); an output that is a
/// block device (metadump writes an image file and renames it into place, which would
/// replace the device node, not write the device: write the file, then copy it).
fn refuse_output(output: &Path, partial: &Path, sources: &[&Path]) -> Result<(), String> {
    for path in [output, partial] {
        lds_volume::safety::refuse_output(path, sources).map_err(|error| error.to_string())?;
    }
    if std::fs::metadata(output).is_ok_and(|metadata| metadata.file_type().is_block_device()) {
        return Err(format!(
            "{}: is a block device; metadump writes an image file, never a device (give a file name)",
            output.display()
        ));
    }
    Ok(())
}

/// Runs `lds metadump`; returns the exit code: 0 written, 8 operational error, 16 usage error.
pub fn run(args: &MetadumpArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let started = Instant::now();
    if args.output.exists() && !args.force {
        let _ = writeln!(err, "lds metadump: {} exists; give another path or --force", args.output.display());
        return 16;
    }
    let device = match crate::session::open_read(&args.path, "metadump", err) {
        Ok(device) => device,
        Err(code) => return code,
    };
    // The image is never written over the volume: not its path, a link to it, nor any of its
    // devices (docs/safety.md).
    let sources: Vec<&std::path::Path> =
        std::iter::once(args.path.as_path()).chain(device.devices().iter().map(|member| member.path())).collect();
    let partial = partial_path(&args.output);
    if let Err(message) = refuse_output(&args.output, &partial, &sources) {
        let _ = writeln!(err, "lds metadump: {message}");
        return 16;
    }
    // A partial image left by an interrupted run: removed with --force (the entry itself,
    // never what a symlink there names), else refused.
    if std::fs::symlink_metadata(&partial).is_ok() {
        if !args.force {
            let _ = writeln!(
                err,
                "lds metadump: {} exists (left by an interrupted metadump?); remove it or give --force",
                partial.display()
            );
            return 16;
        }
        if let Err(error) = std::fs::remove_file(&partial) {
            let _ = writeln!(err, "lds metadump: {}: cannot remove: {error}", partial.display());
            return 8;
        }
    }
    let bar = if std::io::stderr().is_terminal() { ProgressBar::new(0) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("reading [{bar:30}] {percent:>3}% {bytes}/{total_bytes}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    // The image is written beside the output as it is made, and renamed over it once whole:
    // a failure leaves no half image (and a file given with --force as it was).
    let file = match create_image(&partial, lds_volume::ReadAt::len(&device)) {
        Ok(file) => file,
        Err(error) => {
            let _ = writeln!(err, "lds metadump: {}: {error}", partial.display());
            return 8;
        }
    };
    let mut written = 0u64;
    let result = metadump(
        &device,
        args.keep_keys,
        &mut |done, total| {
            bar.set_length(total);
            bar.set_position(done);
        },
        &mut |offset, bytes| {
            // All-zero pages are left as holes: the file is sparse.
            for (index, page) in bytes.chunks(PAGE).enumerate() {
                if page.iter().any(|&byte| byte != 0) {
                    file.write_all_at(page, offset + (index * PAGE) as u64)?;
                    written += page.len() as u64;
                }
            }
            Ok(())
        },
    );
    bar.finish_and_clear();
    let output = |error: std::io::Error| format!("{}: {error}", args.output.display());
    let finished = match result {
        // The output is judged again right before the rename: it may have changed while the
        // volume was read.
        Ok(dump) => match refuse_output(&args.output, &partial, &sources) {
            Ok(()) => {
                file.sync_all().and_then(|()| std::fs::rename(&partial, &args.output)).map(|()| dump).map_err(output)
            }
            Err(message) => Err(message),
        },
        Err(MetadumpError::Output(error)) => Err(output(error)),
        Err(error) => Err(error.to_string()),
    };
    let dump = match finished {
        Ok(dump) => dump,
        Err(message) => {
            let _ = std::fs::remove_file(&partial);
            let _ = writeln!(err, "lds metadump: {message}");
            return 8;
        }
    };
    let allocated = std::fs::metadata(&args.output).map_or(0, |metadata| metadata.blocks() * 512);
    let seconds = started.elapsed().as_secs_f64();
    if args.json {
        let document = json!({
            "schema": "lds-metadump/1",
            "device": args.path.display().to_string(),
            "output": args.output.display().to_string(),
            "keys_mapped": dump.keys,
            "values_removed": dump.values,
            "value_chunks": dump.value_chunks,
            "version_log_objects": dump.objects.0,
            "backup_log_objects": dump.objects.1,
            "chunks": dump.chunks,
            "blocks_dropped": dump.blocks_dropped,
            "volume_len": dump.device_len,
            "used_bytes": dump.used_bytes,
            "written_bytes": written,
            "allocated_bytes": allocated,
            "seconds": seconds,
        });
        let _ = writeln!(out, "{document}");
    } else {
        let keys = if args.keep_keys { "keys kept".to_string() } else { format!("{} keys mapped", dump.keys) };
        let _ = writeln!(
            out,
            "{}: {} chunks{}, {} version log and {} backup log objects; {keys}, {} values removed{}",
            args.output.display(),
            dump.chunks,
            if dump.value_chunks > 0 {
                format!(" and {} value chunks (bodies zeroed)", dump.value_chunks)
            } else {
                String::new()
            },
            dump.objects.0,
            dump.objects.1,
            dump.values,
            if dump.blocks_dropped > 0 {
                format!(", {} damaged blocks dropped", dump.blocks_dropped)
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            out,
            "{written} bytes written ({allocated} allocated) for a volume of {} bytes that uses {} (labels, logs, chunks), in {seconds:.1} s",
            dump.device_len, dump.used_bytes
        );
    }
    0
}
