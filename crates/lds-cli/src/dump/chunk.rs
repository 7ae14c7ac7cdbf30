//! `lds dump IMAGE chunk ID [--entries|--resolve]`: a chunk's sub-chunks (footer, index,
//! filter, sketch, digest) and entries, each log reference followed into the backup log with
//! `--resolve` (SPEC.md §8.9).

use std::io::Write;

use lds_format::entry::{unpack_seq_kind, EntryKind};
use lds_format::error::hex;
use lds_format::logref::LogRef;
use lds_format::value::ValuePointer;
use lds_volume::inspect::{self, LogResolver};
use serde_json::{json, Map, Value};

use super::{device_name, emit, io, DumpError, DumpOptions, View};
use crate::json;
use crate::render::printable;

/// Dumps chunk `chunk_id`; with `resolve`, its entries with each log reference followed
/// (SPEC.md §8.9).
pub(super) fn dump_chunk(
    volume: &View<'_>,
    options: &DumpOptions,
    chunk_id: u64,
    resolve: bool,
    out: &mut dyn Write,
) -> Result<(), DumpError> {
    let geometry = *volume.geometry();
    let chunk = match inspect::chunk(volume.device, &geometry, chunk_id, options.entries || resolve) {
        Ok(chunk) => chunk,
        Err(error) => {
            // A value chunk's slot is not a chunk: say where to look.
            let value_chunk = volume.label.slot_present(chunk_id)
                && inspect::slot_footers(volume.device, &geometry, chunk_id)
                    .is_ok_and(|footers| footers.value.is_some());
            let hint = match value_chunk {
                true => " (the slot holds a value chunk: see lds dump IMAGE value-chunks)",
                false => "",
            };
            return Err(DumpError::Chunk { device: device_name(options), source: error, hint });
        }
    };
    let meta = chunk.meta;
    // The instance whose backup log the references name: the one whose version lists the
    // chunk, else (a stale slot) the one its footer names.
    let owner =
        meta.as_ref().map(|(instance, _)| *instance).or(chunk.sub_chunks.first().map(|sub| sub.footer.instance));
    let mut resolver = match (resolve, owner) {
        (true, Some(instance)) => Some(LogResolver::new(volume.device, &geometry, instance)),
        _ => None,
    };
    let mut sub_chunks = Vec::new();
    let mut text = Vec::new();
    for sub_chunk in &chunk.sub_chunks {
        sub_chunks.push(render_sub_chunk(sub_chunk, geometry.slot_size, resolver.as_mut(), &mut text));
    }
    if options.json {
        let mut document = json::document("chunk", &device_name(options));
        document.insert("chunk_id".into(), json!(chunk_id));
        document.insert("meta".into(), meta.as_ref().map_or(Value::Null, |(_, meta)| json::chunk_meta(meta)));
        document.insert("sub_chunks".into(), Value::Array(sub_chunks));
        return emit(out, Value::Object(document));
    }
    match &meta {
        Some((instance, meta)) => writeln!(
            out,
            "chunk {chunk_id}: instance {instance}, level {}{}, keys {}..{}, {} entries, {} bytes{}",
            meta.level,
            if meta.is_odd() { " (odd)" } else { "" },
            printable(&meta.smallest_key),
            printable(&meta.largest_key),
            meta.num_entries,
            meta.len_data,
            describe_log_start(meta)
        ),
        None => writeln!(out, "chunk {chunk_id}: not referenced by any live version (stale slot)"),
    }
    .map_err(io)?;
    for line in text {
        writeln!(out, "{line}").map_err(io)?;
    }
    Ok(())
}

/// One sub-chunk of a chunk as JSON, its lines for people added to `text`: footer, index,
/// filter, sketch, digest and (when read) its entries, each log reference followed by
/// `resolver` when there is one.
fn render_sub_chunk(
    sub_chunk: &inspect::SubChunkInspection,
    slot_size: u64,
    mut resolver: Option<&mut LogResolver>,
    text: &mut Vec<String>,
) -> Value {
    let slot = sub_chunk.slot;
    let footer = &sub_chunk.footer;
    let digest = match &sub_chunk.digest {
        Ok(()) => "ok".to_string(),
        Err(error) => error.to_string(),
    };
    let index: Vec<Value> = sub_chunk
        .index
        .iter()
        .map(|entry| {
            let (sequence, kind) = unpack_seq_kind(entry.last_seq_kind).map_or((0, "?"), |(sequence, kind)| (sequence, kind.name()));
            json!({"ofs_block": entry.ofs_block, "len_block": entry.len_block, "last_seq": sequence, "last_kind": kind, "last_key": hex(&entry.last_key)})
        })
        .collect();
    let mut sub = Map::new();
    sub.insert("slot".into(), json!(slot));
    sub.insert("footer".into(), json::footer(footer));
    sub.insert("index".into(), Value::Array(index));
    sub.insert(
        "filter".into(),
        json!({"num_probes": sub_chunk.filter.num_probes, "num_bits": sub_chunk.filter.num_bits()}),
    );
    let sketch = match &sub_chunk.sketch {
        Ok(None) => Value::Null,
        Ok(Some(sketch)) => {
            json!({"precision": sketch.precision(), "distinct_keys": sketch.estimate().round() as u64})
        }
        Err(error) => json!({"error": error.to_string()}),
    };
    let sketch_text = match &sub_chunk.sketch {
        Ok(None) => String::new(),
        Ok(Some(sketch)) => format!(", key sketch: about {:.0} distinct keys", sketch.estimate()),
        Err(error) => format!(", key sketch: {error}"),
    };
    sub.insert("sketch".into(), sketch);
    sub.insert("status".into(), json!({"digest": digest}));
    text.push(format!(
        "slot {slot}: sub-chunk {} of {}, level {}, {} entries in {} blocks, sequences {}..{}, body {} bytes, tail {} bytes, digest {digest}{sketch_text}",
        footer.sub_chunk_index,
        footer.num_sub_chunks,
        footer.level,
        footer.num_entries,
        footer.num_blocks,
        footer.smallest_seq,
        footer.largest_seq,
        footer.len_body,
        slot_size - u64::from(footer.ofs_index)
    ));
    if let Some(entries) = &sub_chunk.entries {
        let mut listed = Vec::new();
        for entry in entries {
            let mut listed_entry = json::block_entry(&entry.key, entry.sequence, entry.kind, &entry.value);
            let mut value = match entry.kind {
                EntryKind::Pointer => describe_pointer(&entry.value),
                EntryKind::LogRef => describe_log_ref(&entry.value),
                _ => printable(&entry.value),
            };
            if let (Some(resolver), EntryKind::LogRef, Value::Object(map)) =
                (resolver.as_deref_mut(), entry.kind, &mut listed_entry)
            {
                let resolved = resolver.resolve(&entry.key, entry.sequence, &entry.value);
                value.push_str(&match &resolved {
                    Ok(found) => format!(" = {}", printable(found)),
                    Err(error) => format!(": does not resolve: {error}"),
                });
                map.insert("resolved".into(), resolved.as_ref().map_or(Value::Null, |found| json!(hex(found))));
                let status = resolved.as_ref().map_or_else(ToString::to_string, |_| "ok".to_string());
                map.insert("status".into(), json!({ "log_ref": status }));
            }
            listed.push(listed_entry);
            text.push(format!("  {} @{} {} {value}", printable(&entry.key), entry.sequence, entry.kind.name()));
        }
        sub.insert("entries".into(), Value::Array(listed));
    }
    Value::Object(sub)
}

/// A pointer entry's value for people: the value's length and where its extents are.
fn describe_pointer(value: &[u8]) -> String {
    match ValuePointer::decode(value, 0) {
        Ok(pointer) => {
            let extents: Vec<String> = pointer
                .extents
                .iter()
                .map(|extent| {
                    format!(
                        "value chunk {} (slot {}) bytes {}..{}",
                        extent.value_chunk_id,
                        extent.slot,
                        extent.offset,
                        u64::from(extent.offset) + u64::from(extent.len)
                    )
                })
                .collect();
            format!("-> {} bytes, crc32c {:#010x}, in {}", pointer.len_value, pointer.value_crc32c, extents.join(", "))
        }
        Err(error) => format!("-> a pointer that does not decode ({error})"),
    }
}

/// A log reference entry's value for people: where the put it names is in the backup log.
fn describe_log_ref(value: &[u8]) -> String {
    match LogRef::decode(value, 0) {
        Ok(reference) => format!(
            "-> {} bytes: entry {} of the write batch at offset {} of the backup log (lsn {})",
            reference.len_value, reference.entry_index, reference.ofs_object, reference.lsn
        ),
        Err(error) => format!("-> a log reference that does not decode ({error})"),
    }
}

/// `", log chunk (flag log_refs), log start ..."` for a log chunk (SPEC.md §6.4, §8.9), else
/// nothing.
fn describe_log_start(meta: &lds_format::version::meta::ChunkMeta) -> String {
    match (meta.is_log_chunk(), meta.log_start) {
        (true, Some(start)) => format!(
            ", log chunk (flag log_refs): log start at offset {} of the backup log (lsn {})",
            start.offset, start.lsn
        ),
        (true, None) => ", log chunk (flag log_refs)".to_string(),
        (false, _) => String::new(),
    }
}
