//! TRIAD-DISK (technique `triad-disk`, SPEC.md §8.7): level 0 waits while its chunks share few
//! keys, merges at the usual count when they share many, never waits past six chunks, and
//! knows the sketches again after a reopen.

use lds_engine::{Db, Options, WriteOptions};

mod common;

use common::{small_layout, Image, Random};

fn options(technique: bool) -> Options {
    let options = Options { background: false, level1_max_bytes: 64 << 20, ..Options::default() };
    if technique {
        options.with_techniques("triad-disk").unwrap_or_else(|error| panic!("{error}"))
    } else {
        options
    }
}

fn sketched(name: &str) -> Image {
    Image::with_features(name, &small_layout(64 << 20, 512 << 10, 256 << 10), |label| {
        label.with_sync_watermark().with_fast_digest().with_chunk_sketches()
    })
}

/// Writes 600 keys and flushes them into one level-0 chunk: fresh random keys (`hot` false),
/// or the same 600 keys every time.
fn flush_once(db: &Db, random: &mut Random, hot: bool, round: u64) {
    for number in 0..600u64 {
        let key =
            if hot { format!("hot-{number:05}") } else { format!("key-{:012}", random.next() % 1_000_000_000_000) };
        db.put(key.as_bytes(), format!("value-{round}-{number}").as_bytes(), WriteOptions::default())
            .unwrap_or_else(|error| panic!("put: {error}"));
    }
    db.flush().unwrap_or_else(|error| panic!("flush: {error}"));
}

fn level0(db: &Db) -> usize {
    db.level_chunk_counts().first().copied().unwrap_or(0)
}

/// Level-0 chunk counts after each of `rounds` flushes.
fn counts(db: &Db, random: &mut Random, hot: bool, rounds: u64) -> Vec<usize> {
    (0..rounds)
        .map(|round| {
            flush_once(db, random, hot, round);
            level0(db)
        })
        .collect()
}

#[test]
fn level0_waits_for_overlap_and_not_past_six_chunks() {
    let image = sketched("triad-disk-uniform");
    let mut random = Random(11);
    let db = Db::open(image.path(), options(true)).unwrap_or_else(|error| panic!("open: {error}"));
    // Disjoint keys: no overlap, so level 0 waits until it would pass six chunks.
    assert_eq!(counts(&db, &mut random, false, 7), vec![1, 2, 3, 4, 5, 6, 0]);
    db.close().unwrap_or_else(|error| panic!("close: {error}"));

    // The default engine merges at four chunks.
    let image = sketched("triad-disk-default");
    let db = Db::open(image.path(), options(false)).unwrap_or_else(|error| panic!("open: {error}"));
    assert_eq!(counts(&db, &mut random, false, 5), vec![1, 2, 3, 0, 1]);
}

#[test]
fn level0_merges_at_the_usual_count_when_its_chunks_share_keys() {
    let image = sketched("triad-disk-hot");
    let mut random = Random(12);
    let db = Db::open(image.path(), options(true)).unwrap_or_else(|error| panic!("open: {error}"));
    // The same keys in every chunk: an overlap of 3/4 at four chunks.
    assert_eq!(counts(&db, &mut random, true, 5), vec![1, 2, 3, 0, 1]);
}

#[test]
fn the_sketches_are_read_again_at_open() {
    let image = sketched("triad-disk-reopen");
    let mut random = Random(13);
    let db = Db::open(image.path(), options(true)).unwrap_or_else(|error| panic!("open: {error}"));
    assert_eq!(counts(&db, &mut random, false, 5), vec![1, 2, 3, 4, 5]);
    db.close().unwrap_or_else(|error| panic!("close: {error}"));
    let db = Db::open(image.path(), options(true)).unwrap_or_else(|error| panic!("reopen: {error}"));
    assert_eq!(level0(&db), 5);
    // Still no overlap: the sixth chunk waits too, the seventh merges.
    assert_eq!(counts(&db, &mut random, false, 2), vec![6, 0]);
    db.close().unwrap_or_else(|error| panic!("close: {error}"));
    // Every key is still there after the merge.
    let db = Db::open(image.path(), options(true)).unwrap_or_else(|error| panic!("reopen: {error}"));
    let all: Vec<(Vec<u8>, Vec<u8>)> = db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(all.len(), 7 * 600);
}

#[test]
fn a_volume_without_key_sketches_is_refused_with_the_mkfs_flag_to_use() {
    let image = Image::new("triad-disk-no-feature", &small_layout(16 << 20, 128 << 10, 64 << 10));
    let error = Db::open(image.path(), options(true)).err().expect("refused");
    let message = error.to_string();
    assert!(message.contains("chunk_sketches") && message.contains("--chunk-sketches"), "{message}");
}
