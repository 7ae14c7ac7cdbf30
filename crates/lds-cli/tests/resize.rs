//! Guards `lds resize` on image files and on a loop device: grow, shrink with chunk moves,
//! --min and --dry-run (which write nothing), a size below the minimum refused before any
//! write, a second run with nothing to do, lds undo after a resize; after every step fsck
//! exits 0 and lds scan returns every key. The loop device test attaches its own device,
//! grows its backing file, tells the kernel (losetup -c) and detaches exactly that device.

mod common;

use common::{serial, skip_unless_root, LoopDevice};
use std::path::{Path, PathBuf};
use std::process::Command;

use lds_cli::kv::{self, ScanRange, Target};
use lds_cli::mkfs::MkfsOptions;
use lds_cli::resize::{run, ResizeArgs};
use lds_cli::session::UndoChoice;

fn scratch(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("lds-resize-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&path);
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
    lds_cli::fsck::run(&options, &mut Vec::new(), &mut Vec::new())
}

fn resize(path: &Path, size: Option<u64>, dry_run: bool, min: bool, no_undo: bool) -> (i32, String, String) {
    let args = ResizeArgs {
        path: path.to_path_buf(),
        size,
        dry_run,
        min,
        undo: UndoChoice { undo_file: None, no_undo },
        json: true,
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(&args, &mut out, &mut err);
    (code, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|error| panic!("{error}: {text}"))
}

/// Loads `rounds` rounds of keys, each round flushed to its own chunks.
fn load(path: &Path, rounds: u32) {
    for round in 0..rounds {
        let input: String = (0..4000)
            .map(|number| format!("r{round:02}-{number:05}\tvalue-{round}-{number}-{}\n", "v".repeat(60)))
            .collect();
        let mut err = Vec::new();
        let code = kv::load(&target(path), None, false, &mut input.as_bytes(), &mut Vec::new(), &mut err);
        assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    }
}

/// Merges every level into the last (`Db::compact_range`).
fn compact(path: &Path) {
    let options = lds_engine::Options { background: false, ..lds_engine::Options::default() };
    let db = lds_engine::Db::open(path, options).unwrap_or_else(|error| panic!("{error}"));
    db.compact_range().unwrap_or_else(|error| panic!("{error}"));
    db.close().unwrap_or_else(|error| panic!("{error}"));
}

#[test]
fn grow_shrink_with_moves_min_dry_run_and_undo_on_an_image_file() {
    let _serial = serial();
    let image = scratch("image.img");
    let undo_file = PathBuf::from(format!("{}.lds-undo", image.display()));
    let _ = std::fs::remove_file(&undo_file);
    let options =
        MkfsOptions { path: image.clone(), size: Some(16 << 20), slot_size: Some(256 << 10), ..Default::default() };
    assert_eq!(lds_cli::mkfs::run(&options, &mut Vec::new(), &mut Vec::new()), 0);
    load(&image, 3);
    let expected = scan(&image);

    // Grow: the image file is extended, the new slots are usable, the keys are all there.
    let (code, out, err) = resize(&image, Some(40 << 20), false, false, true);
    assert_eq!(code, 0, "{err}");
    let grown = json(&out);
    assert!(grown["plan"]["new"]["num_slots"].as_u64() > grown["plan"]["old"]["num_slots"].as_u64(), "{grown}");
    assert_eq!(std::fs::metadata(&image).map(|metadata| metadata.len()).unwrap_or(0), 40 << 20);
    assert_eq!(fsck(&image), 0);
    assert_eq!(scan(&image), expected);
    // More data, then one compaction of it all: its outputs are written while its inputs
    // still hold the low slots, so that a shrink to the minimum has chunks to move.
    load(&image, 6);
    compact(&image);
    let expected = scan(&image);
    assert_eq!(fsck(&image), 0);

    // --min, and a dry run below it: refused, nothing written.
    let before = std::fs::read(&image).unwrap_or_default();
    let (code, out, _) = resize(&image, None, false, true, true);
    assert_eq!(code, 0);
    let min = json(&out)["min_len"].as_u64().unwrap_or(0);
    assert!(min > 0 && min < 40 << 20, "{out}");
    let (code, out, _) = resize(&image, Some(min - (256 << 10)), true, false, true);
    assert_eq!(code, 1, "{out}");
    let (code, _, err) = resize(&image, Some(min - (256 << 10)), false, false, true);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("smallest size"), "{err}");
    assert!(std::fs::read(&image).unwrap_or_default() == before, "a refused resize wrote");

    // Shrink to the minimum: chunks move, with an undo file; the image keeps its length for it.
    let (code, out, err) = resize(&image, Some(min), false, false, false);
    assert_eq!(code, 0, "{err}");
    let shrunk = json(&out);
    assert!(shrunk["plan"]["moves"].as_array().is_some_and(|moves| !moves.is_empty()), "nothing moved: {shrunk}");
    assert_eq!(fsck(&image), 0);
    assert_eq!(scan(&image), expected);
    assert!(undo_file.exists());
    // lds undo puts the grown volume back, byte for byte.
    let args =
        lds_cli::undo::UndoArgs { undo_file: undo_file.clone(), path: image.clone(), force: false, dry_run: false };
    assert_eq!(lds_cli::undo::run(&args, &mut Vec::new(), &mut Vec::new()), 0);
    assert!(std::fs::read(&image).unwrap_or_default() == before, "undo did not restore the volume");
    let _ = std::fs::remove_file(&undo_file);

    // Again without an undo file: the image is truncated; a second run has nothing to do.
    let (code, _, err) = resize(&image, Some(min), false, false, true);
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::metadata(&image).map(|metadata| metadata.len()).unwrap_or(0), min);
    assert_eq!(fsck(&image), 0);
    assert_eq!(scan(&image), expected);
    let (code, out, _) = resize(&image, Some(min), false, false, true);
    assert_eq!(code, 0);
    assert!(out.contains("nothing to do"), "{out}");
    // Grown again, by sixteen slots: the store writes to it (a merge of the round it loads
    // with the fifteen chunks there needs as many slots again), and loses nothing.
    let (code, _, err) = resize(&image, Some(min + (4 << 20)), false, false, true);
    assert_eq!(code, 0, "{err}");
    load(&image, 1);
    assert_eq!(fsck(&image), 0);
    assert_eq!(scan(&image), expected);
    let _ = std::fs::remove_file(&image);
}

#[test]
fn grow_a_loop_device_after_losetup_c_then_shrink_it() {
    let _serial = serial();
    if !skip_unless_root() {
        return;
    }
    let backing = scratch("loop.img");
    let loop_device = LoopDevice::attach(&backing, 24 << 20).unwrap_or_else(|| panic!("cannot attach a loop device"));
    let device = loop_device.device.clone();
    let options = MkfsOptions { path: device.clone(), slot_size: Some(256 << 10), ..Default::default() };
    assert_eq!(lds_cli::mkfs::run(&options, &mut Vec::new(), &mut Vec::new()), 0);
    load(&device, 3);
    let expected = scan(&device);
    // Asking for more than the device holds is refused.
    let (code, _, err) = resize(&device, Some(48 << 20), false, false, true);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("grow the device first"), "{err}");
    // Grow the backing file and tell the kernel; then grow the volume.
    let file = std::fs::OpenOptions::new().write(true).open(&backing).unwrap_or_else(|error| panic!("{error}"));
    file.set_len(48 << 20).unwrap_or_else(|error| panic!("{error}"));
    drop(file);
    let status = Command::new("losetup").arg("-c").arg(&device).status();
    assert!(status.is_ok_and(|status| status.success()), "losetup -c failed");
    let (code, out, err) = resize(&device, Some(48 << 20), false, false, true);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["plan"]["new"]["volume_len"], 48u64 << 20);
    assert_eq!(fsck(&device), 0);
    assert_eq!(scan(&device), expected);
    load(&device, 4);
    let expected = scan(&device);
    // Shrink it back (a block device keeps its length; the volume ends earlier).
    let (code, _, err) = resize(&device, Some(24 << 20), false, false, true);
    assert_eq!(code, 0, "{err}");
    assert_eq!(fsck(&device), 0);
    assert_eq!(scan(&device), expected);
    load(&device, 1);
    assert_eq!(fsck(&device), 0);
    drop(loop_device);
}
