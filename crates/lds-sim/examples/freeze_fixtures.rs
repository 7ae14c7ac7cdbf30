//! Writes the frozen fixtures of one released format version: volumes the engine of that
//! version wrote, kept forever so that every later build proves it still reads them (SPEC.md
//! §17). `cargo run -p lds-sim --example freeze_fixtures -- VERSION` writes
//! fixtures/vVERSION/<name>/{image.gz, state.ndjson, description} and refuses to touch a
//! version folder that exists: frozen fixtures are never regenerated.
//!
//! The volumes are the simulator's (512-byte sectors, tiny logs), written through the
//! simulated device by ordinary workloads, so that they hold levels, wrapped logs, trims,
//! odd chunks and batches left to replay. `state.ndjson` is what reads must return.
//!
//! Each version freezes what it introduced: 1.0 and 1.1 one-device volumes (1.1 with the sync
//! watermark), 1.2 volumes of several devices (SPEC.md §4.3), whose other devices are kept
//! beside the first as `device-N.gz` (N their place in the table), 1.3 one-device volumes
//! whose chunks record xxh3-128 digests (SPEC.md §8.3), 1.4 one-device volumes with value
//! chunks (SPEC.md §8.6), written with key-value separation, 1.5 one-device volumes whose
//! level-0 chunks carry key sketches (SPEC.md §8.7), written with deferred level-0 merges
//! (technique `triad-disk`), 1.6 one-device volumes holding log chunks (SPEC.md §8.9), written
//! with technique `triad-log` on the simulator's volume for it (a 12 KiB backup log, 1 KiB
//! write buffers): the four volumes every version has, and three whose log chunks' retained
//! region crosses the backup log's wrap, lies after regions merges released, and spans a
//! reopen.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use lds_engine::{Db, Options};
use lds_format::algorithms::image::ImageBuilder;
use lds_format::geometry::plan_layout;
use lds_format::label::Label;
use lds_sim::sim_device::SimDevice;
use lds_sim::workload::{
    apply_op, formatted_geometry, layout, named, random_wrap, Op, Workload, LOG_TABLES_LEVEL0_TRIGGER,
    LOG_TABLES_WRITE_BUFFER,
};

/// The key/value pairs of each instance.
type States = Vec<Vec<(Vec<u8>, Vec<u8>)>>;

struct Frozen {
    name: &'static str,
    description: &'static str,
    image: Vec<u8>,
    /// The other devices of a volume of several, in table order.
    devices: Vec<Vec<u8>>,
    /// Per instance, the key/value pairs reads return.
    states: States,
}

fn options() -> Options {
    let options =
        Options { background: false, level1_max_bytes: 2 * (64 << 10), level_size_multiplier: 4, ..Options::default() };
    // 1.4 volumes keep values of 24 bytes or more in value chunks (the simulator's values are
    // small), so that every volume holds value chunks, pointers and garbage.
    let separate = lds_sim::workload::techniques().contains("kv-separation");
    let options = Options { value_separation_min: separate.then_some(24), ..options };
    if lds_sim::workload::techniques().contains("triad-disk") {
        options.with_techniques("triad-disk").unwrap_or_else(|error| panic!("{error}"))
    } else if lds_sim::workload::techniques().contains("triad-log") {
        // 1.6: the simulator's write buffer and level-0 trigger for TRIAD-LOG, so that its
        // 12 KiB backup log retains several memtables' log chunks.
        let options = Options {
            write_buffer_size: LOG_TABLES_WRITE_BUFFER,
            level0_compaction_trigger: LOG_TABLES_LEVEL0_TRIGGER,
            ..options
        };
        options.with_techniques("triad-log").unwrap_or_else(|error| panic!("{error}"))
    } else {
        options
    }
}

/// Runs `workloads[i]` on instance i of `image`, then reads every instance back.
fn write(image: Vec<u8>, workloads: &[Workload]) -> (Vec<u8>, States) {
    let device = SimDevice::new(image);
    let mut states = Vec::new();
    for (instance, workload) in workloads.iter().enumerate() {
        let open = || {
            let options = Options { instance: instance as u32, ..options() };
            Db::open_device(Arc::new(device.clone()), Path::new("freeze"), options)
                .map(|(db, _)| db)
                .unwrap_or_else(|error| panic!("{}: open: {error}", workload.name))
        };
        let mut db = open();
        for op in &workload.ops {
            match op {
                Op::Reopen => {
                    db.close().unwrap_or_else(|error| panic!("{}: close: {error}", workload.name));
                    db = open();
                }
                _ => apply_op(&db, op).unwrap_or_else(|error| panic!("{}: {error}", workload.name)),
            }
        }
        db.close().unwrap_or_else(|error| panic!("{}: close: {error}", workload.name));
    }
    for instance in 0..workloads.len() {
        let options = Options { instance: instance as u32, ..options() };
        let (db, _) = Db::open_device_read_only(Arc::new(device.clone()), Path::new("freeze"), options)
            .unwrap_or_else(|error| panic!("read back: {error}"));
        let state: Vec<(Vec<u8>, Vec<u8>)> =
            db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("read back: {error}"));
        states.push(state);
    }
    (device.current(), states)
}

/// The label mkfs of `version` writes: 1.0 no feature; 1.1 (and 1.2, which adds nothing a new
/// volume has) the sync watermark; 1.3 the fast digest too; 1.4 value chunks too; 1.5 key
/// sketches with the 1.3 features (`lds mkfs --chunk-sketches`); 1.6 log tables with the 1.3
/// features (`lds mkfs --log-tables`); 1.7 compact block entries with the 1.3 features (what
/// `lds mkfs` writes by default).
fn label_of(version: &str, geometry: lds_format::geometry::Geometry, name: &str) -> Label {
    match version {
        "1.0" => Label::new(geometry, name),
        "1.1" | "1.2" => Label::new(geometry, name).with_sync_watermark(),
        "1.3" => Label::new(geometry, name).with_sync_watermark().with_fast_digest(),
        "1.4" => Label::new(geometry, name).with_sync_watermark().with_fast_digest().with_value_chunks(),
        "1.5" => Label::new(geometry, name).with_sync_watermark().with_fast_digest().with_chunk_sketches(),
        "1.7" => Label::new(geometry, name).with_sync_watermark().with_fast_digest().with_compact_entries(),
        _ => Label::new(geometry, name).with_sync_watermark().with_fast_digest().with_log_tables(),
    }
}

fn two_instances_image(version: &str) -> Vec<u8> {
    let mut request = layout();
    request.instance_count = Some(2);
    request.volume_len = 4 << 20;
    let geometry = plan_layout(&request, [0x52; 16]).unwrap_or_else(|error| panic!("{error}"));
    ImageBuilder::format(label_of(version, geometry, "frozen-two")).bytes
}

/// Four volumes on one device: levels, wrapped logs, a reopen, two instances.
fn frozen(version: &str) -> Vec<Frozen> {
    let base = || ImageBuilder::format(label_of(version, formatted_geometry(), "crashtest")).bytes;
    let workload = |name: &str| named(name).unwrap_or_else(|| panic!("workload {name}"));
    let mut volumes = Vec::new();
    let (image, states) = write(base(), &[workload("compaction")]);
    volumes.push(Frozen {
        name: "levels",
        description: "the compaction workload: chunks in several levels, compact pointers, trims of the version log",
        image,
        devices: Vec::new(),
        states,
    });
    let (image, states) = write(base(), &[random_wrap(17, 300)]);
    volumes.push(Frozen {
        name: "wrapped",
        description: "a wrap-heavy random workload: both logs wrapped, batches left in the backup log to replay",
        image,
        devices: Vec::new(),
        states,
    });
    let mut reopened = workload("wrap");
    reopened.ops.push(Op::Reopen);
    reopened.ops.extend(workload("basic").ops);
    let (image, states) = write(base(), &[reopened]);
    volumes.push(Frozen {
        name: "reopened",
        description: "the wrap workload, a reopen, then the basic workload, on one instance",
        image,
        devices: Vec::new(),
        states,
    });
    let (image, states) = write(two_instances_image(version), &[workload("compaction"), random_wrap(23, 200)]);
    volumes.push(Frozen {
        name: "two_instances",
        description: "two instances sharing one slot area",
        image,
        devices: Vec::new(),
        states,
    });
    if version == "1.5" {
        // Six flushes of keys no other flush holds: level 0 waits (no overlap), six chunks
        // with their sketches; then a reopen and a seventh, which merges them.
        let mut ops = Vec::new();
        for round in 0..7u32 {
            if round == 6 {
                ops.push(Op::Reopen);
            }
            for number in 0..12u32 {
                let key = format!("key-{:03}-{round}", number * 7 % 97).into_bytes();
                ops.push(Op::Put { key, value: format!("value-{round}-{number}").into_bytes(), sync: false });
            }
            ops.push(Op::Flush);
        }
        for round in 7..13u32 {
            for number in 0..12u32 {
                let key = format!("key-{:03}-{round}", number * 11 % 97).into_bytes();
                ops.push(Op::Put { key, value: format!("value-{round}-{number}").into_bytes(), sync: false });
            }
            ops.push(Op::Flush);
        }
        let (image, states) = write(base(), &[Workload { name: "deferred".into(), ops }]);
        volumes.push(Frozen {
            name: "deferred_level0",
            description: "level-0 merges deferred (technique triad-disk): thirteen flushes of keys no other flush holds, one merge of seven level-0 chunks across a reopen, six level-0 chunks with key sketches left",
            image,
            devices: Vec::new(),
            states,
        });
    }
    if version == "1.6" {
        volumes.extend(frozen_log_chunks(base));
    }
    if version == "1.4" {
        let (image, states) = write(base(), &[lds_sim::workload::random_values(31, 300)]);
        volumes.push(Frozen {
            name: "values",
            description: "random values of 1 byte to 80 KiB with overwrites: value chunks written at flush and before their batch, relocated and collected",
            image,
            devices: Vec::new(),
            states,
        });
    }
    volumes
}

/// What a store's log chunks hold of the backup log (SPEC.md §8.9).
struct Retained {
    /// Live log chunks.
    log_chunks: usize,
    /// The oldest log start's offset in the backup log area.
    start: u64,
    /// Bytes from there to the backup start.
    bytes: u64,
}

fn retained(db: &Db) -> Retained {
    let chunks = db.chunks();
    let starts: Vec<_> = chunks.iter().filter_map(|chunk| chunk.log_start).collect();
    let start = starts.iter().min().map_or(0, |start| start.offset);
    Retained { log_chunks: starts.len(), start, bytes: db.stats().log_retained_bytes }
}

/// Puts fresh keys (`NAME-00001` on, values of 40 to 200 bytes, one put in sixteen synced, a
/// flush every `flush_every` puts when not 0) on `db` until `done` holds after one (at most
/// 5,000); `number` counts the keys written so far.
fn put_until(db: &Db, name: &str, number: &mut u32, flush_every: u32, done: &mut dyn FnMut(&Db) -> bool) {
    for _ in 0..5_000 {
        *number += 1;
        let key = format!("{name}-{number:05}").into_bytes();
        let value = format!("{number}-{}", "l".repeat(40 + (*number as usize * 37) % 160)).into_bytes();
        apply_op(db, &Op::Put { key, value, sync: *number % 16 == 0 })
            .unwrap_or_else(|error| panic!("{name}: {error}"));
        if flush_every > 0 && *number % flush_every == 0 {
            db.flush().unwrap_or_else(|error| panic!("{name}: flush: {error}"));
        }
        if done(db) {
            return;
        }
    }
    panic!("{name}: 5,000 puts did not reach the state the fixture wants");
}

/// Runs `build` on a store opened on a fresh 1.6 volume of `base` (it may close and reopen
/// it), then reads the volume back; returns the image and its state, after checking that the
/// volume still holds log chunks whose region `check` accepts.
fn write_log_volume(
    base: &dyn Fn() -> Vec<u8>,
    name: &str,
    build: impl FnOnce(&dyn Fn() -> Db) -> Db,
    check: impl FnOnce(&Retained),
) -> (Vec<u8>, States) {
    let device = SimDevice::new(base());
    let open = || {
        Db::open_device(Arc::new(device.clone()), Path::new("freeze"), options())
            .map(|(db, _)| db)
            .unwrap_or_else(|error| panic!("{name}: open: {error}"))
    };
    let db = build(&open);
    db.close().unwrap_or_else(|error| panic!("{name}: close: {error}"));
    let (db, _) = Db::open_device_read_only(Arc::new(device.clone()), Path::new("freeze"), options())
        .unwrap_or_else(|error| panic!("{name}: read back: {error}"));
    let found = retained(&db);
    assert!(found.log_chunks > 0, "{name}: no log chunk left");
    check(&found);
    let state: Vec<(Vec<u8>, Vec<u8>)> =
        db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{name}: read back: {error}"));
    (device.current(), vec![state])
}

/// The 1.6 volumes whose log chunks are the point (SPEC.md §8.9): a retained region across
/// the backup log's wrap, one left after early merges released earlier regions, and one whose
/// log chunks span reopens.
fn frozen_log_chunks(base: impl Fn() -> Vec<u8>) -> Vec<Frozen> {
    let len_ring = formatted_geometry().len_backup_log;
    let mut volumes = Vec::new();
    let across = |found: &Retained| found.log_chunks >= 2 && found.start + found.bytes > len_ring;
    let (image, states) = write_log_volume(
        &base,
        "log_across_wrap",
        |open| {
            let db = open();
            let mut number = 0;
            // Past the first lap of the ring, then until live log chunks retain a region that
            // runs across its end.
            put_until(&db, "wrap", &mut number, 0, &mut |db| db.stats().log_chunk_flushes >= 6);
            put_until(&db, "wrap", &mut number, 0, &mut |db| across(&retained(db)));
            db
        },
        |found| assert!(across(found), "log_across_wrap: the retained region does not cross the wrap"),
    );
    volumes.push(Frozen {
        name: "log_across_wrap",
        description: "log chunks (technique triad-log) whose retained region of the backup log runs across its wrap, batches after them left to replay",
        image,
        devices: Vec::new(),
        states,
    });
    let (image, states) = write_log_volume(
        &base,
        "log_released",
        |open| {
            let db = open();
            let mut number = 0;
            // Early level-0 merges (the retained region left too little room) released
            // earlier regions twice; then log chunks again, after the released regions.
            put_until(&db, "released", &mut number, 0, &mut |db| db.stats().log_pressure_merges >= 2);
            put_until(&db, "released", &mut number, 0, &mut |db| retained(db).log_chunks >= 3);
            db
        },
        |found| assert!(found.log_chunks >= 3, "log_released: {} log chunks", found.log_chunks),
    );
    volumes.push(Frozen {
        name: "log_released",
        description: "log chunks (technique triad-log) written after early level-0 merges released the regions earlier ones retained; merged chunks in level 1 and below",
        image,
        devices: Vec::new(),
        states,
    });
    let (image, states) = write_log_volume(
        &base,
        "log_reopened",
        |open| {
            let mut db = open();
            let mut number = 0;
            let log_chunk_ids =
                |db: &Db| -> Vec<u64> { db.chunks().iter().filter(|c| c.is_log_chunk()).map(|c| c.chunk_id).collect() };
            // Three log chunks (a flush every seven puts), then three puts left to replay, a
            // reopen (the next flush names the replayed batches where recovery found them);
            // twice.
            let mut before = Vec::new();
            for _ in 0..2 {
                put_until(&db, "reopened", &mut number, 7, &mut |db| db.stats().log_chunk_flushes >= 3);
                let mut left = 3;
                put_until(&db, "reopened", &mut number, 0, &mut |_| {
                    left -= 1;
                    left == 0
                });
                before = log_chunk_ids(&db);
                db.close().unwrap_or_else(|error| panic!("log_reopened: close: {error}"));
                db = open();
            }
            put_until(&db, "reopened", &mut number, 0, &mut |db| db.stats().log_chunk_flushes >= 1);
            let after = log_chunk_ids(&db);
            assert!(
                after.iter().any(|id| before.contains(id)) && after.iter().any(|id| !before.contains(id)),
                "log_reopened: no log chunk from before the last reopen beside one from after it ({before:?}, {after:?})"
            );
            db
        },
        |found| assert!(found.log_chunks >= 2, "log_reopened: {} log chunks", found.log_chunks),
    );
    volumes.push(Frozen {
        name: "log_reopened",
        description: "log chunks (technique triad-log) written before and after two reopens, the first flush after each naming batches recovery replayed",
        image,
        devices: Vec::new(),
        states,
    });
    volumes
}

/// A volume of several devices (format 1.2): a first device of `volume_len` bytes, one more
/// device of `slots` slots for each of `members`, joined in order; the workload runs on it,
/// then the device `remove` (a place in the table), if any, leaves. Every device but a removed
/// one is returned, the first first.
fn multi_device(
    volume_len: u64,
    members: &[u64],
    remove: Option<usize>,
    workload: &Workload,
) -> (Vec<Vec<u8>>, States) {
    use lds_sim::device_changes::{apply, member_len, volume_of, Change};
    let mut request = layout();
    request.volume_len = volume_len;
    let geometry = plan_layout(&request, [0x53; 16]).unwrap_or_else(|error| panic!("{error}"));
    let label = Label::new(geometry, "frozen-devices").with_sync_watermark();
    let mut image = ImageBuilder::format(label.clone()).bytes;
    let mut sizes = vec![image.len() as u64];
    for &slots in members {
        let len = member_len(&label, slots);
        sizes.push(len);
        image.resize(image.len() + len as usize, 0);
    }
    let device = SimDevice::new(image);
    for index in 1..sizes.len() {
        apply(&device, &sizes, Change::Add(index)).unwrap_or_else(|error| panic!("join device {index}: {error}"));
    }
    let volume = volume_of(&device, &sizes).unwrap_or_else(|error| panic!("{error}"));
    let (db, _) = Db::open_device(Arc::new(volume), Path::new("freeze"), options())
        .unwrap_or_else(|error| panic!("{}: open: {error}", workload.name));
    for op in &workload.ops {
        if *op != Op::Reopen {
            apply_op(&db, op).unwrap_or_else(|error| panic!("{}: {error}", workload.name));
        }
    }
    let on_members = db.chunks().iter().filter(|chunk| chunk.chunk_id >= geometry.num_slots).count();
    assert!(on_members > 0, "{}: no chunk on the other devices", workload.name);
    db.close().unwrap_or_else(|error| panic!("{}: close: {error}", workload.name));
    if let Some(index) = remove {
        apply(&device, &sizes, Change::Remove(index)).unwrap_or_else(|error| panic!("remove device {index}: {error}"));
    }
    let volume = volume_of(&device, &sizes).unwrap_or_else(|error| panic!("{error}"));
    let (db, _) = Db::open_device_read_only(Arc::new(volume), Path::new("freeze"), options())
        .unwrap_or_else(|error| panic!("read back: {error}"));
    let state: Vec<(Vec<u8>, Vec<u8>)> =
        db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("read back: {error}"));
    let image = device.current();
    let mut devices = Vec::new();
    let mut base = 0usize;
    for (index, &len) in sizes.iter().enumerate() {
        if remove != Some(index) {
            devices.push(image[base..base + len as usize].to_vec());
        }
        base += len as usize;
    }
    (devices, vec![state])
}

/// What version 1.2 introduced: volumes of several devices.
fn frozen_1_2() -> Vec<Frozen> {
    let mut volumes = Vec::new();
    let (mut devices, states) = multi_device(1 << 20, &[6], None, &random_wrap(31, 400));
    let image = devices.remove(0);
    volumes.push(Frozen {
        name: "two_devices",
        description: "a volume of two devices, chunks on both, both logs wrapped",
        image,
        devices,
        states,
    });
    let (mut devices, states) = multi_device(1 << 20, &[4, 6], Some(1), &random_wrap(37, 500));
    let image = devices.remove(0);
    volumes.push(Frozen {
        name: "device_gap",
        description: "three devices joined, the middle one removed with its chunks: a gap of slots no device holds",
        image,
        devices,
        states,
    });
    volumes
}

fn ndjson(states: &[Vec<(Vec<u8>, Vec<u8>)>]) -> String {
    let mut text = String::new();
    for (instance, state) in states.iter().enumerate() {
        for (key, value) in state {
            let hex = |bytes: &[u8]| bytes.iter().map(|byte| format!("{byte:02x}")).collect::<String>();
            text.push_str(&format!(
                "{{\"instance\":{instance},\"key_hex\":\"{}\",\"value_hex\":\"{}\"}}\n",
                hex(key),
                hex(value)
            ));
        }
    }
    text
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes).unwrap_or_else(|error| panic!("{error}"));
    encoder.finish().unwrap_or_else(|error| panic!("{error}"))
}

fn main() {
    let version = std::env::args().nth(1).unwrap_or_else(|| panic!("usage: freeze_fixtures VERSION (e.g. 1.0)"));
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(format!("v{version}"));
    if root.exists() {
        eprintln!("{} exists: frozen fixtures are never regenerated", root.display());
        std::process::exit(1);
    }
    match version.as_str() {
        "1.4" => lds_sim::workload::set_techniques("kv-separation"),
        "1.5" => lds_sim::workload::set_techniques("triad-disk"),
        "1.6" => lds_sim::workload::set_techniques("triad-log"),
        _ => Ok(()),
    }
    .unwrap_or_else(|error| panic!("{error}"));
    let volumes = if version == "1.2" { frozen_1_2() } else { frozen(&version) };
    for volume in volumes {
        let folder = root.join(volume.name);
        std::fs::create_dir_all(&folder).unwrap_or_else(|error| panic!("{error}"));
        let compressed = gzip(&volume.image);
        std::fs::write(folder.join("image.gz"), &compressed).unwrap_or_else(|error| panic!("{error}"));
        for (index, device) in volume.devices.iter().enumerate() {
            std::fs::write(folder.join(format!("device-{}.gz", index + 1)), gzip(device))
                .unwrap_or_else(|error| panic!("{error}"));
        }
        std::fs::write(folder.join("state.ndjson"), ndjson(&volume.states)).unwrap_or_else(|error| panic!("{error}"));
        std::fs::write(folder.join("description"), format!("{}\n", volume.description))
            .unwrap_or_else(|error| panic!("{error}"));
        let keys: usize = volume.states.iter().map(Vec::len).sum();
        println!("{}: {} bytes ({} gzipped), {keys} keys", folder.display(), volume.image.len(), compressed.len());
    }
}
