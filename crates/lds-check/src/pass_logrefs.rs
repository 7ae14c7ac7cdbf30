//! Pass 4c, on volumes with log chunks (SPEC.md §8.9, feature `log_tables`): every log
//! reference (entry kind 3) of every chunk checked resolves against the backup log area of
//! the chunk's instance (801); kind-3 entries stand only in chunks whose metadata has flag
//! `log_refs`, such a chunk holds at least one, stays in level 0 and lives on a volume with
//! the feature (802); a log chunk's recorded log start is the position of its oldest
//! reference (803). Also how many bytes of its backup log each instance retains.
//!
//! The areas are the ones recovery read (pass 3): nothing is read again. Each referenced
//! batch is checked and decoded once per chunk, whatever the number of references into it.

use std::collections::HashMap;

use lds_format::entry::EntryKind;
use lds_format::error::hex;
use lds_format::geometry::{Geometry, LogKind};
use lds_format::log::{AreaContext, LogPosition};
use lds_format::logref::{LogBatch, LogRef};
use lds_format::version::meta::ChunkMeta;
use lds_format::FormatError;

use crate::problem::{Code, Problem, Report};

/// What a chunk's log references are checked against (SPEC.md §8.9), for
/// [`crate::chunk_problems_with_log`]: the backup log area of the chunk's instance and the
/// volume's feature.
#[derive(Debug, Clone, Copy)]
pub struct LogCheck<'a> {
    /// The whole backup log area of the chunk's instance, as read from the device from
    /// `Geometry::log_area(LogKind::Backup, instance)` (unreadable sectors as zeros). A
    /// reference to an object beyond these bytes does not resolve.
    pub backup_area: &'a [u8],
    /// Whether the volume has feature `log_tables` (`Label::has_log_tables`): log chunks on a
    /// volume without it are reported (802).
    pub log_tables: bool,
}

/// Unresolved references of one chunk reported one by one; the rest are counted in one more
/// problem, so that a destroyed region of the ring gives a few lines per chunk, not one per
/// entry.
pub(crate) const UNRESOLVED_REPORTED_MAX: usize = 8;

/// The log references of one chunk, gathered while its blocks are checked.
pub(crate) struct ChunkLogRefs<'a> {
    /// The backup log area and its context; `None` when references cannot be resolved (the
    /// caller has no area), and only the chunk's own rules are checked.
    area: Option<(&'a [u8], AreaContext)>,
    /// `Some(has)` when the volume's feature is known.
    log_tables: Option<bool>,
    /// Each referenced batch, checked and decoded once (by its offset in the area), or why it
    /// cannot be used.
    batches: HashMap<u64, Result<LogBatch, FormatError>>,
    /// Kind-3 entries read.
    count: u64,
    /// The oldest position they name.
    oldest: Option<LogPosition>,
    /// Problems 801 reported one by one, added after the chunk's structural checks.
    unresolved: Vec<Problem>,
    /// Unresolved references beyond [`UNRESOLVED_REPORTED_MAX`], and the first and last key
    /// among them.
    more: u64,
    more_keys: Option<(Vec<u8>, Vec<u8>)>,
}

impl<'a> ChunkLogRefs<'a> {
    /// Gathers the references of a chunk of `instance`; `log` is what they are checked
    /// against, if known.
    pub(crate) fn new(geometry: &Geometry, instance: u32, log: Option<LogCheck<'a>>) -> Self {
        Self {
            area: log.map(|log| (log.backup_area, lds_format::log::area_context(geometry, LogKind::Backup, instance))),
            log_tables: log.map(|log| log.log_tables),
            batches: HashMap::new(),
            count: 0,
            oldest: None,
            unresolved: Vec::new(),
            more: 0,
            more_keys: None,
        }
    }

    /// Records an entry of a chunk; a log reference is resolved when the area is known.
    /// `value` passed the block decoder, which checks a kind-3 value has the shape of a
    /// reference.
    pub(crate) fn entry(
        &mut self,
        kind: EntryKind,
        key: &[u8],
        sequence: u64,
        value: &[u8],
        (offset, structure): (u64, &str),
    ) {
        if kind != EntryKind::LogRef {
            return;
        }
        self.count += 1;
        let reference = match LogRef::decode(value, offset) {
            Ok(reference) => reference,
            Err(error) => {
                // The block decoder refuses such a block; kept for callers that did not.
                self.unresolved(key, sequence, None, error.to_string(), (offset, structure));
                return;
            }
        };
        let position = reference.position();
        self.oldest = Some(self.oldest.map_or(position, |oldest| oldest.min(position)));
        let Some((area, context)) = &self.area else { return };
        let object = usize::try_from(reference.ofs_object).ok().and_then(|start| area.get(start..)).unwrap_or(&[]);
        let batch = self
            .batches
            .entry(reference.ofs_object)
            .or_insert_with(|| LogBatch::read(object, reference.ofs_object, context));
        let why = match batch {
            Ok(batch) => match batch.value(object, &reference, context, key, sequence) {
                Ok(_) => return,
                Err(error) => error.to_string(),
            },
            Err(error) => error.to_string(),
        };
        self.unresolved(key, sequence, Some(&reference), why, (offset, structure));
    }

    fn unresolved(
        &mut self,
        key: &[u8],
        sequence: u64,
        reference: Option<&LogRef>,
        why: String,
        (offset, structure): (u64, &str),
    ) {
        if self.unresolved.len() >= UNRESOLVED_REPORTED_MAX {
            self.more += 1;
            let keys = self.more_keys.get_or_insert_with(|| (key.to_vec(), key.to_vec()));
            keys.1 = key.to_vec();
            return;
        }
        let named = reference.map_or_else(
            || "its log reference".to_string(),
            |reference| {
                format!(
                    "its log reference (lsn {}, object at offset {} of the backup log, entry {})",
                    reference.lsn, reference.ofs_object, reference.entry_index
                )
            },
        );
        self.unresolved.push(Problem {
            code: Code::LogRefUnresolved,
            structure: structure.to_string(),
            offset,
            message: format!("key {} (sequence {sequence}): {named} does not resolve: {why}", hex(key)),
        });
    }

    /// Reports what was gathered, after the chunk's blocks: the chunk's rules (802; a flag
    /// with no reference only when `blocks_read`, every block of the chunk decoded), its log
    /// start (803, only when `blocks_read`) and the references that do not resolve (801).
    /// Counts log chunks and references in the summary.
    pub(crate) fn finish(
        self,
        chunk: &ChunkMeta,
        blocks_read: bool,
        (offset, structure): (u64, &str),
        report: &mut Report,
    ) {
        report.summary.log_references += self.count;
        if chunk.is_log_chunk() {
            report.summary.log_chunks += 1;
        }
        let mut invalid = Vec::new();
        if !chunk.is_log_chunk() && self.count > 0 {
            invalid.push(format!(
                "it holds {} log references (entry kind 3) but its metadata lacks flag log_refs: no log start keeps the batches they name from being overwritten",
                self.count
            ));
        }
        if chunk.is_log_chunk() && self.count == 0 && blocks_read {
            invalid.push("its metadata has flag log_refs but it holds no log reference".to_string());
        }
        if chunk.is_log_chunk() && chunk.level != 0 {
            invalid.push(format!("it is a log chunk at level {}: log chunks stay in level 0", chunk.level));
        }
        if (chunk.is_log_chunk() || self.count > 0) && self.log_tables == Some(false) {
            invalid.push("the volume does not have feature log_tables".to_string());
        }
        if !invalid.is_empty() {
            report.add(Code::LogChunkInvalid, structure, offset, invalid.join("; "));
        }
        if let (Some(recorded), Some(oldest), true) =
            (chunk.log_start.filter(|_| chunk.is_log_chunk()), self.oldest, blocks_read)
        {
            if recorded != oldest {
                let effect = if recorded > oldest {
                    "a later start lets the writer overwrite batches it references"
                } else {
                    "an earlier start holds the backup log for nothing"
                };
                report.add(
                    Code::LogStartMismatch,
                    structure,
                    offset,
                    format!(
                        "its recorded log start is lsn {} at offset {} of the backup log, its oldest reference names lsn {} at offset {}: {effect}",
                        recorded.lsn, recorded.offset, oldest.lsn, oldest.offset
                    ),
                );
            }
        }
        let first_offset = self.unresolved.first().map(|problem| problem.offset);
        report.problems.extend(self.unresolved);
        if let (Some((first, last)), Some(first_offset)) = (self.more_keys, first_offset) {
            report.add(
                Code::LogRefUnresolved,
                structure,
                first_offset,
                format!(
                    "{} more log references, of keys {} to {}, do not resolve either",
                    self.more,
                    hex(&first),
                    hex(&last)
                ),
            );
        }
    }
}

/// True when `version` (or an unfinished compaction's outputs) holds a log chunk.
pub(crate) fn has_log_chunks(state: &lds_format::algorithms::recovery::VersionLogState) -> bool {
    state.version.chunks.values().any(ChunkMeta::is_log_chunk)
        || state.unfinished_compactions.values().flat_map(|journal| journal.outputs.iter()).any(ChunkMeta::is_log_chunk)
}

#[cfg(test)]
mod tests {
    use lds_format::algorithms::image::ImageBuilder;
    use lds_format::batch::{BatchEntry, WriteBatchRecord};
    use lds_format::geometry::{plan_layout, LayoutRequest};
    use lds_format::label::Label;
    use lds_format::log::{encode_object, NewObject, ObjectType};
    use lds_format::version::meta::CHUNK_FLAG_LOG_REFS;
    use lds_format::version::payload::{CompactionJournal, DeltaVersion};
    use lds_volume::MemoryImage;

    use super::*;
    use crate::{check, chunk_problems, chunk_problems_with_log, CheckOptions};

    /// Referenced batches: each holds this many puts of 40-byte values.
    const PUTS_PER_BATCH: u32 = 3;
    /// The slot of the log chunk.
    const LOG_CHUNK_SLOT: u64 = 3;

    /// A volume with one log chunk, and where its referenced batches are.
    struct Volume {
        image: ImageBuilder,
        chunk: ChunkMeta,
        /// Position of each referenced batch, oldest first.
        batches: Vec<LogPosition>,
        /// The unreferenced batch before them (its puts are plain puts of the chunk).
        plain: LogPosition,
    }

    fn key(batch: u32, index: u32) -> Vec<u8> {
        format!("key-{batch:02}-{index:02}").into_bytes()
    }

    fn value(batch: u32, index: u32) -> Vec<u8> {
        format!("value-{batch:02}-{index:02}-{}", "v".repeat(28)).into_bytes()
    }

    fn position(image: &ImageBuilder) -> LogPosition {
        let (offset, lsn) = image.instances[0].backup_log.next_position();
        LogPosition { offset, lsn }
    }

    /// A 4 MiB volume (with feature `log_tables` when `log_tables`): one batch written as
    /// plain puts, then `batches` batches of `PUTS_PER_BATCH` puts each, flushed into one
    /// level-0 log chunk referencing them, its metadata passed through `edit` before the
    /// delta version that adds it (with the referenced batches' positions and the plain
    /// batch's).
    fn log_volume(
        log_tables: bool,
        batches: u32,
        edit: impl FnOnce(&mut ChunkMeta, &[LogPosition], LogPosition),
    ) -> Volume {
        let request = LayoutRequest { volume_len: 4 << 20, sector_size: Some(4096), ..LayoutRequest::default() };
        let geometry = plan_layout(&request, [0x61; 16]).unwrap_or_else(|error| panic!("{error}"));
        let label = Label::new(geometry, "log chunks");
        let label = if log_tables { label.with_log_tables() } else { label };
        let mut image = ImageBuilder::format(label);
        let plain = position(&image);
        let puts = |batch: u32| -> Vec<BatchEntry> {
            (0..PUTS_PER_BATCH)
                .map(|index| BatchEntry { kind: EntryKind::Put, key: key(batch, index), value: value(batch, index) })
                .collect()
        };
        let first = image.append_batch(0, puts(0)).unwrap_or_else(|error| panic!("{error}"));
        let mut entries: Vec<(Vec<u8>, u64, EntryKind, Vec<u8>)> = (0..PUTS_PER_BATCH)
            .map(|index| (key(0, index), first + u64::from(index), EntryKind::Put, value(0, index)))
            .collect();
        let mut positions = Vec::new();
        for batch in 1..=batches {
            let at = position(&image);
            let first = image.append_batch(0, puts(batch)).unwrap_or_else(|error| panic!("{error}"));
            positions.push(at);
            for index in 0..PUTS_PER_BATCH {
                let reference = LogRef { lsn: at.lsn, ofs_object: at.offset, entry_index: index, len_value: 40 };
                entries.push((
                    key(batch, index),
                    first + u64::from(index),
                    EntryKind::LogRef,
                    reference.encode().to_vec(),
                ));
            }
        }
        let mut chunk = image.write_chunk(0, LOG_CHUNK_SLOT, 0, 0, &entries);
        chunk.flags |= CHUNK_FLAG_LOG_REFS;
        chunk.log_start = positions.first().copied();
        edit(&mut chunk, &positions, plain);
        let backup_start = position(&image);
        let delta = DeltaVersion {
            added: vec![chunk.clone()],
            last_sequence: image.last_sequence(0),
            ofs_backup_start: backup_start.offset,
            lsn_backup_start: backup_start.lsn,
            ..DeltaVersion::default()
        };
        append_raw_delta(&mut image, &delta);
        Volume { image, chunk, batches: positions, plain }
    }

    /// Appends a delta version without applying it to the builder's version (it may be one
    /// recovery refuses).
    fn append_raw_delta(image: &mut ImageBuilder, delta: &DeltaVersion) {
        let state = &mut image.instances[0];
        let ofs_area = state.version_log.context().ofs_area;
        let pending = state
            .version_log
            .append(ObjectType::DeltaVersion, state.sn, &delta.encode())
            .unwrap_or_else(|e| panic!("{e}"));
        for write in pending {
            let at = (ofs_area + write.offset) as usize;
            image.bytes[at..at + write.bytes.len()].copy_from_slice(&write.bytes);
        }
    }

    fn check_bytes(bytes: &[u8]) -> Report {
        check(&MemoryImage(bytes), CheckOptions { deep: true, ..Default::default() }, &mut |_, _| {})
            .unwrap_or_else(|error| panic!("{error}"))
    }

    fn lines(report: &Report) -> String {
        report.problems.iter().map(Problem::line).collect::<Vec<_>>().join("\n")
    }

    /// The problems other than information.
    fn inconsistencies(report: &Report) -> Vec<&Problem> {
        report.problems.iter().filter(|problem| problem.code.severity() != crate::Severity::Info).collect()
    }

    fn backup_area(image: &ImageBuilder) -> &[u8] {
        image.area(LogKind::Backup, 0)
    }

    /// The slot images of the log chunk, as repair reads them.
    fn chunk_images(volume: &Volume) -> Vec<Vec<u8>> {
        let geometry = volume.image.label.geometry;
        let at = geometry.slot_offset(LOG_CHUNK_SLOT) as usize;
        vec![volume.image.bytes[at..at + geometry.slot_size as usize].to_vec()]
    }

    #[test]
    fn a_log_chunk_whose_references_resolve_is_clean_and_counted() {
        let volume = log_volume(true, 3, |_, _, _| {});
        let report = check_bytes(&volume.image.bytes);
        assert!(inconsistencies(&report).is_empty(), "{}", lines(&report));
        assert_eq!(report.summary.log_chunks, 1);
        assert_eq!(report.summary.log_references, u64::from(3 * PUTS_PER_BATCH));
        // Retained: from the first referenced batch to the backup start (after the last).
        let backup_start = volume.image.instances[0].backup_log.next_position().0;
        assert_eq!(report.summary.log_retained, vec![(0, backup_start - volume.batches[0].offset)]);
        assert!(volume.batches[0].offset > volume.plain.offset, "the plain batch is not retained");
        let log = LogCheck { backup_area: backup_area(&volume.image), log_tables: true };
        let geometry = volume.image.label.geometry;
        let problems = chunk_problems_with_log(
            &chunk_images(&volume),
            &geometry,
            0,
            &volume.chunk,
            u64::MAX,
            CheckOptions::default(),
            log,
        );
        assert_eq!(problems, Vec::new());
    }

    #[test]
    fn an_ordinary_volume_reports_no_log_summary() {
        let request = LayoutRequest { volume_len: 4 << 20, sector_size: Some(4096), ..LayoutRequest::default() };
        let geometry = plan_layout(&request, [0x62; 16]).unwrap_or_else(|error| panic!("{error}"));
        let report = check_bytes(&ImageBuilder::format(Label::new(geometry, "plain")).bytes);
        assert_eq!((report.summary.log_chunks, report.summary.log_references), (0, 0));
        assert!(report.summary.log_retained.is_empty(), "{:?}", report.summary.log_retained);
        // With the feature and no log chunk yet: each instance retains nothing.
        let report = check_bytes(&ImageBuilder::format(Label::new(geometry, "empty").with_log_tables()).bytes);
        assert_eq!(report.summary.log_retained, vec![(0, 0)]);
    }

    #[test]
    fn a_referenced_batch_overwritten_by_another_valid_object_does_not_resolve() {
        let mut volume = log_volume(true, 3, |_, _, _| {});
        // The second referenced batch, encoded again at the first one's offset (same size):
        // a valid write batch there, with another lsn, as a misdirected write leaves.
        let geometry = volume.image.label.geometry;
        let (first, second) = (volume.batches[0], volume.batches[1]);
        let area = backup_area(&volume.image);
        let object = lds_format::log::read_object(
            area,
            second.offset,
            &lds_format::log::area_context(&geometry, LogKind::Backup, 0),
        )
        .unwrap_or_else(|error| panic!("{error}"));
        let batch = WriteBatchRecord::decode(object.payload, 0).unwrap_or_else(|error| panic!("{error}"));
        let new = NewObject {
            object_type: ObjectType::WriteBatch,
            kind: LogKind::Backup,
            instance: 0,
            sn: object.header.sn,
            lsn: second.lsn,
            log_offset: first.offset,
            volume_uuid: geometry.volume_uuid,
        };
        let bytes = encode_object(&new, &batch.encode());
        assert_eq!(bytes.len() as u64, second.offset - first.offset, "the batches have one size");
        let at = (geometry.ofs_backup_log + first.offset) as usize;
        volume.image.bytes[at..at + bytes.len()].copy_from_slice(&bytes);
        let report = check_bytes(&volume.image.bytes);
        let found = inconsistencies(&report);
        assert_eq!(found.len(), PUTS_PER_BATCH as usize, "{}", lines(&report));
        for (index, problem) in found.iter().enumerate() {
            assert_eq!(problem.code, Code::LogRefUnresolved, "{}", lines(&report));
            assert_eq!(problem.structure, format!("chunk {LOG_CHUNK_SLOT} of instance 0"));
            let message = &problem.message;
            assert!(message.contains(&hex(&key(1, index as u32))), "{message}");
            assert!(message.contains(&format!("lsn {}, object at offset {}", first.lsn, first.offset)), "{message}");
            assert!(message.contains(&format!("has lsn {}", second.lsn)), "why: {message}");
        }
        // The repair entry points: without the area nothing is resolved, with it the same
        // problems as fsck's.
        let images = chunk_images(&volume);
        let options = CheckOptions::default();
        assert_eq!(chunk_problems(&images, &geometry, 0, &volume.chunk, u64::MAX, options), Vec::new());
        let log = LogCheck { backup_area: backup_area(&volume.image), log_tables: true };
        let with_log = chunk_problems_with_log(&images, &geometry, 0, &volume.chunk, u64::MAX, options, log);
        assert_eq!(with_log.iter().map(|problem| problem.code).collect::<Vec<_>>(), vec![Code::LogRefUnresolved; 3]);
    }

    #[test]
    fn a_destroyed_region_gives_a_few_lines_per_chunk() {
        let mut volume = log_volume(true, 5, |_, _, _| {});
        let geometry = volume.image.label.geometry;
        // Garbage over every referenced batch: each reference fails its object's checks.
        let backup_start = volume.image.instances[0].backup_log.next_position().0;
        let range = (geometry.ofs_backup_log + volume.batches[0].offset) as usize
            ..(geometry.ofs_backup_log + backup_start) as usize;
        for (index, byte) in volume.image.bytes[range].iter_mut().enumerate() {
            *byte = (index * 37 % 251) as u8;
        }
        let report = check_bytes(&volume.image.bytes);
        let found = inconsistencies(&report);
        assert!(found.iter().all(|problem| problem.code == Code::LogRefUnresolved), "{}", lines(&report));
        assert_eq!(found.len(), UNRESOLVED_REPORTED_MAX + 1, "{}", lines(&report));
        let references = 5 * PUTS_PER_BATCH as usize;
        let last = &found[UNRESOLVED_REPORTED_MAX].message;
        assert!(last.starts_with(&format!("{} more log references", references - UNRESOLVED_REPORTED_MAX)), "{last}");
        assert!(last.contains(&hex(&key(5, PUTS_PER_BATCH - 1))), "names the last key: {last}");
        assert_eq!(report.summary.log_references, references as u64);
    }

    #[test]
    fn every_mismatch_of_an_entry_is_reported() {
        // References whose batch is intact but whose fields name something else.
        /// A field and how the reference changes it.
        type Case = (&'static str, fn(&mut LogRef));
        let cases: [Case; 3] = [
            ("entry_index", |reference| reference.entry_index = 9),
            ("len_value", |reference| reference.len_value = 41),
            ("lsn", |reference| reference.lsn += 1),
        ];
        for (field, change) in cases {
            let volume = log_volume(true, 1, |_, _, _| {});
            let geometry = volume.image.label.geometry;
            let mut images = chunk_images(&volume);
            // Rebuild the chunk with its first reference changed.
            let at = volume.batches[0];
            let mut reference = LogRef { lsn: at.lsn, ofs_object: at.offset, entry_index: 0, len_value: 40 };
            change(&mut reference);
            let mut image = volume.image.clone();
            let sequence = volume.chunk.smallest_seq + u64::from(PUTS_PER_BATCH);
            let mut entries: Vec<(Vec<u8>, u64, EntryKind, Vec<u8>)> = (0..PUTS_PER_BATCH)
                .map(|index| {
                    (key(0, index), volume.chunk.smallest_seq + u64::from(index), EntryKind::Put, value(0, index))
                })
                .collect();
            entries.push((key(1, 0), sequence, EntryKind::LogRef, reference.encode().to_vec()));
            let mut chunk = image.write_chunk(0, LOG_CHUNK_SLOT, 0, 0, &entries);
            chunk.flags |= CHUNK_FLAG_LOG_REFS;
            chunk.log_start = Some(reference.position());
            let slot = geometry.slot_offset(LOG_CHUNK_SLOT) as usize;
            images[0] = image.bytes[slot..slot + geometry.slot_size as usize].to_vec();
            let log = LogCheck { backup_area: backup_area(&image), log_tables: true };
            let problems =
                chunk_problems_with_log(&images, &geometry, 0, &chunk, u64::MAX, CheckOptions::default(), log);
            assert_eq!(problems.len(), 1, "{field}: {problems:?}");
            assert_eq!(problems[0].code, Code::LogRefUnresolved, "{field}");
            assert!(problems[0].message.contains(&format!("{field}:")), "{field}: {}", problems[0].message);
        }
    }

    #[test]
    fn a_log_start_other_than_the_oldest_reference_is_reported() {
        // Later: the second referenced batch's; earlier: the plain batch's before the first.
        for later in [true, false] {
            let volume = log_volume(true, 3, |chunk, batches, plain| {
                chunk.log_start = Some(if later { batches[1] } else { plain });
            });
            let report = check_bytes(&volume.image.bytes);
            let found = inconsistencies(&report);
            assert_eq!(found.len(), 1, "{}", lines(&report));
            assert_eq!(found[0].code, Code::LogStartMismatch);
            let (recorded, oldest) = (if later { volume.batches[1] } else { volume.plain }, volume.batches[0]);
            let message = &found[0].message;
            assert!(
                message.contains(&format!("lsn {} at offset {} of the backup log", recorded.lsn, recorded.offset)),
                "{message}"
            );
            assert!(message.contains(&format!("names lsn {} at offset {}", oldest.lsn, oldest.offset)), "{message}");
            assert_eq!(message.contains("overwrite"), later, "{message}");
            // Repair's entry point needs no area for it.
            let geometry = volume.image.label.geometry;
            let problems =
                chunk_problems(&chunk_images(&volume), &geometry, 0, &volume.chunk, u64::MAX, CheckOptions::default());
            assert_eq!(problems.iter().map(|problem| problem.code).collect::<Vec<_>>(), vec![Code::LogStartMismatch]);
        }
    }

    #[test]
    fn log_chunk_rules_are_reported() {
        // Kind-3 entries without the flag.
        let volume = log_volume(true, 2, |chunk, _, _| {
            chunk.flags &= !CHUNK_FLAG_LOG_REFS;
            chunk.log_start = None;
        });
        let report = check_bytes(&volume.image.bytes);
        let found = inconsistencies(&report);
        assert_eq!(found.len(), 1, "{}", lines(&report));
        assert_eq!(found[0].code, Code::LogChunkInvalid);
        assert!(
            found[0].message.contains("6 log references (entry kind 3) but its metadata lacks flag log_refs"),
            "{}",
            found[0].message
        );
        assert_eq!(report.summary.log_chunks, 0);
        // The same on a volume without the feature: both reasons, one problem.
        let volume = log_volume(false, 2, |_, _, _| {});
        let report = check_bytes(&volume.image.bytes);
        let found = inconsistencies(&report);
        assert_eq!(found.len(), 1, "{}", lines(&report));
        assert_eq!(found[0].code, Code::LogChunkInvalid);
        assert!(found[0].message.contains("does not have feature log_tables"), "{}", found[0].message);
        // The flag without a reference: the chunk's puts are all plain (no batch referenced).
        let volume = log_volume(true, 0, |chunk, _, plain| {
            chunk.flags |= CHUNK_FLAG_LOG_REFS;
            chunk.log_start = Some(plain);
        });
        let report = check_bytes(&volume.image.bytes);
        let found = inconsistencies(&report);
        assert_eq!(found.len(), 1, "{}", lines(&report));
        assert!(found[0].message.contains("has flag log_refs but it holds no log reference"), "{}", found[0].message);
    }

    #[test]
    fn a_log_chunk_outside_level_0_is_reported() {
        // Recovery refuses a delta version that puts one at level 1 (SPEC.md §6.2).
        let volume = log_volume(true, 1, |chunk, _, _| chunk.level = 1);
        let report = check_bytes(&volume.image.bytes);
        let found = inconsistencies(&report);
        assert_eq!(found.len(), 1, "{}", lines(&report));
        assert_eq!(found[0].code, Code::LogChunkInvalid);
        assert_eq!(found[0].structure, "version log of instance 0");
        assert!(found[0].message.contains("log chunks stay in level 0"), "{}", found[0].message);
        // An unfinished compaction's output at level 1 reaches pass 4: its chunk is reported.
        let mut volume = log_volume(true, 1, |_, _, _| {});
        let output = ChunkMeta { chunk_id: 9, level: 1, ..volume.chunk.clone() };
        let slot = volume.image.label.geometry.slot_offset(LOG_CHUNK_SLOT) as usize;
        let target = volume.image.label.geometry.slot_offset(9) as usize;
        let len = volume.image.label.geometry.slot_size as usize;
        volume.image.bytes.copy_within(slot..slot + len, target);
        let journal = CompactionJournal {
            compaction_id: 1,
            source_level: 0,
            target_level: 1,
            resume_key: output.largest_key.clone(),
            inputs: vec![LOG_CHUNK_SLOT],
            cleaned: Vec::new(),
            outputs: vec![ChunkMeta {
                sub_chunks: vec![lds_format::version::meta::SubChunkRef { slot: 9, ..output.sub_chunks[0] }],
                ..output
            }],
        };
        volume.image.append_journal(0, &journal).unwrap_or_else(|error| panic!("{error}"));
        let report = check_bytes(&volume.image.bytes);
        let level = report.problems.iter().find(|problem| problem.code == Code::LogChunkInvalid);
        let level = level.unwrap_or_else(|| panic!("no 802\n{}", lines(&report)));
        assert_eq!(level.structure, "chunk 9 of instance 0");
        assert!(level.message.contains("a log chunk at level 1"), "{}", level.message);
    }
}
