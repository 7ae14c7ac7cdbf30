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
//!
//! Values in value chunks (SPEC.md §8.5, §8.6): an entry that is a value pointer is followed
//! to the value chunks its extents name, by id within the entry's instance. A value chunk is
//! found where a slot's footer (checked) names that id and instance, and where the newest
//! version the instance's version log still describes lists it (the slot of a value chunk
//! whose footer is lost: the footer is rebuilt from the version's metadata to check the
//! digest). Where a value chunk's digest does not hold, or a copy of it is all there is, each
//! value is still read and kept exactly when its `value_crc32c` holds: values are
//! self-checking as blocks are. A key whose newest entry names a value that cannot be read
//! (its value chunk lost, or bytes that do not check) is listed with its sequence number and
//! why, and not kept: neither garbage nor an older value is written for it.
//!
//! Log references (SPEC.md §8.9, entry kind 3 in log chunks): an entry whose value names a
//! put in a write batch of the backup log is followed to that batch, in the backup log area
//! of its instance (the label's, or the one found from object headers), and its value kept
//! when `lds_format::logref` finds the batch valid with the lsn named and the entry a put with
//! the same key, sequence number and value length. The batch itself, when it is intact, gives
//! the same entry as a put. A reference that does not resolve is a value salvage cannot read,
//! reported as a lost pointer's is. The output holds ordinary chunks only.

use std::collections::{BTreeMap, BTreeSet};

use lds_format::algorithms::recovery::Payload;
use lds_format::algorithms::salvage::{
    last_good_version, salvage_sub_chunk, salvage_value_chunk, valid_objects, value_footer_of_meta, value_footer_uuid,
};
use lds_format::batch::decode_entries;
use lds_format::chunk::footer::{Footer, CHUNK_MAGIC, FOOTER_LEN};
use lds_format::codec::{crc32c, display_key};
use lds_format::entry::EntryKind;
use lds_format::geometry::{Geometry, LogKind};
use lds_format::log::{area_context, read_object, AreaContext, ObjectHeader, HEADER_LEN, OBJECT_MAGIC};
use lds_format::logref::{LogBatch, LogRef};
use lds_format::value::{Extent, ValueChunkMeta, ValueFooter, ValuePointer, VALUE_FOOTER_LEN};
use lds_volume::block::read_tolerant;
use lds_volume::{BlockDevice, DeviceError};

/// The newest entry of a key: sequence, kind (put or delete: a pointer's value is read into a
/// put), value.
pub type Newest = (u64, EntryKind, Vec<u8>);

/// A key whose newest entry names a value salvage could not read: not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostValue {
    /// The instance.
    pub instance: u32,
    /// The key.
    pub key: Vec<u8>,
    /// The sequence number of its newest entry.
    pub sequence: u64,
    /// Why its value is lost (the value chunk and device offset, or the check that failed).
    pub reason: String,
}

impl std::fmt::Display for LostValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "instance {} key {} (sequence {}): {}",
            self.instance,
            display_key(&self.key),
            self.sequence,
            self.reason
        )
    }
}

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
    /// Slots the label gives the volume that lie wholly past the device's end (media cut
    /// short), not read.
    pub slots_past_end: u64,
    /// Stretches of chunks that held no readable block, described.
    pub damaged: Vec<String>,
    /// Entries read from chunks.
    pub chunk_entries: u64,
    /// The backup log areas read: instance, device offset, bytes (from the label, or found
    /// from object headers).
    pub backup_areas: Vec<(u32, u64, u64)>,
    /// Valid batches read from the backup logs, and their entries.
    pub batches: (u64, u64),
    /// Per instance, each key's newest entry (with the values pointers name read).
    pub keys: BTreeMap<u32, BTreeMap<Vec<u8>, Newest>>,
    /// The volume uses value chunks (its label says so, or value chunks or pointers were
    /// found): the output is formatted with them, so that values larger than an entry may be
    /// (a quarter of a slot) are written whole.
    pub has_value_chunks: bool,
    /// Slots holding a value chunk of this volume (by its footer).
    pub value_chunks: u64,
    /// Value chunks the recovered versions list, over every instance whose version log was
    /// read (it is read only when pointers were found).
    pub value_chunks_listed: u64,
    /// Values read through pointers whose crc32c held (those of the keys kept).
    pub values_read: u64,
    /// Keys whose newest entry names a value that could not be read.
    pub lost_values: Vec<LostValue>,
    /// Values read through log references (SPEC.md §8.9) whose batch resolved (those of the
    /// keys kept whose newest entry no intact batch holds as itself).
    pub log_values_read: u64,
}

/// Candidates for a key's newest entry: its sequence and kind, and the values found for it
/// (the same entry may be in several chunks, or in a chunk and in the backup log: a pointer
/// relocated by a merge names other value chunks than the copy a dead chunk still holds).
#[derive(Debug)]
struct Found {
    sequence: u64,
    kind: EntryKind,
    values: Vec<Vec<u8>>,
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
}

/// Every key's newest entry, per instance, as found.
#[derive(Debug, Default)]
struct FoundKeys(BTreeMap<u32, BTreeMap<Vec<u8>, Found>>);

impl FoundKeys {
    fn keep(&mut self, instance: u32, key: &[u8], sequence: u64, kind: EntryKind, value: &[u8]) {
        let keys = self.0.entry(instance).or_default();
        let fresh = || Found { sequence, kind, values: vec![value.to_vec()] };
        match keys.get_mut(key) {
            Some(found) if found.sequence > sequence => {}
            Some(found) if found.sequence == sequence => {
                // The same entry again: a value in place beats a pointer or a log reference
                // (nothing to read), and another pointer or reference is another way to the
                // value.
                let indirect = |kind: EntryKind| matches!(kind, EntryKind::Pointer | EntryKind::LogRef);
                if indirect(found.kind) && kind == EntryKind::Put {
                    *found = fresh();
                } else if indirect(found.kind) && kind == found.kind && !found.values.iter().any(|known| known == value)
                {
                    found.values.push(value.to_vec());
                }
            }
            Some(found) => *found = fresh(),
            None => {
                keys.insert(key.to_vec(), fresh());
            }
        }
    }

    fn has_pointers(&self) -> bool {
        self.0.values().flat_map(BTreeMap::values).any(|found| found.kind == EntryKind::Pointer)
    }
}

/// One place a value chunk's bytes may be read.
#[derive(Debug, Clone)]
struct ValueSource {
    slot: u64,
    len_body: u32,
    /// Whether its digest held over the body (sources that hold are tried first).
    digest_holds: bool,
    /// How it was found, for messages.
    found_by: &'static str,
}

/// The value chunks found, by instance and id, and how to read them.
struct ValueChunks<'a> {
    device: &'a dyn BlockDevice,
    slot_size: u64,
    ofs_slots: u64,
    slot_count: u64,
    sources: BTreeMap<(u32, u64), Vec<ValueSource>>,
}

impl ValueChunks<'_> {
    fn add(&mut self, instance: u32, value_chunk_id: u64, source: ValueSource) {
        let sources = self.sources.entry((instance, value_chunk_id)).or_default();
        if sources.iter().all(|known| known.slot != source.slot) {
            sources.push(source);
            // Stable: among sources whose digest holds, the order found.
            sources.sort_by_key(|source| !source.digest_holds);
        }
    }

    fn slot_offset(&self, slot: u64) -> u64 {
        self.ofs_slots + slot * self.slot_size
    }

    fn describe(&self, value_chunk_id: u64, source: &ValueSource) -> String {
        format!(
            "value chunk {value_chunk_id} at slot {} (device offset {}, {}{})",
            source.slot,
            self.slot_offset(source.slot),
            source.found_by,
            if source.digest_holds { "" } else { "; its digest does not hold" }
        )
    }

    /// The bytes of `extent`, from the `attempt`-th source of its value chunk (the last one
    /// when there are fewer).
    fn read_extent(&self, instance: u32, extent: &Extent, attempt: usize) -> Result<(Vec<u8>, String), String> {
        let id = extent.value_chunk_id;
        let Some(source) = self
            .sources
            .get(&(instance, id))
            .and_then(|sources| sources.get(attempt.min(sources.len().saturating_sub(1))))
        else {
            return Err(format!(
                "value chunk {id} is lost: no slot holds a footer naming it (instance {instance}) and no version \
                 read lists it (the pointer names slot {})",
                extent.slot
            ));
        };
        let described = self.describe(id, source);
        if u64::from(extent.offset) + u64::from(extent.len) > u64::from(source.len_body) {
            return Err(format!(
                "{described}: the extent of {} bytes at {} runs past its body of {} bytes",
                extent.len, extent.offset, source.len_body
            ));
        }
        let offset = self.slot_offset(source.slot) + u64::from(extent.offset);
        let (bytes, unreadable) = read_tolerant(self.device, offset, u64::from(extent.len), SCAN_ALIGN)
            .map_err(|error| format!("{described}: {error}"))?;
        if let Some(first) = unreadable.first() {
            return Err(format!("{described}: {} unreadable sectors from device offset {first}", unreadable.len()));
        }
        Ok((bytes, described))
    }

    /// The value `pointer` (an entry of `instance`) names, its crc32c checked; each source of
    /// its value chunks is tried in turn.
    fn read(&self, instance: u32, pointer: &[u8]) -> Result<Vec<u8>, String> {
        let pointer = ValuePointer::decode(pointer, 0).map_err(|error| format!("its pointer is invalid: {error}"))?;
        let attempts = pointer
            .extents
            .iter()
            .map(|extent| self.sources.get(&(instance, extent.value_chunk_id)).map_or(0, Vec::len))
            .max()
            .unwrap_or(0)
            .max(1);
        let mut failure = String::new();
        for attempt in 0..attempts {
            let mut value = Vec::with_capacity(pointer.len_value as usize);
            let mut read_from = Vec::new();
            let read = pointer.extents.iter().try_for_each(|extent| {
                let (bytes, described) = self.read_extent(instance, extent, attempt)?;
                value.extend_from_slice(&bytes);
                if !read_from.contains(&described) {
                    read_from.push(described);
                }
                Ok::<_, String>(())
            });
            match read {
                Err(error) => failure = error,
                Ok(()) if pointer.check_value(&value, 0).is_ok() => return Ok(value),
                Ok(()) => {
                    failure = format!(
                        "the value read does not check: crc32c {:#010x}, the pointer's {:#010x}, from {}",
                        crc32c(&value),
                        pointer.value_crc32c,
                        read_from.join(", ")
                    );
                }
            }
        }
        Err(failure)
    }

    /// Adds the value chunks the newest version of each of `contexts` (version logs) lists
    /// whose slot is not known to hold them: a slot whose footer is lost is checked with the
    /// footer rebuilt from the metadata; one whose footer names another value chunk is left.
    /// Returns how many value chunks the versions list.
    fn add_listed(
        &mut self,
        contexts: &[AreaContext],
        uuid: [u8; 16],
        footers: &BTreeMap<u64, (u32, u64)>,
        damaged: &mut Vec<String>,
    ) -> Result<u64, DeviceError> {
        let mut listed = 0;
        for context in contexts.iter().filter(|context| context.ofs_area + context.len_area <= self.device.len()) {
            let area = self.device.read_vec(context.ofs_area, context.len_area)?;
            let Some(good) = last_good_version(&area, context) else { continue };
            let metas: Vec<ValueChunkMeta> = good.version.value_chunks.values().copied().collect();
            listed += metas.len() as u64;
            for meta in metas {
                let (instance, id) = (context.instance, meta.value_chunk_id);
                if meta.slot >= self.slot_count {
                    continue;
                }
                match footers.get(&meta.slot) {
                    Some(&named) if named == (instance, id) => continue,
                    // Another value chunk's (the version is older than the slot's contents).
                    Some(_) => continue,
                    None => {}
                }
                let footer = value_footer_of_meta(&meta, instance, uuid, self.slot_size);
                let offset = self.slot_offset(meta.slot);
                let (body, _) = read_tolerant(self.device, offset, u64::from(meta.len_body), SCAN_ALIGN)?;
                let digest_holds = footer.verify_digest(&body, offset).is_ok();
                damaged.push(format!(
                    "slot {}: value chunk {id} (instance {instance}) has no valid footer; the version log lists \
                     it there, and its body {}",
                    meta.slot,
                    if digest_holds {
                        "checks against the version's digest".to_string()
                    } else {
                        format!("at device offset {offset} does not check against the version's digest")
                    }
                ));
                self.add(
                    instance,
                    id,
                    ValueSource {
                        slot: meta.slot,
                        len_body: meta.len_body,
                        digest_holds,
                        found_by: "by the version log",
                    },
                );
            }
        }
        Ok(listed)
    }
}

/// Follows log references into the backup log areas found (SPEC.md §8.9): each referenced
/// object is read once from the device and checked by `lds_format::logref`.
struct LogReader<'a> {
    device: &'a dyn BlockDevice,
    /// The backup log area of each instance.
    areas: BTreeMap<u32, AreaContext>,
    /// The objects read, by instance and offset: the batch and its bytes, or why not.
    batches: BTreeMap<(u32, u64), Result<ReadBatch, String>>,
}

/// A referenced write batch as read: decoded, and the object's bytes its spans point into.
type ReadBatch = (LogBatch, Vec<u8>);

impl LogReader<'_> {
    /// The bytes of the object at `offset` of `context`'s area: its header, then as many bytes
    /// as it says (within the area).
    fn object_bytes(&self, context: &AreaContext, offset: u64) -> Result<Vec<u8>, String> {
        let available = context.len_area.saturating_sub(offset);
        if available < HEADER_LEN as u64 {
            return Err(format!("offset {offset} is past the end of the area ({} bytes)", context.len_area));
        }
        let at = context.ofs_area + offset;
        let (header, unreadable) =
            read_tolerant(self.device, at, HEADER_LEN as u64, SCAN_ALIGN).map_err(|error| error.to_string())?;
        if !unreadable.is_empty() {
            return Err(format!("device offset {at} does not read"));
        }
        let len_payload = ObjectHeader::parse_raw(&header, at).map_err(|error| error.to_string())?.len_payload;
        let total = (HEADER_LEN as u64 + u64::from(len_payload)).min(available);
        let (bytes, unreadable) =
            read_tolerant(self.device, at, total, SCAN_ALIGN).map_err(|error| error.to_string())?;
        if let Some(first) = unreadable.first() {
            return Err(format!("{} unreadable sectors from device offset {first}", unreadable.len()));
        }
        Ok(bytes)
    }

    /// The value the log reference `value` of `instance`'s entry (`key`, `sequence`) names,
    /// checked; or why it cannot be read.
    fn read(&mut self, instance: u32, key: &[u8], sequence: u64, value: &[u8]) -> Result<Vec<u8>, String> {
        let reference = LogRef::decode(value, 0).map_err(|error| format!("its log reference is invalid: {error}"))?;
        let Some(context) = self.areas.get(&instance).copied() else {
            return Err(format!(
                "its log reference names the write batch lsn {} at offset {} of the backup log of instance {instance}, and no backup log area of instance {instance} was found",
                reference.lsn, reference.ofs_object
            ));
        };
        let named = format!(
            "its log reference names the write batch lsn {} at offset {} (device offset {}) of the backup log of instance {instance}, entry {}",
            reference.lsn,
            reference.ofs_object,
            context.ofs_area.saturating_add(reference.ofs_object),
            reference.entry_index
        );
        let offset = reference.ofs_object;
        if !self.batches.contains_key(&(instance, offset)) {
            let read = self.object_bytes(&context, offset).and_then(|bytes| {
                let batch = LogBatch::read(&bytes, offset, &context).map_err(|error| error.to_string())?;
                Ok((batch, bytes))
            });
            self.batches.insert((instance, offset), read);
        }
        match self.batches.get(&(instance, offset)) {
            Some(Ok((batch, bytes))) => batch
                .value(bytes, &reference, &context, key, sequence)
                .map(<[u8]>::to_vec)
                .map_err(|error| format!("{named}, which does not match: {error}")),
            Some(Err(error)) => Err(format!("{named}, which does not read: {error}")),
            None => Err(named),
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

/// Where the logs of `kind` are, without a label: every intact object header before the slot
/// area that names this volume and that log gives its area's start (its device offset less its
/// `log_offset`); the most common start of each instance is taken, and the area is taken to
/// end after the furthest object seen there.
fn areas_from_headers(
    device: &dyn BlockDevice,
    uuid: [u8; 16],
    ofs_slots: u64,
    kind: LogKind,
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
        if !found.crc_ok || header.volume_uuid != uuid || header.log_kind != kind.code() {
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
            kind,
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
    let labels = lds_volume::read_labels(device)?;
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
    let device_len = device.len();
    let end = geometry.map_or(device_len, |geometry| geometry.volume_len.min(device_len));
    let slot_count = geometry.map_or(end.saturating_sub(ofs_slots) / slot_size, |geometry| geometry.num_slots);
    // What lies on the device of `len` bytes at `offset`: read around bad sectors, and zeros
    // past the device's end (media cut short: a truncated image, a smaller device) without
    // reading there.
    let read_part = |offset: u64, len: u64| -> Result<(Vec<u8>, Vec<u64>), SalvageError> {
        // Never more than the device holds: a label may give a log area far larger than the
        // device (a hostile one, or one cut short), and nothing past the end is read.
        let len = len.min(device_len);
        let on_device = device_len.saturating_sub(offset).min(len);
        if on_device == 0 {
            return Ok((vec![0u8; len as usize], Vec::new()));
        }
        let (mut bytes, unreadable) = read_tolerant(device, offset, on_device, SCAN_ALIGN)?;
        bytes.resize(len as usize, 0);
        Ok((bytes, unreadable))
    };
    // The slots past the device's end: the first, the last and how many (a hostile geometry
    // may give 2^48 slots, far too many to list).
    let mut past_end: Option<(u64, u64, u64)> = None;
    let single_instance = geometry.is_none_or(|geometry| geometry.instance_count == 1);
    let mut found = FoundKeys::default();
    let mut values = ValueChunks { device, slot_size, ofs_slots, slot_count, sources: BTreeMap::new() };
    // The (instance, id) each slot's value chunk footer names.
    let mut value_footers: BTreeMap<u64, (u32, u64)> = BTreeMap::new();
    // Bounded by the device's length: the loop ends at the first slot past its end.
    for slot in 0..slot_count {
        let offset = ofs_slots + slot * slot_size;
        if offset >= device_len {
            // Every later slot lies further on: counted, not visited.
            past_end = present_slots(label.as_ref(), slot, slot_count);
            break;
        }
        // A slot no device holds (a removed device's, SPEC.md §4.3) has nothing to read.
        if label.as_ref().is_some_and(|label| !label.slot_present(slot)) {
            continue;
        }
        progress((slot + 1) * slot_size, slot_count * slot_size);
        if offset + slot_size > device_len {
            salvaged.damaged.push(format!(
                "slot {slot}: only {} of its {slot_size} bytes lie on the device, which ends at offset {device_len}; \
                 its tail is lost (its blocks are read alone)",
                device_len - offset
            ));
        }
        salvaged.slots_scanned += 1;
        // A slot that never held a chunk is zeros: its first block and its footer say so
        // without reading the rest (a chunk starts with a block and ends with its footer).
        let probe = PROBE_LEN.min(slot_size);
        let zeros = |bytes: &[u8]| bytes.iter().all(|&byte| byte == 0);
        let head = read_part(offset, probe)?.0;
        if zeros(&head) && zeros(&read_part(offset + slot_size - probe, probe)?.0) {
            continue;
        }
        let (bytes, unreadable) = read_part(offset, slot_size)?;
        if let (Some(first), Some(last)) = (unreadable.first(), unreadable.last()) {
            salvaged
                .damaged
                .push(format!("slot {slot}: {} unreadable sectors from offset {first} to {last}", unreadable.len()));
        }
        // A value chunk (SPEC.md §8.6): where its values are, for the pointers.
        match salvage_value_chunk(&bytes, offset) {
            Some(Ok(chunk)) if chunk.footer.volume_uuid == uuid => {
                let footer: &ValueFooter = &chunk.footer;
                salvaged.value_chunks += 1;
                value_footers.insert(slot, (footer.instance, footer.value_chunk_id));
                if let Err(error) = &chunk.digest {
                    salvaged.damaged.push(format!(
                        "slot {slot}: value chunk {} (instance {}): {error}; its values are kept where their crc32c \
                         holds",
                        footer.value_chunk_id, footer.instance
                    ));
                }
                values.add(
                    footer.instance,
                    footer.value_chunk_id,
                    ValueSource {
                        slot,
                        len_body: footer.len_body,
                        digest_holds: chunk.digest.is_ok(),
                        found_by: "by its footer",
                    },
                );
                continue;
            }
            // Another volume's value chunk.
            Some(Ok(_)) => continue,
            Some(Err(error)) => {
                let footer = &bytes[bytes.len() - VALUE_FOOTER_LEN..];
                if value_footer_uuid(footer) == Some(uuid) {
                    salvaged.damaged.push(format!("slot {slot}: a value chunk whose footer is damaged: {error}"));
                }
                continue;
            }
            None => {}
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
            found.keep(instance, &entry.key, entry.sequence, entry.kind, &entry.value);
        }
    }
    if let Some((first, last, count)) = past_end {
        salvaged.slots_past_end = count;
        salvaged.damaged.push(format!(
            "slots {first} to {last} ({count} slots): past the device's end at offset {device_len} (the label gives \
             the volume {} bytes); whatever they held is lost",
            geometry.map_or(0, |geometry| geometry.volume_len)
        ));
    }
    let contexts: Vec<AreaContext> = match geometry {
        Some(geometry) => {
            (0..geometry.instance_count).map(|instance| area_context(&geometry, LogKind::Backup, instance)).collect()
        }
        None => areas_from_headers(device, uuid, ofs_slots, LogKind::Backup)?,
    };
    salvaged.backup_areas =
        contexts.iter().map(|context| (context.instance, context.ofs_area, context.len_area)).collect();
    for context in &contexts {
        let instance = context.instance;
        let (area, _) = read_part(context.ofs_area, context.len_area)?;
        for object in valid_objects(&area, context) {
            let Payload::Batch { first_sequence, .. } = object.payload else { continue };
            let Ok(raw) = read_object(&area, object.offset, context) else { continue };
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
                found.keep(instance, &key, sequence, kind, &value);
            }
        }
    }
    // The pointers' values: the version logs list the value chunks (also those whose footer
    // is lost); they are read only when there is a pointer to follow.
    let has_pointers = found.has_pointers();
    if has_pointers {
        let contexts: Vec<AreaContext> = match geometry {
            Some(geometry) => (0..geometry.instance_count)
                .map(|instance| area_context(&geometry, LogKind::Version, instance))
                .collect(),
            None => areas_from_headers(device, uuid, ofs_slots, LogKind::Version)?,
        };
        salvaged.value_chunks_listed = values.add_listed(&contexts, uuid, &value_footers, &mut salvaged.damaged)?;
    }
    salvaged.has_value_chunks =
        label.as_ref().is_some_and(|label| label.has_value_chunks()) || has_pointers || salvaged.value_chunks > 0;
    let mut log = LogReader {
        device,
        areas: contexts.iter().map(|context| (context.instance, *context)).collect(),
        batches: BTreeMap::new(),
    };
    for (instance, keys) in found.0 {
        let kept = salvaged.keys.entry(instance).or_default();
        for (key, found) in keys {
            if found.kind == EntryKind::LogRef {
                let mut failures: Vec<String> = Vec::new();
                let value = found.values.iter().find_map(|reference| {
                    log.read(instance, &key, found.sequence, reference)
                        .map_err(|failure| {
                            if !failures.contains(&failure) {
                                failures.push(failure);
                            }
                        })
                        .ok()
                });
                match value {
                    Some(value) => {
                        salvaged.log_values_read += 1;
                        kept.insert(key, (found.sequence, EntryKind::Put, value));
                    }
                    None => salvaged.lost_values.push(LostValue {
                        instance,
                        key,
                        sequence: found.sequence,
                        reason: failures.join("; and through another copy of its reference: "),
                    }),
                }
                continue;
            }
            if found.kind != EntryKind::Pointer {
                let value = found.values.into_iter().next().unwrap_or_default();
                kept.insert(key, (found.sequence, found.kind, value));
                continue;
            }
            let mut failures: Vec<String> = Vec::new();
            let value = found.values.iter().find_map(|pointer| match values.read(instance, pointer) {
                Ok(value) => Some(value),
                Err(failure) => {
                    if !failures.contains(&failure) {
                        failures.push(failure);
                    }
                    None
                }
            });
            match value {
                Some(value) => {
                    salvaged.values_read += 1;
                    kept.insert(key, (found.sequence, EntryKind::Put, value));
                }
                None => salvaged.lost_values.push(LostValue {
                    instance,
                    key,
                    sequence: found.sequence,
                    reason: failures.join("; and through another copy of its pointer: "),
                }),
            }
        }
    }
    salvaged.keys.retain(|_, keys| !keys.is_empty());
    Ok(salvaged)
}

/// The slots from `from` to before `to` that the volume has (`label`'s device table leaves
/// out a removed device's; without a label, every slot): the first, the last and how many, or
/// `None` when there is none. Bounded by the device table's entries, whatever the count.
fn present_slots(label: Option<&lds_format::label::Label>, from: u64, to: u64) -> Option<(u64, u64, u64)> {
    let Some(table) = label.and_then(|label| label.devices.as_ref()) else {
        return (from < to).then(|| (from, to - 1, to - from));
    };
    // The devices' slot ranges within `from..to`, merged (a hostile table may list a range
    // twice or overlap two).
    let mut ranges: Vec<(u64, u64)> = table
        .devices
        .iter()
        .map(|entry| (entry.first_slot.max(from), entry.first_slot.saturating_add(entry.num_slots).min(to)))
        .filter(|(start, end)| start < end)
        .collect();
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (start, end) in ranges {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    let (first, last) = (merged.first()?.0, merged.last()?.1 - 1);
    Some((first, last, merged.iter().map(|(start, end)| end - start).sum()))
}

/// The instances salvage found data of.
pub fn instances(salvaged: &Salvaged) -> BTreeSet<u32> {
    salvaged.keys.keys().copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lds_format::batch::{BatchEntry, WriteBatchRecord};
    use lds_format::log::{encode_object, NewObject, ObjectType};

    /// A device of 64 KiB whose backup log area of instance 0 (16 KiB at 8 KiB) holds one
    /// batch at offset 512: lsn 9, sequences 41 ("alpha", a put) and 42 ("beta", a delete).
    fn device(name: &str) -> (lds_volume::Device, AreaContext, std::path::PathBuf) {
        let context = AreaContext {
            kind: LogKind::Backup,
            instance: 0,
            volume_uuid: [7; 16],
            len_area: 16 << 10,
            sector_size: 512,
            ofs_area: 8 << 10,
        };
        let batch = WriteBatchRecord {
            first_sequence: 41,
            entries: vec![
                BatchEntry { kind: EntryKind::Put, key: b"alpha".to_vec(), value: b"the first value".to_vec() },
                BatchEntry { kind: EntryKind::Delete, key: b"beta".to_vec(), value: Vec::new() },
            ],
            synced_lsn_low: 0,
        };
        let object = NewObject {
            object_type: ObjectType::WriteBatch,
            kind: LogKind::Backup,
            instance: 0,
            sn: 1,
            lsn: 9,
            log_offset: 512,
            volume_uuid: context.volume_uuid,
        };
        let bytes = encode_object(&object, &batch.encode());
        let mut image = vec![0u8; 64 << 10];
        let at = (context.ofs_area + 512) as usize;
        image[at..at + bytes.len()].copy_from_slice(&bytes);
        let path = std::env::temp_dir().join(format!("lds-repair-salvage-{}-{name}.img", std::process::id()));
        std::fs::write(&path, &image).unwrap_or_else(|error| panic!("{error}"));
        let device =
            lds_volume::Device::open(&path, lds_volume::OpenMode::ReadOnly).unwrap_or_else(|error| panic!("{error}"));
        (device, context, path)
    }

    /// A label giving a volume of 2^50 bytes in 64 KiB slots (2^34 of them) on a device of
    /// 1 MiB: the slots past the end are counted, not listed one by one, and said once.
    #[test]
    fn a_volume_cut_far_short_is_counted_not_listed() {
        let request = lds_format::geometry::LayoutRequest {
            volume_len: 1 << 50,
            slot_size: Some(64 << 10),
            len_version_log: Some(256 << 10),
            len_backup_log: Some(256 << 10),
            ..Default::default()
        };
        let geometry = lds_format::geometry::plan_layout(&request, [9; 16]).unwrap_or_else(|error| panic!("{error}"));
        assert!(geometry.num_slots > 1 << 33, "{geometry:?}");
        let label = lds_format::label::Label::new(geometry, "cut short");
        let mut image = vec![0u8; 1 << 20];
        image[..512].copy_from_slice(&label.encode());
        let path = std::env::temp_dir().join(format!("lds-repair-salvage-{}-cut.img", std::process::id()));
        std::fs::write(&path, &image).unwrap_or_else(|error| panic!("{error}"));
        let device =
            lds_volume::Device::open(&path, lds_volume::OpenMode::ReadOnly).unwrap_or_else(|error| panic!("{error}"));
        let salvaged = salvage(&device, &mut |_, _| {}).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(salvaged.layout_from, "label");
        // The slots from the first that starts at or past the device's end of 1 MiB.
        let first = (1u64 << 20).saturating_sub(geometry.ofs_slot_area).div_ceil(geometry.slot_size);
        assert_eq!(salvaged.slots_past_end, geometry.num_slots - first);
        let notes: Vec<&String> =
            salvaged.damaged.iter().filter(|note| note.contains("past the device's end")).collect();
        assert_eq!(notes.len(), 1, "{:?}", salvaged.damaged);
        assert!(notes[0].contains(&format!("slots {first} to {}", geometry.num_slots - 1)), "{}", notes[0]);
        drop(device);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn present_slots_counts_a_device_tables_ranges_once() {
        assert_eq!(present_slots(None, 5, 10), Some((5, 9, 5)));
        assert_eq!(present_slots(None, 10, 10), None);
        let request = lds_format::geometry::LayoutRequest {
            volume_len: 16 << 20,
            slot_size: Some(64 << 10),
            ..Default::default()
        };
        let geometry = lds_format::geometry::plan_layout(&request, [9; 16]).unwrap_or_else(|error| panic!("{error}"));
        let entry = |first_slot, num_slots| lds_format::device_table::DeviceEntry {
            device_uuid: [1; 16],
            first_slot,
            num_slots,
            len_device: 0,
        };
        // Slots 0..10 and 20..30, one range listed twice, one overlapping, one past u64.
        let devices = vec![entry(0, 10), entry(20, 10), entry(20, 10), entry(25, 3), entry(u64::MAX - 1, 5)];
        let label = lds_format::label::Label::new(geometry, "table")
            .with_devices(Some(lds_format::device_table::DeviceTable { device_uuid: [1; 16], devices }));
        assert_eq!(present_slots(Some(&label), 5, 40), Some((5, 29, 15)));
        assert_eq!(present_slots(Some(&label), 10, 20), None);
        assert_eq!(present_slots(Some(&label), 28, u64::MAX), Some((28, u64::MAX - 1, 3)));
    }

    #[test]
    fn a_log_reference_is_read_from_its_batch_or_reported() {
        let (device, context, path) = device("logref");
        let mut reader = LogReader { device: &device, areas: BTreeMap::from([(0, context)]), batches: BTreeMap::new() };
        let reference = |lsn, ofs_object, entry_index, len_value| {
            LogRef { lsn, ofs_object, entry_index, len_value }.encode().to_vec()
        };
        let value = reader.read(0, b"alpha", 41, &reference(9, 512, 0, 15));
        assert_eq!(value.as_deref(), Ok(&b"the first value"[..]));
        // Each mismatch is a value salvage cannot read, and says where it looked.
        for (key, sequence, bytes, expected) in [
            (&b"alpha"[..], 41, reference(10, 512, 0, 15), "lsn"),
            (b"alpha", 40, reference(9, 512, 0, 15), "sequence"),
            (b"alphb", 41, reference(9, 512, 0, 15), "another key"),
            (b"alpha", 41, reference(9, 512, 0, 16), "len_value"),
            (b"beta", 42, reference(9, 512, 1, 1), "not a put"),
            (b"alpha", 41, reference(9, 1024, 0, 15), "does not read"),
            (b"alpha", 41, reference(9, 16 << 10, 0, 15), "past the end"),
            (b"alpha", 41, reference(9, u64::MAX - 7, 0, 15), "past the end"),
            (b"alpha", 41, vec![1; 20], "invalid"),
        ] {
            let failure = reader.read(0, key, sequence, &bytes).err().unwrap_or_default();
            assert!(failure.contains(expected), "{expected}: {failure}");
            if expected != "invalid" {
                assert!(failure.contains("backup log of instance 0"), "{failure}");
            }
        }
        let failure = reader.read(1, b"alpha", 41, &reference(9, 512, 0, 15)).err().unwrap_or_default();
        assert!(failure.contains("no backup log area of instance 1"), "{failure}");
        drop(reader);
        drop(device);
        let _ = std::fs::remove_file(&path);
    }
}
