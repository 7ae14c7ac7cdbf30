//! The problem table (e2fsck's `problem_table[]`): every problem the checker reports, with
//! its stable number, severity, what it means and what repair does about it, in one place.
//! Numbers never change meaning; new problems get new numbers.

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

    /// `I`, `W` or `E`, as in the text output.
    pub fn letter(self) -> char {
        match self {
            Self::Info => 'I',
            Self::Warning => 'W',
            Self::Error => 'E',
        }
    }
}

/// What repair does about a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repair {
    /// Nothing: the problem is information, and recovery already handles what it describes.
    Nothing,
    /// A fix that loses no data (`lds repair -p` applies it).
    Preen(&'static str),
    /// A fix that may drop data, each drop reported (`lds repair -y`).
    Fix(&'static str),
    /// No in-place repair: `lds salvage` rebuilds a new volume from what is readable.
    Salvage(&'static str),
}

impl Repair {
    /// The action, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Nothing => "nothing to repair",
            Self::Preen(what) | Self::Fix(what) | Self::Salvage(what) => what,
        }
    }
}

/// One row of the problem table.
#[derive(Debug, Clone, Copy)]
pub struct ProblemKind {
    /// The code.
    pub code: Code,
    /// Its stable number.
    pub number: u16,
    /// Its severity.
    pub severity: Severity,
    /// What it means.
    pub summary: &'static str,
    /// What repair does.
    pub repair: Repair,
}

macro_rules! problems {
    ($($(#[$doc:meta])* $code:ident = $number:literal, $severity:ident, $summary:literal, $repair:expr;)*) => {
        /// The stable problem codes (the rows of [`PROBLEMS`]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[non_exhaustive]
        pub enum Code {
            $($(#[$doc])* $code,)*
        }

        /// Every problem the checker knows, in number order.
        pub const PROBLEMS: &[ProblemKind] = &[
            $(ProblemKind { code: Code::$code, number: $number, severity: Severity::$severity, summary: $summary, repair: $repair },)*
        ];
    };
}

use Repair::{Fix, Nothing, Preen, Salvage};

problems! {
    /// 101.
    PrimaryLabelInvalid = 101, Error, "the primary label is not valid (checksum, magic, geometry...); the backup is used",
        Preen("rewrite the primary label from the backup");
    /// 102.
    BackupLabelInvalid = 102, Warning, "the backup label is not valid",
        Preen("rewrite the backup label from the primary");
    /// 103.
    LabelsConflict = 103, Error, "both labels are valid but differ with the same generation",
        Fix("keep the label whose geometry the live base version replicates (the primary when both agree) and rewrite the other");
    /// 104.
    LabelsGenerationsDiffer = 104, Warning, "both labels are valid and differ: an interrupted label rewrite (resize)",
        Preen("finish the rewrite: copy the label with the higher generation over the other");
    /// 105.
    NoValidLabel = 105, Error, "no label can be used",
        Salvage("cannot repair in place: lds salvage finds the slot area from the chunk footers and the backup log from its headers, and writes a new volume");
    /// 106.
    VolumeBeyondDevice = 106, Error, "the volume is longer than the device",
        Salvage("cannot repair in place: lds salvage copies what the slots and the backup log still hold to a new volume");
    /// 107.
    UnreadableSector = 107, Error, "sectors of a structure cannot be read (I/O error); they are read as zeros, and the structure's own problems follow",
        Fix("rebuild the structure from what is readable, as for its other problems (a device remaps a bad sector when it is written)");
    /// 108.
    DeviceLabelInvalid = 108, Warning, "a label copy of a device of the volume other than the first is not valid or does not match its entry in the first device's table (SPEC.md §4.3)",
        Preen("rewrite the copy from the device's other copy, or from the first device's label");
    /// 201.
    VersionLogNoStart = 201, Error, "the version log has no valid object at offset 0",
        Fix("rebuild the version from the newest good base version and the objects chained after it, add the newer data that chunks in free slots and the backup log hold (SPEC.md §8.5), and switch to a new base version");
    /// 202.
    VersionLogBadStart = 202, Error, "offset 0 of the version log holds neither a base version nor a WOL",
        Fix("rebuild the version from the newest good base version (or, with none, from the chunks in the slots) and switch to a new base version");
    /// 203.
    VersionLogBadWrapLeft = 203, Error, "the WOL does not lead to the live base version",
        Fix("rebuild the version from the newest good base version and the objects chained after it, plus the newer data in free slots, and switch to a new base version");
    /// 204.
    VersionLogSnMismatch = 204, Error, "a live delta version or journal record carries another SN than its base version",
        Fix("rebuild the version from the newest good base version and the objects of its SN chained after it, plus the newer data in free slots, and switch to a new base version");
    /// 205.
    VersionLogReplay = 205, Error, "a live delta version contradicts the version",
        Fix("rebuild the version from the newest good base version, leaving out the parts of deltas that contradict it, plus the newer data in free slots, and switch to a new base version");
    /// 206.
    VersionLogTornHead = 206, Info, "the object at the head of the version log is incomplete or damaged (recovery ignores it, as a write a crash interrupted)",
        Nothing;
    /// 207.
    VersionLogChainBroken = 207, Error, "the live chain of the version log ends and valid objects with later lsns stand in the area: damage (every version log append is flushed before the next, SPEC.md §9.6), later versions are lost; the engine refuses to open",
        Fix("rebuild the version from the newest good base version (the later objects' where they build) and its chain, plus the data in free slots and the backup log newer than it, and switch to a new base version");
    /// 208.
    LevelOutOfRange = 208, Error, "a chunk is at a level beyond the tree's levels",
        Fix("rebuild the version without the chunk and rewrite its entries at the last level");
    /// 209.
    GeometryReplicaDiffers = 209, Warning, "the live base version's geometry replica differs from the label's",
        Preen("write a new base version that replicates the label's geometry");
    /// 210.
    VersionLogUnflushedAfterGap = 210, Info, "no longer reported (was: valid version log objects after a never-written position); such objects are damage, reported as 207",
        Nothing;
    /// 302.
    BackupLogSequence = 302, Error, "write batches do not have increasing sequence numbers",
        Fix("keep the batches before the first that does not increase; the rest are reported as dropped");
    /// 303.
    BackupLogChainBroken = 303, Error, "the live chain of the backup log ends at a damaged object of ours inside one sector (at most one identifying header field differs from the expected append), or a later batch's sync watermark records the missing object as durable (SPEC.md §7.1), and valid later objects follow: no crash leaves this (SPEC.md §9.6), synced writes are lost; the engine refuses to open",
        Fix("keep every batch before the damage (written to level-0 chunks) and restart the backup log; the later batches are reported as dropped");
    /// 304.
    BackupStartMismatch = 304, Error, "the object at the backup start point is not the one the version's start names and was written after the version: its lsn is larger than the one recorded, or smaller while it holds sequence numbers above the version's last sequence or its chain passes the recorded lsn elsewhere (SPEC.md §9.6); recovery would replay nothing; the engine refuses to open",
        Fix("replay the backup log from the object found at the start point, write its batches to level-0 chunks and restart the backup log");
    /// 305.
    BackupStartOutside = 305, Error, "the backup start point lies outside the backup log",
        Fix("restart the backup log with a new base version (its batches are reported as dropped)");
    /// 306.
    BackupLogTornHead = 306, Info, "the object at the head of the backup log is incomplete or damaged (as 206); the message counts any valid later objects: a torn unsynced write with later ones landed, which a crash leaves and damage can too",
        Nothing;
    /// 307.
    BackupLogUnflushedAfterGap = 307, Info, "valid backup log objects stand after a position the next append never reached (stale or empty bytes there): unflushed writes a crash reordered; recovery ignores them",
        Nothing;
    /// 308.
    BackupLogSnAbove = 308, Error, "an object of the backup log's live chain has an sn above the version log's (a WOL above its WOR's, or any object): no writer writes one (SPEC.md §9.6); recovery counts it as the sn before it and replays the batches after it; the engine refuses to open",
        Fix("write the batches recovery replays (those past the object included) to level-0 chunks and restart the backup log");
    /// 401.
    FooterInvalid = 401, Error, "a chunk footer is not valid",
        Fix("rewrite the chunk's readable blocks into a new chunk; entries of unreadable blocks are reported as dropped");
    /// 402.
    FooterMismatch = 402, Error, "a chunk footer disagrees with the chunk's metadata (id, instance, digest, entry count, sequence range)",
        Fix("rewrite the chunk's readable blocks into a new chunk whose metadata is what it holds");
    /// 403.
    IndexInvalid = 403, Error, "a block index is not valid or disagrees with its blocks",
        Fix("rewrite the chunk's readable entries (its blocks are self-checking) into new chunks at its level");
    /// 404.
    FilterInvalid = 404, Error, "a filter is not valid",
        Preen("rewrite the chunk's entries into new chunks at its level, with a new filter");
    /// 405.
    BlockChecksum = 405, Error, "a block's checksum does not match",
        Fix("rewrite the chunk's good blocks into a new chunk; the damaged block's key range is reported as dropped");
    /// 406.
    KeysUnsorted = 406, Error, "entries are not sorted within a chunk",
        Fix("rewrite the chunk's readable entries sorted, newest version first, into new chunks at its level");
    /// 407.
    KeyRangeMismatch = 407, Error, "a chunk's keys are not the range its metadata states",
        Fix("rewrite the chunk's entries into new chunks whose metadata is the range they hold");
    /// 408.
    DigestMismatch = 408, Error, "a chunk's blake3 digest does not match (`--deep`)",
        Fix("rewrite the chunk's blocks that verify into new chunks at its level; the others' key ranges are reported as dropped");
    /// 409.
    LevelOverlap = 409, Error, "two chunks of one level (1 or deeper) overlap",
        Fix("merge the overlapping chunks of the level into new disjoint chunks (newest version of each key first)");
    /// 410.
    SequenceImplausible = 410, Warning, "a chunk holds sequence numbers above the version's last sequence",
        Preen("raise the new base version's last sequence to cover every chunk");
    /// 411.
    FilterFalseNegative = 411, Error, "a filter rejects a key the chunk holds: reads would miss it (`--deep`)",
        Preen("rewrite the chunk's entries into new chunks at its level, with a new filter");
    /// 412.
    OddChunksInLevel = 412, Warning, "a level holds more than one odd chunk (SPEC.md §11)",
        Preen("clear the odd flag of all but one (a later compaction merges them)");
    /// 413.
    SketchInvalid = 413, Warning, "a chunk's key sketch (SPEC.md §8.7) fails its crc32c or is not valid: reads are unaffected, deferred level-0 merges (technique triad-disk) treat the chunk as one without a sketch",
        Preen("rewrite the chunk's entries into new chunks at its level (without a sketch)");
    /// 501.
    SlotReferencedTwice = 501, Error, "a slot is referenced twice",
        Fix("rebuild the version from the newest good base version whose chunks do not share a slot, plus the newer data in free slots");
    /// 502.
    SlotOutOfRange = 502, Error, "a slot beyond the slot area, or one no device of the volume holds, is referenced",
        Fix("rebuild the version from the newest good base version that builds, plus the newer data in free slots; a chunk beyond the slot area is dropped and its key range reported");
    /// 503.
    StaleChunksInFreeSlots = 503, Info, "free slots hold chunks of this volume: freed, or written by a flush or compaction that never committed. In LDS this is not a leak: the online map is rebuilt from the versions and such slots are reused (paper §3.2)",
        Nothing;
    /// 601.
    JournalInputsMissing = 601, Error, "an unfinished compaction names input chunks the version does not hold",
        Fix("roll the compaction back: its outputs become free slots, its inputs stay");
    /// 602.
    JournalOutputsConflict = 602, Error, "an unfinished compaction's outputs use slots the version uses",
        Fix("roll the compaction back: its outputs become free slots, its inputs stay");
    /// 603.
    JournalUnfinished = 603, Info, "an unfinished journaled compaction is recorded: reads of keys up to its resume key go to its outputs, others to its remaining inputs, and the engine resumes it at its next open for writing (or `lds compaction resume`)",
        Nothing;
    /// 604.
    JournalCleanedTooSoon = 604, Error, "an unfinished compaction lists as cleaned an input that is not one of its inputs or holds keys above its resume key: those keys are in no output",
        Fix("abort the compaction when no input was reused; else rebuild the lost range from the slots (salvage)");
    /// 605.
    JournalOutputsDisorder = 605, Error, "an unfinished compaction's outputs overlap each other, or hold keys above its resume key",
        Fix("abort the compaction: append a record that ends it, its outputs become free slots");
    /// 606.
    JournalLevelsShared = 606, Error, "two unfinished compactions of one instance share a level (the engine runs one at a time)",
        Fix("keep the newer compaction, abort the older");
    /// 701.
    ValueFooterInvalid = 701, Error, "a value chunk's footer is not valid, or disagrees with the version (volume, instance, id, length of values, digest; SPEC.md §8.6)",
        Fix("rebuild the tree: entries whose values cannot be read and checked are left out, each reported");
    /// 702.
    ValueDigestMismatch = 702, Error, "a value chunk's digest does not match its values (`--deep`); the values whose crc32c fails are reported as 705",
        Fix("rebuild the tree: entries whose values cannot be read and checked are left out, each reported");
    /// 703.
    ValuePointerInvalid = 703, Error, "a value pointer does not decode, names a value chunk the version does not hold, or reaches past its values",
        Fix("rebuild the tree: entries whose values cannot be read and checked are left out, each reported");
    /// 704.
    ValueRefsMismatch = 704, Error, "a chunk's value references (SPEC.md §6.4) differ from the bytes its pointers reach: the live bytes of value chunks are wrong",
        Fix("rebuild the tree: the chunks are rewritten with their references recomputed");
    /// 705.
    ValueChecksum = 705, Error, "a value read through its pointer does not match the pointer's crc32c (`--deep`)",
        Fix("rebuild the tree: entries whose values cannot be read and checked are left out, each reported");
    /// 706.
    ValuePendingMissing = 706, Error, "a batch of the backup log points to a value chunk the version does not list, and the slot its pointer gives does not hold it: the value, written before the batch and flushed, is lost",
        Fix("rebuild the tree: entries whose values cannot be read and checked are left out, each reported");
    /// 801.
    LogRefUnresolved = 801, Error, "a log reference (entry kind 3, SPEC.md §8.9) does not resolve: the object at its offset of the backup log is not valid, not a write batch, has another lsn, or its entry differs in kind, key, sequence number or value length",
        Fix("rewrite the chunk with the references that resolve as puts; the entries of the others are reported as dropped");
    /// 802.
    LogChunkInvalid = 802, Error, "a chunk breaks the rules of log chunks (SPEC.md §8.9): kind-3 entries without flag log_refs, the flag without a reference, a log chunk outside level 0, or log chunks on a volume without feature log_tables",
        Fix("rewrite the chunk as an ordinary chunk, its references resolved as puts (entries of references that do not resolve are reported as dropped); when recovery refused a delta version for it, rebuild the version as for 205");
    /// 803.
    LogStartMismatch = 803, Error, "a log chunk's recorded log start is not the lsn and offset of its oldest reference: a later start lets the writer overwrite a referenced batch, an earlier one holds the backup log for nothing",
        Fix("rewrite the chunk as an ordinary chunk, its references resolved as puts");
}

impl Code {
    /// The table row of this code.
    pub fn kind(self) -> &'static ProblemKind {
        // The macro makes the enum and the table from one list, in the same order.
        &PROBLEMS[self as usize]
    }

    /// The stable number.
    pub fn number(self) -> u16 {
        self.kind().number
    }

    /// The severity this code always has.
    pub fn severity(self) -> Severity {
        self.kind().severity
    }

    /// The code with a stable number, if any.
    pub fn from_number(number: u16) -> Option<Self> {
        PROBLEMS.iter().find(|kind| kind.number == number).map(|kind| kind.code)
    }
}

/// The problem table as Markdown, as docs/fsck-json.md holds it: number, severity letter,
/// meaning, and what repair does.
pub fn markdown_table() -> String {
    let mut table = String::from("| code | sev. | problem | repair |\n|---|---|---|---|\n");
    for kind in PROBLEMS {
        let repair = match kind.repair {
            Repair::Nothing => "-".to_string(),
            Repair::Preen(what) => format!("preen: {what}"),
            Repair::Fix(what) => format!("fix: {what}"),
            Repair::Salvage(what) => format!("salvage: {what}"),
        };
        table.push_str(&format!("| {} | {} | {} | {repair} |\n", kind.number, kind.severity.letter(), kind.summary));
    }
    table
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

impl Problem {
    /// The instance a problem concerns, when its structure is one instance's (such structures
    /// are named `... of instance N`).
    pub fn instance(&self) -> Option<u32> {
        let (_, number) = self.structure.rsplit_once(" of instance ")?;
        number.parse().ok()
    }

    /// One line: `E405 chunk 12 of instance 0 @ 123456: message`.
    pub fn line(&self) -> String {
        format!(
            "{}{} {} @ {}: {}",
            self.code.severity().letter(),
            self.code.number(),
            self.structure,
            self.offset,
            self.message
        )
    }
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
    /// Value chunks checked (SPEC.md §8.6).
    pub value_chunks: u64,
    /// Bytes of values they hold.
    pub value_bytes: u64,
    /// Values read through their pointers and checked against their crc32c (`--deep`).
    pub values_verified: u64,
    /// Key sketches of sub-chunks checked (SPEC.md §8.7).
    pub key_sketches: u64,
    /// Log chunks checked (metadata flag `log_refs`, SPEC.md §8.9).
    pub log_chunks: u64,
    /// Log references (entries of kind 3) read, each resolved against the backup log.
    pub log_references: u64,
    /// The bytes of its backup log each instance retains for its log chunks, from its
    /// version's retention start to its backup start along the ring (SPEC.md §8.9):
    /// `(instance, bytes)` in instance order, for every recovered instance of a volume with
    /// feature `log_tables` or whose version holds log chunks; empty otherwise.
    pub log_retained: Vec<(u32, u64)>,
}

impl Summary {
    /// The bytes of backup log all instances retain for their log chunks.
    pub fn log_retained_bytes(&self) -> u64 {
        self.log_retained.iter().map(|&(_, bytes)| bytes).sum()
    }
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

    /// The first problem that is not information, if any.
    pub fn first_inconsistency(&self) -> Option<&Problem> {
        self.problems.iter().find(|problem| problem.code.severity() != Severity::Info)
    }

    /// Appends what `other` found and counted (a chunk checked on another thread).
    pub(crate) fn absorb(&mut self, other: Report) {
        self.problems.extend(other.problems);
        let (into, from) = (&mut self.summary, other.summary);
        for (into, from) in [
            (&mut into.log_objects, from.log_objects),
            (&mut into.live_log_objects, from.live_log_objects),
            (&mut into.chunks, from.chunks),
            (&mut into.blocks, from.blocks),
            (&mut into.entries, from.entries),
            (&mut into.bytes_verified, from.bytes_verified),
            (&mut into.slots, from.slots),
            (&mut into.slots_in_use, from.slots_in_use),
            (&mut into.value_chunks, from.value_chunks),
            (&mut into.value_bytes, from.value_bytes),
            (&mut into.values_verified, from.values_verified),
            (&mut into.key_sketches, from.key_sketches),
            (&mut into.log_chunks, from.log_chunks),
            (&mut into.log_references, from.log_references),
        ] {
            *into += from;
        }
        into.log_retained.extend(from.log_retained);
    }

    pub(crate) fn add(&mut self, code: Code, structure: impl Into<String>, offset: u64, message: impl Into<String>) {
        self.problems.push(Problem { code, structure: structure.into(), offset, message: message.into() });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_unique_and_in_order() {
        for pair in PROBLEMS.windows(2) {
            assert!(pair[0].number < pair[1].number, "{} then {}", pair[0].number, pair[1].number);
        }
        for (index, kind) in PROBLEMS.iter().enumerate() {
            assert_eq!(kind.code as usize, index);
            assert_eq!(Code::from_number(kind.number), Some(kind.code));
            assert_eq!(kind.code.number(), kind.number);
        }
    }

    #[test]
    fn information_needs_no_repair_and_inconsistencies_have_one() {
        for kind in PROBLEMS {
            match (kind.severity, kind.repair) {
                (Severity::Info, Repair::Nothing) => {}
                (Severity::Info, repair) => panic!("{}: information with a repair {repair:?}", kind.number),
                (_, Repair::Nothing) => panic!("{}: an inconsistency with no repair action", kind.number),
                _ => {}
            }
        }
    }
}
