//! Guards `lds mkfs`: the README's 1 GiB image, dry runs that write nothing, refusal over
//! existing signatures, bad sizes, and that what mkfs writes reads back as an empty volume.

use std::path::PathBuf;

use lds_cli::dump::{DumpOptions, DumpWhat};
use lds_cli::mkfs::{run, MkfsOptions};

fn scratch(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("lds-mkfs-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

fn mkfs(options: &MkfsOptions) -> (i32, String, String) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let code = run(options, &mut out, &mut err);
    (code, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}

fn label_json(path: &std::path::Path) -> serde_json::Value {
    let options = DumpOptions {
        path: path.to_path_buf(),
        what: DumpWhat::Label,
        instance: 0,
        json: true,
        entries: false,
        wait: std::time::Duration::ZERO,
    };
    let mut out = Vec::new();
    let mut err = Vec::new();
    assert_eq!(lds_cli::dump::run(&options, &mut out, &mut err), 0, "{}", String::from_utf8_lossy(&err));
    serde_json::from_slice(&out).unwrap_or_else(|error| panic!("dump label --json is not JSON: {error}"))
}

#[test]
fn one_gib_image_then_dump_label_json() {
    let path = scratch("1g.img");
    let options = MkfsOptions { path: path.clone(), size: Some(1 << 30), ..MkfsOptions::default() };
    let (code, out, err) = mkfs(&options);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("usable capacity"), "{out}");
    assert_eq!(std::fs::metadata(&path).map(|metadata| metadata.len()).ok(), Some(1 << 30));
    let label = label_json(&path);
    assert_eq!(label["schema"], "lds-dump/1");
    assert_eq!(label["chosen"], "both");
    let geometry = &label["primary"]["geometry"];
    assert_eq!(geometry["len_version_log"], 64 << 20);
    assert_eq!(geometry["len_backup_log"], 16 << 20);
    assert_eq!(geometry["slot_size"], 4 << 20);
    assert_eq!(geometry["volume_len"], 1u64 << 30);
    assert_eq!(label["primary"], label["backup"]);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn dry_run_writes_nothing() {
    let path = scratch("dry.img");
    let options = MkfsOptions { path: path.clone(), size: Some(64 << 20), dry_run: true, ..MkfsOptions::default() };
    let (code, out, _) = mkfs(&options);
    assert_eq!(code, 0);
    assert!(out.contains("dry run"), "{out}");
    assert!(out.contains("slot area"), "{out}");
    assert!(!path.exists(), "a dry run created the file");
}

#[test]
fn refuses_an_existing_volume_without_force() {
    let path = scratch("twice.img");
    let uuid = Some([1u8; 16]);
    let options = MkfsOptions { path: path.clone(), size: Some(8 << 20), uuid, ..MkfsOptions::default() };
    assert_eq!(mkfs(&options).0, 0);
    let before = std::fs::read(&path).unwrap_or_default();
    let again = MkfsOptions { uuid: Some([2u8; 16]), ..options.clone() };
    let (code, _, err) = mkfs(&again);
    assert_eq!(code, 1);
    assert!(err.contains("LDS volume") && err.contains("--force"), "{err}");
    assert!(std::fs::read(&path).unwrap_or_default() == before, "a refused mkfs changed the image");
    let forced = MkfsOptions { force: true, ..again };
    assert_eq!(mkfs(&forced).0, 0);
    let label = label_json(&path);
    assert_eq!(label["primary"]["geometry"]["volume_uuid"], "02020202-0202-0202-0202-020202020202");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn refuses_an_ext4_signature() {
    let path = scratch("ext4.img");
    let mut bytes = vec![0u8; 8 << 20];
    bytes[1080] = 0x53;
    bytes[1081] = 0xEF;
    std::fs::write(&path, &bytes).unwrap_or_else(|error| panic!("{error}"));
    let (code, _, err) = mkfs(&MkfsOptions { path: path.clone(), ..MkfsOptions::default() });
    assert_eq!(code, 1);
    assert!(err.contains("ext2/ext3/ext4") && err.contains("offset 1080"), "{err}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn impossible_layouts_are_clear_errors() {
    let path = scratch("tiny.img");
    let (code, _, err) = mkfs(&MkfsOptions { path: path.clone(), size: Some(200 << 10), ..MkfsOptions::default() });
    assert_eq!(code, 1);
    assert!(err.contains("cannot lay out"), "{err}");
    assert!(!path.exists());
    let (code, _, err) = mkfs(&MkfsOptions {
        path: path.clone(),
        size: Some(64 << 20),
        sector_size: Some(1000),
        ..MkfsOptions::default()
    });
    assert_eq!(code, 1);
    assert!(err.contains("sector_size"), "{err}");
    let (code, _, err) = mkfs(&MkfsOptions { path: path.clone(), ..MkfsOptions::default() });
    assert_eq!(code, 1);
    assert!(err.contains("--size"), "{err}");
}

#[test]
fn options_shape_the_layout() {
    let path = scratch("shaped.img");
    let options = MkfsOptions {
        path: path.clone(),
        size: Some(256 << 20),
        slot_size: Some(1 << 20),
        version_log_size: Some(8 << 20),
        backup_log_size: Some(2 << 20),
        sector_size: Some(512),
        instances: Some(3),
        name: "shaped".into(),
        ..MkfsOptions::default()
    };
    let (code, _, err) = mkfs(&options);
    assert_eq!(code, 0, "{err}");
    let label = label_json(&path);
    let geometry = &label["primary"]["geometry"];
    assert_eq!(geometry["slot_size"], 1 << 20);
    assert_eq!(geometry["len_version_log"], 8 << 20);
    assert_eq!(geometry["len_backup_log"], 2 << 20);
    assert_eq!(geometry["sector_size"], 512);
    assert_eq!(geometry["instance_count"], 3);
    assert_eq!(label["primary"]["volume_name"], "shaped");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn format_version_1_7_by_default_and_earlier_ones_on_request() {
    let versions = [
        ("", 7, 1 | 4 | 64),
        ("1.7", 7, 1 | 4 | 64),
        ("1.6", 6, 1 | 4 | 32),
        ("1.5", 5, 1 | 4 | 16),
        ("1.4", 4, 1 | 4 | 8),
        ("1.3", 3, 5),
        ("1.2", 1, 1),
        ("1.1", 1, 1),
        ("1.0", 0, 0),
    ];
    for (version, minor, incompat) in versions {
        let path = scratch(&format!("version-{version}.img"));
        let options = MkfsOptions {
            path: path.clone(),
            size: Some(8 << 20),
            format_version: version.to_string(),
            ..MkfsOptions::default()
        };
        let (code, _, err) = mkfs(&options);
        assert_eq!(code, 0, "{err}");
        let label = label_json(&path);
        assert_eq!(label["primary"]["version_minor"], minor, "--format-version '{version}'");
        assert_eq!(label["primary"]["features_incompat"], incompat, "--format-version '{version}'");
        let _ = std::fs::remove_file(&path);
    }
}
