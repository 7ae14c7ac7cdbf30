//! Guards the engine against a BTreeMap model: random puts, deletes, batches, flushes and
//! reopen cycles (proptest, fixed seed, shrinking on failure), on volumes with tiny logs so that both logs wrap and the
//! version log trims; and a run that fills the volume to "space full" and stays readable.

use std::collections::BTreeMap;

use lds_engine::{Db, Error, Options, WriteBatch, WriteOptions};
use proptest::prelude::*;
use proptest::test_runner::{RngAlgorithm, TestCaseError, TestRng, TestRunner};

mod common;

use common::{small_layout, Image, Random};

fn image(name: &str, volume_len: u64) -> Image {
    Image::new(&format!("model-{name}"), &small_layout(volume_len, 64 << 10, 12 << 10))
}

fn key(random: &mut Random) -> Vec<u8> {
    format!("key-{:04}", random.below(300)).into_bytes()
}

fn value(random: &mut Random) -> Vec<u8> {
    let len = 1 + random.below(200) as usize;
    (0..len).map(|index| (random.next() as u8).wrapping_add(index as u8)).collect()
}

fn check(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, random: &mut Random, context: &str) {
    for _ in 0..40 {
        let probe = key(random);
        let got = db.get(&probe).unwrap_or_else(|error| panic!("{context}: get: {error}"));
        assert_eq!(got.as_ref(), model.get(&probe), "{context}: key {}", String::from_utf8_lossy(&probe));
    }
    let all: Vec<(Vec<u8>, Vec<u8>)> =
        db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{context}: range: {error}"));
    let expected: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(key, value)| (key.clone(), value.clone())).collect();
    assert!(all == expected, "{context}: range differs: {} keys, model {}", all.len(), expected.len());
    let from = b"key-0150".to_vec();
    let to = b"key-0200".to_vec();
    let part: Vec<(Vec<u8>, Vec<u8>)> = db
        .range(&from, Some(&to))
        .and_then(Iterator::collect)
        .unwrap_or_else(|error| panic!("{context}: range: {error}"));
    let expected: Vec<(Vec<u8>, Vec<u8>)> =
        model.range(from..to).map(|(key, value)| (key.clone(), value.clone())).collect();
    assert!(part == expected, "{context}: bounded range differs");
    // Seeks that read a few entries: to keys present, absent or deleted, wherever they lie.
    for _ in 0..20 {
        let from = key(random);
        let seen: Vec<(Vec<u8>, Vec<u8>)> = db
            .range(&from, None)
            .and_then(|iterator| iterator.take(3).collect())
            .unwrap_or_else(|error| panic!("{context}: seek: {error}"));
        let expected: Vec<(Vec<u8>, Vec<u8>)> =
            model.range(from.clone()..).take(3).map(|(key, value)| (key.clone(), value.clone())).collect();
        assert!(seen == expected, "{context}: seek to {} differs", String::from_utf8_lossy(&from));
    }
}

/// One operation of the model test.
#[derive(Debug, Clone)]
enum Op {
    Put {
        key: u16,
        value: Vec<u8>,
        sync: bool,
    },
    /// A value above a quarter slot (16 KiB here) and up to three slots: only key-value
    /// separation keeps it (SPEC.md §8.6); `len` bytes of a pattern from `seed`.
    PutLarge {
        key: u16,
        len: usize,
        seed: u8,
        sync: bool,
    },
    Delete {
        key: u16,
        sync: bool,
    },
    Batch {
        entries: Vec<(u16, Option<Vec<u8>>)>,
        sync: bool,
    },
    Flush,
    Reopen,
    Check,
}

fn key_of(index: u16) -> Vec<u8> {
    format!("key-{index:04}").into_bytes()
}

/// The value of a `PutLarge`.
fn large_value(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|index| (index as u8).wrapping_mul(31).wrapping_add(seed) ^ (index >> 9) as u8).collect()
}

/// The operation mix: puts 55%, deletes 15%, batches 15%, flushes 5%, reopens 4%, checks 6%;
/// with `large`, 3% more of puts of values from a quarter slot to three slots.
fn op(large: bool) -> impl Strategy<Value = Op> {
    let key = 0u16..300;
    let value = proptest::collection::vec(any::<u8>(), 1..=200);
    let sync = proptest::bool::weighted(0.1);
    let large_weight = if large { 3 } else { 0 };
    prop_oneof![
        large_weight => (key.clone(), (16usize << 10) + 1..=(192usize << 10), any::<u8>(), sync)
            .prop_map(|(key, len, seed, sync)| Op::PutLarge { key, len, seed, sync }),
        55 => (key.clone(), value.clone(), sync).prop_map(|(key, value, sync)| Op::Put { key, value, sync }),
        15 => (key.clone(), sync).prop_map(|(key, sync)| Op::Delete { key, sync }),
        15 => (proptest::collection::vec((key, proptest::option::weighted(0.67, value)), 1..=6), sync)
            .prop_map(|(entries, sync)| Op::Batch { entries, sync }),
        5 => Just(Op::Flush),
        4 => Just(Op::Reopen),
        6 => Just(Op::Check),
    ]
}

/// Runs `ops` on a fresh volume and compares with a BTreeMap after checks, at the end and
/// after a final reopen.
fn run_model(case: u64, ops: &[Op], options: &Options) -> Result<(), TestCaseError> {
    let name = format!("model-case{case}-{}", std::thread::current().name().unwrap_or("main").replace("::", "-"));
    let layout = small_layout(24 << 20, 64 << 10, 12 << 10);
    // Key-value separation needs a volume with value chunks (SPEC.md §8.6), triad-disk one
    // with key sketches (§8.7), triad-log one with log chunks (§8.9).
    let (values, sketches) = (options.value_separation_min.is_some(), options.level0_overlap_min.is_some());
    let logs = options.log_tables;
    let image = Image::with_features(&name, &layout, |label| {
        let label = if values || sketches || logs { label.with_sync_watermark().with_fast_digest() } else { label };
        let label = if values { label.with_value_chunks() } else { label };
        let label = if logs { label.with_log_tables() } else { label };
        if sketches {
            label.with_chunk_sketches()
        } else {
            label
        }
    });
    let mut random = Random(case.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let open =
        || Db::open(image.path(), options.clone()).map_err(|error| TestCaseError::fail(format!("open: {error}")));
    let mut db = open()?;
    for (step, op) in ops.iter().enumerate() {
        let context = format!("case {case} step {step} ({op:?})");
        let failed = |error: lds_engine::Error| TestCaseError::fail(format!("{context}: {error}"));
        match op {
            Op::Put { key, value, sync } => {
                db.put(&key_of(*key), value, WriteOptions { sync: *sync }).map_err(failed)?;
                model.insert(key_of(*key), value.clone());
            }
            Op::PutLarge { key, len, seed, sync } => {
                let value = large_value(*len, *seed);
                db.put(&key_of(*key), &value, WriteOptions { sync: *sync }).map_err(failed)?;
                model.insert(key_of(*key), value);
            }
            Op::Delete { key, sync } => {
                db.delete(&key_of(*key), WriteOptions { sync: *sync }).map_err(failed)?;
                model.remove(&key_of(*key));
            }
            Op::Batch { entries, sync } => {
                let mut batch = WriteBatch::new();
                for (key, value) in entries {
                    match value {
                        Some(value) => {
                            batch.put(&key_of(*key), value);
                            model.insert(key_of(*key), value.clone());
                        }
                        None => {
                            batch.delete(&key_of(*key));
                            model.remove(&key_of(*key));
                        }
                    }
                }
                db.write(&batch, WriteOptions { sync: *sync }).map_err(failed)?;
            }
            Op::Flush => db.flush().map_err(failed)?,
            Op::Reopen => {
                drop(db);
                db = open()?;
            }
            Op::Check => check(&db, &model, &mut random, &context),
        }
    }
    check(&db, &model, &mut random, &format!("case {case} end"));
    drop(db);
    let db = open()?;
    check(&db, &model, &mut random, &format!("case {case} after the final reopen"));
    Ok(())
}

/// Property-based (proptest) with a fixed seed, so that every run tries the same twelve
/// workloads of 1,500 operations (and a failure shrinks to a short one).
#[test]
fn random_operations_match_a_btreemap_across_reopens() {
    run_model_cases(12, &Options::default());
}

/// The same model test with each engine technique switched on (`lds_engine::TECHNIQUES`),
/// with no tail cache, so that reads go through what the technique keeps.
#[test]
fn random_operations_match_a_btreemap_with_each_technique() {
    for (name, _) in lds_engine::TECHNIQUES {
        let mut options = Options { tail_cache_bytes: 0, block_cache_bytes: 0, ..Options::default() }
            .with_techniques(name)
            .unwrap_or_else(|error| panic!("{error}"));
        if options.value_separation_min.is_some() {
            // The model's values are 1 to 200 bytes, with a few from a quarter slot to three
            // slots: most go to value chunks at flush, the largest before their batch.
            options.value_separation_min = Some(48);
            options.value_direct_min = 160;
        }
        if options.log_tables {
            // Memtables of a sixth of the 12 KiB backup log, so that it retains a few.
            options.write_buffer_size = 2 << 10;
        }
        run_model_cases(4, &options);
    }
}

fn run_model_cases(cases: u32, options: &Options) {
    let config =
        ProptestConfig { cases, max_shrink_iters: 200, failure_persistence: None, ..ProptestConfig::default() };
    let seed = [0x4C, 0x44, 0x53, 0x21].repeat(8);
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed);
    let mut runner = TestRunner::new_with_rng(config, rng);
    let case = std::sync::atomic::AtomicU64::new(0);
    let large = options.value_separation_min.is_some();
    let result = runner.run(&proptest::collection::vec(op(large), 1500), |ops| {
        run_model(case.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1, &ops, options)
    });
    if let Err(error) = result {
        panic!("{error}");
    }
}

#[test]
fn filling_the_volume_ends_in_space_full_and_stays_readable() {
    let image = image("full", 3 << 20);
    let mut random = Random(7);
    let mut model = BTreeMap::new();
    let db = Db::open(image.path(), Options::default()).unwrap_or_else(|error| panic!("open: {error}"));
    let mut full = false;
    for step in 0..100_000u32 {
        let key = format!("fill-{step:06}").into_bytes();
        let value = value(&mut random);
        match db.put(&key, &value, WriteOptions::default()) {
            Ok(()) => {
                model.insert(key, value);
            }
            Err(Error::SpaceFull { .. }) => {
                full = true;
                break;
            }
            Err(error) => panic!("step {step}: {error}"),
        }
    }
    assert!(full, "the volume never filled");
    assert!(matches!(db.flush(), Err(Error::SpaceFull { .. })));
    check_all(&db, &model, "after space full");
    drop(db);
    let db = Db::open(image.path(), Options::default()).unwrap_or_else(|error| panic!("reopen: {error}"));
    check_all(&db, &model, "after reopening a full volume");
}

fn check_all(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, context: &str) {
    for (key, value) in model.iter().step_by(37) {
        assert_eq!(db.get(key).unwrap_or_else(|error| panic!("{context}: {error}")).as_ref(), Some(value), "{context}");
    }
    let all: Vec<(Vec<u8>, Vec<u8>)> =
        db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{context}: {error}"));
    assert_eq!(all.len(), model.len(), "{context}");
    assert!(
        all.iter().zip(model).all(|((key, value), (want_key, want))| key == want_key && value == want),
        "{context}"
    );
}

#[test]
fn compaction_builds_levels_with_odd_chunks_and_frees_slots() {
    let options = Options { level1_max_bytes: 2 * (64 << 10), level_size_multiplier: 4, ..Options::default() };
    compaction_builds_levels("model-levels", options);
}

/// Level pinning through flushes, merges and reopens, with no other tail or block cache: the
/// pinned tails follow every commit (a stale one would read another chunk's index).
#[test]
fn level_pinning_keeps_the_upper_levels_tails_current_through_compactions() {
    let options = Options {
        level1_max_bytes: 2 * (64 << 10),
        level_size_multiplier: 4,
        tail_cache_bytes: 0,
        block_cache_bytes: 0,
        ..Options::default()
    }
    .with_techniques("level-pinning")
    .unwrap_or_else(|error| panic!("{error}"));
    let image = compaction_builds_levels("model-levels-pinned", options.clone());
    let db = Db::open(image.path(), options).unwrap_or_else(|error| panic!("reopen: {error}"));
    let pinned = db.stats().pinned_tail_bytes;
    let upper = db.chunks().iter().filter(|chunk| chunk.level < 3).count();
    assert!(upper > 0 && pinned > 0, "{upper} chunks in levels 0 to 2, {pinned} tail bytes pinned after open");
    drop(db);
    let options = Options { pinned_levels: 0, ..Options::default() };
    let db = Db::open(image.path(), options).unwrap_or_else(|error| panic!("reopen: {error}"));
    assert_eq!(db.stats().pinned_tail_bytes, 0, "pinned with pinning off");
}

fn compaction_builds_levels(name: &str, options: Options) -> Image {
    let image = Image::new(name, &small_layout(48 << 20, 512 << 10, 96 << 10));
    let mut random = Random(99);
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut db = Db::open(image.path(), options.clone()).unwrap_or_else(|error| panic!("open: {error}"));
    let mut deepest = 0u8;
    let mut odd_seen = false;
    for step in 0..40_000u32 {
        let key = format!("key-{:05}", random.below(12_000)).into_bytes();
        if random.below(8) == 0 {
            db.delete(&key, WriteOptions::default()).unwrap_or_else(|error| panic!("step {step}: {error}"));
            model.remove(&key);
        } else {
            let value = value(&mut random);
            db.put(&key, &value, WriteOptions::default()).unwrap_or_else(|error| panic!("step {step}: {error}"));
            model.insert(key, value);
        }
        // Whether an odd chunk is in the version at a given step depends on how the
        // background merges fell between the writes: it is looked for often (a look at the
        // version only), not only where the checks below wait for the background thread.
        if step % 100 == 99 {
            odd_seen |= db.chunks().iter().any(|chunk| chunk.is_odd());
        }
        if step % 2000 == 1999 {
            // Let the background thread finish, so the version and the slots agree.
            db.flush().unwrap_or_else(|error| panic!("step {step}: flush: {error}"));
            let chunks = db.chunks();
            deepest = deepest.max(chunks.iter().map(|chunk| chunk.level).max().unwrap_or(0));
            odd_seen |= chunks.iter().any(|chunk| chunk.is_odd());
            for level in 1..7u8 {
                let odd = chunks.iter().filter(|chunk| chunk.level == level && chunk.is_odd()).count();
                assert!(odd <= 1, "step {step}: level {level} holds {odd} odd chunks");
                let mut ranges: Vec<(&[u8], &[u8])> = chunks
                    .iter()
                    .filter(|chunk| chunk.level == level)
                    .map(|chunk| (chunk.smallest_key.as_slice(), chunk.largest_key.as_slice()))
                    .collect();
                ranges.sort();
                assert!(
                    ranges.windows(2).all(|pair| pair[0].1 < pair[1].0),
                    "step {step}: level {level} chunks overlap"
                );
            }
            assert_eq!(db.slots_in_use(), chunks.len() as u64, "step {step}: slots leaked or shared");
        }
        if step % 10_000 == 9_999 {
            check(&db, &model, &mut random, &format!("step {step}"));
            drop(db);
            db = Db::open(image.path(), options.clone()).unwrap_or_else(|error| panic!("reopen: {error}"));
            // Level 0 may have been left at or above its trigger (it waits for more while
            // writes stream): a merge may start at once, its outputs in use before its commit.
            db.flush().unwrap_or_else(|error| panic!("after reopen: flush: {error}"));
            assert_eq!(db.slots_in_use(), db.chunks().len() as u64, "after reopen: the online map disagrees");
        }
    }
    check(&db, &model, &mut random, "end");
    assert!(deepest >= 2, "compaction never reached level 2 (deepest {deepest})");
    assert!(odd_seen, "no odd chunk was ever kept (SPEC.md §11)");
    check_all(&db, &model, "end, every key");
    image
}

/// Runs a seeded workload in inline mode and returns the image's bytes.
fn inline_run(name: &str, seed: u64) -> Vec<u8> {
    let image = Image::new(name, &small_layout(24 << 20, 64 << 10, 12 << 10));
    let options =
        Options { background: false, level1_max_bytes: 2 * (64 << 10), level_size_multiplier: 4, ..Options::default() };
    let mut random = Random(seed);
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut db = Db::open(image.path(), options.clone()).unwrap_or_else(|error| panic!("open: {error}"));
    for step in 0..6000u32 {
        let key = key(&mut random);
        match random.below(10) {
            0 => {
                db.delete(&key, WriteOptions { sync: step % 7 == 0 }).unwrap_or_else(|error| panic!("{error}"));
                model.remove(&key);
            }
            1 if step % 500 == 1 => {
                drop(db);
                db = Db::open(image.path(), options.clone()).unwrap_or_else(|error| panic!("reopen: {error}"));
            }
            _ => {
                let value = value(&mut random);
                db.put(&key, &value, WriteOptions { sync: step % 11 == 0 }).unwrap_or_else(|error| panic!("{error}"));
                model.insert(key, value);
            }
        }
    }
    check(&db, &model, &mut random, &format!("inline {name}"));
    assert!(db.chunks().iter().any(|chunk| chunk.level >= 1), "inline mode never compacted");
    db.close().unwrap_or_else(|error| panic!("{error}"));
    std::fs::read(image.path()).unwrap_or_else(|error| panic!("{error}"))
}

#[test]
fn inline_mode_matches_the_model_and_repeats_byte_for_byte() {
    let first = inline_run("inline-a", 77);
    let second = inline_run("inline-b", 77);
    assert!(first == second, "the same seed gave different images (docs/reliability.md I8)");
    let other = inline_run("inline-c", 78);
    assert!(first != other, "different seeds gave the same image");
}

/// Random keys, so that merges run when the volume fills: a merge that meets "space full"
/// must lose nothing, whatever runs after it (flushes freeing slots, more puts, a reopen).
#[test]
fn a_merge_meeting_space_full_loses_nothing() {
    let tiered = Options { size_tiered_threshold: 4, ..Options::default() };
    for (seed, options) in (1..6u64).map(|seed| (seed, Options::default())).chain([(6, tiered)]) {
        let image = image(&format!("full-merge-{seed}"), 3 << 20);
        let mut random = Random(seed);
        let mut model = BTreeMap::new();
        let db = Db::open(image.path(), options.clone()).unwrap_or_else(|error| panic!("open: {error}"));
        let mut fulls = 0;
        for step in 0..200_000u32 {
            let key = format!("k-{:06}", random.below(20_000)).into_bytes();
            let value = value(&mut random);
            match db.put(&key, &value, WriteOptions::default()) {
                Ok(()) => {
                    model.insert(key, value);
                }
                Err(Error::SpaceFull { .. }) => {
                    fulls += 1;
                    check_all(&db, &model, &format!("seed {seed} step {step}: after space full {fulls}"));
                    if fulls == 20 {
                        break;
                    }
                    // Deleting makes room for merges to drop entries.
                    for _ in 0..200 {
                        let key = format!("k-{:06}", random.below(20_000)).into_bytes();
                        if db.delete(&key, WriteOptions::default()).is_ok() {
                            model.remove(&key);
                        }
                    }
                }
                Err(error) => panic!("seed {seed} step {step}: {error}"),
            }
        }
        check_all(&db, &model, &format!("seed {seed}: end"));
        drop(db);
        let db = Db::open(image.path(), options).unwrap_or_else(|error| panic!("reopen: {error}"));
        check_all(&db, &model, &format!("seed {seed}: reopened"));
    }
}
