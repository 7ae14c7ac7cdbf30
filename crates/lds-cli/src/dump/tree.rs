//! `lds dump IMAGE tree`: the recovered levels and chunks of an instance, its value chunks
//! and its unfinished compaction.

use std::io::Write;

use lds_format::error::hex;
use lds_format::version::Version;
use lds_volume::inspect::RetainedLog;
use serde_json::{json, Value};

use super::{describe_retained, device_name, emit, insert_retained, io, recover, DumpError, DumpOptions, View};
use crate::json;
use crate::render::printable;

pub(super) fn dump_tree(volume: &View<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), DumpError> {
    let (_, recovery) = recover(volume, options.instance)?;
    let recovery = recovery.map_err(|source| DumpError::Recovery {
        device: device_name(options),
        instance: options.instance,
        source,
    })?;
    let state = &recovery.version_log;
    let version = &state.version;
    // Only on a volume with feature `log_tables` (format 1.6), so that the documents of other
    // volumes stay what lds-dump/1 always gave.
    let kept_log = volume.label.has_log_tables().then(|| RetainedLog::of(version, volume.geometry().len_backup_log));
    let levels: Vec<Value> = (0..version.num_levels as u8)
        .map(|level| {
            let chunks = version.level(level);
            json!({
                "level": level,
                "num_chunks": chunks.len(),
                "len_data": chunks.iter().map(|chunk| chunk.len_data).sum::<u64>(),
                "chunks": chunks.iter().map(|chunk| json::chunk_meta(chunk)).collect::<Vec<_>>(),
            })
        })
        .collect();
    let unfinished = state.unfinished_compactions.values().next_back().map_or(Value::Null, |journal| {
        json!({
            "compaction_id": journal.compaction_id,
            "resume_key": hex(&journal.resume_key),
            "inputs": journal.inputs,
            "outputs": journal.outputs.iter().map(|output| output.chunk_id).collect::<Vec<_>>(),
            "cleaned": journal.cleaned,
        })
    });
    if options.json {
        let mut document = json::document("tree", &device_name(options));
        document.insert("instance".into(), json!(options.instance));
        document.insert("sn".into(), json!(state.sn));
        document.insert("last_sequence".into(), json!(version.last_sequence));
        document.insert("ofs_backup_start".into(), json!(version.ofs_backup_start));
        document.insert("lsn_backup_start".into(), json!(version.lsn_backup_start));
        if let Some(kept_log) = &kept_log {
            insert_retained(&mut document, kept_log);
        }
        document.insert("levels".into(), Value::Array(levels));
        document.insert("unfinished_compaction".into(), unfinished);
        // Only with a value section (feature `value_chunks`, format 1.4).
        if version.has_values {
            document.insert("values".into(), tree_values(version));
        }
        return emit(out, Value::Object(document));
    }
    writeln!(
        out,
        "tree of instance {}: sn {}, last sequence {}, backup start {} (lsn {}), {} chunks",
        options.instance,
        state.sn,
        version.last_sequence,
        version.ofs_backup_start,
        version.lsn_backup_start,
        version.chunks.len()
    )
    .map_err(io)?;
    if let Some(kept_log) = &kept_log {
        writeln!(out, "  {}", describe_retained(kept_log)).map_err(io)?;
    }
    for level in 0..version.num_levels as u8 {
        let chunks = version.level(level);
        if chunks.is_empty() {
            continue;
        }
        let bytes: u64 = chunks.iter().map(|chunk| chunk.len_data).sum();
        writeln!(out, "  level {level}: {} chunks, {} bytes", chunks.len(), bytes).map_err(io)?;
        for chunk in chunks {
            writeln!(
                out,
                "    chunk {:>6}{}  {} .. {}  {} entries  seq {}..{}{}",
                chunk.chunk_id,
                if chunk.is_odd() { " odd" } else { "    " },
                printable(&chunk.smallest_key),
                printable(&chunk.largest_key),
                chunk.num_entries,
                chunk.smallest_seq,
                chunk.largest_seq,
                chunk.log_start.filter(|_| chunk.is_log_chunk()).map_or(String::new(), |start| format!(
                    "  log chunk, log start {} (lsn {})",
                    start.offset, start.lsn
                ))
            )
            .map_err(io)?;
        }
    }
    if version.has_values {
        let len_body: u64 = version.value_chunks.values().map(|chunk| u64::from(chunk.len_body)).sum();
        let live: u64 = version.value_chunks.keys().map(|&id| version.live_bytes(id)).sum();
        writeln!(
            out,
            "  value chunks: {} (next id {}), {len_body} bytes of values, {live} live",
            version.value_chunks.len(),
            version.next_value_chunk_id
        )
        .map_err(io)?;
    }
    if let Some(journal) = state.unfinished_compactions.values().next_back() {
        writeln!(
            out,
            "  unfinished compaction {}: level {} -> {}, resume after {}, {} outputs persisted, {} inputs cleaned",
            journal.compaction_id,
            journal.source_level,
            journal.target_level,
            printable(&journal.resume_key),
            journal.outputs.len(),
            journal.cleaned.len()
        )
        .map_err(io)?;
    }
    Ok(())
}

/// The value chunks of a recovered version with their live bytes, for `what: "tree"`.
fn tree_values(version: &Version) -> Value {
    let chunks: Vec<Value> = version
        .value_chunks
        .values()
        .map(|chunk| {
            let mut value = json::value_chunk_meta(chunk);
            if let Value::Object(map) = &mut value {
                map.insert("live_bytes".into(), json!(version.live_bytes(chunk.value_chunk_id)));
            }
            value
        })
        .collect();
    json!({
        "next_value_chunk_id": version.next_value_chunk_id,
        "num_value_chunks": chunks.len(),
        "value_chunks": chunks,
    })
}
