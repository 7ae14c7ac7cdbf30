//! Guards fsck and repair on volumes with value chunks (SPEC.md §8.6): an engine-written
//! kv-separated volume checks clean with `--deep` (every value read through its pointer); a
//! flipped byte in a value chunk's values is found only by `--deep` (702, 705) and repair
//! drops exactly the value it damaged; a zeroed value chunk footer is found by a plain check
//! (701) and repair keeps every value (they still match their crc32c).

mod volumes;

use std::path::{Path, PathBuf};

use lds_cli::kv::{self, ScanRange, Target};
use lds_cli::repair::RepairArgs;

const SLOT_SIZE: u64 = 256 << 10;

fn target(path: &Path) -> Target {
    Target { path: path.to_path_buf(), instance: 0, hex: false, wait: None, technique: "kv-separation".into() }
}

fn scan(path: &Path) -> Vec<String> {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = kv::scan(&target(path), &ScanRange::default(), &mut out, &mut err);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    String::from_utf8_lossy(&out).lines().map(str::to_string).collect()
}

/// fsck's exit code and JSON document.
fn fsck(path: &Path, deep: bool) -> (i32, serde_json::Value) {
    let options = lds_cli::fsck::FsckOptions { path: path.to_path_buf(), deep, json: true, ..Default::default() };
    let mut out = Vec::new();
    let code = lds_cli::fsck::run(&options, &mut out, &mut Vec::new());
    let text = String::from_utf8_lossy(&out);
    let document = serde_json::from_str(text.trim()).unwrap_or_else(|error| panic!("{error}: {text}"));
    (code, document)
}

use volumes::problem_codes as codes;

fn repair(path: &Path) -> i32 {
    let args = RepairArgs { path: path.to_path_buf(), yes: true, no_undo: true, ..RepairArgs::default() };
    lds_cli::repair::run(&args, &mut Vec::new(), &mut Vec::new())
}

/// A 32 MiB kv-separated volume holding 400 keys with values of 1 to 20 KiB and four of
/// 100 KiB (above a quarter slot: they can only live in value chunks).
fn volume(name: &str) -> PathBuf {
    let image = volumes::scratch("fsck-values", name);
    volumes::mkfs_with_value_chunks(&image.clone(), 32 << 20, SLOT_SIZE);
    let mut input = String::new();
    for number in 0..400u32 {
        let len = 1024 + (number as usize * 7919) % (19 << 10);
        let fill = char::from(b'a' + (number % 26) as u8);
        input.push_str(&format!("key-{number:04}\t{number:04}{}\n", fill.to_string().repeat(len)));
    }
    for number in 0..4u32 {
        input.push_str(&format!("big-{number}\t{}\n", format!("{number}").repeat(100 << 10)));
    }
    let mut err = Vec::new();
    let code = kv::load(&target(&image), None, false, &mut input.as_bytes(), &mut Vec::new(), &mut err);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    image
}

/// The offsets of the slots whose end holds a value chunk footer.
fn value_chunk_slots(image: &[u8]) -> Vec<usize> {
    let footer = lds_format::value::VALUE_FOOTER_LEN;
    let mut slots = Vec::new();
    let mut at = 0;
    while let Some(found) = image[at..].windows(8).position(|window| window == b"LDSVALUE") {
        let offset = at + found;
        if let Some(start) = (offset + footer).checked_sub(SLOT_SIZE as usize) {
            slots.push(start);
        }
        at = offset + 8;
    }
    slots
}

/// The offsets of the slots of the value chunks the recovered version lists.
fn live_value_chunk_slots(bytes: &[u8]) -> Vec<usize> {
    let image = lds_volume::MemoryImage(bytes);
    let labels = lds_volume::read_labels(&image).unwrap_or_else(|error| panic!("{error}"));
    let Ok((_, label)) = labels.choose() else { panic!("no label") };
    let geometry = label.geometry;
    let (_, recovery) = lds_volume::inspect::recover(&image, &geometry, 0).unwrap_or_else(|error| panic!("{error}"));
    let recovery = recovery.unwrap_or_else(|error| panic!("{error}"));
    let chunks = recovery.version_log.version.value_chunks.values();
    chunks.map(|chunk| geometry.slot_offset(chunk.slot) as usize).collect()
}

#[test]
fn deep_fsck_reads_every_value_and_repair_mends_damaged_value_chunks() {
    let image = volume("image");
    let expected = scan(&image);
    assert_eq!(expected.len(), 404);
    let (code, clean) = fsck(&image, true);
    assert_eq!(code, 0, "{clean}");
    let value_chunks = clean["summary"]["value_chunks"].as_u64().unwrap_or(0);
    assert!(value_chunks >= 2, "{clean}");
    assert!(clean["summary"]["values_verified"].as_u64().unwrap_or(0) >= 404, "{clean}");

    let mut bytes = std::fs::read(&image).unwrap_or_default();
    let slots = value_chunk_slots(&bytes);
    assert!(slots.len() as u64 >= value_chunks, "{} footers found, {value_chunks} value chunks", slots.len());

    // A flipped byte inside the values of one value chunk: a plain check reads no value.
    let flipped = slots[0] + 5000;
    bytes[flipped] ^= 0x40;
    std::fs::write(&image, &bytes).unwrap_or_default();
    let (code, plain) = fsck(&image, false);
    assert_eq!(code, 0, "a plain check reads footers only: {plain}");
    let (code, deep) = fsck(&image, true);
    assert_eq!(code, 4, "{deep}");
    assert_eq!(codes(&deep), vec![702, 705], "{deep}");
    assert_eq!(repair(&image), 1, "repair fixes what it finds (exit 1)");
    let (code, after) = fsck(&image, true);
    assert_eq!(code, 0, "{after}");
    let repaired = scan(&image);
    let lost: Vec<&String> = expected.iter().filter(|line| !repaired.contains(line)).collect();
    assert_eq!(lost.len(), 1, "exactly the damaged value is left out: {} lost", lost.len());
    assert_eq!(repaired.len(), expected.len() - 1, "no other key changed");

    // A zeroed footer: a plain check finds it; every value still matches, so repair keeps all.
    let mut bytes = std::fs::read(&image).unwrap_or_default();
    let (code, listed) = fsck(&image, false);
    assert_eq!(code, 0, "{listed}");
    // The flipped value chunk's slot is free now (its good values were copied), and stays
    // as it was: repair writes over no value chunk in a free slot (docs/reliability.md I10).
    assert!(value_chunk_slots(&bytes).contains(&(flipped - 5000)), "the damaged value chunk was written over");
    let live_slots = live_value_chunk_slots(&bytes);
    assert!(!live_slots.contains(&(flipped - 5000)));
    let Some(&live) = live_slots.first() else { panic!("one value chunk") };
    let footer_at = live + SLOT_SIZE as usize - lds_format::value::VALUE_FOOTER_LEN;
    bytes[footer_at..footer_at + lds_format::value::VALUE_FOOTER_LEN].fill(0);
    std::fs::write(&image, &bytes).unwrap_or_default();
    let (code, plain) = fsck(&image, false);
    assert_eq!(code, 4, "{plain}");
    assert_eq!(codes(&plain), vec![701], "{plain}");
    assert_eq!(repair(&image), 1);
    let (code, after) = fsck(&image, true);
    assert_eq!(code, 0, "{after}");
    assert_eq!(scan(&image), repaired, "the values of a value chunk with a lost footer are all kept");
    let _ = std::fs::remove_file(&image);
}
