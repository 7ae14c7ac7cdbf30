//! Recovery rules over the bytes of a log area (SPEC.md §9), with no I/O: the engine, fsck
//! and dump read an area into memory and call these functions.

use std::collections::BTreeMap;

use crate::batch::decode_entries;
use crate::codec::{align8, align_up};
use crate::error::FormatError;
use crate::log::{
    check_wrap_right, read_object, AreaContext, ObjectHeader, ObjectType, RawObject, WrapLeft, HEADER_LEN, OBJECT_MAGIC,
};
use crate::version::{BaseVersion, CompactionJournal, DeltaVersion, ReplayError, Version};

/// A decoded payload of a valid object.
#[derive(Debug, Clone)]
pub enum Payload {
    /// A base version.
    Base(Box<BaseVersion>),
    /// A delta version.
    Delta(DeltaVersion),
    /// A compaction journal record.
    Journal(CompactionJournal),
    /// A write batch: its first sequence number and entry count (entries are decoded again
    /// by whoever replays them).
    Batch {
        /// `first_sequence`.
        first_sequence: u64,
        /// `num_entries`.
        num_entries: u32,
        /// The sync watermark's low 32 bits (SPEC.md §7.1).
        synced_lsn_low: u32,
    },
    /// A WOL.
    WrapLeft(WrapLeft),
    /// A WOR.
    WrapRight,
}

/// A valid object at a known offset.
#[derive(Debug, Clone)]
pub struct ChainObject {
    /// Offset in the area.
    pub offset: u64,
    /// The header.
    pub header: ObjectHeader,
    /// The type.
    pub object_type: ObjectType,
    /// The decoded payload.
    pub payload: Payload,
}

/// Why a chain ended (SPEC.md §9.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainEnd {
    /// The chain ended with a WOR.
    WrapRight,
    /// The next candidate is not a valid object.
    Invalid {
        /// Where.
        offset: u64,
        /// Why (a checksum, magic, ... error).
        error: FormatError,
    },
    /// The next candidate is valid but does not continue the chain.
    Stale {
        /// Where.
        offset: u64,
        /// Its lsn.
        lsn: u64,
        /// The lsn expected.
        expected_lsn: u64,
    },
    /// The area ends.
    AreaEnd,
}

/// Objects chained from a start (SPEC.md §9.1).
#[derive(Debug, Clone)]
pub struct Chain {
    /// The objects, in order.
    pub objects: Vec<ChainObject>,
    /// Why it ended.
    pub end: ChainEnd,
}

/// Decodes one valid object's payload by type (the last validity rule of SPEC.md §5).
pub fn decode_payload(raw: &RawObject<'_>, device_offset: u64) -> Result<Payload, FormatError> {
    let payload_offset = device_offset + HEADER_LEN as u64;
    Ok(match raw.object_type {
        ObjectType::BaseVersion => Payload::Base(Box::new(BaseVersion::decode(raw.payload, payload_offset)?)),
        ObjectType::DeltaVersion => Payload::Delta(DeltaVersion::decode(raw.payload, payload_offset)?),
        ObjectType::CompactionJournal => Payload::Journal(CompactionJournal::decode(raw.payload, payload_offset)?),
        ObjectType::WriteBatch => {
            let mut num_entries = 0u32;
            let first_sequence = decode_entries(raw.payload, payload_offset, |_, _, _| num_entries += 1)?;
            Payload::Batch { first_sequence, num_entries, synced_lsn_low: crate::batch::synced_lsn_low(raw.payload) }
        }
        ObjectType::WrapLeft => Payload::WrapLeft(WrapLeft::decode(raw.payload, payload_offset)?),
        ObjectType::WrapRight => {
            check_wrap_right(raw.payload, payload_offset)?;
            Payload::WrapRight
        }
    })
}

/// Reads and fully validates the object at `offset`.
pub fn read_valid_object(area: &[u8], offset: u64, context: &AreaContext) -> Result<ChainObject, FormatError> {
    let raw = read_object(area, offset, context)?;
    let payload = decode_payload(&raw, context.ofs_area + offset)?;
    Ok(ChainObject { offset, header: raw.header, object_type: raw.object_type, payload })
}

/// `chain(area, ofs, expected_lsn)` of SPEC.md §9.1.
pub fn chain(area: &[u8], context: &AreaContext, start: u64, expected_lsn: Option<u64>) -> Chain {
    let mut objects: Vec<ChainObject> = Vec::new();
    let mut offset = start;
    // Each step advances by at least 64 bytes, so the area bounds the loop; the explicit
    // bound guards against a logic error turning into a hang.
    let steps_max = context.len_area / HEADER_LEN as u64 + 1;
    for _ in 0..steps_max {
        if offset + HEADER_LEN as u64 > context.len_area {
            return Chain { objects, end: ChainEnd::AreaEnd };
        }
        let expected = match objects.last() {
            Some(previous) => previous.header.lsn.checked_add(1),
            None => expected_lsn,
        };
        // Nothing follows an object with the largest lsn (only a hostile image has one).
        let exhausted = !objects.is_empty() && expected.is_none();
        let previous_sn = objects.last().map(|previous| previous.header.sn);
        let continues = |object: &ChainObject| {
            !exhausted
                && expected.is_none_or(|lsn| object.header.lsn == lsn)
                && previous_sn.is_none_or(|sn| object.header.sn >= sn)
        };
        let candidate = read_valid_object(area, offset, context);
        let object = match candidate {
            Ok(object) if continues(&object) => object,
            other => {
                // SPEC.md §9.1: a WOR stands at the next sector boundary after the head.
                let wrap_offset = align_up(offset, u64::from(context.sector_size));
                let wrap = match read_valid_object(area, wrap_offset, context) {
                    Ok(wrap)
                        if (!objects.is_empty() || expected_lsn.is_some())
                            && wrap_offset != offset
                            && wrap.object_type == ObjectType::WrapRight =>
                    {
                        Some(wrap).filter(|wrap| continues(wrap))
                    }
                    _ => None,
                };
                match (wrap, other) {
                    (Some(wrap), _) => wrap,
                    (None, Ok(stale)) => {
                        let expected_lsn = expected.unwrap_or(stale.header.lsn);
                        return Chain { objects, end: ChainEnd::Stale { offset, lsn: stale.header.lsn, expected_lsn } };
                    }
                    (None, Err(error)) => return Chain { objects, end: ChainEnd::Invalid { offset, error } },
                }
            }
        };
        let is_wor = object.object_type == ObjectType::WrapRight;
        offset = object.header.next_offset();
        objects.push(object);
        if is_wor {
            return Chain { objects, end: ChainEnd::WrapRight };
        }
    }
    Chain { objects, end: ChainEnd::AreaEnd }
}

/// Why the version log cannot be recovered (SPEC.md §9.2).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VersionLogError {
    /// Offset 0 holds no valid object.
    NoStart {
        /// Why the object at 0 is not valid.
        error: ChainEnd,
    },
    /// Offset 0 holds neither a BV nor a WOL.
    BadStart {
        /// The type found.
        object_type: ObjectType,
    },
    /// The WOL's right portion does not hold the live base version.
    BadWrapLeft {
        /// What is wrong.
        reason: String,
    },
    /// A live DV or CJ does not carry its base version's SN.
    SnMismatch {
        /// Offset of the object.
        offset: u64,
        /// Its SN.
        found: u64,
        /// The base version's SN.
        expected: u64,
    },
    /// A live DV contradicts the version.
    Replay {
        /// Offset of the DV.
        offset: u64,
        /// The contradiction.
        error: ReplayError,
    },
}

impl VersionLogError {
    /// The stable code of SPEC.md §9.2.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NoStart { .. } => "E_VLOG_NO_START",
            Self::BadStart { .. } => "E_VLOG_BAD_START",
            Self::BadWrapLeft { .. } => "E_VLOG_BAD_WOL",
            Self::SnMismatch { .. } => "E_VLOG_SN",
            Self::Replay { .. } => "E_VLOG_REPLAY",
        }
    }
}

impl std::fmt::Display for VersionLogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoStart { error } => {
                write!(f, "{}: no valid object at offset 0 ({})", self.code(), describe_end(error))
            }
            Self::BadStart { object_type } => {
                write!(f, "{}: offset 0 holds a {}, not a base version or WOL", self.code(), object_type.name())
            }
            Self::BadWrapLeft { reason } => write!(f, "{}: {reason}", self.code()),
            Self::SnMismatch { offset, found, expected } => {
                write!(f, "{}: object at offset {offset} has sn {found}, its base version has {expected}", self.code())
            }
            Self::Replay { offset, error } => write!(f, "{}: delta version at offset {offset} {error}", self.code()),
        }
    }
}

impl std::error::Error for VersionLogError {}

/// Describes a chain end for messages.
pub fn describe_end(end: &ChainEnd) -> String {
    match end {
        ChainEnd::WrapRight => "wrap object at the right".into(),
        ChainEnd::Invalid { offset, error } => format!("invalid object at {offset}: {error}"),
        ChainEnd::Stale { offset, lsn, expected_lsn } => {
            format!("stale object at {offset}: lsn {lsn}, expected {expected_lsn}")
        }
        ChainEnd::AreaEnd => "end of the area".into(),
    }
}

/// Where the next append goes (SPEC.md §9.2 step 7, §9.3 step 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogHead {
    /// Offset of the next append.
    pub offset: u64,
    /// Its lsn.
    pub next_lsn: u64,
    /// The last object was a WOR: the next append is a WOL at offset 0.
    pub after_wrap_right: bool,
    /// SN of the last object (the current SN).
    pub sn: u64,
}

/// The recovered state of one version log.
#[derive(Debug, Clone)]
pub struct VersionLogState {
    /// The live base version.
    pub base: BaseVersion,
    /// Its offset (the start of the live region).
    pub base_offset: u64,
    /// Its lsn.
    pub base_lsn: u64,
    /// Its SN.
    pub sn: u64,
    /// The version after replaying the live DVs.
    pub version: Version,
    /// The sequence S of SPEC.md §9.2, in log order.
    pub sequence: Vec<ChainObject>,
    /// Index in `sequence` of the live base version.
    pub base_index: usize,
    /// Where the next append goes.
    pub head: LogHead,
    /// Why the chain at the head ended.
    pub end: ChainEnd,
    /// Compactions journaled and not completed, by id (SPEC.md §12).
    pub unfinished_compactions: BTreeMap<u64, CompactionJournal>,
    /// The largest compaction id seen in the live region.
    pub compaction_id_max: u64,
    /// Bytes of the live region.
    pub live_len: u64,
}

fn head_after(last: &ChainObject, context: &AreaContext) -> LogHead {
    let after_wrap_right = last.object_type == ObjectType::WrapRight;
    LogHead {
        offset: if after_wrap_right { 0 } else { align8(last.header.next_offset()).min(context.len_area) },
        // The writer refuses to append at the largest lsn (`AppendError::LsnExhausted`).
        next_lsn: last.header.lsn.saturating_add(1),
        after_wrap_right,
        sn: last.header.sn,
    }
}

/// Recovers one instance's version log (SPEC.md §9.2).
pub fn recover_version_log(area: &[u8], context: &AreaContext) -> Result<VersionLogState, VersionLogError> {
    let left = chain(area, context, 0, None);
    let Some(first) = left.objects.first() else {
        return Err(VersionLogError::NoStart { error: left.end });
    };
    let end = left.end.clone();
    let sequence: Vec<ChainObject> =
        match (&first.payload, left.objects.iter().any(|object| object.object_type == ObjectType::BaseVersion)) {
            (Payload::Base(_), _) | (Payload::WrapLeft(_), true) => left.objects,
            (Payload::WrapLeft(wrap), false) => {
                let right = chain(area, context, wrap.ofs_first_live, Some(wrap.lsn_first_live));
                let bad = |reason: String| Err(VersionLogError::BadWrapLeft { reason });
                if right.end != ChainEnd::WrapRight {
                    return bad(format!(
                        "the right portion at offset {} does not end with a WOR ({})",
                        wrap.ofs_first_live,
                        describe_end(&right.end)
                    ));
                }
                let wor_lsn = right.objects.last().map_or(0, |wor| wor.header.lsn);
                if wor_lsn.checked_add(1) != Some(first.header.lsn) {
                    return bad(format!(
                        "the right portion ends with lsn {wor_lsn}, the WOL has lsn {}",
                        first.header.lsn
                    ));
                }
                if !right.objects.iter().any(|object| object.object_type == ObjectType::BaseVersion) {
                    return bad("neither portion holds a base version".into());
                }
                right.objects.into_iter().chain(left.objects).collect()
            }
            _ => return Err(VersionLogError::BadStart { object_type: first.object_type }),
        };
    let base_index = sequence.iter().rposition(|object| object.object_type == ObjectType::BaseVersion).unwrap_or(0);
    let base_object = &sequence[base_index];
    let Payload::Base(base) = &base_object.payload else {
        return Err(VersionLogError::BadStart { object_type: base_object.object_type });
    };
    let sn = base_object.header.sn;
    let mut version =
        Version::from_base(base).map_err(|error| VersionLogError::Replay { offset: base_object.offset, error })?;
    let mut unfinished_compactions = BTreeMap::new();
    let mut compaction_id_max = 0;
    for object in &sequence[base_index + 1..] {
        match &object.payload {
            Payload::Delta(_) | Payload::Journal(_) if object.header.sn != sn => {
                return Err(VersionLogError::SnMismatch {
                    offset: object.offset,
                    found: object.header.sn,
                    expected: sn,
                });
            }
            Payload::Delta(delta) => {
                version.apply(delta).map_err(|error| VersionLogError::Replay { offset: object.offset, error })?;
                if delta.compaction_id != 0 {
                    unfinished_compactions.remove(&delta.compaction_id);
                    compaction_id_max = compaction_id_max.max(delta.compaction_id);
                }
            }
            Payload::Journal(journal) => {
                compaction_id_max = compaction_id_max.max(journal.compaction_id);
                unfinished_compactions.insert(journal.compaction_id, journal.clone());
            }
            _ => {}
        }
    }
    let last = sequence.last().unwrap_or(base_object);
    let head = head_after(last, context);
    let base_offset = base_object.offset;
    let live_len = if head.offset >= base_offset && !(head.after_wrap_right && base_offset > 0) {
        head.offset - base_offset
    } else {
        context.len_area - base_offset + head.offset
    };
    Ok(VersionLogState {
        base: (**base).clone(),
        base_offset,
        base_lsn: base_object.header.lsn,
        sn,
        version,
        base_index,
        head,
        end,
        unfinished_compactions,
        compaction_id_max,
        live_len,
        sequence,
    })
}

/// Why the backup log cannot be replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackupLogError {
    /// Batches do not have increasing sequence numbers.
    SequenceNotIncreasing {
        /// Offset of the batch.
        offset: u64,
        /// Its first sequence number.
        first_sequence: u64,
        /// The previous batch's last sequence number.
        previous_last: u64,
    },
}

impl std::fmt::Display for BackupLogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::SequenceNotIncreasing { offset, first_sequence, previous_last } => write!(
                f,
                "E_BLOG_SEQ: write batch at offset {offset} starts at sequence {first_sequence}, after {previous_last}"
            ),
        }
    }
}

impl std::error::Error for BackupLogError {}

/// A write batch found by backup log recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayBatch {
    /// Offset in the area.
    pub offset: u64,
    /// Its lsn.
    pub lsn: u64,
    /// First sequence number.
    pub first_sequence: u64,
    /// Entries.
    pub num_entries: u32,
}

/// The recovered state of one backup log.
#[derive(Debug, Clone)]
pub struct BackupLogState {
    /// False when the reset object was never persisted (SPEC.md §9.3 step 1).
    pub start_found: bool,
    /// The live objects in order (batches and wrap objects).
    pub objects: Vec<ChainObject>,
    /// Batches to replay, in order (those above `last_sequence`).
    pub batches: Vec<ReplayBatch>,
    /// Where the next append goes.
    pub head: LogHead,
    /// Why the chain ended.
    pub end: ChainEnd,
}

/// Recovers one instance's backup log (SPEC.md §9.3). `current_sn` is the version log's SN,
/// used for the head when nothing is found.
pub fn recover_backup_log(
    area: &[u8],
    context: &AreaContext,
    ofs_backup_start: u64,
    lsn_backup_start: u64,
    last_sequence: u64,
    current_sn: u64,
) -> Result<BackupLogState, BackupLogError> {
    recover_backup_log_checked(area, context, (ofs_backup_start, lsn_backup_start), last_sequence, current_sn, true)
}

/// As [`recover_backup_log`], but a batch whose sequence numbers do not increase ends the
/// chain (with the objects before it) instead of failing: what repair keeps of such a log.
pub fn recover_backup_log_prefix(
    area: &[u8],
    context: &AreaContext,
    ofs_backup_start: u64,
    lsn_backup_start: u64,
    last_sequence: u64,
    current_sn: u64,
) -> BackupLogState {
    match recover_backup_log_checked(
        area,
        context,
        (ofs_backup_start, lsn_backup_start),
        last_sequence,
        current_sn,
        false,
    ) {
        Ok(state) => state,
        // Unreachable: with `strict` false no error is returned.
        Err(_) => BackupLogState {
            start_found: false,
            objects: Vec::new(),
            batches: Vec::new(),
            head: LogHead {
                offset: ofs_backup_start,
                next_lsn: lsn_backup_start,
                after_wrap_right: false,
                sn: current_sn,
            },
            end: ChainEnd::AreaEnd,
        },
    }
}

fn recover_backup_log_checked(
    area: &[u8],
    context: &AreaContext,
    (ofs_backup_start, lsn_backup_start): (u64, u64),
    last_sequence: u64,
    current_sn: u64,
    strict: bool,
) -> Result<BackupLogState, BackupLogError> {
    let empty_head =
        LogHead { offset: ofs_backup_start, next_lsn: lsn_backup_start, after_wrap_right: false, sn: current_sn };
    let mut objects: Vec<ChainObject> = Vec::new();
    let mut start = ofs_backup_start;
    let mut expected = lsn_backup_start;
    let mut followed = 0u64;
    let bytes_max = context.len_area + u64::from(context.sector_size);
    let mut end = ChainEnd::AreaEnd;
    // Each segment either ends the walk or ends in a WOR; the byte budget bounds the loop.
    for segment_number in 0.. {
        let segment = chain(area, context, start, Some(expected));
        let segment_is_continuation = segment_number > 0;
        // SPEC.md §9.3 step 2: the WOL continues the WOR's chain only with an SN not
        // smaller than the WOR's (§9.1), as within a chain: a WOL of an earlier session that
        // a crash cut off does not.
        let wrap_sn = objects.last().map(|wrap| wrap.header.sn);
        if let (true, Some(first), Some(wrap_sn)) = (segment_is_continuation, segment.objects.first(), wrap_sn) {
            if first.header.sn < wrap_sn {
                end = ChainEnd::Stale { offset: 0, lsn: first.header.lsn, expected_lsn: expected };
                break;
            }
        }
        if segment_is_continuation
            && segment.objects.first().is_some_and(|first| first.object_type != ObjectType::WrapLeft)
        {
            end = ChainEnd::Invalid {
                offset: 0,
                error: FormatError::invalid(
                    "backup log",
                    "object_type",
                    context.ofs_area,
                    "offset 0 after a WOR is not a WOL",
                ),
            };
            break;
        }
        followed += segment.objects.iter().map(|object| object.header.total_len()).sum::<u64>();
        let wrapped = segment.end == ChainEnd::WrapRight;
        end = segment.end;
        let next = segment.objects.last().map(|last| last.header.lsn.checked_add(1));
        objects.extend(segment.objects);
        match next {
            Some(Some(next)) => expected = next,
            Some(None) => break,
            None => {}
        }
        if !wrapped || followed > bytes_max {
            break;
        }
        start = 0;
    }
    if objects.is_empty() {
        return Ok(BackupLogState { start_found: false, objects, batches: Vec::new(), head: empty_head, end });
    }
    let mut batches = Vec::new();
    let mut previous_last = 0u64;
    let mut kept = objects.len();
    for (position, object) in objects.iter().enumerate() {
        if let Payload::Batch { first_sequence, num_entries, .. } = object.payload {
            if previous_last != 0 && first_sequence <= previous_last {
                if !strict {
                    kept = position;
                    end = ChainEnd::Stale {
                        offset: object.offset,
                        lsn: object.header.lsn,
                        expected_lsn: object.header.lsn,
                    };
                    break;
                }
                return Err(BackupLogError::SequenceNotIncreasing {
                    offset: object.offset,
                    first_sequence,
                    previous_last,
                });
            }
            previous_last = first_sequence + u64::from(num_entries) - 1;
            if previous_last > last_sequence {
                batches.push(ReplayBatch {
                    offset: object.offset,
                    lsn: object.header.lsn,
                    first_sequence,
                    num_entries,
                });
            }
        }
    }
    objects.truncate(kept);
    let head = objects.last().map_or(empty_head, |last| head_after(last, context));
    Ok(BackupLogState { start_found: true, objects, batches, head, end })
}

/// The physical walk of SPEC.md §15 from `start`: each position whose bytes start with the
/// object magic and whose claimed length fits the area, without checking checksums.
pub fn physical_walk(area: &[u8], start: u64, sector_size: u64) -> Vec<(u64, ObjectHeader)> {
    let mut found = Vec::new();
    let mut position = start;
    let len_area = area.len() as u64;
    while position + HEADER_LEN as u64 <= len_area {
        let mut at = position as usize;
        if area[at..at + 4] != OBJECT_MAGIC {
            // SPEC.md §15: a WOR may stand at the next sector boundary.
            let next_sector = align_up(position, sector_size);
            if next_sector == position || next_sector + HEADER_LEN as u64 > len_area {
                break;
            }
            position = next_sector;
            at = position as usize;
            if area[at..at + 4] != OBJECT_MAGIC {
                break;
            }
        }
        let Ok(header) = ObjectHeader::parse_raw(&area[at..at + HEADER_LEN], position) else {
            break;
        };
        let end = position + HEADER_LEN as u64 + u64::from(header.len_payload);
        if end > len_area {
            break;
        }
        found.push((position, header));
        position = align8(end);
    }
    found
}

/// A slot claimed twice (SPEC.md §9.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotConflict {
    /// The slot.
    pub slot: u64,
    /// The instances claiming it.
    pub instances: (u32, u32),
}

/// Builds the online map over instances' versions and unfinished compactions (SPEC.md §9.4,
/// §12): one bool per slot.
pub fn online_map<'a>(
    num_slots: u64,
    instances: impl IntoIterator<Item = (u32, &'a Version, &'a BTreeMap<u64, CompactionJournal>)>,
) -> Result<Vec<bool>, SlotConflict> {
    let mut owner: Vec<Option<u32>> = vec![None; num_slots as usize];
    let mut claim = |slot: u64, instance: u32| -> Result<(), SlotConflict> {
        let Some(entry) = owner.get_mut(slot as usize) else {
            return Ok(());
        };
        match entry {
            Some(other) => Err(SlotConflict { slot, instances: (*other, instance) }),
            None => {
                *entry = Some(instance);
                Ok(())
            }
        }
    };
    for (instance, version, journals) in instances {
        let cleaned: Vec<u64> = journals.values().flat_map(|journal| journal.cleaned.iter().copied()).collect();
        for chunk in version.chunks.values() {
            if cleaned.contains(&chunk.chunk_id) {
                continue;
            }
            for slot in chunk.slots() {
                claim(slot, instance)?;
            }
        }
        for value_chunk in version.value_chunks.values() {
            claim(value_chunk.slot, instance)?;
        }
        for journal in journals.values() {
            for output in &journal.outputs {
                for slot in output.slots() {
                    claim(slot, instance)?;
                }
            }
        }
    }
    Ok(owner.into_iter().map(|entry| entry.is_some()).collect())
}
