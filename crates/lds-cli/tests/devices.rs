//! Guards `lds device add|remove|list` (SPEC.md §4.3) on image files and on loop devices: a
//! dry run writes nothing; a device joins and the store writes to its slots; the volume opens
//! by any of its devices (and by LDS_DEVICES when a device lies elsewhere); a device holding
//! chunks leaves (its chunks move, its labels are zeroed) leaving a gap or, with the last
//! one, a one-device volume again; refusals (the first device, too little room, another
//! signature, lds resize) write nothing. After every step fsck exits 0 and lds scan returns
//! every key. The loop device test attaches its own devices and detaches exactly those.

mod common;

use common::{serial, skip_unless_root, LoopDevice};
use std::path::{Path, PathBuf};

use lds_cli::device::{run, AddArgs, DeviceCommand, ListArgs, RemoveArgs};
use lds_cli::kv::{self, ScanRange, Target};
use lds_cli::mkfs::MkfsOptions;

/// A directory of this test's own, so that the files beside a volume are its devices.
fn scratch_dir(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("lds-device-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    std::fs::create_dir_all(&path).unwrap_or_else(|error| panic!("{error}"));
    path
}

fn target(path: &Path) -> Target {
    Target { path: path.to_path_buf(), instance: 0, hex: false, wait: None, technique: String::new() }
}

fn scan(path: &Path) -> String {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(
        kv::scan(&target(path), &ScanRange::default(), &mut out, &mut err),
        0,
        "{}",
        String::from_utf8_lossy(&err)
    );
    String::from_utf8_lossy(&out).into_owned()
}

fn fsck(path: &Path) -> i32 {
    let options = lds_cli::fsck::FsckOptions { path: path.to_path_buf(), deep: true, ..Default::default() };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = lds_cli::fsck::run(&options, &mut out, &mut err);
    if code != 0 {
        eprintln!("{}{}", String::from_utf8_lossy(&out), String::from_utf8_lossy(&err));
    }
    code
}

fn device(command: DeviceCommand) -> (i32, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(&command, &mut out, &mut err);
    (code, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}

fn add(path: &Path, new: &Path, size: Option<u64>, dry_run: bool) -> (i32, String, String) {
    device(DeviceCommand::Add(AddArgs {
        path: path.to_path_buf(),
        new_device: new.to_path_buf(),
        size,
        force: false,
        dry_run,
        json: true,
    }))
}

fn remove(path: &Path, gone: &Path, dry_run: bool) -> (i32, String, String) {
    device(DeviceCommand::Remove(RemoveArgs {
        path: path.to_path_buf(),
        device: gone.to_path_buf(),
        dry_run,
        json: true,
    }))
}

fn list(path: &Path) -> serde_json::Value {
    let (code, out, err) = device(DeviceCommand::List(ListArgs { path: path.to_path_buf(), json: true }));
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(out.trim()).unwrap_or_else(|error| panic!("{error}: {out}"))
}

/// Slots in use on each device, in table order.
fn in_use(path: &Path) -> Vec<u64> {
    let listed = list(path);
    let devices = listed["devices"].as_array().cloned().unwrap_or_default();
    devices.iter().map(|device| device["slots_in_use"].as_u64().unwrap_or(0)).collect()
}

/// Loads `rounds` rounds of keys, each round flushed to its own chunks. Rounds overwrite the
/// same 4,000 keys: the data stays a few slots while the allocation cursor moves on through
/// the slot area (SPEC.md §10.4), onto the next device.
/// All in one process, whose allocation cursor starts at slot 0 when it opens.
fn load(path: &Path, first_round: u32, rounds: u32) {
    let input: String = (first_round..first_round + rounds)
        .flat_map(|round| {
            (0..4000).map(move |number| format!("key-{number:05}\tvalue-{round}-{number}-{}\n", "v".repeat(60)))
        })
        .collect();
    let mut err = Vec::new();
    let code = kv::load(&target(path), None, false, &mut input.as_bytes(), &mut Vec::new(), &mut err);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
}

/// Loads rounds until device `index` holds live chunks (bounded); returns the next round.
/// Each load opens the store anew (its cursor at slot 0) and ends wherever its allocations
/// took the cursor, so that loads of different lengths end on different devices.
fn load_onto(path: &Path, index: usize, mut round: u32) -> u32 {
    for attempt in 0..12 {
        if in_use(path).get(index).is_some_and(|&used| used > 0) {
            return round;
        }
        load(path, round, 3 + 4 * attempt);
        round += 3 + 4 * attempt;
    }
    panic!("twelve loads put no chunk on device {index}: {:?}", list(path));
}

#[test]
fn join_fill_and_remove_devices_of_image_files() {
    let _serial = serial();
    let directory = scratch_dir("images");
    let first = directory.join("first.img");
    let second = directory.join("second.img");
    let third = directory.join("third.img");
    let options =
        MkfsOptions { path: first.clone(), size: Some(24 << 20), slot_size: Some(256 << 10), ..Default::default() };
    assert_eq!(lds_cli::mkfs::run(&options, &mut Vec::new(), &mut Vec::new()), 0);
    load(&first, 0, 3);
    let expected = scan(&first);

    // A dry run plans and writes nothing (not even the new image file).
    let before = std::fs::read(&first).unwrap_or_default();
    let (code, out, err) = add(&first, &second, Some(6 << 20), true);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"dry_run\":true"), "{out}");
    assert!(!second.exists(), "a dry run created the device");
    assert!(std::fs::read(&first).unwrap_or_default() == before, "a dry run wrote");

    // Join: the image file is created; the volume reads the same and has more slots.
    let (code, out, err) = add(&first, &second, Some(6 << 20), false);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"operation\":\"add\""), "{out}");
    assert_eq!(fsck(&first), 0);
    assert_eq!(scan(&first), expected);
    assert_eq!(list(&first)["devices"].as_array().map(Vec::len), Some(2));
    // The store writes to the new device's slots; the volume opens by either device.
    let round = load_onto(&first, 1, 3);
    let expected = scan(&first);
    assert_eq!(fsck(&second), 0);
    assert_eq!(scan(&second), expected);
    // Running the join again has nothing left to do.
    let (code, out, err) = add(&first, &second, None, false);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"rebase\":[]"), "{out}");

    // lds resize refuses a volume of several devices.
    let args = lds_cli::resize::ResizeArgs {
        path: first.clone(),
        size: Some(16 << 20),
        dry_run: false,
        min: false,
        undo: lds_cli::session::UndoChoice { undo_file: None, no_undo: true },
        json: false,
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(lds_cli::resize::run(&args, &mut out, &mut err), 1);
    assert!(String::from_utf8_lossy(&err).contains("device"), "{}", String::from_utf8_lossy(&err));

    // A third device; then the second, holding chunks, leaves: a gap of slots is left.
    let (code, _, err) = add(&second, &third, Some(8 << 20), false);
    assert_eq!(code, 0, "{err}");
    let round = load_onto(&first, 2, round);
    let round = load_onto(&first, 1, round);
    let expected = scan(&first);
    let all = [&first, &second, &third].map(|path| std::fs::read(path).unwrap_or_default());
    // The first device cannot be removed; refusals write nothing.
    let (code, _, err) = remove(&second, &first, false);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("first device"), "{err}");
    let (code, out, err) = remove(&first, &second, true);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"moves\":[{"), "a dry run plans moves: {out}");
    assert!([&first, &second, &third].map(|path| std::fs::read(path).unwrap_or_default()) == all);
    let (code, out, err) = remove(&first, &second, false);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"moves\":[{"), "{out}");
    assert_eq!(fsck(&first), 0);
    assert_eq!(scan(&third), expected);
    assert_eq!(list(&first)["devices"].as_array().map(Vec::len), Some(2));
    // The removed device holds no label; removing it again finds nothing left to do.
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let options = lds_cli::fsck::FsckOptions { path: second.clone(), ..Default::default() };
    assert_eq!(lds_cli::fsck::run(&options, &mut out, &mut err), 8);
    let all = [&first, &second, &third].map(|path| std::fs::read(path).unwrap_or_default());
    let (code, out, err) = remove(&first, &second, false);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(0 writes)"), "{out}");
    assert!([&first, &second, &third].map(|path| std::fs::read(path).unwrap_or_default()) == all);
    // The store writes past the gap, never in it.
    load(&first, round, 2);
    let expected = scan(&first);
    assert_eq!(fsck(&first), 0);

    // A device with another signature is refused without --force.
    let foreign = directory.join("foreign.img");
    let mut bytes = vec![0u8; 4 << 20];
    bytes[1080..1082].copy_from_slice(&[0x53, 0xEF]);
    std::fs::write(&foreign, &bytes).unwrap_or_else(|error| panic!("{error}"));
    let (code, _, err) = add(&first, &foreign, None, false);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("ext2/ext3/ext4"), "{err}");
    let _ = std::fs::remove_file(&foreign);

    // The last other device leaves: a one-device volume again, every key there.
    let (code, _, err) = remove(&third, &third, false);
    assert_eq!(code, 0, "{err}");
    assert_eq!(fsck(&first), 0);
    assert_eq!(scan(&first), expected);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let dump = lds_cli::dump::DumpOptions {
        path: first.clone(),
        what: lds_cli::dump::DumpWhat::Label,
        instance: 0,
        json: true,
        entries: false,
        wait: std::time::Duration::ZERO,
    };
    assert_eq!(lds_cli::dump::run(&dump, &mut out, &mut err), 0);
    let label: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}"));
    // The feature multi_device cleared; mkfs's 1.7 features stay (SPEC.md §17).
    assert_eq!(label["primary"]["features_incompat"], 1 | 4 | 64, "{label}");
    assert_eq!(label["primary"]["version_minor"], 7, "{label}");
    let _ = std::fs::remove_dir_all(&directory);
}

#[test]
fn a_device_elsewhere_is_found_through_lds_devices() {
    let _serial = serial();
    let directory = scratch_dir("elsewhere");
    let other = scratch_dir("elsewhere-other");
    let first = directory.join("first.img");
    let second = other.join("second.img");
    let options =
        MkfsOptions { path: first.clone(), size: Some(12 << 20), slot_size: Some(256 << 10), ..Default::default() };
    assert_eq!(lds_cli::mkfs::run(&options, &mut Vec::new(), &mut Vec::new()), 0);
    load(&first, 0, 2);
    let (code, _, err) = add(&first, &second, Some(6 << 20), false);
    assert_eq!(code, 0, "{err}");
    // The lds binary, as a user runs it: without LDS_DEVICES the second device is not found.
    let lds = env!("CARGO_BIN_EXE_lds");
    let output = std::process::Command::new(lds).arg("fsck").arg(&first).env_remove("LDS_DEVICES").output();
    let output = output.unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(output.status.code(), Some(8));
    assert!(String::from_utf8_lossy(&output.stderr).contains("LDS_DEVICES"), "{output:?}");
    let output = std::process::Command::new(lds).arg("fsck").arg(&first).env("LDS_DEVICES", &second).output();
    let output = output.unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let _ = std::fs::remove_dir_all(&directory);
    let _ = std::fs::remove_dir_all(&other);
}

#[test]
fn join_and_remove_a_loop_device() {
    let _serial = serial();
    if !skip_unless_root() {
        return;
    }
    let directory = scratch_dir("loops");
    let first = LoopDevice::attach(&directory.join("first.backing"), 12 << 20)
        .unwrap_or_else(|| panic!("cannot attach a loop device"));
    let second = LoopDevice::attach(&directory.join("second.backing"), 8 << 20)
        .unwrap_or_else(|| panic!("cannot attach a second loop device"));
    let options = MkfsOptions { path: first.device.clone(), slot_size: Some(256 << 10), ..Default::default() };
    assert_eq!(lds_cli::mkfs::run(&options, &mut Vec::new(), &mut Vec::new()), 0);
    load(&first.device, 0, 3);
    let (code, _, err) = add(&first.device, &second.device, None, false);
    assert_eq!(code, 0, "{err}");
    assert_eq!(fsck(&first.device), 0);
    // Found among the block devices of /proc/partitions, from either device.
    let round = load_onto(&first.device, 1, 3);
    let expected = scan(&second.device);
    assert_eq!(fsck(&second.device), 0);
    let (code, _, err) = remove(&first.device, &second.device, false);
    assert_eq!(code, 0, "{err}");
    assert_eq!(fsck(&first.device), 0);
    assert_eq!(scan(&first.device), expected);
    load(&first.device, round, 1);
    assert_eq!(fsck(&first.device), 0);
    drop(second);
    drop(first);
    let _ = std::fs::remove_dir_all(&directory);
}
