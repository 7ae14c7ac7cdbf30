//! Iterators over the memtable: a seek reads from its start key in batches, sees exactly the
//! model, and never sees writes made after it began.

mod common;

use lds_engine::{Db, Options, WriteOptions};

fn key(index: u32) -> Vec<u8> {
    format!("key{index:06}").into_bytes()
}

#[test]
fn memtable_iteration_spans_batches_and_holds_its_snapshot() {
    let image = common::Image::new("iterator", &common::small_layout(8 << 20, 256 << 10, 1 << 20));
    let db = Db::open(image.path(), Options { background: false, ..Options::default() }).expect("open");
    // Every other key, newest value last, all in the memtable.
    for round in 0..3u32 {
        for index in (0..3000).step_by(2) {
            db.put(&key(index), format!("v{round}-{index}").as_bytes(), WriteOptions::default()).expect("put");
        }
    }
    db.delete(&key(10), WriteOptions::default()).expect("delete");

    let mut iterator = db.range(&key(7), Some(&key(2001))).expect("range");
    // Writes after the iterator began, inside its range, must stay invisible to it.
    db.put(&key(9), b"late", WriteOptions::default()).expect("put");
    db.put(&key(1000), b"late", WriteOptions::default()).expect("put");
    let expected: Vec<(Vec<u8>, Vec<u8>)> = (8..2001)
        .step_by(2)
        .filter(|&index| index != 10)
        .map(|index| (key(index), format!("v2-{index}").into_bytes()))
        .collect();
    let seen: Vec<(Vec<u8>, Vec<u8>)> = iterator.by_ref().map(|entry| entry.expect("entry")).collect();
    assert_eq!(seen.len(), expected.len());
    assert_eq!(seen, expected);

    // A new iterator sees the late writes.
    let fresh: Vec<Vec<u8>> = db.range(&key(7), Some(&key(12))).expect("range").map(|e| e.expect("entry").0).collect();
    assert_eq!(fresh, vec![key(8), key(9)]);
}

/// `next_ref` (entries borrowed until the next call) gives what `next` gives, across
/// memtables, level-0 chunks and deeper levels, older versions and tombstones.
#[test]
fn borrowed_entries_are_the_owned_ones() {
    let image = common::Image::new("iterator-ref", &common::small_layout(32 << 20, 256 << 10, 1 << 20));
    let options = Options { background: false, write_buffer_size: 64 << 10, ..Options::default() };
    let db = Db::open(image.path(), options).expect("open");
    for round in 0..4u32 {
        for index in (round..6000).step_by(3) {
            db.put(&key(index), format!("v{round}-{index}").as_bytes(), WriteOptions::default()).expect("put");
        }
        for index in (0..6000).step_by(17) {
            db.delete(&key(index + round), WriteOptions::default()).expect("delete");
        }
        if round == 1 {
            db.compact_range().expect("compact");
        }
    }
    let owned: Vec<(Vec<u8>, Vec<u8>)> = db.iter().expect("iter").map(|entry| entry.expect("entry")).collect();
    assert!(owned.len() > 3_000, "{}", owned.len());
    let mut borrowed = Vec::new();
    let mut iterator = db.range(b"", None).expect("range");
    while let Some(entry) = iterator.next_ref() {
        let (key, value) = entry.expect("entry");
        borrowed.push((key.to_vec(), value.to_vec()));
    }
    assert_eq!(borrowed, owned);
    // A range and a partial read, then the owned iterator takes over where it stopped.
    let mut iterator = db.range(&key(100), Some(&key(200))).expect("range");
    let first = iterator.next_ref().expect("an entry").expect("entry").0.to_vec();
    let rest: Vec<Vec<u8>> = iterator.map(|entry| entry.expect("entry").0).collect();
    let expected: Vec<Vec<u8>> =
        owned.iter().map(|(key, _)| key.clone()).filter(|found| *found >= key(100) && *found < key(200)).collect();
    assert_eq!([vec![first], rest].concat(), expected);
}

/// LevelDB's seek compaction, for level 0: seeks walk every level-0 chunk, and once they
/// walked them more often than a merge would cost, level 0 merges below its trigger of four
/// chunks. Without the seeks, the same writes leave the chunks in level 0.
#[test]
fn seeks_walking_level0_merge_it_early() {
    let level0_after = |seeks: u32| {
        let image =
            common::Image::new(&format!("iterator-seeks-{seeks}"), &common::small_layout(32 << 20, 256 << 10, 1 << 20));
        let db = Db::open(image.path(), Options { background: false, ..Options::default() }).expect("open");
        for round in 0..2u32 {
            for index in (round..4000).step_by(2) {
                db.put(&key(index), format!("v{round}-{index}").as_bytes(), WriteOptions::default()).expect("put");
            }
            db.flush().expect("flush");
        }
        for seek in 0..seeks {
            let mut iterator = db.range(&key(seek * 7 % 4000), None).expect("range");
            assert!(iterator.next().is_some_and(|entry| entry.is_ok()));
        }
        // The next write runs the compaction due (inline: background off).
        db.put(&key(1), b"last", WriteOptions::default()).expect("put");
        db.flush().expect("flush");
        let level0 = db.chunks().iter().filter(|chunk| chunk.level == 0).count();
        let expected: Vec<Vec<u8>> = (0..4000).map(key).collect();
        let keys: Vec<Vec<u8>> = db.iter().expect("iter").map(|entry| entry.expect("entry").0).collect();
        assert_eq!(keys, expected, "seeks {seeks}");
        assert_eq!(db.get(&key(1)).expect("get"), Some(b"last".to_vec()));
        (level0, db.stats().read_triggered_merges)
    };
    let (quiet, quiet_merges) = level0_after(0);
    assert_eq!((quiet, quiet_merges), (3, 0), "no seeks: level 0 stays below its trigger");
    let (sought, merges) = level0_after(300);
    assert_eq!(merges, 1, "300 seeks over two level-0 chunks merge them");
    assert!(sought < quiet, "{sought} level-0 chunks after the seeks");
}

/// A seek to a key that exists reads only the sources whose filters may hold it and starts
/// the others once it moves past the key: seeks to present, absent, overwritten and deleted
/// keys, from the store and from a snapshot, across the memtable, level 0 and a deeper level,
/// see exactly the model.
#[test]
fn seeks_see_the_model_whichever_sources_hold_the_key() {
    use std::collections::BTreeMap;
    let image = common::Image::new("iterator-lazy-seeks", &common::small_layout(32 << 20, 256 << 10, 1 << 20));
    let db = Db::open(image.path(), Options { background: false, ..Options::default() }).expect("open");
    let mut model = BTreeMap::new();
    for index in 0..3000 {
        db.put(&key(index), format!("a{index}").as_bytes(), WriteOptions::default()).expect("put");
        model.insert(key(index), format!("a{index}").into_bytes());
    }
    db.flush().expect("flush");
    db.compact_range().expect("compact");
    for index in (0..3000).step_by(3) {
        db.put(&key(index), format!("b{index}").as_bytes(), WriteOptions::default()).expect("put");
        model.insert(key(index), format!("b{index}").into_bytes());
    }
    db.flush().expect("flush");
    let before = model.clone();
    let snapshot = db.snapshot();
    for index in (0..3000).step_by(5) {
        db.delete(&key(index), WriteOptions::default()).expect("delete");
        model.remove(&key(index));
    }
    for index in (3000..3100).step_by(2) {
        db.put(&key(index), format!("c{index}").as_bytes(), WriteOptions::default()).expect("put");
        model.insert(key(index), format!("c{index}").into_bytes());
    }
    let levels: std::collections::BTreeSet<u8> = db.chunks().iter().map(|chunk| chunk.level).collect();
    assert!(levels.len() >= 2, "level 0 and a deeper level: {levels:?}");
    let expect = |model: &BTreeMap<Vec<u8>, Vec<u8>>, from: &[u8], end: Option<&[u8]>| -> Vec<(Vec<u8>, Vec<u8>)> {
        model
            .range(from.to_vec()..)
            .take_while(|(key, _)| end.is_none_or(|end| key.as_slice() < end))
            .take(4)
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect()
    };
    let mut probes: Vec<Vec<u8>> = (0..3110).step_by(7).map(key).collect();
    probes.extend((0..3110).step_by(11).map(|index| [key(index), b"x".to_vec()].concat()));
    probes.push(b"zzz".to_vec());
    for probe in &probes {
        for end in [None, Some([probe.as_slice(), b"~"].concat())] {
            let end = end.as_deref();
            let seen: Vec<(Vec<u8>, Vec<u8>)> =
                db.range(probe, end).expect("range").take(4).map(|entry| entry.expect("entry")).collect();
            assert_eq!(seen, expect(&model, probe, end), "seek to {}", String::from_utf8_lossy(probe));
            let seen: Vec<(Vec<u8>, Vec<u8>)> =
                snapshot.range(probe, end).expect("range").take(4).map(|entry| entry.expect("entry")).collect();
            assert_eq!(seen, expect(&before, probe, end), "snapshot seek to {}", String::from_utf8_lossy(probe));
        }
    }
}

/// With a block cache of a few blocks, nearly every lookup and seek evicts a block whose
/// buffers the next miss reuses (blocks of different lengths and entry counts): every value
/// read is still the one written, whether it came from a fresh or a recycled buffer.
#[test]
fn reads_through_a_cache_that_evicts_at_every_miss_see_every_value() {
    let image = common::Image::new("iterator-evict", &common::small_layout(32 << 20, 256 << 10, 1 << 20));
    let options =
        Options { background: false, write_buffer_size: 64 << 10, block_cache_bytes: 12 << 10, ..Options::default() };
    let db = Db::open(image.path(), options).expect("open");
    // Values of 0 to 300 bytes: blocks hold different numbers of entries.
    let value = |index: u32| format!("{index}-").repeat((index % 60) as usize).into_bytes();
    for index in 0..4000u32 {
        db.put(&key(index), &value(index), WriteOptions::default()).expect("put");
    }
    db.flush().expect("flush");
    let mut random = common::Random(7);
    for _ in 0..6000 {
        let index = random.below(4000) as u32;
        assert_eq!(db.get(&key(index)).expect("get"), Some(value(index)), "get {index}");
        let mut seek = db.range(&key(index), None).expect("range");
        let (found, read) = seek.next().expect("an entry").expect("entry");
        assert_eq!((found, read), (key(index), value(index)), "seek {index}");
    }
}
