//! Guards the engine's concurrency and read consistency: concurrent writers (some synced) and
//! readers, snapshots that keep seeing old values across flushes and compactions, and
//! iterators whose chunks are not reused while they read.

use std::collections::BTreeMap;
use std::sync::Arc;

use lds_engine::{Db, Options, WriteBatch, WriteOptions};

mod common;

use common::{small_layout, Image};

fn image(name: &str) -> Image {
    Image::new(&format!("concurrency-{name}"), &small_layout(48 << 20, 512 << 10, 96 << 10))
}

fn options() -> Options {
    Options { level1_max_bytes: 2 * (64 << 10), level_size_multiplier: 4, ..Options::default() }
}

fn key(writer: usize, number: u64) -> Vec<u8> {
    format!("w{writer}-k{:04}", number % 500).into_bytes()
}

fn value(round: u64) -> Vec<u8> {
    format!("{round:08}-{}", "v".repeat((round % 90) as usize)).into_bytes()
}

fn round_of(value: &[u8]) -> u64 {
    std::str::from_utf8(&value[..8]).ok().and_then(|text| text.parse().ok()).unwrap_or_else(|| panic!("bad value"))
}

#[test]
fn concurrent_writers_and_readers_see_values_only_move_forward() {
    let image = image("threads");
    let db = Arc::new(Db::open(image.path(), options()).unwrap_or_else(|error| panic!("open: {error}")));
    const WRITERS: usize = 3;
    const ROUNDS: u64 = 6000;
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let db = Arc::clone(&db);
            std::thread::spawn(move || {
                for round in 0..ROUNDS {
                    let sync = WriteOptions { sync: writer == 0 && round % 50 == 0 };
                    db.put(&key(writer, round), &value(round), sync)
                        .unwrap_or_else(|error| panic!("writer {writer}: {error}"));
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|reader| {
            let db = Arc::clone(&db);
            std::thread::spawn(move || {
                let mut seen: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
                for probe in 0..4000u64 {
                    let key = key((probe as usize + reader) % WRITERS, probe * 7);
                    if let Some(found) = db.get(&key).unwrap_or_else(|error| panic!("reader: {error}")) {
                        let round = round_of(&found);
                        let previous = seen.insert(key.clone(), round).unwrap_or(0);
                        assert!(
                            round >= previous,
                            "{}: saw round {round} after {previous}",
                            String::from_utf8_lossy(&key)
                        );
                    }
                }
            })
        })
        .collect();
    for thread in writers.into_iter().chain(readers) {
        thread.join().unwrap_or_else(|_| panic!("a thread panicked"));
    }
    for writer in 0..WRITERS {
        for number in 0..500u64 {
            let last_round = (ROUNDS - 1) - ((ROUNDS - 1 - number) % 500);
            let found = db.get(&key(writer, number)).unwrap_or_else(|error| panic!("{error}"));
            assert_eq!(found.as_deref(), Some(value(last_round).as_slice()), "writer {writer} key {number}");
        }
    }
    assert!(db.chunks().iter().any(|chunk| chunk.level >= 1), "no compaction ran");
}

#[test]
fn snapshots_see_the_past_across_flushes_and_compactions() {
    let image = image("snapshot");
    let db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("open: {error}"));
    let mut batch = WriteBatch::new();
    for number in 0..2000u64 {
        batch.put(format!("key{number:05}").as_bytes(), &value(number));
        if batch.len() == 200 {
            db.write(&batch, WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
            batch = WriteBatch::new();
        }
    }
    db.flush().unwrap_or_else(|error| panic!("{error}"));
    let snapshot = db.snapshot();
    let before: Vec<(Vec<u8>, Vec<u8>)> =
        snapshot.range(b"", None).and_then(Iterator::collect).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(before.len(), 2000);
    for round in 0..3u64 {
        for number in (0..2000u64).step_by(3) {
            let key = format!("key{number:05}").into_bytes();
            if round == 2 {
                db.delete(&key, WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
            } else {
                db.put(&key, &value(10_000 + round), WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
            }
        }
        db.flush().unwrap_or_else(|error| panic!("{error}"));
    }
    db.compact_range().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(snapshot.get(b"key00003").unwrap_or_else(|error| panic!("{error}")), Some(value(3)));
    assert_eq!(db.get(b"key00003").unwrap_or_else(|error| panic!("{error}")), None);
    assert_eq!(db.get(b"key00004").unwrap_or_else(|error| panic!("{error}")), Some(value(4)));
    let after: Vec<(Vec<u8>, Vec<u8>)> =
        snapshot.range(b"", None).and_then(Iterator::collect).unwrap_or_else(|error| panic!("{error}"));
    assert!(after == before, "the snapshot changed");
    let now: Vec<(Vec<u8>, Vec<u8>)> = db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(now.len(), 2000 - 667);
    drop(snapshot);
    // Without the snapshot, a full compaction drops the old versions and tombstones.
    db.compact_range().unwrap_or_else(|error| panic!("{error}"));
    let entries: u64 = db.chunks().iter().map(|chunk| chunk.num_entries).sum();
    assert_eq!(entries, 2000 - 667, "old versions or tombstones survived a full compaction");
}

#[test]
fn an_open_iterator_keeps_reading_what_it_started_on() {
    let image = image("iterator");
    let db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("open: {error}"));
    for number in 0..3000u64 {
        db.put(format!("key{number:05}").as_bytes(), &value(number), WriteOptions::default())
            .unwrap_or_else(|error| panic!("{error}"));
    }
    db.compact_range().unwrap_or_else(|error| panic!("{error}"));
    let mut iterator = db.iter().unwrap_or_else(|error| panic!("{error}"));
    let first = iterator.next().transpose().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(first.map(|(key, _)| key), Some(b"key00000".to_vec()));
    // Rewrite everything and compact: the chunks the iterator reads are deleted from the
    // version, but their slots must not be reused while it reads them.
    for round in 1..4u64 {
        for number in 0..3000u64 {
            db.put(format!("key{number:05}").as_bytes(), &value(round * 100_000 + number), WriteOptions::default())
                .unwrap_or_else(|error| panic!("{error}"));
        }
        db.compact_range().unwrap_or_else(|error| panic!("{error}"));
    }
    let rest: Vec<(Vec<u8>, Vec<u8>)> = iterator.collect::<Result<_, _>>().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(rest.len(), 2999);
    for (index, (key, found)) in rest.iter().enumerate() {
        let number = index as u64 + 1;
        assert_eq!(key, format!("key{number:05}").as_bytes());
        assert_eq!(found, &value(number), "the iterator saw a later write or a reused slot");
    }
    let slots_before = db.slots_in_use();
    assert!(slots_before as usize == db.chunks().len(), "slots held by the dropped iterator were not freed");
}

#[test]
fn close_then_reopen_keeps_everything() {
    let image = image("close");
    let db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("open: {error}"));
    for number in 0..5000u64 {
        db.put(format!("key{number:05}").as_bytes(), &value(number), WriteOptions::default())
            .unwrap_or_else(|error| panic!("{error}"));
    }
    db.close().unwrap_or_else(|error| panic!("close: {error}"));
    let db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("reopen: {error}"));
    let all: Vec<(Vec<u8>, Vec<u8>)> = db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(all.len(), 5000);
    assert_eq!(all[4321], (b"key04321".to_vec(), value(4321)));
}

/// A fast stream of puts into small memtables (unjournaled merges): level 0 merges while
/// memtables keep freezing, so the background thread stops merges between outputs to flush
/// them (`Stats::merge_yields`, asserted). Whatever the interleaving, the store holds exactly
/// what was written, before and after a reopen, and once the stream pauses the idle thread
/// merges level 0 below its trigger (which the stream had doubled).
#[test]
fn a_stream_of_writes_flushes_between_merge_outputs_and_keeps_every_key() {
    let image = image("stream");
    let options = || Options { write_buffer_size: 32 << 10, compaction_journal: false, ..options() };
    let db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("open: {error}"));
    let mut model = BTreeMap::new();
    let mut random = common::Random(11);
    // Bounded: the stream ends once the worker has stopped a merge for a flush, or after
    // 400,000 puts.
    for number in 0..400_000u64 {
        let key = format!("s{:06}", random.below(40_000)).into_bytes();
        let value = value(number);
        db.put(&key, &value, WriteOptions::default()).unwrap_or_else(|error| panic!("put: {error}"));
        model.insert(key, value);
        if number % 1000 == 999 && db.stats().merge_yields > 0 && number > 50_000 {
            break;
        }
    }
    assert!(db.stats().merge_yields > 0, "no merge stopped for a flush: {:?}", db.stats());
    common::assert_matches_model(&db, &model, 97, "after the stream");
    // The stream over, the idle worker merges level 0 down to below its trigger.
    let trigger = options().level0_compaction_trigger;
    let settled = (0..200).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(25));
        db.level_chunk_counts().first().is_some_and(|&chunks| chunks < trigger)
    });
    assert!(settled, "level 0 still holds {:?} chunks", db.level_chunk_counts());
    db.close().unwrap_or_else(|error| panic!("close: {error}"));
    let db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("reopen: {error}"));
    common::assert_matches_model(&db, &model, 97, "after a reopen");
}
