//! Guards `lds dump` on a volume with value chunks (format 1.4, SPEC.md §8.6): the value
//! sections of base and delta versions, chunk value references, pointer entries of batches and
//! blocks decoded, value chunk footers in the volume view, and `lds dump value-chunks`, whose
//! live bytes, pending value chunks and footer and digest checks are compared with what the
//! engine wrote and with damage done on purpose.

mod volumes;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use lds_cli::dump::{run, DumpOptions, DumpWhat};
use lds_cli::mkfs::MkfsOptions;
use lds_engine::{Db, Options, WriteOptions};
use serde_json::Value;

fn value_of(number: usize, len: usize) -> Vec<u8> {
    format!("value-{number}-").bytes().cycle().take(len).collect()
}

/// A volume with value chunks: values from 1 KiB separated at flush (some of them overwritten,
/// leaving garbage), then writes left in the backup log, the large ones written directly to
/// value chunks that only the backup log names.
fn written_volume(path: &Path) {
    volumes::mkfs_with_value_chunks(path, 64 << 20, 256 << 10);
    for round in 0..2 {
        let input: String = (0..1500)
            .filter(|number| round == 0 || number % 3 == 0)
            .map(|number| {
                let len = if number % 7 == 0 { 100 } else { 1024 + (number * 37 + round * 11) % 6000 };
                let key = format!("key{number:05}");
                format!("{}\t{}\n", hex(key.as_bytes()), hex(&value_of(number + round * 10_000, len)))
            })
            .collect();
        volumes::load_separated(path, &input, true);
    }
    let db = volumes::open_separated(path, 16 << 10);
    for number in 0..6 {
        let len = if number % 2 == 0 { 40_000 + number } else { 300 + number };
        db.put(format!("late{number}").as_bytes(), &value_of(50_000 + number, len), WriteOptions { sync: true })
            .unwrap_or_else(|error| panic!("{error}"));
    }
    db.close().unwrap_or_else(|error| panic!("{error}"));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2).map(|at| u8::from_str_radix(&text[2 * at..2 * at + 2], 16).unwrap_or(0)).collect()
}

/// `lds dump` of one view: exit code, output, errors.
fn dump(path: &Path, what: DumpWhat, json: bool) -> (i32, String, String) {
    let options =
        DumpOptions { path: path.to_path_buf(), what, instance: 0, json, entries: true, wait: Duration::ZERO };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(&options, &mut out, &mut err);
    (code, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}

fn dump_json(path: &Path, what: DumpWhat) -> Value {
    let (code, out, err) = dump(path, what, true);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap_or_else(|error| panic!("{error}: {out}"))
}

fn number(value: &Value, name: &str) -> u64 {
    value[name].as_u64().unwrap_or_else(|| panic!("no {name} in {value}"))
}

/// Every key and value the engine reads.
fn read_all(path: &Path) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let (db, _) =
        Db::open_read_only(path, Options::default(), Duration::ZERO).unwrap_or_else(|error| panic!("open: {error}"));
    db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The value a pointer of the JSON names, read from the image by the rule of SPEC.md §8.6.
fn follow(image: &[u8], geometry: &Value, slots: &BTreeMap<u64, u64>, pointer: &Value) -> Vec<u8> {
    let mut value = Vec::new();
    for extent in pointer["extents"].as_array().into_iter().flatten() {
        let slot = slots.get(&number(extent, "value_chunk_id")).copied().unwrap_or(number(extent, "slot"));
        let at = (number(geometry, "ofs_slot_area") + slot * number(geometry, "slot_size") + number(extent, "offset"))
            as usize;
        value.extend_from_slice(&image[at..at + number(extent, "len") as usize]);
    }
    value
}

#[test]
fn dump_shows_value_chunks_and_follows_pointers() {
    let image = volumes::scratch("dump-values", "volume");
    let damaged = volumes::scratch("dump-values", "damaged");
    let _files = volumes::Files(vec![image.clone(), damaged.clone()]);
    written_volume(&image);
    let served = read_all(&image);
    let bytes = std::fs::read(&image).unwrap_or_default();

    // value-chunks: every value chunk of the version checks; live bytes are the chunks' value
    // references (the tree's); the direct writes are pending.
    let listed = dump_json(&image, DumpWhat::ValueChunks);
    let instance = &listed["instances"][0];
    assert_eq!(instance["recovery"], "ok", "{instance}");
    let chunks = instance["value_chunks"].as_array().cloned().unwrap_or_default();
    let pending = instance["pending"].as_array().cloned().unwrap_or_default();
    assert!(chunks.len() >= 2 && !pending.is_empty(), "{} value chunks, {} pending", chunks.len(), pending.len());
    for chunk in chunks.iter().chain(&pending) {
        assert_eq!(chunk["status"]["footer"], "ok", "{chunk}");
        assert_eq!(chunk["status"]["digest"], "ok", "{chunk}");
        assert_eq!(chunk["footer"]["magic"], "LDSVALUE");
        assert_eq!(chunk["footer"]["value_chunk_id"], chunk["value_chunk_id"]);
    }
    let tree = dump_json(&image, DumpWhat::Tree);
    let mut live = BTreeMap::new();
    for chunk in tree["levels"].as_array().into_iter().flatten().flat_map(|level| level["chunks"].as_array()).flatten()
    {
        assert_eq!(chunk["flags"].as_u64().unwrap_or(0) & 2 != 0, chunk.get("value_refs").is_some(), "{chunk}");
        for reference in chunk["value_refs"].as_array().into_iter().flatten() {
            *live.entry(number(reference, "value_chunk_id")).or_insert(0) += number(reference, "bytes");
        }
    }
    let listed_live: BTreeMap<u64, u64> =
        chunks.iter().map(|chunk| (number(chunk, "value_chunk_id"), number(chunk, "live_bytes"))).collect();
    assert_eq!(listed_live, live);
    assert!(chunks.iter().any(|chunk| number(chunk, "garbage_bytes") > 0), "the overwrites left no garbage");
    assert_eq!(number(&tree["values"], "num_value_chunks"), chunks.len() as u64);
    assert_eq!(instance["next_value_chunk_id"], tree["values"]["next_value_chunk_id"]);
    let slots: BTreeMap<u64, u64> =
        chunks.iter().map(|chunk| (number(chunk, "value_chunk_id"), number(chunk, "slot"))).collect();

    // The volume view: value chunk footers in their slots, value sections, batch pointers.
    let volume = dump_json(&image, DumpWhat::Volume);
    let geometry = volume["labels"]["primary"]["geometry"].clone();
    let footers: Vec<&Value> =
        volume["slots"].as_array().into_iter().flatten().filter(|slot| slot.get("value_footer").is_some()).collect();
    for chunk in chunks.iter().chain(&pending) {
        let slot = footers.iter().find(|slot| slot["slot"] == chunk["slot"]).unwrap_or_else(|| panic!("{chunk}"));
        assert_eq!(slot["value_footer"], chunk["footer"]);
        assert!(slot["footer"].is_null());
    }
    let objects: Vec<&Value> = ["version_log", "backup_log"]
        .iter()
        .flat_map(|log| volume["instances"][0][log]["left"].as_array().into_iter().flatten())
        .collect();
    let payloads = |kind: &str| -> Vec<&Value> {
        objects.iter().filter(|object| object["object_type"] == kind).map(|object| &object["payload"]).collect()
    };
    assert!(payloads("base_version").iter().all(|payload| payload["values"]["value_chunks"].is_array()));
    let added: Vec<&Value> = payloads("delta_version")
        .iter()
        .flat_map(|payload| payload["values"]["value_added"].as_array())
        .flatten()
        .collect();
    assert!(!added.is_empty(), "no delta version adds a value chunk");
    let mut batch_pointers = 0;
    for entry in payloads("write_batch").iter().flat_map(|payload| payload["entries"].as_array()).flatten() {
        match entry["kind"].as_str() {
            Some("pointer") => {
                let value = follow(&bytes, &geometry, &slots, &entry["pointer"]);
                assert_eq!(value.len() as u64, number(&entry["pointer"], "len_value"), "{entry}");
                batch_pointers += 1;
            }
            _ => assert!(entry.get("pointer").is_none(), "{entry}"),
        }
    }
    assert!(batch_pointers >= 3, "{batch_pointers} pointers in batches");

    // Chunk entries: every newest pointer, followed by hand, gives what the engine serves.
    let mut followed = 0;
    for chunk_id in tree["levels"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|level| level["chunks"].as_array())
        .flatten()
        .map(|chunk| number(chunk, "chunk_id"))
    {
        let chunk = dump_json(&image, DumpWhat::Chunk(chunk_id));
        for entry in
            chunk["sub_chunks"].as_array().into_iter().flatten().flat_map(|sub| sub["entries"].as_array()).flatten()
        {
            if entry["kind"] != "pointer" {
                assert!(entry.get("pointer").is_none(), "{entry}");
                continue;
            }
            let key = unhex(entry["key"].as_str().unwrap_or(""));
            let value = follow(&bytes, &geometry, &slots, &entry["pointer"]);
            assert_eq!(value.len() as u64, number(&entry["pointer"], "len_value"));
            if served.get(&key) == Some(&value) {
                followed += 1;
            }
        }
    }
    assert!(followed > 1000, "only {followed} pointers lead to the values the engine serves");

    // Human views.
    let (code, text, _) = dump(&image, DumpWhat::ValueChunks, false);
    assert_eq!(code, 0);
    assert!(text.contains(&format!("{} in the version", chunks.len())), "{text}");
    assert!(text.contains("ok / ok") && text.contains("pending: named only by the backup log"), "{text}");
    let (_, text, _) = dump(&image, DumpWhat::Slots, false);
    assert!(text.contains("hold value chunks") && text.contains('V'), "{text}");
    let first = &chunks[0];
    let (code, _, err) = dump(&image, DumpWhat::Chunk(number(first, "slot")), false);
    assert_eq!(code, 1);
    assert!(err.contains("the slot holds a value chunk"), "{err}");

    // Damage: a byte of one value chunk's body, and another's footer.
    let mut broken = bytes.clone();
    let slot_at =
        |chunk: &Value| number(&geometry, "ofs_slot_area") + number(chunk, "slot") * number(&geometry, "slot_size");
    broken[slot_at(first) as usize + 10] ^= 0x40;
    let second = &chunks[1];
    let footer_at = slot_at(second) + number(&geometry, "slot_size") - 160;
    broken[footer_at as usize + 20] ^= 1;
    std::fs::write(&damaged, &broken).unwrap_or_else(|error| panic!("{error}"));
    let listed = dump_json(&damaged, DumpWhat::ValueChunks);
    for chunk in listed["instances"][0]["value_chunks"].as_array().into_iter().flatten() {
        let status = &chunk["status"];
        match chunk["value_chunk_id"] {
            ref id if *id == first["value_chunk_id"] => {
                assert_eq!(status["footer"], "ok");
                assert!(status["digest"].as_str().is_some_and(|digest| digest.contains("digest")), "{status}");
            }
            ref id if *id == second["value_chunk_id"] => {
                let footer = status["footer"].as_str().unwrap_or("");
                assert!(footer.contains("checksum") && footer.contains(&footer_at.to_string()), "{status}");
                assert!(status["digest"].as_str().is_some_and(|digest| digest.starts_with("not checked")), "{status}");
            }
            _ => assert_eq!(*status, serde_json::json!({"footer": "ok", "digest": "ok"})),
        }
    }
}

#[test]
fn a_volume_without_value_chunks_has_none() {
    let image = volumes::scratch("dump-values", "plain");
    let _files = volumes::Files(vec![image.clone()]);
    let options = MkfsOptions { path: image.clone(), size: Some(16 << 20), ..Default::default() };
    assert_eq!(lds_cli::mkfs::run(&options, &mut Vec::new(), &mut Vec::new()), 0);
    let listed = dump_json(&image, DumpWhat::ValueChunks);
    let instance = &listed["instances"][0];
    assert!(instance["next_value_chunk_id"].is_null(), "{instance}");
    assert_eq!(instance["value_chunks"], serde_json::json!([]));
    let (code, text, _) = dump(&image, DumpWhat::ValueChunks, false);
    assert_eq!(code, 0);
    assert!(text.contains("none (the version has no value section)"), "{text}");
    let tree = dump_json(&image, DumpWhat::Tree);
    assert!(tree.get("values").is_none(), "{tree}");
}
