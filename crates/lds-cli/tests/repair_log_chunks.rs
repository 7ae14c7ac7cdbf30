//! Guards the offline tools on volumes with log chunks (format 1.6, TRIAD-LOG, SPEC.md §8.9),
//! written by the engine with technique `triad-log`: with a referenced batch of the backup
//! log damaged, `lds repair -y` rewrites that log chunk (its references that resolve into
//! puts, the others dropped and named), keeps the other log chunks and their log starts,
//! writes nothing into the backup log area, leaves fsck clean and the engine reading and
//! writing, and its undo file restores the damaged bytes; after a repair of other damage the
//! engine goes three times around the ring without overwriting what the kept log chunks name;
//! a repair from a lost version (the backup log's head lost) reads every log chunk into
//! ordinary chunks without loss; `lds salvage` of the damaged volume, with or without its
//! labels, keeps every key whose value it can read and names the others; a metadump image
//! keeps the references resolving and passes fsck; a shrink (`lds resize`) and `lds device
//! remove` move log chunks with their references, log starts and retention start unchanged.
//! Every reference is also resolved directly here (lds_format::logref), whatever fsck checks.

mod volumes;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use lds_engine::{Db, Options, WriteBatch, WriteOptions};
use lds_format::chunk::view::SubChunkView;
use lds_format::entry::EntryKind;
use lds_format::geometry::LogKind;
use lds_format::label::Label;
use lds_format::log::{area_context, LogPosition};
use lds_format::logref::LogRef;
use lds_format::version::meta::ChunkMeta;
use lds_format::version::Version;

use volumes::{fsck_codes, scratch, Files};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const SLOT: u64 = 256 << 10;

fn mkfs(path: &Path, size: u64, backup_log: u64) {
    let options = lds_cli::mkfs::MkfsOptions {
        path: path.to_path_buf(),
        size: Some(size),
        slot_size: Some(SLOT),
        backup_log_size: Some(backup_log),
        log_tables: true,
        ..Default::default()
    };
    let mut err = Vec::new();
    assert_eq!(lds_cli::mkfs::run(&options, &mut Vec::new(), &mut err), 0, "{}", String::from_utf8_lossy(&err));
}

/// The engine with TRIAD-LOG, merging level 0 when it holds `trigger` chunks.
fn open(path: &Path, trigger: usize) -> Db {
    let options = Options {
        background: false,
        write_buffer_size: 256 << 10,
        level0_compaction_trigger: trigger,
        level0_stop_writes_trigger: trigger * 2,
        ..Options::default()
    }
    .with_techniques("triad-log")
    .unwrap_or_else(|error| panic!("{error}"));
    Db::open(path, options).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// A value of 15 to 104 bytes (a log reference where it is 24 bytes or more), every eighth
/// one of 10 bytes (a put in the chunk as itself).
fn value(number: u32, round: u32) -> Vec<u8> {
    if number % 8 == 7 {
        return format!("short{number:05}").into_bytes();
    }
    format!("value-{round}-{number:06}-{}", "x".repeat((number % 90) as usize)).into_bytes()
}

/// Writes keys `keys` in synced batches of 50 and flushes them: one log chunk. The first batch also
/// writes two keys bounding every key of the tests, so that the memtable overlaps what the
/// tree holds: the engine writes a log chunk only then (an ordinary chunk of keys past
/// everything, as sequential writes make, moves down unrewritten).
fn log_round(db: &Db, model: &mut Model, keys: std::ops::Range<u32>, round: u32) {
    let numbers: Vec<u32> = keys.collect();
    for (index, group) in numbers.chunks(50).enumerate() {
        let mut batch = WriteBatch::new();
        if index == 0 {
            for bound in [b"a-lower-bound".to_vec(), b"z-upper-bound".to_vec()] {
                let value = format!("a bound, written in round {round} of the log chunks").into_bytes();
                batch.put(&bound, &value);
                model.insert(bound, value);
            }
        }
        for &number in group {
            let (key, value) = (format!("key-{number:06}").into_bytes(), value(number, round));
            batch.put(&key, &value);
            model.insert(key, value);
        }
        // Synced: each batch an object of its own (unsynced ones gather into one, SPEC.md §7),
        // so that damage to one loses one batch.
        db.write(&batch, WriteOptions { sync: true }).unwrap_or_else(|error| panic!("{error}"));
    }
    db.flush().unwrap_or_else(|error| panic!("{error}"));
}

/// Small flushes of short values (ordinary chunks, merged at the trigger) until a chunk
/// stands at slot `slot` or past it: the allocation cursor is there (SPEC.md §10.4).
fn fill_past(db: &Db, model: &mut Model, slot: u64) {
    for round in 0..400u32 {
        if db.chunks().iter().flat_map(ChunkMeta::slots).any(|used| used >= slot) {
            return;
        }
        let mut batch = WriteBatch::new();
        for number in 0..200u32 {
            let (key, value) = (format!("fill-{number:04}").into_bytes(), format!("f{round:04}").into_bytes());
            batch.put(&key, &value);
            model.insert(key, value);
        }
        db.write(&batch, WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
        db.flush().unwrap_or_else(|error| panic!("{error}"));
    }
    panic!("400 flushes put no chunk at slot {slot}");
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn label_of(image: &[u8]) -> Label {
    Label::decode(&image[..512], 0).unwrap_or_else(|error| panic!("{error}"))
}

/// The recovered version of instance 0 (from the first device's logs).
fn version_of(path: &Path) -> Version {
    let image = read(path);
    let geometry = label_of(&image).geometry;
    let area = |kind| {
        let (offset, len) = geometry.log_area(kind, 0);
        &image[offset as usize..(offset + len) as usize]
    };
    let recovery =
        lds_format::algorithms::instance::recover_instance(&geometry, 0, area(LogKind::Version), area(LogKind::Backup))
            .unwrap_or_else(|error| panic!("{error:?}"));
    recovery.version_log.version
}

/// Each log chunk's metadata and references: (key, sequence, reference).
type Refs = Vec<(ChunkMeta, Vec<(Vec<u8>, u64, LogRef)>)>;

/// The log chunks of a one-device volume and their references, read from its slots.
fn log_chunks(path: &Path) -> Refs {
    let image = read(path);
    let geometry = label_of(&image).geometry;
    let mut found = Vec::new();
    for chunk in version_of(path).chunks.into_values() {
        let mut references = Vec::new();
        for slot in chunk.slots() {
            let offset = geometry.slot_offset(slot);
            let bytes = &image[offset as usize..(offset + geometry.slot_size) as usize];
            let view = SubChunkView::open(bytes, offset).unwrap_or_else(|error| panic!("{error}"));
            for entry in view.entries(offset).unwrap_or_else(|error| panic!("{error}")) {
                if entry.kind == EntryKind::LogRef {
                    let reference = LogRef::decode(entry.value, 0).unwrap_or_else(|error| panic!("{error}"));
                    references.push((entry.key.to_vec(), entry.sequence, reference));
                }
            }
        }
        assert_eq!(
            chunk.is_log_chunk(),
            !references.is_empty(),
            "chunk {}: the flag says what it holds",
            chunk.chunk_id
        );
        if chunk.is_log_chunk() {
            found.push((chunk, references));
        }
    }
    found.sort_by_key(|(chunk, _)| chunk.log_start);
    found
}

/// The references of a one-device volume that do not resolve (SPEC.md §8.9), as keys.
fn unresolved(path: &Path) -> BTreeSet<Vec<u8>> {
    let image = read(path);
    let context = area_context(&label_of(&image).geometry, LogKind::Backup, 0);
    let mut keys = BTreeSet::new();
    for (chunk, references) in log_chunks(path) {
        let named = references.iter().map(|(_, _, reference)| reference.position()).min();
        assert_eq!(chunk.log_start, named, "chunk {}: the log start is the oldest object named", chunk.chunk_id);
        for (key, sequence, reference) in references {
            let object = &image[(context.ofs_area + reference.ofs_object) as usize..];
            if lds_format::logref::resolve(&reference, object, &context, &key, sequence).is_err() {
                keys.insert(key);
            }
        }
    }
    keys
}

/// The log starts of the version's log chunks, sorted.
fn log_starts(version: &Version) -> Vec<LogPosition> {
    let mut starts: Vec<LogPosition> = version.chunks.values().filter_map(|chunk| chunk.log_start).collect();
    starts.sort();
    starts
}

/// Reads every key of `model` from the volume: its value, or nothing for the `lost` ones.
fn assert_reads(path: &Path, model: &Model, lost: &BTreeSet<Vec<u8>>) {
    let db = volumes::read_only(path);
    for (key, value) in model {
        let found = db.get(key).unwrap_or_else(|error| panic!("{}: {error}", String::from_utf8_lossy(key)));
        let expected = (!lost.contains(key)).then_some(value);
        assert_eq!(found.as_ref(), expected, "{}", String::from_utf8_lossy(key));
    }
    let all: Vec<(Vec<u8>, Vec<u8>)> = db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(all.len(), model.len() - lost.len(), "keys the volume iterates");
}

fn repair(path: &Path, undo_file: Option<&Path>) -> (i32, serde_json::Value) {
    let args = lds_cli::repair::RepairArgs {
        path: path.to_path_buf(),
        yes: true,
        json: true,
        no_undo: undo_file.is_none(),
        undo_file: undo_file.map(Path::to_path_buf),
        ..Default::default()
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = lds_cli::repair::run(&args, &mut out, &mut err);
    let document = serde_json::from_slice(&out)
        .unwrap_or_else(|error| panic!("{error}: {}{}", String::from_utf8_lossy(&out), String::from_utf8_lossy(&err)));
    (code, document)
}

/// A volume of 64 MiB with a backup log of 4 MiB and three log chunks (keys 0 to 1799).
fn volume_with_log_chunks(path: &Path) -> Model {
    mkfs(path, 64 << 20, 4 << 20);
    let mut model = Model::new();
    let db = open(path, 16);
    for round in 0..3 {
        log_round(&db, &mut model, round * 600..(round + 1) * 600, round);
    }
    let stats = db.stats();
    assert_eq!(stats.log_chunk_flushes, 3, "{stats:?}");
    db.close().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(log_chunks(path).len(), 3);
    assert!(unresolved(path).is_empty());
    model
}

#[test]
fn repair_rewrites_the_log_chunk_of_a_damaged_batch_and_salvage_names_its_lost_values() {
    let path = scratch("repair-log-chunks", "volume");
    let salvaged = scratch("repair-log-chunks", "salvaged");
    let undo_file = PathBuf::from(format!("{}.undo", path.display()));
    let _files = Files(vec![path.clone(), salvaged.clone(), undo_file.clone()]);
    let _ = std::fs::remove_file(&undo_file);
    let model = volume_with_log_chunks(&path);
    let before = log_chunks(&path);

    // Damage one batch the middle log chunk names: a byte of its payload.
    let (damaged_chunk, references) = &before[1];
    let ofs_object = references[references.len() / 2].2.ofs_object;
    let lost: BTreeSet<Vec<u8>> = references
        .iter()
        .filter(|(_, _, reference)| reference.ofs_object == ofs_object)
        .map(|(key, _, _)| key.clone())
        .collect();
    assert!(!lost.is_empty() && lost.len() < references.len(), "{} of {}", lost.len(), references.len());
    let mut image = read(&path);
    let geometry = label_of(&image).geometry;
    let (ofs_backup, len_backup) = geometry.log_area(LogKind::Backup, 0);
    image[(ofs_backup + ofs_object) as usize + 64 + 40] ^= 0x20;
    std::fs::write(&path, &image).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(unresolved(&path), lost, "exactly the damaged batch's references fail");
    let damaged = read(&path);
    let backup_area = |image: &[u8]| image[ofs_backup as usize..(ofs_backup + len_backup) as usize].to_vec();

    // Salvage: every key whose value it reads, the others named with the batch they need;
    // also with both labels lost (the backup log found from its object headers).
    let readable: Model =
        model.iter().filter(|(key, _)| !lost.contains(*key)).map(|(key, value)| (key.clone(), value.clone())).collect();
    let unlabeled = scratch("repair-log-chunks", "unlabeled");
    let _unlabeled = Files(vec![unlabeled.clone()]);
    let mut without_labels = damaged.clone();
    let sector = geometry.sector() as usize;
    without_labels[..sector].fill(0);
    let backup_label = geometry.ofs_backup_label() as usize;
    without_labels[backup_label..backup_label + sector].fill(0);
    std::fs::write(&unlabeled, &without_labels).unwrap_or_else(|error| panic!("{error}"));
    for source in [&path, &unlabeled] {
        let _ = std::fs::remove_file(&salvaged);
        let mut args = volumes::salvage_args(source, Some(&salvaged));
        args.json = true;
        let (code, out, err) = volumes::salvage(&args);
        assert_eq!(code, 1, "values are lost: {out}{err}");
        let report: serde_json::Value =
            serde_json::from_str(out.trim()).unwrap_or_else(|error| panic!("{error}: {out}"));
        let named: BTreeSet<Vec<u8>> = report["lost_values"]
            .as_array()
            .unwrap_or_else(|| panic!("{report}"))
            .iter()
            .map(|lost| lost["key"].as_str().unwrap_or_default().as_bytes().to_vec())
            .collect();
        assert_eq!(named, lost, "{report}");
        let from_label = report["layout_from"] == "label";
        assert_eq!(from_label, source == &path, "{report}");
        for lost in report["lost_values"].as_array().into_iter().flatten() {
            let reason = lost["reason"].as_str().unwrap_or_default();
            assert!(reason.contains("log reference") && reason.contains(&format!("offset {ofs_object}")), "{reason}");
        }
        assert_eq!(report["written"].as_u64(), Some(readable.len() as u64), "{report}");
        assert_reads(&salvaged, &readable, &BTreeSet::new());
        assert!(!label_of(&read(&salvaged)).has_log_tables(), "salvage writes ordinary chunks only");
        assert_eq!(fsck_codes(&salvaged), (0, Vec::new()));
    }
    assert!(read(&path) == damaged, "salvage wrote to its source");

    // Repair, with an undo file: the damaged log chunk is rewritten, its lost keys named.
    let (code, document) = repair(&path, Some(&undo_file));
    assert_eq!(code, 1, "{document:#}");
    let reported: Vec<u64> =
        document["before"].as_array().into_iter().flatten().filter_map(|problem| problem["code"].as_u64()).collect();
    assert!(reported.contains(&801), "fsck reports the unresolved references: {document:#}");
    let structure = format!("chunk {} of instance 0", damaged_chunk.chunk_id);
    let fixes = document["fixes"].as_array().cloned().unwrap_or_default();
    let fix = fixes.iter().find(|fix| fix["structure"] == structure.as_str()).unwrap_or_else(|| panic!("{document:#}"));
    assert_eq!(fix["class"], "fix", "{fix:#}");
    let dropped: Vec<String> = fix["dropped"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|line| line.as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(dropped.len(), lost.len(), "{fix:#}");
    for key in &lost {
        let shown = format!("key \"{}\"", String::from_utf8_lossy(key));
        assert!(dropped.iter().any(|line| line.starts_with(&shown)), "{shown} not in {dropped:?}");
    }
    assert!(
        fixes.iter().all(|fix| fix["structure"] == structure.as_str() || fix["dropped"] == serde_json::json!([])),
        "only the damaged chunk loses data: {document:#}"
    );
    check_repaired(&path, &before, damaged_chunk.chunk_id, &lost, &model);
    assert!(backup_area(&read(&path)) == backup_area(&damaged), "repair wrote into the backup log area");

    // The undo file puts the damaged bytes back; repair again without one.
    let args =
        lds_cli::undo::UndoArgs { undo_file: undo_file.clone(), path: path.clone(), force: false, dry_run: false };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(lds_cli::undo::run(&args, &mut out, &mut err), 0, "{}", String::from_utf8_lossy(&err));
    assert!(read(&path) == damaged, "undo did not restore the damaged volume byte for byte");
    let (code, document) = repair(&path, None);
    assert_eq!(code, 1, "{document:#}");
    check_repaired(&path, &before, damaged_chunk.chunk_id, &lost, &model);

    // Converged: nothing left to fix; the engine writes and reads.
    let (code, document) = repair(&path, None);
    assert_eq!(code, 0, "{document:#}");
    let mut model: Model = model.into_iter().filter(|(key, _)| !lost.contains(key)).collect();
    let db = open(&path, 16);
    log_round(&db, &mut model, 1800..2400, 3);
    assert!(db.stats().log_chunk_flushes >= 1);
    db.close().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(fsck_codes(&path), (0, Vec::new()));
    assert!(unresolved(&path).is_empty());
    assert_reads(&path, &model, &BTreeSet::new());
}

#[test]
fn after_a_repair_the_engine_never_overwrites_what_the_kept_log_chunks_name() {
    let path = scratch("repair-log-chunks", "retained");
    let _files = Files(vec![path.clone()]);
    let mut model = volume_with_log_chunks(&path);
    let before = log_chunks(&path);
    // A damaged block in the newest log chunk (fsck 405): repair rewrites it from its other
    // blocks, their references read into puts, and keeps the two older ones.
    let (newest, _) = &before[2];
    let mut image = read(&path);
    let geometry = label_of(&image).geometry;
    let backup = geometry.log_area(LogKind::Backup, 0);
    let backup_area = |image: &[u8]| image[backup.0 as usize..(backup.0 + backup.1) as usize].to_vec();
    image[geometry.slot_offset(newest.chunk_id) as usize + 40] ^= 0x10;
    std::fs::write(&path, &image).unwrap_or_else(|error| panic!("{error}"));
    let (code, codes) = fsck_codes(&path);
    assert!(code != 0 && codes.contains(&405), "{codes:?}");
    let (code, document) = repair(&path, None);
    assert_eq!(code, 1, "{document:#}");
    let structure = format!("chunk {} of instance 0", newest.chunk_id);
    let fixes = document["fixes"].as_array().cloned().unwrap_or_default();
    let fix = fixes.iter().find(|fix| fix["structure"] == structure.as_str()).unwrap_or_else(|| panic!("{document:#}"));
    assert!(fix["action"].as_str().unwrap_or_default().contains("log references that resolve became puts"), "{fix:#}");
    assert!(backup_area(&read(&path)) == backup_area(&image), "repair wrote into the backup log area");
    assert_eq!(fsck_codes(&path), (0, Vec::new()));
    let after = log_chunks(&path);
    assert_eq!(after.iter().map(|(chunk, _)| chunk).collect::<Vec<_>>(), [&before[0].0, &before[1].0]);
    let version = version_of(&path);
    assert_eq!(Some(version.retention_start()), before[0].0.log_start);
    assert!(unresolved(&path).is_empty());
    // The damaged block's keys are lost, or read an older version (a bound key's, written in
    // every round): what they read now is what they must read from here on.
    let reader = volumes::read_only(&path);
    let changed: Vec<(Vec<u8>, Option<Vec<u8>>)> = model
        .iter()
        .map(|(key, value)| (key.clone(), value, reader.get(key).ok().flatten()))
        .filter(|(_, value, read)| read.as_ref() != Some(*value))
        .map(|(key, _, read)| (key, read))
        .collect();
    drop(reader);
    assert!(changed.len() < 200, "one block's keys at most: {}", changed.len());
    for (key, read) in changed {
        match read {
            Some(value) => model.insert(key, value),
            None => model.remove(&key),
        };
    }
    assert_reads(&path, &model, &BTreeSet::new());

    // Three times the ring in new keys: the writer goes around it while the kept log chunks
    // name batches at its start, and must leave them until a merge has read them.
    let db = open(&path, 16);
    let (mut bytes, mut round) = (0u64, 0u32);
    while bytes <= 3 * backup.1 {
        let first = 10_000 + round * 2_000;
        log_round(&db, &mut model, first..first + 2_000, round);
        bytes += (first..first + 2_000).map(|number| 10 + value(number, round).len() as u64).sum::<u64>();
        round += 1;
        assert!(round < 200, "{bytes} bytes in {round} rounds");
    }
    let stats = db.stats();
    assert!(stats.log_chunk_flushes > 3, "{stats:?}");
    db.close().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(fsck_codes(&path), (0, Vec::new()));
    assert!(unresolved(&path).is_empty());
    assert_reads(&path, &model, &BTreeSet::new());
}

#[test]
fn a_repair_from_a_lost_version_reads_every_log_chunk_into_ordinary_chunks() {
    let path = scratch("repair-log-chunks", "lost-version");
    let _files = Files(vec![path.clone()]);
    let model = volume_with_log_chunks(&path);
    // The second flush's delta version damaged (fsck 207): repair rebuilds from the base
    // version and the first flush's, and finds the other log chunks in free slots. The
    // backup log's head is lost with the versions, so no log chunk can stay: every
    // reference is read into a put, none lost (the batches are intact).
    let mut image = read(&path);
    let geometry = label_of(&image).geometry;
    let context = area_context(&geometry, LogKind::Version, 0);
    let area = &image[context.ofs_area as usize..(context.ofs_area + context.len_area) as usize];
    let mut deltas: Vec<(u64, u64)> = lds_format::algorithms::salvage::valid_objects(area, &context)
        .into_iter()
        .filter(|object| matches!(object.payload, lds_format::algorithms::recovery::Payload::Delta(_)))
        .map(|object| (object.header.lsn, object.offset))
        .collect();
    deltas.sort_unstable();
    assert!(deltas.len() >= 3, "{deltas:?}");
    image[(context.ofs_area + deltas[1].1) as usize + 64 + 4] ^= 0x01;
    std::fs::write(&path, &image).unwrap_or_else(|error| panic!("{error}"));
    let (code, codes) = fsck_codes(&path);
    assert!(code != 0 && codes.contains(&207), "{codes:?}");
    let (code, document) = repair(&path, None);
    assert_eq!(code, 1, "{document:#}");
    let fixes = document["fixes"].as_array().cloned().unwrap_or_default();
    let read_into_puts =
        |fix: &&serde_json::Value| fix["action"].as_str().unwrap_or_default().contains("log references");
    assert!(fixes.iter().any(|fix| read_into_puts(&fix)), "{document:#}");
    assert!(fixes.iter().filter(read_into_puts).all(|fix| fix["dropped"] == serde_json::json!([])), "{document:#}");
    assert_eq!(fsck_codes(&path), (0, Vec::new()));
    assert!(log_chunks(&path).is_empty(), "every log chunk read into ordinary chunks");
    assert_reads(&path, &model, &BTreeSet::new());
    let (code, document) = repair(&path, None);
    assert_eq!(code, 0, "{document:#}");
}

/// After the repair of the volume whose log chunk `rewritten` lost `lost`: fsck is clean, the
/// other log chunks stay as they were (metadata and log starts), the rebuilt version retains
/// what they name, every reference resolves, and every other key reads.
fn check_repaired(path: &Path, before: &Refs, rewritten: u64, lost: &BTreeSet<Vec<u8>>, model: &Model) {
    assert_eq!(fsck_codes(path), (0, Vec::new()));
    let after = log_chunks(path);
    let kept: Vec<&ChunkMeta> =
        before.iter().map(|(chunk, _)| chunk).filter(|chunk| chunk.chunk_id != rewritten).collect();
    assert_eq!(
        after.iter().map(|(chunk, _)| chunk).collect::<Vec<_>>(),
        kept,
        "the other log chunks stay as they were"
    );
    let version = version_of(path);
    let oldest = kept.iter().filter_map(|chunk| chunk.log_start).min().unwrap_or_else(|| panic!("a log chunk stays"));
    assert_eq!(version.retention_start(), oldest, "the rebuilt version retains what they name");
    assert!(version.lsn_backup_start > oldest.lsn);
    assert!(unresolved(path).is_empty());
    assert_reads(path, model, lost);
}

#[test]
fn a_metadump_image_keeps_the_references_resolving_and_passes_fsck() {
    let path = scratch("metadump-log-chunks", "volume");
    let dumped = scratch("metadump-log-chunks", "image");
    let _files = Files(vec![path.clone(), dumped.clone()]);
    let model = volume_with_log_chunks(&path);
    let args = lds_cli::metadump::MetadumpArgs {
        path: path.clone(),
        output: dumped.clone(),
        keep_keys: false,
        force: false,
        json: false,
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(lds_cli::metadump::run(&args, &mut out, &mut err), 0, "{}", String::from_utf8_lossy(&err));
    let options = lds_cli::fsck::FsckOptions { path: dumped.clone(), ..Default::default() };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = lds_cli::fsck::run(&options, &mut out, &mut err);
    assert_eq!(code, 0, "{}{}", String::from_utf8_lossy(&out), String::from_utf8_lossy(&err));
    // The same log chunks, references and log starts; each still resolves (to zeros).
    let (original, image) = (log_chunks(&path), log_chunks(&dumped));
    assert_eq!(image.len(), original.len());
    for ((chunk, references), (dumped_chunk, dumped_references)) in original.iter().zip(&image) {
        assert_eq!(chunk.log_start, dumped_chunk.log_start);
        let plain = |references: &Vec<(Vec<u8>, u64, LogRef)>| {
            references.iter().map(|(key, sequence, reference)| (key.len(), *sequence, *reference)).collect::<Vec<_>>()
        };
        assert_eq!(plain(references), plain(dumped_references));
        assert!(references.iter().zip(dumped_references).any(|(a, b)| a.0 != b.0), "keys are mapped");
    }
    assert!(unresolved(&dumped).is_empty());
    // Read in order (the map keeps it): the same number of keys, each value zeros of its length.
    let db = volumes::read_only(&dumped);
    let all: Vec<(Vec<u8>, Vec<u8>)> = db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(all.len(), model.len());
    for ((_, value), (_, zeros)) in model.iter().zip(&all) {
        assert_eq!(zeros, &vec![0u8; value.len()]);
    }
}

/// The state a move must keep: the log starts and the retention start.
fn retained(path: &Path) -> (Vec<LogPosition>, LogPosition) {
    let version = version_of(path);
    (log_starts(&version), version.retention_start())
}

#[test]
fn a_shrink_moves_log_chunks_with_their_references_and_log_starts() {
    let path = scratch("resize-log-chunks", "volume");
    let _files = Files(vec![path.clone()]);
    mkfs(&path, 64 << 20, 4 << 20);
    let mut model = Model::new();
    let db = open(&path, 8);
    fill_past(&db, &mut model, 40);
    db.compact_range().unwrap_or_else(|error| panic!("{error}"));
    log_round(&db, &mut model, 0..600, 0);
    log_round(&db, &mut model, 600..1200, 0);
    db.close().unwrap_or_else(|error| panic!("{error}"));
    let before = retained(&path);
    assert_eq!(before.0.len(), 2, "two log chunks");
    let moving: Vec<u64> = log_chunks(&path).iter().map(|(chunk, _)| chunk.chunk_id).collect();

    let resize = |size: Option<u64>, min: bool| {
        let args = lds_cli::resize::ResizeArgs {
            path: path.clone(),
            size,
            dry_run: false,
            min,
            undo: lds_cli::session::UndoChoice { undo_file: None, no_undo: true },
            json: true,
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = lds_cli::resize::run(&args, &mut out, &mut err);
        let text = String::from_utf8_lossy(&out).into_owned();
        assert_eq!(code, 0, "{text}{}", String::from_utf8_lossy(&err));
        serde_json::from_str::<serde_json::Value>(text.trim()).unwrap_or_else(|error| panic!("{error}: {text}"))
    };
    let min = resize(None, true)["min_len"].as_u64().unwrap_or_else(|| panic!("no min_len"));
    let num_slots = lds_repair::resize::resized(&label_of(&read(&path)).geometry, min).num_slots;
    assert!(moving.iter().all(|&slot| slot >= num_slots), "the log chunks {moving:?} lie past slot {num_slots}");
    let shrunk = resize(Some(min), false);
    let moves = shrunk["plan"]["moves"].as_array().cloned().unwrap_or_default();
    assert!(moves.len() >= moving.len(), "{shrunk:#}");

    assert_eq!(fsck_codes(&path), (0, Vec::new()));
    assert_eq!(retained(&path), before, "the moved log chunks name what they named");
    let after = log_chunks(&path);
    assert_eq!(after.len(), 2);
    assert!(after.iter().all(|(chunk, _)| chunk.chunk_id < num_slots && !moving.contains(&chunk.chunk_id)));
    assert!(unresolved(&path).is_empty());
    assert_reads(&path, &model, &BTreeSet::new());
    let db = open(&path, 8);
    log_round(&db, &mut model, 1200..1800, 1);
    db.close().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(fsck_codes(&path), (0, Vec::new()));
    assert_reads(&path, &model, &BTreeSet::new());
}

#[test]
fn removing_a_device_moves_its_log_chunks_with_their_references_and_log_starts() {
    let directory = std::env::temp_dir().join(format!("lds-device-log-chunks-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).unwrap_or_else(|error| panic!("{error}"));
    let (first, second) = (directory.join("first.img"), directory.join("second.img"));
    let _files = Files(vec![first.clone(), second.clone()]);
    mkfs(&first, 24 << 20, 4 << 20);
    let device = |command| {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = lds_cli::device::run(&command, &mut out, &mut err);
        assert_eq!(code, 0, "{}{}", String::from_utf8_lossy(&out), String::from_utf8_lossy(&err));
    };
    device(lds_cli::device::DeviceCommand::Add(lds_cli::device::AddArgs {
        path: first.clone(),
        new_device: second.clone(),
        size: Some(16 << 20),
        force: false,
        dry_run: false,
        json: true,
    }));
    let table = label_of(&read(&first)).devices.unwrap_or_else(|| panic!("two devices"));
    let second_first_slot = table.devices[1].first_slot;

    // Chunks onto the second device: the cursor passes the first one's slots, the level-0
    // merge and the log chunks land after it.
    let mut model = Model::new();
    let db = open(&first, 8);
    fill_past(&db, &mut model, second_first_slot);
    db.compact_range().unwrap_or_else(|error| panic!("{error}"));
    log_round(&db, &mut model, 0..600, 0);
    log_round(&db, &mut model, 600..1200, 0);
    let on_second: Vec<u64> = db
        .chunks()
        .iter()
        .filter(|chunk| chunk.is_log_chunk() && chunk.chunk_id >= second_first_slot)
        .map(|chunk| chunk.chunk_id)
        .collect();
    db.close().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(on_second.len(), 2, "both log chunks on the second device");
    let before = retained(&first);
    assert_eq!(before.0.len(), 2);

    device(lds_cli::device::DeviceCommand::Remove(lds_cli::device::RemoveArgs {
        path: first.clone(),
        device: second.clone(),
        dry_run: false,
        json: true,
    }));
    assert!(label_of(&read(&first)).devices.is_none(), "one device again");
    assert_eq!(fsck_codes(&first), (0, Vec::new()));
    assert_eq!(retained(&first), before, "the moved log chunks name what they named");
    let after = log_chunks(&first);
    assert_eq!(after.len(), 2);
    assert!(after.iter().all(|(chunk, _)| chunk.chunk_id < second_first_slot));
    assert!(unresolved(&first).is_empty());
    assert_reads(&first, &model, &BTreeSet::new());
    let db = open(&first, 8);
    log_round(&db, &mut model, 1200..1800, 1);
    db.close().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(fsck_codes(&first), (0, Vec::new()));
    assert_reads(&first, &model, &BTreeSet::new());
    let _ = std::fs::remove_dir_all(&directory);
}
