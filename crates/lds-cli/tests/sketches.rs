//! Key sketches (format 1.5, SPEC.md §8.7) on a real volume: `lds mkfs --chunk-sketches`, an
//! engine with `triad-disk` flushes level-0 chunks that carry them, `lds dump` shows each
//! sketch's estimate, fsck checks them (a damaged one is warning 413), and `lds repair -p`
//! rewrites the chunk so that the volume checks clean with every key kept.

mod volumes;

use std::path::Path;

use lds_cli::dump::{DumpOptions, DumpWhat};
use lds_engine::{Db, Options, WriteOptions};
use lds_format::chunk::footer::{Footer, FOOTER_LEN};

const SLOT_SIZE: u64 = 256 << 10;

fn dump_chunk(path: &Path, chunk_id: u64) -> serde_json::Value {
    let options = DumpOptions {
        path: path.to_path_buf(),
        what: DumpWhat::Chunk(chunk_id),
        instance: 0,
        json: true,
        entries: false,
        wait: std::time::Duration::ZERO,
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(lds_cli::dump::run(&options, &mut out, &mut err), 0, "{}", String::from_utf8_lossy(&err));
    serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}"))
}

fn all(path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let db = Db::open(path, Options::default()).unwrap_or_else(|error| panic!("{error}"));
    db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{error}"))
}

#[test]
fn flushed_chunks_carry_sketches_that_dump_fsck_and_repair_understand() {
    let path = volumes::scratch("sketches", "volume");
    let _files = volumes::Files(vec![path.clone()]);
    let mkfs = lds_cli::mkfs::MkfsOptions {
        path: path.clone(),
        size: Some(32 << 20),
        slot_size: Some(SLOT_SIZE),
        chunk_sketches: true,
        ..Default::default()
    };
    assert_eq!(lds_cli::mkfs::run(&mkfs, &mut Vec::new(), &mut Vec::new()), 0);
    let options = Options { background: false, ..Options::default() }
        .with_techniques("triad-disk")
        .unwrap_or_else(|error| panic!("{error}"));
    let db = Db::open(&path, options).unwrap_or_else(|error| panic!("{error}"));
    // Three flushes of 1,200 keys each (within one 256 KiB slot's memtable): three level-0 chunks, below the merge trigger.
    for round in 0..3u32 {
        for number in 0..1_200u32 {
            let key = format!("key-{:08}", (number * 7_919 + round * 3) % 100_000_000);
            db.put(key.as_bytes(), format!("value-{round}").as_bytes(), WriteOptions::default())
                .unwrap_or_else(|error| panic!("{error}"));
        }
        db.flush().unwrap_or_else(|error| panic!("{error}"));
    }
    let level0: Vec<u64> = db.chunks().iter().filter(|chunk| chunk.level == 0).map(|chunk| chunk.chunk_id).collect();
    assert_eq!(level0.len(), 3, "{:?}", db.level_chunk_counts());
    db.close().unwrap_or_else(|error| panic!("{error}"));
    let before = all(&path);
    assert_eq!(before.len(), 3_600);

    for &chunk_id in &level0 {
        let document = dump_chunk(&path, chunk_id);
        let sub_chunk = &document["sub_chunks"][0];
        let estimate = sub_chunk["sketch"]["distinct_keys"].as_u64().unwrap_or_else(|| panic!("{sub_chunk}"));
        assert!((1_100..=1_300).contains(&estimate), "chunk {chunk_id}: 1,200 keys estimated as {estimate}");
        assert_eq!(sub_chunk["sketch"]["precision"], 12);
        assert_eq!(sub_chunk["footer"]["len_sketch"], 4 + 4096);
    }
    assert_eq!(volumes::fsck_codes(&path), (0, Vec::new()));

    // A flipped register: warning 413, found by a plain check too.
    let mut image = std::fs::read(&path).unwrap_or_else(|error| panic!("{error}"));
    let label = lds_format::label::Label::decode(&image[..512], 0).unwrap_or_else(|error| panic!("{error}"));
    let slot_offset = label.geometry.slot_offset(level0[1]) as usize;
    let footer_at = slot_offset + SLOT_SIZE as usize - FOOTER_LEN;
    let footer = Footer::decode(&image[footer_at..footer_at + FOOTER_LEN], footer_at as u64, SLOT_SIZE)
        .unwrap_or_else(|error| panic!("{error}"));
    image[slot_offset + footer.ofs_sketch as usize + 100] ^= 0x01;
    std::fs::write(&path, &image).unwrap_or_else(|error| panic!("{error}"));
    let (code, codes) = volumes::fsck_codes(&path);
    assert_eq!(codes, vec![413]);
    assert_ne!(code, 0);
    let document = dump_chunk(&path, level0[1]);
    assert!(document["sub_chunks"][0]["sketch"]["error"].as_str().is_some_and(|error| error.contains("key sketch")));

    // Repair without dropping anything (preen) rewrites the chunk; every key stays.
    let args = lds_cli::repair::RepairArgs { path: path.clone(), preen: true, no_undo: true, ..Default::default() };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = lds_cli::repair::run(&args, &mut out, &mut err);
    assert!(code == 0 || code == 1, "repair exit {code}: {}", String::from_utf8_lossy(&err));
    assert_eq!(volumes::fsck_codes(&path), (0, Vec::new()));
    assert_eq!(all(&path), before);
}

#[test]
fn mkfs_writes_format_1_5_only_when_asked() {
    let path = volumes::scratch("sketches", "mkfs");
    let _files = volumes::Files(vec![path.clone()]);
    let mkfs = |sketches: bool, version: &str| {
        let options = lds_cli::mkfs::MkfsOptions {
            path: path.clone(),
            size: Some(16 << 20),
            chunk_sketches: sketches,
            format_version: version.into(),
            force: true,
            ..Default::default()
        };
        let mut err = Vec::new();
        let code = lds_cli::mkfs::run(&options, &mut Vec::new(), &mut err);
        (code, String::from_utf8_lossy(&err).to_string())
    };
    let label = || {
        let image = std::fs::read(&path).unwrap_or_else(|error| panic!("{error}"));
        lds_format::label::Label::decode(&image[..512], 0).unwrap_or_else(|error| panic!("{error}"))
    };
    assert_eq!(mkfs(false, "1.3").0, 0);
    assert!(!label().has_chunk_sketches() && label().version_minor == 3);
    assert_eq!(mkfs(true, "1.3").0, 0);
    assert!(label().has_chunk_sketches() && label().version_minor == 5);
    assert_eq!(mkfs(false, "1.5").0, 0);
    assert!(label().has_chunk_sketches() && label().version_minor == 5);
    let (code, err) = mkfs(true, "1.4");
    assert_ne!(code, 0);
    assert!(err.contains("--chunk-sketches needs format 1.5"), "{err}");
}
