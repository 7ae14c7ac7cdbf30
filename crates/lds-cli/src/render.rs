//! Renderings more than one command prints: the layout table (mkfs, dump), keys and values
//! (dump, scan, salvage --export), the moves of a resize or a device removal.

use std::io::Write;

use lds_format::error::hex;
use lds_format::geometry::Geometry;
use serde_json::{json, Map, Value};

use crate::json;
use crate::units::format_size;

/// Prints the layout table.
pub fn print_layout(out: &mut dyn Write, geometry: &Geometry) -> std::io::Result<()> {
    let instances = u64::from(geometry.instance_count);
    writeln!(out, "volume uuid      {}", json::uuid(&geometry.volume_uuid))?;
    writeln!(out, "volume size      {} ({} bytes)", format_size(geometry.volume_len), geometry.volume_len)?;
    writeln!(out, "sector size      {}", geometry.sector_size)?;
    writeln!(out, "instances        {}", geometry.instance_count)?;
    writeln!(out, "area             offset        length")?;
    writeln!(out, "primary label    {:<13} {}", 0, geometry.sector_size)?;
    writeln!(
        out,
        "version logs     {:<13} {} x {}",
        geometry.ofs_version_log,
        instances,
        format_size(geometry.len_version_log)
    )?;
    writeln!(
        out,
        "backup logs      {:<13} {} x {}",
        geometry.ofs_backup_log,
        instances,
        format_size(geometry.len_backup_log)
    )?;
    writeln!(
        out,
        "slot area        {:<13} {} slots x {}",
        geometry.ofs_slot_area,
        geometry.num_slots,
        format_size(geometry.slot_size)
    )?;
    writeln!(out, "backup label     {:<13} {}", geometry.ofs_backup_label(), geometry.sector_size)?;
    writeln!(
        out,
        "usable capacity  {} ({:.1}% of the volume)",
        format_size(geometry.usable_capacity()),
        100.0 * geometry.usable_capacity() as f64 / geometry.volume_len as f64
    )
}

/// Bytes as text when printable ASCII, else hex with a `0x` prefix.
pub fn printable(bytes: &[u8]) -> String {
    if !bytes.is_empty() && bytes.iter().all(|&byte| (0x20..0x7f).contains(&byte)) {
        String::from_utf8_lossy(bytes).into_owned()
    } else {
        format!("0x{}", hex(bytes))
    }
}

/// A key/value as a JSON object of `key`/`value` or `key_hex`/`value_hex`.
pub fn pair_json(key: &[u8], value: &[u8]) -> Value {
    let mut map = Map::new();
    for (name, bytes) in [("key", key), ("value", value)] {
        match std::str::from_utf8(bytes) {
            Ok(text) => map.insert(name.to_string(), json!(text)),
            Err(_) => map.insert(format!("{name}_hex"), json!(hex(bytes))),
        };
    }
    Value::Object(map)
}

/// One move of a resize or a device removal: a chunk (`chunk_id`) or a value chunk
/// (`value_chunk_id`, SPEC.md §8.6).
pub fn move_json(moved: &lds_repair::resize::Move) -> serde_json::Value {
    let mut document = json!({ "instance": moved.instance, "slots": moved.slots, "bytes": moved.bytes });
    match moved.what {
        lds_repair::resize::Moved::Chunk(id) => document["chunk_id"] = json!(id),
        lds_repair::resize::Moved::ValueChunk(id) => document["value_chunk_id"] = json!(id),
    }
    document
}
