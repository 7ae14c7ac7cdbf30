//! Metadata images for bug reports (`lds metadump`), after e2image and xfs_metadump: the
//! labels, both logs of every instance and every chunk's structure (blocks with their
//! headers, index, filter, footer), with every value replaced by zeros of the same length and
//! every key by another of the same length that keeps the keys' order (unless `keep_keys`).
//! Lengths, offsets and the order of everything stay as they were, so the layout, the chains
//! of both logs and the shape of each tree are the original's; checksums are recomputed, so
//! `lds fsck` (without `--deep`: the blake3 digests and filters describe the original bytes)
//! finds what it finds on the original.
//!
//! The key map works per node of the trie of all keys the volume holds: the children of a
//! node, in order, are spread over the byte values (the j-th of m at j * 256 / (m + 1)), so a
//! mapped key keeps its length and its shared prefixes with every other key (hence the order)
//! and shows only how many different bytes follow each prefix. Nodes with more than 127
//! children (random bytes) keep their bytes.
//!
//! Bytes of the log areas outside valid objects are dropped (they may hold old batches) but
//! for intact object headers; chunks whose footer or index does not decode keep only their
//! footer; blocks whose checksum fails are dropped.
//!
//! Key sketches (SPEC.md §8.7) are kept as they are, as filters are: registers of key hashes.
//!
//! Value chunks (SPEC.md §8.6) hold values only: their bodies are zeros in the image and their
//! footers are kept as they are (the digest describes the original body, as a chunk's does).
//! A value pointer (entry kind 2, in blocks and batches) is metadata and keeps its lengths and
//! extents; its `value_crc32c` becomes that of zeros of the value's length, so that the value
//! it names reads as zeros of the same length, as an inline value does. The versions' value
//! sections and the chunks' value references are kept as they are.
//!
//! Log references (SPEC.md §8.9, entry kind 3 in log chunks) are metadata too and are kept
//! as they are: the batch they name is in the image (every valid object of the backup log
//! is, the retained ones included), with its key mapped as the chunk entry's is (one map for
//! the whole volume) and its value zeroed at its length, so each reference still resolves,
//! to zeros of the value's length. The chunks' log starts are kept with their metadata.

use std::collections::{BTreeSet, HashMap};

use lds_format::algorithms::recovery::{ChainObject, Payload};
use lds_format::algorithms::salvage::{each_valid_object, zero_pointer_value};
use lds_format::batch::decode_entries;
use lds_format::chunk::block::visit_block_checked;
use lds_format::chunk::footer::{Footer, FOOTER_LEN};
use lds_format::chunk::index::{decode_index, INDEX_ENTRY_FIXED_LEN};
use lds_format::codec::crc32c;
use lds_format::entry::EntryKind;
use lds_format::geometry::LogKind;
use lds_format::label::Label;
use lds_format::log::{
    area_context, encode_object, read_object, AreaContext, NewObject, ObjectHeader, HEADER_LEN, OBJECT_MAGIC,
};
use lds_format::value::{ValueFooter, VALUE_FOOTER_LEN};
use lds_format::version::meta::ChunkMeta;
use lds_volume::{BlockDevice, DeviceError};

/// Why a metadump could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetadumpError {
    /// The device failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// No label says where anything is.
    #[error("{device}: no valid label: a metadata image needs the layout (lds salvage reads volumes without one)")]
    NoLabel {
        /// The device.
        device: String,
    },
    /// The image could not be written.
    #[error("{0}")]
    Output(std::io::Error),
}

/// What a metadata image holds; its bytes go to the caller's sink as they are made (the
/// regions to write, in offset order: all else is zeros).
#[derive(Debug, Default)]
pub struct Metadump {
    /// Bytes of the source device.
    pub device_len: u64,
    /// Keys mapped (0 with `keep_keys`).
    pub keys: u64,
    /// Values replaced by zeros (inline, and named by pointers).
    pub values: u64,
    /// Value chunks kept (their bodies zeroed, their footers kept).
    pub value_chunks: u64,
    /// Log objects kept (re-encoded), per kind: version log, backup log.
    pub objects: (u64, u64),
    /// Chunks (sub-chunks) kept.
    pub chunks: u64,
    /// Blocks dropped because their checksum failed.
    pub blocks_dropped: u64,
    /// Bytes the volume uses: labels, both logs, the chunks' bodies and tails, and the value
    /// chunks' bodies and footers.
    pub used_bytes: u64,
}

/// The order-preserving, length-preserving key map (see the module documentation).
struct KeyMap {
    map: HashMap<Vec<u8>, Vec<u8>>,
}

impl KeyMap {
    fn new(keys: BTreeSet<Vec<u8>>) -> Self {
        let keys: Vec<Vec<u8>> = keys.into_iter().collect();
        let mut map = HashMap::with_capacity(keys.len());
        // (range of `keys` sharing the prefix, depth, the mapped prefix); an explicit stack,
        // since keys may be 64 KiB long.
        let mut stack: Vec<(usize, usize, usize, Vec<u8>)> = vec![(0, keys.len(), 0, Vec::new())];
        while let Some((start, end, depth, prefix)) = stack.pop() {
            let mut at = start;
            // Sorted: a key that ends here comes first.
            while at < end && keys[at].len() == depth {
                map.insert(keys[at].clone(), prefix.clone());
                at += 1;
            }
            let mut groups: Vec<(usize, usize, u8)> = Vec::new();
            while at < end {
                let byte = keys[at][depth];
                let group_start = at;
                while at < end && keys[at][depth] == byte {
                    at += 1;
                }
                groups.push((group_start, at, byte));
            }
            let count = groups.len();
            for (index, (group_start, group_end, byte)) in groups.into_iter().enumerate() {
                let mapped = if count > 127 { byte } else { ((index + 1) * 256 / (count + 1)) as u8 };
                let mut next = prefix.clone();
                next.push(mapped);
                stack.push((group_start, group_end, depth + 1, next));
            }
        }
        Self { map }
    }

    /// The mapped key (every key was collected first; an unknown one keeps its bytes).
    fn get<'a>(&'a self, key: &'a [u8]) -> &'a [u8] {
        self.map.get(key).map_or(key, Vec::as_slice)
    }
}

/// How keys are treated: collected (first pass) or replaced (second).
enum Keys<'a> {
    Collect(&'a mut BTreeSet<Vec<u8>>),
    Map(Option<&'a KeyMap>),
}

impl Keys<'_> {
    fn key(&mut self, key: &mut Vec<u8>) {
        match self {
            Keys::Collect(keys) => {
                keys.insert(key.clone());
            }
            Keys::Map(Some(map)) => *key = map.get(key).to_vec(),
            Keys::Map(None) => {}
        }
    }

    fn chunk(&mut self, chunk: &mut ChunkMeta) {
        self.key(&mut chunk.smallest_key);
        self.key(&mut chunk.largest_key);
    }

    /// Replaces `bytes[at..at + len]` (a key) with its mapped bytes.
    fn in_place(&mut self, bytes: &mut [u8], at: usize, len: usize) {
        let mut key = bytes[at..at + len].to_vec();
        self.key(&mut key);
        if key.len() == len {
            bytes[at..at + len].copy_from_slice(&key);
        }
    }
}

/// The log area `area` of `context` with its objects rewritten (keys mapped, values zeroed)
/// and everything else dropped but intact headers; with counts.
fn log_area(area: &[u8], context: &AreaContext, keys: &mut Keys<'_>, dump: &mut Metadump) -> Vec<u8> {
    let mut out = vec![0u8; area.len()];
    // Intact headers anywhere (objects that are not valid keep their header only).
    for position in (0..area.len().saturating_sub(HEADER_LEN - 1)).step_by(8) {
        if area[position..position + 4] != OBJECT_MAGIC {
            continue;
        }
        let Ok(header) = <&[u8; HEADER_LEN]>::try_from(&area[position..position + HEADER_LEN]) else { continue };
        if ObjectHeader::parse_tolerant(header).crc_ok {
            out[position..position + HEADER_LEN].copy_from_slice(header);
        }
    }
    // One object at a time: a version log may hold hundreds of thousands.
    for object in each_valid_object(area, context) {
        let Some(bytes) = rewrite_object(area, context, &object, keys, dump) else { continue };
        let at = object.offset as usize;
        if at + bytes.len() <= out.len() {
            out[at..at + bytes.len()].copy_from_slice(&bytes);
        }
    }
    out
}

fn rewrite_object(
    area: &[u8],
    context: &AreaContext,
    object: &ChainObject,
    keys: &mut Keys<'_>,
    dump: &mut Metadump,
) -> Option<Vec<u8>> {
    let raw = read_object(area, object.offset, context).ok()?;
    let payload: Vec<u8> = match &object.payload {
        Payload::Base(base) => {
            let mut base = (**base).clone();
            base.compact_pointers.iter_mut().for_each(|pointer| keys.key(&mut pointer.key));
            base.chunks.iter_mut().for_each(|chunk| keys.chunk(chunk));
            base.encode()
        }
        Payload::Delta(delta) => {
            let mut delta = delta.clone();
            delta.compact_pointers.iter_mut().for_each(|pointer| keys.key(&mut pointer.key));
            delta.added.iter_mut().for_each(|chunk| keys.chunk(chunk));
            delta.encode()
        }
        Payload::Journal(journal) => {
            let mut journal = journal.clone();
            keys.key(&mut journal.resume_key);
            journal.outputs.iter_mut().for_each(|chunk| keys.chunk(chunk));
            journal.encode()
        }
        Payload::Batch { .. } => {
            let mut payload = raw.payload.to_vec();
            let base = raw.payload.as_ptr() as usize;
            let mut spans = Vec::new();
            decode_entries(raw.payload, 0, |kind, key, value| {
                let value_at = value.as_ptr() as usize - base;
                spans.push((key.as_ptr() as usize - base, key.len(), kind, value_at, value.len()));
            })
            .ok()?;
            for (key_at, key_len, kind, value_at, value_len) in spans {
                keys.in_place(&mut payload, key_at, key_len);
                if matches!(keys, Keys::Map(_)) {
                    zero_value(&mut payload[value_at..value_at + value_len], kind);
                    dump.values += 1;
                }
            }
            payload
        }
        Payload::WrapLeft(_) | Payload::WrapRight => raw.payload.to_vec(),
    };
    if payload.len() != raw.payload.len() {
        return None;
    }
    match context.kind {
        LogKind::Version => dump.objects.0 += 1,
        LogKind::Backup => dump.objects.1 += 1,
    }
    let header = &object.header;
    let new = NewObject {
        object_type: object.object_type,
        kind: context.kind,
        instance: header.instance,
        sn: header.sn,
        lsn: header.lsn,
        log_offset: header.log_offset,
        volume_uuid: header.volume_uuid,
    };
    Some(encode_object(&new, &payload))
}

/// An entry's value as the image keeps it: zeros, for a pointer its extents with the crc32c
/// of zeros, a log reference as it is (see the module documentation).
fn zero_value(value: &mut [u8], kind: EntryKind) {
    match kind {
        EntryKind::LogRef => {}
        EntryKind::Pointer if zero_pointer_value(value) => {}
        _ => value.fill(0),
    }
}

/// A slot's value chunk as the image keeps it: its footer alone (the body is values); `None`
/// when the slot holds no value chunk of this volume.
fn rewrite_value_slot(slot: &[u8], offset: u64, uuid: [u8; 16], dump: &mut Metadump) -> Option<Vec<u8>> {
    let footer_at = slot.len().checked_sub(VALUE_FOOTER_LEN)?;
    let footer = ValueFooter::decode(&slot[footer_at..], offset + footer_at as u64, slot.len() as u64).ok()?;
    if footer.volume_uuid != uuid {
        return None;
    }
    let mut out = vec![0u8; slot.len()];
    out[footer_at..].copy_from_slice(&slot[footer_at..]);
    dump.value_chunks += 1;
    dump.used_bytes += u64::from(footer.len_body) + VALUE_FOOTER_LEN as u64;
    Some(out)
}

/// A slot's chunk rewritten (keys mapped, values zeroed, checksums recomputed), or its footer
/// alone where the index does not decode, or a value chunk's footer alone; `None` when it
/// holds neither of this volume.
fn rewrite_slot(slot: &[u8], offset: u64, uuid: [u8; 16], keys: &mut Keys<'_>, dump: &mut Metadump) -> Option<Vec<u8>> {
    if slot.len() >= VALUE_FOOTER_LEN && ValueFooter::has_magic(&slot[slot.len() - VALUE_FOOTER_LEN..]) {
        return match keys {
            Keys::Map(_) => rewrite_value_slot(slot, offset, uuid, dump),
            Keys::Collect(_) => None,
        };
    }
    let footer_at = slot.len().checked_sub(FOOTER_LEN)?;
    let footer = Footer::decode(&slot[footer_at..], offset + footer_at as u64, slot.len() as u64).ok()?;
    if footer.volume_uuid != uuid {
        return None;
    }
    let mut out = vec![0u8; slot.len()];
    out[footer_at..].copy_from_slice(&slot[footer_at..]);
    let index_range = footer.ofs_index as usize..(footer.ofs_index + footer.len_index) as usize;
    let Some(index_bytes) = slot.get(index_range.clone()) else { return Some(out) };
    let Ok(index) = decode_index(index_bytes, offset + footer.ofs_index as u64, &footer) else { return Some(out) };
    dump.chunks += 1;
    dump.used_bytes += u64::from(footer.len_body) + (slot.len() - footer.ofs_index as usize) as u64;
    // The filter as it was (its bits say nothing of the keys), and so is the key sketch
    // (SPEC.md §8.7: registers of key hashes), so that its crc32c checks as on the original.
    let filter_range = footer.ofs_filter as usize..footer_at;
    if let Some(filter) = slot.get(filter_range.clone()) {
        out[filter_range].copy_from_slice(filter);
    }
    let sketch_range = footer.ofs_sketch as usize..footer.ofs_sketch as usize + footer.len_sketch as usize;
    if let Some(sketch) = slot.get(sketch_range.clone()) {
        out[sketch_range].copy_from_slice(sketch);
    }
    for entry in &index {
        let range = entry.ofs_block as usize..(entry.ofs_block + entry.len_block) as usize;
        let Some(block) = slot.get(range.clone()) else { continue };
        let base = block.as_ptr() as usize;
        let mut spans = Vec::new();
        let read = visit_block_checked(block, offset + range.start as u64, false, |entry| {
            let value_at = entry.value.as_ptr() as usize - base;
            spans.push((entry.key.as_ptr() as usize - base, entry.key.len(), entry.kind, value_at, entry.value.len()));
        });
        if read.is_err() {
            dump.blocks_dropped += 1;
            continue;
        }
        let mut rewritten = block.to_vec();
        for (key_at, key_len, kind, value_at, value_len) in spans {
            keys.in_place(&mut rewritten, key_at, key_len);
            if matches!(keys, Keys::Map(_)) {
                zero_value(&mut rewritten[value_at..value_at + value_len], kind);
                // A log reference's value is counted where its batch holds it.
                dump.values += u64::from(kind != EntryKind::LogRef);
            }
        }
        let crc_at = rewritten.len() - 4;
        let crc = crc32c(&rewritten[..crc_at]);
        rewritten[crc_at..].copy_from_slice(&crc.to_le_bytes());
        out[range].copy_from_slice(&rewritten);
    }
    // The index: each entry's last key in place.
    let mut index_out = index_bytes.to_vec();
    let mut at = 0usize;
    for _ in 0..index.len() {
        let len_at = at + INDEX_ENTRY_FIXED_LEN - 2;
        let len = usize::from(u16::from_le_bytes([index_out[len_at], index_out[len_at + 1]]));
        keys.in_place(&mut index_out, len_at + 2, len);
        at = len_at + 2 + len;
    }
    out[index_range].copy_from_slice(&index_out);
    let mut footer = footer;
    footer.index_crc32c = crc32c(&index_out);
    out[footer_at..].copy_from_slice(&footer.encode());
    Some(out)
}

/// The offset of every slot the device holds (a device shorter than the volume lost the rest;
/// a volume of several devices has no slots where a removed device was, SPEC.md §4.3).
fn slot_offsets(label: &Label, device_len: u64) -> impl Iterator<Item = u64> + '_ {
    let geometry = &label.geometry;
    (0..geometry.num_slots)
        .filter(|&slot| label.slot_present(slot))
        .map(|slot| geometry.slot_offset(slot))
        .filter(move |&offset| offset + geometry.slot_size <= device_len)
}

/// The label sector at `offset` of the image: as read, or, for a volume of several devices,
/// the same label as one device's (the image is one file of the volume's address space).
fn label_region(device: &dyn BlockDevice, label: &Label, offset: u64) -> Result<Vec<u8>, MetadumpError> {
    let sector = label.geometry.sector();
    if label.devices.is_none() {
        return Ok(device.read_vec(offset, sector)?);
    }
    let single = label.clone().with_devices(None);
    Ok(lds_volume::members::label_bytes(&single))
}

/// Makes a metadata image of the volume on `device`, handing each region of it to
/// `write(offset, bytes)` as it is made, in offset order (a label sector, a log area, a slot:
/// one at a time is held); the image is zeros elsewhere, as long as the device.
/// `progress(done, total)` hears bytes read (each pass reads the slots once).
pub fn metadump(
    device: &dyn BlockDevice,
    keep_keys: bool,
    progress: &mut dyn FnMut(u64, u64),
    write: &mut dyn FnMut(u64, &[u8]) -> std::io::Result<()>,
) -> Result<Metadump, MetadumpError> {
    let labels = lds_volume::read_labels(device)?;
    // Two valid labels that conflict are both copied; the primary's layout is read.
    let label = match (labels.choose(), &labels.primary) {
        (Ok((_, label)), _) | (Err(_), Ok(label)) => label,
        _ => return Err(MetadumpError::NoLabel { device: device.name().display().to_string() }),
    };
    let geometry = label.geometry;
    let mut dump = Metadump { device_len: device.len(), ..Metadump::default() };
    let contexts: Vec<AreaContext> = (0..geometry.instance_count)
        .flat_map(|instance| [LogKind::Version, LogKind::Backup].map(|kind| area_context(&geometry, kind, instance)))
        .collect();
    let total = geometry.num_slots * geometry.slot_size * if keep_keys { 1 } else { 2 };
    let mut done = 0;
    // Pass 1: every key.
    let map = if keep_keys {
        None
    } else {
        let mut all = BTreeSet::new();
        let mut scratch = Metadump::default();
        for context in contexts.iter().filter(|context| context.ofs_area + context.len_area <= device.len()) {
            let area = device.read_vec(context.ofs_area, context.len_area)?;
            log_area(&area, context, &mut Keys::Collect(&mut all), &mut scratch);
        }
        for offset in slot_offsets(label, device.len()) {
            let slot = device.read_vec(offset, geometry.slot_size)?;
            rewrite_slot(&slot, offset, geometry.volume_uuid, &mut Keys::Collect(&mut all), &mut scratch);
            done += geometry.slot_size;
            progress(done, total);
        }
        dump.keys = all.len() as u64;
        Some(KeyMap::new(all))
    };
    // Pass 2: the image.
    let sector = geometry.sector();
    write(0, &label_region(device, label, 0)?).map_err(MetadumpError::Output)?;
    for context in contexts.iter().filter(|context| context.ofs_area + context.len_area <= device.len()) {
        let area = device.read_vec(context.ofs_area, context.len_area)?;
        let rewritten = log_area(&area, context, &mut Keys::Map(map.as_ref()), &mut dump);
        dump.used_bytes += context.len_area;
        write(context.ofs_area, &rewritten).map_err(MetadumpError::Output)?;
    }
    for offset in slot_offsets(label, device.len()) {
        let slot = device.read_vec(offset, geometry.slot_size)?;
        if let Some(rewritten) =
            rewrite_slot(&slot, offset, geometry.volume_uuid, &mut Keys::Map(map.as_ref()), &mut dump)
        {
            write(offset, &rewritten).map_err(MetadumpError::Output)?;
        }
        done += geometry.slot_size;
        progress(done, total);
    }
    let backup_label = geometry.ofs_backup_label();
    if backup_label + sector <= device.len() {
        write(backup_label, &label_region(device, label, backup_label)?).map_err(MetadumpError::Output)?;
    }
    dump.used_bytes += 2 * sector;
    Ok(dump)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_map_keeps_length_order_and_shared_prefixes() {
        let keys: BTreeSet<Vec<u8>> = ["a", "ab", "abc", "abd", "b", "user:0001", "user:0002", "user:1000", "zz"]
            .iter()
            .map(|key| key.as_bytes().to_vec())
            .collect();
        let map = KeyMap::new(keys.clone());
        let mapped: Vec<&[u8]> = keys.iter().map(|key| map.get(key)).collect();
        for (key, mapped) in keys.iter().zip(&mapped) {
            assert_eq!(key.len(), mapped.len());
        }
        for pair in mapped.windows(2) {
            assert!(pair[0] < pair[1], "{:?} then {:?}", pair[0], pair[1]);
        }
        assert_eq!(&map.get(b"abc")[..2], map.get(b"ab"), "a shared prefix stays shared");
        assert!(mapped.iter().all(|mapped| !mapped.windows(4).any(|window| window == b"user")), "{mapped:?}");
    }
}
