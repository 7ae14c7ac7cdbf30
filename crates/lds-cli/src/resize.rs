//! `lds resize`: grow or shrink a volume offline (resize2fs, xfs_growfs). See
//! `lds_repair::resize` for the order of writes that makes every crash leave the old or the
//! new geometry; run it again after a crash to finish.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lds_repair::resize::{plan, resize, ResizeError, ResizePlan};
use lds_tools::session::Finished;
use lds_volume::{Device, DeviceKind};
use serde_json::json;

use crate::session::UndoChoice;

/// Exit codes: 0 done or nothing to do, 1 refused (too small, damage, an unfinished
/// compaction), 8 operational error, 16 usage error.
const EXIT_REFUSED: i32 = 1;
use crate::session::{EXIT_OPERATIONAL, EXIT_USAGE};

/// Arguments of `lds resize`.
#[derive(Debug, Clone, clap::Args)]
pub struct ResizeArgs {
    /// Block device or image file.
    pub path: PathBuf,
    /// The new size (bytes, or with K/M/G/T and KiB/MiB/GiB/TiB). An image file is extended
    /// to it first; a block device must already be that long (losetup -c, a grown partition).
    #[arg(long, value_parser = crate::units::parse_size, required_unless_present = "min")]
    pub size: Option<u64>,
    /// Print what would be done (slots added or removed, chunks to move, bytes to copy) and
    /// write nothing.
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// Print the smallest size the volume can shrink to, and why; write nothing.
    #[arg(long)]
    pub min: bool,
    /// The undo file.
    #[command(flatten)]
    pub undo: UndoChoice,
    /// Print JSON (lds-resize/1).
    #[arg(long)]
    pub json: bool,
}

fn describe(plan: &ResizePlan) -> String {
    let (old, new) = (&plan.old, &plan.new);
    if plan.done() {
        return format!("nothing to do: the volume is {} bytes with {} slots", new.volume_len, new.num_slots);
    }
    let what = match new.num_slots.cmp(&old.num_slots) {
        std::cmp::Ordering::Greater => format!("{} slots added", new.num_slots - old.num_slots),
        std::cmp::Ordering::Less => format!(
            "{} slots removed, {} chunks and value chunks to move ({} bytes)",
            old.num_slots - new.num_slots,
            plan.moves.len(),
            plan.bytes_to_copy()
        ),
        std::cmp::Ordering::Equal if old == new => format!("{} base versions to finish", plan.rebase.len()),
        std::cmp::Ordering::Equal => "the same slots".to_string(),
    };
    format!(
        "{} -> {} bytes, {} -> {} slots of {} bytes: {what}",
        old.volume_len, new.volume_len, old.num_slots, new.num_slots, new.slot_size
    )
}

fn plan_json(plan: &ResizePlan) -> serde_json::Value {
    json!({
        "old": { "volume_len": plan.old.volume_len, "num_slots": plan.old.num_slots },
        "new": { "volume_len": plan.new.volume_len, "num_slots": plan.new.num_slots },
        "slot_size": plan.new.slot_size,
        "slots_in_use": plan.slots_in_use,
        "min_len": plan.min_len,
        "moves": plan.moves.iter().map(crate::render::move_json).collect::<Vec<_>>(),
        "bytes_to_copy": plan.bytes_to_copy(),
        "rebase": plan.rebase,
        "done": plan.done(),
    })
}

fn refused(error: &ResizeError) -> i32 {
    match error {
        ResizeError::Device(_) => EXIT_OPERATIONAL,
        _ => EXIT_REFUSED,
    }
}

/// Runs `lds resize`.
pub fn run(args: &ResizeArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if args.dry_run || args.min {
        return plan_only(args, out, err);
    }
    let Some(size) = args.size else {
        let _ = writeln!(err, "lds resize: give --size SIZE or --min");
        return EXIT_USAGE;
    };
    let started = Instant::now();
    let session = match crate::session::open(&args.path, "resize", Duration::ZERO, err) {
        Ok(session) => session,
        Err(error) => {
            let _ = writeln!(err, "lds resize: {}", crate::session::open_error(&error, false));
            return EXIT_OPERATIONAL;
        }
    };
    // A volume of several devices changes size by its devices (SPEC.md §4.3, §14).
    let mut session = match session.into_single() {
        Ok(session) => session,
        Err((_, count)) => return spans(args, count, err),
    };
    let device = session.device();
    if let Some(code) = refuse_short_device(args, size, device, err) {
        return code;
    }
    let planned = match plan(device, size) {
        Ok(plan) => plan,
        Err(error) => {
            let _ = writeln!(err, "lds resize: {error}");
            return refused(&error);
        }
    };
    let kind = device.kind();
    if planned.done() {
        let truncated = shrink_image(&args.path, kind, planned.new.volume_len, false, session.finish(), err);
        let _ = writeln!(
            out,
            "{}: {}{}",
            args.path.display(),
            describe(&planned),
            if truncated { " (image truncated)" } else { "" }
        );
        return 0;
    }
    // An image file grows first (pre-allocated): the old labels still describe the volume.
    if let Some(device) = session.device_mut().filter(|device| size > device.len()) {
        if let Err(error) = device.allocate(size).and_then(|()| device.set_image_len(size)) {
            let _ = writeln!(err, "lds resize: {error}");
            return EXIT_OPERATIONAL;
        }
    }
    if let Err(error) = session.keep_undo(&args.undo.choice()) {
        let _ = writeln!(err, "lds resize: {error}");
        return EXIT_OPERATIONAL;
    }
    let result = resize(session.target(), size);
    let finished = if result.is_ok() { session.finish() } else { session.abandon() };
    crate::session::report_error(&finished, "resize", err);
    let (plan, writes) = match result {
        Ok(done) => done,
        Err(error) => {
            let _ = writeln!(err, "lds resize: {error}");
            if let Some(kept) = finished.written() {
                let _ = writeln!(err, "lds resize: lds undo {} {} restores what was written ({} bytes of undo records); or run lds resize again to finish", kept.path.display(), args.path.display(), kept.bytes);
            }
            return refused(&error);
        }
    };
    let undo_file = finished.written().cloned();
    let truncated = shrink_image(&args.path, kind, plan.new.volume_len, undo_file.is_some(), finished, err);
    let seconds = started.elapsed().as_secs_f64();
    if args.json {
        let document = json!({
            "schema": "lds-resize/1",
            "device": args.path.display().to_string(),
            "plan": plan_json(&plan),
            "writes": writes.len(),
            "bytes_written": writes.iter().map(|write| write.len).sum::<u64>(),
            "truncated": truncated,
            "undo_file": undo_file.as_ref().map(|kept| json!({ "path": kept.path.display().to_string(), "bytes": kept.bytes })),
            "seconds": seconds,
        });
        let _ = writeln!(out, "{document}");
    } else {
        let _ = writeln!(out, "{}: {} in {seconds:.2} s", args.path.display(), describe(&plan));
        if let Some(kept) = &undo_file {
            let _ = writeln!(out, "{}", crate::session::undo_line(kept, &args.path));
        }
    }
    0
}

/// `lds resize --min` and `--dry-run`: the plan, read under the shared lock; writes nothing.
fn plan_only(args: &ResizeArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let device = match crate::session::open_read(&args.path, "resize", err) {
        Ok(device) => device,
        Err(code) => return code,
    };
    let device = match device.into_single() {
        Ok(device) => device,
        Err(volume) => return spans(args, volume.devices().len(), err),
    };
    if args.min {
        return match plan(&device, device.len()) {
            Ok(plan) => {
                if args.json {
                    let _ = writeln!(
                        out,
                        "{}",
                        json!({ "schema": "lds-resize/1", "min_len": plan.min_len, "plan": plan_json(&plan) })
                    );
                } else {
                    let _ = writeln!(
                        out,
                        "{}: smallest size {} bytes: the logs and labels take {} bytes and the data uses {} slots of {} bytes, and two slots stay free for the next flush",
                        args.path.display(),
                        plan.min_len,
                        plan.old.ofs_slot_area + plan.old.sector(),
                        plan.slots_in_use,
                        plan.old.slot_size
                    );
                }
                0
            }
            Err(error) => {
                let _ = writeln!(err, "lds resize: {error}");
                refused(&error)
            }
        };
    }
    let Some(size) = args.size else {
        let _ = writeln!(err, "lds resize: give --size SIZE or --min");
        return EXIT_USAGE;
    };
    if let Some(code) = refuse_short_device(args, size, &device, err) {
        return code;
    }
    let planned = match plan(&device, size) {
        Ok(plan) => plan,
        Err(error) => {
            let _ = writeln!(err, "lds resize: {error}");
            return refused(&error);
        }
    };
    if args.json {
        let _ = writeln!(out, "{}", json!({ "schema": "lds-resize/1", "dry_run": true, "plan": plan_json(&planned) }));
    } else {
        let _ = writeln!(out, "{}: {}; nothing was written (-n)", args.path.display(), describe(&planned));
        if planned.new.num_slots < planned.num_slots_min() {
            let _ = writeln!(out, "refused: the smallest size is {} bytes", planned.min_len);
        }
    }
    if planned.new.num_slots < planned.num_slots_min() {
        EXIT_REFUSED
    } else {
        0
    }
}

/// Refuses a volume of several devices.
fn spans(args: &ResizeArgs, count: usize, err: &mut dyn Write) -> i32 {
    let _ = writeln!(
        err,
        "lds resize: {}: the volume spans {count} devices; add or remove a device instead (lds device add|remove)",
        args.path.display()
    );
    EXIT_REFUSED
}

/// Refuses to grow onto a block device shorter than `size` (it must grow first); the exit
/// code when refused.
fn refuse_short_device(args: &ResizeArgs, size: u64, device: &Device, err: &mut dyn Write) -> Option<i32> {
    if size > device.len() && device.kind() == DeviceKind::BlockDevice {
        let _ = writeln!(
            err,
            "lds resize: {}: the device holds {} bytes, fewer than {size}; grow the device first (losetup -c, a partition)",
            args.path.display(),
            device.len()
        );
        return Some(EXIT_REFUSED);
    }
    None
}

/// Truncates a shrunk image file to the volume, unless an undo file may still need the bytes
/// past it (then says how to truncate later). Returns whether it truncated.
fn shrink_image(
    path: &Path,
    kind: DeviceKind,
    volume_len: u64,
    undo_kept: bool,
    finished: Finished<Device>,
    err: &mut dyn Write,
) -> bool {
    let Some(mut device) = finished.into_device() else { return false };
    if kind != DeviceKind::ImageFile || device.len() <= volume_len {
        return false;
    }
    if undo_kept {
        let _ = writeln!(
            err,
            "lds resize: {} keeps its {} bytes (the volume ends at {volume_len}) so that lds undo can restore it; truncate -s {volume_len} {} once the undo file is no longer needed",
            path.display(),
            device.len(),
            path.display()
        );
        return false;
    }
    match device.set_image_len(volume_len) {
        Ok(()) => true,
        Err(error) => {
            let _ = writeln!(err, "lds resize: the volume is resized but the image could not be truncated: {error}");
            false
        }
    }
}
