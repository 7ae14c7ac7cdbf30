//! Size-tiered volumes (technique `size-tiered`) on a real image: loaded through `lds load`,
//! checked clean with `fsck --deep`, their chunks of several sub-chunks dumped, and a damaged
//! block in one sub-chunk found and repaired with only that block's keys lost.

mod volumes;

use std::path::Path;

use lds_cli::kv::{self, Target};

const SLOT_SIZE: u64 = 64 << 10;

fn target(path: &Path) -> Target {
    Target { path: path.to_path_buf(), instance: 0, hex: false, wait: None, technique: "size-tiered".into() }
}

fn count(path: &Path) -> usize {
    // Read-only: a writable store would start compacting with the leveled engine.
    let (db, _) = lds_engine::Db::open_read_only(path, lds_engine::Options::default(), std::time::Duration::ZERO)
        .unwrap_or_else(|error| panic!("{error}"));
    let all: Vec<(Vec<u8>, Vec<u8>)> = db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{error}"));
    all.len()
}

#[test]
fn a_size_tiered_volume_checks_dumps_and_repairs() {
    let path = volumes::scratch("size-tiered", "volume");
    let _files = volumes::Files(vec![path.clone()]);
    let mkfs = lds_cli::mkfs::MkfsOptions {
        path: path.clone(),
        size: Some(64 << 20),
        slot_size: Some(SLOT_SIZE),
        backup_log_size: Some(192 << 10),
        ..Default::default()
    };
    assert_eq!(lds_cli::mkfs::run(&mkfs, &mut Vec::new(), &mut Vec::new()), 0);
    for round in 0..4u32 {
        let input: String = (0..12_000u32)
            .map(|n| {
                format!("key{:05}\tvalue-{round}-{}\n", (n * 7_919 + round) % 40_000, "z".repeat((n % 60) as usize))
            })
            .collect();
        let mut err = Vec::new();
        let code = kv::load(&target(&path), None, false, &mut input.as_bytes(), &mut Vec::new(), &mut err);
        assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    }
    volumes::settle(&path, "size-tiered", true);
    assert_eq!(volumes::fsck_codes(&path), (0, Vec::new()));
    let keys = count(&path);
    let (db, _) = lds_engine::Db::open_read_only(&path, lds_engine::Options::default(), std::time::Duration::ZERO)
        .unwrap_or_else(|error| panic!("{error}"));
    let chunks = db.chunks();
    drop(db);
    let multi = chunks
        .iter()
        .find(|chunk| chunk.sub_chunks.len() >= 3)
        .unwrap_or_else(|| panic!("no chunk of three sub-chunks"));
    assert!(chunks.iter().all(|chunk| chunk.level == 0));

    // A flipped byte in the first block of the chunk's second sub-chunk.
    let mut image = std::fs::read(&path).unwrap_or_else(|error| panic!("{error}"));
    let label = lds_format::label::Label::decode(&image[..512], 0).unwrap_or_else(|error| panic!("{error}"));
    let offset = label.geometry.slot_offset(multi.sub_chunks[1].slot) as usize;
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
