//! Guards `lds salvage`: on a volume whose version log is zeroed, then whose labels are zeroed
//! too, the new volume it writes is fsck-clean and holds exactly the keys and values the
//! damaged volume held (the newest of each, deletes dropped); a damaged block loses only the
//! keys of its range, reported, with exit 1; the source is never written; usage errors are
//! named.

mod volumes;

use std::path::{Path, PathBuf};

use lds_cli::kv::{self, ScanRange, Target};
use lds_cli::mkfs::MkfsOptions;
use lds_cli::salvage::SalvageArgs;
use lds_format::geometry::LogKind;

fn scratch(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("lds-salvage-test-{}-{name}.img", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

fn target(path: &Path) -> Target {
    Target { path: path.to_path_buf(), instance: 0, hex: false, wait: None, technique: String::new() }
}

fn scan(path: &Path) -> String {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let range = ScanRange { start: None, end: None, prefix: None, limit: None, json: false };
    assert_eq!(kv::scan(&target(path), &range, &mut out, &mut err), 0, "{}", String::from_utf8_lossy(&err));
    String::from_utf8_lossy(&out).into_owned()
}

fn fsck(path: &Path) -> i32 {
    let options = lds_cli::fsck::FsckOptions { path: path.to_path_buf(), deep: true, ..Default::default() };
    lds_cli::fsck::run(&options, &mut Vec::new(), &mut Vec::new())
}

/// A volume written by the engine: 20,000 keys, every tenth overwritten, three deleted.
fn written_volume(name: &str) -> (PathBuf, String) {
    let path = scratch(name);
    let options =
        MkfsOptions { path: path.clone(), size: Some(48 << 20), slot_size: Some(256 << 10), ..Default::default() };
    assert_eq!(lds_cli::mkfs::run(&options, &mut Vec::new(), &mut Vec::new()), 0);
    let first: String =
        (0..20_000).map(|number| format!("key{number:06}\tvalue-{number}-{}\n", "v".repeat(number % 90))).collect();
    let second: String = (0..20_000).step_by(10).map(|number| format!("key{number:06}\tover-{number}\n")).collect();
    for input in [first, second] {
        let code = kv::load(&target(&path), None, false, &mut input.as_bytes(), &mut Vec::new(), &mut Vec::new());
        assert_eq!(code, 0);
    }
    for key in ["key000001", "key000003", "key000005"] {
        assert_eq!(kv::delete(&target(&path), key, false, &mut Vec::new()), 0);
    }
    let expected = scan(&path);
    assert_eq!(expected.lines().count(), 19_997);
    (path, expected)
}

fn geometry_of(path: &Path) -> lds_format::geometry::Geometry {
    let device =
        lds_volume::Device::open(path, lds_volume::OpenMode::ReadOnly).unwrap_or_else(|error| panic!("{error}"));
    let pair = lds_volume::read_labels(&device).unwrap_or_else(|error| panic!("{error}"));
    pair.choose().map(|(_, label)| label.geometry).unwrap_or_else(|error| panic!("{error:?}"))
}

fn zero(path: &Path, offset: u64, len: u64) {
    use std::io::{Seek, SeekFrom, Write};
    let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap_or_else(|error| panic!("{error}"));
    file.seek(SeekFrom::Start(offset)).unwrap_or_else(|error| panic!("{error}"));
    file.write_all(&vec![0; len as usize]).unwrap_or_else(|error| panic!("{error}"));
}

#[test]
fn salvage_recovers_every_key_without_version_log_or_labels() {
    let (source, expected) = written_volume("source-whole");
    let geometry = geometry_of(&source);
    let (version_offset, version_len) = geometry.log_area(LogKind::Version, 0);
    zero(&source, version_offset, version_len);
    assert_eq!(fsck(&source), 4, "a zeroed version log is an error");

    let before = std::fs::read(&source).unwrap_or_default();
    let output = scratch("out-no-version-log");
    let (code, out, err) = volumes::salvage(&volumes::salvage_args(&source, Some(&output)));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("layout from label"), "{out}");
    assert!(out.contains("kept 19997 keys"), "{out}");
    assert!(std::fs::read(&source).unwrap_or_default() == before, "salvage wrote to its source");
    assert_eq!(fsck(&output), 0);
    assert!(scan(&output) == expected, "the salvaged volume holds other keys or values");

    // Both labels too: the slot area from the chunk footers, the backup log from its headers.
    zero(&source, 0, geometry.sector());
    zero(&source, geometry.ofs_backup_label(), geometry.sector());
    let output = scratch("out-no-labels");
    let (code, out, err) = volumes::salvage(&volumes::salvage_args(&source, Some(&output)));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("layout from chunk footers"), "{out}");
    assert_eq!(fsck(&output), 0);
    assert!(scan(&output) == expected, "the salvaged volume holds other keys or values");

    // NDJSON export: the same keys, one object per line; the report goes to standard error.
    let (code, out, err) =
        volumes::salvage(&SalvageArgs { export: Some("ndjson".into()), ..volumes::salvage_args(&source, None) });
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 19_997);
    assert!(out.lines().all(|line| line.starts_with("{\"key\":\"key")), "{}", out.lines().next().unwrap_or(""));
    assert!(err.contains("kept 19997 keys"), "{err}");
    for path in [source, scratch("out-no-version-log"), output] {
        let _ = std::fs::remove_file(path);
    }
}

#[test]
fn a_damaged_block_loses_only_its_keys_and_is_reported() {
    let (source, expected) = written_volume("source-block");
    // Damage the middle of the first slot holding a chunk of level 1 or deeper.
    let geometry = geometry_of(&source);
    let (version_offset, version_len) = geometry.log_area(LogKind::Version, 0);
    zero(&source, version_offset, version_len);
    let slot = (0..geometry.num_slots)
        .find(|&slot| {
            let bytes = std::fs::read(&source).unwrap_or_default();
            let start = geometry.slot_offset(slot) as usize;
            bytes[start..start + 4096].iter().any(|&byte| byte != 0)
        })
        .unwrap_or_else(|| panic!("no chunk found"));
    zero(&source, geometry.slot_offset(slot) + 8192, 512);
    let output = scratch("out-damaged");
    let (code, out, err) =
        volumes::salvage(&SalvageArgs { json: true, ..volumes::salvage_args(&source, Some(&output)) });
    assert_eq!(code, 1, "{out}{err}");
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|error| panic!("{error}: {out}"));
    assert_eq!(report["schema"], "lds-salvage/1");
    let damaged = report["damaged"].as_array().cloned().unwrap_or_default();
    assert_eq!(damaged.len(), 1, "{report}");
    assert_eq!(fsck(&output), 0);
    let got = scan(&output);
    let lost: Vec<&str> = expected.lines().filter(|line| !got.contains(*line)).collect();
    // A newer copy in another chunk or the backup log may hold some of the block's keys.
    assert!(lost.len() < 200, "{} keys lost", lost.len());
    assert!(got.lines().all(|line| expected.contains(line)), "a salvaged key reads a value it never held");
    let _ = std::fs::remove_file(&source);
    let _ = std::fs::remove_file(&output);
}

#[test]
fn usage_errors_are_named() {
    let (source, _) = written_volume("source-usage");
    let (code, _, err) = volumes::salvage(&volumes::salvage_args(&source, None));
    assert_eq!(code, 16);
    assert!(err.contains("--output"), "{err}");
    let (code, _, err) = volumes::salvage(&volumes::salvage_args(&source, Some(&source)));
    assert_eq!(code, 16);
    assert!(err.contains("never writes its own input"), "{err}");
    let missing = scratch("missing");
    let (code, _, err) = volumes::salvage(&volumes::salvage_args(&missing, Some(&scratch("out-missing"))));
    assert_eq!(code, 8);
    assert!(err.contains(&missing.display().to_string()), "{err}");
    let _ = std::fs::remove_file(&source);
}
