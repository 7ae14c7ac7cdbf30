//! The split forest (technique `forest`, SifrDB §4.1 and §4.3): trees fill the stages' levels
//! newest first, full stages drain into the next moving the chunks that overlap nothing
//! (sequential runs) and merging the rest, deletes of keys whose older versions sit in older
//! trees stay deleted through drains, reads agree with parallel search on and off, and
//! everything reads back across reopens, a manual compaction into one tree, and a reopen by
//! the leveled engine.

use std::collections::BTreeMap;

use lds_engine::{Db, Options, WriteOptions};

mod common;

use common::{small_layout, Image, Random};

fn options(search_threads: usize) -> Options {
    // No block cache: every candidate a filter lets through reads the device, so that lookups
    // with two or more take the parallel path.
    let options =
        Options { background: false, write_buffer_size: 48 << 10, block_cache_bytes: 0, ..Options::default() }
            .with_techniques("forest")
            .unwrap_or_else(|error| panic!("{error}"));
    // Parallel whenever two candidates would read: the image's page cache answers faster
    // than a hand-off, so that the measured rule would keep every lookup serial.
    Options { search_threads, search_always_parallel: true, ..options }
}

fn check(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, context: &str) {
    common::assert_matches_model(db, model, 5, context);
    // Keys never written or deleted are not found.
    for missing in [b"key-999999".as_slice(), b"aaa", b"zzz"] {
        assert_eq!(db.get(missing).unwrap_or_else(|error| panic!("{error}")), model.get(missing).cloned());
    }
}

/// The levels holding chunks, each level's chunks disjoint.
fn levels(db: &Db) -> Vec<u8> {
    let mut chunks = db.chunks();
    chunks.sort_by(|a, b| (a.level, &a.smallest_key).cmp(&(b.level, &b.smallest_key)));
    for pair in chunks.windows(2) {
        if pair[0].level == pair[1].level && pair[0].level > 0 {
            assert!(pair[0].largest_key < pair[1].smallest_key, "level {} overlaps", pair[0].level);
        }
    }
    let mut levels: Vec<u8> = chunks.iter().map(|chunk| chunk.level).collect();
    levels.dedup();
    levels
}

#[test]
fn stages_drain_moving_sequential_chunks_and_read_back() {
    let image = Image::new("forest", &small_layout(96 << 20, 512 << 10, 256 << 10));
    let mut random = Random(7);
    let mut model = BTreeMap::new();
    let mut db = Db::open(image.path(), options(2)).unwrap_or_else(|error| panic!("open: {error}"));
    // Sequential runs first: their chunks overlap nothing, so drains move them.
    for number in 0..30_000u32 {
        let (key, value) = (format!("seq-{number:06}").into_bytes(), format!("value-{number}").into_bytes());
        db.put(&key, &value, WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
        model.insert(key, value);
    }
    let stats = db.stats();
    assert!(stats.trivial_moves + stats.forest_moved_chunks > 0, "nothing moved: {stats:?}");
    for round in 0..6u32 {
        for _ in 0..6_000 {
            let key = format!("key-{:06}", random.below(20_000)).into_bytes();
            if random.below(10) == 0 {
                db.delete(&key, WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
                model.remove(&key);
            } else {
                let value = format!("value-{round}-{}", random.next()).into_bytes();
                db.put(&key, &value, WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
                model.insert(key, value);
            }
        }
        check(&db, &model, &format!("round {round}"));
        if round == 3 {
            db.close().unwrap_or_else(|error| panic!("{error}"));
            // Reopened with serial search: the same answers.
            db = Db::open(image.path(), options(1)).unwrap_or_else(|error| panic!("reopen: {error}"));
            check(&db, &model, "after a reopen, serial search");
            db.close().unwrap_or_else(|error| panic!("{error}"));
            db = Db::open(image.path(), options(2)).unwrap_or_else(|error| panic!("reopen: {error}"));
        }
    }
    let shape = levels(&db);
    // Stage 2's positions are levels 7 to 10: trees got there.
    assert!(shape.iter().any(|&level| level >= 7), "no tree reached stage 2: {shape:?}");
    let stats = db.stats();
    assert!(stats.merges > 3 && stats.parallel_searches > 0, "{stats:?}");

    // Delete a tenth of the keys: the tombstones are in new trees, the old values in old
    // ones; drains of the new stages must keep the tombstones.
    let keys: Vec<Vec<u8>> = model.keys().cloned().step_by(10).collect();
    for key in &keys {
        db.delete(key, WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
        model.remove(key);
    }
    check(&db, &model, "after deletes");
    db.compact_range().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(levels(&db), vec![15], "a manual compaction leaves one tree in the oldest position");
    // Nothing is older than the last stage: its merges drop tombstones and old versions.
    let entries: u64 = db.chunks().iter().map(|chunk| chunk.num_entries).sum();
    assert_eq!(entries, model.len() as u64, "tombstones or old versions left in the last stage");
    check(&db, &model, "after a manual compaction");
    db.close().unwrap_or_else(|error| panic!("{error}"));
    let db = Db::open(image.path(), Options::default()).unwrap_or_else(|error| panic!("reopen: {error}"));
    check(&db, &model, "reopened by the leveled engine");
}

#[test]
fn forest_refuses_the_techniques_it_does_not_go_with() {
    let image = Image::new("forest-refuses", &small_layout(16 << 20, 128 << 10, 64 << 10));
    for other in ["size-tiered", "kv-separation", "triad-disk"] {
        let options = options(2).with_techniques(other).unwrap_or_else(|error| panic!("{error}"));
        let error = Db::open(image.path(), options).err().expect("refused");
        assert!(error.to_string().contains("forest"), "{error}");
    }
}
