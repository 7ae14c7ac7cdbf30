//! TRIAD-LOG (technique `triad-log`, SPEC.md §8.9): flushes write log chunks whose puts name
//! their batches in the backup log; reads, iterators and reopens follow the references; a
//! level-0 merge turns them into ordinary chunks and releases the ring; a small ring makes
//! level 0 merge early and writers wait instead of failing; an open iterator keeps what its
//! version names; the fallbacks (no room, mostly overwrites) write ordinary chunks.

use std::collections::BTreeMap;

use lds_engine::{Db, Options, WriteOptions};

mod common;

use common::{assert_matches_model, small_layout, Image};

fn options() -> Options {
    Options { background: false, write_buffer_size: 256 << 10, level0_compaction_trigger: 4, ..Options::default() }
        .with_techniques("triad-log")
        .unwrap_or_else(|error| panic!("{error}"))
}

/// `options` with room for eight level-0 chunks before a merge.
fn eight() -> Options {
    Options { level0_compaction_trigger: 8, ..options() }
}

fn image(name: &str, len_backup_log: u64) -> Image {
    let layout = lds_format::geometry::LayoutRequest {
        slot_size: Some(256 << 10),
        ..small_layout(64 << 20, 256 << 10, len_backup_log)
    };
    Image::with_features(name, &layout, |label| label.with_sync_watermark().with_fast_digest().with_log_tables())
}

fn value(number: u32, round: u32) -> Vec<u8> {
    format!("value-{round}-{number:06}-{}", "x".repeat((number % 90) as usize)).into_bytes()
}

fn fill(db: &Db, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, keys: std::ops::Range<u32>, round: u32) {
    for number in keys {
        let key = format!("key-{number:06}").into_bytes();
        let value = value(number, round);
        db.put(&key, &value, WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
        model.insert(key, value);
    }
}

fn log_chunks(db: &Db) -> usize {
    db.chunks().iter().filter(|chunk| chunk.is_log_chunk()).count()
}

#[test]
fn log_chunks_hold_references_read_back_across_reopens_and_merge_into_ordinary_chunks() {
    let image = image("triad-log", 2 << 20);
    let mut model = BTreeMap::new();
    let db = Db::open(image.path(), eight()).unwrap_or_else(|error| panic!("{error}"));
    fill(&db, &mut model, 0..600, 0);
    db.flush().unwrap_or_else(|error| panic!("{error}"));
    let stats = db.stats();
    assert_eq!(stats.log_chunk_flushes, 1, "{stats:?}");
    assert!(stats.log_references >= 500, "most values are at least 24 bytes: {stats:?}");
    assert_eq!(log_chunks(&db), 1);
    let chunk = db.chunks().into_iter().find(|chunk| chunk.is_log_chunk()).unwrap_or_else(|| panic!("a log chunk"));
    assert_eq!(chunk.level, 0);
    let start = chunk.log_start.unwrap_or_else(|| panic!("a log start"));
    // The chunk holds keys and references, not the values: far less than the values' bytes.
    let value_bytes: usize = model.values().map(Vec::len).sum();
    assert!(chunk.len_data < value_bytes as u64, "{} bytes of chunk for {value_bytes} of values", chunk.len_data);
    assert!(stats.log_retained_bytes > 0, "{stats:?}");
    assert_matches_model(&db, &model, 7, "after the flush");
    assert!(db.stats().log_reads > 0, "reads followed references");
    drop(db);

    // Reopened: the retention start is the log chunk's start, the references still resolve.
    let db = Db::open(image.path(), eight()).unwrap_or_else(|error| panic!("{error}"));
    assert_matches_model(&db, &model, 5, "after a reopen");
    assert_eq!(
        db.chunks().into_iter().find(|chunk| chunk.is_log_chunk()).and_then(|chunk| chunk.log_start),
        Some(start)
    );
    // Overwrites of half the keys, more flushes: newest versions win over the references.
    fill(&db, &mut model, 0..300, 1);
    db.flush().unwrap_or_else(|error| panic!("{error}"));
    fill(&db, &mut model, 600..900, 1);
    db.flush().unwrap_or_else(|error| panic!("{error}"));
    assert!(log_chunks(&db) >= 2);
    assert_matches_model(&db, &model, 3, "with several log chunks");

    // A full compaction reads every reference and writes ordinary chunks: the ring is free.
    db.compact_range().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(log_chunks(&db), 0);
    assert_eq!(db.stats().log_retained_bytes, 0);
    assert_matches_model(&db, &model, 3, "after a full compaction");
    drop(db);
    let db = Db::open(image.path(), eight()).unwrap_or_else(|error| panic!("{error}"));
    assert_matches_model(&db, &model, 11, "reopened after the compaction");
    // An engine without the technique reads the volume the same way.
    drop(db);
    let plain = Options { background: false, ..Options::default() };
    let db = Db::open(image.path(), plain).unwrap_or_else(|error| panic!("{error}"));
    assert_matches_model(&db, &model, 13, "without the technique");
}

#[test]
fn a_small_ring_merges_level_0_early_and_writers_wait_instead_of_failing() {
    // 128 KiB of ring, 32 KiB memtables: a log chunk only while 64 KiB plus the retained
    // region fit; past that level 0 merges at once.
    let image = image("triad-log-small", 128 << 10);
    let mut model = BTreeMap::new();
    for background in [false, true] {
        let options = Options { background, write_buffer_size: 32 << 10, ..eight() };
        let db = Db::open(image.path(), options).unwrap_or_else(|error| panic!("{error}"));
        for round in 0..6 {
            fill(&db, &mut model, 0..4_000, round);
        }
        db.flush().unwrap_or_else(|error| panic!("{error}"));
        let stats = db.stats();
        assert!(stats.log_chunk_flushes >= 2, "{stats:?}");
        assert!(stats.log_pressure_merges >= 1, "the retained region never called for a merge: {stats:?}");
        assert!(stats.log_retained_bytes <= 128 << 10, "{stats:?}");
        assert_matches_model(&db, &model, 17, &format!("background {background}"));
        drop(db);
    }
}

#[test]
fn an_open_iterator_keeps_the_objects_its_version_names() {
    let image = image("triad-log-iterator", 512 << 10);
    let mut model = BTreeMap::new();
    let options = Options { background: true, ..options() };
    let db = std::sync::Arc::new(Db::open(image.path(), options).unwrap_or_else(|error| panic!("{error}")));
    fill(&db, &mut model, 0..1_000, 0);
    db.flush().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(log_chunks(&db), 1);
    let expected: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(key, value)| (key.clone(), value.clone())).collect();
    let mut iterator = db.iter().unwrap_or_else(|error| panic!("{error}"));
    let first = iterator.next().unwrap_or_else(|| panic!("an entry")).unwrap_or_else(|error| panic!("{error}"));
    // The log chunk is merged away; the iterator's version still names it.
    db.compact_range().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(log_chunks(&db), 0);
    // A writer of twice the ring reaches the objects the iterator may still read, and waits.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (db, done) = (std::sync::Arc::clone(&db), std::sync::Arc::clone(&done));
        std::thread::spawn(move || {
            let mut later = BTreeMap::new();
            fill(&db, &mut later, 2_000..8_000, 1);
            done.store(true, std::sync::atomic::Ordering::Release);
        })
    };
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(!done.load(std::sync::atomic::Ordering::Acquire), "the writer overwrote what an open iterator reads");
    let rest: Vec<(Vec<u8>, Vec<u8>)> = iterator.collect::<Result<_, _>>().unwrap_or_else(|error| panic!("{error}"));
    let mut seen = vec![first];
    seen.extend(rest);
    assert_eq!(seen, expected, "the iterator read what its version held");
    // The iterator is gone: the writer goes on.
    writer.join().unwrap_or_else(|_| panic!("the writer panicked"));
    assert!(done.load(std::sync::atomic::Ordering::Acquire));
    assert!(db.stats().log_waits >= 1, "{:?}", db.stats());
}

#[test]
fn mostly_overwritten_memtables_and_a_technique_off_write_ordinary_chunks() {
    let image = image("triad-log-fallback", 2 << 20);
    let db = Db::open(image.path(), eight()).unwrap_or_else(|error| panic!("{error}"));
    let mut model = BTreeMap::new();
    // 20 keys written 30 times each: 1 entry in 30 is kept, far below 80%. TRIAD's condition
    // is judged on the flush before: the first such flush still writes a log chunk (no flush
    // came before it), the next ones do not.
    for round in 0..30 {
        fill(&db, &mut model, 0..20, round);
    }
    db.flush().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(db.stats().log_chunk_flushes, 1);
    for flush in 0..3 {
        for round in 0..30 {
            fill(&db, &mut model, 0..20, 100 + 30 * flush + round);
        }
        db.flush().unwrap_or_else(|error| panic!("{error}"));
    }
    assert_eq!(db.stats().log_chunk_flushes, 1, "mostly overwritten memtables write ordinary chunks");
    assert_eq!(db.stats().memtable_flushes, 4);
    assert_matches_model(&db, &model, 1, "overwrites");
    drop(db);
    let plain = Options { background: false, write_buffer_size: 64 << 10, ..Options::default() };
    let db = Db::open(image.path(), plain).unwrap_or_else(|error| panic!("{error}"));
    fill(&db, &mut model, 0..600, 40);
    db.flush().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(log_chunks(&db), 0, "the technique is off");
    assert_matches_model(&db, &model, 3, "technique off");
}

#[test]
fn sequential_flushes_write_ordinary_chunks_that_move_down() {
    let image = image("triad-log-sequential", 2 << 20);
    let db = Db::open(image.path(), eight()).unwrap_or_else(|error| panic!("{error}"));
    let mut model = BTreeMap::new();
    // Into an empty tree: a log chunk.
    fill(&db, &mut model, 0..600, 0);
    db.flush().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(db.stats().log_chunk_flushes, 1);
    // Past every key there: ordinary chunks, which overlap nothing.
    for batch in 1..4u32 {
        fill(&db, &mut model, batch * 1_000..batch * 1_000 + 600, 0);
        db.flush().unwrap_or_else(|error| panic!("{error}"));
    }
    assert_eq!(db.stats().log_chunk_flushes, 1, "{:?}", db.stats());
    assert_eq!(log_chunks(&db), 1);
    // Overwrites across them: a log chunk again.
    fill(&db, &mut model, 500..3_100, 1);
    db.flush().unwrap_or_else(|error| panic!("{error}"));
    assert!(db.stats().log_chunk_flushes >= 2, "{:?}", db.stats());
    assert_matches_model(&db, &model, 7, "sequential then overwrites");
}

#[test]
fn the_technique_needs_the_feature_and_leveled_compaction() {
    let layout = small_layout(16 << 20, 64 << 10, 64 << 10);
    let plain = Image::new("triad-log-nofeature", &layout);
    let refused = Db::open(plain.path(), options()).err().map(|error| error.to_string()).unwrap_or_default();
    assert!(refused.contains("log_tables") && refused.contains("--log-tables"), "{refused}");
    let image = image("triad-log-forest", 256 << 10);
    let forest = options().with_techniques("forest").unwrap_or_else(|error| panic!("{error}"));
    let refused = Db::open(image.path(), forest).err().map(|error| error.to_string()).unwrap_or_default();
    assert!(refused.contains("triad-log"), "{refused}");
}
