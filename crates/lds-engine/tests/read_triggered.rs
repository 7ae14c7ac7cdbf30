//! LevelDB's seek compaction, below level 0: once writes are quiet, reads that walked a level
//! above the last more often than merging it down would cost merge it into the next level,
//! so that later reads consult one level fewer and the store takes less room; what it holds
//! stays the same. Seeks walk every level they start; lookups walk the levels they consult
//! without finding their key before going deeper.

mod common;

use std::collections::BTreeMap;

use lds_engine::{Db, Options, WriteOptions};

fn key(index: u32) -> Vec<u8> {
    format!("key{index:06}").into_bytes()
}

/// A store whose keys lie in two adjacent levels below level 0 (every key in the lower one,
/// every third one newer in the upper one), writes quiet; its model, and the upper level.
fn two_levels(image: &common::Image) -> (Db, BTreeMap<Vec<u8>, Vec<u8>>, u8) {
    let options = Options { write_buffer_size: 64 << 10, ..Options::default() };
    let db = Db::open(image.path(), options).expect("open");
    let mut model = BTreeMap::new();
    let value = |round: u32, index: u32| format!("r{round}-{index}-{}", "v".repeat(90)).into_bytes();
    for index in 0..20_000u32 {
        let index = index * 7919 % 20_000;
        db.put(&key(index), &value(0, index), WriteOptions::default()).expect("put");
        model.insert(key(index), value(0, index));
    }
    for index in (0..20_000u32).step_by(3) {
        db.put(&key(index), &value(1, index), WriteOptions::default()).expect("put");
        model.insert(key(index), value(1, index));
    }
    // Waits for the flush and every compaction due; writes are quiet from here on.
    db.flush().expect("flush");
    let counts = db.level_chunk_counts();
    let upper = (1..counts.len() - 1).find(|&level| counts[level] > 0).expect("a level between 0 and the last");
    assert!(counts[upper + 1] > 0, "two adjacent levels below level 0 hold chunks: {counts:?}");
    assert_eq!(db.stats().read_triggered_merges, 0, "no read yet");
    (db, model, upper as u8)
}

/// Reads (`read(n)`, n counting up) in rounds until a read-triggered merge starts (at most
/// 30 s); then asserts the upper level lost chunks and the store still holds the model.
fn read_until_merged(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, upper: u8, mut read: impl FnMut(u32)) {
    let before = db.level_chunk_counts();
    let started = std::time::Instant::now();
    let mut reads = 0u32;
    while db.stats().read_triggered_merges == 0 && started.elapsed() < std::time::Duration::from_secs(30) {
        for _ in 0..200 {
            read(reads);
            reads += 1;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(db.stats().read_triggered_merges > 0, "{reads} reads over {before:?} merged nothing");
    db.flush().expect("flush");
    let after = db.level_chunk_counts();
    let upper = usize::from(upper);
    // Counted from level 0 down to the upper level: a chunk level 0 still held may move into
    // the upper level meanwhile (seen under load: [1, .., 10, 37] -> [0, .., 10, 38], one
    // chunk in and one merged down), which a count of the upper level alone misreads.
    let above = |counts: &[usize]| counts[..=upper].iter().sum::<usize>();
    assert!(above(&after) < above(&before), "levels 0 to {upper} kept their chunks: {before:?} -> {after:?}");
    let read: BTreeMap<Vec<u8>, Vec<u8>> = db.iter().expect("iter").map(|entry| entry.expect("entry")).collect();
    assert!(read == *model, "the merges changed what the store holds");
}

#[test]
fn seeks_walking_a_deeper_level_merge_it_down_once_writes_are_quiet() {
    let image = common::Image::new("read-triggered-seeks", &common::small_layout(64 << 20, 256 << 10, 1 << 20));
    let (db, model, upper) = two_levels(&image);
    read_until_merged(&db, &model, upper, |seek| {
        let mut iterator = db.range(&key(seek * 13 % 20_000), None).expect("range");
        assert!(iterator.next().is_some_and(|entry| entry.is_ok()));
    });
}

#[test]
fn lookups_passing_a_deeper_level_merge_it_down_once_writes_are_quiet() {
    let image = common::Image::new("read-triggered-lookups", &common::small_layout(64 << 20, 256 << 10, 1 << 20));
    let (db, model, upper) = two_levels(&image);
    read_until_merged(&db, &model, upper, |lookup| {
        // Keys the upper level does not hold: their lookups consult it and go on.
        let index = (lookup * 13 % 20_000) / 3 * 3 + 1;
        let index = if index < 20_000 { index } else { 1 };
        assert_eq!(db.get(&key(index)).expect("get"), model.get(&key(index)).cloned(), "key {index}");
    });
}
