//! Guards `lds salvage` on a volume with value chunks (SPEC.md §8.6, technique
//! `kv-separation`): values behind pointers are read from their value chunks and salvaged whole,
//! larger than an entry of the output could hold inline; without the version log the value
//! chunks are found by their footers, and a value chunk whose footer is lost by the version
//! log; a value whose bytes are lost is named (key, sequence, why) and not written, and every
//! other value is salvaged exactly as written.
//!
//! The volume is written by the engine against a model. Which keys a damaged value chunk
//! takes is learnt from the engine itself: it reads every key of the damaged volume (version
//! log intact), and the keys it cannot read are the only ones salvage may lose.

mod volumes;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use lds_cli::salvage::SalvageArgs;
use lds_engine::{Db, Options, WriteBatch, WriteOptions};
use lds_format::geometry::{Geometry, LogKind};
use lds_format::value::{ValueFooter, VALUE_FOOTER_LEN};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const SLOT_SIZE: u64 = 256 << 10;
/// Values from here go to value chunks of their own before their batch (never inline in the
/// backup log).
const DIRECT_MIN: usize = 32 << 10;

fn engine_options() -> Options {
    Options {
        write_buffer_size: 256 << 10,
        value_direct_min: DIRECT_MIN,
        // No relocation: each value has one copy, so a damaged value chunk surely takes the
        // large values it holds.
        value_gc_live_percent: 0,
        background: false,
        ..Options::default()
    }
    .with_techniques("kv-separation")
    .unwrap_or_else(|error| panic!("{error}"))
}

/// Every 64-byte stretch of a value names its key and generation.
fn value_of(key: &str, generation: u32, len: usize) -> Vec<u8> {
    format!("<{key}#{generation}>").into_bytes().into_iter().cycle().take(len).collect()
}

struct Random(u64);

impl Random {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}

/// A volume with value chunks written by the engine: 600 keys, small values inline, values of
/// 1 KiB and more in value chunks, a tenth larger than a quarter of a slot (more than an
/// entry may hold inline); overwritten twice (all, then a third), a few deleted; the last
/// writes only in the backup log.
fn written_volume(name: &str) -> (PathBuf, Model) {
    let path = volumes::scratch("salvage-values", name);
    let options = lds_cli::mkfs::MkfsOptions {
        path: path.clone(),
        size: Some(64 << 20),
        slot_size: Some(SLOT_SIZE),
        // A small backup log, which wraps: most values are read through pointers, not from
        // old batches.
        backup_log_size: Some(512 << 10),
        value_chunks: true,
        ..Default::default()
    };
    assert_eq!(lds_cli::mkfs::run(&options, &mut Vec::new(), &mut Vec::new()), 0);
    let mut random = Random(42);
    let mut model = Model::new();
    let db = Db::open(&path, engine_options()).unwrap_or_else(|error| panic!("open: {error}"));
    let write = |entries: &[(String, Option<Vec<u8>>)], model: &mut Model| {
        let mut batch = WriteBatch::new();
        for (key, value) in entries {
            match value {
                Some(value) => {
                    batch.put(key.as_bytes(), value);
                    model.insert(key.clone().into_bytes(), value.clone());
                }
                None => {
                    batch.delete(key.as_bytes());
                    model.remove(key.as_bytes());
                }
            }
        }
        db.write(&batch, WriteOptions::default()).unwrap_or_else(|error| panic!("write: {error}"));
    };
    for generation in 0..3u32 {
        let mut entries = Vec::new();
        for number in 0..600u32 {
            if generation == 2 && number % 3 != 0 {
                continue;
            }
            let key = format!("key{number:05}");
            let len = match random.below(10) {
                0 => 70_000 + random.below(130_000) as usize,
                1..=3 => 1024 + random.below(5000) as usize,
                _ => 10 + random.below(900) as usize,
            };
            entries.push((key.clone(), Some(value_of(&key, generation, len))));
            if entries.len() == 16 {
                write(&entries, &mut model);
                entries.clear();
            }
        }
        write(&entries, &mut model);
    }
    let deletes: Vec<(String, Option<Vec<u8>>)> =
        [7u32, 8, 9, 300].iter().map(|number| (format!("key{number:05}"), None)).collect();
    write(&deletes, &mut model);
    db.close().unwrap_or_else(|error| panic!("close: {error}"));
    assert!(model.values().any(|value| value.len() as u64 > SLOT_SIZE / 4), "no value larger than an entry");
    assert_eq!(read_all(&path), model, "the engine does not read back what it wrote");
    (path, model)
}

/// Every key and value of a volume, read by the engine.
fn read_all(path: &Path) -> Model {
    let (db, _) =
        Db::open_read_only(path, Options::default(), Duration::ZERO).unwrap_or_else(|error| panic!("open: {error}"));
    let all: Vec<(Vec<u8>, Vec<u8>)> =
        db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    all.into_iter().collect()
}

fn geometry_of(path: &Path) -> Geometry {
    let device =
        lds_volume::Device::open(path, lds_volume::OpenMode::ReadOnly).unwrap_or_else(|error| panic!("{error}"));
    let pair = lds_volume::read_labels(&device).unwrap_or_else(|error| panic!("{error}"));
    pair.choose().map(|(_, label)| label.geometry).unwrap_or_else(|error| panic!("{error:?}"))
}

fn has_value_chunks(path: &Path) -> bool {
    let device =
        lds_volume::Device::open(path, lds_volume::OpenMode::ReadOnly).unwrap_or_else(|error| panic!("{error}"));
    let pair = lds_volume::read_labels(&device).unwrap_or_else(|error| panic!("{error}"));
    pair.choose().map(|(_, label)| label.has_value_chunks()).unwrap_or_else(|error| panic!("{error:?}"))
}

fn zero(path: &Path, offset: u64, len: u64) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap_or_else(|error| panic!("{error}"));
    file.write_all_at(&vec![0; len as usize], offset).unwrap_or_else(|error| panic!("{error}"));
}

fn zero_version_log(path: &Path) {
    let (offset, len) = geometry_of(path).log_area(LogKind::Version, 0);
    zero(path, offset, len);
}

/// The value chunks on the volume, by their footers: (slot, footer).
fn value_chunks(path: &Path) -> Vec<(u64, ValueFooter)> {
    let geometry = geometry_of(path);
    let image = std::fs::read(path).unwrap_or_default();
    (0..geometry.num_slots)
        .filter_map(|slot| {
            let end = (geometry.slot_offset(slot) + geometry.slot_size) as usize;
            let footer = image.get(end - VALUE_FOOTER_LEN..end)?;
            let footer = ValueFooter::decode(footer, 0, geometry.slot_size).ok()?;
            (footer.volume_uuid == geometry.volume_uuid).then_some((slot, footer))
        })
        .collect()
}

/// The ids of the value chunks the volume's version lists.
fn listed_value_chunks(path: &Path) -> BTreeSet<u64> {
    let geometry = geometry_of(path);
    let context = lds_format::log::area_context(&geometry, LogKind::Version, 0);
    let image = std::fs::read(path).unwrap_or_default();
    let area = &image[context.ofs_area as usize..(context.ofs_area + context.len_area) as usize];
    let good =
        lds_format::algorithms::salvage::last_good_version(area, &context).unwrap_or_else(|| panic!("no version"));
    good.version.value_chunks.keys().copied().collect()
}

/// The keys the engine cannot read once the body of the value chunk in `slot` is zeroed (on
/// a copy): exactly those whose value has bytes there.
fn keys_in_value_chunk(source: &Path, slot: u64, footer: &ValueFooter, model: &Model) -> BTreeSet<Vec<u8>> {
    let name = source.file_stem().map(|stem| stem.to_string_lossy().into_owned()).unwrap_or_default();
    let copy = std::env::temp_dir().join(format!("{name}-oracle-{slot}.img"));
    let _files = volumes::Files(vec![copy.clone()]);
    std::fs::copy(source, &copy).unwrap_or_else(|error| panic!("{error}"));
    zero(&copy, geometry_of(&copy).slot_offset(slot), u64::from(footer.len_body));
    let (db, _) =
        Db::open_read_only(&copy, Options::default(), Duration::ZERO).unwrap_or_else(|error| panic!("open: {error}"));
    model
        .iter()
        .filter_map(|(key, value)| match db.get(key) {
            Ok(Some(read)) => {
                assert!(read == *value, "the engine read another value for {}", String::from_utf8_lossy(key));
                None
            }
            Ok(None) => panic!("the engine lost {}", String::from_utf8_lossy(key)),
            Err(_) => Some(key.clone()),
        })
        .collect()
}

/// A value chunk the version lists that holds at least one value written directly (which no
/// batch holds inline), and the keys whose values it holds.
fn chosen_value_chunk(source: &Path, model: &Model) -> (u64, ValueFooter, BTreeSet<Vec<u8>>) {
    let listed = listed_value_chunks(source);
    for (slot, footer) in value_chunks(source) {
        if !listed.contains(&footer.value_chunk_id) {
            continue;
        }
        let keys = keys_in_value_chunk(source, slot, &footer, model);
        if keys.iter().any(|key| model[key].len() >= DIRECT_MIN) {
            return (slot, footer, keys);
        }
    }
    panic!("no listed value chunk holds a large value");
}

/// Salvages `source` to a new volume: the exit code, the report, what the new volume holds.
fn salvage_to_volume(source: &Path, name: &str, files: &mut volumes::Files) -> (i32, serde_json::Value, Model) {
    let output = volumes::scratch("salvage-values", name);
    files.0.push(output.clone());
    let (code, out, err) = volumes::salvage(&json_args(source, Some(&output)));
    assert!(code == 0 || code == 1, "{code}: {out}{err}");
    let report: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|error| panic!("{error}: {out}"));
    let fsck = lds_cli::fsck::FsckOptions { path: output.clone(), deep: true, ..Default::default() };
    let mut fsck_out = Vec::new();
    assert_eq!(lds_cli::fsck::run(&fsck, &mut fsck_out, &mut Vec::new()), 0, "{}", String::from_utf8_lossy(&fsck_out));
    assert!(has_value_chunks(&output), "the output has no value chunks");
    (code, report, read_all(&output))
}

/// The keys salvage reported lost, each checked for a sequence number and a reason.
fn lost_keys(report: &serde_json::Value) -> BTreeSet<Vec<u8>> {
    let lost = report["lost_values"].as_array().cloned().unwrap_or_default();
    lost.iter()
        .map(|lost| {
            assert!(lost["sequence"].as_u64().is_some_and(|sequence| sequence > 0), "{lost}");
            assert!(lost["reason"].as_str().is_some_and(|reason| reason.contains("value chunk")), "{lost}");
            lost["key"].as_str().unwrap_or_else(|| panic!("{lost}")).as_bytes().to_vec()
        })
        .collect()
}

/// What salvage wrote is the model less the keys it reported lost, value for value; it lost
/// only keys of `may_lose` and every key of `must_lose`.
fn check_salvaged(
    got: &Model,
    lost: &BTreeSet<Vec<u8>>,
    model: &Model,
    may_lose: &BTreeSet<Vec<u8>>,
    must_lose: &BTreeSet<Vec<u8>>,
) {
    for (key, value) in got {
        let show = String::from_utf8_lossy(key);
        let want = model.get(key).unwrap_or_else(|| panic!("{show} salvaged, never written or deleted"));
        assert!(value == want, "{show}: salvaged {} bytes that are not its value of {} bytes", value.len(), want.len());
    }
    for key in model.keys() {
        let show = String::from_utf8_lossy(key);
        assert!(got.contains_key(key) != lost.contains(key), "{show}: kept {}, reported lost", got.contains_key(key));
    }
    assert!(lost.is_subset(may_lose), "lost values of keys whose values were intact: {lost:?}");
    assert!(must_lose.is_subset(lost), "values read that cannot be read: {must_lose:?} lost, {lost:?} reported");
}

/// Salvage with a JSON report.
fn json_args(path: &Path, output: Option<&Path>) -> SalvageArgs {
    SalvageArgs { json: true, ..volumes::salvage_args(path, output) }
}

#[test]
fn values_are_salvaged_through_their_pointers_without_version_log_or_labels() {
    let (source, model) = written_volume("whole");
    let mut files = volumes::Files(vec![source.clone()]);
    zero_version_log(&source);
    let before = std::fs::read(&source).unwrap_or_default();
    let (code, report, got) = salvage_to_volume(&source, "whole-out", &mut files);
    assert_eq!(code, 0, "{report}");
    assert!(std::fs::read(&source).unwrap_or_default() == before, "salvage wrote to its source");
    assert!(report["value_chunks"].as_u64() > Some(10), "{report}");
    assert!(report["values_read"].as_u64() >= Some(100), "{report}");
    check_salvaged(&got, &lost_keys(&report), &model, &BTreeSet::new(), &BTreeSet::new());

    // Both labels too: the value chunks are found by their footers all the same.
    let geometry = geometry_of(&source);
    zero(&source, 0, geometry.sector());
    zero(&source, geometry.ofs_backup_label(), geometry.sector());
    let (code, report, got) = salvage_to_volume(&source, "no-labels-out", &mut files);
    assert_eq!(code, 0, "{report}");
    assert!(report["layout_from"].as_str().is_some_and(|from| from.contains("chunk footers")), "{report}");
    check_salvaged(&got, &lost_keys(&report), &model, &BTreeSet::new(), &BTreeSet::new());

    // NDJSON: every value whole, the largest too.
    let (code, out, err) =
        volumes::salvage(&SalvageArgs { export: Some("ndjson".into()), json: false, ..json_args(&source, None) });
    assert_eq!(code, 0, "{err}");
    let exported: Model = out
        .lines()
        .map(|line| {
            let pair: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line}"));
            let text = |name: &str| pair[name].as_str().unwrap_or_else(|| panic!("{line}")).as_bytes().to_vec();
            (text("key"), text("value"))
        })
        .collect();
    assert!(exported == model, "the export differs from what was written");
}

#[test]
fn a_damaged_value_chunk_loses_only_its_values_and_names_them() {
    let (source, model) = written_volume("body");
    let mut files = volumes::Files(vec![source.clone()]);
    let (slot, footer, keys) = chosen_value_chunk(&source, &model);
    let large: BTreeSet<Vec<u8>> = keys.iter().filter(|key| model[*key].len() >= DIRECT_MIN).cloned().collect();
    // Its body zeroed, its footer intact: the digest fails and the values do not check.
    zero(&source, geometry_of(&source).slot_offset(slot), u64::from(footer.len_body));
    zero_version_log(&source);
    let (code, report, got) = salvage_to_volume(&source, "body-out", &mut files);
    assert_eq!(code, 1, "{report}");
    let lost = lost_keys(&report);
    check_salvaged(&got, &lost, &model, &keys, &large);
    let damaged = report["damaged"].to_string();
    assert!(damaged.contains(&format!("slot {slot}: value chunk {}", footer.value_chunk_id)), "{damaged}");
    let reasons = report["lost_values"].to_string();
    assert!(reasons.contains(&format!("at slot {slot}")) && reasons.contains("does not check"), "{reasons}");
    // A sequence number is the newest entry's: above zero and at most the volume's.
    assert!(report["lost_values"][0]["sequence"].as_u64().is_some_and(|sequence| sequence <= 2000), "{report}");

    // The text report names each lost value.
    let (code, out, _) = volumes::salvage(&SalvageArgs {
        json: false,
        ..json_args(&source, Some(&volumes::scratch("salvage-values", "body-text")))
    });
    files.0.push(volumes::scratch("salvage-values", "body-text"));
    assert_eq!(code, 1);
    let first = lost.iter().next().map(|key| String::from_utf8_lossy(key).into_owned()).unwrap_or_default();
    assert!(out.contains(&format!("lost value: instance 0 key \"{first}\" (sequence ")), "{out}");
    assert!(out.contains(&format!("{} keys whose value is lost not written", lost.len())), "{out}");
}

#[test]
fn a_value_chunk_whose_footer_is_lost_is_read_through_the_version_log() {
    let (source, model) = written_volume("footer");
    let mut files = volumes::Files(vec![source.clone()]);
    let (slot, footer, keys) = chosen_value_chunk(&source, &model);
    let large: BTreeSet<Vec<u8>> = keys.iter().filter(|key| model[*key].len() >= DIRECT_MIN).cloned().collect();
    let geometry = geometry_of(&source);
    zero(&source, geometry.slot_offset(slot) + geometry.slot_size - VALUE_FOOTER_LEN as u64, VALUE_FOOTER_LEN as u64);

    // The version log lists it: its body checks against the version's digest, nothing is lost
    // (the lost footer is reported).
    let (code, report, got) = salvage_to_volume(&source, "footer-out", &mut files);
    assert_eq!(code, 1, "{report}");
    let missing = format!("slot {slot}: value chunk {} (instance 0) has no valid footer", footer.value_chunk_id);
    assert!(report["damaged"].to_string().contains(&missing), "{report}");
    check_salvaged(&got, &lost_keys(&report), &model, &BTreeSet::new(), &BTreeSet::new());

    // Without the version log nothing says where it is: its values are lost, and only those.
    zero_version_log(&source);
    let (code, report, got) = salvage_to_volume(&source, "footer-no-log-out", &mut files);
    assert_eq!(code, 1, "{report}");
    let lost = lost_keys(&report);
    check_salvaged(&got, &lost, &model, &keys, &large);
    assert!(report["lost_values"].to_string().contains(&format!("value chunk {} is lost", footer.value_chunk_id)));
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2).map(|index| u8::from_str_radix(&text[2 * index..2 * index + 2], 16).unwrap_or(0)).collect()
}

/// Instance, key and value of an NDJSON line (as `lds scan --json` and salvage print them,
/// and as the frozen fixtures record their state).
fn ndjson_pair(line: &str) -> ((u64, Vec<u8>), Vec<u8>) {
    let pair: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line}"));
    let field = |name: &str| match (pair[name].as_str(), pair[format!("{name}_hex")].as_str()) {
        (Some(text), _) => text.as_bytes().to_vec(),
        (None, Some(hex)) => unhex(hex),
        (None, None) => panic!("no {name}: {line}"),
    };
    ((pair["instance"].as_u64().unwrap_or(0), field("key")), field("value"))
}

/// The volumes format 1.4 was frozen with (SPEC.md §17: value chunks written at flush and
/// before their batch, relocated and collected, two instances, pending values): salvaged with
/// their version logs and without, each gives exactly the state it was frozen with.
#[test]
fn the_frozen_volumes_with_value_chunks_salvage_to_their_state() {
    let folders = volumes::frozen_folders("1.4");
    assert!(folders.len() >= 5, "{folders:?}");
    let mut pointers = 0;
    for folder in folders {
        let name = folder.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        let state_text = std::fs::read_to_string(folder.join("state.ndjson")).unwrap_or_else(|error| panic!("{error}"));
        let state: BTreeMap<(u64, Vec<u8>), Vec<u8>> = state_text.lines().map(ndjson_pair).collect();
        let image = volumes::scratch("salvage-values", &format!("frozen-{name}"));
        let _files = volumes::Files(vec![image.clone()]);
        let packed = std::fs::read(folder.join("image.gz")).unwrap_or_else(|error| panic!("{error}"));
        let bytes = lds_fixtures::decompress(&packed).unwrap_or_else(|error| panic!("{name}: {error}"));
        std::fs::write(&image, bytes).unwrap_or_else(|error| panic!("{error}"));
        let geometry = geometry_of(&image);
        for with_version_log in [true, false] {
            if !with_version_log {
                for instance in 0..geometry.instance_count {
                    let (offset, len) = geometry.log_area(LogKind::Version, instance);
                    zero(&image, offset, len);
                }
            }
            let export = SalvageArgs { export: Some("ndjson".into()), json: true, ..json_args(&image, None) };
            let (code, out, err) = volumes::salvage(&export);
            assert_eq!(code, 0, "{name}: {err}");
            let report: serde_json::Value =
                serde_json::from_str(err.trim()).unwrap_or_else(|error| panic!("{name}: {error}: {err}"));
            pointers += report["values_read"].as_u64().unwrap_or(0);
            assert_eq!(report["lost_values"].as_array().map(Vec::len), Some(0), "{name}: {report}");
            let got: BTreeMap<(u64, Vec<u8>), Vec<u8>> = out.lines().map(ndjson_pair).collect();
            assert_eq!(got.len(), state.len(), "{name} (version log {with_version_log})");
            assert!(got == state, "{name} (version log {with_version_log}): other keys or values");
        }
    }
    assert!(pointers > 100, "{pointers} values read through pointers");
}
