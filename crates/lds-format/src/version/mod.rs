//! The version (SPEC.md §6): `meta` holds what a version records of each chunk, `payload`
//! the version log's payloads, and this module the in-memory version they build, kept
//! current by applying delta versions with every check of §6.2.

use std::collections::BTreeMap;

use crate::geometry::Geometry;
use crate::log::{ring_distance, LogPosition};
use crate::value::{ValueChunkMeta, ValuePointer};
use crate::version::meta::ChunkMeta;
use crate::version::payload::{BaseVersion, CompactPointer, DeletedChunk, DeltaVersion, ValueDelta, ValueSection};

pub mod meta;
pub mod payload;

/// The owner `Version::slot_owner` records for a slot holding value chunk `id`: the id with
/// this bit set (chunk ids are slot numbers, below 2^63).
pub const VALUE_CHUNK_OWNER: u64 = 1 << 63;

/// Why a delta version cannot be applied (SPEC.md §6.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayError {
    /// A deleted chunk is not in the version at that level.
    DeletedMissing {
        /// The chunk.
        chunk_id: u64,
        /// The level named.
        level: u8,
    },
    /// An added chunk id is already present.
    AddedTwice {
        /// The chunk.
        chunk_id: u64,
    },
    /// A slot of an added chunk is already used.
    SlotInUse {
        /// The slot.
        slot: u64,
        /// The chunk already using it.
        owner: u64,
    },
    /// A chunk's level is beyond `num_levels`.
    LevelOutOfRange {
        /// The chunk.
        chunk_id: u64,
        /// Its level.
        level: u8,
    },
    /// A slot is beyond the geometry.
    SlotOutOfRange {
        /// The chunk.
        chunk_id: u64,
        /// The slot.
        slot: u64,
    },
    /// A deleted value chunk is not in the version, or is deleted twice.
    ValueChunkMissing {
        /// The value chunk.
        value_chunk_id: u64,
    },
    /// An added value chunk id is already present, or not below `next_value_chunk_id`.
    ValueChunkTwice {
        /// The value chunk.
        value_chunk_id: u64,
    },
    /// A value chunk's slot is beyond the geometry.
    ValueSlotOutOfRange {
        /// The value chunk.
        value_chunk_id: u64,
        /// The slot.
        slot: u64,
    },
    /// A chunk refers to a value chunk the version does not have.
    DanglingValueRef {
        /// The chunk.
        chunk_id: u64,
        /// The value chunk it names.
        value_chunk_id: u64,
    },
    /// A deleted value chunk is still referred to by a chunk that stays.
    ValueChunkReferenced {
        /// The value chunk.
        value_chunk_id: u64,
    },
    /// A log chunk (SPEC.md §8.9) at a level other than 0.
    LogChunkLevel {
        /// The chunk.
        chunk_id: u64,
        /// Its level.
        level: u8,
    },
    /// `next_value_chunk_id` went down.
    ValueIdDecreased {
        /// The value before.
        before: u64,
        /// The value after.
        after: u64,
    },
}

/// How an owner in `Version::slot_owner` reads in messages.
fn owner_name(owner: u64) -> String {
    if owner & VALUE_CHUNK_OWNER != 0 {
        format!("value chunk {}", owner & !VALUE_CHUNK_OWNER)
    } else {
        format!("chunk {owner}")
    }
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::DeletedMissing { chunk_id, level } => {
                write!(f, "deletes chunk {chunk_id} from level {level}, where it is not")
            }
            Self::AddedTwice { chunk_id } => {
                write!(f, "adds chunk {chunk_id}, which is already present")
            }
            Self::SlotInUse { slot, owner } => {
                write!(f, "uses slot {slot}, which {} already uses", owner_name(*owner))
            }
            Self::LevelOutOfRange { chunk_id, level } => {
                write!(f, "puts chunk {chunk_id} at level {level}, beyond num_levels")
            }
            Self::SlotOutOfRange { chunk_id, slot } => {
                write!(f, "chunk {chunk_id} uses slot {slot}, beyond num_slots")
            }
            Self::ValueChunkMissing { value_chunk_id } => {
                write!(f, "deletes value chunk {value_chunk_id}, which is not in the version (or twice)")
            }
            Self::ValueChunkTwice { value_chunk_id } => {
                write!(f, "adds value chunk {value_chunk_id}, which is present or not below next_value_chunk_id")
            }
            Self::ValueSlotOutOfRange { value_chunk_id, slot } => {
                write!(f, "value chunk {value_chunk_id} uses slot {slot}, beyond num_slots")
            }
            Self::DanglingValueRef { chunk_id, value_chunk_id } => {
                write!(f, "chunk {chunk_id} refers to value chunk {value_chunk_id}, which the version does not have")
            }
            Self::ValueChunkReferenced { value_chunk_id } => {
                write!(f, "deletes value chunk {value_chunk_id}, which a remaining chunk still refers to")
            }
            Self::LogChunkLevel { chunk_id, level } => {
                write!(f, "puts log chunk {chunk_id} at level {level}: log chunks stay in level 0")
            }
            Self::ValueIdDecreased { before, after } => {
                write!(f, "next_value_chunk_id goes from {before} down to {after}")
            }
        }
    }
}

/// The in-memory version: what a base version describes, kept current by delta versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// Levels of the tree.
    pub num_levels: u32,
    /// Largest sequence number in the chunks.
    pub last_sequence: u64,
    /// Label generation the base was written under.
    pub label_generation: u64,
    /// Backup start point.
    pub ofs_backup_start: u64,
    /// LSN at the backup start point.
    pub lsn_backup_start: u64,
    /// Round-robin pointers, by level.
    pub compact_pointers: BTreeMap<u8, Vec<u8>>,
    /// Chunks by id.
    pub chunks: BTreeMap<u64, ChunkMeta>,
    /// Which chunk uses each slot.
    pub slot_owner: BTreeMap<u64, u64>,
    /// Number of slots in the geometry (for range checks).
    pub num_slots: u64,
    /// Value chunks by id (SPEC.md §8.6); `slot_owner` lists their slots with owner
    /// `VALUE_CHUNK_OWNER | id`.
    pub value_chunks: BTreeMap<u64, ValueChunkMeta>,
    /// Live bytes of each value chunk: the sum of the chunks' value references (a value chunk
    /// no chunk refers to is absent).
    pub value_live: BTreeMap<u64, u64>,
    /// Above every value chunk id the instance has used.
    pub next_value_chunk_id: u64,
    /// The version has a value section (feature `value_chunks`): its base versions keep one.
    pub has_values: bool,
}

impl Version {
    /// Builds the version a base version describes, checking it as a DV would be checked.
    pub fn from_base(base: &BaseVersion) -> Result<Self, ReplayError> {
        let mut version = Self {
            num_levels: base.num_levels,
            last_sequence: base.last_sequence,
            label_generation: base.label_generation,
            ofs_backup_start: base.ofs_backup_start,
            lsn_backup_start: base.lsn_backup_start,
            compact_pointers: base
                .compact_pointers
                .iter()
                .map(|pointer| (pointer.level, pointer.key.clone()))
                .collect(),
            chunks: BTreeMap::new(),
            slot_owner: BTreeMap::new(),
            num_slots: base.geometry.num_slots,
            value_chunks: BTreeMap::new(),
            value_live: BTreeMap::new(),
            next_value_chunk_id: base.values.as_ref().map_or(1, |values| values.next_value_chunk_id.max(1)),
            has_values: base.values.is_some(),
        };
        for value_chunk in base.values.iter().flat_map(|values| &values.chunks) {
            version.add_value_chunk(*value_chunk)?;
        }
        for chunk in &base.chunks {
            version.add(chunk.clone())?;
        }
        for chunk in &base.chunks {
            version.check_refs(chunk)?;
        }
        Ok(version)
    }

    fn add_value_chunk(&mut self, value_chunk: ValueChunkMeta) -> Result<(), ReplayError> {
        let value_chunk_id = value_chunk.value_chunk_id;
        if self.value_chunks.contains_key(&value_chunk_id) || value_chunk_id >= self.next_value_chunk_id {
            return Err(ReplayError::ValueChunkTwice { value_chunk_id });
        }
        if value_chunk.slot >= self.num_slots {
            return Err(ReplayError::ValueSlotOutOfRange { value_chunk_id, slot: value_chunk.slot });
        }
        if let Some(&owner) = self.slot_owner.get(&value_chunk.slot) {
            return Err(ReplayError::SlotInUse { slot: value_chunk.slot, owner });
        }
        self.slot_owner.insert(value_chunk.slot, VALUE_CHUNK_OWNER | value_chunk_id);
        self.value_chunks.insert(value_chunk_id, value_chunk);
        Ok(())
    }

    /// Every value chunk `chunk` refers to is in the version.
    fn check_refs(&self, chunk: &ChunkMeta) -> Result<(), ReplayError> {
        match chunk.value_refs.iter().find(|(id, _)| !self.value_chunks.contains_key(id)) {
            Some(&(value_chunk_id, _)) => {
                Err(ReplayError::DanglingValueRef { chunk_id: chunk.chunk_id, value_chunk_id })
            }
            None => Ok(()),
        }
    }

    /// Adds (`plus`) or removes a chunk's value references from the live bytes.
    fn count_refs(&mut self, chunk: &ChunkMeta, plus: bool) {
        for &(id, bytes) in &chunk.value_refs {
            let live = self.value_live.entry(id).or_insert(0);
            *live = if plus { *live + bytes } else { live.saturating_sub(bytes) };
            if *live == 0 {
                self.value_live.remove(&id);
            }
        }
    }

    /// The backup start point (SPEC.md §6.1): where recovery starts to replay the backup log.
    pub fn backup_start(&self) -> LogPosition {
        LogPosition { offset: self.ofs_backup_start, lsn: self.lsn_backup_start }
    }

    /// Bytes of a backup log area of `len_area` bytes that the version retains for its log
    /// chunks (SPEC.md §8.9): from its retention start to its backup start along the ring
    /// ([`ring_distance`]); 0 without log chunks.
    pub fn retained_bytes(&self, len_area: u64) -> u64 {
        ring_distance(self.retention_start(), self.backup_start(), len_area)
    }

    /// The retention start (SPEC.md §8.9): the oldest log start of the version's log chunks,
    /// or its backup start when it has none. A writer never overwrites a backup log object
    /// from here on.
    pub fn retention_start(&self) -> LogPosition {
        let backup_start = self.backup_start();
        self.chunks
            .values()
            .filter_map(|chunk| chunk.log_start)
            .min()
            .map_or(backup_start, |start| start.min(backup_start))
    }

    /// The value chunks `pointers` name that this version does not list, by id, each at the
    /// slot of the first extent naming it (SPEC.md §8.6, §9.4): value chunks written directly,
    /// whose pointers only batches replayed from the backup log hold yet. Their footers must
    /// name them; a later extent naming another slot for one is damage the footer shows.
    pub fn unlisted_value_chunks<'a>(
        &self,
        pointers: impl IntoIterator<Item = &'a ValuePointer>,
    ) -> BTreeMap<u64, u64> {
        let mut unlisted = BTreeMap::new();
        let extents = pointers.into_iter().flat_map(|pointer| pointer.extents.iter());
        for extent in extents.filter(|extent| !self.value_chunks.contains_key(&extent.value_chunk_id)) {
            unlisted.entry(extent.value_chunk_id).or_insert(extent.slot);
        }
        unlisted
    }

    /// The live bytes of value chunk `id` (SPEC.md §8.6).
    pub fn live_bytes(&self, id: u64) -> u64 {
        self.value_live.get(&id).copied().unwrap_or(0)
    }

    /// The value chunks a change deleting `deleted` and adding `added` leaves without live
    /// bytes (which its delta version must delete, SPEC.md §6.2), in id order; value chunks
    /// no chunk refers to already are among them.
    pub fn orphaned_by(&self, deleted: &[DeletedChunk], added: &[ChunkMeta]) -> Vec<u64> {
        let mut live = self.value_live.clone();
        for chunk in deleted.iter().filter_map(|deleted| self.chunks.get(&deleted.chunk_id)) {
            for (id, bytes) in &chunk.value_refs {
                if let Some(left) = live.get_mut(id) {
                    *left = left.saturating_sub(*bytes);
                }
            }
        }
        for chunk in added {
            for (id, bytes) in &chunk.value_refs {
                *live.entry(*id).or_insert(0) += bytes;
            }
        }
        self.value_chunks.keys().filter(|id| live.get(id).is_none_or(|bytes| *bytes == 0)).copied().collect()
    }

    fn add(&mut self, chunk: ChunkMeta) -> Result<(), ReplayError> {
        if u32::from(chunk.level) >= self.num_levels {
            return Err(ReplayError::LevelOutOfRange { chunk_id: chunk.chunk_id, level: chunk.level });
        }
        if chunk.is_log_chunk() && chunk.level != 0 {
            return Err(ReplayError::LogChunkLevel { chunk_id: chunk.chunk_id, level: chunk.level });
        }
        if self.chunks.contains_key(&chunk.chunk_id) {
            return Err(ReplayError::AddedTwice { chunk_id: chunk.chunk_id });
        }
        for slot in chunk.slots() {
            if slot >= self.num_slots {
                return Err(ReplayError::SlotOutOfRange { chunk_id: chunk.chunk_id, slot });
            }
            if let Some(&owner) = self.slot_owner.get(&slot) {
                return Err(ReplayError::SlotInUse { slot, owner });
            }
        }
        for slot in chunk.slots() {
            self.slot_owner.insert(slot, chunk.chunk_id);
        }
        self.count_refs(&chunk, true);
        self.chunks.insert(chunk.chunk_id, chunk);
        Ok(())
    }

    /// Applies a delta version; on error the version is unchanged. The delta is checked
    /// first and then applied in place, so that replaying a log costs time in the size of
    /// each delta, not of the tree.
    pub fn apply(&mut self, delta: &DeltaVersion) -> Result<(), ReplayError> {
        self.check_delta(delta)?;
        let next = self;
        for deleted in &delta.deleted {
            if let Some(chunk) = next.chunks.remove(&deleted.chunk_id) {
                for slot in chunk.slots() {
                    next.slot_owner.remove(&slot);
                }
                next.count_refs(&chunk, false);
            }
        }
        if let Some(values) = &delta.values {
            for id in &values.deleted {
                if let Some(value_chunk) = next.value_chunks.remove(id) {
                    next.slot_owner.remove(&value_chunk.slot);
                }
            }
            for value_chunk in &values.added {
                next.slot_owner.insert(value_chunk.slot, VALUE_CHUNK_OWNER | value_chunk.value_chunk_id);
                next.value_chunks.insert(value_chunk.value_chunk_id, *value_chunk);
            }
            next.next_value_chunk_id = values.next_value_chunk_id;
            next.has_values = true;
        }
        for added in &delta.added {
            for slot in added.slots() {
                next.slot_owner.insert(slot, added.chunk_id);
            }
            next.count_refs(added, true);
            next.chunks.insert(added.chunk_id, added.clone());
        }
        for pointer in &delta.compact_pointers {
            next.compact_pointers.insert(pointer.level, pointer.key.clone());
        }
        next.last_sequence = delta.last_sequence;
        next.ofs_backup_start = delta.ofs_backup_start;
        next.lsn_backup_start = delta.lsn_backup_start;
        Ok(())
    }

    /// The errors `apply` would meet, in the order it would meet them: every deleted chunk
    /// exists at its level (once), then each added chunk in turn is in range and takes no
    /// chunk id or slot that stays in use.
    fn check_delta(&self, delta: &DeltaVersion) -> Result<(), ReplayError> {
        use std::collections::{HashMap, HashSet};
        // Deltas are small (a flush adds one chunk; a compaction touches a few dozen): linear
        // scans over the delta beat building sets. A large delta (a hostile image's) gets
        // sets, so that checking it stays linear in its size.
        const SCAN_MAX: usize = 32;
        let large = delta.deleted.len() + delta.added.len() > SCAN_MAX;
        let deleted_set: HashSet<u64> =
            if large { delta.deleted.iter().map(|deleted| deleted.chunk_id).collect() } else { HashSet::new() };
        let is_deleted = |chunk_id: u64| {
            if large {
                deleted_set.contains(&chunk_id)
            } else {
                delta.deleted.iter().any(|deleted| deleted.chunk_id == chunk_id)
            }
        };
        let value_added: &[ValueChunkMeta] = delta.values.as_ref().map_or(&[], |values| values.added.as_slice());
        let released = |owner: u64| {
            if owner & VALUE_CHUNK_OWNER != 0 {
                delta.values.as_ref().is_some_and(|values| values.deleted.contains(&(owner & !VALUE_CHUNK_OWNER)))
            } else {
                is_deleted(owner)
            }
        };
        let mut seen = HashSet::new();
        for (index, deleted) in delta.deleted.iter().enumerate() {
            let repeated = if large {
                !seen.insert(deleted.chunk_id)
            } else {
                delta.deleted[..index].iter().any(|earlier| earlier.chunk_id == deleted.chunk_id)
            };
            match self.chunks.get(&deleted.chunk_id) {
                Some(chunk) if chunk.level == deleted.level && !repeated => {}
                _ => return Err(ReplayError::DeletedMissing { chunk_id: deleted.chunk_id, level: deleted.level }),
            }
        }
        let mut added_ids = HashSet::new();
        let mut added_slots: HashMap<u64, u64> = HashMap::new();
        for (index, chunk) in delta.added.iter().enumerate() {
            if u32::from(chunk.level) >= self.num_levels {
                return Err(ReplayError::LevelOutOfRange { chunk_id: chunk.chunk_id, level: chunk.level });
            }
            if chunk.is_log_chunk() && chunk.level != 0 {
                return Err(ReplayError::LogChunkLevel { chunk_id: chunk.chunk_id, level: chunk.level });
            }
            let earlier = &delta.added[..index];
            let present = self.chunks.contains_key(&chunk.chunk_id) && !is_deleted(chunk.chunk_id);
            let added_before = if large {
                added_ids.contains(&chunk.chunk_id)
            } else {
                earlier.iter().any(|other| other.chunk_id == chunk.chunk_id)
            };
            if present || added_before {
                return Err(ReplayError::AddedTwice { chunk_id: chunk.chunk_id });
            }
            for slot in chunk.slots() {
                if slot >= self.num_slots {
                    return Err(ReplayError::SlotOutOfRange { chunk_id: chunk.chunk_id, slot });
                }
                // The earlier chunk of this delta that claimed the slot owns it.
                let claimed = if large {
                    added_slots.get(&slot).copied()
                } else {
                    earlier
                        .iter()
                        .rev()
                        .find(|other| other.slots().any(|used| used == slot))
                        .map(|other| other.chunk_id)
                };
                if let Some(owner) = claimed {
                    return Err(ReplayError::SlotInUse { slot, owner });
                }
                if let Some(&owner) = self.slot_owner.get(&slot) {
                    if !released(owner) {
                        return Err(ReplayError::SlotInUse { slot, owner });
                    }
                }
                if let Some(value_chunk) = value_added.iter().find(|value_chunk| value_chunk.slot == slot) {
                    return Err(ReplayError::SlotInUse { slot, owner: VALUE_CHUNK_OWNER | value_chunk.value_chunk_id });
                }
            }
            if large {
                added_ids.insert(chunk.chunk_id);
                added_slots.extend(chunk.slots().map(|slot| (slot, chunk.chunk_id)));
            }
        }
        self.check_value_delta(delta)
    }

    /// The value section's checks (SPEC.md §6.2): deletions exist, additions are new and on
    /// free slots, ids only grow, and no reference is left dangling.
    fn check_value_delta(&self, delta: &DeltaVersion) -> Result<(), ReplayError> {
        let empty = ValueDelta { next_value_chunk_id: self.next_value_chunk_id, ..ValueDelta::default() };
        let values = delta.values.as_ref().unwrap_or(&empty);
        if values.next_value_chunk_id < self.next_value_chunk_id {
            return Err(ReplayError::ValueIdDecreased {
                before: self.next_value_chunk_id,
                after: values.next_value_chunk_id,
            });
        }
        for (index, id) in values.deleted.iter().enumerate() {
            if !self.value_chunks.contains_key(id) || values.deleted[..index].contains(id) {
                return Err(ReplayError::ValueChunkMissing { value_chunk_id: *id });
            }
        }
        let deleted_chunk = |id: u64| delta.deleted.iter().any(|deleted| deleted.chunk_id == id);
        for (index, value_chunk) in values.added.iter().enumerate() {
            let value_chunk_id = value_chunk.value_chunk_id;
            let present = self.value_chunks.contains_key(&value_chunk_id) && !values.deleted.contains(&value_chunk_id);
            let twice = values.added[..index].iter().any(|other| other.value_chunk_id == value_chunk_id);
            if present || twice || value_chunk_id >= values.next_value_chunk_id {
                return Err(ReplayError::ValueChunkTwice { value_chunk_id });
            }
            let slot = value_chunk.slot;
            if slot >= self.num_slots {
                return Err(ReplayError::ValueSlotOutOfRange { value_chunk_id, slot });
            }
            if let Some(&owner) = self.slot_owner.get(&slot) {
                let released = if owner & VALUE_CHUNK_OWNER != 0 {
                    values.deleted.contains(&(owner & !VALUE_CHUNK_OWNER))
                } else {
                    deleted_chunk(owner)
                };
                if !released {
                    return Err(ReplayError::SlotInUse { slot, owner });
                }
            }
            if let Some(other) = values.added[..index].iter().find(|other| other.slot == slot) {
                return Err(ReplayError::SlotInUse { slot, owner: VALUE_CHUNK_OWNER | other.value_chunk_id });
            }
        }
        // References after the delta: every added chunk's name a value chunk that is there,
        // and no deleted value chunk keeps a reference from a chunk that stays.
        let exists = |id: &u64| {
            (self.value_chunks.contains_key(id) && !values.deleted.contains(id))
                || values.added.iter().any(|value_chunk| value_chunk.value_chunk_id == *id)
        };
        for chunk in &delta.added {
            if let Some(&(value_chunk_id, _)) = chunk.value_refs.iter().find(|(id, _)| !exists(id)) {
                return Err(ReplayError::DanglingValueRef { chunk_id: chunk.chunk_id, value_chunk_id });
            }
        }
        let moved = |id: &u64| values.added.iter().any(|value_chunk| value_chunk.value_chunk_id == *id);
        for id in values.deleted.iter().filter(|id| !moved(id)) {
            let removed: u64 = delta
                .deleted
                .iter()
                .filter_map(|deleted| self.chunks.get(&deleted.chunk_id))
                .flat_map(|chunk| chunk.value_refs.iter())
                .filter(|(ref_id, _)| ref_id == id)
                .map(|(_, bytes)| bytes)
                .sum();
            if self.live_bytes(*id) > removed {
                return Err(ReplayError::ValueChunkReferenced { value_chunk_id: *id });
            }
        }
        Ok(())
    }

    /// The base version that describes this version (a trim, SPEC.md §10.3).
    pub fn to_base(&self, geometry: Geometry, instance: u32) -> BaseVersion {
        BaseVersion {
            geometry,
            instance,
            num_levels: self.num_levels,
            last_sequence: self.last_sequence,
            label_generation: self.label_generation,
            ofs_backup_start: self.ofs_backup_start,
            lsn_backup_start: self.lsn_backup_start,
            compact_pointers: self
                .compact_pointers
                .iter()
                .map(|(&level, key)| CompactPointer { level, key: key.clone() })
                .collect(),
            chunks: self.chunks.values().cloned().collect(),
            values: self.has_values.then(|| ValueSection {
                next_value_chunk_id: self.next_value_chunk_id,
                chunks: self.value_chunks.values().copied().collect(),
            }),
        }
    }

    /// Chunks of one level, in key order (by smallest key, then id; level 0 by id).
    pub fn level(&self, level: u8) -> Vec<&ChunkMeta> {
        let mut chunks: Vec<&ChunkMeta> = self.chunks.values().filter(|chunk| chunk.level == level).collect();
        if level == 0 {
            chunks.sort_by_key(|chunk| (chunk.largest_seq, chunk.chunk_id));
        } else {
            chunks.sort_by(|a, b| a.smallest_key.cmp(&b.smallest_key).then(a.chunk_id.cmp(&b.chunk_id)));
        }
        chunks
    }

    /// Checks the invariants the version keeps by construction.
    pub fn assert_invariants(&self) {
        let slots: usize = self.chunks.values().map(|chunk| chunk.sub_chunks.len()).sum();
        assert_eq!(slots + self.value_chunks.len(), self.slot_owner.len());
        for (id, value_chunk) in &self.value_chunks {
            assert_eq!(self.slot_owner.get(&value_chunk.slot), Some(&(VALUE_CHUNK_OWNER | id)));
        }
        for chunk in self.chunks.values() {
            assert!(u32::from(chunk.level) < self.num_levels);
            for slot in chunk.slots() {
                assert_eq!(self.slot_owner.get(&slot), Some(&chunk.chunk_id));
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
