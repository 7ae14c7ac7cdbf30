//! `lds device add|remove|list`: volumes on several devices (SPEC.md §4.3), after `btrfs
//! device add/remove`. See `lds_repair::devices` for the order of writes that makes every
//! crash leave the old volume or the new one; run the same command again to finish.

use std::io::Write;
use std::path::{Path, PathBuf};

use lds_format::label::Label;
use lds_repair::devices::{add_device, device_uuid_of, finish_removal, plan_add, plan_remove, DevicePlan, JoinUuids};
use lds_repair::resize::ResizeError;
use lds_repair::Written;
use lds_tools::Session;
use lds_volume::error::uuid_string;
use lds_volume::inspect::all_versions;
use lds_volume::read_labels;
use lds_volume::{Device, DeviceKind, OpenMode, ReadAt};
use lds_volume::{Members, VolumeDevice};
use serde_json::json;

const EXIT_REFUSED: i32 = 1;
const EXIT_OPERATIONAL: i32 = 8;

/// `lds device` subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum DeviceCommand {
    /// Join a device (block device or image file) to a volume; its slots extend the slot area.
    ///
    /// NEWDEV gets labels naming the volume and its place; the first device's labels switch
    /// to the new table by one sector write, then each instance's base version follows. A
    /// crash leaves the volume with or without the device, every key intact: run the same
    /// command again to finish. An image file that does not exist is created with --size.
    /// Refuses a device holding a known signature (another LDS volume, a file system) unless
    /// --force. Exit 0 done, 1 refused, 8 operational error, 16 usage error.
    ///
    /// Example: lds device add volume.img volume-2.img --size 1GiB
    #[command(verbatim_doc_comment)]
    Add(AddArgs),
    /// Move every chunk off a device of a volume and detach it; its labels are zeroed.
    ///
    /// The chunks move to free slots of the other devices first (refused when too few are
    /// free), then the first device's labels switch to the table without it. A crash leaves
    /// the volume with or without the device, every key intact: run the same command again
    /// to finish. The first device (labels and logs) cannot be removed.
    ///
    /// Example: lds device remove volume.img volume-2.img
    #[command(verbatim_doc_comment)]
    Remove(RemoveArgs),
    /// List a volume's devices: path, uuid, slots, bytes, slots in use.
    ///
    /// Example: lds device list volume.img --json
    #[command(verbatim_doc_comment)]
    List(ListArgs),
}

/// Arguments of `lds device add`.
#[derive(Debug, Clone, clap::Args)]
pub struct AddArgs {
    /// Any device of the volume.
    pub path: PathBuf,
    /// The device to join.
    pub new_device: PathBuf,
    /// Create NEWDEV as an image file of this size (or extend a shorter image file to it).
    #[arg(long, value_parser = crate::units::parse_size)]
    pub size: Option<u64>,
    /// Join NEWDEV even though it holds a known signature.
    #[arg(long)]
    pub force: bool,
    /// Print what would be done and write nothing.
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// Print JSON (lds-device/1).
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `lds device remove`.
#[derive(Debug, Clone, clap::Args)]
pub struct RemoveArgs {
    /// Any device of the volume.
    pub path: PathBuf,
    /// The device to remove.
    pub device: PathBuf,
    /// Print what would be done and write nothing.
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// Print JSON (lds-device/1).
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `lds device list`.
#[derive(Debug, Clone, clap::Args)]
pub struct ListArgs {
    /// Any device of the volume.
    pub path: PathBuf,
    /// Print JSON (lds-device/1).
    #[arg(long)]
    pub json: bool,
}

/// Runs an `lds device` subcommand; returns the exit code.
pub fn run(command: &DeviceCommand, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let result = match command {
        DeviceCommand::Add(args) => add(args, out, err),
        DeviceCommand::Remove(args) => remove(args, out, err),
        DeviceCommand::List(args) => list(args, out),
    };
    match result {
        Ok(()) => 0,
        Err((code, message)) => {
            let _ = writeln!(err, "lds device: {message}");
            code
        }
    }
}

type Outcome = Result<(), (i32, String)>;

fn operational(error: impl std::fmt::Display) -> (i32, String) {
    (EXIT_OPERATIONAL, error.to_string())
}

fn refusal(error: ResizeError) -> (i32, String) {
    match error {
        ResizeError::Device(_) => (EXIT_OPERATIONAL, error.to_string()),
        error => (EXIT_REFUSED, error.to_string()),
    }
}

fn open_volume(path: &Path) -> Result<VolumeDevice, (i32, String)> {
    Members::open(path, OpenMode::ReadOnlyLocked, std::time::Duration::ZERO)
        .map_err(|error| operational(crate::session::read_error(&error)))
}

/// The session of a device change (it keeps no undo file: a crash leaves the volume with or
/// without the device, and running the command again finishes it).
fn open_session(path: &Path, command: &str, err: &mut dyn Write) -> Result<Session, (i32, String)> {
    crate::session::open(path, command, std::time::Duration::ZERO, err)
        .map_err(|error| operational(crate::session::open_error(&error, false)))
}

fn volume_label(volume: &VolumeDevice) -> Result<Label, (i32, String)> {
    let labels = read_labels(volume).map_err(operational)?;
    let (_, label) = labels
        .choose()
        .map_err(|_| operational(format!("{}: not an LDS volume (no usable label)", volume.name().display())))?;
    Ok(label.clone())
}

/// The place of the device at `path` among the volume's devices: the one whose bytes it
/// names (through links, device nodes and loop devices, docs/safety.md).
fn index_of(volume: &VolumeDevice, path: &Path) -> Option<usize> {
    let wanted = lds_volume::identity::identity(path).ok()?;
    volume.devices().iter().position(|device| {
        lds_volume::identity::identity(device.path()).is_ok_and(|member| member.overlap(&wanted).is_some())
    })
}

fn describe(plan: &DevicePlan, adding: bool) -> String {
    let (old, new) = (&plan.old.geometry, &plan.new.geometry);
    let devices = |label: &Label| label.devices.as_ref().map_or(1, |table| table.devices.len());
    if plan.done() {
        return format!("nothing to do: {} devices, {} slots", devices(&plan.new), new.num_slots);
    }
    let entry = |label: &Label| label.devices.as_ref().and_then(|table| table.devices.get(plan.index).copied());
    let what = if adding {
        match entry(&plan.new) {
            Some(entry) if !plan.finishing => format!(
                "device {} joins with {} slots ({} to {}, {} bytes)",
                plan.index,
                entry.num_slots,
                entry.first_slot,
                entry.end_slot() - 1,
                entry.num_slots * new.slot_size
            ),
            _ => format!("device {} joined before: {} base versions to finish", plan.index, plan.rebase.len()),
        }
    } else {
        format!(
            "device {} leaves: {} chunks and value chunks to move ({} bytes)",
            plan.index,
            plan.moves.len(),
            plan.bytes_to_copy()
        )
    };
    format!(
        "{what}; {} -> {} devices, {} -> {} slots",
        devices(&plan.old),
        devices(&plan.new),
        old.num_slots,
        new.num_slots
    )
}

fn report(
    out: &mut dyn Write,
    json_output: bool,
    path: &Path,
    plan: &DevicePlan,
    adding: bool,
    writes: Option<&[Written]>,
) -> Outcome {
    if json_output {
        let document = json!({
            "schema": "lds-device/1",
            "device": path.display().to_string(),
            "operation": if adding { "add" } else { "remove" },
            "dry_run": writes.is_none(),
            "index": plan.index,
            "finishing": plan.finishing,
            "old_generation": plan.old.generation,
            "new_generation": plan.new.generation,
            "old_num_slots": plan.old.geometry.num_slots,
            "new_num_slots": plan.new.geometry.num_slots,
            "moves": plan.moves.iter().map(crate::render::move_json).collect::<Vec<_>>(),
            "bytes_to_copy": plan.bytes_to_copy(),
            "rebase": plan.rebase,
            "writes": writes.map(|writes| writes.iter().map(|write| json!({
                "structure": write.structure, "offset": write.offset, "len": write.len,
            })).collect::<Vec<_>>()),
        });
        writeln!(out, "{document}").map_err(operational)?;
    } else {
        let suffix = if writes.is_none() { "; nothing was written (-n)" } else { "" };
        writeln!(out, "{}: {}{suffix}", path.display(), describe(plan, adding)).map_err(operational)?;
    }
    Ok(())
}

/// Refuses a joining device whose labels name this volume and a device its table lists: the
/// volume's devices were all found and `path` is none of them (`index_of`), so it is a copy
/// of one (a cloned image, a dd of a member), never a new device, even with --force: joining
/// it would give the volume two devices claiming one place (docs/safety.md).
fn refuse_copy(path: &Path, label: &Label, device: &dyn lds_volume::BlockDevice) -> Result<(), (i32, String)> {
    let Some(uuid) = device_uuid_of(&label.geometry.volume_uuid, device).map_err(refusal)? else { return Ok(()) };
    let Some(index) = label.devices.as_ref().and_then(|table| table.index_of(&uuid)) else { return Ok(()) };
    Err((
        EXIT_REFUSED,
        format!(
            "{}: its labels name it device {index} of this volume, which is another device: it is a copy of a device already in the volume, not a new one (zero its first sector to join it)",
            path.display()
        ),
    ))
}

/// Opens the joining device for writing: an existing one (refusing a copy of one of the
/// volume's devices, and signatures but a label a join of this volume left on it), or a new
/// image file of `--size` bytes. Every refusal comes before the first change to the device,
/// the growth of an image file to `--size` included.
fn open_joining(args: &AddArgs, label: &Label) -> Result<Device, (i32, String)> {
    let path = &args.new_device;
    if !path.exists() {
        let Some(size) = args.size else {
            return Err((16, format!("{}: does not exist; give --size to create an image file", path.display())));
        };
        return Device::create_image(path, size).map_err(operational);
    }
    let mut device = Device::open(path, OpenMode::ReadWrite).map_err(operational)?;
    refuse_copy(path, label, &device)?;
    // A label a join of this volume left (an interrupted run, before the table lists the
    // device) may be replaced; a copy of a single-device volume (no table) may not.
    let volume_uuid = label.geometry.volume_uuid;
    lds_volume::safety::refuse_replacing(&device, args.force, "lds device add", |found| {
        found.geometry.volume_uuid == volume_uuid && found.devices.is_some()
    })
    .map_err(|error| match error {
        lds_volume::safety::SafetyError::Device(error) => operational(error),
        error => (EXIT_REFUSED, error.to_string()),
    })?;
    if let Some(size) = args.size {
        if device.kind() == DeviceKind::ImageFile && device.len() < size {
            device.allocate(size).map_err(operational)?;
            device.set_image_len(size).map_err(operational)?;
        }
    }
    Ok(device)
}

fn add(args: &AddArgs, out: &mut dyn Write, err: &mut dyn Write) -> Outcome {
    let (read, session);
    let volume = if args.dry_run {
        read = open_volume(&args.path)?;
        &read
    } else {
        session = open_session(&args.path, "device add", err)?;
        session.device()
    };
    let label = volume_label(volume)?;
    let uuids = JoinUuids {
        first: lds_tools::mkfs::random_uuid().map_err(operational)?,
        joining: lds_tools::mkfs::random_uuid().map_err(operational)?,
    };
    if index_of(volume, &args.new_device) == Some(0) {
        return Err((
            EXIT_REFUSED,
            format!(
                "{}: is the volume's first device ({}); a volume cannot join itself",
                args.new_device.display(),
                volume.first().path().display()
            ),
        ));
    }
    if let Some(index) = index_of(volume, &args.new_device) {
        // Joined before: finish what an interrupted run left (labels, base versions).
        let joining = &volume.devices()[index];
        if args.dry_run {
            let uuid = device_uuid_of(&label.geometry.volume_uuid, joining).map_err(refusal)?;
            let plan = plan_add(volume, joining.len(), uuid, uuids).map_err(refusal)?;
            return report(out, args.json, &args.path, &plan, true, None);
        }
        let (plan, writes) = add_device(volume, joining, uuids).map_err(refusal)?;
        return report(out, args.json, &args.path, &plan, true, Some(&writes));
    }
    if args.dry_run {
        let (len, uuid) = match Device::open(&args.new_device, OpenMode::ReadOnly) {
            Ok(device) => {
                refuse_copy(&args.new_device, &label, &device)?;
                (device.len(), device_uuid_of(&label.geometry.volume_uuid, &device).map_err(refusal)?)
            }
            Err(_) => (args.size.unwrap_or(0), None),
        };
        let plan = plan_add(volume, len, uuid, uuids).map_err(refusal)?;
        return report(out, args.json, &args.path, &plan, true, None);
    }
    let joining = open_joining(args, &label)?;
    let (plan, writes) = add_device(volume, &joining, uuids).map_err(refusal)?;
    report(out, args.json, &args.path, &plan, true, Some(&writes))
}

fn remove(args: &RemoveArgs, out: &mut dyn Write, err: &mut dyn Write) -> Outcome {
    let (read, session);
    let volume = if args.dry_run {
        read = open_volume(&args.path)?;
        &read
    } else {
        session = open_session(&args.path, "device remove", err)?;
        session.device()
    };
    let mode = if args.dry_run { OpenMode::ReadOnlyLocked } else { OpenMode::ReadWrite };
    let Some(index) = index_of(volume, &args.device) else {
        // Not a device of the volume: one an interrupted removal left labeled, or a mistake.
        let device = Device::open(&args.device, mode).map_err(operational)?;
        if args.dry_run {
            writeln!(out, "{}: not a device of the volume; nothing was written (-n)", args.device.display())
                .map_err(operational)?;
            return Ok(());
        }
        let writes = finish_removal(volume, &device).map_err(refusal)?;
        writeln!(
            out,
            "{}: removed from the volume before; the removal is finished and its labels are zeroed ({} writes)",
            args.device.display(),
            writes.len()
        )
        .map_err(operational)?;
        return Ok(());
    };
    if args.dry_run {
        let plan = plan_remove(volume, index).map_err(refusal)?;
        return report(out, args.json, &args.path, &plan, false, None);
    }
    let (plan, writes) = lds_repair::devices::remove_device(volume, index).map_err(refusal)?;
    report(out, args.json, &args.path, &plan, false, Some(&writes))
}

fn list(args: &ListArgs, out: &mut dyn Write) -> Outcome {
    let volume = open_volume(&args.path)?;
    let label = volume_label(&volume)?;
    let geometry = label.geometry;
    let mut used = vec![false; geometry.num_slots as usize];
    for (instance, state) in all_versions(&volume, &geometry).map_err(operational)? {
        let state = state.map_err(|error| operational(format!("instance {instance}: {error}")))?;
        let chunk_slots = state.version.chunks.values().flat_map(|chunk| chunk.slots());
        let value_slots = state.version.value_chunks.values().map(|value_chunk| value_chunk.slot);
        for slot in chunk_slots.chain(value_slots) {
            if let Some(bit) = used.get_mut(slot as usize) {
                *bit = true;
            }
        }
    }
    let in_use =
        |first: u64, count: u64| used[first as usize..(first + count) as usize].iter().filter(|&&bit| bit).count();
    let rows: Vec<serde_json::Value> = match &label.devices {
        None => vec![json!({
            "index": 0,
            "path": volume.first().path().display().to_string(),
            "device_uuid": serde_json::Value::Null,
            "first_slot": 0,
            "num_slots": geometry.num_slots,
            "len_device": geometry.volume_len,
            "slots_in_use": in_use(0, geometry.num_slots),
        })],
        Some(table) => table
            .devices
            .iter()
            .zip(volume.devices())
            .enumerate()
            .map(|(index, (entry, device))| {
                json!({
                    "index": index,
                    "path": device.path().display().to_string(),
                    "device_uuid": uuid_string(&entry.device_uuid),
                    "first_slot": entry.first_slot,
                    "num_slots": entry.num_slots,
                    "len_device": entry.len_device,
                    "slots_in_use": in_use(entry.first_slot, entry.num_slots),
                })
            })
            .collect(),
    };
    if args.json {
        let document = json!({
            "schema": "lds-device/1",
            "volume_uuid": uuid_string(&geometry.volume_uuid),
            "generation": label.generation,
            "slot_size": geometry.slot_size,
            "num_slots": geometry.num_slots,
            "devices": rows,
        });
        writeln!(out, "{document}").map_err(operational)?;
        return Ok(());
    }
    writeln!(
        out,
        "volume {} (generation {}), slots of {} bytes",
        uuid_string(&geometry.volume_uuid),
        label.generation,
        geometry.slot_size
    )
    .map_err(operational)?;
    writeln!(out, "{:>3}  {:<36}  {:>7} {:>7} {:>7}  {:>14}  path", "dev", "uuid", "first", "slots", "in use", "bytes")
        .map_err(operational)?;
    for row in rows {
        writeln!(
            out,
            "{:>3}  {:<36}  {:>7} {:>7} {:>7}  {:>14}  {}",
            row["index"].as_u64().unwrap_or(0),
            row["device_uuid"].as_str().unwrap_or("-"),
            row["first_slot"].as_u64().unwrap_or(0),
            row["num_slots"].as_u64().unwrap_or(0),
            row["slots_in_use"].as_u64().unwrap_or(0),
            row["len_device"].as_u64().unwrap_or(0),
            row["path"].as_str().unwrap_or("")
        )
        .map_err(operational)?;
    }
    Ok(())
}
