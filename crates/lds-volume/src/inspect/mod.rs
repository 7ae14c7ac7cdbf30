//! The inspection walks of SPEC.md §15 and what recovery says of each object, for dump tools:
//! every object of a log area in physical order with its liveness and the reason, the state
//! of every slot, and the sub-chunks of a chunk; the backup log a version keeps for its log
//! chunks (`retained`), log references followed (`log_refs`) and value chunks checked
//! (`value_chunks`). The library half of `lds dump` (gitoxide's plumbing and core split): it
//! returns typed values, and the command only formats them.

mod log_refs;
mod retained;
mod value_chunks;

pub use log_refs::{LogResolver, ResolveError};
pub use retained::RetainedLog;
pub use value_chunks::{
    check_value_chunk, pending_value_slots, slot_footers, DigestCheck, FooterCheck, SlotFooters, ValueChunkCheck,
};

use std::collections::BTreeSet;

use lds_format::algorithms::instance::{recover_instance, InstanceRecovery};
use lds_format::algorithms::recovery::{
    online_map, read_valid_object, recover_version_log, PhysicalWalk, VersionLogError, VersionLogState,
};
use lds_format::chunk::filter::Filter;
use lds_format::chunk::footer::Footer;
use lds_format::chunk::index::IndexEntry;
use lds_format::chunk::view::SubChunkView;
use lds_format::geometry::{Geometry, LogKind};
use lds_format::log::{area_context, AreaContext, ObjectHeader, ObjectType, HEADER_LEN};
use lds_format::version::meta::ChunkMeta;
use lds_format::FormatError;

use crate::block::{DeviceError, ReadAt};

/// Both log areas of one instance, as read.
#[derive(Debug, Clone)]
pub struct InstanceAreas {
    /// The version log area.
    pub version: Vec<u8>,
    /// The backup log area.
    pub backup: Vec<u8>,
}

/// Reads both log areas of `instance`.
pub fn read_areas(
    device: &(impl ReadAt + ?Sized),
    geometry: &Geometry,
    instance: u32,
) -> Result<InstanceAreas, DeviceError> {
    let (version_offset, version_len) = geometry.log_area(LogKind::Version, instance);
    let (backup_offset, backup_len) = geometry.log_area(LogKind::Backup, instance);
    Ok(InstanceAreas {
        version: device.read_vec(version_offset, version_len)?,
        backup: device.read_vec(backup_offset, backup_len)?,
    })
}

/// Reads and recovers one instance (SPEC.md §9): the areas, and the format crate's
/// `recover_instance` over them.
pub fn recover(
    device: &(impl ReadAt + ?Sized),
    geometry: &Geometry,
    instance: u32,
) -> Result<(InstanceAreas, Result<InstanceRecovery, VersionLogError>), DeviceError> {
    let areas = read_areas(device, geometry, instance)?;
    let recovery = recover_instance(geometry, instance, &areas.version, &areas.backup);
    Ok((areas, recovery))
}

/// Whether an object the walk lists is live, and why (not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// Part of the live chain.
    Live,
    /// Not a valid object (SPEC.md §5): why.
    Invalid(FormatError),
    /// A version log object before the live base version.
    Superseded {
        /// Offset of the live base version.
        base_offset: u64,
    },
    /// In the version log's right portion, made obsolete by a base version in the left.
    RightObsolete,
    /// Valid, but not in the recovered chain: a stale object of an earlier lap, or past the
    /// head (in the backup log: before the backup start point, or past the head).
    NotInChain,
}

impl Liveness {
    /// The reason, as dump prints it.
    pub fn reason(&self, kind: LogKind, lsn: u64) -> String {
        match self {
            Self::Live => "live".into(),
            Self::Invalid(error) => error.to_string(),
            Self::Superseded { base_offset } => format!("before the live base version (at offset {base_offset})"),
            Self::RightObsolete => "right portion obsolete: the left portion has a base version".into(),
            Self::NotInChain if kind == LogKind::Version => {
                format!("not in the recovered chain: stale (lsn {lsn}) from an earlier lap or past the head")
            }
            Self::NotInChain => format!("not after the backup start point, or past the head (lsn {lsn})"),
        }
    }
}

/// One object a physical walk lists.
#[derive(Debug, Clone)]
pub struct WalkedObject<'a> {
    /// Offset in the area.
    pub offset: u64,
    /// The header as stored.
    pub header: ObjectHeader,
    /// Offset of the payload on the device.
    pub payload_offset: u64,
    /// The payload bytes as stored (`len_payload` of them), in the area.
    pub payload: &'a [u8],
    /// Live or not, and why.
    pub liveness: Liveness,
}

/// A set of offsets in a log area: a bit per 8-byte position (where objects start: every
/// append is 8-aligned, SPEC.md §5), and the few others (a chain or walk may start where a
/// damaged WOL points) apart. Bounded by the area: 1 bit per 8 bytes of it.
#[derive(Debug, Clone, Default)]
struct OffsetSet {
    bits: Vec<u64>,
    /// Offsets that are not multiples of 8.
    other: BTreeSet<u64>,
}

impl OffsetSet {
    fn new(len_area: usize) -> Self {
        Self { bits: vec![0; len_area.div_ceil(8 * 64)], other: BTreeSet::new() }
    }

    fn insert(&mut self, offset: u64) {
        let position = offset / 8;
        match (offset % 8, self.bits.get_mut((position / 64) as usize)) {
            (0, Some(word)) => *word |= 1 << (position % 64),
            _ => {
                self.other.insert(offset);
            }
        }
    }

    fn contains(&self, offset: u64) -> bool {
        let position = offset / 8;
        match (offset % 8, self.bits.get((position / 64) as usize)) {
            (0, Some(word)) => word & (1 << (position % 64)) != 0,
            _ => self.other.contains(&offset),
        }
    }
}

/// The offset of the right walk: the first object listed is a WOL at 0 whose raw
/// `ofs_first_live` lies inside the area (SPEC.md §15).
fn right_start(area: &[u8], first: Option<(u64, ObjectHeader)>) -> Option<u64> {
    let (offset, header) = first?;
    if header.object_type_code != ObjectType::WrapLeft.code() || offset != 0 || header.len_payload < 16 {
        return None;
    }
    let raw: [u8; 8] = area.get(HEADER_LEN..HEADER_LEN + 8)?.try_into().ok()?;
    Some(u64::from_le_bytes(raw)).filter(|&start| start < area.len() as u64)
}

/// The physical walks of one log area (SPEC.md §15) and what recovery says of each object
/// (SPEC.md §9): the left walk from offset 0 and, when it starts with a WOL, the right walk
/// from the WOL's first live object. Both can reach the same objects when the right portion
/// runs into stale bytes.
///
/// The objects are listed one at a time, never held: a version log may hold hundreds of
/// thousands. What the verdicts need is kept per 8-byte position of the area (a bit each for
/// the live objects and for those before the live base version), found by walking recovery's
/// chain again; each listing walks the area again.
#[derive(Debug, Clone)]
pub struct LogWalk<'a> {
    area: &'a [u8],
    context: AreaContext,
    kind: LogKind,
    sector: u64,
    /// Where the right walk starts, if there is one.
    right_start: Option<u64>,
    /// The objects of the recovered chain from the live base version on (backup log: the
    /// live chain).
    live: OffsetSet,
    /// The objects of the recovered sequence before the live base version (version log).
    superseded: OffsetSet,
    /// Offset of the live base version.
    base_offset: u64,
    /// The left walk lists a valid base version: the right portion is obsolete.
    left_has_base: bool,
}

/// Walks a log area and says of each object whether it is live by the rules of SPEC.md §9.
pub fn walk_log<'a>(
    area: &'a [u8],
    geometry: &Geometry,
    kind: LogKind,
    instance: u32,
    recovery: &Result<InstanceRecovery, VersionLogError>,
) -> LogWalk<'a> {
    let context = area_context(geometry, kind, instance);
    let sector = geometry.sector();
    let mut live = OffsetSet::new(area.len());
    let mut superseded = OffsetSet::new(area.len());
    let mut base_offset = 0;
    match (kind, recovery) {
        (LogKind::Version, Ok(recovery)) => {
            let state = &recovery.version_log;
            base_offset = state.base_offset;
            for (index, object) in state.sequence(area, &context).enumerate() {
                if index >= state.base_index {
                    live.insert(object.offset);
                } else {
                    superseded.insert(object.offset);
                }
            }
        }
        (LogKind::Backup, Ok(recovery)) => {
            if let Some(state) = recovery.backup_state() {
                state.objects.iter().for_each(|object| live.insert(object.offset));
            }
        }
        (_, Err(_)) => {}
    }
    let left_has_base = PhysicalWalk::new(area, 0, sector).any(|(offset, header)| {
        header.object_type_code == ObjectType::BaseVersion.code() && read_valid_object(area, offset, &context).is_ok()
    });
    let right_start = right_start(area, PhysicalWalk::new(area, 0, sector).next());
    LogWalk { area, context, kind, sector, right_start, live, superseded, base_offset, left_has_base }
}

impl<'a> LogWalk<'a> {
    /// The right walk's objects, headers only.
    fn right_headers(&self) -> impl Iterator<Item = (u64, ObjectHeader)> + 'a {
        let (area, sector) = (self.area, self.sector);
        self.right_start.into_iter().flat_map(move |start| PhysicalWalk::new(area, start, sector))
    }

    /// The offsets the left walk lists.
    fn left_offsets(&self) -> OffsetSet {
        let mut listed = OffsetSet::new(self.area.len());
        PhysicalWalk::new(self.area, 0, self.sector).for_each(|(offset, _)| listed.insert(offset));
        listed
    }

    /// An object a walk lists, with its verdict.
    fn describe(&self, (offset, header): (u64, ObjectHeader), in_right: bool) -> WalkedObject<'a> {
        let liveness = match read_valid_object(self.area, offset, &self.context) {
            Err(error) => Liveness::Invalid(error),
            Ok(_) if self.live.contains(offset) => Liveness::Live,
            Ok(_) if self.superseded.contains(offset) => Liveness::Superseded { base_offset: self.base_offset },
            Ok(_) if self.kind == LogKind::Version && in_right && self.left_has_base => Liveness::RightObsolete,
            Ok(_) => Liveness::NotInChain,
        };
        let at = offset as usize + HEADER_LEN;
        // The walk lists only objects whose claimed length fits the area.
        let payload = self.area.get(at..at + header.len_payload as usize).unwrap_or_default();
        WalkedObject { offset, header, payload_offset: self.context.ofs_area + at as u64, payload, liveness }
    }

    /// The left walk.
    pub fn left(&self) -> impl Iterator<Item = WalkedObject<'a>> + '_ {
        PhysicalWalk::new(self.area, 0, self.sector).map(|found| self.describe(found, false))
    }

    /// The right walk (none unless the left walk starts with a WOL).
    pub fn right(&self) -> impl Iterator<Item = WalkedObject<'a>> + '_ {
        self.right_headers().map(|found| self.describe(found, true))
    }

    /// The left walk, then the objects of the right walk not already listed.
    pub fn merged(&self) -> impl Iterator<Item = WalkedObject<'a>> + '_ {
        let listed = self.left_offsets();
        self.left().chain(
            self.right_headers()
                .filter(move |&(offset, _)| !listed.contains(offset))
                .map(|found| self.describe(found, true)),
        )
    }

    /// How many objects [`LogWalk::merged`] lists (headers only: nothing is validated).
    pub fn merged_len(&self) -> usize {
        let listed = self.left_offsets();
        PhysicalWalk::new(self.area, 0, self.sector).count()
            + self.right_headers().filter(|&(offset, _)| !listed.contains(offset)).count()
    }
}

/// An instance and what recovering its version log gave.
pub type InstanceVersion = (u32, Result<VersionLogState, VersionLogError>);

/// Every instance's recovered version log (for the online map and chunk lookups).
pub fn all_versions(device: &(impl ReadAt + ?Sized), geometry: &Geometry) -> Result<Vec<InstanceVersion>, DeviceError> {
    let mut states = Vec::new();
    for instance in 0..geometry.instance_count {
        let (offset, len) = geometry.log_area(LogKind::Version, instance);
        let area = device.read_vec(offset, len)?;
        states.push((instance, recover_version_log(&area, &area_context(geometry, LogKind::Version, instance))));
    }
    Ok(states)
}

/// What a slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// A live chunk (or an output of an unfinished compaction) of some instance.
    Live,
    /// A chunk of this volume no live version references.
    Stale,
    /// No chunk footer.
    Free,
    /// No device holds the slot (a removed device's, SPEC.md §4.3).
    Absent,
}

impl SlotState {
    /// `live`, `stale` or `free`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Live => "live",
            Self::Stale => "stale",
            Self::Free => "free",
            Self::Absent => "absent",
        }
    }
}

/// The footer of a slot, read whatever its checksum says (SPEC.md §15), when it has the magic.
pub fn slot_footer(
    device: &(impl ReadAt + ?Sized),
    geometry: &Geometry,
    slot: u64,
) -> Result<Option<Footer>, DeviceError> {
    let offset = geometry.slot_offset(slot) + geometry.slot_size - lds_format::chunk::footer::FOOTER_LEN as u64;
    let bytes = device.read_vec(offset, lds_format::chunk::footer::FOOTER_LEN as u64)?;
    if !Footer::has_magic(&bytes) {
        return Ok(None);
    }
    Ok(Footer::parse_raw(&bytes, offset).ok())
}

/// Why the slots cannot be listed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SlotsError {
    /// The device failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// An instance's version log cannot be recovered.
    #[error("instance {instance}: {source}")]
    VersionLog {
        /// The instance.
        instance: u32,
        /// Why.
        source: VersionLogError,
    },
    /// Two instances reference one slot.
    #[error("slot {slot} is referenced by instances {} and {}", instances.0, instances.1)]
    SlotConflict {
        /// The slot.
        slot: u64,
        /// The instances.
        instances: (u32, u32),
    },
}

/// Every slot's state (by the online map of all instances, SPEC.md §9.4) and footer.
pub fn slots(
    device: &(impl ReadAt + ?Sized),
    label: &lds_format::label::Label,
) -> Result<Vec<(SlotState, Option<Footer>)>, SlotsError> {
    let geometry = &label.geometry;
    let mut states = Vec::new();
    for (instance, state) in all_versions(device, geometry)? {
        states.push((instance, state.map_err(|source| SlotsError::VersionLog { instance, source })?));
    }
    let map = online_map(
        geometry.num_slots,
        states.iter().map(|(instance, state)| (*instance, &state.version, &state.unfinished_compactions)),
    )
    .map_err(|conflict| SlotsError::SlotConflict { slot: conflict.slot, instances: conflict.instances })?;
    let mut slots = Vec::with_capacity(geometry.num_slots as usize);
    for slot in 0..geometry.num_slots {
        if !label.slot_present(slot) {
            slots.push((SlotState::Absent, None));
            continue;
        }
        let footer = slot_footer(device, geometry, slot)?;
        let state = match (map[slot as usize], &footer) {
            (true, _) => SlotState::Live,
            (false, Some(_)) => SlotState::Stale,
            (false, None) => SlotState::Free,
        };
        slots.push((state, footer));
    }
    Ok(slots)
}

/// One entry of a sub-chunk, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedEntry {
    /// User key.
    pub key: Vec<u8>,
    /// Sequence number.
    pub sequence: u64,
    /// Put or delete.
    pub kind: lds_format::entry::EntryKind,
    /// Value (empty for a delete).
    pub value: Vec<u8>,
}

/// One sub-chunk of a chunk, decoded from its slot.
#[derive(Debug, Clone)]
pub struct SubChunkInspection {
    /// The slot.
    pub slot: u64,
    /// The footer.
    pub footer: Footer,
    /// The block index.
    pub index: Vec<IndexEntry>,
    /// The filter.
    pub filter: Filter,
    /// Whether its blake3 digest matches.
    pub digest: Result<(), FormatError>,
    /// Its key sketch (SPEC.md §8.7), checked: `Ok(None)` when it has none.
    pub sketch: Result<Option<lds_format::sketch::Sketch>, FormatError>,
    /// Every entry, when asked for.
    pub entries: Option<Vec<OwnedEntry>>,
}

/// A chunk: the instance and metadata of the live version that references it (none for a
/// stale slot), and its sub-chunks.
#[derive(Debug, Clone)]
pub struct ChunkInspection {
    /// The owning instance and the chunk's metadata, when a live version references it.
    pub meta: Option<(u32, ChunkMeta)>,
    /// Its sub-chunks.
    pub sub_chunks: Vec<SubChunkInspection>,
}

/// Why a chunk cannot be inspected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChunkError {
    /// The device failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The chunk id is not a slot of the volume.
    #[error("chunk {chunk_id} is beyond the slot area ({num_slots} slots)")]
    OutOfRange {
        /// The id asked for.
        chunk_id: u64,
        /// Slots of the volume.
        num_slots: u64,
    },
    /// A sub-chunk does not decode.
    #[error("slot {slot}: {source}")]
    SubChunk {
        /// The slot.
        slot: u64,
        /// Why.
        source: FormatError,
    },
}

/// Decodes chunk `chunk_id` (the slot of its first sub-chunk), with its entries if asked.
pub fn chunk(
    device: &(impl ReadAt + ?Sized),
    geometry: &Geometry,
    chunk_id: u64,
    with_entries: bool,
) -> Result<ChunkInspection, ChunkError> {
    if chunk_id >= geometry.num_slots {
        return Err(ChunkError::OutOfRange { chunk_id, num_slots: geometry.num_slots });
    }
    let meta = all_versions(device, geometry)?.into_iter().find_map(|(instance, state)| {
        state.ok().and_then(|state| state.version.chunks.get(&chunk_id).map(|meta| (instance, meta.clone())))
    });
    let slots: Vec<u64> = meta.as_ref().map_or_else(|| vec![chunk_id], |(_, meta)| meta.slots().collect());
    let mut sub_chunks = Vec::new();
    for slot in slots {
        let offset = geometry.slot_offset(slot);
        let image = device.read_vec(offset, geometry.slot_size)?;
        let view = SubChunkView::open(&image, offset).map_err(|source| ChunkError::SubChunk { slot, source })?;
        let entries = if with_entries {
            let entries = view.entries(offset).map_err(|source| ChunkError::SubChunk { slot, source })?;
            Some(
                entries
                    .into_iter()
                    .map(|entry| OwnedEntry {
                        key: entry.key.to_vec(),
                        sequence: entry.sequence,
                        kind: entry.kind,
                        value: entry.value.to_vec(),
                    })
                    .collect(),
            )
        } else {
            None
        };
        sub_chunks.push(SubChunkInspection {
            slot,
            digest: view.verify_digest(offset),
            sketch: view.sketch(offset),
            footer: view.footer,
            index: view.index,
            filter: view.filter,
            entries,
        });
    }
    Ok(ChunkInspection { meta, sub_chunks })
}

#[cfg(test)]
mod tests {
    use super::OffsetSet;

    #[test]
    fn an_offset_set_holds_aligned_unaligned_and_outlying_offsets() {
        let mut set = OffsetSet::new(4096);
        // A bit per 8 bytes: 4096 bytes are 512 positions, 8 words of 64 bits.
        assert_eq!(set.bits.len(), 8);
        let offsets = [0, 8, 504, 4088, 3, 4097, 1 << 40, u64::MAX];
        for &offset in &offsets {
            assert!(!set.contains(offset), "{offset} before it is inserted");
            set.insert(offset);
            assert!(set.contains(offset), "{offset}");
        }
        // Neighbours stay out.
        for offset in [16, 7, 4, 4096, 4089, 4104] {
            assert!(!set.contains(offset), "{offset}");
        }
        // Only the unaligned and the outlying ones are kept apart.
        assert_eq!(set.other.len(), 4);
    }
}
