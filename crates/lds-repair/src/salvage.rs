//! Salvage (`lds salvage`), after `btrfs restore` and RocksDB's RepairDB: for a volume that
//! repair cannot rebuild in place (both labels or the whole version log lost), read every
//! entry still readable without trusting any version: every slot's chunk (its footer, index
//! and blocks, or its blocks alone where the tail is lost, SPEC.md §8.5) and every valid batch
//! the backup logs hold, and keep for each key its entry with the highest sequence number.
//! Nothing is written to the volume: the caller writes what is kept to a new volume or
//! exports it.
//!
//! Where the labels are lost, the slot area is found from the chunk footers: each records its
//! slot size, the volume's uuid and its chunk id (the slot of its first sub-chunk), so a
//! footer's device offset gives where the slot area starts; the backup logs are found from
//! their object headers, which name the log, the instance and their offset in the area.

use std::collections::{BTreeMap, BTreeSet};

use lds_format::batch::{decode_entries, EntryKind};
use lds_format::chunk::{Footer, CHUNK_MAGIC, FOOTER_LEN};
use lds_format::image::area_context;
use lds_format::label::{Geometry, LogKind};
use lds_format::log::{read_object, AreaContext, ObjectHeader, HEADER_LEN, OBJECT_MAGIC};
use lds_format::recovery::Payload;
use lds_format::salvage::{salvage_sub_chunk, valid_objects};
use lds_volume::volume::read_tolerant;
use lds_volume::{BlockDevice, DeviceError};

/// The newest entry of a key: sequence, kind, value.
pub type Newest = (u64, EntryKind, Vec<u8>);

/// What salvage found and kept.
#[derive(Debug, Default)]
pub struct Salvaged {
    /// How the layout was learnt: from a label, or from chunk footers.
    pub layout_from: String,
    /// The volume's uuid.
    pub volume_uuid: [u8; 16],
    /// The geometry when a label gave it.
    pub geometry: Option<Geometry>,
    /// Slot size and device offset of slot 0.
    pub slots: (u64, u64),
    /// Slots read.
    pub slots_scanned: u64,
    /// Slots holding a chunk of this volume (by its footer).
    pub chunks: u64,
    /// Slots whose tail was lost, read block by block.
    pub tails_lost: u64,
    /// Blocks read whose checksum held.
    pub blocks_read: u64,
    /// Stretches of chunks that held no readable block, described.
    pub damaged: Vec<String>,
    /// Entries read from chunks.
    pub chunk_entries: u64,
    /// The backup log areas read: instance, device offset, bytes (from the label, or found
    /// from object headers).
    pub backup_areas: Vec<(u32, u64, u64)>,
    /// Valid batches read from the backup logs, and their entries.
    pub batches: (u64, u64),
    /// Per instance, each key's newest entry.
    pub keys: BTreeMap<u32, BTreeMap<Vec<u8>, Newest>>,
}

impl Salvaged {
    /// Keys whose newest entry is a put, over every instance.
    pub fn live_keys(&self) -> u64 {
        self.keys.values().flat_map(|keys| keys.values()).filter(|(_, kind, _)| *kind == EntryKind::Put).count() as u64
    }

    /// Keys whose newest entry is a delete (dropped when written out).
    pub fn deleted_keys(&self) -> u64 {
        self.keys.values().flat_map(|keys| keys.values()).filter(|(_, kind, _)| *kind == EntryKind::Delete).count()
            as u64
    }

    fn keep(&mut self, instance: u32, key: &[u8], sequence: u64, kind: EntryKind, value: &[u8]) {
        let keys = self.keys.entry(instance).or_default();
        match keys.get_mut(key) {
            Some(newest) if newest.0 >= sequence => {}
            Some(newest) => *newest = (sequence, kind, value.to_vec()),
            None => {
                keys.insert(key.to_vec(), (sequence, kind, value.to_vec()));
            }
        }
    }
}

/// Why salvage could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SalvageError {
    /// The device failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// Neither a label nor a chunk footer says where the slots are.
    #[error("{device}: no valid label and no chunk footer found: nothing says where the data is")]
    NothingFound {
        /// The device.
        device: String,
    },
}

/// Bytes read at each end of a slot to tell an empty one.
const PROBE_LEN: u64 = 4096;
/// Bytes read at a time while looking for footers.
const SCAN_WINDOW: u64 = 16 << 20;
/// Footers are looked for at every multiple of this (the smallest sector size).
const SCAN_ALIGN: u64 = 512;

/// The slot area from the chunk footers: the most common (uuid, slot size, slot 0 offset).
fn slots_from_footers(
    device: &dyn BlockDevice,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Option<([u8; 16], u64, u64)>, DeviceError> {
    let mut votes: BTreeMap<([u8; 16], u64, u64), u64> = BTreeMap::new();
    let len = device.len();
    let mut start = 0;
    while start < len {
        let window = SCAN_WINDOW.min(len - start);
        let bytes = device.read_vec(start, window)?;
        let mut end = SCAN_ALIGN;
        while end <= window {
            let at = (end as usize).saturating_sub(FOOTER_LEN);
            if end as usize >= FOOTER_LEN && bytes[at..at + 8] == CHUNK_MAGIC {
                let offset = start + at as u64;
                if let Ok(raw) = Footer::parse_raw(&bytes[at..end as usize], offset) {
                    let slot_size = u64::from(raw.slot_size);
                    if let Ok(footer) = Footer::decode(&bytes[at..end as usize], offset, slot_size) {
                        let slot_end = start + end;
                        let single = footer.num_sub_chunks == 1 && footer.sub_chunk_index == 0;
                        let before = footer.chunk_id.checked_add(1).and_then(|count| count.checked_mul(slot_size));
                        if let Some(ofs_slots) =
                            before.filter(|_| single).and_then(|before| slot_end.checked_sub(before))
                        {
                            *votes.entry((footer.volume_uuid, slot_size, ofs_slots)).or_default() += 1;
                        }
                    }
                }
            }
            end += SCAN_ALIGN;
        }
        start += window;
        progress(start, len);
    }
    Ok(votes.into_iter().max_by_key(|&(_, count)| count).map(|(found, _)| found))
}

/// Where the backup logs are, without a label: every intact object header before the slot
/// area that names this volume and the backup log gives its area's start (its device offset
/// less its `log_offset`); the most common start of each instance is taken, and the area is
/// taken to end after the furthest object seen there.
fn backup_areas_from_headers(
    device: &dyn BlockDevice,
    uuid: [u8; 16],
    ofs_slots: u64,
) -> Result<Vec<AreaContext>, DeviceError> {
    // Logs of a few GiB at most stand before the slots; beyond that nothing is guessed.
    if ofs_slots > (4 << 30) {
        return Ok(Vec::new());
    }
    let bytes = device.read_vec(0, ofs_slots)?;
    let mut votes: BTreeMap<(u32, u64), (u64, u64)> = BTreeMap::new();
    for position in (0..bytes.len().saturating_sub(HEADER_LEN - 1)).step_by(8) {
        if bytes[position..position + 4] != OBJECT_MAGIC {
            continue;
        }
        let Ok(header) = <&[u8; HEADER_LEN]>::try_from(&bytes[position..position + HEADER_LEN]) else { continue };
        let found = ObjectHeader::parse_tolerant(header);
        let header = found.header;
        if !found.crc_ok || header.volume_uuid != uuid || header.log_kind != LogKind::Backup.code() {
            continue;
        }
        let Some(start) = (position as u64).checked_sub(header.log_offset) else { continue };
        let vote = votes.entry((header.instance, start)).or_default();
        vote.0 += 1;
        vote.1 = vote.1.max(header.log_offset + HEADER_LEN as u64 + u64::from(header.len_payload));
    }
    let mut best: BTreeMap<u32, (u64, u64, u64)> = BTreeMap::new();
    for ((instance, start), (count, end)) in votes {
        if best.get(&instance).is_none_or(|&(_, _, most)| count > most) {
            best.insert(instance, (start, end, count));
        }
    }
    Ok(best
        .into_iter()
        .map(|(instance, (start, end, _))| AreaContext {
            kind: LogKind::Backup,
            instance,
            volume_uuid: uuid,
            len_area: end.div_ceil(SCAN_ALIGN) * SCAN_ALIGN,
            sector_size: SCAN_ALIGN as u32,
            ofs_area: start,
        })
        .collect())
}

/// Reads everything salvageable from `device`. `progress(done, total)` hears bytes read.
pub fn salvage(device: &dyn BlockDevice, progress: &mut dyn FnMut(u64, u64)) -> Result<Salvaged, SalvageError> {
    let name = device.name().display().to_string();
    let mut salvaged = Salvaged::default();
    let labels = lds_volume::volume::read_labels(device)?;
    let label = labels.choose().ok().map(|(_, label)| label.clone());
    let geometry = label.as_ref().map(|label| label.geometry);
    let (uuid, slot_size, ofs_slots) = match geometry {
        Some(geometry) => {
            salvaged.layout_from = "label".into();
            (geometry.volume_uuid, geometry.slot_size, geometry.slot_offset(0))
        }
        None => {
            let Some(found) = slots_from_footers(device, progress)? else {
                return Err(SalvageError::NothingFound { device: name });
            };
            salvaged.layout_from = "chunk footers (both labels lost)".into();
            found
        }
    };
    salvaged.volume_uuid = uuid;
    salvaged.geometry = geometry;
    salvaged.slots = (slot_size, ofs_slots);
    let end = geometry.map_or(device.len(), |geometry| geometry.volume_len.min(device.len()));
    let slot_count = geometry.map_or(end.saturating_sub(ofs_slots) / slot_size, |geometry| geometry.num_slots);
    let single_instance = geometry.is_none_or(|geometry| geometry.instance_count == 1);
    for slot in 0..slot_count {
        // A slot no device holds (a removed device's, SPEC.md §4.3) has nothing to read.
        if label.as_ref().is_some_and(|label| !label.slot_present(slot)) {
            continue;
        }
        let offset = ofs_slots + slot * slot_size;
        progress((slot + 1) * slot_size, slot_count * slot_size);
        salvaged.slots_scanned += 1;
        // A slot that never held a chunk is zeros: its first block and its footer say so
        // without reading the rest (a chunk starts with a block and ends with its footer).
        let probe = PROBE_LEN.min(slot_size);
        let zeros = |bytes: &[u8]| bytes.iter().all(|&byte| byte == 0);
        let head = read_tolerant(device, offset, probe, SCAN_ALIGN)?.0;
        if zeros(&head) && zeros(&read_tolerant(device, offset + slot_size - probe, probe, SCAN_ALIGN)?.0) {
            continue;
        }
        let (bytes, unreadable) = read_tolerant(device, offset, slot_size, SCAN_ALIGN)?;
        if let (Some(first), Some(last)) = (unreadable.first(), unreadable.last()) {
            salvaged
                .damaged
                .push(format!("slot {slot}: {} unreadable sectors from offset {first} to {last}", unreadable.len()));
        }
        let read = salvage_sub_chunk(&bytes, offset);
        let instance = match &read.footer {
            Some(footer) if footer.volume_uuid == uuid => footer.instance,
            // Another volume's chunk (the device was formatted again since).
            Some(_) => continue,
            // A lost tail: its blocks are kept when they can only be this instance's.
            None if single_instance && read.blocks_read > 0 => {
                salvaged.tails_lost += 1;
                0
            }
            None => continue,
        };
        if read.footer.is_some() {
            salvaged.chunks += 1;
        }
        salvaged.blocks_read += read.blocks_read;
        salvaged.damaged.extend(read.damaged.iter().map(|span| {
            format!("slot {slot} +{} ({} bytes): {}; {}", span.offset, span.len, span.reason, span.key_range())
        }));
        for entry in &read.entries {
            salvaged.chunk_entries += 1;
            salvaged.keep(instance, &entry.key, entry.sequence, entry.kind, &entry.value);
        }
    }
    let contexts: Vec<AreaContext> = match geometry {
        Some(geometry) => {
            (0..geometry.instance_count).map(|instance| area_context(&geometry, LogKind::Backup, instance)).collect()
        }
        None => backup_areas_from_headers(device, uuid, ofs_slots)?,
    };
    salvaged.backup_areas =
        contexts.iter().map(|context| (context.instance, context.ofs_area, context.len_area)).collect();
    {
        for context in contexts {
            let instance = context.instance;
            let area = device.read_vec(context.ofs_area, context.len_area)?;
            for object in valid_objects(&area, &context) {
                let Payload::Batch { first_sequence, .. } = object.payload else { continue };
                let Ok(raw) = read_object(&area, object.offset, &context) else { continue };
                let mut sequence = first_sequence;
                let mut entries = Vec::new();
                let decoded = decode_entries(raw.payload, context.ofs_area + object.offset, |kind, key, value| {
                    entries.push((sequence, kind, key.to_vec(), value.to_vec()));
                    sequence += 1;
                });
                if decoded.is_err() {
                    continue;
                }
                salvaged.batches.0 += 1;
                salvaged.batches.1 += entries.len() as u64;
                for (sequence, kind, key, value) in entries {
                    salvaged.keep(instance, &key, sequence, kind, &value);
                }
            }
        }
    }
    Ok(salvaged)
}

/// The instances salvage found data of.
pub fn instances(salvaged: &Salvaged) -> BTreeSet<u32> {
    salvaged.keys.keys().copied().collect()
}
