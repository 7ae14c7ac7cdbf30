//! TRIAD-MEM (technique `triad-mem`): at a flush the hot keys stay in memory and out of level
//! 0, read back with their newest values before and after reopens, and are flushed as usual
//! while a snapshot is live.

use std::collections::BTreeMap;

use lds_engine::{Db, Options, WriteOptions};

mod common;

use common::{small_layout, Image};

/// One chunk per flush, and level 0 never merged in the first round.
fn plain_options() -> Options {
    Options {
        background: false,
        write_buffer_size: 64 << 10,
        level0_compaction_trigger: 64,
        level0_stop_writes_trigger: 128,
        ..Options::default()
    }
}

fn options() -> Options {
    plain_options().with_techniques("triad-mem").unwrap_or_else(|error| panic!("{error}"))
}

fn layout() -> lds_format::geometry::LayoutRequest {
    lds_format::geometry::LayoutRequest { slot_size: Some(1 << 20), ..small_layout(128 << 20, 512 << 10, 2 << 20) }
}

/// 3,000 cold keys written once and five hot keys (sorting first) written 60 times each.
fn skewed(db: &Db, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, round: u32) {
    for number in 0..3_000u32 {
        let key = format!("k-{round}-{number:05}").into_bytes();
        let value = format!("cold-{round}-{number}").into_bytes();
        db.put(&key, &value, WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
        model.insert(key, value);
        if number % 10 == 0 {
            let key = format!("a-hot-{}", number / 10 % 5).into_bytes();
            let value = format!("hot-{round}-{number}").into_bytes();
            if number % 70 == 0 {
                db.delete(&key, WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
                model.remove(&key);
            } else {
                db.put(&key, &value, WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
                model.insert(key, value);
            }
        }
    }
}

fn check(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, context: &str) {
    let all: Vec<(Vec<u8>, Vec<u8>)> = db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{error}"));
    assert!(all.len() == model.len() && all.iter().zip(model).all(|(a, b)| a.0 == *b.0 && a.1 == *b.1), "{context}");
    for number in 0..10 {
        let key = format!("a-hot-{number}").into_bytes();
        assert_eq!(db.get(&key).unwrap_or_else(|error| panic!("{error}")), model.get(&key).cloned(), "{context}");
    }
}

/// The smallest key of the level-0 chunks.
fn level0_smallest(db: &Db) -> Vec<Vec<u8>> {
    db.chunks().iter().filter(|chunk| chunk.level == 0).map(|chunk| chunk.smallest_key.clone()).collect()
}

#[test]
fn hot_keys_stay_in_memory_and_read_back_across_reopens() {
    let image = Image::new("triad-mem", &layout());
    let mut model = BTreeMap::new();
    let mut db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("open: {error}"));
    skewed(&db, &mut model, 0);
    db.flush().unwrap_or_else(|error| panic!("{error}"));
    let held = db.stats().hot_entries_held;
    assert!(held > 0, "nothing held: {:?}", db.stats());
    // Of the level-0 chunks, only the last flush's may start with a hot key (one not updated
    // since the freeze before): the hot keys of every earlier freeze stayed in memory.
    let smallest = level0_smallest(&db);
    let with_hot = smallest.iter().filter(|key| key.starts_with(b"a-hot-")).count();
    assert!(smallest.len() >= 3 && with_hot <= 1, "{smallest:?}");
    // Without the technique every level-0 chunk holds hot keys, but perhaps the last flush's
    // (when it holds fewer than the 10 cold keys written between two hot ones).
    let plain = Image::new("triad-mem-plain", &layout());
    let other = Db::open(plain.path(), plain_options()).unwrap_or_else(|error| panic!("open: {error}"));
    skewed(&other, &mut BTreeMap::new(), 0);
    other.flush().unwrap_or_else(|error| panic!("{error}"));
    let smallest = level0_smallest(&other);
    let with_hot = smallest.iter().filter(|key| key.starts_with(b"a-hot-")).count();
    assert!(smallest.len() >= 3 && with_hot + 1 >= smallest.len(), "{smallest:?}");
    check(&db, &model, "after the flush");
    // Held entries are in the backup log: a reopen replays them.
    db.close().unwrap_or_else(|error| panic!("{error}"));
    db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("reopen: {error}"));
    check(&db, &model, "after a reopen");
    for round in 1..4 {
        skewed(&db, &mut model, round);
        check(&db, &model, &format!("round {round}"));
        if round == 2 {
            db.close().unwrap_or_else(|error| panic!("{error}"));
            db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("reopen: {error}"));
            check(&db, &model, "after a second reopen");
        }
    }
    db.compact_range().unwrap_or_else(|error| panic!("{error}"));
    check(&db, &model, "after a manual compaction");
    db.close().unwrap_or_else(|error| panic!("{error}"));
    let db = Db::open(image.path(), Options::default()).unwrap_or_else(|error| panic!("reopen: {error}"));
    check(&db, &model, "reopened without the technique");
}

#[test]
fn nothing_is_held_while_a_snapshot_is_live() {
    let image = Image::new("triad-mem-snapshot", &layout());
    let mut model = BTreeMap::new();
    let db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("open: {error}"));
    skewed(&db, &mut model, 0);
    let held_before = db.stats().hot_entries_held;
    let snapshot = db.snapshot();
    let seen = model.clone();
    db.put(b"a-hot-1", b"after the snapshot", WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
    model.insert(b"a-hot-1".to_vec(), b"after the snapshot".to_vec());
    db.flush().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(db.stats().hot_entries_held, held_before);
    assert!(level0_smallest(&db).iter().any(|key| key.starts_with(b"a-hot-")), "the hot keys were flushed");
    for (key, value) in &seen {
        assert_eq!(snapshot.get(key).unwrap_or_else(|error| panic!("{error}")).as_ref(), Some(value));
    }
    drop(snapshot);
    check(&db, &model, "after the flush");
}
