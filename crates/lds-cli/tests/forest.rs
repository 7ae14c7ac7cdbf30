//! Split-forest volumes (technique `forest`) on a real image: loaded through `lds load` in
//! sequential and scattered rounds, grown to the format's 16 levels, checked clean with `fsck
//! --deep`, every level dumped by `lds dump tree`, and a damaged block in a tree found and
//! repaired with only that block's keys lost.

mod volumes;

use std::path::Path;

use lds_cli::kv::{self, Target};

const SLOT_SIZE: u64 = 64 << 10;

fn target(path: &Path) -> Target {
    Target { path: path.to_path_buf(), instance: 0, hex: false, wait: None, technique: "forest".into() }
}

fn count(path: &Path) -> usize {
    // Read-only: a writable store would start compacting with the leveled engine.
    let (db, _) = lds_engine::Db::open_read_only(path, lds_engine::Options::default(), std::time::Duration::ZERO)
        .unwrap_or_else(|error| panic!("{error}"));
    let all: Vec<(Vec<u8>, Vec<u8>)> = db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{error}"));
    all.len()
}

#[test]
fn a_forest_volume_checks_dumps_and_repairs() {
    let path = volumes::scratch("forest", "volume");
    let _files = volumes::Files(vec![path.clone()]);
    let mkfs = lds_cli::mkfs::MkfsOptions {
        path: path.clone(),
        size: Some(64 << 20),
        slot_size: Some(SLOT_SIZE),
        backup_log_size: Some(192 << 10),
        ..Default::default()
    };
    assert_eq!(lds_cli::mkfs::run(&mkfs, &mut Vec::new(), &mut Vec::new()), 0);
    for round in 0..6u32 {
        // Even rounds append fresh keys in order, odd rounds scatter over everything.
        let input: String = (0..10_000u32)
            .map(|n| {
                let key = if round % 2 == 0 { round * 10_000 + n } else { (n * 7_919 + round) % 60_000 };
                format!("key{key:05}\tvalue-{round}-{}\n", "z".repeat((n % 60) as usize))
            })
            .collect();
        let mut err = Vec::new();
        let code = kv::load(&target(&path), None, false, &mut input.as_bytes(), &mut Vec::new(), &mut err);
        assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    }
    volumes::settle(&path, "forest", false);
    assert_eq!(volumes::fsck_codes(&path), (0, Vec::new()));
    let chunks = || {
        let (db, _) = lds_engine::Db::open_read_only(&path, lds_engine::Options::default(), std::time::Duration::ZERO)
            .unwrap_or_else(|error| panic!("{error}"));
        db.chunks()
    };
    let deepest = chunks().iter().map(|chunk| chunk.level).max().unwrap_or(0);
    assert!(deepest >= 7, "no tree beyond the mkfs default of 7 levels: deepest {deepest}");
    let mut out = Vec::new();
    let dump = lds_cli::dump::DumpOptions {
        path: path.clone(),
        what: lds_cli::dump::DumpWhat::Tree,
        instance: 0,
        json: false,
        entries: false,
        wait: std::time::Duration::ZERO,
    };
    assert_eq!(lds_cli::dump::run(&dump, &mut out, &mut Vec::new()), 0);
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains(&format!("level {deepest}:")), "{text}");

    // One tree (every key once), then a flipped byte in the first block of one of its chunks.
    volumes::settle(&path, "forest", true);
    assert_eq!(volumes::fsck_codes(&path), (0, Vec::new()));
    let keys = count(&path);
    let chunks = chunks();
    assert!(chunks.iter().all(|chunk| chunk.level == 15), "a manual compaction leaves one tree in level 15");
    let victim = &chunks[chunks.len() / 2];
    let mut image = std::fs::read(&path).unwrap_or_else(|error| panic!("{error}"));
    let label = lds_format::label::Label::decode(&image[..512], 0).unwrap_or_else(|error| panic!("{error}"));
    let offset = label.geometry.slot_offset(victim.sub_chunks[0].slot) as usize;
    image[offset + 40] ^= 0x10;
    std::fs::write(&path, &image).unwrap_or_else(|error| panic!("{error}"));
    let (code, codes) = volumes::fsck_codes(&path);
    assert_ne!(code, 0);
    assert!(codes.contains(&405), "{codes:?}");
    let args = lds_cli::repair::RepairArgs { path: path.clone(), yes: true, no_undo: true, ..Default::default() };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let repaired = lds_cli::repair::run(&args, &mut out, &mut err);
    assert!(repaired == 1 || repaired == 0, "repair exit {repaired}: {}", String::from_utf8_lossy(&err));
    assert_eq!(volumes::fsck_codes(&path), (0, Vec::new()));
    // One block lost: fewer keys, most kept.
    let after = count(&path);
    assert!(after < keys && after > keys - 200, "{keys} keys before, {after} after");
}
