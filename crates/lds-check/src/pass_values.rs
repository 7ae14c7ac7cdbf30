//! Pass 4b, on volumes with feature `value_chunks` (SPEC.md §8.6): every value chunk of a
//! version (its footer against the version's metadata; with `deep`, its digest), every value
//! pointer the chunks and the replayed batches hold (it decodes, names a value chunk of the
//! version or, for a value written before its batch, one its slot holds, and stays inside its
//! values; with `deep`, the value it reaches matches its crc32c), and every chunk's value
//! references against its pointers.

use std::collections::{BTreeMap, VecDeque};

use lds_format::entry::EntryKind;
use lds_format::geometry::Geometry;
use lds_format::value::{Extent, ValueChunkMeta, ValueFooter, ValuePointer, VALUE_FOOTER_LEN};
use lds_format::version::meta::ChunkMeta;
use lds_format::version::Version;
use lds_volume::block::read_tolerant;
use lds_volume::{DeviceError, ReadAt};

use crate::problem::{Code, Report};

/// What a chunk's entries say about values, gathered while its blocks are checked.
#[derive(Debug, Default)]
pub(crate) struct ChunkValues {
    /// Bytes of extents per value chunk id, over the chunk's decoded pointers.
    pub(crate) refs: BTreeMap<u64, u64>,
    /// The pointers, with key, sequence and the block's offset.
    pub(crate) pointers: Vec<Pointed>,
    /// A pointer did not decode (references are then not compared).
    pub(crate) undecodable: bool,
}

/// A pointer found in a chunk or a batch.
#[derive(Debug)]
pub(crate) struct Pointed {
    pub(crate) key: Vec<u8>,
    pub(crate) sequence: u64,
    pub(crate) pointer: ValuePointer,
    /// Where the entry is (a block or a batch), for the report.
    pub(crate) offset: u64,
}

impl ChunkValues {
    /// Records the value of an entry of `kind`; reports a pointer that does not decode.
    pub(crate) fn entry(
        &mut self,
        kind: EntryKind,
        key: &[u8],
        sequence: u64,
        value: &[u8],
        (offset, structure): (u64, &str),
        report: &mut Report,
    ) {
        if kind != EntryKind::Pointer {
            return;
        }
        match ValuePointer::decode(value, offset) {
            Ok(pointer) => {
                pointer.add_refs(&mut self.refs);
                self.pointers.push(Pointed { key: key.to_vec(), sequence, pointer, offset });
            }
            Err(error) => {
                self.undecodable = true;
                report.add(
                    Code::ValuePointerInvalid,
                    structure,
                    offset,
                    format!("the pointer of key {} (sequence {sequence}): {error}", lds_format::error::hex(key)),
                );
            }
        }
    }

    /// Compares the references gathered with the chunk's metadata.
    pub(crate) fn compare(&self, chunk: &ChunkMeta, structure: &str, offset: u64, report: &mut Report) {
        if self.undecodable {
            return;
        }
        let found: Vec<(u64, u64)> = self.refs.iter().map(|(&id, &bytes)| (id, bytes)).collect();
        if found != chunk.value_refs {
            report.add(
                Code::ValueRefsMismatch,
                structure,
                offset,
                format!(
                    "its pointers reach {} (value chunk id, bytes), the version says {}",
                    describe_refs(&found),
                    describe_refs(&chunk.value_refs)
                ),
            );
        }
    }
}

fn describe_refs(refs: &[(u64, u64)]) -> String {
    if refs.is_empty() {
        return "none".into();
    }
    let listed: Vec<String> = refs.iter().take(6).map(|(id, bytes)| format!("({id}, {bytes})")).collect();
    let more = if refs.len() > 6 { format!(" and {} more", refs.len() - 6) } else { String::new() };
    format!("{}{more}", listed.join(", "))
}

/// The value chunks reads of one instance can reach, and the bodies read so far (a few slots,
/// least recently used first out).
pub(crate) struct ValueChunks<'a> {
    instance: u32,
    geometry: &'a Geometry,
    /// The version's value chunks, and those only the backup log names (by the slot its
    /// pointers give) whose footer checks.
    known: BTreeMap<u64, ValueChunkMeta>,
    /// Ids whose value chunk could not be read or checked (reported once).
    bad: std::collections::BTreeSet<u64>,
    bodies: VecDeque<(u64, Vec<u8>)>,
}

/// Value chunk bodies kept while values are checked (`deep`).
const BODIES_KEPT: usize = 8;

impl<'a> ValueChunks<'a> {
    /// Checks the value chunks of `version` (footers; with `deep`, digests) and those the
    /// backup log's batches name (`pending`: id to slot).
    pub(crate) fn check(
        device: &(impl ReadAt + Sync + ?Sized),
        label: &'a lds_format::label::Label,
        instance: u32,
        version: &Version,
        pending: &BTreeMap<u64, u64>,
        deep: bool,
        report: &mut Report,
    ) -> Result<Self, DeviceError> {
        let geometry = &label.geometry;
        let mut known = BTreeMap::new();
        let mut bad = std::collections::BTreeSet::new();
        for meta in version.value_chunks.values() {
            let structure = format!("value chunk {} of instance {instance}", meta.value_chunk_id);
            report.summary.value_chunks += 1;
            if meta.slot >= geometry.num_slots || !label.slot_present(meta.slot) {
                report.add(
                    Code::SlotOutOfRange,
                    structure,
                    0,
                    format!("slot {} is in no device of the volume", meta.slot),
                );
                bad.insert(meta.value_chunk_id);
                continue;
            }
            match check_value_chunk(device, geometry, instance, meta.value_chunk_id, meta.slot, Some(meta), deep)? {
                Ok((body_bytes, _)) => {
                    report.summary.bytes_verified += body_bytes;
                    report.summary.value_bytes += u64::from(meta.len_body);
                    known.insert(meta.value_chunk_id, *meta);
                }
                Err((code, offset, message)) => {
                    report.add(code, structure, offset, message);
                    // The footer is bad but the body may still hold good values: deep checks
                    // each value's crc32c; a damaged body is already reported.
                    if code != Code::ValueDigestMismatch {
                        bad.insert(meta.value_chunk_id);
                    } else {
                        known.insert(meta.value_chunk_id, *meta);
                    }
                }
            }
        }
        for (&id, &slot) in pending {
            let structure = format!("value chunk {id} of instance {instance}");
            if slot >= geometry.num_slots || !label.slot_present(slot) {
                report.add(
                    Code::ValuePendingMissing,
                    structure,
                    0,
                    format!("a replayed batch points to it in slot {slot}, which is in no device of the volume"),
                );
                bad.insert(id);
                continue;
            }
            match check_value_chunk(device, geometry, instance, id, slot, None, deep)? {
                Ok((_, footer)) => {
                    known.insert(id, ValueChunkMeta::of_footer(&footer, slot));
                }
                Err((_, offset, message)) => {
                    report.add(
                        Code::ValuePendingMissing,
                        structure,
                        offset,
                        format!("a replayed batch points to it in slot {slot}: {message}"),
                    );
                    bad.insert(id);
                }
            }
        }
        Ok(Self { instance, geometry, known, bad, bodies: VecDeque::new() })
    }

    /// Checks pointers: each extent names a value chunk reads can reach and stays inside its
    /// values; with `deep`, the value they reach matches its crc32c.
    pub(crate) fn check_pointers(
        &mut self,
        device: &(impl ReadAt + Sync + ?Sized),
        pointers: &[Pointed],
        structure: &str,
        deep: bool,
        report: &mut Report,
    ) -> Result<(), DeviceError> {
        for pointed in pointers {
            // A value chunk that is damaged or cannot be read is reported once, not for each
            // value in it.
            if pointed.pointer.extents.iter().any(|extent| self.bad.contains(&extent.value_chunk_id)) {
                continue;
            }
            let mut whole = true;
            for extent in &pointed.pointer.extents {
                if let Some(problem) = self.extent_problem(extent) {
                    whole = false;
                    report.add(
                        Code::ValuePointerInvalid,
                        structure,
                        pointed.offset,
                        format!(
                            "the pointer of key {} (sequence {}): {problem}",
                            lds_format::error::hex(&pointed.key),
                            pointed.sequence
                        ),
                    );
                    break;
                }
            }
            if !whole || !deep {
                continue;
            }
            let mut crc = 0u32;
            for extent in &pointed.pointer.extents {
                let body = self.body(device, extent.value_chunk_id)?;
                let range = extent.offset as usize..(extent.offset + extent.len) as usize;
                crc = crc32c::crc32c_append(crc, body.get(range).unwrap_or_default());
            }
            report.summary.values_verified += 1;
            if crc != pointed.pointer.value_crc32c {
                report.add(
                    Code::ValueChecksum,
                    structure,
                    pointed.offset,
                    format!(
                        "the value of key {} (sequence {}, {} bytes in value chunk {}) does not match its crc32c",
                        lds_format::error::hex(&pointed.key),
                        pointed.sequence,
                        pointed.pointer.len_value,
                        pointed.pointer.extents.first().map_or(0, |extent| extent.value_chunk_id)
                    ),
                );
            }
        }
        Ok(())
    }

    fn extent_problem(&self, extent: &Extent) -> Option<String> {
        let id = extent.value_chunk_id;
        let Some(meta) = self.known.get(&id) else {
            return Some(format!("value chunk {id} is not in the version of instance {}", self.instance));
        };
        let end = u64::from(extent.offset) + u64::from(extent.len);
        if end > u64::from(meta.len_body) {
            return Some(format!(
                "an extent reaches byte {end} of value chunk {id}, which holds {} bytes of values",
                meta.len_body
            ));
        }
        None
    }

    /// The body of a known value chunk (read once, kept among the last few).
    fn body(&mut self, device: &(impl ReadAt + Sync + ?Sized), id: u64) -> Result<&[u8], DeviceError> {
        if let Some(index) = self.bodies.iter().position(|(kept, _)| *kept == id) {
            let entry = self.bodies.remove(index).unwrap_or_default();
            self.bodies.push_back(entry);
        } else {
            let len = self.known.get(&id).map_or(0, |meta| u64::from(meta.len_body));
            let slot = self.known.get(&id).map_or(0, |meta| meta.slot);
            let (image, _) = read_tolerant(device, self.geometry.slot_offset(slot), len, self.geometry.sector())?;
            if self.bodies.len() >= BODIES_KEPT {
                self.bodies.pop_front();
            }
            self.bodies.push_back((id, image));
        }
        Ok(self.bodies.back().map_or(&[][..], |(_, body)| body.as_slice()))
    }
}

/// A problem a value chunk check found: code, offset, message.
type Found = (Code, u64, String);

/// Reads and checks the value chunk `id` in `slot`: the footer decodes and names the volume,
/// the instance and the id (and, with `meta`, its length and digest); with `deep`, the digest
/// of its body. Ok holds the bytes verified and the footer.
fn check_value_chunk(
    device: &(impl ReadAt + Sync + ?Sized),
    geometry: &Geometry,
    instance: u32,
    id: u64,
    slot: u64,
    meta: Option<&ValueChunkMeta>,
    deep: bool,
) -> Result<Result<(u64, ValueFooter), Found>, DeviceError> {
    let slot_offset = geometry.slot_offset(slot);
    let footer_offset = slot_offset + geometry.slot_size - VALUE_FOOTER_LEN as u64;
    let (bytes, unreadable) = read_tolerant(device, footer_offset, VALUE_FOOTER_LEN as u64, geometry.sector())?;
    if let Some(first) = unreadable.first() {
        return Ok(Err((Code::UnreadableSector, *first, format!("the footer in slot {slot} cannot be read"))));
    }
    let footer = match ValueFooter::decode(&bytes, footer_offset, geometry.slot_size) {
        Ok(footer) => footer,
        Err(error) => return Ok(Err((Code::ValueFooterInvalid, footer_offset, error.to_string()))),
    };
    let differs = footer.mismatches(&geometry.volume_uuid, instance, id, meta);
    if !differs.is_empty() {
        let differs: Vec<String> = differs.iter().map(ToString::to_string).collect();
        return Ok(Err((
            Code::ValueFooterInvalid,
            footer_offset,
            format!("the footer in slot {slot} says {}", differs.join("; ")),
        )));
    }
    if !deep {
        return Ok(Ok((VALUE_FOOTER_LEN as u64, footer)));
    }
    let (body, _) = read_tolerant(device, slot_offset, u64::from(footer.len_body), geometry.sector())?;
    if footer.verify_digest(&body, slot_offset).is_err() {
        return Ok(Err((
            Code::ValueDigestMismatch,
            slot_offset,
            format!("the digest of the {} bytes of values in slot {slot} does not match", footer.len_body),
        )));
    }
    Ok(Ok((body.len() as u64 + VALUE_FOOTER_LEN as u64, footer)))
}
