//! Recovery rules over the bytes of a log area (SPEC.md §9), with no I/O: the engine, fsck
//! and dump read an area into memory and call these functions.

use std::collections::BTreeMap;

use crate::batch::decode_entries;
use crate::codec::{align8, align_up};
use crate::error::FormatError;
use crate::log::{
    check_wrap_right, read_object, AreaContext, ObjectHeader, ObjectType, RawObject, WrapLeft, HEADER_LEN, OBJECT_MAGIC,
};
use crate::version::payload::{BaseVersion, CompactionJournal, DeltaVersion};
use crate::version::{ReplayError, Version};

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

/// `chain(area, ofs, expected_lsn)` of SPEC.md §9.1, collected.
pub fn chain(area: &[u8], context: &AreaContext, start: u64, expected_lsn: Option<u64>) -> Chain {
    let mut walk = ChainWalk::new(area, context, start, expected_lsn);
    let objects: Vec<ChainObject> = walk.by_ref().collect();
    Chain { objects, end: walk.into_end() }
}

/// `chain(area, ofs, expected_lsn)` of SPEC.md §9.1, one object at a time: what a reader
/// walks when it needs the objects in turn and not all at once (a version log may hold
/// hundreds of thousands). After the last object, [`ChainWalk::end`] says why the chain ended.
#[derive(Debug, Clone)]
pub struct ChainWalk<'a> {
    area: &'a [u8],
    context: AreaContext,
    /// Where the next candidate is.
    offset: u64,
    /// The lsn the first object must have, if any.
    expected_lsn: Option<u64>,
    /// The lsn and sn of the last object yielded.
    previous: Option<(u64, u64)>,
    /// Steps left: each advances by at least 64 bytes within one area, so the area bounds the
    /// walk; the explicit bound guards against a logic error turning into a hang.
    steps_left: u64,
    /// The largest `sn` an object may carry (a backup log's: the version log's SN, SPEC.md
    /// §9.6), and the `sn` an object above it counts as when it starts the walk.
    sn_ceiling: Option<(u64, u64)>,
    /// Why the chain ended, once it has.
    end: Option<ChainEnd>,
}

impl<'a> ChainWalk<'a> {
    /// The chain of `area` from `start`, its first object with `expected_lsn` if given.
    pub fn new(area: &'a [u8], context: &AreaContext, start: u64, expected_lsn: Option<u64>) -> Self {
        Self {
            area,
            context: *context,
            offset: start,
            expected_lsn,
            previous: None,
            steps_left: context.len_area / HEADER_LEN as u64 + 1,
            sn_ceiling: None,
            end: None,
        }
    }

    /// The walk of a backup log chain under SPEC.md §9.6's `sn` ceiling: an object whose `sn`
    /// is above `ceiling` (damage, `E_BLOG_SN_ABOVE`) continues the chain, and counts as the
    /// `sn` before it (`start_sn` when it is the first: for a WOL, its WOR's, §5.2), so that
    /// the objects after it are not cut off by their smaller `sn`.
    pub fn with_sn_ceiling(mut self, ceiling: u64, start_sn: u64) -> Self {
        self.sn_ceiling = Some((ceiling, start_sn));
        self
    }

    /// The `sn` the last object yielded counts as (its own, or under a ceiling the one before
    /// it): what the next object's `sn` is compared with.
    pub fn last_sn(&self) -> Option<u64> {
        self.previous.map(|(_, sn)| sn)
    }

    /// Why the chain ended; `None` while it has not.
    pub fn end(&self) -> Option<&ChainEnd> {
        self.end.as_ref()
    }

    /// Walks the rest of the chain and says why it ended.
    pub fn into_end(mut self) -> ChainEnd {
        // Bounded by `steps_left`, like every walk.
        while self.next().is_some() {}
        self.end.unwrap_or(ChainEnd::AreaEnd)
    }

    fn finish(&mut self, end: ChainEnd) -> Option<ChainObject> {
        self.end = Some(end);
        None
    }
}

impl Iterator for ChainWalk<'_> {
    type Item = ChainObject;

    fn next(&mut self) -> Option<ChainObject> {
        if self.end.is_some() {
            return None;
        }
        if self.steps_left == 0 || self.offset + HEADER_LEN as u64 > self.context.len_area {
            return self.finish(ChainEnd::AreaEnd);
        }
        self.steps_left -= 1;
        let (area, context, offset) = (self.area, &self.context, self.offset);
        let started = self.previous.is_some();
        let expected = match self.previous {
            Some((lsn, _)) => lsn.checked_add(1),
            None => self.expected_lsn,
        };
        // Nothing follows an object with the largest lsn (only a hostile image has one).
        let exhausted = started && expected.is_none();
        let previous_sn = self.previous.map(|(_, sn)| sn);
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
                        if (started || self.expected_lsn.is_some())
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
                        return self.finish(ChainEnd::Stale { offset, lsn: stale.header.lsn, expected_lsn });
                    }
                    (None, Err(error)) => return self.finish(ChainEnd::Invalid { offset, error }),
                }
            }
        };
        self.offset = object.header.next_offset();
        let counted_sn = match self.sn_ceiling {
            Some((ceiling, start_sn)) if object.header.sn > ceiling => previous_sn.unwrap_or(start_sn),
            _ => object.header.sn,
        };
        self.previous = Some((object.header.lsn, counted_sn));
        if object.object_type == ObjectType::WrapRight {
            self.end = Some(ChainEnd::WrapRight);
        }
        Some(object)
    }
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

/// The recovered state of one version log. It holds the live version, not the objects: the
/// sequence S of SPEC.md §9.2 may hold hundreds of thousands of them, and a reader that needs
/// them walks S again over the same area ([`VersionLogState::sequence`]).
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
    /// Objects in the sequence S of SPEC.md §9.2.
    pub sequence_len: usize,
    /// Index in S of the live base version: the objects before it are superseded, the
    /// `sequence_len - base_index` from it on are live.
    pub base_index: usize,
    /// Where S starts when it is `R ++ L` (§9.2 step 3): the offset and lsn of the right
    /// portion's first object. `None` when S is the chain at offset 0.
    pub right_start: Option<(u64, u64)>,
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

impl VersionLogState {
    /// Walks the sequence S of SPEC.md §9.2 again, one object at a time, in log order: the
    /// same objects recovery followed when `area` and `context` are the ones it read. At most
    /// `sequence_len` objects.
    pub fn sequence<'a>(&self, area: &'a [u8], context: &AreaContext) -> impl Iterator<Item = ChainObject> + 'a {
        let right = self.right_start.map(|(offset, lsn)| ChainWalk::new(area, context, offset, Some(lsn)));
        let left = ChainWalk::new(area, context, 0, None);
        right.into_iter().flatten().chain(left).take(self.sequence_len)
    }

    /// The live objects, from the live base version to the head, walked again as
    /// [`VersionLogState::sequence`] does.
    pub fn live_objects<'a>(&self, area: &'a [u8], context: &AreaContext) -> impl Iterator<Item = ChainObject> + 'a {
        self.sequence(area, context).skip(self.base_index)
    }

    /// Objects from the live base version to the head.
    pub fn live_count(&self) -> usize {
        self.sequence_len - self.base_index
    }
}

fn head_after(last: &ObjectHeader, object_type: ObjectType, context: &AreaContext) -> LogHead {
    let after_wrap_right = object_type == ObjectType::WrapRight;
    LogHead {
        offset: if after_wrap_right { 0 } else { align8(last.next_offset()).min(context.len_area) },
        // The writer refuses to append at the largest lsn (`AppendError::LsnExhausted`).
        next_lsn: last.lsn.saturating_add(1),
        after_wrap_right,
        sn: last.sn,
    }
}

/// The replay of SPEC.md §9.2 steps 5 and 6 over S, one object at a time: every base version
/// starts the version again (the last one is the live one), and what follows it is applied.
/// A failure after a base version stands only if no later base version supersedes it, so it is
/// kept until then. Holds one version, never the objects.
#[derive(Default)]
struct Replay {
    /// Objects seen.
    count: usize,
    /// The last base version seen, with its index in S.
    base: Option<(ChainObject, usize)>,
    /// The version built from it with what followed, or the first failure doing so.
    version: Option<Result<Version, VersionLogError>>,
    unfinished_compactions: BTreeMap<u64, CompactionJournal>,
    compaction_id_max: u64,
    /// The last object's header and type (the head follows it).
    last: Option<(ObjectHeader, ObjectType)>,
}

impl Replay {
    fn feed(&mut self, object: ChainObject) {
        let index = self.count;
        self.count += 1;
        self.last = Some((object.header, object.object_type));
        if let Payload::Base(base) = &object.payload {
            let version =
                Version::from_base(base).map_err(|error| VersionLogError::Replay { offset: object.offset, error });
            self.version = Some(version);
            self.unfinished_compactions.clear();
            self.compaction_id_max = 0;
            self.base = Some((object, index));
            return;
        }
        let (Some((base_object, _)), Some(Ok(version))) = (&self.base, &mut self.version) else {
            // Before the first base version (superseded), or after a failure: nothing to apply.
            return;
        };
        let sn = base_object.header.sn;
        let failure = match &object.payload {
            Payload::Delta(_) | Payload::Journal(_) if object.header.sn != sn => {
                Some(VersionLogError::SnMismatch { offset: object.offset, found: object.header.sn, expected: sn })
            }
            Payload::Delta(delta) => match version.apply(delta) {
                Err(error) => Some(VersionLogError::Replay { offset: object.offset, error }),
                Ok(()) => {
                    if delta.compaction_id != 0 {
                        self.unfinished_compactions.remove(&delta.compaction_id);
                        self.compaction_id_max = self.compaction_id_max.max(delta.compaction_id);
                    }
                    None
                }
            },
            Payload::Journal(journal) => {
                self.compaction_id_max = self.compaction_id_max.max(journal.compaction_id);
                self.unfinished_compactions.insert(journal.compaction_id, journal.clone());
                None
            }
            _ => None,
        };
        if let Some(failure) = failure {
            self.version = Some(Err(failure));
        }
    }

    fn has_base(&self) -> bool {
        self.base.is_some()
    }
}

/// Recovers one instance's version log (SPEC.md §9.2). S is walked object by object and
/// replayed as it goes: the left chain once, and when the live base version is in the right
/// portion, the right chain and then the left chain again.
pub fn recover_version_log(area: &[u8], context: &AreaContext) -> Result<VersionLogState, VersionLogError> {
    let mut left = ChainWalk::new(area, context, 0, None);
    let Some(first) = left.next() else {
        return Err(VersionLogError::NoStart { error: left.into_end() });
    };
    let (first_header, first_type) = (first.header, first.object_type);
    let wrap = match &first.payload {
        Payload::Base(_) => None,
        Payload::WrapLeft(wrap) => Some(*wrap),
        _ => return Err(VersionLogError::BadStart { object_type: first.object_type }),
    };
    let mut replay = Replay::default();
    replay.feed(first);
    for object in left.by_ref() {
        replay.feed(object);
    }
    let end = left.into_end();
    let mut right_start = None;
    if let (Some(wrap), false) = (wrap, replay.has_base()) {
        // L[0] is a WOL and L holds no base version: S = R ++ L.
        let mut right = ChainWalk::new(area, context, wrap.ofs_first_live, Some(wrap.lsn_first_live));
        replay = Replay::default();
        for object in right.by_ref() {
            replay.feed(object);
        }
        let right_end = right.into_end();
        let bad = |reason: String| Err(VersionLogError::BadWrapLeft { reason });
        if right_end != ChainEnd::WrapRight {
            return bad(format!(
                "the right portion at offset {} does not end with a WOR ({})",
                wrap.ofs_first_live,
                describe_end(&right_end)
            ));
        }
        let wor_lsn = replay.last.map_or(0, |(wor, _)| wor.lsn);
        if wor_lsn.checked_add(1) != Some(first_header.lsn) {
            return bad(format!("the right portion ends with lsn {wor_lsn}, the WOL has lsn {}", first_header.lsn));
        }
        if !replay.has_base() {
            return bad("neither portion holds a base version".into());
        }
        // The left chain again, after the right portion: the same objects as before.
        for object in ChainWalk::new(area, context, 0, None) {
            replay.feed(object);
        }
        right_start = Some((wrap.ofs_first_live, wrap.lsn_first_live));
    }
    let Replay { count, base, version, unfinished_compactions, compaction_id_max, last } = replay;
    let (Some((base_object, base_index)), Some(version)) = (base, version) else {
        // Unreachable: S starts with a base version, or holds one by the checks above.
        return Err(VersionLogError::BadStart { object_type: first_type });
    };
    let version = version?;
    let Payload::Base(base) = base_object.payload else {
        return Err(VersionLogError::BadStart { object_type: base_object.object_type });
    };
    let (last, last_type) = last.unwrap_or((base_object.header, base_object.object_type));
    let head = head_after(&last, last_type, context);
    let base_offset = base_object.offset;
    let live_len = if head.offset >= base_offset && !(head.after_wrap_right && base_offset > 0) {
        head.offset - base_offset
    } else {
        context.len_area - base_offset + head.offset
    };
    Ok(VersionLogState {
        base: *base,
        base_offset,
        base_lsn: base_object.header.lsn,
        sn: base_object.header.sn,
        version,
        sequence_len: count,
        base_index,
        right_start,
        head,
        end,
        unfinished_compactions,
        compaction_id_max,
        live_len,
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
    /// The first object of the live chain whose `sn` is above the version log's: damage
    /// (SPEC.md §9.6, `E_BLOG_SN_ABOVE`); the chain went on past it.
    pub sn_above: Option<SnAbove>,
}

/// A backup log object whose `sn` is above the version log's (SPEC.md §9.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnAbove {
    /// Offset in the area.
    pub offset: u64,
    /// Its lsn.
    pub lsn: u64,
    /// Its type.
    pub object_type: ObjectType,
    /// Its `sn`.
    pub sn: u64,
    /// The version log's SN, the largest a backup log object may carry.
    pub ceiling: u64,
}

/// Recovers one instance's backup log (SPEC.md §9.3). `current_sn` is the version log's SN:
/// the head's when nothing is found, and the largest `sn` a live object may carry (§9.6).
pub fn recover_backup_log(
    area: &[u8],
    context: &AreaContext,
    ofs_backup_start: u64,
    lsn_backup_start: u64,
    last_sequence: u64,
    current_sn: u64,
) -> Result<BackupLogState, BackupLogError> {
    recover_backup_log_checked(
        area,
        context,
        (ofs_backup_start, lsn_backup_start),
        last_sequence,
        (current_sn, Some(current_sn)),
        true,
    )
}

/// As [`recover_backup_log`], but a batch whose sequence numbers do not increase ends the
/// chain (with the objects before it) instead of failing: what repair keeps of such a log.
/// No `sn` ceiling applies (`current_sn` is only the head's when nothing is found).
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
        (current_sn, None),
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
            sn_above: None,
        },
    }
}

fn recover_backup_log_checked(
    area: &[u8],
    context: &AreaContext,
    (ofs_backup_start, lsn_backup_start): (u64, u64),
    last_sequence: u64,
    (current_sn, sn_ceiling): (u64, Option<u64>),
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
    // The `sn` the last object counts as (under the ceiling, an object above it counts as the
    // one before it, SPEC.md §9.6).
    let mut last_sn: Option<u64> = None;
    // Each segment either ends the walk or ends in a WOR; the byte budget bounds the loop.
    for segment_number in 0.. {
        let mut walk = ChainWalk::new(area, context, start, Some(expected));
        if let Some(ceiling) = sn_ceiling {
            // A WOL above the ceiling counts as its WOR's `sn` (SPEC.md §5.2).
            walk = walk.with_sn_ceiling(ceiling, last_sn.unwrap_or(0));
        }
        let segment_objects: Vec<ChainObject> = walk.by_ref().collect();
        let segment_sn = walk.last_sn();
        let segment = Chain { objects: segment_objects, end: walk.into_end() };
        let segment_is_continuation = segment_number > 0;
        // SPEC.md §9.3 step 2: the WOL continues the WOR's chain only with an SN not
        // smaller than the WOR's (§9.1), as within a chain: a WOL of an earlier session that
        // a crash cut off does not.
        if let (true, Some(first), Some(wrap_sn)) = (segment_is_continuation, segment.objects.first(), last_sn) {
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
        last_sn = segment_sn.or(last_sn);
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
        return Ok(BackupLogState {
            start_found: false,
            objects,
            batches: Vec::new(),
            head: empty_head,
            end,
            sn_above: None,
        });
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
    let sn_above = sn_ceiling.and_then(|ceiling| {
        objects.iter().find(|object| object.header.sn > ceiling).map(|object| SnAbove {
            offset: object.offset,
            lsn: object.header.lsn,
            object_type: object.object_type,
            sn: object.header.sn,
            ceiling,
        })
    });
    let head = objects.last().map_or(empty_head, |last| {
        let mut head = head_after(&last.header, last.object_type, context);
        // The next append carries an `sn` no live object may exceed (SPEC.md §9.6).
        if let Some(ceiling) = sn_ceiling {
            head.sn = head.sn.min(ceiling);
        }
        head
    });
    Ok(BackupLogState { start_found: true, objects, batches, head, end, sn_above })
}

/// The physical walk of SPEC.md §15 from `start`, collected: each position whose bytes start
/// with the object magic and whose claimed length fits the area, without checking checksums.
pub fn physical_walk(area: &[u8], start: u64, sector_size: u64) -> Vec<(u64, ObjectHeader)> {
    PhysicalWalk::new(area, start, sector_size).collect()
}

/// The physical walk of SPEC.md §15 from `start`, one object at a time (offset in the area and
/// header as stored). Each step advances by at least 64 bytes, so the area bounds the walk.
#[derive(Debug, Clone)]
pub struct PhysicalWalk<'a> {
    area: &'a [u8],
    position: u64,
    sector_size: u64,
    done: bool,
}

impl<'a> PhysicalWalk<'a> {
    /// The walk of `area` from `start`.
    pub fn new(area: &'a [u8], start: u64, sector_size: u64) -> Self {
        Self { area, position: start, sector_size, done: false }
    }
}

impl Iterator for PhysicalWalk<'_> {
    type Item = (u64, ObjectHeader);

    fn next(&mut self) -> Option<(u64, ObjectHeader)> {
        let area = self.area;
        let len_area = area.len() as u64;
        if self.done || self.position + HEADER_LEN as u64 > len_area {
            self.done = true;
            return None;
        }
        let mut position = self.position;
        let mut at = position as usize;
        if area[at..at + 4] != OBJECT_MAGIC {
            // SPEC.md §15: a WOR may stand at the next sector boundary.
            let next_sector = align_up(position, self.sector_size);
            if next_sector == position || next_sector + HEADER_LEN as u64 > len_area {
                self.done = true;
                return None;
            }
            position = next_sector;
            at = position as usize;
            if area[at..at + 4] != OBJECT_MAGIC {
                self.done = true;
                return None;
            }
        }
        let Ok(header) = ObjectHeader::parse_raw(&area[at..at + HEADER_LEN], position) else {
            self.done = true;
            return None;
        };
        let end = position + HEADER_LEN as u64 + u64::from(header.len_payload);
        if end > len_area {
            self.done = true;
            return None;
        }
        self.position = align8(end);
        Some((position, header))
    }
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
