//! Batches gathered into one backup log object (SPEC.md §7): unsynced write batches join the
//! object still waiting in the writer's buffer, so that small puts do not each pay a header;
//! recovery replays every entry of such an object in order, a synced write closes it, and a
//! freeze starts the next batch in an object of its own (after the backup start it records).

use std::collections::BTreeMap;

use lds_engine::{Db, Options, WriteBatch, WriteOptions};

mod common;

use common::{assert_matches_model, small_layout, Image};

fn layout() -> lds_format::geometry::LayoutRequest {
    small_layout(32 << 20, 256 << 10, 1 << 20)
}

fn options() -> Options {
    Options { background: false, write_buffer_size: 256 << 10, ..Options::default() }
}

#[test]
fn small_batches_share_objects_and_replay_whole() {
    let image = Image::new("log-batches", &layout());
    let db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("{error}"));
    let mut model = BTreeMap::new();
    for number in 0..1_000u32 {
        let key = format!("key-{number:05}").into_bytes();
        let value = format!("value {number}").into_bytes();
        if number % 10 == 0 {
            let mut batch = WriteBatch::new();
            batch.put(&key, &value);
            batch.delete(format!("key-{:05}", number + 1).as_bytes());
            db.write(&batch, WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
        } else {
            db.put(&key, &value, WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
        }
        model.insert(key, value);
    }
    // A synced write closes the object it joins: the next ones start another.
    db.put(b"synced", b"durable", WriteOptions { sync: true }).unwrap_or_else(|error| panic!("{error}"));
    model.insert(b"synced".to_vec(), b"durable".to_vec());
    for number in 0..10u32 {
        let key = format!("late-{number}").into_bytes();
        db.put(&key, b"after the sync", WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
        model.insert(key, b"after the sync".to_vec());
    }
    drop(db);
    let (db, report) = Db::open_with_report(image.path(), options()).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(report.entries_replayed, 1_000 + 100 + 1 + 10, "{report:?}");
    // A few objects of up to 64 KiB, not one per batch (1,011 of them).
    assert!(report.batches_replayed >= 2 && report.batches_replayed <= 10, "{report:?}");
    assert_matches_model(&db, &model, 1, "replayed");
}

#[test]
fn a_freeze_starts_the_next_batch_in_an_object_of_its_own() {
    let image = Image::new("log-batches-freeze", &layout());
    let db = Db::open(image.path(), options()).unwrap_or_else(|error| panic!("{error}"));
    let mut model = BTreeMap::new();
    for number in 0..200u32 {
        let key = format!("key-{number:05}").into_bytes();
        db.put(&key, b"before the flush", WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
        model.insert(key, b"before the flush".to_vec());
    }
    db.flush().unwrap_or_else(|error| panic!("{error}"));
    for number in 0..50u32 {
        let key = format!("key-{number:05}").into_bytes();
        db.put(&key, b"after the flush", WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
        model.insert(key, b"after the flush".to_vec());
    }
    drop(db);
    // Had the batches after the flush joined the object before it, they would lie before the
    // backup start the flush recorded, and not be replayed.
    let (db, report) = Db::open_with_report(image.path(), options()).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(report.entries_replayed, 50, "{report:?}");
    assert_matches_model(&db, &model, 1, "after the flush");
}
