//! Whole-volume images built in memory from the format's own encoders: what mkfs writes
//! first (SPEC.md §4.2, §5.2), and a builder for fixtures and tests that appends log objects
//! and writes chunks exactly as SPEC.md §10 says a writer must.

use crate::algorithms::recovery::LogHead;
use crate::algorithms::writer::{AppendError, LogAppender};
use crate::batch::WriteBatchRecord;
use crate::chunk::builder::{ChunkBuilder, ChunkIdentity, ChunkOptions};
use crate::entry::EntryKind;
use crate::geometry::{Geometry, LogKind};
use crate::label::Label;
use crate::log::{area_context, ObjectType};
use crate::version::meta::{ChunkMeta, SubChunkRef};
use crate::version::payload::{BaseVersion, CompactionJournal, DeltaVersion};
use crate::version::Version;

/// Levels a new tree has (LevelDB's 7).
pub const NUM_LEVELS_DEFAULT: u32 = 7;

/// One write of bytes at a device offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceWrite {
    /// Device offset.
    pub offset: u64,
    /// Bytes.
    pub bytes: Vec<u8>,
}

/// The base version of an empty tree of `instance` of the volume `label` describes: with an
/// empty value section on a volume with feature `value_chunks` (SPEC.md §6.1).
pub fn empty_base_version_of(label: &Label, instance: u32) -> BaseVersion {
    let mut base = empty_base_version(&label.geometry, instance, label.generation);
    if label.has_value_chunks() {
        base.values = Some(crate::version::payload::ValueSection { next_value_chunk_id: 1, chunks: Vec::new() });
    }
    base
}

/// The base version of an empty tree (with no value section).
pub fn empty_base_version(geometry: &Geometry, instance: u32, label_generation: u64) -> BaseVersion {
    BaseVersion {
        geometry: *geometry,
        instance,
        num_levels: NUM_LEVELS_DEFAULT,
        last_sequence: 0,
        label_generation,
        ofs_backup_start: 0,
        lsn_backup_start: 1,
        compact_pointers: Vec::new(),
        chunks: Vec::new(),
        values: None,
    }
}

/// A label sector: the 512-byte label followed by zeros to the sector size.
pub fn label_sector(label: &Label) -> Vec<u8> {
    let mut sector = vec![0u8; label.geometry.sector_size as usize];
    sector[..crate::label::LABEL_LEN].copy_from_slice(&label.encode());
    sector
}

/// What mkfs writes, in order: the backup label, the primary label, then each instance's
/// initial base version (sn 1, lsn 1) at offset 0 of its version log. The log areas are
/// expected to be zeroed by the caller first.
pub fn format_writes(label: &Label) -> Vec<DeviceWrite> {
    let geometry = &label.geometry;
    let sector = label_sector(label);
    let mut writes = vec![
        DeviceWrite { offset: geometry.ofs_backup_label(), bytes: sector.clone() },
        DeviceWrite { offset: 0, bytes: sector },
    ];
    for instance in 0..geometry.instance_count {
        let context = area_context(geometry, LogKind::Version, instance);
        let mut appender =
            LogAppender::new(context, LogHead { offset: 0, next_lsn: 1, after_wrap_right: false, sn: 1 }, 0, 1);
        let base = empty_base_version_of(label, instance);
        // An empty base version is far below any area's limit (an area holds 16 sectors).
        if let Ok(pending) = appender.append(ObjectType::BaseVersion, 1, &base.encode()) {
            for write in pending {
                writes.push(DeviceWrite { offset: context.ofs_area + write.offset, bytes: write.bytes });
            }
        }
    }
    writes
}

/// The logs and tree of one instance inside an `ImageBuilder`.
#[derive(Debug, Clone)]
pub struct InstanceState {
    /// Version log appender.
    pub version_log: LogAppender,
    /// Backup log appender.
    pub backup_log: LogAppender,
    /// The current version.
    pub version: Version,
    /// Current SN.
    pub sn: u64,
    /// Next key sequence number.
    pub next_sequence: u64,
}

/// Builds a volume image in memory.
#[derive(Debug, Clone)]
pub struct ImageBuilder {
    /// The image.
    pub bytes: Vec<u8>,
    /// Its label.
    pub label: Label,
    /// Per-instance state.
    pub instances: Vec<InstanceState>,
}

impl ImageBuilder {
    /// A freshly formatted volume.
    pub fn format(label: Label) -> Self {
        let geometry = label.geometry;
        let mut bytes = vec![0u8; geometry.volume_len as usize];
        for write in format_writes(&label) {
            bytes[write.offset as usize..write.offset as usize + write.bytes.len()].copy_from_slice(&write.bytes);
        }
        let instances = (0..geometry.instance_count)
            .map(|instance| {
                let base = empty_base_version_of(&label, instance);
                let version_context = area_context(&geometry, LogKind::Version, instance);
                let head = LogHead {
                    offset: crate::codec::align8(64 + base.encode().len() as u64),
                    next_lsn: 2,
                    after_wrap_right: false,
                    sn: 1,
                };
                let backup_context = area_context(&geometry, LogKind::Backup, instance);
                InstanceState {
                    version_log: LogAppender::new(version_context, head, 0, 1),
                    backup_log: LogAppender::new(
                        backup_context,
                        LogHead { offset: 0, next_lsn: 1, after_wrap_right: false, sn: 1 },
                        0,
                        1,
                    ),
                    version: Version::from_base(&base)
                        .unwrap_or_else(|_| unreachable!("an empty base version is valid")),
                    sn: 1,
                    next_sequence: 1,
                }
            })
            .collect();
        Self { bytes, label, instances }
    }

    fn write_pending(&mut self, ofs_area: u64, pending: Vec<crate::algorithms::writer::PendingWrite>) {
        for write in pending {
            let at = (ofs_area + write.offset) as usize;
            self.bytes[at..at + write.bytes.len()].copy_from_slice(&write.bytes);
        }
    }

    fn append(
        &mut self,
        instance: u32,
        kind: LogKind,
        object_type: ObjectType,
        payload: &[u8],
    ) -> Result<u64, AppendError> {
        let state = &mut self.instances[instance as usize];
        let sn = state.sn;
        let appender = match kind {
            LogKind::Version => &mut state.version_log,
            LogKind::Backup => &mut state.backup_log,
        };
        let ofs_area = appender.context().ofs_area;
        let pending = appender.append(object_type, sn, payload)?;
        let offset = pending.last().map_or(0, |write| write.offset);
        self.write_pending(ofs_area, pending);
        Ok(offset)
    }

    /// Appends a delta version and applies it to the builder's version; moves the backup
    /// log's live start to the delta's backup start.
    pub fn append_delta(&mut self, instance: u32, delta: &DeltaVersion) -> Result<(), AppendError> {
        self.append(instance, LogKind::Version, ObjectType::DeltaVersion, &delta.encode())?;
        let state = &mut self.instances[instance as usize];
        state.version.apply(delta).unwrap_or_else(|error| panic!("fixture delta contradicts the version: {error}"));
        state.backup_log.set_live_start(delta.ofs_backup_start, delta.lsn_backup_start);
        Ok(())
    }

    /// Appends a compaction journal record.
    pub fn append_journal(&mut self, instance: u32, journal: &CompactionJournal) -> Result<(), AppendError> {
        self.append(instance, LogKind::Version, ObjectType::CompactionJournal, &journal.encode()).map(|_| ())
    }

    /// Writes a new base version of the current tree (a trim, SPEC.md §10.3).
    pub fn trim(&mut self, instance: u32) -> Result<(), AppendError> {
        let geometry = self.label.geometry;
        let state = &mut self.instances[instance as usize];
        state.sn += 1;
        let base = state.version.to_base(geometry, instance);
        let sn = state.sn;
        let ofs_area = state.version_log.context().ofs_area;
        let pending = state.version_log.append(ObjectType::BaseVersion, sn, &base.encode())?;
        let last = pending.last().map(|write| (write.offset, write.lsn)).unwrap_or((0, 0));
        state.version_log.set_live_start(last.0, last.1);
        state.version_log.set_sn(sn);
        self.write_pending(ofs_area, pending);
        Ok(())
    }

    /// Takes `count` sequence numbers (for chunk entries) and returns the first.
    pub fn reserve_sequences(&mut self, instance: u32, count: u64) -> u64 {
        let state = &mut self.instances[instance as usize];
        let first = state.next_sequence;
        state.next_sequence += count;
        first
    }

    /// The last sequence number handed out.
    pub fn last_sequence(&self, instance: u32) -> u64 {
        self.instances[instance as usize].next_sequence - 1
    }

    /// Appends a write batch of puts and deletes with the next sequence numbers.
    pub fn append_batch(&mut self, instance: u32, entries: Vec<crate::batch::BatchEntry>) -> Result<u64, AppendError> {
        let first_sequence = self.instances[instance as usize].next_sequence;
        let count = entries.len() as u64;
        let batch = WriteBatchRecord { first_sequence, entries, synced_lsn_low: 0 };
        self.append(instance, LogKind::Backup, ObjectType::WriteBatch, &batch.encode())?;
        self.instances[instance as usize].next_sequence += count;
        Ok(first_sequence)
    }

    /// Writes a one-slot chunk holding `entries` (sorted, as the builder requires) into
    /// `slot` and returns its metadata; the version is not changed.
    pub fn write_chunk(
        &mut self,
        instance: u32,
        slot: u64,
        level: u8,
        flags: u8,
        entries: &[(Vec<u8>, u64, EntryKind, Vec<u8>)],
    ) -> ChunkMeta {
        let geometry = self.label.geometry;
        let options = ChunkOptions {
            slot_size: geometry.slot_size,
            block_size: 4096,
            bloom_bits_per_key: 10,
            digest: crate::digest::DigestKind::Blake3,
            sketch_precision: 0,
            compact_entries: self.label.has_compact_entries(),
        };
        let mut builder = ChunkBuilder::new(options);
        for (key, sequence, kind, value) in entries {
            assert!(builder.add(key, *sequence, *kind, value), "fixture entries overflow one slot");
        }
        let identity = ChunkIdentity {
            volume_uuid: geometry.volume_uuid,
            instance,
            chunk_id: slot,
            sub_chunk_index: 0,
            num_sub_chunks: 1,
            level,
            flags,
        };
        let built = builder.finish(identity).unwrap_or_else(|| panic!("a fixture chunk needs entries"));
        let at = geometry.slot_offset(slot) as usize;
        let image = built.slot_image();
        self.bytes[at..at + image.len()].copy_from_slice(&image);
        ChunkMeta {
            chunk_id: slot,
            level,
            flags,
            num_entries: built.footer.num_entries,
            smallest_seq: built.footer.smallest_seq,
            largest_seq: built.footer.largest_seq,
            len_data: built.len_data(),
            smallest_key: built.first_key.clone(),
            largest_key: built.last_key.clone(),
            sub_chunks: vec![SubChunkRef { slot, digest: built.footer.digest }],
            value_refs: Vec::new(),
            log_start: None,
        }
    }

    /// The bytes of one log area.
    pub fn area(&self, kind: LogKind, instance: u32) -> &[u8] {
        let (offset, len) = self.label.geometry.log_area(kind, instance);
        &self.bytes[offset as usize..(offset + len) as usize]
    }
}
