//! JSON of the format's structures, schema `lds-dump/1` (docs/dump-json.md). Field names are
//! SPEC.md's.

use lds_format::batch::decode_entries;
use lds_format::chunk::footer::Footer;
use lds_format::entry::EntryKind;
use lds_format::error::hex;
use lds_format::geometry::Geometry;
use lds_format::label::Label;
use lds_format::log::{LogPosition, ObjectHeader, ObjectType, WrapLeft};
use lds_format::logref::LogRef;
use lds_format::value::{ValueChunkMeta, ValuePointer, VALUE_FOOTER_LEN, VALUE_MAGIC};
use lds_format::version::meta::{ChunkMeta, CHUNK_FLAG_LOG_REFS, CHUNK_FLAG_VALUE_REFS};
use lds_format::version::payload::{
    BaseVersion, CompactPointer, CompactionJournal, DeltaVersion, ValueDelta, ValueSection,
};
use serde_json::{json, Map, Value};

/// The schema name of every document.
pub const SCHEMA: &str = "lds-dump/1";

/// Canonical 8-4-4-4-12 form.
pub fn uuid(bytes: &[u8; 16]) -> String {
    let text = hex(bytes);
    format!("{}-{}-{}-{}-{}", &text[..8], &text[8..12], &text[12..16], &text[16..20], &text[20..])
}

/// A document with the schema and `what` keys first.
pub fn document(what: &str, device: &str) -> Map<String, Value> {
    let mut map = Map::new();
    map.insert("schema".into(), json!(SCHEMA));
    map.insert("what".into(), json!(what));
    map.insert("device".into(), json!(device));
    map
}

/// Geometry fields.
pub fn geometry(geometry: &Geometry) -> Value {
    json!({
        "volume_uuid": uuid(&geometry.volume_uuid),
        "sector_size": geometry.sector_size,
        "instance_count": geometry.instance_count,
        "volume_len": geometry.volume_len,
        "ofs_version_log": geometry.ofs_version_log,
        "len_version_log": geometry.len_version_log,
        "ofs_backup_log": geometry.ofs_backup_log,
        "len_backup_log": geometry.len_backup_log,
        "ofs_slot_area": geometry.ofs_slot_area,
        "slot_size": geometry.slot_size,
        "num_slots": geometry.num_slots,
    })
}

/// Label fields.
pub fn label(label: &Label) -> Value {
    let encoded = label.encode();
    let crc = u32::from_le_bytes([encoded[508], encoded[509], encoded[510], encoded[511]]);
    let mut value = json!({
        "magic": "LDSLABEL",
        "version_major": lds_format::label::VERSION_MAJOR,
        "version_minor": label.version_minor,
        "len_label": lds_format::label::LABEL_LEN,
        "features_compat": label.features_compat,
        "features_ro_compat": label.features_ro_compat,
        "features_incompat": label.features_incompat,
        "geometry": geometry(&label.geometry),
        "generation": label.generation,
        "volume_name": label.volume_name,
        "crc32c": crc,
    });
    // Only on a volume of several devices (format 1.2, SPEC.md §4.3), so that the JSON of
    // one-device volumes stays what lds-dump/1 always gave.
    if let (Some(table), Value::Object(map)) = (&label.devices, &mut value) {
        map.insert(
            "devices".into(),
            json!({
                "device_uuid": uuid(&table.device_uuid),
                "num_devices": table.devices.len(),
                "devices": table.devices.iter().map(|entry| json!({
                    "device_uuid": uuid(&entry.device_uuid),
                    "first_slot": entry.first_slot,
                    "num_slots": entry.num_slots,
                    "len_device": entry.len_device,
                })).collect::<Vec<_>>(),
            }),
        );
    }
    value
}

/// The `object_type` name, or `unknown_<n>`.
pub fn object_type_name(code: u8) -> String {
    ObjectType::from_code(code).map_or_else(|| format!("unknown_{code}"), |kind| kind.name().to_string())
}

/// Header fields of a log object (without payload and status).
pub fn object_header(header: &ObjectHeader) -> Map<String, Value> {
    let value = json!({
        "log_offset": header.log_offset,
        "magic": "LDSO",
        "header_crc32c": header.header_crc32c,
        "object_type": object_type_name(header.object_type_code),
        "log_kind": header.log_kind,
        "flags": header.flags,
        "instance": header.instance,
        "sn": header.sn,
        "lsn": header.lsn,
        "len_payload": header.len_payload,
        "payload_crc32c": header.payload_crc32c,
        "volume_uuid": uuid(&header.volume_uuid),
    });
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn pointers(pointers: &[CompactPointer]) -> Value {
    Value::Array(pointers.iter().map(|pointer| json!({"level": pointer.level, "key": hex(&pointer.key)})).collect())
}

/// Chunk metadata fields; `num_value_refs` and `value_refs` only with flag `value_refs`
/// (format 1.4, SPEC.md §6.4), `lsn_log_start` and `ofs_log_start` only with flag `log_refs`
/// (format 1.6, §8.9), so that the JSON of other chunks stays what lds-dump/1 gave.
pub fn chunk_meta(meta: &ChunkMeta) -> Value {
    let mut value = json!({
        "chunk_id": meta.chunk_id,
        "level": meta.level,
        "flags": meta.flags,
        "num_sub_chunks": meta.sub_chunks.len(),
        "num_entries": meta.num_entries,
        "smallest_seq": meta.smallest_seq,
        "largest_seq": meta.largest_seq,
        "len_data": meta.len_data,
        "smallest_key": hex(&meta.smallest_key),
        "largest_key": hex(&meta.largest_key),
        "sub_chunks": meta.sub_chunks.iter().map(|sub| json!({"slot": sub.slot, "digest": hex(&sub.digest)})).collect::<Vec<_>>(),
    });
    if let (true, Value::Object(map)) = (meta.flags & CHUNK_FLAG_VALUE_REFS != 0, &mut value) {
        map.insert("num_value_refs".into(), json!(meta.value_refs.len()));
        map.insert(
            "value_refs".into(),
            Value::Array(
                meta.value_refs
                    .iter()
                    .map(|&(value_chunk_id, bytes)| json!({"value_chunk_id": value_chunk_id, "bytes": bytes}))
                    .collect(),
            ),
        );
    }
    if let (true, Value::Object(map)) = (meta.flags & CHUNK_FLAG_LOG_REFS != 0, &mut value) {
        // As the encoder writes it: a record with the flag always carries a log start.
        let start = meta.log_start.unwrap_or(LogPosition { offset: 0, lsn: 0 });
        map.insert("lsn_log_start".into(), json!(start.lsn));
        map.insert("ofs_log_start".into(), json!(start.offset));
    }
    value
}

/// Value chunk metadata fields (SPEC.md §6.5).
pub fn value_chunk_meta(meta: &ValueChunkMeta) -> Value {
    json!({
        "value_chunk_id": meta.value_chunk_id,
        "slot": meta.slot,
        "len_body": meta.len_body,
        "digest": hex(&meta.digest),
    })
}

/// The value section of a base version (SPEC.md §6.1).
pub fn value_section(values: &ValueSection) -> Value {
    json!({
        "next_value_chunk_id": values.next_value_chunk_id,
        "num_value_chunks": values.chunks.len(),
        "value_chunks": values.chunks.iter().map(value_chunk_meta).collect::<Vec<_>>(),
    })
}

/// The value section of a delta version (SPEC.md §6.2).
pub fn value_delta(values: &ValueDelta) -> Value {
    json!({
        "next_value_chunk_id": values.next_value_chunk_id,
        "num_value_deleted": values.deleted.len(),
        "num_value_added": values.added.len(),
        "value_deleted": values.deleted,
        "value_added": values.added.iter().map(value_chunk_meta).collect::<Vec<_>>(),
    })
}

/// A value pointer's fields (SPEC.md §8.6).
pub fn value_pointer(pointer: &ValuePointer) -> Value {
    json!({
        "len_value": pointer.len_value,
        "value_crc32c": pointer.value_crc32c,
        "num_extents": pointer.extents.len(),
        "extents": pointer.extents.iter().map(|extent| json!({
            "value_chunk_id": extent.value_chunk_id,
            "slot": extent.slot,
            "offset": extent.offset,
            "len": extent.len,
        })).collect::<Vec<_>>(),
    })
}

/// The decoded pointer of a pointer entry's value; null when it does not decode (lds checks
/// a block's pointers only when it follows them).
fn decoded_pointer(value: &[u8]) -> Value {
    ValuePointer::decode(value, 0).map_or(Value::Null, |pointer| value_pointer(&pointer))
}

/// A log reference's fields (SPEC.md §8.9).
pub fn log_ref(reference: &LogRef) -> Value {
    json!({
        "lsn": reference.lsn,
        "ofs_object": reference.ofs_object,
        "entry_index": reference.entry_index,
        "len_value": reference.len_value,
    })
}

/// An entry of a chunk's block: `key`, `seq`, `kind`, `value` (hex), for a pointer entry
/// `pointer`, its value decoded, and for a log reference entry (format 1.6) `log_ref`, its
/// value decoded (null when it does not decode).
pub fn block_entry(key: &[u8], seq: u64, kind: EntryKind, value: &[u8]) -> Value {
    let mut map = Map::new();
    map.insert("key".into(), json!(hex(key)));
    map.insert("seq".into(), json!(seq));
    map.insert("kind".into(), json!(kind.name()));
    map.insert("value".into(), json!(hex(value)));
    if kind == EntryKind::Pointer {
        map.insert("pointer".into(), decoded_pointer(value));
    }
    if kind == EntryKind::LogRef {
        map.insert("log_ref".into(), LogRef::decode(value, 0).map_or(Value::Null, |reference| log_ref(&reference)));
    }
    Value::Object(map)
}

/// Base version fields.
pub fn base_version(base: &BaseVersion) -> Value {
    let mut value = json!({
        "geometry": geometry(&base.geometry),
        "instance": base.instance,
        "num_levels": base.num_levels,
        "last_sequence": base.last_sequence,
        "label_generation": base.label_generation,
        "ofs_backup_start": base.ofs_backup_start,
        "lsn_backup_start": base.lsn_backup_start,
        "num_chunks": base.chunks.len(),
        "num_compact_pointers": base.compact_pointers.len(),
        "compact_pointers": pointers(&base.compact_pointers),
        "chunks": base.chunks.iter().map(chunk_meta).collect::<Vec<_>>(),
    });
    // Only with a value section (feature `value_chunks`, format 1.4).
    if let (Some(values), Value::Object(map)) = (&base.values, &mut value) {
        map.insert("values".into(), value_section(values));
    }
    value
}

/// Delta version fields.
pub fn delta_version(delta: &DeltaVersion) -> Value {
    let mut value = json!({
        "last_sequence": delta.last_sequence,
        "ofs_backup_start": delta.ofs_backup_start,
        "lsn_backup_start": delta.lsn_backup_start,
        "compaction_id": delta.compaction_id,
        "num_deleted": delta.deleted.len(),
        "num_added": delta.added.len(),
        "num_compact_pointers": delta.compact_pointers.len(),
        "deleted": delta.deleted.iter().map(|deleted| json!({"chunk_id": deleted.chunk_id, "level": deleted.level})).collect::<Vec<_>>(),
        "compact_pointers": pointers(&delta.compact_pointers),
        "added": delta.added.iter().map(chunk_meta).collect::<Vec<_>>(),
    });
    if let (Some(values), Value::Object(map)) = (&delta.values, &mut value) {
        map.insert("values".into(), value_delta(values));
    }
    value
}

/// Compaction journal fields.
pub fn compaction_journal(journal: &CompactionJournal) -> Value {
    json!({
        "compaction_id": journal.compaction_id,
        "source_level": journal.source_level,
        "target_level": journal.target_level,
        "num_inputs": journal.inputs.len(),
        "num_outputs": journal.outputs.len(),
        "num_cleaned": journal.cleaned.len(),
        "resume_key": hex(&journal.resume_key),
        "inputs": journal.inputs,
        "cleaned": journal.cleaned,
        "outputs": journal.outputs.iter().map(chunk_meta).collect::<Vec<_>>(),
    })
}

/// Why a log object's payload cannot be shown as JSON.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// The object's type code is none of SPEC.md §5.
    #[error("unknown object type {code}")]
    UnknownType {
        /// The code in the object's header.
        code: u8,
    },
    /// The payload does not decode as its type says (the decoder's message gives the offset).
    #[error("{source}")]
    Decode {
        /// The object's type.
        object_type: ObjectType,
        /// The decoder's error.
        #[source]
        source: lds_format::FormatError,
    },
}

/// Decodes a payload by type into its JSON; `Err` says why it cannot be decoded.
pub fn payload(object_type_code: u8, payload: &[u8], offset: u64) -> Result<Value, PayloadError> {
    let Some(object_type) = ObjectType::from_code(object_type_code) else {
        return Err(PayloadError::UnknownType { code: object_type_code });
    };
    let decode = |source| PayloadError::Decode { object_type, source };
    let value = match object_type {
        ObjectType::BaseVersion => base_version(&BaseVersion::decode(payload, offset).map_err(decode)?),
        ObjectType::DeltaVersion => delta_version(&DeltaVersion::decode(payload, offset).map_err(decode)?),
        ObjectType::CompactionJournal => {
            compaction_journal(&CompactionJournal::decode(payload, offset).map_err(decode)?)
        }
        ObjectType::WriteBatch => {
            let mut entries = Vec::new();
            let first_sequence = decode_entries(payload, offset, |kind, key, value| {
                entries.push(batch_entry(kind, key, value));
            })
            .map_err(decode)?;
            let synced_lsn_low = lds_format::batch::synced_lsn_low(payload);
            json!({"first_sequence": first_sequence, "num_entries": entries.len(), "synced_lsn_low": synced_lsn_low, "entries": entries})
        }
        ObjectType::WrapLeft => {
            let wrap = WrapLeft::decode(payload, offset).map_err(decode)?;
            json!({"ofs_first_live": wrap.ofs_first_live, "lsn_first_live": wrap.lsn_first_live})
        }
        ObjectType::WrapRight => {
            lds_format::log::check_wrap_right(payload, offset).map_err(decode)?;
            json!({})
        }
    };
    Ok(value)
}

/// Footer fields.
pub fn footer(footer: &Footer) -> Value {
    json!({
        "magic": "LDSCHUNK",
        "version_major": footer.version_major,
        "level": footer.level,
        "flags": footer.flags,
        "instance": footer.instance,
        "chunk_id": footer.chunk_id,
        "sub_chunk_index": footer.sub_chunk_index,
        "num_sub_chunks": footer.num_sub_chunks,
        "num_blocks": footer.num_blocks,
        "num_entries": footer.num_entries,
        "smallest_seq": footer.smallest_seq,
        "largest_seq": footer.largest_seq,
        "len_body": footer.len_body,
        "ofs_index": footer.ofs_index,
        "len_index": footer.len_index,
        "index_crc32c": footer.index_crc32c,
        "ofs_filter": footer.ofs_filter,
        "len_filter": footer.len_filter,
        "filter_crc32c": footer.filter_crc32c,
        "slot_size": footer.slot_size,
        "volume_uuid": uuid(&footer.volume_uuid),
        "digest": hex(&footer.digest),
        "ofs_sketch": footer.ofs_sketch,
        "len_sketch": footer.len_sketch,
        "sketch_crc32c": footer.sketch_crc32c,
        "footer_crc32c": footer.footer_crc32c,
    })
}

/// A write batch entry: `kind`, `key`, `value`, and `pointer` for a pointer entry.
fn batch_entry(kind: EntryKind, key: &[u8], value: &[u8]) -> Value {
    let mut map = Map::new();
    map.insert("kind".into(), json!(kind.name()));
    map.insert("key".into(), json!(hex(key)));
    map.insert("value".into(), json!(hex(value)));
    if kind == EntryKind::Pointer {
        // decode_entries has checked it: never null here.
        map.insert("pointer".into(), decoded_pointer(value));
    }
    Value::Object(map)
}

/// The fields of a value chunk footer (SPEC.md §8.6) read raw from its 160 bytes, whatever
/// its checksum says (as chunk footers are shown, SPEC.md §15); `None` without the magic
/// "LDSVALUE" or with fewer than 160 bytes.
pub fn value_footer(bytes: &[u8]) -> Option<Value> {
    if bytes.len() < VALUE_FOOTER_LEN || bytes[..8] != VALUE_MAGIC {
        return None;
    }
    let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    let u32_at = |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let u64_at = |at: usize| u64::from(u32_at(at)) | u64::from(u32_at(at + 4)) << 32;
    let mut uuid_bytes = [0u8; 16];
    uuid_bytes.copy_from_slice(&bytes[32..48]);
    Some(json!({
        "magic": "LDSVALUE",
        "version_major": u16_at(8),
        "flags": bytes[11],
        "instance": u32_at(12),
        "value_chunk_id": u64_at(16),
        "len_body": u32_at(24),
        "slot_size": u32_at(28),
        "volume_uuid": uuid(&uuid_bytes),
        "digest": hex(&bytes[48..80]),
        "footer_crc32c": u32_at(156),
    }))
}
