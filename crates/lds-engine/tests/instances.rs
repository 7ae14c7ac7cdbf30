//! Guards instances used together (SPEC.md §13): one process opens every instance of a volume
//! at once, and their writers, flushes and compactions run at the same time on one shared
//! online map; no slot is ever taken by two instances (fsck finds no slot referenced twice,
//! nor any other problem), each instance reads back exactly what was written to it, alone or
//! together, and another process cannot open the volume meanwhile.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lds_engine::{Db, Options, WriteOptions};

mod common;

use common::{small_layout, Image};

fn options() -> Options {
    Options { level1_max_bytes: 2 * (64 << 10), level_size_multiplier: 4, ..Options::default() }
}

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn fsck_clean(image: &Image) {
    let volume = lds_volume::Members::open(image.path(), lds_volume::OpenMode::ReadOnly, Duration::ZERO)
        .unwrap_or_else(|error| panic!("{error}"));
    let report =
        lds_check::check(&volume, lds_check::CheckOptions { deep: true, ..Default::default() }, &mut |_, _| {})
            .unwrap_or_else(|error| panic!("{error}"));
    let lines: Vec<String> = report.problems.iter().map(lds_check::Problem::line).collect();
    assert_eq!(report.exit_code(), 0, "{lines:#?}");
}

fn read_alone(image: &Image, instance: u32) -> Model {
    let (db, _) = Db::open_read_only(image.path(), Options { instance, ..options() }, Duration::ZERO)
        .unwrap_or_else(|error| panic!("instance {instance}: {error}"));
    db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("instance {instance}: {error}"))
}

/// Writes `rounds` rounds over 600 keys of instance `instance` (overwrites, so that flushes
/// and compactions free and take slots all along); returns what it wrote last.
fn write_rounds(db: &Db, instance: u32, rounds: u64) -> Model {
    let mut model = Model::new();
    for round in 0..rounds {
        for number in 0..600u64 {
            let key = format!("i{instance}-k{:04}", (number * 7 + round) % 600).into_bytes();
            let value = format!("{round}-{number}-{}", "v".repeat(((number + round) % 120) as usize)).into_bytes();
            let sync = WriteOptions { sync: number == 599 };
            db.put(&key, &value, sync).unwrap_or_else(|error| panic!("instance {instance}: {error}"));
            model.insert(key, value);
        }
        if round % 4 == 3 {
            let key = format!("i{instance}-k{:04}", round % 600).into_bytes();
            db.delete(&key, WriteOptions { sync: false }).unwrap_or_else(|error| panic!("{error}"));
            model.remove(&key);
        }
    }
    model
}

#[test]
fn instances_opened_together_write_at_once_and_never_share_a_slot() {
    let mut request = small_layout(24 << 20, 256 << 10, 64 << 10);
    request.instance_count = Some(3);
    let image = Image::new("instances-together", &request);
    let stores = Db::open_instances(image.path(), options()).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(stores.len(), 3);
    // Another process (here: another open) cannot take the volume while they hold it.
    let refused = Db::open(image.path(), options());
    assert!(refused.is_err(), "a second open got the volume");
    let stores: Vec<Arc<Db>> = stores.into_iter().map(|(db, _)| Arc::new(db)).collect();
    let writers: Vec<_> = stores
        .iter()
        .enumerate()
        .map(|(instance, db)| {
            let db = Arc::clone(db);
            std::thread::spawn(move || {
                let model = write_rounds(&db, instance as u32, 40);
                db.compact_range().unwrap_or_else(|error| panic!("instance {instance}: {error}"));
                model
            })
        })
        .collect();
    let models: Vec<Model> =
        writers.into_iter().map(|writer| writer.join().unwrap_or_else(|_| panic!("a writer panicked"))).collect();
    // Each reads its own writes, while the others are open.
    for (instance, db) in stores.iter().enumerate() {
        let read: Model = db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{error}"));
        assert!(read == models[instance], "instance {instance} reads other data while open together");
        assert!(db.stats().merges + db.stats().trivial_moves > 0, "instance {instance} never compacted");
    }
    // Their chunks never share a slot.
    let mut owners: BTreeMap<u64, usize> = BTreeMap::new();
    for (instance, db) in stores.iter().enumerate() {
        for chunk in db.chunks() {
            for slot in chunk.slots() {
                if let Some(other) = owners.insert(slot, instance) {
                    panic!("slot {slot} is used by instances {other} and {instance}");
                }
            }
        }
    }
    for db in stores {
        let db = Arc::try_unwrap(db).unwrap_or_else(|_| panic!("a store is still shared"));
        db.close().unwrap_or_else(|error| panic!("{error}"));
    }
    fsck_clean(&image);
    // Opened alone afterwards, each instance reads the same.
    for (instance, model) in models.iter().enumerate() {
        assert!(read_alone(&image, instance as u32) == *model, "instance {instance} reads other data alone");
    }
    // Opened together again (recovery of every instance at once), and written again.
    let stores = Db::open_instances(image.path(), options()).unwrap_or_else(|error| panic!("{error}"));
    for (instance, (db, report)) in stores.iter().enumerate() {
        assert!(report.slots_in_use > 0, "instance {instance}: {report:?}");
        let read: Model = db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{error}"));
        assert!(read == models[instance], "instance {instance} reads other data after reopening");
        db.put(b"again", &[instance as u8], WriteOptions { sync: true }).unwrap_or_else(|error| panic!("{error}"));
        db.flush().unwrap_or_else(|error| panic!("{error}"));
    }
    for (db, _) in stores {
        db.close().unwrap_or_else(|error| panic!("{error}"));
    }
    fsck_clean(&image);
}
