//! Size-tiered compaction (technique `size-tiered`, LDS §4.2.5): chunks of several slots
//! form in level 0, tiers stay under the threshold, deletes of keys whose older versions sit
//! in larger chunks stay deleted through merges, and everything reads back across reopens and
//! a manual compaction into one chunk.

use std::collections::BTreeMap;

use lds_engine::{Db, Options, WriteOptions};

mod common;

use common::{small_layout, Image, Random};

fn options() -> Options {
    Options { background: false, write_buffer_size: 48 << 10, ..Options::default() }
        .with_techniques("size-tiered")
        .unwrap_or_else(|error| panic!("{error}"))
}

fn check(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, context: &str) {
    common::assert_matches_model(db, model, 7, context);
}

/// Tier sizes in slots of the level-0 chunks, and the largest chunk.
fn shape(db: &Db) -> (Vec<usize>, usize) {
    let chunks = db.chunks();
    assert!(chunks.iter().all(|chunk| chunk.level == 0), "every tier is in level 0");
    let slots: Vec<usize> = chunks.iter().map(|chunk| chunk.sub_chunks.len()).collect();
    let largest = slots.iter().copied().max().unwrap_or(0);
    (slots, largest)
}

#[test]
fn tiers_merge_into_chunks_of_several_slots_and_read_back() {
    let image = Image::new("size-tiered", &small_layout(96 << 20, 512 << 10, 256 << 10));
    let mut random = Random(5);
    let mut model = BTreeMap::new();
    let mut db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("open: {error}"));
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
            db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("reopen: {error}"));
            check(&db, &model, "after a reopen");
        }
    }
    let (slots, largest) = shape(&db);
    assert!(largest >= 5, "no chunk of tier 2 formed: {slots:?}");
    // No tier holds four chunks once compaction is done.
    let mut tiers: BTreeMap<usize, usize> = BTreeMap::new();
    for &count in &slots {
        let tier = (count as f64).log(4.0).ceil() as usize;
        *tiers.entry(tier).or_insert(0) += 1;
    }
    assert!(tiers.values().all(|&chunks| chunks < 4), "{slots:?}");
    let stats = db.stats();
    assert!(stats.merges > 3, "{stats:?}");

    // Delete a tenth of the keys: the tombstones are in small chunks, the old values in
    // large ones; merges of the small tiers must keep the tombstones.
    let keys: Vec<Vec<u8>> = model.keys().cloned().step_by(10).collect();
    for key in &keys {
        db.delete(key, WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
        model.remove(key);
    }
    for _ in 0..8_000 {
        let key = format!("new-{:06}", random.below(1_000_000)).into_bytes();
        db.put(&key, b"fresh", WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
        model.insert(key, b"fresh".to_vec());
    }
    check(&db, &model, "after deletes and new keys");
    db.compact_range().unwrap_or_else(|error| panic!("{error}"));
    let (slots, _) = shape(&db);
    assert_eq!(slots.len(), 1, "a manual compaction leaves one chunk: {slots:?}");
    check(&db, &model, "after a manual compaction");
    db.close().unwrap_or_else(|error| panic!("{error}"));
    let db = Db::open(image.path(), Options::default()).unwrap_or_else(|error| panic!("reopen: {error}"));
    check(&db, &model, "reopened by the leveled engine");
}

#[test]
fn size_tiered_refuses_the_techniques_it_does_not_go_with() {
    let image = Image::new("size-tiered-refuses", &small_layout(16 << 20, 128 << 10, 64 << 10));
    for other in ["triad-disk", "kv-separation"] {
        let options = options().with_techniques(other).unwrap_or_else(|error| panic!("{error}"));
        let error = Db::open(image.path(), options).err().expect("refused");
        assert!(error.to_string().contains("size-tiered"), "{error}");
    }
}
