//! Guards `lds metadump`: the image holds none of the volume's values (nor, unless
//! --keep-keys, its keys), lds fsck accepts it as it accepts the volume, its tree has the
//! volume's shape, it is sparse, and the volume is not written.

mod volumes;

use std::path::{Path, PathBuf};

use lds_cli::kv::{self, Target};
use lds_cli::metadump::{run, MetadumpArgs};
use lds_cli::mkfs::MkfsOptions;

fn scratch(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("lds-metadump-test-{}-{name}.img", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

fn target(path: &Path) -> Target {
    Target { path: path.to_path_buf(), instance: 0, hex: false, wait: None, technique: String::new() }
}

fn fsck(path: &Path) -> (i32, String) {
    let options = lds_cli::fsck::FsckOptions { path: path.to_path_buf(), ..Default::default() };
    let mut out = Vec::new();
    let code = lds_cli::fsck::run(&options, &mut out, &mut Vec::new());
    (code, String::from_utf8_lossy(&out).into_owned())
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle)
}

#[test]
fn a_metadump_holds_no_value_and_reads_like_the_volume() {
    let source = scratch("source");
    let options =
        MkfsOptions { path: source.clone(), size: Some(48 << 20), slot_size: Some(256 << 10), ..Default::default() };
    assert_eq!(lds_cli::mkfs::run(&options, &mut Vec::new(), &mut Vec::new()), 0);
    let input: String = (0..15_000)
        .map(|number| format!("key{number:06}\tsecret-value-{number}-{}\n", "s".repeat(number % 50)))
        .collect();
    assert_eq!(kv::load(&target(&source), None, false, &mut input.as_bytes(), &mut Vec::new(), &mut Vec::new()), 0);
    // Unflushed batches in the backup log too.
    let late: String = (0..50).map(|number| format!("late{number:03}\tsecret-value-late-{number}\n")).collect();
    let db = lds_engine::Db::open(&source, lds_engine::Options::default()).unwrap_or_else(|error| panic!("{error}"));
    for line in late.lines() {
        let (key, value) = line.split_once('\t').unwrap_or_default();
        db.put(key.as_bytes(), value.as_bytes(), lds_engine::WriteOptions { sync: true })
            .unwrap_or_else(|error| panic!("{error}"));
    }
    drop(db);
    let original = std::fs::read(&source).unwrap_or_default();
    assert!(contains(&original, b"secret-value-late-7") && contains(&original, b"secret-value-1234-"));
    let (source_code, source_fsck) = fsck(&source);
    assert_eq!(source_code, 0, "{source_fsck}");

    let output = scratch("dump");
    let args =
        MetadumpArgs { path: source.clone(), output: output.clone(), keep_keys: false, force: false, json: true };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(run(&args, &mut out, &mut err), 0, "{}", String::from_utf8_lossy(&err));
    assert!(std::fs::read(&source).unwrap_or_default() == original, "metadump wrote to the volume");
    let report: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(report["schema"], "lds-metadump/1");
    assert!(report["values_removed"].as_u64() >= Some(15_050), "{report}");

    let image = std::fs::read(&output).unwrap_or_default();
    assert_eq!(image.len(), original.len());
    assert!(!contains(&image, b"secret-value"), "a value is in the metadump");
    assert!(!contains(&image, b"key000"), "a key is in the metadump");
    let (code, text) = fsck(&output);
    assert_eq!(code, source_code, "fsck of the volume:\n{source_fsck}\nof the metadump:\n{text}");
    assert_eq!(volumes::tree_shape(&output), volumes::tree_shape(&source));
    let allocated =
        std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(&output).unwrap_or_else(|error| panic!("{error}")))
            * 512;
    assert!(allocated < original.len() as u64 / 2, "not sparse: {allocated} bytes allocated");

    // --keep-keys: the keys stay, the values still go.
    let kept = scratch("keep-keys");
    let args = MetadumpArgs { path: source.clone(), output: kept.clone(), keep_keys: true, force: false, json: false };
    assert_eq!(run(&args, &mut Vec::new(), &mut Vec::new()), 0);
    let image = std::fs::read(&kept).unwrap_or_default();
    assert!(contains(&image, b"key001234") && !contains(&image, b"secret-value"));
    assert_eq!(fsck(&kept).0, source_code);
    // An existing output is refused without --force.
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(run(&args, &mut out, &mut err), 16);
    for path in [source, output, kept] {
        let _ = std::fs::remove_file(path);
    }
}

/// fsck's problem codes (errors and warnings) on an image.
fn codes(path: &Path) -> Vec<String> {
    let (_, text) = fsck(path);
    let mut codes: Vec<String> = text
        .lines()
        .filter(|line| line.starts_with('E') || line.starts_with('W'))
        .filter_map(|line| line.split(' ').next())
        .map(str::to_string)
        .collect();
    codes.sort();
    codes
}

#[test]
fn the_metadump_of_each_damaged_fixture_shows_the_same_problems() {
    let mut compared = 0;
    for name in lds_fixtures::fsck_case_names() {
        let image = lds_fixtures::unpack(&name, "metadump");
        let output = scratch(&format!("fixture-{name}"));
        let args =
            MetadumpArgs { path: image.clone(), output: output.clone(), keep_keys: false, force: false, json: false };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(&args, &mut out, &mut err);
        if name == "f_no_valid_label" {
            assert_eq!(code, 8, "{name}");
            assert!(String::from_utf8_lossy(&err).contains("no valid label"));
            continue;
        }
        assert_eq!(code, 0, "{name}: {}", String::from_utf8_lossy(&err));
        assert_eq!(codes(&output), codes(&image), "{name}");
        compared += 1;
        let _ = std::fs::remove_file(&output);
    }
    assert!(compared >= 30, "{compared} fixtures compared");
}
