//! `lds dump IMAGE slots`: every slot's state (live, stale, free, on no device), value chunks
//! marked, as a map of one character a slot or as JSON.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use lds_volume::inspect;
use serde_json::{json, Map, Value};

use super::{device_name, emit, io, DumpError, DumpOptions, View};
use crate::json;

pub(super) fn dump_slots(volume: &View<'_>, options: &DumpOptions, out: &mut dyn Write) -> Result<(), DumpError> {
    let geometry = *volume.geometry();
    let states = inspect::slots(volume.device, &volume.label)?;
    let mut slots = Vec::new();
    let mut counts = BTreeMap::new();
    let mut pending: Option<BTreeSet<u64>> = None;
    let mut value_slots = BTreeSet::new();
    for (slot, (state, footer)) in states.into_iter().enumerate() {
        let mut name = state.name();
        let mut entry = Map::new();
        entry.insert("slot".into(), json!(slot));
        if let Some(footer) = footer {
            entry.insert("chunk_id".into(), json!(footer.chunk_id));
            entry.insert("instance".into(), json!(footer.instance));
            entry.insert("level".into(), json!(footer.level));
            entry.insert("sub_chunk_index".into(), json!(footer.sub_chunk_index));
        } else if state != inspect::SlotState::Absent {
            // A value chunk (format 1.4, SPEC.md §8.6): live when a version lists it or a
            // replayed batch points to it (§9.4), else stale.
            let footers = inspect::slot_footers(volume.device, &geometry, slot as u64)?;
            if let Some(value_footer) = footers.value.as_deref().and_then(json::value_footer) {
                value_slots.insert(slot);
                if state == inspect::SlotState::Free {
                    if pending.is_none() {
                        pending = Some(inspect::pending_value_slots(volume.device, &geometry)?);
                    }
                    let named = pending.as_ref().is_some_and(|pending| pending.contains(&(slot as u64)));
                    name = if named { "live" } else { "stale" };
                }
                entry.insert("value_chunk_id".into(), value_footer["value_chunk_id"].clone());
                entry.insert("instance".into(), value_footer["instance"].clone());
            }
        }
        *counts.entry(name).or_insert(0u64) += 1;
        let mut ordered = Map::new();
        ordered.insert("slot".into(), json!(slot));
        ordered.insert("state".into(), json!(name));
        ordered.extend(entry.into_iter().filter(|(key, _)| key != "slot"));
        slots.push(Value::Object(ordered));
    }
    if options.json {
        let mut document = json::document("slots", &device_name(options));
        document.insert("num_slots".into(), json!(geometry.num_slots));
        document.insert("slots".into(), Value::Array(slots));
        return emit(out, Value::Object(document));
    }
    writeln!(
        out,
        "slots: {} in all, {} live, {} stale (a chunk no live version references), {} free{}{}",
        geometry.num_slots,
        counts.get("live").unwrap_or(&0),
        counts.get("stale").unwrap_or(&0),
        counts.get("free").unwrap_or(&0),
        counts.get("absent").map_or(String::new(), |absent| format!(", {absent} in no device (-)")),
        match value_slots.len() {
            0 => String::new(),
            count => format!("; {count} hold value chunks (V live, v stale)"),
        }
    )
    .map_err(io)?;
    // One character a slot, 64 a line: L live, s stale, . free, - in no device; V and v for
    // value chunks.
    for (row, chunk) in slots.chunks(64).enumerate() {
        let line: String = chunk
            .iter()
            .enumerate()
            .map(|(index, slot)| {
                let value = value_slots.contains(&(row * 64 + index));
                match (slot.get("state").and_then(Value::as_str), value) {
                    (Some("live"), false) => 'L',
                    (Some("live"), true) => 'V',
                    (Some("stale"), false) => 's',
                    (Some("stale"), true) => 'v',
                    (Some("absent"), _) => '-',
                    _ => '.',
                }
            })
            .collect();
        writeln!(out, "  {:>8}  {line}", row * 64).map_err(io)?;
    }
    Ok(())
}
