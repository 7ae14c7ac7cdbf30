//! Guards `lds dump` on a volume with log chunks (format 1.6, SPEC.md §8.9): chunk metadata
//! with flag `log_refs` and its log start, log reference entries decoded and, with `--resolve`,
//! followed into the backup log (and the reason when one does not resolve), the retention
//! start and the retained bytes in the tree, backup log and volume views, compared with what
//! the engine wrote and reads; and that volumes without the feature show none of it.

mod volumes;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use clap::Parser;
use lds_cli::dump::{run, DumpOptions, DumpWhat};
use lds_cli::mkfs::MkfsOptions;
use lds_engine::{Db, Options, WriteOptions};
use lds_format::logref::LogRef;
use lds_format::version::meta::ChunkMeta;
use serde_json::Value;

/// What the engine says of the volume it wrote: its chunks and its retained bytes.
struct Written {
    chunks: Vec<ChunkMeta>,
    log_references: u64,
    log_retained_bytes: u64,
    model: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// A volume whose flush wrote one log chunk (600 puts of 30 to 120 bytes, most of them
/// references), then puts left in the backup log after the backup start.
fn written_volume(path: &Path) -> Written {
    let options = MkfsOptions {
        path: path.to_path_buf(),
        size: Some(64 << 20),
        slot_size: Some(256 << 10),
        backup_log_size: Some(4 << 20),
        sector_size: Some(512),
        // A fixed uuid: the image, and so the snapshots, are the same on every run.
        uuid: Some([0x16; 16]),
        log_tables: true,
        ..Default::default()
    };
    assert_eq!(lds_cli::mkfs::run(&options, &mut Vec::new(), &mut Vec::new()), 0);
    let engine = Options { background: false, write_buffer_size: 256 << 10, ..Options::default() }
        .with_techniques("triad-log")
        .unwrap_or_else(|error| panic!("{error}"));
    let db = Db::open(path, engine).unwrap_or_else(|error| panic!("{error}"));
    let mut model = BTreeMap::new();
    for number in 0..600u32 {
        let key = format!("key-{number:06}").into_bytes();
        let value = format!("value-{number:06}-{}", "x".repeat((number % 100) as usize + 17)).into_bytes();
        db.put(&key, &value, WriteOptions::default()).unwrap_or_else(|error| panic!("{error}"));
        model.insert(key, value);
    }
    db.flush().unwrap_or_else(|error| panic!("{error}"));
    for number in 0..5u32 {
        let key = format!("late-{number}").into_bytes();
        let value = format!("late value {number} {}", "y".repeat(40)).into_bytes();
        db.put(&key, &value, WriteOptions { sync: true }).unwrap_or_else(|error| panic!("{error}"));
        model.insert(key, value);
    }
    let stats = db.stats();
    let written = Written {
        chunks: db.chunks(),
        log_references: stats.log_references,
        log_retained_bytes: stats.log_retained_bytes,
        model,
    };
    db.close().unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(stats.log_chunk_flushes, 1, "the flush wrote no log chunk: {stats:?}");
    written
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

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len() / 2).map(|at| u8::from_str_radix(&text[2 * at..2 * at + 2], 16).unwrap_or(0)).collect()
}

/// The entries of every sub-chunk of a chunk document.
fn entries(chunk: &Value) -> Vec<Value> {
    chunk["sub_chunks"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|sub| sub["entries"].as_array())
        .flatten()
        .cloned()
        .collect()
}

/// Runs the `lds` command line, as a user types it: exit code, output, errors.
fn lds(args: &[&str]) -> (i32, String, String) {
    let cli = lds_cli::cli::Cli::try_parse_from(std::iter::once("lds").chain(args.iter().copied()))
        .unwrap_or_else(|error| panic!("{args:?}: {error}"));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = lds_cli::cli::run(cli, &mut out, &mut err);
    (code, String::from_utf8_lossy(&out).into_owned(), String::from_utf8_lossy(&err).into_owned())
}

#[test]
fn dump_shows_log_chunks_follows_their_references_and_counts_the_retained_log() {
    let image = volumes::scratch("dump-log-chunks", "volume");
    let _files = volumes::Files(vec![image.clone()]);
    let written = written_volume(&image);
    let log_chunk = written.chunks.iter().find(|chunk| chunk.is_log_chunk()).unwrap_or_else(|| panic!("no log chunk"));
    let start = log_chunk.log_start.unwrap_or_else(|| panic!("a log chunk without a log start"));

    // The tree: the log chunk with its log start, and the engine's retention and retained bytes.
    let tree = dump_json(&image, DumpWhat::Tree);
    assert_eq!(number(&tree, "num_log_chunks"), 1, "{tree}");
    assert_eq!(number(&tree, "lsn_retention_start"), start.lsn);
    assert_eq!(number(&tree, "ofs_retention_start"), start.offset);
    assert_eq!(number(&tree, "retained_bytes"), written.log_retained_bytes);
    assert!(written.log_retained_bytes > 0);
    let meta = tree["levels"][0]["chunks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|chunk| number(chunk, "chunk_id") == log_chunk.chunk_id)
        .unwrap_or_else(|| panic!("the log chunk is not in level 0: {tree}"));
    assert_eq!(number(meta, "flags") & 4, 4, "{meta}");
    assert_eq!((number(meta, "lsn_log_start"), number(meta, "ofs_log_start")), (start.lsn, start.offset));
    let (_, text, _) = dump(&image, DumpWhat::Tree, false);
    let retention_line = format!(
        "retention start {} (lsn {}): {} bytes of the backup log retained for 1 log chunks",
        start.offset, start.lsn, written.log_retained_bytes
    );
    assert!(text.contains(&retention_line), "{text}");
    assert!(text.contains(&format!("log chunk, log start {} (lsn {})", start.offset, start.lsn)), "{text}");

    // The chunk: every log_ref entry decoded from its value, its references the flush's.
    let chunk = dump_json(&image, DumpWhat::Chunk(log_chunk.chunk_id));
    assert_eq!(chunk["meta"], *meta);
    let listed = entries(&chunk);
    let references: Vec<&Value> = listed.iter().filter(|entry| entry["kind"] == "log_ref").collect();
    assert_eq!(references.len() as u64, written.log_references);
    assert!(references.len() > 400, "{} references", references.len());
    let mut oldest = u64::MAX;
    for entry in &references {
        let decoded = LogRef::decode(&unhex(entry["value"].as_str().unwrap_or("")), 0)
            .unwrap_or_else(|error| panic!("{error}: {entry}"));
        assert_eq!(entry["log_ref"], json_of(&decoded), "{entry}");
        assert!(entry.get("resolved").is_none(), "resolved without --resolve: {entry}");
        oldest = oldest.min(decoded.lsn);
    }
    assert_eq!(oldest, start.lsn, "the log start is not the oldest object referenced");
    for entry in listed.iter().filter(|entry| entry["kind"] != "log_ref") {
        assert!(entry.get("log_ref").is_none(), "{entry}");
    }

    // --resolve: every reference resolves to the value the engine serves for its key.
    let resolved = dump_json(&image, DumpWhat::ChunkResolved(log_chunk.chunk_id));
    let resolved_entries = entries(&resolved);
    assert_eq!(resolved_entries.len(), listed.len());
    for entry in resolved_entries.iter().filter(|entry| entry["kind"] == "log_ref") {
        assert_eq!(entry["status"]["log_ref"], "ok", "{entry}");
        let key = unhex(entry["key"].as_str().unwrap_or(""));
        let value = unhex(entry["resolved"].as_str().unwrap_or(""));
        assert_eq!(Some(&value), written.model.get(&key), "{entry}");
    }
    let (code, text, err) = dump(&image, DumpWhat::ChunkResolved(log_chunk.chunk_id), false);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains(&format!(
            "log chunk (flag log_refs): log start at offset {} of the backup log (lsn {})",
            start.offset, start.lsn
        )),
        "{text}"
    );
    let first = references[0];
    let reference = &first["log_ref"];
    let value = written.model.get(&unhex(first["key"].as_str().unwrap_or(""))).cloned().unwrap_or_default();
    let line = format!(
        "log_ref -> {} bytes: entry {} of the write batch at offset {} of the backup log (lsn {}) = {}",
        number(reference, "len_value"),
        number(reference, "entry_index"),
        number(reference, "ofs_object"),
        number(reference, "lsn"),
        String::from_utf8_lossy(&value)
    );
    assert!(text.contains(&line), "no line {line:?} in\n{text}");

    // The backup log: the retained objects are the batches from the log start to the backup
    // start, and their bytes are the retained bytes (no wrap here).
    let backup = dump_json(&image, DumpWhat::BackupLog);
    assert_eq!(number(&backup, "retained_bytes"), written.log_retained_bytes);
    assert_eq!(number(&backup, "lsn_retention_start"), start.lsn);
    let objects = backup["objects"].as_array().cloned().unwrap_or_default();
    let retained: Vec<&Value> = objects.iter().filter(|object| object["status"]["retained"] == true).collect();
    let in_region = |object: &Value| {
        let lsn = number(object, "lsn");
        lsn >= start.lsn && lsn < number(&backup, "lsn_backup_start")
    };
    assert!(!retained.is_empty());
    assert_eq!(retained.len(), objects.iter().filter(|object| in_region(object)).count());
    for object in &retained {
        assert!(in_region(object) && object["status"]["live"] == false, "{object}");
        assert!(object["status"]["reason"].as_str().is_some_and(|reason| reason.starts_with("retained")), "{object}");
    }
    let bytes: u64 = retained.iter().map(|object| (64 + number(object, "len_payload")).div_ceil(8) * 8).sum();
    assert_eq!(bytes, written.log_retained_bytes);
    assert!(objects.iter().any(|object| object["status"]["live"] == true), "the late puts are not replayed");

    // The volume: its instance's status carries the retention; the human form the lines.
    let volume = dump_json(&image, DumpWhat::Volume);
    let status = &volume["instances"][0]["status"];
    assert_eq!(status["recovery"], "ok", "{status}");
    assert_eq!(number(status, "retained_bytes"), written.log_retained_bytes);
    assert_eq!(
        (number(status, "lsn_retention_start"), number(status, "ofs_retention_start")),
        (start.lsn, start.offset)
    );
    let (_, text, _) = dump(&image, DumpWhat::Volume, false);
    assert!(text.contains(&retention_line), "{text}");
    assert!(text.contains("(1 log chunks)"), "no delta version shows its log chunk:\n{text}");

    // The command line: --resolve with `chunk ID`, and only there.
    let path = image.display().to_string();
    let id = log_chunk.chunk_id.to_string();
    let (code, out, err) = lds(&["dump", &path, "chunk", &id, "--resolve", "--json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(serde_json::from_str::<Value>(&out).unwrap_or_default(), resolved);
    let (code, _, err) = lds(&["dump", &path, "tree", "--resolve"]);
    assert_eq!(code, 16);
    assert!(err.contains("--resolve goes with `chunk ID`"), "{err}");
}

fn json_of(reference: &LogRef) -> Value {
    serde_json::json!({
        "lsn": reference.lsn,
        "ofs_object": reference.ofs_object,
        "entry_index": reference.entry_index,
        "len_value": reference.len_value,
    })
}

#[test]
fn a_reference_that_does_not_resolve_says_why_and_where() {
    let image = volumes::scratch("dump-log-chunks", "damaged");
    let _files = volumes::Files(vec![image.clone()]);
    let written = written_volume(&image);
    let log_chunk = written.chunks.iter().find(|chunk| chunk.is_log_chunk()).unwrap_or_else(|| panic!("no log chunk"));
    let chunk = dump_json(&image, DumpWhat::Chunk(log_chunk.chunk_id));
    let volume = dump_json(&image, DumpWhat::Label);
    let ofs_backup_log = number(&volume["primary"]["geometry"], "ofs_backup_log");
    let listed = entries(&chunk);
    let victim = listed.iter().find(|entry| entry["kind"] == "log_ref").cloned().unwrap_or_default();
    let ofs_object = number(&victim["log_ref"], "ofs_object");

    // One payload byte of the batch the first reference names: its checksum no longer holds.
    let mut bytes = std::fs::read(&image).unwrap_or_else(|error| panic!("{error}"));
    let at = (ofs_backup_log + ofs_object + 64 + 30) as usize;
    bytes[at] ^= 0x20;
    std::fs::write(&image, &bytes).unwrap_or_else(|error| panic!("{error}"));

    let resolved = dump_json(&image, DumpWhat::ChunkResolved(log_chunk.chunk_id));
    let mut failed = 0;
    for entry in entries(&resolved).iter().filter(|entry| entry["kind"] == "log_ref") {
        let status = entry["status"]["log_ref"].as_str().unwrap_or("");
        if number(&entry["log_ref"], "ofs_object") == ofs_object {
            // Names the object in the area and on the device, and what failed.
            let device_offset = (ofs_backup_log + ofs_object).to_string();
            assert!(status.contains(&device_offset) && status.contains("checksum"), "{status}");
            assert!(entry["resolved"].is_null(), "{entry}");
            failed += 1;
        } else {
            assert_eq!(status, "ok", "{entry}");
        }
    }
    assert!(failed > 0, "no reference names the damaged batch");
    let (code, text, _) = dump(&image, DumpWhat::ChunkResolved(log_chunk.chunk_id), false);
    assert_eq!(code, 0, "a reference that does not resolve is shown, not fatal");
    assert_eq!(text.matches(": does not resolve: ").count(), failed, "{text}");
}

#[test]
fn volumes_without_log_tables_show_no_retention() {
    let image = volumes::scratch("dump-log-chunks", "plain");
    let _files = volumes::Files(vec![image.clone()]);
    let options = MkfsOptions { path: image.clone(), size: Some(16 << 20), ..Default::default() };
    assert_eq!(lds_cli::mkfs::run(&options, &mut Vec::new(), &mut Vec::new()), 0);
    let db = Db::open(&image, Options::default()).unwrap_or_else(|error| panic!("{error}"));
    db.put(b"key", b"a value longer than a log reference", WriteOptions { sync: true })
        .unwrap_or_else(|error| panic!("{error}"));
    db.close().unwrap_or_else(|error| panic!("{error}"));
    let tree = dump_json(&image, DumpWhat::Tree);
    assert!(tree.get("retained_bytes").is_none() && tree.get("ofs_retention_start").is_none(), "{tree}");
    let backup = dump_json(&image, DumpWhat::BackupLog);
    assert!(backup.get("retained_bytes").is_none(), "{backup}");
    let objects = backup["objects"].as_array().cloned().unwrap_or_default();
    assert!(!objects.is_empty() && objects.iter().all(|object| object["status"].get("retained").is_none()));
    let volume = dump_json(&image, DumpWhat::Volume);
    assert!(volume["instances"][0].get("status").is_none(), "{}", volume["instances"][0]);
    let (_, text, _) = dump(&image, DumpWhat::Tree, false);
    assert!(!text.contains("retention start"), "{text}");
}

#[test]
fn dump_views_of_a_log_chunk_volume_match_snapshots() {
    let image = volumes::scratch("dump-log-chunks", "snapshots");
    let _files = volumes::Files(vec![image.clone()]);
    let written = written_volume(&image);
    let log_chunk = written.chunks.iter().find(|chunk| chunk.is_log_chunk()).unwrap_or_else(|| panic!("no log chunk"));
    // The first `head` lines and the last `tail`: the lines between are more of the same.
    let view = |what: DumpWhat, head: usize, tail: usize| {
        let (code, text, err) = dump(&image, what, false);
        let lines: Vec<&str> = text.lines().collect();
        let mut kept: Vec<&str> = lines.iter().copied().take(head).collect();
        if lines.len() > head + tail {
            kept.push("...");
        }
        kept.extend(lines.iter().copied().skip(head.max(lines.len().saturating_sub(tail))));
        format!("exit {code}\n{}\n{err}", kept.join("\n")).replace(&image.display().to_string(), "IMAGE")
    };
    insta::assert_snapshot!("log_chunks__tree", view(DumpWhat::Tree, 20, 0));
    insta::assert_snapshot!("log_chunks__backup_log", view(DumpWhat::BackupLog, 4, 9));
    insta::assert_snapshot!("log_chunks__chunk_resolved", view(DumpWhat::ChunkResolved(log_chunk.chunk_id), 5, 2));
}
