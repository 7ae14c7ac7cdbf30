//! Log chunks in repair, resize and device changes (SPEC.md §8.9, format 1.6).
//!
//! A log chunk's puts may be log references: 24 bytes naming a put in a write batch of its
//! instance's backup log. Repair reads the backup log area anyway; here each reference is
//! followed in those bytes and checked by `lds_format::logref` (the object is a valid write
//! batch with the lsn named, the entry is a put with the referencing entry's key, sequence
//! number and value length).
//!
//! What repair does with a chunk of the rebuilt tree:
//! - a log chunk whose references all resolve, whose flag and log start are right, at level
//!   0, and whose referenced objects the new base version retains (they lie between its log
//!   start and the new backup start, so no later append overwrites them) stays as it is;
//! - any other chunk holding references (or with the flag and none) is rewritten as an
//!   ordinary chunk: each reference that resolves becomes a put of the value it names, the
//!   entries of the others are dropped, each reported (fsck problems 801 to 803).
//!
//! A shrink or a device removal copies a log chunk's entries as they are: the chunk it packs
//! has the same references, so the same log start, and the backup log does not move
//! (SPEC.md §14); [`check_writes`] and [`check_rebased`] prove it before anything is written.

use std::collections::HashMap;

use lds_check::Code;
use lds_format::chunk::view::SubChunkView;
use lds_format::codec::display_key;
use lds_format::entry::{Entry, EntryKind};
use lds_format::geometry::{Geometry, LogKind};
use lds_format::log::{read_object_at, ring_distance, AreaContext, LogPosition, HEADER_LEN};
use lds_format::logref::{LogBatch, LogRef};
use lds_format::version::meta::ChunkMeta;
use lds_format::version::Version;

use crate::dropped::Dropped;

/// What is wrong with a chunk's log references, by the fsck problem it is (SPEC.md §8.9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogFault {
    /// A reference does not resolve (fsck 801).
    Unresolved,
    /// References without the flag `log_refs`, the flag without references, or a log chunk
    /// outside level 0 (fsck 802).
    Invalid,
    /// The recorded log start is not the oldest object the references name (fsck 803).
    StartMismatch,
}

impl LogFault {
    /// The number lds-check gives the problem.
    pub(crate) fn number(self) -> u32 {
        match self {
            Self::Unresolved => 801,
            Self::Invalid => 802,
            Self::StartMismatch => 803,
        }
    }

    /// The problem code of lds-check's table that the fix answers.
    pub(crate) fn code(self) -> Option<Code> {
        Some(match self {
            Self::Unresolved => Code::LogRefUnresolved,
            Self::Invalid => Code::LogChunkInvalid,
            Self::StartMismatch => Code::LogStartMismatch,
        })
    }
}

/// The codes of `faults`, sorted, once each.
pub(crate) fn codes_of(faults: &[(LogFault, String)]) -> Vec<Code> {
    let mut codes: Vec<Code> = faults.iter().filter_map(|(fault, _)| fault.code()).collect();
    codes.sort();
    codes.dedup();
    codes
}

/// A referenced write batch as read from the area: the batch and the object's bytes.
struct ReadBatch {
    batch: LogBatch,
    /// The object's bytes, header included.
    bytes: Vec<u8>,
    /// Its length in the area (aligned to 8).
    total_len: u64,
}

/// Follows the log references of one instance's chunks in its backup log area (the bytes
/// repair read), each batch checked and decoded once.
pub(crate) struct Resolver<'a> {
    area: &'a [u8],
    context: AreaContext,
    batches: HashMap<u64, Result<ReadBatch, String>>,
}

/// A reference followed: the value, and the place and length of the object holding it.
pub(crate) struct Resolved {
    /// The value the reference names.
    pub(crate) value: Vec<u8>,
    /// The object's position.
    pub(crate) position: LogPosition,
    /// The object's length in the area.
    pub(crate) total_len: u64,
}

impl<'a> Resolver<'a> {
    /// A resolver over `area`, the bytes of the backup log area `context` describes.
    pub(crate) fn new(area: &'a [u8], context: AreaContext) -> Self {
        Self { area, context, batches: HashMap::new() }
    }

    /// The area's context.
    pub(crate) fn context(&self) -> &AreaContext {
        &self.context
    }

    fn batch(&mut self, offset: u64) -> &Result<ReadBatch, String> {
        let (area, context) = (self.area, &self.context);
        self.batches.entry(offset).or_insert_with(|| {
            // An offset from a chunk entry: checked against the area before any arithmetic.
            let start = usize::try_from(offset)
                .ok()
                .filter(|&start| {
                    (start as u64).saturating_add(HEADER_LEN as u64) <= context.len_area && start <= area.len()
                })
                .ok_or_else(|| format!("offset {offset} is past the end of the area ({} bytes)", context.len_area))?;
            let bytes = &area[start..];
            let raw = read_object_at(bytes, offset, context).map_err(|error| error.to_string())?;
            let total_len = raw.header.total_len();
            let batch = LogBatch::read(bytes, offset, context).map_err(|error| error.to_string())?;
            let end = (total_len as usize).min(bytes.len());
            Ok(ReadBatch { batch, bytes: bytes[..end].to_vec(), total_len })
        })
    }

    /// The value the log reference `value` of the entry (`key`, `sequence`) names, checked by
    /// SPEC.md §8.9; or why it does not resolve, naming the object and its device offset.
    pub(crate) fn resolve(&mut self, key: &[u8], sequence: u64, value: &[u8]) -> Result<Resolved, String> {
        let context = self.context;
        let reference = LogRef::decode(value, 0).map_err(|error| format!("its log reference is invalid: {error}"))?;
        let named = format!(
            "the write batch lsn {} at offset {} (device offset {}) of the backup log of instance {}, entry {}",
            reference.lsn,
            reference.ofs_object,
            context.ofs_area.saturating_add(reference.ofs_object),
            context.instance,
            reference.entry_index
        );
        let read = match self.batch(reference.ofs_object) {
            Ok(read) => read,
            Err(error) => return Err(format!("its log reference names {named}, which does not read: {error}")),
        };
        let found = read.batch.value(&read.bytes, &reference, &context, key, sequence);
        match found {
            Ok(found) => {
                Ok(Resolved { value: found.to_vec(), position: reference.position(), total_len: read.total_len })
            }
            Err(error) => Err(format!("its log reference names {named}, which does not match: {error}")),
        }
    }

    /// The sequence number and value of the put that `value`, read as a log reference, names
    /// for `key`: the batch it names is valid with the lsn named, and its entry there is a put
    /// of `key` with the length named. The sequence is the batch's (its first sequence plus
    /// the entry's index), not one the caller gives: for an entry whose kind or sequence
    /// number is damaged.
    fn resolve_at_batch_sequence(&mut self, key: &[u8], value: &[u8]) -> Option<(u64, Vec<u8>)> {
        let reference = LogRef::decode(value, 0).ok()?;
        let first_sequence = match self.batch(reference.ofs_object) {
            Ok(read) => read.batch.at.first_sequence,
            Err(_) => return None,
        };
        let sequence = first_sequence.checked_add(u64::from(reference.entry_index))?;
        self.resolve(key, sequence, value).ok().map(|found| (sequence, found.value))
    }

    /// Recovers the log references of a log chunk whose kind or sequence number damage
    /// changed (a put or a delete of another sequence number whose 24 value bytes are a log
    /// reference): each entry among `entries` that is not a log reference but whose value
    /// resolves, as a reference, to a put of its key in the backup log (checked as
    /// [`Resolver::resolve`] checks, at the sequence number the batch gives) is replaced by
    /// that put, so that the reference's bytes never stand as the key's value. Where the
    /// damaged entry claims a newer sequence number than the put it names, it is reported
    /// dropped (were it an entry of its own, the repaired volume would lack it). Returns how
    /// many entries were recovered, what is dropped, and the first recovery, described.
    pub(crate) fn recover_mistyped(&mut self, entries: &mut Vec<Entry>) -> (usize, Vec<Dropped>, Option<String>) {
        let mut recovered = 0;
        let mut dropped = Vec::new();
        let mut first = None;
        for entry in entries.iter_mut() {
            // Only what has a log reference's shape is looked at (a cheap decode first).
            if entry.kind == EntryKind::LogRef || LogRef::decode(&entry.value, 0).is_err() {
                continue;
            }
            let Some((sequence, value)) = self.resolve_at_batch_sequence(&entry.key, &entry.value) else { continue };
            let was = format!("a {} of sequence {}", entry.kind.name(), entry.sequence);
            if entry.sequence > sequence {
                dropped.push(Dropped::entry(
                    self.context.instance,
                    entry,
                    &format!(
                        "its 24 value bytes are a log reference to the put of sequence {sequence} in the backup log, \
                         which replaces it"
                    ),
                ));
            }
            first.get_or_insert_with(|| {
                format!(
                    "key {} ({was}, its value a log reference) is the put of sequence {sequence} it names",
                    display_key(&entry.key)
                )
            });
            *entry = Entry { key: std::mem::take(&mut entry.key), sequence, kind: EntryKind::Put, value };
            recovered += 1;
        }
        if recovered > 0 {
            // Sequence numbers changed: back to internal order, one entry per key and
            // sequence (a recovered put the chunk also held under its own kind counts once).
            entries.sort_by(Entry::cmp_internal);
            entries.dedup_by(|later, earlier| later.key == earlier.key && later.sequence == earlier.sequence);
        }
        (recovered, dropped, first)
    }

    /// Turns every log reference among `entries` into a put of the value it names; the
    /// entries whose reference does not resolve are removed and returned, described.
    /// Returns how many became puts.
    pub(crate) fn resolve_entries(&mut self, entries: &mut Vec<Entry>) -> (usize, Vec<Dropped>) {
        let mut resolved = 0;
        let mut dropped = Vec::new();
        let mut kept = Vec::with_capacity(entries.len());
        for mut entry in std::mem::take(entries) {
            if entry.kind != EntryKind::LogRef {
                kept.push(entry);
                continue;
            }
            match self.resolve(&entry.key, entry.sequence, &entry.value) {
                Ok(found) => {
                    entry.kind = EntryKind::Put;
                    entry.value = found.value;
                    resolved += 1;
                    kept.push(entry);
                }
                Err(why) => dropped.push(Dropped::entry(self.context.instance, &entry, &why)),
            }
        }
        // The kind is part of an entry's order only below its sequence number: still sorted.
        kept.sort_by(Entry::cmp_internal);
        *entries = kept;
        (resolved, dropped)
    }
}

/// What a chunk's log references give.
#[derive(Debug, Default)]
pub(crate) struct LogCheck {
    /// What is wrong with them (the chunk is rewritten), each in a few words; one fault for
    /// all the references that do not resolve.
    pub(crate) faults: Vec<(LogFault, String)>,
    /// The first reference that does not resolve, described (key, object, why).
    pub(crate) first_unresolved: Option<String>,
    /// Why an intact log chunk cannot stay as it is: the rebuilt version would not retain
    /// what it names.
    pub(crate) not_retained: Option<String>,
}

impl LogCheck {
    /// The chunk stays as it is.
    pub(crate) fn keeps(&self) -> bool {
        self.faults.is_empty() && self.not_retained.is_none()
    }

    /// Why the chunk is rewritten, in a few words with the fsck numbers.
    pub(crate) fn summary(&self) -> String {
        let mut parts: Vec<String> =
            self.faults.iter().map(|(fault, what)| format!("{what} (fsck {})", fault.number())).collect();
        parts.extend(self.not_retained.clone());
        parts.join("; ")
    }
}

/// Checks the log references of the chunk `meta` of the rebuilt tree, from its sub-chunk
/// images (`images`, in sub-chunk order). `retain_until` is the new base version's backup
/// start, `None` when the rebuilt version cannot retain anything (the backup log's head is
/// unknown). A chunk whose blocks do not read is left to the checker's problems (nothing is
/// reported here).
pub(crate) fn check_chunk(
    resolver: &mut Resolver<'_>,
    images: &[Vec<u8>],
    geometry: &Geometry,
    meta: &ChunkMeta,
    retain_until: Option<LogPosition>,
) -> LogCheck {
    let mut check = LogCheck::default();
    let mut references: Vec<(Vec<u8>, u64, Vec<u8>)> = Vec::new();
    let mut any = false;
    for (image, slot) in images.iter().zip(meta.slots()) {
        let offset = geometry.slot_offset(slot);
        let Ok(view) = SubChunkView::open(image, offset) else { return LogCheck::default() };
        let Ok(entries) = view.entries(offset) else { return LogCheck::default() };
        for entry in entries.iter().filter(|entry| entry.kind == EntryKind::LogRef) {
            any = true;
            references.push((entry.key.to_vec(), entry.sequence, entry.value.to_vec()));
        }
    }
    match (meta.is_log_chunk(), any) {
        (true, false) => {
            check.faults.push((LogFault::Invalid, "it has the flag log_refs and holds no log reference".into()))
        }
        (false, true) => check.faults.push((
            LogFault::Invalid,
            format!("it holds {} log references without the flag log_refs", references.len()),
        )),
        _ => {}
    }
    if any && meta.level != 0 {
        check.faults.push((LogFault::Invalid, format!("it holds log references at level {}", meta.level)));
    }
    // The log start the references give: the oldest object they name (resolving or not).
    let start = references
        .iter()
        .filter_map(|(_, _, value)| LogRef::decode(value, 0).ok().map(|reference| reference.position()))
        .min();
    if meta.is_log_chunk() && any && meta.log_start != start {
        let show = |position: Option<LogPosition>| {
            position
                .map_or("none".to_string(), |position| format!("lsn {} at offset {}", position.lsn, position.offset))
        };
        check.faults.push((
            LogFault::StartMismatch,
            format!("it records the log start {}, its references name {} first", show(meta.log_start), show(start)),
        ));
    }
    let mut objects = Vec::new();
    let mut unresolved = 0;
    for (key, sequence, value) in &references {
        match resolver.resolve(key, *sequence, value) {
            Ok(found) => objects.push((found.position, found.total_len)),
            Err(why) => {
                unresolved += 1;
                check
                    .first_unresolved
                    .get_or_insert_with(|| format!("key {} (sequence {sequence}): {why}", display_key(key)));
            }
        }
    }
    if unresolved > 0 {
        check.faults.push((
            LogFault::Unresolved,
            format!("{unresolved} of its {} log references do not resolve", references.len()),
        ));
    }
    if !check.faults.is_empty() || !meta.is_log_chunk() {
        return check;
    }
    let (Some(start), Some(until)) = (meta.log_start, retain_until) else {
        check.not_retained = Some(format!(
            "the backup log's head is lost, so the rebuilt version cannot retain the batches log chunk {} names",
            meta.chunk_id
        ));
        return check;
    };
    // Every object named lies between the log start and the new backup start, where the
    // writer never overwrites (SPEC.md §8.9, §10.1).
    let len_area = resolver.context().len_area;
    let retained = ring_distance(start, until, len_area);
    if let Some((position, _)) = objects
        .iter()
        .find(|(position, total_len)| ring_distance(start, *position, len_area).saturating_add(*total_len) > retained)
    {
        check.not_retained = Some(format!(
            "the object at offset {} (lsn {}) that log chunk {} names lies past the new backup start (offset {}), where later appends go",
            position.offset, position.lsn, meta.chunk_id, until.offset
        ));
    }
    check
}

/// Refuses a write that would land in a backup log area: repair, resize and device changes
/// never write there, so the objects the log chunks name stay as they are (SPEC.md §8.9,
/// §14). Returns the first such write, described, with the instance whose area it is.
pub(crate) fn check_writes<'a>(
    geometry: &Geometry,
    writes: impl IntoIterator<Item = (u64, u64, &'a str)>,
) -> Result<(), (u32, String)> {
    let areas: Vec<(u32, u64, u64)> = (0..geometry.instance_count)
        .map(|instance| {
            let (offset, len) = geometry.log_area(LogKind::Backup, instance);
            (instance, offset, len)
        })
        .collect();
    for (offset, len, structure) in writes {
        if let Some((instance, start, area_len)) =
            areas.iter().find(|(_, start, area_len)| offset < start + area_len && *start < offset + len)
        {
            return Err((
                *instance,
                format!(
                    "the write of {structure} ({len} bytes at offset {offset}) would land in the backup log area of instance {instance} ({area_len} bytes at offset {start}), where log chunks name batches"
                ),
            ));
        }
    }
    Ok(())
}

/// Proves that the new base version `base` of a rebuilt tree keeps what its log chunks name:
/// each of its log chunks is one `old` (the version it was rebuilt from) has, with the same
/// metadata (its log start), named before the new backup start, less than a lap of the ring
/// before it. Returns what does not hold.
pub(crate) fn check_kept(old: Option<&Version>, new: &Version, len_area: u64) -> Result<(), String> {
    let backup_start = new.backup_start();
    for chunk in new.chunks.values().filter(|chunk| chunk.is_log_chunk()) {
        let id = chunk.chunk_id;
        if old.and_then(|old| old.chunks.get(&id)) != Some(chunk) {
            return Err(format!("log chunk {id} is new or changed; repair writes ordinary chunks only"));
        }
        let Some(start) = chunk.log_start else { return Err(format!("log chunk {id} has no log start")) };
        // A position outside the ring names no object the ring keeps (only damage puts one there).
        let outside = start.offset >= len_area || backup_start.offset >= len_area;
        if start.lsn >= backup_start.lsn || outside {
            return Err(format!(
                "log chunk {id} names lsn {} at offset {}, not retained before the new backup start lsn {} at offset {}",
                start.lsn, start.offset, backup_start.lsn, backup_start.offset
            ));
        }
    }
    Ok(())
}

/// Proves that a rebase (a shrink's or a device change's switch) keeps the retention start:
/// the moved log chunks name what they named, the backup log is where it was (SPEC.md §8.9,
/// §14).
pub(crate) fn check_rebased(old: &Version, new: &Version) -> Result<(), String> {
    let (before, after) = (old.retention_start(), new.retention_start());
    if before != after {
        return Err(format!(
            "the retention start moves from lsn {} at offset {} to lsn {} at offset {}",
            before.lsn, before.offset, after.lsn, after.offset
        ));
    }
    let starts = |version: &Version| {
        let mut starts: Vec<LogPosition> = version.chunks.values().filter_map(|chunk| chunk.log_start).collect();
        starts.sort();
        starts.dedup();
        starts
    };
    if starts(old) != starts(new) {
        return Err("the log chunks' log starts change".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    use lds_format::algorithms::pack::{place, ChunkFormat, ChunkPacker};
    use lds_format::batch::{BatchEntry, WriteBatchRecord};
    use lds_format::log::{area_context, encode_object, NewObject, ObjectType};
    use lds_format::version::meta::CHUNK_FLAG_LOG_REFS;

    fn geometry() -> Geometry {
        let layout = lds_format::geometry::LayoutRequest {
            volume_len: 16 << 20,
            slot_size: Some(64 << 10),
            ..lds_format::geometry::LayoutRequest::default()
        };
        lds_format::geometry::plan_layout(&layout, [3; 16]).unwrap_or_else(|error| panic!("{error}"))
    }

    /// A backup log area holding batch A (lsn 5 at offset 512: "k1" and "k2", sequences 10
    /// and 11) and batch B (lsn 6 right after it: "k3", sequence 12); the positions of A and B
    /// and the end of B.
    fn area(geometry: &Geometry) -> (Vec<u8>, LogPosition, LogPosition, u64) {
        let context = area_context(geometry, LogKind::Backup, 0);
        let mut area = vec![0u8; context.len_area as usize];
        let mut offset = 512u64;
        let mut positions = Vec::new();
        for (lsn, first_sequence, keys) in [(5u64, 10u64, &["k1", "k2"][..]), (6, 12, &["k3"][..])] {
            let entries = keys
                .iter()
                .map(|key| BatchEntry { kind: EntryKind::Put, key: key.as_bytes().to_vec(), value: value(key) })
                .collect();
            let batch = WriteBatchRecord { first_sequence, entries, synced_lsn_low: 0 };
            let object = NewObject {
                object_type: ObjectType::WriteBatch,
                kind: LogKind::Backup,
                instance: 0,
                sn: 1,
                lsn,
                log_offset: offset,
                volume_uuid: geometry.volume_uuid,
            };
            let bytes = encode_object(&object, &batch.encode());
            area[offset as usize..offset as usize + bytes.len()].copy_from_slice(&bytes);
            positions.push(LogPosition { offset, lsn });
            offset = lds_format::codec::align8(offset + bytes.len() as u64);
        }
        (area, positions[0], positions[1], offset)
    }

    fn value(key: &str) -> Vec<u8> {
        format!("the value of {key}, longer than a reference").into_bytes()
    }

    /// The log chunk in slot 3 naming A's two puts and B's, with a put of its own ("k4").
    fn log_chunk(geometry: &Geometry, a: LogPosition, b: LogPosition) -> (ChunkMeta, Vec<Vec<u8>>) {
        let mut packer = ChunkPacker::new(ChunkFormat::new(geometry, 0, 4096, 10));
        for (key, sequence, position, index) in [("k1", 10, a, 0), ("k2", 11, a, 1), ("k3", 12, b, 0)] {
            let len_value = value(key).len() as u32;
            let reference = LogRef { lsn: position.lsn, ofs_object: position.offset, entry_index: index, len_value };
            packer.push(key.as_bytes(), sequence, EntryKind::LogRef, &reference.encode());
        }
        packer.push(b"k4", 13, EntryKind::Put, b"short");
        let mut packed = packer.finish();
        assert_eq!(packed.len(), 1);
        let meta = place(&mut packed[0].chunk, 3, 0, 0);
        (meta, vec![packed[0].chunk.slot_image()])
    }

    #[test]
    fn an_intact_log_chunk_stays_only_where_the_new_version_retains_what_it_names() {
        let geometry = geometry();
        let (area, a, b, end) = area(&geometry);
        let context = area_context(&geometry, LogKind::Backup, 0);
        let (meta, images) = log_chunk(&geometry, a, b);
        assert_eq!((meta.is_log_chunk(), meta.log_start), (true, Some(a)));
        let mut resolver = Resolver::new(&area, context);
        let until = |offset| Some(LogPosition { offset, lsn: 9 });
        let check = check_chunk(&mut resolver, &images, &geometry, &meta, until(end));
        assert!(check.keeps(), "{check:?}");
        // No head known, or a backup start before the end of B: it cannot stay.
        for retain_until in [None, until(b.offset), until(end - 8)] {
            let check = check_chunk(&mut resolver, &images, &geometry, &meta, retain_until);
            assert!(check.faults.is_empty() && check.not_retained.is_some(), "{retain_until:?}: {check:?}");
        }
        // The references read into puts, the chunk's own put kept.
        let mut entries: Vec<Entry> = ["k1", "k2", "k3"]
            .iter()
            .zip(10..)
            .map(|(key, sequence)| {
                let position = if *key == "k3" { b } else { a };
                let index = u32::from(*key == "k2");
                let len_value = value(key).len() as u32;
                let reference =
                    LogRef { lsn: position.lsn, ofs_object: position.offset, entry_index: index, len_value };
                Entry {
                    key: key.as_bytes().to_vec(),
                    sequence,
                    kind: EntryKind::LogRef,
                    value: reference.encode().to_vec(),
                }
            })
            .collect();
        entries.push(Entry { key: b"k4".to_vec(), sequence: 13, kind: EntryKind::Put, value: b"short".to_vec() });
        let (resolved, dropped) = resolver.resolve_entries(&mut entries);
        assert_eq!((resolved, dropped.len()), (3, 0), "{dropped:?}");
        for entry in &entries {
            assert_eq!(entry.kind, EntryKind::Put);
            let expected =
                if entry.key == b"k4" { b"short".to_vec() } else { value(&String::from_utf8_lossy(&entry.key)) };
            assert_eq!(entry.value, expected);
        }
    }

    /// `lds-hostile`'s `log_chunks:chunk[live].block[0].entry[0].seq_kind=0` and `=1`: a log
    /// reference whose kind and sequence were overwritten reads as a delete or a put of
    /// sequence 0 whose value is the reference's 24 bytes.
    #[test]
    fn a_reference_whose_kind_or_sequence_is_damaged_is_read_as_the_put_it_names() {
        let geometry = geometry();
        let (area, a, b, _) = area(&geometry);
        let context = area_context(&geometry, LogKind::Backup, 0);
        let reference = |position: LogPosition, entry_index: u32, key: &str| {
            let len_value = value(key).len() as u32;
            LogRef { lsn: position.lsn, ofs_object: position.offset, entry_index, len_value }.encode().to_vec()
        };
        let entry = |key: &str, sequence: u64, kind: EntryKind, value: Vec<u8>| Entry {
            key: key.as_bytes().to_vec(),
            sequence,
            kind,
            value,
        };
        // k1 (A's entry 0, sequence 10) as a put of sequence 0; k2 (A's entry 1, 11) as a
        // delete of sequence 0; k3 (B's entry 0, 12) as a put claiming sequence 40; k4 a put
        // whose 24 bytes name k1's put (another key: an ordinary value); k5 a short put.
        let mut entries = vec![
            entry("k1", 0, EntryKind::Put, reference(a, 0, "k1")),
            entry("k2", 0, EntryKind::Delete, reference(a, 1, "k2")),
            entry("k3", 40, EntryKind::Put, reference(b, 0, "k3")),
            entry("k4", 13, EntryKind::Put, reference(a, 0, "k1")),
            entry("k5", 14, EntryKind::Put, b"short".to_vec()),
        ];
        entries.sort_by(Entry::cmp_internal);
        let mut resolver = Resolver::new(&area, context);
        let (recovered, dropped, first) = resolver.recover_mistyped(&mut entries);
        assert_eq!(recovered, 3, "{entries:?}");
        let read: Vec<(String, u64, EntryKind, Vec<u8>)> = entries
            .iter()
            .map(|entry| {
                (String::from_utf8_lossy(&entry.key).into_owned(), entry.sequence, entry.kind, entry.value.clone())
            })
            .collect();
        assert_eq!(
            read,
            vec![
                ("k1".into(), 10, EntryKind::Put, value("k1")),
                ("k2".into(), 11, EntryKind::Put, value("k2")),
                ("k3".into(), 12, EntryKind::Put, value("k3")),
                ("k4".into(), 13, EntryKind::Put, reference(a, 0, "k1")),
                ("k5".into(), 14, EntryKind::Put, b"short".to_vec()),
            ]
        );
        // k3's damaged entry claimed sequence 40: were it a put of its own, it is lost, and
        // the report says so; k1 and k2 lose nothing (the put they name is newer).
        assert_eq!(dropped.len(), 1, "{dropped:?}");
        assert!(dropped[0].lost[0].covers(0, b"k3", 40) && !dropped[0].lost[0].covers(0, b"k3", 12), "{dropped:?}");
        assert!(first.is_some_and(|first| first.contains("\"k1\"") && first.contains("sequence 10")));
        // A batch that no longer reads: nothing is recovered, the entry stays as it is (the
        // chunk's own faults decide).
        let mut damaged = area.clone();
        damaged[a.offset as usize + 70] ^= 1;
        let mut entries = vec![entry("k1", 0, EntryKind::Put, reference(a, 0, "k1"))];
        let (recovered, dropped, _) = Resolver::new(&damaged, context).recover_mistyped(&mut entries);
        assert_eq!((recovered, dropped.len(), entries[0].sequence), (0, 0, 0));
    }

    #[test]
    fn each_fault_of_a_log_chunk_is_found() {
        let geometry = geometry();
        let (mut area, a, b, end) = area(&geometry);
        let context = area_context(&geometry, LogKind::Backup, 0);
        let (meta, images) = log_chunk(&geometry, a, b);
        let retain_until = Some(LogPosition { offset: end, lsn: 9 });
        let faults = |area: &[u8], meta: &ChunkMeta| {
            let check = check_chunk(&mut Resolver::new(area, context), &images, &geometry, meta, retain_until);
            check.faults.iter().map(|(fault, _)| *fault).collect::<Vec<_>>()
        };
        let wrong_start = ChunkMeta { log_start: Some(b), ..meta.clone() };
        assert_eq!(faults(&area, &wrong_start), [LogFault::StartMismatch]);
        let no_flag = ChunkMeta { flags: 0, log_start: None, ..meta.clone() };
        assert_eq!(faults(&area, &no_flag), [LogFault::Invalid]);
        let deeper = ChunkMeta { level: 1, ..meta.clone() };
        assert_eq!(faults(&area, &deeper), [LogFault::Invalid]);
        // B damaged: one of three references does not resolve, and the chunk says which.
        area[b.offset as usize + 70] ^= 1;
        let mut resolver = Resolver::new(&area, context);
        let check = check_chunk(&mut resolver, &images, &geometry, &meta, retain_until);
        assert_eq!(check.faults.len(), 1, "{check:?}");
        assert_eq!(check.faults[0].0, LogFault::Unresolved);
        assert!(check.faults[0].1.starts_with("1 of its 3"), "{check:?}");
        let first = check.first_unresolved.clone().unwrap_or_default();
        assert!(first.contains("\"k3\"") && first.contains(&format!("offset {}", b.offset)), "{first}");
        assert!(check.summary().ends_with("(fsck 801)"), "{}", check.summary());
        // Hostile references are errors, not panics.
        for ofs_object in [u64::MAX - 7, context.len_area, context.len_area - 8, 8] {
            let reference = LogRef { lsn: 5, ofs_object, entry_index: 0, len_value: 30 };
            let failure = resolver.resolve(b"k1", 10, &reference.encode()).err().unwrap_or_default();
            assert!(failure.contains("does not read"), "{ofs_object}: {failure}");
        }
        // An ordinary chunk (no reference, no flag) has nothing to say.
        let mut packer = ChunkPacker::new(ChunkFormat::new(&geometry, 0, 4096, 10));
        packer.push(b"k5", 20, EntryKind::Put, b"v");
        let mut packed = packer.finish();
        let ordinary = place(&mut packed[0].chunk, 4, 1, 0);
        let check = check_chunk(&mut resolver, &[packed[0].chunk.slot_image()], &geometry, &ordinary, None);
        assert!(check.keeps(), "{check:?}");
        let flagged = ChunkMeta { flags: CHUNK_FLAG_LOG_REFS, log_start: Some(a), ..ordinary };
        let check = check_chunk(&mut resolver, &[packed[0].chunk.slot_image()], &geometry, &flagged, None);
        assert_eq!(check.faults.iter().map(|(fault, _)| *fault).collect::<Vec<_>>(), [LogFault::Invalid]);
    }

    #[test]
    fn a_rebase_keeps_the_retention_start_and_a_rebuild_its_log_chunks() {
        let geometry = geometry();
        let (_, a, b, end) = area(&geometry);
        let (meta, _) = log_chunk(&geometry, a, b);
        let base = lds_format::version::payload::BaseVersion {
            geometry,
            instance: 0,
            num_levels: 4,
            last_sequence: 13,
            label_generation: 1,
            ofs_backup_start: end,
            lsn_backup_start: 7,
            compact_pointers: Vec::new(),
            chunks: vec![meta.clone()],
            values: None,
        };
        let old = Version::from_base(&base).unwrap_or_else(|error| panic!("{error}"));
        let moved = ChunkMeta {
            chunk_id: 9,
            sub_chunks: vec![lds_format::version::meta::SubChunkRef { slot: 9, ..meta.sub_chunks[0] }],
            ..meta.clone()
        };
        let rebased = Version::from_base(&lds_format::version::payload::BaseVersion {
            chunks: vec![moved.clone()],
            ..base.clone()
        })
        .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(check_rebased(&old, &rebased), Ok(()));
        let later = ChunkMeta { log_start: Some(b), ..moved };
        let wrong =
            Version::from_base(&lds_format::version::payload::BaseVersion { chunks: vec![later], ..base.clone() })
                .unwrap_or_else(|error| panic!("{error}"));
        assert!(check_rebased(&old, &wrong).is_err());
        let len_area = area_context(&geometry, LogKind::Backup, 0).len_area;
        // A rebuild keeps the old chunk as it is, retained before the new backup start.
        let rebuilt =
            Version::from_base(&lds_format::version::payload::BaseVersion { lsn_backup_start: 40, ..base.clone() })
                .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(check_kept(Some(&old), &rebuilt, len_area), Ok(()));
        assert!(check_kept(None, &rebuilt, len_area).is_err(), "a log chunk the old version lacks");
        assert!(check_kept(Some(&rebased), &rebuilt, len_area).is_err(), "another chunk id");
        let behind = Version::from_base(&lds_format::version::payload::BaseVersion { lsn_backup_start: 5, ..base })
            .unwrap_or_else(|error| panic!("{error}"));
        assert!(check_kept(Some(&old), &behind, len_area).is_err(), "a backup start before the log start");
    }

    #[test]
    fn writes_into_a_backup_log_area_are_refused() {
        let geometry = geometry();
        let (backup, len) = geometry.log_area(LogKind::Backup, 0);
        let (version, _) = geometry.log_area(LogKind::Version, 0);
        assert_eq!(check_writes(&geometry, [(version, 512, "a base version")]), Ok(()));
        assert_eq!(check_writes(&geometry, [(geometry.slot_offset(0), 4096, "a chunk")]), Ok(()));
        for offset in [backup, backup + len - 512, backup - 256] {
            let refused = check_writes(&geometry, [(version, 512, "fine"), (offset, 512, "a stray write")]);
            assert!(
                refused.as_ref().is_err_and(|(instance, why)| *instance == 0 && why.contains("stray")),
                "{offset}: {refused:?}"
            );
        }
    }
}
