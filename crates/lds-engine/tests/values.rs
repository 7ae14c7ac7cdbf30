//! Key-value separation (SPEC.md §8.6, technique `kv-separation`): values in value chunks,
//! read back through flushes, merges, reopens and garbage collection, against a BTreeMap.

use std::collections::BTreeMap;

use lds_engine::{Db, Options, WriteOptions};

mod common;

use common::{small_layout, Image, Random};

fn options() -> Options {
    Options { level1_max_bytes: 2 * (64 << 10), level_size_multiplier: 4, ..Options::default() }
        .with_techniques("kv-separation")
        .unwrap_or_else(|error| panic!("{error}"))
}

fn value(random: &mut Random, len: usize) -> Vec<u8> {
    let seed = random.next();
    (0..len).map(|index| (seed as usize).wrapping_add(index * 31) as u8).collect()
}

fn check_all(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, context: &str) {
    for (key, value) in model {
        let found = db.get(key).unwrap_or_else(|error| panic!("{context}: get: {error}"));
        assert!(
            found.as_ref() == Some(value),
            "{context}: {} reads {:?} bytes, wants {}",
            String::from_utf8_lossy(key),
            found.map(|found| found.len()),
            value.len()
        );
    }
    let all: Vec<(Vec<u8>, Vec<u8>)> =
        db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{context}: {error}"));
    assert_eq!(all.len(), model.len(), "{context}");
    assert!(
        all.iter().zip(model).all(|((key, value), (want_key, want))| key == want_key && value == want),
        "{context}: scan differs"
    );
}

#[test]
fn large_values_round_trip_through_flushes_merges_and_reopens() {
    let image = Image::with_value_chunks("values-round-trip", &small_layout(64 << 20, 512 << 10, 96 << 10));
    let mut random = Random(7);
    let mut model = BTreeMap::new();
    let mut db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("open: {error}"));
    for step in 0..3000u32 {
        let key = format!("key-{:04}", random.below(400)).into_bytes();
        let len = match random.below(20) {
            0 => 20_000 + random.below(150_000) as usize,
            1..=9 => 1024 + random.below(4000) as usize,
            _ => 1 + random.below(900) as usize,
        };
        if random.below(10) == 0 {
            db.delete(&key, WriteOptions::default()).unwrap_or_else(|error| panic!("step {step}: {error}"));
            model.remove(&key);
        } else {
            let value = value(&mut random, len);
            db.put(&key, &value, WriteOptions::default())
                .unwrap_or_else(|error| panic!("step {step}: put {len}: {error}"));
            model.insert(key, value);
        }
        if step % 1000 == 999 {
            check_all(&db, &model, &format!("step {step}"));
            drop(db);
            db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("reopen: {error}"));
            check_all(&db, &model, &format!("step {step}, reopened"));
        }
    }
    db.flush().unwrap_or_else(|error| panic!("flush: {error}"));
    check_all(&db, &model, "end");
}

/// Overwrites leave garbage in value chunks; merges relocate what is still live out of the
/// chunks with less than half live, and the commits free them: the space used stays bounded.
#[test]
fn overwrites_are_collected_and_space_stays_bounded() {
    let image = Image::with_value_chunks("values-gc", &small_layout(64 << 20, 512 << 10, 96 << 10));
    let mut random = Random(11);
    let mut model = BTreeMap::new();
    let db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("open: {error}"));
    let mut peak_value_bytes = 0;
    for round in 0..12u32 {
        for step in 0..300u32 {
            // The first round writes every key; later ones a random third of them, so that
            // value chunks keep some live values among the garbage.
            let index = if round == 0 { step } else { random.below(300) as u32 };
            if round > 0 && step % 3 != 0 {
                continue;
            }
            let key = format!("key-{index:04}").into_bytes();
            let len = 3000 + random.below(2000) as usize;
            let value = value(&mut random, len);
            db.put(&key, &value, WriteOptions::default()).unwrap_or_else(|error| panic!("round {round}: {error}"));
            model.insert(key, value);
        }
        db.flush().unwrap_or_else(|error| panic!("flush: {error}"));
        db.compact_range().unwrap_or_else(|error| panic!("compact: {error}"));
        peak_value_bytes = peak_value_bytes.max(db.stats().value_bytes);
    }
    check_all(&db, &model, "after the overwrites");
    let stats = db.stats();
    let live: u64 = model.values().map(|value| value.len() as u64).sum();
    assert_eq!(stats.value_live_bytes, live, "{stats:?}");
    assert!(stats.values_relocated_bytes > 0, "nothing was relocated: {stats:?}");
    // Twelve rounds wrote five times the live data; at most about twice of it stays.
    assert!(peak_value_bytes < 3 * live, "value chunks hold {peak_value_bytes} bytes for {live} live: {stats:?}");
    drop(db);
    let db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("reopen: {error}"));
    check_all(&db, &model, "reopened");
}

/// A tree at rest in its last level, then overwrites of a third of its keys at a time with no
/// manual compaction: the value chunks the last level points to lose live values that no
/// ordinary merge touches, and garbage collection rewrites that level's chunks to free them.
///
/// Fixed level sizes: with dynamic ones (the default) a tree this small merges level 0 straight
/// into its last level, so ordinary merges do reach it.
#[test]
fn garbage_collection_rewrites_the_last_level_to_free_value_chunks() {
    let image = Image::with_value_chunks("values-collection", &small_layout(64 << 20, 512 << 10, 96 << 10));
    let mut random = Random(5);
    let mut model = BTreeMap::new();
    let options = || Options { dynamic_levels: false, ..options() };
    let db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("open: {error}"));
    let put = |db: &Db, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, random: &mut Random, index: u64| {
        let key = format!("key-{index:04}").into_bytes();
        let len = 3000 + random.below(2000) as usize;
        let value = value(random, len);
        db.put(&key, &value, WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
        model.insert(key, value);
    };
    for index in 0..600 {
        put(&db, &mut model, &mut random, index);
    }
    db.compact_range().unwrap_or_else(|error| panic!("compact: {error}"));
    let loaded = db.stats();
    for _ in 0..6 {
        for _ in 0..200 {
            let index = random.below(600);
            put(&db, &mut model, &mut random, index);
        }
        db.flush().unwrap_or_else(|error| panic!("flush: {error}"));
    }
    let stats = db.stats();
    check_all(&db, &model, "after the overwrites");
    assert!(stats.value_collections > 0, "no collection ran: {stats:?}");
    // Older versions of the overwritten keys stay in the last level until a merge reaches
    // them: their values stay live. What collection frees is the rest: value chunks hold
    // little more than what the tree points to.
    let live: u64 = model.values().map(|value| value.len() as u64).sum();
    assert!(stats.value_live_bytes >= live, "{stats:?}");
    assert!(
        stats.value_bytes < stats.value_live_bytes + stats.value_live_bytes / 4,
        "{} bytes in value chunks for {} the tree points to (after the load: {loaded:?}): {stats:?}",
        stats.value_bytes,
        stats.value_live_bytes
    );
    drop(db);
    let db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("reopen: {error}"));
    db.compact_range().unwrap_or_else(|error| panic!("compact: {error}"));
    let stats = db.stats();
    check_all(&db, &model, "compacted");
    // Merged into one level, the older versions go, and with them their values.
    assert_eq!(stats.value_live_bytes, live, "{stats:?}");
}
