//! Guards issue 39 case 5 and oracle I10 (docs/reliability.md): `lds repair -y` keeps what
//! `lds salvage` of the damaged volume reads, or names it dropped. Volumes crafted with the
//! format crate's encoders: a delta version adds a flushed chunk (1,200 entries, the only copy
//! of 600 keys, the batches it flushed written over since) with metadata the version
//! contradicts (a slot beyond the slot area; the id of a live chunk), the chunk intact in slot
//! 0. Repair must keep it there, write its own chunks elsewhere, and end with fsck clean and a
//! second repair changing nothing; where the chunk is damaged (a block, or its footer lost),
//! what repair drops is named in `--json`'s `lost` ranges. The I10 check here reads those
//! ranges from the JSON, so that it runs unchanged against any build of `lds repair`.
//!
//! The two damaged images of the issue are kept as fuzz/regressions/repair inputs (gzipped);
//! `LDS_BLESS=1 cargo test -p lds-cli --test repair_keeps_intact` rewrites them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use lds_format::algorithms::image::ImageBuilder;
use lds_format::batch::BatchEntry;
use lds_format::entry::EntryKind;
use lds_format::geometry::{plan_layout, LayoutRequest};
use lds_format::label::Label;
use lds_format::log::ObjectType;
use lds_format::version::payload::DeltaVersion;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// A crafted volume: the image, each key's value before the damage, and every key and value
/// it ever held.
struct Crafted {
    bytes: Vec<u8>,
    model: Model,
    /// The sequence number of each key's value in `model`.
    sequences: BTreeMap<Vec<u8>, u64>,
    ever: BTreeSet<(Vec<u8>, Vec<u8>)>,
}

/// Slots of 256 KiB: a chunk of 1,200 entries fits in one.
const SLOT: u64 = 256 << 10;

fn key(number: u32) -> Vec<u8> {
    format!("key{number:05}").into_bytes()
}

fn value(number: u32, round: u32) -> Vec<u8> {
    format!("value-{round}-{number:05}").into_bytes()
}

type ChunkEntry = (Vec<u8>, u64, EntryKind, Vec<u8>);

/// Puts of keys `numbers` in round `round`, sequences from `first`.
fn entries(numbers: std::ops::Range<u32>, first: u64, round: u32) -> Vec<ChunkEntry> {
    numbers
        .enumerate()
        .map(|(index, number)| (key(number), first + index as u64, EntryKind::Put, value(number, round)))
        .collect()
}

fn expect<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
    result.unwrap_or_else(|error| panic!("{error}"))
}

/// Appends a delta version as it is (checksums right), without applying it to the builder.
fn append_raw_delta(image: &mut ImageBuilder, delta: &DeltaVersion) {
    let state = &mut image.instances[0];
    let ofs_area = state.version_log.context().ofs_area;
    let pending = expect(state.version_log.append(ObjectType::DeltaVersion, state.sn, &delta.encode()));
    for write in pending {
        let at = (ofs_area + write.offset) as usize;
        image.bytes[at..at + write.bytes.len()].copy_from_slice(&write.bytes);
    }
}

/// How the flushed chunk's metadata (and the chunk) are damaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damage {
    /// Its slot (and so its id) is 2^62, beyond the slot area.
    SlotBeyondTheSlotArea,
    /// Its id (and so its slot) is 3, a live chunk's.
    IdOfALiveChunk,
    /// As `SlotBeyondTheSlotArea`, and a byte of the chunk's first block flipped.
    AndABlockFlipped,
    /// As `SlotBeyondTheSlotArea`, and the chunk's footer zeroed.
    AndItsFooterLost,
}

impl Damage {
    /// The file under fuzz/regressions/repair, for the cases of the issue.
    fn regression(self) -> Option<&'static str> {
        match self {
            Self::SlotBeyondTheSlotArea => Some("slot-beyond-the-slot-area-left-an-intact-chunk-out.gz"),
            Self::IdOfALiveChunk => Some("chunk-id-of-a-live-chunk-left-an-intact-chunk-out.gz"),
            Self::AndABlockFlipped | Self::AndItsFooterLost => None,
        }
    }
}

/// The volume (8 MiB, slots of 256 KiB): chunks of keys 0..1000 and 1000..2000 at level 1 in
/// slots 3 and 4; a flush of keys 1500..2700 (round 1) into slot 0, added by a delta version
/// with `damage` done to its metadata; then 200 keys in batches of the backup log (round 2,
/// 2600..2800). The batches the flush took are not in the log (written over since).
fn volume(damage: Damage) -> Crafted {
    let mut uuid = [0x39; 16];
    uuid[6] = 0x45;
    uuid[8] = 0x85;
    let request =
        LayoutRequest { volume_len: 8 << 20, sector_size: Some(4096), slot_size: Some(SLOT), ..Default::default() };
    let mut image = ImageBuilder::format(Label::new(expect(plan_layout(&request, uuid)), "issue 39 case 5"));
    let mut model = Model::new();
    let first = image.reserve_sequences(0, 2000);
    let low = image.write_chunk(0, 3, 1, 0, &entries(0..1000, first, 0));
    let high = image.write_chunk(0, 4, 1, 0, &entries(1000..2000, first + 1000, 0));
    model.extend((0..2000).map(|number| (key(number), value(number, 0))));
    let (ofs, lsn) = image.instances[0].backup_log.next_position();
    let last_sequence = image.last_sequence(0);
    let delta = DeltaVersion {
        added: vec![low, high],
        last_sequence,
        ofs_backup_start: ofs,
        lsn_backup_start: lsn,
        ..DeltaVersion::default()
    };
    expect(image.append_delta(0, &delta));
    let first = image.reserve_sequences(0, 1200);
    let mut flushed = image.write_chunk(0, 0, 0, 0, &entries(1500..2700, first, 1));
    model.extend((1500..2700).map(|number| (key(number), value(number, 1))));
    // The chunk id is the slot of sub-chunk 0 (SPEC.md §6.4): both change together.
    let wrong = if damage == Damage::IdOfALiveChunk { 3 } else { 1 << 62 };
    flushed.chunk_id = wrong;
    flushed.sub_chunks[0].slot = wrong;
    let (ofs, lsn) = image.instances[0].backup_log.next_position();
    let last_sequence = image.last_sequence(0);
    let delta = DeltaVersion {
        added: vec![flushed],
        last_sequence,
        ofs_backup_start: ofs,
        lsn_backup_start: lsn,
        ..DeltaVersion::default()
    };
    append_raw_delta(&mut image, &delta);
    for batch in 0..4u32 {
        let numbers = 2600 + batch * 50..2650 + batch * 50;
        let puts = numbers.clone().map(|number| BatchEntry {
            kind: EntryKind::Put,
            key: key(number),
            value: value(number, 2),
        });
        expect(image.append_batch(0, puts.collect()));
        model.extend(numbers.map(|number| (key(number), value(number, 2))));
    }
    let slot0 = image.label.geometry.slot_offset(0) as usize;
    match damage {
        // A byte inside the first block (its checksum fails; the footer still checks).
        Damage::AndABlockFlipped => image.bytes[slot0 + 100] ^= 0x10,
        Damage::AndItsFooterLost => {
            let footer = slot0 + SLOT as usize - lds_format::chunk::footer::FOOTER_LEN;
            image.bytes[footer..slot0 + SLOT as usize].fill(0);
        }
        Damage::SlotBeyondTheSlotArea | Damage::IdOfALiveChunk => {}
    }
    let ever = [(0..2000, 0), (1500..2700, 1), (2600..2800, 2)]
        .into_iter()
        .flat_map(|(numbers, round)| numbers.map(move |number| (key(number), value(number, round))))
        .collect();
    // Sequences were handed out in key order within each round: 1.., 2001.., 3201...
    let sequences = model
        .keys()
        .map(|key| {
            let number: u64 = String::from_utf8_lossy(&key[3..]).parse().unwrap_or_default();
            let sequence = match number {
                2600.. => 3201 + number - 2600,
                1500.. => 2001 + number - 1500,
                _ => 1 + number,
            };
            (key.clone(), sequence)
        })
        .collect();
    Crafted { bytes: image.bytes, model, sequences, ever }
}

/// A scratch image file, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str, bytes: &[u8]) -> Self {
        let path = std::env::temp_dir().join(format!("lds-repair-keeps-{}-{name}.img", std::process::id()));
        expect(std::fs::write(&path, bytes));
        Self(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Each key's newest entry as `lds salvage` reads it (instance 0).
fn salvage(path: &Path) -> BTreeMap<Vec<u8>, (u64, EntryKind, Vec<u8>)> {
    let device = expect(lds_volume::Device::open(path, lds_volume::OpenMode::ReadOnly));
    let mut salvaged = expect(lds_repair::salvage::salvage(&device, &mut |_, _| {}));
    salvaged.keys.remove(&0).unwrap_or_default()
}

/// What the engine reads.
fn reads(path: &Path) -> Model {
    let (db, _) =
        expect(lds_engine::Db::open_read_only(path, lds_engine::Options::default(), std::time::Duration::ZERO));
    expect(db.iter().and_then(Iterator::collect))
}

/// `lds repair -y --json --no-undo`: exit code and document.
fn repair_json(path: &Path) -> (i32, serde_json::Value) {
    let args = lds_cli::repair::RepairArgs {
        path: path.to_path_buf(),
        yes: true,
        no_undo: true,
        json: true,
        ..Default::default()
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = lds_cli::repair::run(&args, &mut out, &mut err);
    let document = serde_json::from_slice(&out)
        .unwrap_or_else(|error| panic!("{error}: {}{}", String::from_utf8_lossy(&out), String::from_utf8_lossy(&err)));
    (code, document)
}

fn fsck(path: &Path) -> (i32, String) {
    let options = lds_cli::fsck::FsckOptions { path: path.to_path_buf(), deep: true, ..Default::default() };
    let mut out = Vec::new();
    let code = lds_cli::fsck::run(&options, &mut out, &mut Vec::new());
    (code, String::from_utf8_lossy(&out).into_owned())
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2).map(|at| u8::from_str_radix(&text[2 * at..2 * at + 2], 16).unwrap_or_default()).collect()
}

/// A range of entries a fix drops, as `--json` gives it (docs/repair-json.md).
#[derive(Debug)]
struct Lost {
    instance: u64,
    from: Option<(Vec<u8>, bool)>,
    through: Option<Vec<u8>>,
    sequences: (u64, u64),
}

impl Lost {
    fn covers(&self, key: &[u8], sequence: u64) -> bool {
        let above = match &self.from {
            None => true,
            Some((from, true)) => key >= from.as_slice(),
            Some((after, false)) => key > after.as_slice(),
        };
        let below = self.through.as_ref().is_none_or(|through| key <= through.as_slice());
        self.instance == 0 && above && below && (self.sequences.0..=self.sequences.1).contains(&sequence)
    }
}

/// The `lost` ranges of the applied fixes (none where a build of repair gives none).
fn lost_ranges(document: &serde_json::Value) -> Vec<Lost> {
    let fixes = document["fixes"].as_array().cloned().unwrap_or_default();
    let applied = fixes.iter().filter(|fix| fix["state"] == "applied");
    let ranges = applied.flat_map(|fix| fix["lost"].as_array().cloned().unwrap_or_default());
    ranges
        .map(|range| Lost {
            instance: range["instance"].as_u64().unwrap_or(u64::MAX),
            from: range["key_from"]
                .as_str()
                .map(|key| (unhex(key), true))
                .or_else(|| range["key_after"].as_str().map(|key| (unhex(key), false))),
            through: range["key_through"].as_str().map(unhex),
            sequences: (range["smallest_seq"].as_u64().unwrap_or(1), range["largest_seq"].as_u64().unwrap_or(0)),
        })
        .collect()
}

/// What a repair of a crafted volume left.
struct Repaired {
    /// Puts salvage of the damaged image reads with the key's live value.
    live_salvaged: usize,
    /// Of them, those the repaired volume does not read (each named dropped).
    dropped: usize,
    /// The keys of the model the repaired volume reads with their value.
    model_kept: usize,
    /// What salvage reads after the repair.
    salvaged_after: BTreeMap<Vec<u8>, (u64, EntryKind, Vec<u8>)>,
}

impl Repaired {
    /// The keys of the model the repaired volume does not read with their value (each one
    /// named dropped).
    fn model_dropped(&self) -> usize {
        2800 - self.model_kept
    }
}

/// Repairs the crafted volume and checks I10 (both forms), fsck and a second repair.
fn repair_and_check(damage: Damage) -> Repaired {
    let Crafted { bytes, model, sequences, ever } = volume(damage);
    let name = format!("{damage:?}");
    let image = Scratch::new(&name, &bytes);
    let (fsck_before, _) = fsck(&image.0);
    assert_eq!(fsck_before, 4, "{name}: the damage is one fsck reports");
    let before = salvage(&image.0);
    let (code, document) = repair_json(&image.0);
    assert_eq!(code, 1, "{name}: repair -y exit {code}: {document:#}");
    let lost = lost_ranges(&document);
    let reported = |key: &[u8], sequence: u64| lost.iter().any(|range| range.covers(key, sequence));
    let read = reads(&image.0);
    let after = salvage(&image.0);
    let mut repaired = Repaired { live_salvaged: 0, dropped: 0, model_kept: 0, salvaged_after: BTreeMap::new() };
    for (key, (sequence, kind, salvaged)) in &before {
        if *kind != EntryKind::Put {
            continue;
        }
        // I10 against salvage of the repaired image: the entry, or a newer one, or named.
        let kept = after.get(key).is_some_and(|(found, _, _)| found >= sequence);
        assert!(
            kept || reported(key, *sequence),
            "{name}: I10: salvage read {} at sequence {sequence} before the repair, {:?} after it, and the report does not name it: {document:#}",
            String::from_utf8_lossy(key),
            after.get(key).map(|(found, _, _)| found)
        );
        // I10 against the live values.
        if model.get(key) == Some(salvaged) {
            repaired.live_salvaged += 1;
            let read_back = read.get(key) == Some(salvaged);
            assert!(
                read_back || reported(key, *sequence),
                "{name}: I10: salvage read the live value of {} (sequence {sequence}); the repaired volume reads {:?} and the report does not name it: {document:#}",
                String::from_utf8_lossy(key),
                read.get(key).map(|value| String::from_utf8_lossy(value).into_owned())
            );
            repaired.dropped += usize::from(!read_back);
        }
    }
    repaired.model_kept = model.iter().filter(|(key, value)| read.get(*key) == Some(*value)).count();
    // Every drop is named, whether salvage reads the entry or not.
    for (key, value) in &model {
        let sequence = sequences.get(key).copied().unwrap_or_default();
        assert!(
            read.get(key) == Some(value) || reported(key, sequence),
            "{name}: {} (sequence {sequence}) is lost and the report does not name it: {document:#}",
            String::from_utf8_lossy(key)
        );
    }
    // A value dropped leaves an older one of its key readable, never one the key never had.
    assert!(
        read.iter().all(|(key, value)| ever.contains(&(key.clone(), value.clone()))),
        "{name}: the repaired volume reads a value it never held"
    );
    repaired.salvaged_after = after;
    let (fsck_after, report) = fsck(&image.0);
    assert_eq!(fsck_after, 0, "{name}: fsck after repair\n{report}");
    let repaired_bytes = expect(std::fs::read(&image.0));
    let (again, document) = repair_json(&image.0);
    assert_eq!(again, 0, "{name}: a second repair -y: {document:#}");
    assert!(expect(std::fs::read(&image.0)) == repaired_bytes, "{name}: the second repair changed the image");
    repaired
}

#[test]
fn a_chunk_named_by_a_slot_beyond_the_slot_area_is_kept_where_it_lies() {
    let repaired = repair_and_check(Damage::SlotBeyondTheSlotArea);
    assert_eq!(repaired.live_salvaged, 2800, "salvage reads every key of the volume");
    assert_eq!((repaired.dropped, repaired.model_kept), (0, 2800));
}

#[test]
fn a_chunk_named_by_a_live_chunks_id_is_kept_where_it_lies() {
    let repaired = repair_and_check(Damage::IdOfALiveChunk);
    assert_eq!(repaired.live_salvaged, 2800, "salvage reads every key of the volume");
    assert_eq!((repaired.dropped, repaired.model_kept), (0, 2800));
}

#[test]
fn a_damaged_block_of_the_chunk_kept_is_named_dropped() {
    let repaired = repair_and_check(Damage::AndABlockFlipped);
    // The first block of the chunk (keys from 1500) fails its checksum: salvage reads the
    // older values of its keys below 2000 (level 1) and nothing of the others; repair keeps
    // the chunk's other blocks and names the lost one's keys.
    assert!(repaired.live_salvaged < 2800, "{}", repaired.live_salvaged);
    assert_eq!(repaired.dropped, 0, "salvage reads no live value the repair loses");
    assert_eq!(repaired.model_kept, repaired.live_salvaged);
    assert!((1..1200).contains(&repaired.model_dropped()), "one block's keys: {}", repaired.model_dropped());
}

#[test]
fn a_chunk_whose_footer_is_lost_is_named_dropped_and_its_slot_left_alone() {
    let repaired = repair_and_check(Damage::AndItsFooterLost);
    // Salvage reads the chunk's blocks without its footer; repair cannot tell the chunk, so
    // it drops it and names its keys (1500..2600 whose live values it held; 2600..2700 are
    // newer in the backup log), and writes its own chunks elsewhere.
    assert_eq!(repaired.live_salvaged, 2800, "salvage reads every key of the volume");
    assert_eq!(repaired.dropped, 1100);
    assert_eq!(repaired.model_kept, 2800 - 1100);
    // Slot 0 was not written over: salvage still reads the chunk there.
    let found = repaired.salvaged_after.get(&key(2000)).map(|(sequence, _, value)| (*sequence, value.clone()));
    assert_eq!(found, Some((2501, value(2000, 1))));
}

#[test]
fn the_regression_inputs_are_the_crafted_images() {
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/repair");
    let bless = std::env::var_os("LDS_BLESS").is_some_and(|value| value == "1");
    for damage in [Damage::SlotBeyondTheSlotArea, Damage::IdOfALiveChunk] {
        let Some(name) = damage.regression() else { continue };
        let bytes = volume(damage).bytes;
        let path = folder.join(name);
        if bless {
            expect(std::fs::create_dir_all(&folder));
            expect(std::fs::write(&path, lds_fixtures::compress(&bytes)));
        }
        let kept = std::fs::read(&path).unwrap_or_else(|error| {
            panic!(
                "{}: {error} (write it with LDS_BLESS=1 cargo test -p lds-cli --test repair_keeps_intact)",
                path.display()
            )
        });
        assert!(expect(lds_fixtures::decompress(&kept)) == bytes, "{} is not the crafted image", path.display());
    }
}
