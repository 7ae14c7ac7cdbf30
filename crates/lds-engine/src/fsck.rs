//! Checking a volume completely and read-only (`lds fsck`): labels, both logs of every
//! instance, every chunk the trees reference, the online map and the compaction journal.
//! Each problem has a stable code (the table in `Code`), a severity, the structure and the
//! offset. Memory is bounded by the log areas, the chunk metadata and one slot at a time.

use std::collections::BTreeSet;

use lds_format::batch::SEQUENCE_MAX;
use lds_format::chunk::{decode_block, decode_index, Filter, Footer, FOOTER_LEN};
use lds_format::image::area_context;
use lds_format::label::{Geometry, Label, LabelChoice, LabelChoiceError, LogKind};
use lds_format::log::{AreaContext, ObjectHeader, ObjectType, HEADER_LEN, OBJECT_MAGIC};
use lds_format::recovery::{
    online_map, read_valid_object, recover_backup_log, recover_version_log, BackupLogError, ChainEnd, VersionLogError,
    VersionLogState,
};
use lds_format::version::{ChunkMeta, ReplayError, Version};
use lds_format::FormatError;

use crate::device::DeviceError;
use crate::inspect::{read_labels, ReadAt};

/// How bad a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Worth knowing; not an inconsistency (exit code unaffected).
    Info,
    /// An inconsistency that loses no data.
    Warning,
    /// Corruption: data is wrong or unreachable.
    Error,
}

impl Severity {
    /// `info`, `warning` or `error`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Warning => "warning",
            Self::Error => "error",
        }
    }
}

/// The stable problem codes. Numbers never change meaning; new problems get new numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Code {
    /// 101: the primary label is not valid (the backup is used).
    PrimaryLabelInvalid,
    /// 102: the backup label is not valid.
    BackupLabelInvalid,
    /// 103: both labels are valid but differ with the same generation.
    LabelsConflict,
    /// 104: both labels are valid and differ: an interrupted label rewrite (resize).
    LabelsGenerationsDiffer,
    /// 105: no label can be used.
    NoValidLabel,
    /// 106: the volume is longer than the device.
    VolumeBeyondDevice,
    /// 201: the version log has no valid object at offset 0.
    VersionLogNoStart,
    /// 202: offset 0 of the version log holds neither a base version nor a WOL.
    VersionLogBadStart,
    /// 203: the WOL does not lead to the live base version.
    VersionLogBadWrapLeft,
    /// 204: a live delta version or journal record has another SN than its base version.
    VersionLogSnMismatch,
    /// 205: a live delta version contradicts the version.
    VersionLogReplay,
    /// 206: the object at the head of the version log is incomplete or damaged (recovery
    /// ignores it, as a write interrupted by a crash).
    VersionLogTornHead,
    /// 207: a corrupt object breaks the live chain of the version log: later versions are lost.
    VersionLogChainBroken,
    /// 208: a chunk is at a level beyond the tree's levels.
    LevelOutOfRange,
    /// 209: the base version's geometry replica differs from the label's.
    GeometryReplicaDiffers,
    /// 210: valid version log objects stand after a position that was never written: writes
    /// a crash reordered before any flush covered them (nothing acknowledged is lost). No
    /// longer reported: every version log append is flushed before the next (SPEC.md §10.1),
    /// so such objects are damage, reported as 207. The number keeps its meaning.
    VersionLogUnflushedAfterGap,
    /// 306: the object at the head of the backup log is incomplete or damaged (recovery
    /// ignores it, as a write interrupted by a crash).
    BackupLogTornHead,
    /// 307: valid backup log objects stand after a position that was never written (as 210).
    BackupLogUnflushedAfterGap,
    /// 302: write batches do not have increasing sequence numbers.
    BackupLogSequence,
    /// 303: a corrupt object breaks the live chain of the backup log: later writes are lost.
    /// No longer reported: a crash can leave a torn unsynced object with later ones landed
    /// (SPEC.md §10.1), so this is a damaged head (306) with later objects. The number keeps
    /// its meaning.
    BackupLogChainBroken,
    /// 304: the object at the backup start point is newer than the start point recorded.
    BackupStartMismatch,
    /// 305: the backup start point lies outside the backup log.
    BackupStartOutside,
    /// 401: a chunk footer is not valid.
    FooterInvalid,
    /// 402: a chunk footer disagrees with the chunk's metadata.
    FooterMismatch,
    /// 403: a block index is not valid or disagrees with its blocks.
    IndexInvalid,
    /// 404: a filter is not valid.
    FilterInvalid,
    /// 405: a block's checksum does not match.
    BlockChecksum,
    /// 406: entries are not sorted within a chunk.
    KeysUnsorted,
    /// 407: a chunk's keys are not the range its metadata states.
    KeyRangeMismatch,
    /// 408: a chunk's blake3 digest does not match (`--deep`).
    DigestMismatch,
    /// 409: two chunks of one level (1 or deeper) overlap.
    LevelOverlap,
    /// 410: a chunk holds sequence numbers above the version's last sequence.
    SequenceImplausible,
    /// 411: a filter answers "absent" for a key the chunk holds (`--deep`).
    FilterFalseNegative,
    /// 412: a level holds more than one odd chunk.
    OddChunksInLevel,
    /// 501: a slot is referenced twice.
    SlotReferencedTwice,
    /// 502: a slot beyond the slot area is referenced.
    SlotOutOfRange,
    /// 503: free slots hold chunks of this volume (freed, or written by a flush or
    /// compaction that never committed; reused on allocation: not a leak in LDS).
    StaleChunksInFreeSlots,
    /// 601: an unfinished compaction's inputs are not in the version.
    JournalInputsMissing,
    /// 602: an unfinished compaction's outputs use slots the version uses.
    JournalOutputsConflict,
    /// 603: an unfinished compaction is recorded (the engine resumes it).
    JournalUnfinished,
}

impl Code {
    /// The stable number.
    pub fn number(self) -> u16 {
        match self {
            Self::PrimaryLabelInvalid => 101,
            Self::BackupLabelInvalid => 102,
            Self::LabelsConflict => 103,
            Self::LabelsGenerationsDiffer => 104,
            Self::NoValidLabel => 105,
            Self::VolumeBeyondDevice => 106,
            Self::VersionLogNoStart => 201,
            Self::VersionLogBadStart => 202,
            Self::VersionLogBadWrapLeft => 203,
            Self::VersionLogSnMismatch => 204,
            Self::VersionLogReplay => 205,
            Self::VersionLogTornHead => 206,
            Self::VersionLogChainBroken => 207,
            Self::LevelOutOfRange => 208,
            Self::GeometryReplicaDiffers => 209,
            Self::VersionLogUnflushedAfterGap => 210,
            Self::BackupLogSequence => 302,
            Self::BackupLogTornHead => 306,
            Self::BackupLogUnflushedAfterGap => 307,
            Self::BackupLogChainBroken => 303,
            Self::BackupStartMismatch => 304,
            Self::BackupStartOutside => 305,
            Self::FooterInvalid => 401,
            Self::FooterMismatch => 402,
            Self::IndexInvalid => 403,
            Self::FilterInvalid => 404,
            Self::BlockChecksum => 405,
            Self::KeysUnsorted => 406,
            Self::KeyRangeMismatch => 407,
            Self::DigestMismatch => 408,
            Self::LevelOverlap => 409,
            Self::SequenceImplausible => 410,
            Self::FilterFalseNegative => 411,
            Self::OddChunksInLevel => 412,
            Self::SlotReferencedTwice => 501,
            Self::SlotOutOfRange => 502,
            Self::StaleChunksInFreeSlots => 503,
            Self::JournalInputsMissing => 601,
            Self::JournalOutputsConflict => 602,
            Self::JournalUnfinished => 603,
        }
    }

    /// The severity this code always has.
    pub fn severity(self) -> Severity {
        match self {
            Self::VersionLogTornHead
            | Self::BackupLogTornHead
            | Self::VersionLogUnflushedAfterGap
            | Self::BackupLogUnflushedAfterGap
            | Self::StaleChunksInFreeSlots
            | Self::JournalUnfinished => Severity::Info,
            Self::BackupLabelInvalid
            | Self::LabelsGenerationsDiffer
            | Self::GeometryReplicaDiffers
            | Self::SequenceImplausible
            | Self::OddChunksInLevel => Severity::Warning,
            _ => Severity::Error,
        }
    }
}

/// One problem found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The stable code.
    pub code: Code,
    /// The structure concerned (`primary label`, `version log of instance 0`, `chunk 12`, ...).
    pub structure: String,
    /// The device offset.
    pub offset: u64,
    /// What is wrong.
    pub message: String,
}

/// What was checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Log objects found by the physical walks.
    pub log_objects: u64,
    /// Log objects in the live chains.
    pub live_log_objects: u64,
    /// Chunks checked.
    pub chunks: u64,
    /// Blocks whose checksum was verified.
    pub blocks: u64,
    /// Entries read.
    pub entries: u64,
    /// Bytes read and verified.
    pub bytes_verified: u64,
    /// Slots in the slot area.
    pub slots: u64,
    /// Slots referenced by live versions.
    pub slots_in_use: u64,
}

/// The outcome of a check.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Problems, in the order found.
    pub problems: Vec<Problem>,
    /// What was checked.
    pub summary: Summary,
}

impl Report {
    /// Problems of a severity.
    pub fn count(&self, severity: Severity) -> usize {
        self.problems.iter().filter(|problem| problem.code.severity() == severity).count()
    }

    /// fsck(8) exit code: 0 clean (info only), 4 errors or warnings left uncorrected.
    pub fn exit_code(&self) -> i32 {
        if self.count(Severity::Error) + self.count(Severity::Warning) > 0 {
            4
        } else {
            0
        }
    }

    fn add(&mut self, code: Code, structure: impl Into<String>, offset: u64, message: impl Into<String>) {
        self.problems.push(Problem { code, structure: structure.into(), offset, message: message.into() });
    }
}

/// Why a check could not run at all (fsck exit code 8).
#[derive(Debug)]
pub enum CheckError {
    /// The device failed.
    Device(DeviceError),
    /// The device holds no LDS label at all.
    NotAVolume,
    /// The format version is not one this build reads.
    Unsupported(String),
}

impl std::fmt::Display for CheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Device(error) => write!(f, "{error}"),
            Self::NotAVolume => write!(f, "not an LDS volume: no label magic at offset 0 nor at the end"),
            Self::Unsupported(reason) => write!(f, "{reason}"),
        }
    }
}

impl From<DeviceError> for CheckError {
    fn from(error: DeviceError) -> Self {
        Self::Device(error)
    }
}

/// Options of a check.
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckOptions {
    /// Also recompute every chunk's blake3 digest and test every key against its filter.
    pub deep: bool,
}

fn label_problem(report: &mut Report, code: Code, structure: &str, error: &FormatError) {
    report.add(code, structure, error.offset(), error.to_string());
}

/// Checks the volume on `device`. `progress(done, total)` is called with bytes of chunks.
pub fn check(
    device: &(impl ReadAt + Sync),
    options: CheckOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Report, CheckError> {
    let mut report = Report::default();
    let labels = read_labels(device)?;
    let magic_missing = |copy: &Result<Label, FormatError>| {
        matches!(copy, Err(FormatError::BadMagic { .. } | FormatError::Truncated { .. }))
    };
    if magic_missing(&labels.primary) && magic_missing(&labels.backup) {
        return Err(CheckError::NotAVolume);
    }
    for copy in [&labels.primary, &labels.backup] {
        if let Err(FormatError::UnsupportedVersion { major, minor, .. }) = copy {
            if labels.choose().is_err() {
                return Err(CheckError::Unsupported(format!("format version {major}.{minor}: this build checks 1.x")));
            }
        }
    }
    if let Err(error) = &labels.primary {
        label_problem(&mut report, Code::PrimaryLabelInvalid, "primary label", error);
    }
    if let Err(error) = &labels.backup {
        label_problem(&mut report, Code::BackupLabelInvalid, "backup label", error);
    }
    let label = match labels.choose() {
        Ok((choice, label)) => {
            if let (LabelChoice::Primary | LabelChoice::Backup, Ok(_), Ok(_)) =
                (choice, &labels.primary, &labels.backup)
            {
                report.add(Code::LabelsGenerationsDiffer, "labels", 0, "both labels are valid but differ: the one with the higher generation is used (an interrupted resize)");
            }
            label.clone()
        }
        Err(LabelChoiceError::Conflict) => {
            report.add(
                Code::LabelsConflict,
                "labels",
                0,
                "both labels are valid, differ, and have the same generation",
            );
            return Ok(report);
        }
        Err(LabelChoiceError::NoValidLabel) => {
            report.add(
                Code::NoValidLabel,
                "labels",
                0,
                "neither label is valid: the volume cannot be read (salvage may recover chunks)",
            );
            return Ok(report);
        }
    };
    let geometry = label.geometry;
    if geometry.volume_len > device.len() {
        report.add(
            Code::VolumeBeyondDevice,
            "labels",
            0,
            format!("the volume is {} bytes, the device {}", geometry.volume_len, device.len()),
        );
        return Ok(report);
    }
    report.summary.slots = geometry.num_slots;
    let mut trees: Vec<(u32, VersionLogState)> = Vec::new();
    for instance in 0..geometry.instance_count {
        if let Some(state) = check_logs(device, &geometry, &label, instance, &mut report)? {
            trees.push((instance, state));
        }
    }
    let map = match online_map(
        geometry.num_slots,
        trees.iter().map(|(instance, state)| (*instance, &state.version, &state.unfinished_compactions)),
    ) {
        Ok(map) => map,
        Err(conflict) => {
            report.add(
                Code::SlotReferencedTwice,
                format!("slot {}", conflict.slot),
                geometry.slot_offset(conflict.slot),
                format!("referenced by instances {} and {}", conflict.instances.0, conflict.instances.1),
            );
            // Check chunks anyway, marking every referenced slot.
            let mut map = vec![false; geometry.num_slots as usize];
            for (_, state) in &trees {
                for slot in state.version.chunks.values().flat_map(ChunkMeta::slots) {
                    if let Some(bit) = map.get_mut(slot as usize) {
                        *bit = true;
                    }
                }
            }
            map
        }
    };
    report.summary.slots_in_use = map.iter().filter(|&&used| used).count() as u64;
    let total: u64 =
        trees.iter().flat_map(|(_, state)| state.version.chunks.values().map(|chunk| chunk.len_data)).sum();
    let mut done = 0u64;
    for (instance, state) in &trees {
        check_tree(device, &geometry, *instance, state, options, &mut report, &mut |bytes| {
            done += bytes;
            progress(done, total);
        })?;
    }
    check_free_slots(device, &geometry, &map, &mut report)?;
    Ok(report)
}

/// Checks one instance's version log and backup log; returns the recovered tree.
fn check_logs(
    device: &impl ReadAt,
    geometry: &Geometry,
    label: &Label,
    instance: u32,
    report: &mut Report,
) -> Result<Option<VersionLogState>, CheckError> {
    let structure = format!("version log of instance {instance}");
    let context = area_context(geometry, LogKind::Version, instance);
    let area = device.read_vec(context.ofs_area, context.len_area)?;
    report.summary.log_objects += lds_format::recovery::physical_walk(&area, 0, geometry.sector()).len() as u64;
    let state = match recover_version_log(&area, &context) {
        Ok(state) => state,
        Err(error) => {
            let (code, offset) = match &error {
                VersionLogError::NoStart { .. } => (Code::VersionLogNoStart, context.ofs_area),
                VersionLogError::BadStart { .. } => (Code::VersionLogBadStart, context.ofs_area),
                VersionLogError::BadWrapLeft { .. } => (Code::VersionLogBadWrapLeft, context.ofs_area),
                VersionLogError::SnMismatch { offset, .. } => (Code::VersionLogSnMismatch, context.ofs_area + offset),
                VersionLogError::Replay { offset, error } => (replay_code(error), context.ofs_area + offset),
                _ => (Code::VersionLogReplay, context.ofs_area),
            };
            report.add(code, structure, offset, error.to_string());
            return Ok(None);
        }
    };
    report.summary.live_log_objects += (state.sequence.len() - state.base_index) as u64;
    let head = (state.head.next_lsn, 0);
    check_chain_end(&area, &context, &state.end, head, report, Code::VersionLogChainBroken, &structure);
    report_damaged_head(&area, &context, &state.end, head, report, Code::VersionLogTornHead, &structure);
    if state.base.geometry != *geometry && state.base.label_generation >= label.generation {
        report.add(
            Code::GeometryReplicaDiffers,
            structure.clone(),
            context.ofs_area + state.base_offset,
            "the live base version's geometry replica differs from the label's",
        );
    }
    for journal in state.unfinished_compactions.values() {
        report.add(
            Code::JournalUnfinished,
            structure.clone(),
            context.ofs_area,
            format!(
                "compaction {} is unfinished: {} outputs persisted, {} inputs cleaned, resume after key {}",
                journal.compaction_id,
                journal.outputs.len(),
                journal.cleaned.len(),
                lds_format::error::hex(&journal.resume_key)
            ),
        );
        if let Some(missing) = journal.inputs.iter().find(|id| !state.version.chunks.contains_key(id)) {
            report.add(
                Code::JournalInputsMissing,
                structure.clone(),
                context.ofs_area,
                format!("compaction {}: input chunk {missing} is not in the version", journal.compaction_id),
            );
        }
        let cleaned: BTreeSet<u64> = journal.cleaned.iter().copied().collect();
        for output in &journal.outputs {
            for slot in output.slots() {
                if let Some(owner) = state.version.slot_owner.get(&slot).filter(|owner| !cleaned.contains(owner)) {
                    report.add(
                        Code::JournalOutputsConflict,
                        structure.clone(),
                        geometry.slot_offset(slot),
                        format!("compaction {}: output slot {slot} is used by chunk {owner}", journal.compaction_id),
                    );
                }
            }
        }
    }
    check_backup_log(device, geometry, instance, &state.version, state.sn, report)?;
    Ok(Some(state))
}

fn replay_code(error: &ReplayError) -> Code {
    match error {
        ReplayError::SlotInUse { .. } => Code::SlotReferencedTwice,
        ReplayError::SlotOutOfRange { .. } => Code::SlotOutOfRange,
        ReplayError::LevelOutOfRange { .. } => Code::LevelOutOfRange,
        _ => Code::VersionLogReplay,
    }
}

/// True when an object of ours stands at the head (at `offset`, or a WOR at the next sector
/// boundary) but does not validate (SPEC.md §9.6): its header is the next append's, all its
/// identifying fields but at most one match that append, whatever its checksums say. A crash
/// tears such a write when it spans sectors; otherwise only damage explains it.
fn damaged_head(area: &[u8], context: &AreaContext, offset: u64, (next_lsn, sn_floor): (u64, u64)) -> bool {
    let sector = u64::from(context.sector_size);
    let boundary = offset.div_ceil(sector) * sector;
    [(offset, None), (boundary, Some(ObjectType::WrapRight))].iter().any(|&(at, only_type)| {
        // A valid object there is stale, not damaged.
        if read_valid_object(area, at, context).is_ok() {
            return false;
        }
        let Some(bytes) = area.get(at as usize..at as usize + HEADER_LEN) else { return false };
        let Ok(bytes) = <&[u8; HEADER_LEN]>::try_from(bytes) else { return false };
        let found = ObjectHeader::parse_tolerant(bytes);
        let mismatches = found.identity_mismatches(context, at, next_lsn, only_type);
        if found.crc_ok {
            // The checksummed fields (all but the magic) are true: it is ours only when they
            // all match, with the next lsn (a stale header of an earlier lap is not damage),
            // and only with an SN at least the chain's: a smaller one is a leftover of a
            // crashed session whose lsns the next session reused (SPEC.md §9.5), partly
            // overwritten by its later appends.
            let checksummed_mismatches = mismatches - usize::from(!found.magic_ok);
            return checksummed_mismatches == 0 && found.header.sn >= sn_floor;
        }
        mismatches <= 1
    })
}

/// True when a crash could have torn the object at `offset` (SPEC.md §2: only a one-sector
/// write is atomic): its header crosses a sector boundary, or its intact header gives it a
/// length that does. A damaged object inside one sector is no torn write: the sector landed
/// whole (its header is ours) or not at all.
fn tearable(area: &[u8], context: &AreaContext, offset: u64) -> bool {
    let sector = u64::from(context.sector_size);
    let Some(header) = area.get(offset as usize..offset as usize + HEADER_LEN) else { return false };
    let last_sector = |len: u64| (offset + len - 1) / sector;
    if last_sector(HEADER_LEN as u64) != offset / sector {
        return true;
    }
    let field = |range: std::ops::Range<usize>| {
        header[range].iter().rev().fold(0u64, |value, &byte| (value << 8) | u64::from(byte))
    };
    if lds_format::codec::crc32c(&header[8..]) != field(4..8) as u32 {
        return false;
    }
    let len = (HEADER_LEN as u64 + field(40..44)).div_ceil(8) * 8;
    last_sector(len) != offset / sector
}

/// Damage in the logs that no crash explains and that recovery would pass over silently,
/// losing later versions or acknowledged writes (fsck's 207, 303 and 304 errors), for the
/// engine to refuse to open rather than serve an older state and then overwrite what a
/// repair could still use (RELIABILITY.md I7). `version_area` and `backup_area` are the
/// instance's areas, `state` its recovered version log.
pub(crate) fn log_damage(
    geometry: &Geometry,
    instance: u32,
    version_area: &[u8],
    backup_area: &[u8],
    state: &VersionLogState,
) -> Option<String> {
    let mut report = Report::default();
    let structure = format!("version log of instance {instance}");
    let context = area_context(geometry, LogKind::Version, instance);
    let (end, next_lsn) = (&state.end, state.head.next_lsn);
    check_chain_end(version_area, &context, end, (next_lsn, 0), &mut report, Code::VersionLogChainBroken, &structure);
    let context = area_context(geometry, LogKind::Backup, instance);
    let start = state.version.ofs_backup_start;
    if start % 8 == 0 && start + HEADER_LEN as u64 <= context.len_area {
        let structure = format!("backup log of instance {instance}");
        check_backup_area(backup_area, &context, &state.version, state.sn, &mut report, structure);
    }
    let problem = report.problems.iter().find(|problem| problem.code.severity() == Severity::Error)?;
    Some(format!(
        "{} @ {}: {} (fsck reports {}: damage, not a crash; opening would lose it silently)",
        problem.structure,
        problem.offset,
        problem.message,
        problem.code.number()
    ))
}

/// True when an object header of this area (intact: its checksum, volume uuid and position
/// check) with an lsn at or past `next_lsn` stands anywhere in it, valid object or not: a
/// leftover of a crashed session that the next appends, reusing its lsns, could revive
/// (SPEC.md §9.5).
pub(crate) fn headers_at_or_past(area: &[u8], context: &AreaContext, next_lsn: u64) -> bool {
    let mut position = 0usize;
    while position + HEADER_LEN <= area.len() {
        let header = &area[position..position + HEADER_LEN];
        if header[..4] == OBJECT_MAGIC {
            let field = |range: std::ops::Range<usize>| {
                header[range].iter().rev().fold(0u64, |value, &byte| (value << 8) | u64::from(byte))
            };
            let intact = lds_format::codec::crc32c(&header[8..]) == field(4..8) as u32
                && header[48..64] == context.volume_uuid
                && field(32..40) == position as u64;
            if intact && field(24..32) >= next_lsn {
                return true;
            }
        }
        position += 8;
    }
    false
}

/// The lsns of the valid objects anywhere in a log area with an lsn above `next_lsn`.
pub(crate) fn later_lsns(area: &[u8], context: &AreaContext, next_lsn: u64) -> Vec<u64> {
    let mut later: Vec<u64> = Vec::new();
    let mut position = 0usize;
    while position + HEADER_LEN <= area.len() {
        if area[position..position + 4] == OBJECT_MAGIC {
            if let Ok(object) = read_valid_object(area, position as u64, context) {
                if object.header.lsn > next_lsn {
                    later.push(object.header.lsn);
                }
            }
        }
        position += 8;
    }
    later
}

/// A chain that ends where valid objects with later lsns still stand was broken by
/// corruption, not by a crash: those objects are lost to recovery.
fn check_chain_end(
    area: &[u8],
    context: &AreaContext,
    end: &ChainEnd,
    head: (u64, u64),
    report: &mut Report,
    code: Code,
    structure: &str,
) {
    let next_lsn = head.0;
    let end_offset = match end {
        ChainEnd::Invalid { offset, .. } | ChainEnd::Stale { offset, .. } => *offset,
        ChainEnd::WrapRight | ChainEnd::AreaEnd => return,
    };
    let later = later_lsns(area, context, next_lsn);
    if let (Some(first), Some(last)) = (later.iter().min(), later.iter().max()) {
        // Every version log append is flushed before the next is written (SPEC.md §10.1,
        // §10.2), so no crash leaves a later object after the chain's end there: only damage
        // does. In the backup log, unflushed appends land in any order, and torn at sector
        // boundaries.
        if code == Code::BackupLogChainBroken {
            if !damaged_head(area, context, end_offset, head) {
                // Nothing of ours was ever written where the chain breaks, so nothing after it
                // was flushed: a flush covers every earlier write to the area. These are writes
                // a crash reordered, and nothing acknowledged is lost.
                report.add(
                    Code::BackupLogUnflushedAfterGap,
                    structure,
                    context.ofs_area + end_offset,
                    format!("{} valid objects (lsn {first} to {last}) stand after a position the next append never reached (stale or empty bytes there): unflushed writes a crash reordered; recovery ignores them", later.len()),
                );
                return;
            }
            if tearable(area, context, end_offset) {
                // A torn unflushed write with later ones landed: a crash leaves this too, and
                // nothing on the media tells it from damage. Reported as a damaged head.
                return;
            }
        }
        let why = match end {
            ChainEnd::Invalid { error, .. } => format!("{error}"),
            ChainEnd::Stale { lsn, expected_lsn, .. } => {
                format!("an object with lsn {lsn} where {expected_lsn} was expected")
            }
            _ => String::new(),
        };
        let lost = if later.len() == 1 {
            format!("1 later object (lsn {first}) is")
        } else {
            format!("{} later objects (lsn {first} to {last}) are", later.len())
        };
        report.add(
            code,
            structure,
            context.ofs_area + end_offset,
            format!("the live chain breaks here ({why}); {lost} lost to recovery"),
        );
    }
}

/// Reports an incomplete or damaged object at the head, unless the chain was found broken.
fn report_damaged_head(
    area: &[u8],
    context: &AreaContext,
    end: &ChainEnd,
    head: (u64, u64),
    report: &mut Report,
    code: Code,
    structure: &str,
) {
    let next_lsn = head.0;
    let (ChainEnd::Invalid { offset, .. } | ChainEnd::Stale { offset, .. }) = end else { return };
    let broken = report.problems.iter().any(|problem| {
        problem.structure == structure
            && matches!(problem.code, Code::VersionLogChainBroken | Code::BackupLogChainBroken)
    });
    if !broken && damaged_head(area, context, *offset, head) {
        let why = match end {
            ChainEnd::Invalid { error, .. } => error.to_string(),
            _ => "its magic or header is damaged".to_string(),
        };
        let later = later_lsns(area, context, next_lsn);
        let after = match (later.iter().min(), later.iter().max()) {
            (Some(first), Some(last)) => format!(
                "; {} valid later objects (lsn {first} to {last}) follow, unsynced writes that landed before it (if they were synced, damage lost them)",
                later.len()
            ),
            _ => String::new(),
        };
        report.add(code, structure, context.ofs_area + offset, format!("the object at the head (lsn {next_lsn}) is incomplete or damaged ({why}); recovery ignores it, as a write a crash interrupted{after}"));
    }
}

fn check_backup_log(
    device: &impl ReadAt,
    geometry: &Geometry,
    instance: u32,
    version: &Version,
    sn: u64,
    report: &mut Report,
) -> Result<(), CheckError> {
    let structure = format!("backup log of instance {instance}");
    let context = area_context(geometry, LogKind::Backup, instance);
    if version.ofs_backup_start % 8 != 0 || version.ofs_backup_start + HEADER_LEN as u64 > context.len_area {
        report.add(
            Code::BackupStartOutside,
            structure,
            context.ofs_area,
            format!(
                "the backup start point {} is not an object position of the {}-byte area",
                version.ofs_backup_start, context.len_area
            ),
        );
        return Ok(());
    }
    let area = device.read_vec(context.ofs_area, context.len_area)?;
    report.summary.log_objects += lds_format::recovery::physical_walk(&area, 0, geometry.sector()).len() as u64;
    check_backup_area(&area, &context, version, sn, report, structure);
    Ok(())
}

/// The checks of one backup log area already read (its start point lies inside it).
fn check_backup_area(
    area: &[u8],
    context: &AreaContext,
    version: &Version,
    sn: u64,
    report: &mut Report,
    structure: String,
) {
    let state = match recover_backup_log(
        area,
        context,
        version.ofs_backup_start,
        version.lsn_backup_start,
        version.last_sequence,
        sn,
    ) {
        Ok(state) => state,
        Err(error @ BackupLogError::SequenceNotIncreasing { offset, .. }) => {
            report.add(Code::BackupLogSequence, structure, context.ofs_area + offset, error.to_string());
            return;
        }
    };
    if !state.start_found {
        // Nothing written since the last flush is normal; an object newer than the start
        // point standing there is not.
        if let Ok(object) = read_valid_object(area, version.ofs_backup_start, context) {
            if object.header.lsn > version.lsn_backup_start {
                report.add(
                    Code::BackupStartMismatch,
                    structure,
                    context.ofs_area + version.ofs_backup_start,
                    format!("the version says the backup log restarts with lsn {}, but the object there has lsn {}: its writes are not replayed", version.lsn_backup_start, object.header.lsn),
                );
                return;
            }
        }
        // The start object itself may be corrupt with valid objects after it.
        let end = ChainEnd::Invalid {
            offset: version.ofs_backup_start,
            error: FormatError::invalid(
                "write batch",
                "start",
                context.ofs_area + version.ofs_backup_start,
                "the object at the backup start point is not valid",
            ),
        };
        let head = (version.lsn_backup_start, 0);
        check_chain_end(area, context, &end, head, report, Code::BackupLogChainBroken, &structure);
        report_damaged_head(area, context, &end, head, report, Code::BackupLogTornHead, &structure);
        return;
    }
    report.summary.live_log_objects += state.objects.len() as u64;
    let head = (state.head.next_lsn, state.head.sn);
    check_chain_end(area, context, &state.end, head, report, Code::BackupLogChainBroken, &structure);
    report_damaged_head(area, context, &state.end, head, report, Code::BackupLogTornHead, &structure);
}

/// Checks every chunk of a tree, and the level rules.
fn check_tree(
    device: &(impl ReadAt + Sync),
    geometry: &Geometry,
    instance: u32,
    state: &VersionLogState,
    options: CheckOptions,
    report: &mut Report,
    progress: &mut dyn FnMut(u64),
) -> Result<(), CheckError> {
    let version = &state.version;
    for level in 1..version.num_levels as u8 {
        let chunks = version.level(level);
        for pair in chunks.windows(2) {
            if pair[0].largest_key >= pair[1].smallest_key {
                report.add(
                    Code::LevelOverlap,
                    format!("level {level} of instance {instance}"),
                    geometry.slot_offset(pair[1].chunk_id),
                    format!("chunks {} and {} overlap", pair[0].chunk_id, pair[1].chunk_id),
                );
            }
        }
        let odd: Vec<u64> = chunks.iter().filter(|chunk| chunk.is_odd()).map(|chunk| chunk.chunk_id).collect();
        if odd.len() > 1 {
            report.add(
                Code::OddChunksInLevel,
                format!("level {level} of instance {instance}"),
                0,
                format!("{} odd chunks: {odd:?} (SPEC.md §11 allows one)", odd.len()),
            );
        }
    }
    // A reader thread fetches whole slots in slot order, at most two chunks ahead, so that
    // reading overlaps checking and the device sees one sequential read per slot. A small
    // tree is read inline: a thread costs more than it saves there (the crash simulator
    // checks thousands of tiny volumes).
    let chunks: Vec<&ChunkMeta> = version.chunks.values().collect();
    let read_chunk = |chunk: &ChunkMeta| -> Vec<Result<Vec<u8>, DeviceError>> {
        chunk
            .slots()
            .filter(|&slot| slot < geometry.num_slots)
            .map(|slot| device.read_vec(geometry.slot_offset(slot), geometry.slot_size))
            .collect()
    };
    if chunks.len() <= INLINE_CHUNKS_MAX {
        for chunk in chunks {
            let images = read_chunk(chunk).into_iter().collect::<Result<Vec<_>, _>>()?;
            check_chunk(&images, geometry, instance, chunk, version.last_sequence, options, report);
            progress(chunk.len_data);
        }
        return Ok(());
    }
    std::thread::scope(|scope| -> Result<(), CheckError> {
        let (sender, receiver) = std::sync::mpsc::sync_channel::<Vec<Result<Vec<u8>, DeviceError>>>(2);
        let reader_chunks = chunks.clone();
        scope.spawn(move || {
            for chunk in reader_chunks {
                if sender.send(read_chunk(chunk)).is_err() {
                    return;
                }
            }
        });
        for chunk in chunks {
            let images = receiver.recv().map_err(|_| CheckError::Unsupported("the slot reader stopped".into()))?;
            let images = images.into_iter().collect::<Result<Vec<_>, _>>()?;
            check_chunk(&images, geometry, instance, chunk, version.last_sequence, options, report);
            progress(chunk.len_data);
        }
        Ok(())
    })
}

/// Trees of at most this many chunks are read without a reader thread.
const INLINE_CHUNKS_MAX: usize = 16;

/// Checks one chunk: every sub-chunk's footer, index, filter and blocks, its key order and
/// range, and with `deep` its digest and filter.
fn check_chunk(
    images: &[Vec<u8>],
    geometry: &Geometry,
    instance: u32,
    chunk: &ChunkMeta,
    last_sequence: u64,
    options: CheckOptions,
    report: &mut Report,
) {
    let structure = format!("chunk {} of instance {instance}", chunk.chunk_id);
    report.summary.chunks += 1;
    let problems_before = report.problems.len();
    let mut previous: Option<(Vec<u8>, u64)> = None;
    let mut first_key: Option<Vec<u8>> = None;
    let mut entries = 0u64;
    let (mut smallest_seq, mut largest_seq) = (u64::MAX, 0u64);
    for (index, sub_chunk) in chunk.sub_chunks.iter().enumerate() {
        let slot = sub_chunk.slot;
        if slot >= geometry.num_slots {
            report.add(
                Code::SlotOutOfRange,
                structure.clone(),
                0,
                format!("slot {slot} is beyond the {} slots", geometry.num_slots),
            );
            return;
        }
        let Some(image) = images.get(index) else { return };
        let slot_offset = geometry.slot_offset(slot);
        let footer_offset = slot_offset + geometry.slot_size - FOOTER_LEN as u64;
        let footer_at = image.len() - FOOTER_LEN;
        let footer = match Footer::decode(&image[footer_at..], footer_offset, geometry.slot_size) {
            Ok(footer) => footer,
            Err(error) => {
                report.add(Code::FooterInvalid, structure.clone(), footer_offset, error.to_string());
                continue;
            }
        };
        let expected = [
            ("chunk_id", footer.chunk_id, chunk.chunk_id),
            ("sub_chunk_index", u64::from(footer.sub_chunk_index), index as u64),
            ("num_sub_chunks", u64::from(footer.num_sub_chunks), chunk.sub_chunks.len() as u64),
            ("instance", u64::from(footer.instance), u64::from(instance)),
        ];
        for (field, found, wanted) in expected {
            if found != wanted {
                report.add(
                    Code::FooterMismatch,
                    structure.clone(),
                    footer_offset,
                    format!("the footer of slot {slot} has {field} {found}, the version says {wanted}"),
                );
            }
        }
        if footer.volume_uuid != geometry.volume_uuid {
            report.add(
                Code::FooterMismatch,
                structure.clone(),
                footer_offset,
                format!("slot {slot} holds a chunk of another volume"),
            );
        }
        if footer.digest != sub_chunk.digest {
            report.add(
                Code::FooterMismatch,
                structure.clone(),
                footer_offset,
                format!("the footer digest of slot {slot} differs from the version's"),
            );
        }
        // Footer::decode checked that body, index and filter lie inside the slot.
        let body = &image[..footer.len_body as usize];
        let tail = &image[footer.ofs_index as usize..footer_at];
        report.summary.bytes_verified += body.len() as u64 + tail.len() as u64 + FOOTER_LEN as u64;
        let (index_bytes, filter_bytes) = tail.split_at(footer.len_index as usize);
        let index_entries = match decode_index(index_bytes, slot_offset + u64::from(footer.ofs_index), &footer) {
            Ok(index_entries) => index_entries,
            Err(error) => {
                report.add(
                    Code::IndexInvalid,
                    structure.clone(),
                    slot_offset + u64::from(footer.ofs_index),
                    error.to_string(),
                );
                continue;
            }
        };
        let filter = match Filter::decode(filter_bytes, slot_offset + u64::from(footer.ofs_filter), &footer) {
            Ok(filter) => Some(filter),
            Err(error) => {
                report.add(
                    Code::FilterInvalid,
                    structure.clone(),
                    slot_offset + u64::from(footer.ofs_filter),
                    error.to_string(),
                );
                None
            }
        };
        let mut sub_entries = 0u64;
        let mut blocks_unreadable = false;
        for entry in &index_entries {
            let block_offset = slot_offset + u64::from(entry.ofs_block);
            let range = entry.ofs_block as usize..(entry.ofs_block + entry.len_block) as usize;
            let Some(block) = body.get(range) else {
                report.add(Code::IndexInvalid, structure.clone(), block_offset, "a block lies beyond the body");
                continue;
            };
            report.summary.blocks += 1;
            let decoded = match decode_block(block, block_offset) {
                Ok(decoded) => decoded,
                Err(error @ FormatError::ChecksumMismatch { .. }) => {
                    report.add(Code::BlockChecksum, structure.clone(), block_offset, error.to_string());
                    blocks_unreadable = true;
                    continue;
                }
                Err(error @ FormatError::InvalidField { field: "key", .. }) => {
                    report.add(Code::KeysUnsorted, structure.clone(), block_offset, error.to_string());
                    blocks_unreadable = true;
                    continue;
                }
                Err(error) => {
                    report.add(Code::BlockChecksum, structure.clone(), block_offset, error.to_string());
                    blocks_unreadable = true;
                    continue;
                }
            };
            if let Some(last) = decoded.last() {
                if (last.key, lds_format::chunk::pack_seq_kind(last.sequence, last.kind))
                    != (entry.last_key.as_slice(), entry.last_seq_kind)
                {
                    report.add(
                        Code::IndexInvalid,
                        structure.clone(),
                        block_offset,
                        "the block's last entry is not the one the index names",
                    );
                }
            }
            for found in &decoded {
                if let Some((key, sequence)) = &previous {
                    if (key.as_slice(), std::cmp::Reverse(*sequence)) >= (found.key, std::cmp::Reverse(found.sequence))
                    {
                        report.add(
                            Code::KeysUnsorted,
                            structure.clone(),
                            block_offset,
                            format!(
                                "key {} follows {}",
                                lds_format::error::hex(found.key),
                                lds_format::error::hex(key)
                            ),
                        );
                    }
                }
                if first_key.is_none() {
                    first_key = Some(found.key.to_vec());
                }
                if options.deep {
                    if let Some(filter) = &filter {
                        if !filter.may_contain(found.key) {
                            report.add(
                                Code::FilterFalseNegative,
                                structure.clone(),
                                slot_offset + u64::from(footer.ofs_filter),
                                format!(
                                    "the filter of slot {slot} rejects key {}, which the chunk holds",
                                    lds_format::error::hex(found.key)
                                ),
                            );
                        }
                    }
                }
                smallest_seq = smallest_seq.min(found.sequence);
                largest_seq = largest_seq.max(found.sequence);
                previous = Some((found.key.to_vec(), found.sequence));
                sub_entries += 1;
            }
        }
        report.summary.entries += sub_entries;
        entries += sub_entries;
        if !blocks_unreadable && sub_entries != footer.num_entries {
            report.add(
                Code::FooterMismatch,
                structure.clone(),
                footer_offset,
                format!("slot {slot} holds {sub_entries} entries, its footer says {}", footer.num_entries),
            );
        }
        if options.deep {
            let mut hasher = blake3::Hasher::new();
            hasher.update(body);
            hasher.update(tail);
            hasher.update(&footer.encode_digest_covered());
            if *hasher.finalize().as_bytes() != footer.digest {
                report.add(
                    Code::DigestMismatch,
                    structure.clone(),
                    slot_offset,
                    format!("the blake3 digest of slot {slot} does not match its contents"),
                );
            }
        }
    }
    if report.problems.len() > problems_before {
        return;
    }
    let last_key = previous.map(|(key, _)| key);
    if first_key.as_deref() != Some(chunk.smallest_key.as_slice())
        || last_key.as_deref() != Some(chunk.largest_key.as_slice())
    {
        report.add(
            Code::KeyRangeMismatch,
            structure.clone(),
            geometry.slot_offset(chunk.chunk_id),
            format!(
                "holds keys {}..{}, the version says {}..{}",
                first_key.as_deref().map(lds_format::error::hex).unwrap_or_default(),
                last_key.as_deref().map(lds_format::error::hex).unwrap_or_default(),
                lds_format::error::hex(&chunk.smallest_key),
                lds_format::error::hex(&chunk.largest_key)
            ),
        );
    }
    if entries != chunk.num_entries || smallest_seq != chunk.smallest_seq || largest_seq != chunk.largest_seq {
        report.add(
            Code::FooterMismatch,
            structure.clone(),
            geometry.slot_offset(chunk.chunk_id),
            format!(
                "holds {entries} entries with sequences {smallest_seq}..{largest_seq}, the version says {} with {}..{}",
                chunk.num_entries, chunk.smallest_seq, chunk.largest_seq
            ),
        );
    }
    if largest_seq > last_sequence || largest_seq > SEQUENCE_MAX {
        report.add(
            Code::SequenceImplausible,
            structure,
            geometry.slot_offset(chunk.chunk_id),
            format!("holds sequence {largest_seq}, above the version's last sequence {last_sequence}"),
        );
    }
}

/// Threads reading free slots' footers: a queue of small reads is much faster than one at
/// a time on most devices.
const FOOTER_READERS: usize = 8;

/// Counts free slots holding chunks of this volume (one info line).
fn check_free_slots(
    device: &(impl ReadAt + Sync),
    geometry: &Geometry,
    map: &[bool],
    report: &mut Report,
) -> Result<(), CheckError> {
    let free: Vec<u64> = (0..geometry.num_slots).filter(|&slot| !map[slot as usize]).collect();
    let scan = |slots: &[u64]| -> Result<Vec<u64>, DeviceError> {
        let mut stale = Vec::new();
        for &slot in slots {
            let offset = geometry.slot_offset(slot) + geometry.slot_size - FOOTER_LEN as u64;
            let bytes = device.read_vec(offset, FOOTER_LEN as u64)?;
            if Footer::decode(&bytes, offset, geometry.slot_size)
                .is_ok_and(|footer| footer.volume_uuid == geometry.volume_uuid)
            {
                stale.push(slot);
            }
        }
        Ok(stale)
    };
    // Few slots are read inline: threads cost more than they save there.
    let found: Vec<Result<Vec<u64>, DeviceError>> = if free.len() < FOOTER_READERS * 32 {
        vec![scan(&free)]
    } else {
        let per_thread = free.len().div_ceil(FOOTER_READERS).max(1);
        std::thread::scope(|scope| {
            let workers: Vec<_> = free.chunks(per_thread).map(|slots| scope.spawn(move || scan(slots))).collect();
            workers.into_iter().map(|worker| worker.join().unwrap_or_else(|_| Ok(Vec::new()))).collect()
        })
    };
    let mut stale = Vec::new();
    for part in found {
        stale.extend(part?);
    }
    if let Some(&first) = stale.first() {
        let listed: Vec<String> = stale.iter().take(8).map(u64::to_string).collect();
        let more = if stale.len() > 8 { format!(" and {} more", stale.len() - 8) } else { String::new() };
        report.add(
            Code::StaleChunksInFreeSlots,
            "slot area",
            geometry.slot_offset(first),
            format!("{} free slots hold chunks no version references (slots {}{more}): freed, or written by a flush or compaction that never committed; reused on allocation", stale.len(), listed.join(", ")),
        );
    }
    Ok(())
}
