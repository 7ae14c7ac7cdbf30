//! Settling the value chunks of a rebuilt tree (SPEC.md §8.6): the damaged ones, the values
//! the kept chunks and the runs point to, and those left out.

use std::collections::{BTreeMap, BTreeSet};

use lds_check::Code;
use lds_format::geometry::Geometry;
use lds_format::version::meta::ChunkMeta;
use lds_format::version::payload::BaseVersion;
use lds_format::version::Version;
use lds_volume::block::read_tolerant;
use lds_volume::{BlockDevice, DeviceError};

use crate::dropped::Dropped;
use crate::{Fix, FixClass, RepairError};

use super::rebuild::Rebuild;
use super::Run;

/// The value chunks of `version` whose footer or digest does not check, with the problem
/// code and why.
fn damaged_value_chunks(
    device: &dyn BlockDevice,
    geometry: &Geometry,
    instance: u32,
    version: &Version,
) -> Result<BTreeMap<u64, (Code, String)>, RepairError> {
    use lds_format::value::{ValueFooter, VALUE_FOOTER_LEN};
    let mut damaged = BTreeMap::new();
    for meta in version.value_chunks.values() {
        if meta.slot >= geometry.num_slots {
            damaged.insert(meta.value_chunk_id, (Code::SlotOutOfRange, "lies beyond the slot area".to_string()));
            continue;
        }
        let offset = geometry.slot_offset(meta.slot);
        let (image, unreadable) = read_tolerant(device, offset, geometry.slot_size, geometry.sector())?;
        let footer_at = image.len() - VALUE_FOOTER_LEN;
        let footer = match ValueFooter::decode(&image[footer_at..], offset + footer_at as u64, geometry.slot_size) {
            Ok(footer) => footer,
            Err(error) => {
                damaged
                    .insert(meta.value_chunk_id, (Code::ValueFooterInvalid, format!("has no valid footer ({error})")));
                continue;
            }
        };
        let matches = footer.value_chunk_id == meta.value_chunk_id
            && footer.instance == instance
            && footer.volume_uuid == geometry.volume_uuid
            && footer.len_body == meta.len_body
            && footer.digest == meta.digest;
        if !matches {
            damaged.insert(
                meta.value_chunk_id,
                (Code::ValueFooterInvalid, "has a footer that disagrees with the version".into()),
            );
            continue;
        }
        let body = &image[..(footer.len_body as usize).min(footer_at)];
        if !unreadable.is_empty() || footer.verify_digest(body, offset).is_err() {
            damaged.insert(meta.value_chunk_id, (Code::ValueDigestMismatch, "does not match its digest".into()));
        }
    }
    Ok(damaged)
}

/// Why the value `pointer` names cannot be read and checked (SPEC.md §8.6: each extent lies
/// inside the values of its value chunk, which `chunks` gives by id, and the value matches
/// the pointer's crc32c), with the problem code fsck reports for it; `None` when it checks.
fn value_problem(
    device: &dyn BlockDevice,
    geometry: &Geometry,
    pointer: &lds_format::value::ValuePointer,
    chunks: impl Fn(u64) -> Option<lds_format::value::ValueChunkMeta>,
) -> Result<Option<(Code, String)>, RepairError> {
    let mut value = Vec::with_capacity(pointer.len_value as usize);
    // Bounded by the pointer's extents (at most 2^16, each read once).
    for extent in &pointer.extents {
        let id = extent.value_chunk_id;
        let Some(meta) = chunks(id) else {
            return Ok(Some((
                Code::ValuePointerInvalid,
                format!("its pointer names value chunk {id}, which is not kept"),
            )));
        };
        let end = u64::from(extent.offset) + u64::from(extent.len);
        if end > u64::from(meta.len_body) || meta.slot >= geometry.num_slots {
            return Ok(Some((
                Code::ValuePointerInvalid,
                format!(
                    "its pointer reaches byte {end} of value chunk {id}, which holds {} bytes of values",
                    meta.len_body
                ),
            )));
        }
        let offset = geometry.slot_offset(meta.slot) + u64::from(extent.offset);
        let (bytes, unreadable) = read_tolerant(device, offset, u64::from(extent.len), geometry.sector())?;
        if !unreadable.is_empty() {
            return Ok(Some((Code::UnreadableSector, format!("its value in value chunk {id} cannot be read"))));
        }
        value.extend_from_slice(&bytes);
    }
    if pointer.check_value(&value, 0).is_err() {
        return Ok(Some((Code::ValueChecksum, "its value does not match its crc32c".to_string())));
    }
    Ok(None)
}

/// The value chunks a rebuilt tree keeps (SPEC.md §8.6).
struct Settled {
    pub(super) chunks: Vec<lds_format::value::ValueChunkMeta>,
    pub(super) next_value_chunk_id: u64,
    /// Entries left out, described.
    pub(super) dropped: Vec<Dropped>,
}

/// The value chunks of a rebuilt tree: those the kept chunks and the runs point to. A value
/// chunk the version lists is kept as it is; one it does not (named by a batch of the backup
/// log, or by a chunk found in a free slot) is kept when the slot its pointer gives holds it
/// (its footer names it, its digest checks); entries pointing to a value chunk found nowhere
/// are left out. Value chunks nothing points to any more are not kept.
fn settle_values(
    device: &dyn BlockDevice,
    geometry: &Geometry,
    instance: u32,
    version: &Version,
    damaged: &BTreeMap<u64, (Code, String)>,
    kept: &[&ChunkMeta],
    runs: &mut [Run],
) -> Result<Settled, RepairError> {
    use lds_format::value::{ValueChunkMeta, ValueFooter, ValuePointer, VALUE_FOOTER_LEN};
    let mut found: BTreeMap<u64, Option<ValueChunkMeta>> = version
        .value_chunks
        .iter()
        .filter(|(id, _)| !damaged.contains_key(id))
        .map(|(id, chunk)| (*id, Some(*chunk)))
        .collect();
    // A value in a damaged value chunk, read from its slot; None when it does not match its
    // crc32c (or cannot be read).
    let salvage_value = |pointer: &ValuePointer| -> Result<Option<Vec<u8>>, RepairError> {
        let read = lds_format::value::read_value(
            pointer,
            |extent| -> Result<Vec<u8>, Option<DeviceError>> {
                let Some(meta) = version.value_chunks.get(&extent.value_chunk_id) else { return Err(None) };
                if u64::from(extent.offset) + u64::from(extent.len) > geometry.slot_size {
                    return Err(None);
                }
                let offset = geometry.slot_offset(meta.slot) + u64::from(extent.offset);
                let (bytes, unreadable) =
                    read_tolerant(device, offset, u64::from(extent.len), geometry.sector()).map_err(Some)?;
                if unreadable.is_empty() {
                    Ok(bytes)
                } else {
                    Err(None)
                }
            },
            |_| None,
        );
        match read {
            Ok(value) => Ok(Some(value)),
            Err(Some(error)) => Err(error.into()),
            Err(None) => Ok(None),
        }
    };
    let mut look_up = |id: u64, slot: u64| -> Result<Option<ValueChunkMeta>, RepairError> {
        if let Some(known) = found.get(&id) {
            return Ok(*known);
        }
        let mut chunk = None;
        if slot < geometry.num_slots && !version.slot_owner.contains_key(&slot) {
            let offset = geometry.slot_offset(slot);
            let image = device.read_vec(offset, geometry.slot_size)?;
            let footer_at = image.len() - VALUE_FOOTER_LEN;
            if let Ok(footer) = ValueFooter::decode(&image[footer_at..], offset + footer_at as u64, geometry.slot_size)
            {
                let body = &image[..(footer.len_body as usize).min(footer_at)];
                let ours = footer.value_chunk_id == id && footer.instance == instance;
                if ours && footer.volume_uuid == geometry.volume_uuid && footer.verify_digest(body, offset).is_ok() {
                    chunk = Some(ValueChunkMeta::of_footer(&footer, slot));
                }
            }
        }
        found.insert(id, chunk);
        Ok(chunk)
    };
    let mut dropped = Vec::new();
    let mut referenced = BTreeSet::new();
    for chunk in kept {
        referenced.extend(chunk.value_refs.iter().map(|(id, _)| *id));
    }
    for run in runs.iter_mut() {
        let mut entries = Vec::with_capacity(run.entries.len());
        for entry in std::mem::take(&mut run.entries) {
            if entry.kind != lds_format::entry::EntryKind::Pointer {
                entries.push(entry);
                continue;
            }
            let mut whole = false;
            let mut entry = entry;
            let pointer = ValuePointer::decode(&entry.value, 0);
            if let Some(pointer) = pointer
                .as_ref()
                .ok()
                .filter(|pointer| pointer.extents.iter().any(|extent| damaged.contains_key(&extent.value_chunk_id)))
            {
                match salvage_value(pointer)? {
                    Some(value) => {
                        entry.kind = lds_format::entry::EntryKind::Put;
                        entry.value = value;
                        entries.push(entry);
                    }
                    None => dropped.push(Dropped::entry(
                        instance,
                        &entry,
                        "its value in a damaged value chunk does not match its crc32c",
                    )),
                }
                continue;
            }
            if let Ok(pointer) = pointer {
                let mut chunks = BTreeMap::new();
                whole = true;
                for extent in &pointer.extents {
                    match look_up(extent.value_chunk_id, extent.slot)? {
                        Some(chunk) => {
                            chunks.insert(extent.value_chunk_id, chunk);
                        }
                        None => whole = false,
                    }
                }
                // A value chunk that is whole may still hold a value its pointer does not
                // check against (fsck 703, 705): the entry is left out.
                if whole {
                    if let Some((_, problem)) =
                        value_problem(device, geometry, &pointer, |id| chunks.get(&id).copied())?
                    {
                        dropped.push(Dropped::entry(instance, &entry, &problem.to_string()));
                        continue;
                    }
                    referenced.extend(pointer.extents.iter().map(|extent| extent.value_chunk_id));
                }
            }
            if whole {
                entries.push(entry);
            } else {
                dropped.push(Dropped::entry(instance, &entry, "its value chunk is lost"));
            }
        }
        run.entries = entries;
    }
    let chunks: Vec<ValueChunkMeta> =
        found.into_values().flatten().filter(|chunk| referenced.contains(&chunk.value_chunk_id)).collect();
    let next_value_chunk_id =
        chunks.iter().map(|chunk| chunk.value_chunk_id + 1).max().unwrap_or(1).max(version.next_value_chunk_id);
    Ok(Settled { chunks, next_value_chunk_id, dropped })
}

/// The value chunks of the rebuilt tree (SPEC.md §8.6), into `template`: the damaged ones
/// reported, the chunks pointing into them (or to a value that cannot be read and checked)
/// rewritten, and the values settled (`settle_values`); the slots of the value chunks it keeps
/// but the version does not list join `source_slots` (not to be written before the switch).
pub(super) fn settle_value_chunks(
    rebuild: &mut Rebuild<'_>,
    version: &Version,
    template: &mut BaseVersion,
    source_slots: &mut BTreeSet<u64>,
) -> Result<(), RepairError> {
    let (device, geometry, instance) = (rebuild.device, rebuild.geometry, rebuild.instance);
    // Damaged value chunks: the chunks pointing into them are rewritten, their values
    // that still match their crc32c copied into new value chunks (or inline).
    let damaged = damaged_value_chunks(device, geometry, instance, version)?;
    for (&id, (code, reason)) in &damaged {
        let slot = version.value_chunks.get(&id).map_or(0, |meta| meta.slot);
        let action = format!("value chunk {id} in slot {slot} {reason}: the values in it that match their crc32c are copied to new value chunks, the chunks pointing to it rewritten");
        let fix = Fix::new(
            vec![*code],
            format!("value chunk {id} of instance {instance}"),
            geometry.slot_offset(slot),
            action,
        );
        rebuild.fixes.push(fix);
    }
    let pointing: Vec<ChunkMeta> = rebuild
        .tree
        .values()
        .filter(|chunk| chunk.value_refs.iter().any(|(id, _)| damaged.contains_key(id)))
        .cloned()
        .collect();
    for meta in pointing {
        rebuild.tree.remove(&meta.chunk_id);
        let read = rebuild.read_entries(&meta)?;
        if !read.dropped.is_empty() {
            let structure = format!("chunk {} of instance {instance}", meta.chunk_id);
            let action = format!("rewrote chunk {}: it points into a damaged value chunk", meta.chunk_id);
            rebuild.fixes.push(Fix::new(Vec::new(), structure, 0, action).dropping(read.dropped).class(FixClass::Fix));
        }
        if !read.entries.is_empty() {
            rebuild.runs.push(Run::new(meta.level, meta.flags, read.entries));
        }
    }
    // A chunk holding a pointer whose value cannot be read and checked in a value chunk
    // that is whole (it reaches past its values, fsck 703, or the value fails its crc32c,
    // 705) is rewritten too: `settle_values` leaves those entries out.
    let whole: Vec<ChunkMeta> = rebuild.tree.values().filter(|chunk| !chunk.value_refs.is_empty()).cloned().collect();
    for meta in whole {
        let read = rebuild.read_entries(&meta)?;
        let mut codes = Vec::new();
        for entry in read.entries.iter().filter(|entry| entry.kind == lds_format::entry::EntryKind::Pointer) {
            let Ok(pointer) = lds_format::value::ValuePointer::decode(&entry.value, 0) else { continue };
            let listed = |id: u64| version.value_chunks.get(&id).copied();
            if let Some((code, _)) = value_problem(device, geometry, &pointer, listed)? {
                codes.push(code);
            }
        }
        if codes.is_empty() {
            continue;
        }
        codes.sort();
        codes.dedup();
        rebuild.tree.remove(&meta.chunk_id);
        let structure = format!("chunk {} of instance {instance}", meta.chunk_id);
        let offset = meta.sub_chunks.first().map_or(0, |sub_chunk| geometry.slot_offset(sub_chunk.slot));
        let action = format!(
            "rewrote the {} readable entries of chunk {} into new chunks at level {}: a value it points to cannot be read and checked",
            read.entries.len(),
            meta.chunk_id,
            meta.level
        );
        rebuild.fixes.push(Fix::new(codes, structure, offset, action).dropping(read.dropped).class(FixClass::Fix));
        rebuild.runs.push(Run::new(meta.level, meta.flags, read.entries));
    }
    let kept: Vec<&ChunkMeta> = rebuild.tree.values().collect();
    let settled = settle_values(device, geometry, instance, version, &damaged, &kept, &mut rebuild.runs)?;
    source_slots.extend(settled.chunks.iter().map(|chunk| chunk.slot));
    if !settled.dropped.is_empty() {
        let action = format!("left out {} entries whose values are lost", settled.dropped.len());
        let fix = Fix::new(Vec::new(), format!("value chunks of instance {instance}"), 0, action);
        rebuild.fixes.push(fix.dropping(settled.dropped).class(FixClass::Fix));
    }
    template.values = Some(lds_format::version::payload::ValueSection {
        next_value_chunk_id: settled.next_value_chunk_id,
        chunks: settled.chunks,
    });
    Ok(())
}
