//! `lds salvage`: copy what is readable from a volume repair cannot rebuild to a new volume
//! (or export it as NDJSON). The source is opened read-only with a shared lock and never
//! written; see `lds_repair::salvage` for what is read and how keys are resolved, and
//! `lds_tools::salvage` for the new volume it writes.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use lds_format::entry::EntryKind;
use lds_format::error::hex;
use lds_repair::salvage::{salvage, Salvaged};
use lds_tools::salvage::{write_volume, SalvageOutputError};
use serde_json::json;

use crate::render::pair_json;

/// Exit codes.
const EXIT_OK: i32 = 0;
const EXIT_DATA_LOST: i32 = 1;
const EXIT_OPERATIONAL: i32 = 8;
const EXIT_USAGE: i32 = 16;

/// Arguments of `lds salvage`.
#[derive(Debug, Clone, clap::Args)]
pub struct SalvageArgs {
    /// The damaged volume (read only, never written).
    pub path: PathBuf,
    /// Write what is kept to this new volume: an image file created with the source's layout
    /// (and value chunks when the source has them: large values are written whole), or an
    /// existing image or device with --force (it is formatted).
    #[arg(long, conflicts_with = "export")]
    pub output: Option<PathBuf>,
    /// Print what is kept to standard output instead, one JSON object per line (as lds scan
    /// --json prints and lds load reads; an "instance" field where the volume has several).
    #[arg(long, value_parser = ["ndjson"])]
    pub export: Option<String>,
    /// Size of a new output image (default: the source's size).
    #[arg(long, value_parser = crate::units::parse_size)]
    pub size: Option<u64>,
    /// Format an existing output image or device.
    #[arg(long)]
    pub force: bool,
    /// Print the report as JSON (lds-salvage/1) on standard error with --export, else on
    /// standard output.
    #[arg(long)]
    pub json: bool,
}

/// Runs `lds salvage`; returns the exit code: 0 everything read was intact, 1 done but some
/// data could not be read (listed: damaged stretches and lost values), 8 operational error,
/// 16 usage error.
pub fn run(args: &SalvageArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let started = Instant::now();
    if args.output.is_none() && args.export.is_none() {
        let _ = writeln!(err, "lds salvage: give --output NEW (a new volume) or --export ndjson");
        return EXIT_USAGE;
    }
    let device = match crate::session::open_read(&args.path, "salvage", err) {
        Ok(device) => device,
        Err(code) => return code,
    };
    // Never the damaged volume: not its path, a link to it, nor any of its devices
    // (docs/safety.md). Judged now, and again right before the output is formatted (the read
    // in between may take hours).
    let sources: Vec<PathBuf> = std::iter::once(args.path.clone())
        .chain(device.devices().iter().map(|member| member.path().to_path_buf()))
        .collect();
    let refuse = |output: &Path| {
        let sources: Vec<&Path> = sources.iter().map(PathBuf::as_path).collect();
        lds_volume::safety::refuse_output(output, &sources)
    };
    if let Some(output) = &args.output {
        if let Err(error) = refuse(output) {
            let _ = writeln!(err, "lds salvage: {error}");
            return EXIT_USAGE;
        }
    }
    let bar = if std::io::stderr().is_terminal() { ProgressBar::new(0) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:30}] {percent:>3}% {bytes}/{total_bytes} ({bytes_per_sec})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message("reading slots");
    let mut progress = |done: u64, total: u64| {
        bar.set_length(total);
        bar.set_position(done);
    };
    let salvaged = match salvage(&device, &mut progress) {
        Ok(salvaged) => salvaged,
        Err(error) => {
            bar.finish_and_clear();
            let _ = writeln!(err, "lds salvage: {error}");
            return EXIT_OPERATIONAL;
        }
    };
    bar.finish_and_clear();
    let read_seconds = started.elapsed().as_secs_f64();
    let source_len = lds_volume::ReadAt::len(&device);
    drop(device);
    let written = match (&args.output, &args.export) {
        (Some(output), _) => match refuse(output) {
            Ok(()) => write_output(args, output, source_len, &salvaged),
            Err(error) => {
                let _ = writeln!(err, "lds salvage: {error}");
                return EXIT_USAGE;
            }
        },
        (None, _) => export(&salvaged, out),
    };
    let written = match written {
        Ok(written) => written,
        Err(error) => {
            let _ = writeln!(err, "lds salvage: {error}");
            return EXIT_OPERATIONAL;
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    let report_to: &mut dyn Write = if args.export.is_some() { err } else { out };
    report(args, &salvaged, written, read_seconds, seconds, report_to);
    if salvaged.damaged.is_empty()
        && salvaged.tails_lost == 0
        && salvaged.lost_values.is_empty()
        && salvaged.slots_past_end == 0
    {
        EXIT_OK
    } else {
        EXIT_DATA_LOST
    }
}

/// Why salvage could not write what it kept.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SalvageError {
    /// The output volume could not be written.
    #[error("{0}")]
    Output(#[from] SalvageOutputError),
    /// Standard output could not be written (`--export`).
    #[error("standard output: {0}")]
    Export(std::io::Error),
}

/// Writes every live key to the new volume `output` (`lds_tools::salvage`), with a progress
/// bar on a terminal; returns the keys written.
fn write_output(args: &SalvageArgs, output: &Path, source_len: u64, salvaged: &Salvaged) -> Result<u64, SalvageError> {
    let bar =
        if std::io::stderr().is_terminal() { ProgressBar::new(salvaged.live_keys()) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("writing keys [{bar:30}] {pos}/{len} ({per_sec})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let size = args.size.unwrap_or(source_len);
    let written = write_volume(output, size, args.force, salvaged, &mut |written| bar.set_position(written))?;
    bar.finish_and_clear();
    Ok(written)
}

/// Prints every live key as NDJSON; returns the keys printed.
fn export(salvaged: &Salvaged, out: &mut dyn Write) -> Result<u64, SalvageError> {
    let several = salvaged.keys.len() > 1;
    let mut written = 0;
    for (&instance, keys) in &salvaged.keys {
        for (key, (_, kind, value)) in keys {
            if *kind != EntryKind::Put {
                continue;
            }
            let mut line = pair_json(key, value);
            if several {
                line["instance"] = json!(instance);
            }
            writeln!(out, "{line}").map_err(SalvageError::Export)?;
            written += 1;
        }
    }
    Ok(written)
}

fn report(args: &SalvageArgs, salvaged: &Salvaged, written: u64, read_seconds: f64, seconds: f64, out: &mut dyn Write) {
    let destination =
        args.output.as_ref().map_or_else(|| "standard output".to_string(), |path| path.display().to_string());
    if args.json {
        let document = json!({
            "schema": "lds-salvage/1",
            "device": args.path.display().to_string(),
            "layout_from": salvaged.layout_from,
            "volume_uuid": hex(&salvaged.volume_uuid),
            "slot_size": salvaged.slots.0,
            "slots_scanned": salvaged.slots_scanned,
            "slots_past_end": salvaged.slots_past_end,
            "chunks": salvaged.chunks,
            "tails_lost": salvaged.tails_lost,
            "blocks_read": salvaged.blocks_read,
            "chunk_entries": salvaged.chunk_entries,
            "batches": salvaged.batches.0,
            "batch_entries": salvaged.batches.1,
            "live_keys": salvaged.live_keys(),
            "deleted_keys": salvaged.deleted_keys(),
            "value_chunks": salvaged.value_chunks,
            "value_chunks_listed": salvaged.value_chunks_listed,
            "values_read": salvaged.values_read,
            "log_values_read": salvaged.log_values_read,
            "lost_values": salvaged.lost_values.iter().map(|lost| {
                let mut entry = pair_json(&lost.key, &[]);
                if let Some(map) = entry.as_object_mut() {
                    map.retain(|name, _| name.starts_with("key"));
                    map.insert("instance".into(), json!(lost.instance));
                    map.insert("sequence".into(), json!(lost.sequence));
                    map.insert("reason".into(), json!(lost.reason));
                }
                entry
            }).collect::<Vec<_>>(),
            "damaged": salvaged.damaged,
            "written": written,
            "destination": destination,
            "read_seconds": read_seconds,
            "seconds": seconds,
        });
        let _ = writeln!(out, "{document}");
        return;
    }
    let _ = writeln!(
        out,
        "layout from {}: {} slots of {} bytes",
        salvaged.layout_from, salvaged.slots_scanned, salvaged.slots.0
    );
    let _ = writeln!(
        out,
        "read {} chunks ({} blocks, {} entries), {} slots without a tail read block by block, {} backup log batches ({} entries)",
        salvaged.chunks, salvaged.blocks_read, salvaged.chunk_entries, salvaged.tails_lost, salvaged.batches.0, salvaged.batches.1
    );
    if salvaged.has_value_chunks {
        let _ = writeln!(
            out,
            "read {} value chunks ({} listed by the versions read), {} values through pointers, {} values lost",
            salvaged.value_chunks,
            salvaged.value_chunks_listed,
            salvaged.values_read,
            salvaged.lost_values.len()
        );
    }
    if salvaged.log_values_read > 0 {
        let _ = writeln!(
            out,
            "read {} values through log references from the backup log (SPEC.md §8.9)",
            salvaged.log_values_read
        );
    }
    for damaged in salvaged.damaged.iter().take(20) {
        let _ = writeln!(out, "lost: {damaged}");
    }
    if salvaged.damaged.len() > 20 {
        let _ = writeln!(out, "lost: {} more stretches (--json lists them all)", salvaged.damaged.len() - 20);
    }
    for lost in salvaged.lost_values.iter().take(20) {
        let _ = writeln!(out, "lost value: {lost}");
    }
    if salvaged.lost_values.len() > 20 {
        let _ = writeln!(out, "lost value: {} more (--json lists them all)", salvaged.lost_values.len() - 20);
    }
    let _ = writeln!(
        out,
        "kept {} keys (the newest entry of each; {} keys whose newest entry is a delete dropped{}); wrote {written} to {destination} in {seconds:.1} s (reading {read_seconds:.1} s)",
        salvaged.live_keys(),
        salvaged.deleted_keys(),
        if salvaged.lost_values.is_empty() {
            String::new()
        } else {
            format!(", {} keys whose value is lost not written", salvaged.lost_values.len())
        }
    );
}
