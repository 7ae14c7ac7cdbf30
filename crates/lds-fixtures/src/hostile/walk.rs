//! Decoding a volume's structures into their fields, by SPEC.md's byte tables: each field with
//! its place, what it holds, its extra variants and the seals covering it.
//!
//! The walkers read what the bytes say, without trusting them: every length and count is
//! checked against the bytes that remain, and a structure that does not decode just ends its
//! list of fields. Lists are walked whole (a later element's place depends on the earlier
//! ones) but give fields for their first element only, so that a case count stays near one
//! per field of SPEC.md's tables; digests that chunk metadata repeats are listed for every
//! element, since resealing a chunk rewrites each of them.

use lds_format::algorithms::instance::recover_instance;
use lds_format::algorithms::recovery::physical_walk;
use lds_format::chunk::footer::FOOTER_LEN;
use lds_format::geometry::{Geometry, LogKind};
use lds_format::label::{Label, LABEL_LEN};
use lds_format::log::{ObjectType, HEADER_LEN};

use super::{le, read_le, CaseError, FieldRef, Group, Kind, Seal, Space, Variant, Volume};

/// A uuid no base volume has: the "other volume" of uuid fields.
pub const FOREIGN_UUID: [u8; 16] = *b"hostile-volume!!";

/// Reads fields from a run of bytes of one file.
pub(crate) struct Walker<'a> {
    bytes: &'a [u8],
    file: usize,
    at: usize,
    end: usize,
    /// Fields are read but not listed (later elements of a list).
    quiet: bool,
    seals: Vec<Seal>,
    out: Vec<FieldRef>,
}

impl<'a> Walker<'a> {
    pub(crate) fn new(bytes: &'a [u8], file: usize, at: usize, end: usize, seals: Vec<Seal>) -> Self {
        Self { bytes, file, at, end: end.min(bytes.len()), quiet: false, seals, out: Vec::new() }
    }

    fn left(&self) -> usize {
        self.end.saturating_sub(self.at)
    }

    fn take(&mut self, width: usize) -> Option<usize> {
        if self.left() < width {
            return None;
        }
        let at = self.at;
        self.at += width;
        Some(at)
    }

    fn push(&mut self, path: &str, at: usize, width: usize, kind: Kind, extras: Vec<(Variant, Vec<u8>)>) {
        let listed = !self.quiet || matches!(kind, Kind::Digest { .. });
        if listed {
            let seals = self.seals.clone();
            self.out.push(FieldRef {
                path: path.to_string(),
                file: self.file,
                at,
                width,
                kind,
                extras,
                also: Vec::new(),
                seals,
            });
        }
    }

    /// An integer of `width` bytes with extra variants.
    pub(crate) fn num(&mut self, path: &str, width: usize, extras: &[(Variant, u64)]) -> Option<u64> {
        let at = self.take(width)?;
        let extras = extras.iter().map(|&(variant, value)| (variant, le(value, width))).collect();
        self.push(path, at, width, Kind::Num, extras);
        Some(read_le(self.bytes, at, width))
    }

    /// A uuid with extra variants.
    pub(crate) fn uuid(&mut self, path: &str, extras: &[(Variant, [u8; 16])]) -> Option<[u8; 16]> {
        let at = self.take(16)?;
        let extras = extras.iter().map(|(variant, uuid)| (*variant, uuid.to_vec())).collect();
        self.push(path, at, 16, Kind::Uuid, extras);
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&self.bytes[at..at + 16]);
        Some(uuid)
    }

    /// Bytes that must be zero.
    pub(crate) fn reserved(&mut self, path: &str, width: usize) -> Option<()> {
        if width == 0 {
            return Some(());
        }
        let at = self.take(width)?;
        self.push(path, at, width, Kind::Reserved, Vec::new());
        Some(())
    }

    /// A magic.
    pub(crate) fn magic(&mut self, path: &str, width: usize) -> Option<()> {
        let at = self.take(width)?;
        self.push(path, at, width, Kind::Magic, Vec::new());
        Some(())
    }

    /// A digest another structure's seal rewrites.
    fn digest(&mut self, path: &str, slot: u64, value_chunk: bool) -> Option<()> {
        let at = self.take(32)?;
        self.push(path, at, 32, Kind::Digest { slot, value_chunk }, Vec::new());
        Some(())
    }

    /// Bytes that are not a case (a checksum the seals recompute, key bytes).
    pub(crate) fn skip(&mut self, width: usize) -> Option<()> {
        self.take(width).map(|_| ())
    }

    /// A key: its u16 length (a field) and its bytes.
    fn key(&mut self, path: &str) -> Option<()> {
        let left = self.left().saturating_sub(2) as u64;
        let len = self.num(&format!("{path}.len"), 2, &[(Variant::PastEnd, (left + 1).min(0xffff))])?;
        self.skip(len as usize)
    }

    /// The fields listed.
    pub(crate) fn finish(self) -> Vec<FieldRef> {
        self.out
    }
}

/// What the extras of the fields of one volume refer to.
pub(crate) struct Ctx<'s> {
    pub(crate) space: &'s Space,
    /// Slots in use by instance 0's chunks and value chunks, in order.
    pub(crate) live_slots: Vec<u64>,
    /// Value chunk ids of instance 0's version, in order.
    pub(crate) value_ids: Vec<u64>,
    /// Length of the first device.
    pub(crate) device_len: u64,
}

impl Ctx<'_> {
    fn geometry(&self) -> &Geometry {
        &self.space.geometry
    }

    /// A slot in use other than `not` (slot 0 when there is none).
    fn other_slot(&self, not: u64) -> u64 {
        self.live_slots.iter().copied().find(|&slot| slot != not).unwrap_or(0)
    }

    /// A value chunk id of the version other than `not`.
    fn other_value_id(&self, not: u64) -> u64 {
        self.value_ids.iter().copied().find(|&id| id != not).unwrap_or(not.wrapping_add(1))
    }
}

/// The geometry (SPEC.md §4.1) at the walker's position.
fn geometry(w: &mut Walker<'_>, p: &str, ctx: &Ctx<'_>) -> Option<()> {
    let g = ctx.geometry();
    let sector = g.sector();
    w.uuid(&format!("{p}.volume_uuid"), &[(Variant::Other, FOREIGN_UUID)])?;
    w.num(&format!("{p}.sector_size"), 4, &[(Variant::PastEnd, 1 << 17)])?;
    w.num(&format!("{p}.instance_count"), 4, &[(Variant::PastEnd, 65)])?;
    w.num(&format!("{p}.volume_len"), 8, &[(Variant::PastEnd, ctx.device_len + sector)])?;
    w.num(&format!("{p}.ofs_version_log"), 8, &[(Variant::Overlap, 0), (Variant::PastEnd, g.volume_len)])?;
    let into_backup = g.ofs_backup_log - g.ofs_version_log + sector;
    w.num(&format!("{p}.len_version_log"), 8, &[(Variant::Overlap, into_backup), (Variant::PastEnd, g.volume_len)])?;
    w.num(
        &format!("{p}.ofs_backup_log"),
        8,
        &[(Variant::Overlap, g.ofs_version_log), (Variant::PastEnd, g.volume_len)],
    )?;
    let into_slots = g.ofs_slot_area - g.ofs_backup_log + g.slot_size;
    w.num(&format!("{p}.len_backup_log"), 8, &[(Variant::Overlap, into_slots), (Variant::PastEnd, g.volume_len)])?;
    w.num(&format!("{p}.ofs_slot_area"), 8, &[(Variant::Overlap, g.ofs_backup_log), (Variant::PastEnd, g.volume_len)])?;
    w.num(&format!("{p}.slot_size"), 8, &[(Variant::PastEnd, 1 << 31)])?;
    let whole = g.volume_len / g.slot_size.max(1);
    w.num(&format!("{p}.num_slots"), 8, &[(Variant::PastEnd, g.num_slots + 1), (Variant::Overlap, whole)])?;
    w.reserved(&format!("{p}.reserved"), 8)
}

/// The device table (SPEC.md §4.3) at the walker's position.
fn device_table(w: &mut Walker<'_>, p: &str, label: &Label, ctx: &Ctx<'_>, len_this: u64) -> Option<()> {
    let Some(table) = &label.devices else { return w.reserved(&format!("{p}.reserved"), 300) };
    let this = table.device_uuid;
    let other = table.devices.iter().map(|entry| entry.device_uuid).find(|uuid| *uuid != this).unwrap_or(FOREIGN_UUID);
    w.uuid(&format!("{p}.device_uuid"), &[(Variant::Other, other), (Variant::Cycle, FOREIGN_UUID)])?;
    let count = table.devices.len() as u64;
    w.num(&format!("{p}.num_devices"), 4, &[(Variant::PastEnd, 8), (Variant::Overlap, count + 1)])?;
    let num_slots = ctx.geometry().num_slots;
    for (index, entry) in table.devices.iter().enumerate() {
        let q = format!("{p}.entry[{index}]");
        let neighbour = table.devices.get(if index == 0 { 1 } else { 0 }).copied().unwrap_or(*entry);
        w.uuid(
            &format!("{q}.device_uuid"),
            &[(Variant::Cycle, neighbour.device_uuid), (Variant::Other, FOREIGN_UUID)],
        )?;
        w.num(
            &format!("{q}.first_slot"),
            8,
            &[(Variant::Overlap, neighbour.first_slot), (Variant::PastEnd, num_slots)],
        )?;
        let into_neighbour = neighbour.end_slot().saturating_sub(entry.first_slot);
        w.num(
            &format!("{q}.num_slots"),
            8,
            &[(Variant::PastEnd, num_slots - entry.first_slot + 1), (Variant::Overlap, into_neighbour)],
        )?;
        let len = if entry.device_uuid == this { len_this } else { entry.len_device };
        w.num(&format!("{q}.len_device"), 8, &[(Variant::PastEnd, len + ctx.geometry().sector())])?;
    }
    w.reserved(&format!("{p}.unused_entries"), (7 - table.devices.len().min(7)) * 40)
}

/// A label copy (SPEC.md §4) at `at` of file `file`.
fn label_fields(volume: &Volume, file: usize, at: usize, p: &str, ctx: &Ctx<'_>) -> Option<Vec<FieldRef>> {
    let bytes = &volume.files[file];
    let label = Label::decode(bytes.get(at..at + LABEL_LEN)?, at as u64).ok()?;
    let mut w = Walker::new(bytes, file, at, at + LABEL_LEN, vec![Seal::Label { file, at }]);
    w.magic(&format!("{p}.magic"), 8)?;
    w.num(&format!("{p}.version_major"), 2, &[(Variant::PastEnd, 2)])?;
    w.num(&format!("{p}.version_minor"), 2, &[(Variant::PastEnd, 8)])?;
    w.num(&format!("{p}.len_label"), 4, &[(Variant::PastEnd, LABEL_LEN as u64 + 1)])?;
    let unknown = 1 << 40;
    w.num(&format!("{p}.features_compat"), 8, &[(Variant::Unknown, unknown)])?;
    w.num(&format!("{p}.features_ro_compat"), 8, &[(Variant::Unknown, unknown)])?;
    let incompat = label.features_incompat;
    let multi = lds_format::label::FEATURE_INCOMPAT_MULTI_DEVICE;
    w.num(
        &format!("{p}.features_incompat"),
        8,
        &[(Variant::Unknown, incompat | unknown), (Variant::Cycle, incompat ^ multi)],
    )?;
    geometry(&mut w, &format!("{p}.geometry"), ctx)?;
    let generation = label.generation;
    w.num(
        &format!("{p}.generation"),
        8,
        &[(Variant::Cycle, generation.saturating_sub(1)), (Variant::PastEnd, generation + 1)],
    )?;
    w.reserved(&format!("{p}.volume_name"), 64)?;
    device_table(&mut w, &format!("{p}.devices"), &label, ctx, bytes.len() as u64)?;
    Some(w.finish())
}

/// Both label copies of a device: each field of the primary, written to the backup copy too.
fn both_labels(volume: &Volume, file: usize, p: &str, ctx: &Ctx<'_>) -> Result<Vec<FieldRef>, CaseError> {
    let bytes = &volume.files[file];
    let label = Label::decode(bytes.get(..LABEL_LEN).unwrap_or_default(), 0)
        .map_err(|error| CaseError(format!("{p}: the base's primary label: {error}")))?;
    let backup = label.ofs_backup_label_on_device() as usize;
    let same = bytes.get(backup..backup + LABEL_LEN) == bytes.get(..LABEL_LEN);
    let mut fields = label_fields(volume, file, 0, p, ctx).ok_or_else(|| CaseError(format!("{p}: does not decode")))?;
    for field in &mut fields {
        if same {
            field.also.push((file, backup + field.at));
            field.seals.push(Seal::Label { file, at: backup });
        }
    }
    // The primary alone: the copies then disagree, with the same or another generation.
    let primary_only = label_fields(volume, file, 0, &format!("{p}.primary"), ctx).unwrap_or_default();
    fields.extend(
        primary_only
            .into_iter()
            .filter(|field| field.path.ends_with(".generation") || field.path.ends_with(".num_slots")),
    );
    Ok(fields)
}

/// The header of the log object at `at` (SPEC.md §5) and the seals of its fields.
struct ObjectPlace {
    file: usize,
    area_at: usize,
    area_len: usize,
    /// Area offset of the object.
    offset: u64,
    /// Area offset of the object before it in its chain (its own offset for the first).
    previous: u64,
    /// Its lsn and the previous object's.
    lsn: u64,
    previous_lsn: u64,
    sn: u64,
    /// Where the object after it starts (area offset), or the area's end.
    next: u64,
}

impl ObjectPlace {
    fn at(&self) -> usize {
        self.area_at + self.offset as usize
    }

    fn seal(&self) -> Seal {
        Seal::Object { file: self.file, area_at: self.area_at, area_len: self.area_len, at: self.at() }
    }
}

fn object_header(volume: &Volume, place: &ObjectPlace, p: &str, kind: LogKind, ctx: &Ctx<'_>) -> Option<Vec<FieldRef>> {
    let bytes = &volume.files[place.file];
    let at = place.at();
    let mut w = Walker::new(bytes, place.file, at, at + HEADER_LEN, vec![place.seal()]);
    w.magic(&format!("{p}.magic"), 4)?;
    w.skip(4)?;
    w.num(&format!("{p}.object_type"), 1, &[(Variant::Unknown, 7)])?;
    let other_kind = match kind {
        LogKind::Version => LogKind::Backup,
        LogKind::Backup => LogKind::Version,
    };
    w.num(&format!("{p}.log_kind"), 1, &[(Variant::Overlap, u64::from(other_kind.code())), (Variant::Unknown, 3)])?;
    w.reserved(&format!("{p}.flags"), 2)?;
    w.num(&format!("{p}.instance"), 4, &[(Variant::PastEnd, u64::from(ctx.geometry().instance_count))])?;
    w.num(&format!("{p}.sn"), 8, &[(Variant::Cycle, place.sn.saturating_sub(1)), (Variant::PastEnd, place.sn + 1)])?;
    w.num(&format!("{p}.lsn"), 8, &[(Variant::Cycle, place.previous_lsn), (Variant::PastEnd, place.lsn + 2)])?;
    let len_area = place.area_len as u64;
    w.num(&format!("{p}.log_offset"), 8, &[(Variant::PastEnd, len_area), (Variant::Overlap, place.previous)])?;
    let past = len_area.saturating_sub(place.offset + HEADER_LEN as u64) + 1;
    let into_next = place.next.saturating_sub(place.offset + HEADER_LEN as u64) + 8;
    w.num(&format!("{p}.len_payload"), 4, &[(Variant::PastEnd, past), (Variant::Overlap, into_next)])?;
    w.skip(4)?;
    w.uuid(&format!("{p}.volume_uuid"), &[(Variant::Other, FOREIGN_UUID)])?;
    Some(w.finish())
}

/// A walker over the payload of the object at `place`.
fn payload_walker<'a>(volume: &'a Volume, place: &ObjectPlace) -> Walker<'a> {
    let bytes = &volume.files[place.file];
    let at = place.at();
    let len = read_le(bytes, at + 40, 4) as usize;
    Walker::new(bytes, place.file, at + HEADER_LEN, at + HEADER_LEN + len, vec![place.seal()])
}

/// Compact pointers (SPEC.md §6.1): the first one's fields.
fn compact_pointers(w: &mut Walker<'_>, p: &str, count: u64) -> Option<()> {
    for index in 0..count {
        w.quiet = index > 0;
        w.num(&format!("{p}.compact_pointer[{index}].level"), 1, &[(Variant::PastEnd, 16)])?;
        w.key(&format!("{p}.compact_pointer[{index}].key"))?;
    }
    w.quiet = false;
    Some(())
}

/// One chunk metadata (SPEC.md §6.4).
fn chunk_meta(w: &mut Walker<'_>, p: &str, ctx: &Ctx<'_>, quiet: bool) -> Option<()> {
    let g = ctx.geometry();
    w.quiet = quiet;
    let id = w.num(&format!("{p}.chunk_id"), 8, &[(Variant::PastEnd, g.num_slots)])?;
    if let Some(last) = w.out.last_mut().filter(|_| !quiet) {
        last.extras.push((Variant::Overlap, le(ctx.other_slot(id), 8)));
    }
    w.num(&format!("{p}.level"), 1, &[(Variant::PastEnd, 16)])?;
    let flags = w.num(&format!("{p}.flags"), 1, &[(Variant::Unknown, 0x80)])?;
    let subs = w.num(&format!("{p}.num_sub_chunks"), 2, &[])?;
    if let Some(last) = w.out.last_mut().filter(|_| !quiet) {
        last.extras.push((Variant::PastEnd, le(subs + 1, 2)));
    }
    w.reserved(&format!("{p}.reserved"), 4)?;
    w.num(&format!("{p}.num_entries"), 8, &[])?;
    let smallest = w.num(&format!("{p}.smallest_seq"), 8, &[(Variant::PastEnd, 1 << 56)])?;
    w.num(
        &format!("{p}.largest_seq"),
        8,
        &[(Variant::Cycle, smallest.saturating_sub(1)), (Variant::PastEnd, 1 << 56)],
    )?;
    w.num(&format!("{p}.len_data"), 8, &[(Variant::PastEnd, g.slot_size * subs.max(1) + 1)])?;
    w.key(&format!("{p}.smallest_key"))?;
    w.key(&format!("{p}.largest_key"))?;
    for index in 0..subs {
        w.quiet = quiet || index > 0;
        let q = format!("{p}.sub_chunk[{index}]");
        let slot = read_le(w.bytes, w.at, 8);
        w.num(&format!("{q}.slot"), 8, &[(Variant::PastEnd, g.num_slots), (Variant::Overlap, ctx.other_slot(slot))])?;
        w.digest(&format!("{q}.digest"), slot, false)?;
    }
    w.quiet = quiet;
    if flags & u64::from(lds_format::version::meta::CHUNK_FLAG_VALUE_REFS) != 0 {
        let count = w.num(&format!("{p}.num_value_refs"), 4, &[])?;
        if let Some(last) = w.out.last_mut().filter(|_| !quiet) {
            last.extras.push((Variant::PastEnd, le(count + 1, 4)));
        }
        for index in 0..count {
            w.quiet = quiet || index > 0;
            let q = format!("{p}.value_ref[{index}]");
            let id = read_le(w.bytes, w.at, 8);
            w.num(
                &format!("{q}.value_chunk_id"),
                8,
                &[(Variant::Overlap, ctx.other_value_id(id)), (Variant::PastEnd, id + 1000)],
            )?;
            w.num(&format!("{q}.bytes"), 8, &[(Variant::PastEnd, g.slot_size)])?;
        }
        w.quiet = quiet;
    }
    if flags & u64::from(lds_format::version::meta::CHUNK_FLAG_LOG_REFS) != 0 {
        let lsn = read_le(w.bytes, w.at, 8);
        w.num(
            &format!("{p}.lsn_log_start"),
            8,
            &[(Variant::Cycle, lsn.saturating_sub(1)), (Variant::PastEnd, lsn + 1000)],
        )?;
        let ofs = read_le(w.bytes, w.at, 8);
        w.num(&format!("{p}.ofs_log_start"), 8, &[(Variant::PastEnd, g.len_backup_log), (Variant::Overlap, ofs + 4)])?;
    }
    w.quiet = false;
    Some(())
}

/// Value chunk metadata (SPEC.md §6.5).
fn value_meta(w: &mut Walker<'_>, p: &str, ctx: &Ctx<'_>, quiet: bool) -> Option<()> {
    let g = ctx.geometry();
    w.quiet = quiet;
    let id = read_le(w.bytes, w.at, 8);
    w.num(
        &format!("{p}.value_chunk_id"),
        8,
        &[(Variant::Overlap, ctx.other_value_id(id)), (Variant::PastEnd, id + 1000)],
    )?;
    let slot = read_le(w.bytes, w.at, 8);
    w.num(&format!("{p}.slot"), 8, &[(Variant::PastEnd, g.num_slots), (Variant::Overlap, ctx.other_slot(slot))])?;
    w.num(&format!("{p}.len_body"), 4, &[(Variant::PastEnd, g.slot_size - FOOTER_LEN as u64 + 1)])?;
    w.reserved(&format!("{p}.reserved"), 4)?;
    w.digest(&format!("{p}.digest"), slot, true)?;
    w.quiet = false;
    Some(())
}

/// A base version's payload (SPEC.md §6.1).
fn base_version(w: &mut Walker<'_>, p: &str, ctx: &Ctx<'_>) -> Option<()> {
    geometry(w, &format!("{p}.geometry"), ctx)?;
    let g = ctx.geometry();
    w.num(&format!("{p}.instance"), 4, &[(Variant::PastEnd, u64::from(g.instance_count))])?;
    w.num(&format!("{p}.num_levels"), 4, &[(Variant::PastEnd, 17)])?;
    w.num(&format!("{p}.last_sequence"), 8, &[(Variant::PastEnd, 1 << 56)])?;
    let generation = read_le(w.bytes, w.at, 8);
    w.num(&format!("{p}.label_generation"), 8, &[(Variant::PastEnd, generation + 1)])?;
    backup_start(w, p, ctx)?;
    let chunks = w.num(&format!("{p}.num_chunks"), 4, &[])?;
    let pointers = w.num(&format!("{p}.num_compact_pointers"), 4, &[])?;
    count_extra(w, chunks, 1, 4);
    count_extra(w, pointers, 0, 4);
    compact_pointers(w, p, pointers)?;
    for index in 0..chunks {
        chunk_meta(w, &format!("{p}.chunk[{index}]"), ctx, index > 0)?;
    }
    if w.left() == 0 {
        return Some(());
    }
    w.num(&format!("{p}.next_value_chunk_id"), 8, &[(Variant::Cycle, 1)])?;
    let count = w.num(&format!("{p}.num_value_chunks"), 4, &[])?;
    count_extra(w, count, 0, 4);
    w.reserved(&format!("{p}.values_reserved"), 4)?;
    for index in 0..count {
        value_meta(w, &format!("{p}.value_chunk[{index}]"), ctx, index > 0)?;
    }
    Some(())
}

/// `PastEnd` of a count field listed `back` fields ago: one element more than there are.
fn count_extra(w: &mut Walker<'_>, count: u64, back: usize, width: usize) {
    let len = w.out.len();
    if let Some(field) = len.checked_sub(back + 1).and_then(|index| w.out.get_mut(index)) {
        if field.kind == Kind::Num {
            field.extras.push((Variant::PastEnd, le(count + 1, width)));
        }
    }
}

/// `ofs_backup_start` and `lsn_backup_start` (SPEC.md §6.1, §6.2).
fn backup_start(w: &mut Walker<'_>, p: &str, ctx: &Ctx<'_>) -> Option<()> {
    let ofs = read_le(w.bytes, w.at, 8);
    w.num(
        &format!("{p}.ofs_backup_start"),
        8,
        &[(Variant::PastEnd, ctx.geometry().len_backup_log), (Variant::Overlap, ofs + 4)],
    )?;
    let lsn = read_le(w.bytes, w.at, 8);
    w.num(
        &format!("{p}.lsn_backup_start"),
        8,
        &[(Variant::Cycle, lsn.saturating_sub(1)), (Variant::PastEnd, lsn + 1000)],
    )?;
    Some(())
}

/// A delta version's payload (SPEC.md §6.2).
fn delta_version(w: &mut Walker<'_>, p: &str, ctx: &Ctx<'_>) -> Option<()> {
    let g = ctx.geometry();
    w.num(&format!("{p}.last_sequence"), 8, &[(Variant::PastEnd, 1 << 56)])?;
    backup_start(w, p, ctx)?;
    w.num(&format!("{p}.compaction_id"), 8, &[])?;
    let deleted = w.num(&format!("{p}.num_deleted"), 4, &[])?;
    let added = w.num(&format!("{p}.num_added"), 4, &[])?;
    let pointers = w.num(&format!("{p}.num_compact_pointers"), 4, &[])?;
    count_extra(w, deleted, 2, 4);
    count_extra(w, added, 1, 4);
    count_extra(w, pointers, 0, 4);
    w.reserved(&format!("{p}.reserved"), 4)?;
    // The first added chunk's id: deleting it too makes the delta name a chunk twice.
    let first_added = added_id(w, deleted, pointers);
    for index in 0..deleted {
        w.quiet = index > 0;
        let q = format!("{p}.deleted[{index}]");
        let id = read_le(w.bytes, w.at, 8);
        let mut extras = vec![(Variant::PastEnd, g.num_slots), (Variant::Overlap, ctx.other_slot(id))];
        extras.extend(first_added.map(|added| (Variant::Cycle, added)));
        w.num(&format!("{q}.chunk_id"), 8, &extras)?;
        w.num(&format!("{q}.level"), 1, &[(Variant::PastEnd, 16)])?;
        w.reserved(&format!("{q}.reserved"), 7)?;
    }
    w.quiet = false;
    compact_pointers(w, p, pointers)?;
    for index in 0..added {
        chunk_meta(w, &format!("{p}.added[{index}]"), ctx, index > 0)?;
    }
    if w.left() == 0 {
        return Some(());
    }
    w.num(&format!("{p}.next_value_chunk_id"), 8, &[(Variant::Cycle, 1)])?;
    let value_deleted = w.num(&format!("{p}.num_value_deleted"), 4, &[])?;
    let value_added = w.num(&format!("{p}.num_value_added"), 4, &[])?;
    count_extra(w, value_deleted, 1, 4);
    count_extra(w, value_added, 0, 4);
    for index in 0..value_deleted {
        w.quiet = index > 0;
        let id = read_le(w.bytes, w.at, 8);
        w.num(
            &format!("{p}.value_deleted[{index}]"),
            8,
            &[(Variant::Overlap, ctx.other_value_id(id)), (Variant::PastEnd, id + 1000)],
        )?;
    }
    w.quiet = false;
    for index in 0..value_added {
        value_meta(w, &format!("{p}.value_added[{index}]"), ctx, index > 0)?;
    }
    Some(())
}

/// The id of a delta's first added chunk, read ahead of the walker (past `deleted` deleted
/// chunks and `pointers` compact pointers).
fn added_id(w: &Walker<'_>, deleted: u64, pointers: u64) -> Option<u64> {
    let mut at = w.at.checked_add(usize::try_from(deleted).ok()?.checked_mul(16)?)?;
    for _ in 0..pointers {
        let len = read_le(w.bytes, at + 1, 2) as usize;
        at = at.checked_add(3 + len)?;
        if at > w.end {
            return None;
        }
    }
    (at + 8 <= w.end).then(|| read_le(w.bytes, at, 8))
}

/// A compaction journal record's payload (SPEC.md §6.3).
fn journal(w: &mut Walker<'_>, p: &str, ctx: &Ctx<'_>) -> Option<()> {
    let g = ctx.geometry();
    w.num(&format!("{p}.compaction_id"), 8, &[])?;
    let source = w.num(&format!("{p}.source_level"), 1, &[(Variant::PastEnd, 16)])?;
    w.num(&format!("{p}.target_level"), 1, &[(Variant::PastEnd, 16), (Variant::Cycle, source)])?;
    w.reserved(&format!("{p}.reserved"), 2)?;
    let inputs = w.num(&format!("{p}.num_inputs"), 4, &[])?;
    let outputs = w.num(&format!("{p}.num_outputs"), 4, &[])?;
    let cleaned = w.num(&format!("{p}.num_cleaned"), 4, &[])?;
    count_extra(w, inputs, 2, 4);
    count_extra(w, outputs, 1, 4);
    count_extra(w, cleaned, 0, 4);
    w.key(&format!("{p}.resume_key"))?;
    let first_input = read_le(w.bytes, w.at, 8);
    let second_input = read_le(w.bytes, w.at + 8, 8);
    // The first output's slot: its chunk id, after the inputs and cleaned ids.
    let output_at = w.at + 8 * (inputs + cleaned) as usize;
    let output = (output_at + 8 <= w.end).then(|| read_le(w.bytes, output_at, 8));
    for index in 0..inputs {
        w.quiet = index > 0;
        let mut extras = vec![(Variant::PastEnd, g.num_slots), (Variant::Cycle, second_input)];
        extras.extend(output.map(|slot| (Variant::Overlap, slot)));
        w.num(&format!("{p}.input[{index}]"), 8, &extras)?;
    }
    for index in 0..cleaned {
        w.quiet = index > 0;
        let id = read_le(w.bytes, w.at, 8);
        let not_input = ctx.live_slots.iter().copied().find(|&slot| slot != id && slot != first_input).unwrap_or(0);
        w.num(&format!("{p}.cleaned[{index}]"), 8, &[(Variant::PastEnd, g.num_slots), (Variant::Overlap, not_input)])?;
    }
    w.quiet = false;
    for index in 0..outputs {
        chunk_meta(w, &format!("{p}.output[{index}]"), ctx, index > 0)?;
    }
    Some(())
}

/// A value pointer (SPEC.md §8.6) at the walker's position, `len` bytes.
fn pointer(w: &mut Walker<'_>, p: &str, len: usize, ctx: &Ctx<'_>) -> Option<()> {
    let g = ctx.geometry();
    let at = w.at;
    let end = w.end;
    w.end = at + len;
    w.seals.insert(0, Seal::Pointer { file: w.file, at, len });
    let result = (|| {
        w.num(&format!("{p}.len_value"), 4, &[(Variant::PastEnd, (1 << 30) + 1)])?;
        w.skip(4)?;
        let extents = w.num(&format!("{p}.num_extents"), 2, &[])?;
        count_extra(w, extents, 0, 2);
        w.reserved(&format!("{p}.reserved"), 2)?;
        for index in 0..extents {
            w.quiet = w.quiet || index > 0;
            let q = format!("{p}.extent[{index}]");
            let id = read_le(w.bytes, w.at, 8);
            w.num(
                &format!("{q}.value_chunk_id"),
                8,
                &[(Variant::Overlap, ctx.other_value_id(id)), (Variant::PastEnd, id + 1000)],
            )?;
            let slot = read_le(w.bytes, w.at, 8);
            w.num(
                &format!("{q}.slot"),
                8,
                &[(Variant::PastEnd, g.num_slots), (Variant::Overlap, ctx.other_slot(slot))],
            )?;
            let body = g.slot_size - FOOTER_LEN as u64;
            w.num(&format!("{q}.offset"), 4, &[(Variant::PastEnd, body)])?;
            w.num(&format!("{q}.len"), 4, &[(Variant::PastEnd, body + 1)])?;
        }
        Some(())
    })();
    w.seals.remove(0);
    w.at = at + len;
    w.end = end;
    result
}

/// A log reference (SPEC.md §8.9) at the walker's position.
fn log_ref(w: &mut Walker<'_>, p: &str, ctx: &Ctx<'_>) -> Option<()> {
    let lsn = read_le(w.bytes, w.at, 8);
    w.num(&format!("{p}.lsn"), 8, &[(Variant::Cycle, lsn.saturating_sub(1)), (Variant::PastEnd, lsn + 1000)])?;
    let ofs = read_le(w.bytes, w.at, 8);
    w.num(
        &format!("{p}.ofs_object"),
        8,
        &[(Variant::PastEnd, ctx.geometry().len_backup_log), (Variant::Overlap, ofs + 8)],
    )?;
    let index = read_le(w.bytes, w.at, 4);
    w.num(&format!("{p}.entry_index"), 4, &[(Variant::PastEnd, index + 100)])?;
    let len = read_le(w.bytes, w.at, 4);
    w.num(&format!("{p}.len_value"), 4, &[(Variant::PastEnd, len + 1)])?;
    Some(())
}

/// A write batch's payload (SPEC.md §7): its header, its first entry, and the first entry
/// holding a value pointer.
fn write_batch(w: &mut Walker<'_>, p: &str, ctx: &Ctx<'_>, lsn: u64, previous_first: u64) -> Option<()> {
    w.num(&format!("{p}.first_sequence"), 8, &[(Variant::Cycle, previous_first), (Variant::PastEnd, 1 << 56)])?;
    let count = w.num(&format!("{p}.num_entries"), 4, &[])?;
    count_extra(w, count, 0, 4);
    w.num(
        &format!("{p}.synced_lsn_low"),
        4,
        &[(Variant::PastEnd, lsn & 0xffff_ffff), (Variant::Cycle, lsn.saturating_sub(1) & 0xffff_ffff)],
    )?;
    let mut pointer_listed = false;
    for index in 0..count {
        let kind = read_le(w.bytes, w.at, 1);
        let listed = index == 0 || (kind == 2 && !pointer_listed);
        w.quiet = !listed;
        let q = format!("{p}.entry[{index}]");
        w.num(&format!("{q}.kind"), 1, &[(Variant::Unknown, 3), (Variant::PastEnd, 4)])?;
        let left = w.left() as u64;
        let len_key = w.num(&format!("{q}.len_key"), 2, &[(Variant::PastEnd, left.min(0xffff))])?;
        let left = w.left() as u64;
        let len_value = w.num(&format!("{q}.len_value"), 4, &[(Variant::PastEnd, left.saturating_sub(3))])?;
        w.skip(len_key as usize)?;
        if kind == 2 && listed {
            pointer_listed = true;
            pointer(w, &format!("{q}.pointer"), len_value as usize, ctx)?;
        } else {
            w.skip(len_value as usize)?;
        }
    }
    w.quiet = false;
    Some(())
}

/// The live objects of instance 0's logs, as recovery finds them.
struct Logs {
    version: Vec<ObjectPlace>,
    version_types: Vec<ObjectType>,
    backup: Vec<ObjectPlace>,
    backup_types: Vec<ObjectType>,
    /// Each backup log object's first sequence (batches) or 0.
    backup_first: Vec<u64>,
    version_state: lds_format::version::Version,
}

fn logs(volume: &Volume, space: &Space) -> Result<Logs, CaseError> {
    let g = &space.geometry;
    let bytes = &volume.files[0];
    let area = |kind| {
        let (ofs, len) = g.log_area(kind, 0);
        (ofs as usize, len as usize)
    };
    let (vat, vlen) = area(LogKind::Version);
    let (bat, blen) = area(LogKind::Backup);
    let varea = bytes.get(vat..vat + vlen).ok_or_else(|| CaseError("the version log is past the image".into()))?;
    let barea = bytes.get(bat..bat + blen).ok_or_else(|| CaseError("the backup log is past the image".into()))?;
    let recovered = recover_instance(g, 0, varea, barea).map_err(|error| CaseError(format!("base: {error}")))?;
    let (version, version_types) = walk_area(varea, vat, g.sector());
    let (backup, backup_types) = walk_area(barea, bat, g.sector());
    let backup_first = backup
        .iter()
        .zip(&backup_types)
        .map(
            |(place, object_type)| {
                if *object_type == ObjectType::WriteBatch {
                    read_le(bytes, place.at() + HEADER_LEN, 8)
                } else {
                    0
                }
            },
        )
        .collect();
    Ok(Logs {
        version,
        version_types,
        backup,
        backup_types,
        backup_first,
        version_state: recovered.version_log.version,
    })
}

/// The objects of a log area by the physical walk of SPEC.md §15 (the left walk, and the right
/// one from a WOL's `ofs_first_live`), in area order.
fn walk_area(area: &[u8], area_at: usize, sector: u64) -> (Vec<ObjectPlace>, Vec<ObjectType>) {
    let len = area.len() as u64;
    let mut found = physical_walk(area, 0, sector);
    if let Some((first, header)) = found.first().copied() {
        if header.object_type() == Some(ObjectType::WrapLeft) {
            let start = read_le(area, first as usize + HEADER_LEN, 8);
            if start < len {
                found.extend(physical_walk(area, start, sector));
            }
        }
    }
    found.sort_by_key(|(offset, _)| *offset);
    found.dedup_by_key(|(offset, _)| *offset);
    let mut places = Vec::new();
    let mut types = Vec::new();
    for (index, (offset, header)) in found.iter().enumerate() {
        let Some(object_type) = header.object_type() else { continue };
        let (previous, previous_header) =
            if index == 0 { (*offset, header) } else { (found[index - 1].0, &found[index - 1].1) };
        let next = found.get(index + 1).map_or(len, |(next, _)| *next);
        // A WOL's "previous" is the WOR it follows, at the area's far end.
        let previous = if object_type == ObjectType::WrapLeft {
            found
                .iter()
                .filter(|(_, other)| other.object_type() == Some(ObjectType::WrapRight))
                .map(|(at, _)| *at)
                .next_back()
                .unwrap_or(previous)
        } else {
            previous
        };
        places.push(ObjectPlace {
            file: 0,
            area_at,
            area_len: area.len(),
            offset: *offset,
            previous,
            lsn: header.lsn,
            previous_lsn: previous_header.lsn,
            sn: header.sn,
            next,
        });
        types.push(object_type);
    }
    (places, types)
}

/// The context of a volume's fields.
fn context<'s>(volume: &Volume, space: &'s Space, logs: &Logs) -> Ctx<'s> {
    let version = &logs.version_state;
    let mut live_slots: Vec<u64> = version.slot_owner.keys().copied().collect();
    live_slots.sort_unstable();
    Ctx {
        space,
        live_slots,
        value_ids: version.value_chunks.keys().copied().collect(),
        device_len: volume.files[0].len() as u64,
    }
}

/// The fields of one log object: header and payload.
fn object_fields(
    volume: &Volume,
    place: &ObjectPlace,
    object_type: ObjectType,
    p: &str,
    kind: LogKind,
    ctx: &Ctx<'_>,
    first: u64,
) -> Vec<FieldRef> {
    let mut fields = object_header(volume, place, &format!("{p}.header"), kind, ctx).unwrap_or_default();
    let mut w = payload_walker(volume, place);
    let _ = match object_type {
        ObjectType::BaseVersion => base_version(&mut w, p, ctx),
        ObjectType::DeltaVersion => delta_version(&mut w, p, ctx),
        ObjectType::CompactionJournal => journal(&mut w, p, ctx),
        ObjectType::WriteBatch => write_batch(&mut w, p, ctx, place.lsn, first),
        ObjectType::WrapLeft => {
            let wor = place.previous;
            (|| {
                w.num(
                    &format!("{p}.ofs_first_live"),
                    8,
                    &[(Variant::Cycle, 0), (Variant::PastEnd, place.area_len as u64), (Variant::Overlap, wor)],
                )?;
                w.num(
                    &format!("{p}.lsn_first_live"),
                    8,
                    &[(Variant::Cycle, place.lsn), (Variant::PastEnd, place.lsn + 1)],
                )?;
                let rest = w.left();
                w.reserved(&format!("{p}.reserved"), rest)
            })()
        }
        ObjectType::WrapRight => {
            let rest = w.left();
            w.reserved(&format!("{p}.payload"), rest)
        }
    };
    fields.extend(w.finish());
    fields
}

/// Lists made to repeat an element (SPEC.md §6.2, §6.1, §6.4), the object re-encoded with
/// its checksums where it stood: a chunk's sub-chunk list naming its slot twice, a delta
/// deleting a chunk twice or adding one twice, a base version listing a chunk twice. The
/// object grows, so it may run over the object after it (overlapping it). A payload that does
/// not decode, or an object that would run past the area, gives no variant.
fn repeated_lists(
    volume: &Volume,
    place: &ObjectPlace,
    object_type: ObjectType,
    p: &str,
    ctx: &Ctx<'_>,
) -> Vec<FieldRef> {
    use lds_format::version::payload::{BaseVersion, DeltaVersion};
    let bytes = &volume.files[place.file];
    let at = place.at();
    let len = read_le(bytes, at + 40, 4) as usize;
    let Some(payload) = bytes.get(at + HEADER_LEN..at + HEADER_LEN + len) else { return Vec::new() };
    let mut variants: Vec<(String, Vec<u8>)> = Vec::new();
    match object_type {
        ObjectType::DeltaVersion => {
            let Ok(delta) = DeltaVersion::decode(payload, 0) else { return Vec::new() };
            if let Some(first) = delta.added.first() {
                let mut repeated = delta.clone();
                let mut chunk = first.clone();
                chunk.sub_chunks.push(chunk.sub_chunks[0]);
                repeated.added[0] = chunk;
                variants.push((format!("{p}.added[0].sub_chunks"), repeated.encode()));
                let mut twice = delta.clone();
                twice.added.push(first.clone());
                variants.push((format!("{p}.added"), twice.encode()));
            }
            if let Some(first) = delta.deleted.first() {
                let mut twice = delta.clone();
                twice.deleted.push(*first);
                variants.push((format!("{p}.deleted"), twice.encode()));
            }
        }
        ObjectType::BaseVersion => {
            let Ok(base) = BaseVersion::decode(payload, 0) else { return Vec::new() };
            if let Some(first) = base.chunks.first() {
                let mut twice = base.clone();
                twice.chunks.push(first.clone());
                variants.push((format!("{p}.chunks"), twice.encode()));
            }
        }
        _ => {}
    }
    let header = match lds_format::log::ObjectHeader::parse_raw(&bytes[at..at + HEADER_LEN], place.offset) {
        Ok(header) => header,
        Err(_) => return Vec::new(),
    };
    let object = lds_format::log::NewObject {
        object_type,
        kind: if ctx.space.geometry.log_area(LogKind::Version, 0).0 as usize == place.area_at {
            LogKind::Version
        } else {
            LogKind::Backup
        },
        instance: header.instance,
        sn: header.sn,
        lsn: header.lsn,
        log_offset: header.log_offset,
        volume_uuid: header.volume_uuid,
    };
    let old_len = lds_format::codec::align8((HEADER_LEN + len) as u64) as usize;
    let area_end = place.area_at + place.area_len;
    variants
        .into_iter()
        .filter_map(|(path, payload)| {
            let mut encoded = lds_format::log::encode_object(&object, &payload);
            if at + encoded.len() > area_end {
                return None;
            }
            let width = encoded.len().max(old_len);
            encoded.resize(width, 0);
            Some(FieldRef {
                path,
                file: place.file,
                at,
                width,
                kind: Kind::Whole,
                extras: vec![(Variant::Cycle, encoded)],
                also: Vec::new(),
                seals: Vec::new(),
            })
        })
        .collect()
}

/// The object of a type with the highest lsn among `places` (the lowest: `last` false).
fn pick(places: &[ObjectPlace], types: &[ObjectType], wanted: ObjectType, last: bool) -> Option<usize> {
    let matching = (0..places.len()).filter(|&index| types.get(index) == Some(&wanted));
    if last {
        matching.max_by_key(|&index| places[index].lsn)
    } else {
        matching.min_by_key(|&index| places[index].lsn)
    }
}

/// Every digest repeated in chunk and value chunk metadata of every instance's version log
/// (the physical walk of SPEC.md §15, every object whatever its checksums), with the seals of
/// their objects: what resealing a chunk rewrites.
pub fn repeated_digests(volume: &Volume, space: &Space) -> Vec<FieldRef> {
    let g = &space.geometry;
    let ctx = Ctx { space, live_slots: Vec::new(), value_ids: Vec::new(), device_len: volume.files[0].len() as u64 };
    let mut found = Vec::new();
    for instance in 0..g.instance_count.min(64) {
        let (ofs, len) = g.log_area(LogKind::Version, instance);
        let (area_at, area_len) = (ofs as usize, len as usize);
        let Some(area) = volume.files[0].get(area_at..area_at + area_len) else { continue };
        let mut positions: Vec<u64> =
            physical_walk(area, 0, g.sector()).into_iter().map(|(offset, _)| offset).collect();
        if let Some(&first) = positions.first() {
            let header = &area[first as usize..first as usize + HEADER_LEN];
            if header[8] == ObjectType::WrapLeft.code() {
                let start = read_le(area, first as usize + HEADER_LEN, 8);
                if start < len {
                    positions.extend(physical_walk(area, start, g.sector()).into_iter().map(|(offset, _)| offset));
                }
            }
        }
        positions.sort_unstable();
        positions.dedup();
        for offset in positions {
            let place = ObjectPlace {
                file: 0,
                area_at,
                area_len,
                offset,
                previous: offset,
                lsn: 0,
                previous_lsn: 0,
                sn: 0,
                next: len,
            };
            let object_type = area[offset as usize + 8];
            let Some(object_type) = ObjectType::from_code(object_type) else { continue };
            if !matches!(
                object_type,
                ObjectType::BaseVersion | ObjectType::DeltaVersion | ObjectType::CompactionJournal
            ) {
                continue;
            }
            let mut w = payload_walker(volume, &place);
            w.quiet = true;
            let _ = match object_type {
                ObjectType::BaseVersion => base_version(&mut w, "", &ctx),
                ObjectType::DeltaVersion => delta_version(&mut w, "", &ctx),
                _ => journal(&mut w, "", &ctx),
            };
            found.extend(w.finish().into_iter().filter(|field| matches!(field.kind, Kind::Digest { .. })));
        }
    }
    found
}

/// The footer, index, filter and first block trailer of the chunk in `slot` (SPEC.md §8.3).
fn chunk_fields(volume: &Volume, slot: u64, p: &str, ctx: &Ctx<'_>, sketch: bool) -> Result<Vec<FieldRef>, CaseError> {
    let g = ctx.geometry();
    let (file, base) = ctx.space.slot_at(slot).ok_or_else(|| CaseError(format!("{p}: no device holds slot {slot}")))?;
    let bytes = &volume.files[file];
    let slot_size = g.slot_size as usize;
    let footer_at = base + slot_size - FOOTER_LEN;
    let seal = vec![Seal::Chunk { slot }];
    let f = |offset: usize, width: usize| read_le(bytes, footer_at + offset, width);
    let mut fields = Vec::new();
    if !sketch {
        let mut w = Walker::new(bytes, file, footer_at, footer_at + FOOTER_LEN, seal.clone());
        let q = format!("{p}.footer");
        let _ = (|| {
            w.magic(&format!("{q}.magic"), 8)?;
            w.num(&format!("{q}.version_major"), 2, &[(Variant::PastEnd, 2)])?;
            w.num(&format!("{q}.level"), 1, &[(Variant::PastEnd, 16)])?;
            w.num(&format!("{q}.flags"), 1, &[(Variant::Unknown, 0x80)])?;
            w.num(&format!("{q}.instance"), 4, &[(Variant::PastEnd, u64::from(g.instance_count))])?;
            w.num(
                &format!("{q}.chunk_id"),
                8,
                &[(Variant::PastEnd, g.num_slots), (Variant::Overlap, ctx.other_slot(slot))],
            )?;
            let subs = f(26, 2);
            w.num(&format!("{q}.sub_chunk_index"), 2, &[(Variant::PastEnd, subs)])?;
            w.num(&format!("{q}.num_sub_chunks"), 2, &[(Variant::PastEnd, subs + 1)])?;
            let blocks = f(28, 4);
            w.num(&format!("{q}.num_blocks"), 4, &[(Variant::PastEnd, blocks + 1)])?;
            let entries = f(32, 8);
            w.num(&format!("{q}.num_entries"), 8, &[(Variant::PastEnd, entries + 1)])?;
            let smallest = w.num(&format!("{q}.smallest_seq"), 8, &[(Variant::PastEnd, 1 << 56)])?;
            w.num(
                &format!("{q}.largest_seq"),
                8,
                &[(Variant::Cycle, smallest.saturating_sub(1)), (Variant::PastEnd, 1 << 56)],
            )?;
            let ofs_index = f(60, 4);
            w.num(
                &format!("{q}.len_body"),
                4,
                &[(Variant::PastEnd, ofs_index + 1), (Variant::Overlap, slot_size as u64)],
            )?;
            w.num(&format!("{q}.ofs_index"), 4, &[(Variant::Overlap, 0), (Variant::PastEnd, slot_size as u64)])?;
            w.num(&format!("{q}.len_index"), 4, &[(Variant::PastEnd, slot_size as u64)])?;
            w.skip(4)?;
            w.num(
                &format!("{q}.ofs_filter"),
                4,
                &[(Variant::Overlap, ofs_index), (Variant::PastEnd, slot_size as u64)],
            )?;
            w.num(&format!("{q}.len_filter"), 4, &[(Variant::PastEnd, slot_size as u64)])?;
            w.skip(4)?;
            w.num(&format!("{q}.slot_size"), 4, &[(Variant::PastEnd, 2 * slot_size as u64)])?;
            w.uuid(&format!("{q}.volume_uuid"), &[(Variant::Other, FOREIGN_UUID)])?;
            w.skip(32)?;
            w.num(&format!("{q}.ofs_sketch"), 4, &[(Variant::Overlap, 0), (Variant::PastEnd, slot_size as u64)])?;
            w.num(&format!("{q}.len_sketch"), 4, &[(Variant::PastEnd, slot_size as u64)])?;
            w.skip(4)?;
            w.reserved(&format!("{q}.reserved"), 8)
        })();
        fields.extend(w.finish());
        // The block index: its first and last entries.
        let (ofs_index, len_index) = (f(60, 4) as usize, f(64, 4) as usize);
        let index_end = (ofs_index + len_index).min(slot_size - FOOTER_LEN);
        let mut w = Walker::new(bytes, file, base + ofs_index, base + index_end, seal.clone());
        let blocks = f(28, 4);
        let mut block0 = None;
        for index in 0..blocks {
            w.quiet = index > 0 && index + 1 < blocks;
            let q = format!("{p}.index[{}]", if index == 0 { "0".to_string() } else { "last".to_string() });
            let next = read_le(bytes, w.at + 18 + read_le(bytes, w.at + 16, 2) as usize, 4);
            let Some(ofs) =
                w.num(&format!("{q}.ofs_block"), 4, &[(Variant::PastEnd, slot_size as u64), (Variant::Overlap, next)])
            else {
                break;
            };
            let Some(len) = w.num(&format!("{q}.len_block"), 4, &[(Variant::PastEnd, slot_size as u64)]) else { break };
            if index == 0 {
                block0 = Some((ofs as usize, len as usize));
                if let Some(last) = w.out.last_mut() {
                    last.extras.push((
                        Variant::Overlap,
                        le(len + read_le(bytes, w.at + 10 + read_le(bytes, w.at + 8, 2) as usize, 4), 4),
                    ));
                }
            }
            let seq_kind = read_le(bytes, w.at, 8);
            if w.num(&format!("{q}.last_seq_kind"), 8, &[(Variant::Unknown, (seq_kind & !0xff) | 4)]).is_none() {
                break;
            }
            if w.key(&format!("{q}.last_key")).is_none() {
                break;
            }
        }
        fields.extend(w.finish());
        // The filter's header.
        let (ofs_filter, len_filter) = (f(72, 4) as usize, f(76, 4) as usize);
        let mut w =
            Walker::new(bytes, file, base + ofs_filter, base + (ofs_filter + len_filter).min(slot_size), seal.clone());
        let _ = (|| {
            w.num(&format!("{p}.filter.num_probes"), 1, &[(Variant::PastEnd, 31)])?;
            w.reserved(&format!("{p}.filter.reserved"), 3)?;
            w.num(
                &format!("{p}.filter.num_bits"),
                4,
                &[(Variant::PastEnd, (len_filter as u64).saturating_sub(8) * 8 + 8)],
            )
        })();
        fields.extend(w.finish());
        // Block 0's trailer.
        if let Some((ofs, len)) = block0.filter(|(ofs, len)| *len >= 8 && ofs + len <= slot_size) {
            let trailer = base + ofs + len - 8;
            let block_seal = vec![Seal::Block { file, at: base + ofs, len }, Seal::Chunk { slot }];
            let mut w = Walker::new(bytes, file, trailer, trailer + 4, block_seal);
            let count = read_le(bytes, trailer, 4);
            let _ = w.num(
                &format!("{p}.block[0].num_entries"),
                4,
                &[(Variant::PastEnd, (count & 0x7fff_ffff) + 1), (Variant::Unknown, count ^ 0x8000_0000)],
            );
            fields.extend(w.finish());
        }
    }
    let (ofs_sketch, len_sketch) = (f(136, 4) as usize, f(140, 4) as usize);
    if sketch && len_sketch >= 4 && ofs_sketch + len_sketch <= slot_size {
        let mut w = Walker::new(bytes, file, base + ofs_sketch, base + ofs_sketch + len_sketch, seal);
        let _ = (|| {
            w.num(&format!("{p}.sketch.precision"), 1, &[(Variant::PastEnd, 17), (Variant::Overlap, 16)])?;
            w.reserved(&format!("{p}.sketch.reserved"), 3)
        })();
        fields.extend(w.finish());
    }
    Ok(fields)
}

/// The entries of the chunk in `slot` (fixed blocks only): the first entry, and the first
/// holding a value pointer and the first holding a log reference, with their fields.
fn entry_fields(volume: &Volume, slot: u64, p: &str, ctx: &Ctx<'_>) -> Result<Vec<FieldRef>, CaseError> {
    let g = ctx.geometry();
    let (file, base) = ctx.space.slot_at(slot).ok_or_else(|| CaseError(format!("{p}: no device holds slot {slot}")))?;
    let bytes = &volume.files[file];
    let slot_size = g.slot_size as usize;
    let footer_at = base + slot_size - FOOTER_LEN;
    let (ofs_index, len_index) =
        (read_le(bytes, footer_at + 60, 4) as usize, read_le(bytes, footer_at + 64, 4) as usize);
    let blocks = read_le(bytes, footer_at + 28, 4);
    let mut fields = Vec::new();
    let (mut first, mut pointer_done, mut log_ref_done) = (true, false, false);
    let mut at_index = base + ofs_index;
    let index_end = (base + ofs_index + len_index).min(footer_at);
    for number in 0..blocks {
        if at_index + 18 > index_end {
            break;
        }
        let ofs = read_le(bytes, at_index, 4) as usize;
        let len = read_le(bytes, at_index + 4, 4) as usize;
        at_index += 18 + read_le(bytes, at_index + 16, 2) as usize;
        if len < 8 || ofs + len > slot_size {
            break;
        }
        let block_at = base + ofs;
        let count = read_le(bytes, block_at + len - 8, 4);
        if count & 0x8000_0000 != 0 {
            // A compact block (SPEC.md §8.2): varint entries, not walked here.
            break;
        }
        let seals = vec![Seal::Block { file, at: block_at, len }, Seal::Chunk { slot }];
        let mut w = Walker::new(bytes, file, block_at, block_at + len - 8, seals);
        for index in 0..count {
            let kind = read_le(bytes, w.at, 1);
            let listed = first || (kind == 2 && !pointer_done) || (kind == 3 && !log_ref_done);
            w.quiet = !listed;
            let q = format!("{p}.block[{number}].entry[{index}]");
            let seq_kind = read_le(bytes, w.at, 8);
            let next_seq_kind = read_le(
                bytes,
                w.at + 14 + read_le(bytes, w.at + 8, 2) as usize + read_le(bytes, w.at + 10, 4) as usize,
                8,
            );
            let left = w.left() as u64;
            if w.num(
                &format!("{q}.seq_kind"),
                8,
                &[(Variant::Unknown, (seq_kind & !0xff) | 4), (Variant::Cycle, next_seq_kind)],
            )
            .is_none()
            {
                break;
            }
            let Some(len_key) = w.num(&format!("{q}.len_key"), 2, &[(Variant::PastEnd, left.min(0xffff))]) else {
                break;
            };
            let left = w.left() as u64;
            let Some(len_value) = w.num(&format!("{q}.len_value"), 4, &[(Variant::PastEnd, left)]) else { break };
            if w.skip(len_key as usize).is_none() {
                break;
            }
            let done = match kind {
                2 if listed => {
                    pointer_done = true;
                    pointer(&mut w, &format!("{q}.pointer"), len_value as usize, ctx)
                }
                3 if listed => {
                    log_ref_done = true;
                    let end = w.at + len_value as usize;
                    let result = log_ref(&mut w, &format!("{q}.log_ref"), ctx);
                    w.at = end;
                    result
                }
                _ => w.skip(len_value as usize),
            };
            first = false;
            if done.is_none() {
                break;
            }
        }
        fields.extend(w.finish());
        if pointer_done && log_ref_done {
            break;
        }
    }
    Ok(fields)
}

/// The footer of the value chunk in `slot` (SPEC.md §8.6).
fn value_chunk_fields(volume: &Volume, slot: u64, p: &str, ctx: &Ctx<'_>) -> Result<Vec<FieldRef>, CaseError> {
    let g = ctx.geometry();
    let (file, base) = ctx.space.slot_at(slot).ok_or_else(|| CaseError(format!("{p}: no device holds slot {slot}")))?;
    let bytes = &volume.files[file];
    let footer_at = base + g.slot_size as usize - FOOTER_LEN;
    let mut w = Walker::new(bytes, file, footer_at, footer_at + FOOTER_LEN, vec![Seal::ValueChunk { slot }]);
    let id = read_le(bytes, footer_at + 16, 8);
    let _ = (|| {
        w.magic(&format!("{p}.magic"), 8)?;
        w.num(&format!("{p}.version_major"), 2, &[(Variant::PastEnd, 2)])?;
        w.reserved(&format!("{p}.reserved_10"), 1)?;
        w.num(&format!("{p}.flags"), 1, &[(Variant::Unknown, 0x80)])?;
        w.num(&format!("{p}.instance"), 4, &[(Variant::PastEnd, u64::from(g.instance_count))])?;
        w.num(
            &format!("{p}.value_chunk_id"),
            8,
            &[(Variant::Overlap, ctx.other_value_id(id)), (Variant::PastEnd, id + 1000)],
        )?;
        w.num(&format!("{p}.len_body"), 4, &[(Variant::PastEnd, g.slot_size - FOOTER_LEN as u64 + 1)])?;
        w.num(&format!("{p}.slot_size"), 4, &[(Variant::PastEnd, 2 * g.slot_size)])?;
        w.uuid(&format!("{p}.volume_uuid"), &[(Variant::Other, FOREIGN_UUID)])?;
        w.skip(32)?;
        w.reserved(&format!("{p}.reserved"), 76)
    })();
    Ok(w.finish())
}

/// The live chunk a base's chunk cases are about: one of a single sub-chunk, preferring a log
/// chunk, then one with value references, then one with a key sketch, then one on a device
/// other than the first, then the deepest.
fn chosen_chunk(version: &lds_format::version::Version, space: &Space, volume: &Volume) -> Option<u64> {
    let candidates: Vec<&lds_format::version::meta::ChunkMeta> =
        version.chunks.values().filter(|meta| meta.sub_chunks.len() == 1).collect();
    let has_sketch = |meta: &&&lds_format::version::meta::ChunkMeta| {
        space.slot_at(meta.chunk_id).is_some_and(|(file, base)| {
            let footer = base + space.geometry.slot_size as usize - FOOTER_LEN;
            read_le(&volume.files[file], footer + 140, 4) > 0
        })
    };
    let on_other_device =
        |meta: &&&lds_format::version::meta::ChunkMeta| space.slot_at(meta.chunk_id).is_some_and(|(file, _)| file > 0);
    candidates
        .iter()
        .find(|meta| meta.is_log_chunk())
        .or_else(|| candidates.iter().find(|meta| !meta.value_refs.is_empty()))
        .or_else(|| candidates.iter().find(has_sketch))
        .or_else(|| candidates.iter().find(on_other_device))
        .or_else(|| candidates.iter().max_by_key(|meta| (meta.level, meta.chunk_id)))
        .map(|meta| meta.chunk_id)
}

/// The fields of one group of structures of `volume`.
pub fn group(group: Group, volume: &Volume, space: &Space) -> Result<Vec<FieldRef>, CaseError> {
    let logs = logs(volume, space)?;
    let ctx = context(volume, space, &logs);
    let mut fields = Vec::new();
    let version_object = |index: Option<usize>, p: &str| -> Vec<FieldRef> {
        index.map_or_else(Vec::new, |index| {
            let (place, object_type) = (&logs.version[index], logs.version_types[index]);
            let mut fields = object_fields(volume, place, object_type, p, LogKind::Version, &ctx, 0);
            fields.extend(repeated_lists(volume, place, object_type, p, &ctx));
            fields
        })
    };
    let backup_object = |index: Option<usize>, p: &str| -> Vec<FieldRef> {
        index.map_or_else(Vec::new, |index| {
            // The batch before it in lsn order: its first sequence repeated is a cycle.
            let previous_first = (0..logs.backup.len())
                .filter(|&other| logs.backup[other].lsn < logs.backup[index].lsn && logs.backup_first[other] > 0)
                .max_by_key(|&other| logs.backup[other].lsn)
                .map_or(0, |other| logs.backup_first[other]);
            object_fields(
                volume,
                &logs.backup[index],
                logs.backup_types[index],
                p,
                LogKind::Backup,
                &ctx,
                previous_first,
            )
        })
    };
    match group {
        Group::Label => fields.extend(both_labels(volume, 0, "label", &ctx)?),
        Group::DeviceTable => {
            // The first device's table was listed with its label; the second device's labels.
            if volume.devices > 1 {
                fields.extend(
                    both_labels(volume, 1, "device1.label", &ctx)?
                        .into_iter()
                        .filter(|field| field.path.contains(".devices.")),
                );
            }
        }
        Group::VersionLog => {
            let bv = pick(&logs.version, &logs.version_types, ObjectType::BaseVersion, true);
            fields.extend(version_object(bv, "vlog.bv"));
            // The last delta version that adds a chunk (else the last one).
            let dv = (0..logs.version.len())
                .filter(|&index| {
                    logs.version_types[index] == ObjectType::DeltaVersion
                        && read_le(&volume.files[0], logs.version[index].at() + HEADER_LEN + 36, 4) > 0
                })
                .max_by_key(|&index| logs.version[index].lsn);
            let dv = dv.or_else(|| pick(&logs.version, &logs.version_types, ObjectType::DeltaVersion, true));
            fields.extend(version_object(dv, "vlog.dv"));
        }
        Group::Journal => {
            fields.extend(version_object(
                pick(&logs.version, &logs.version_types, ObjectType::CompactionJournal, true),
                "vlog.cj",
            ));
        }
        Group::Wraps => {
            fields.extend(version_object(
                pick(&logs.version, &logs.version_types, ObjectType::WrapLeft, true),
                "vlog.wol",
            ));
            fields.extend(version_object(
                pick(&logs.version, &logs.version_types, ObjectType::WrapRight, true),
                "vlog.wor",
            ));
            fields
                .extend(backup_object(pick(&logs.backup, &logs.backup_types, ObjectType::WrapLeft, true), "blog.wol"));
            fields
                .extend(backup_object(pick(&logs.backup, &logs.backup_types, ObjectType::WrapRight, true), "blog.wor"));
        }
        Group::BackupLog => {
            fields
                .extend(backup_object(pick(&logs.backup, &logs.backup_types, ObjectType::WriteBatch, true), "blog.wb"));
            // A batch holding a value pointer, when the log has one.
            let with_pointer = (0..logs.backup.len())
                .filter(|&index| {
                    logs.backup_types[index] == ObjectType::WriteBatch
                        && batch_has_pointer(&volume.files[0], &logs.backup[index])
                })
                .max_by_key(|&index| logs.backup[index].lsn);
            fields.extend(
                backup_object(with_pointer, "blog.wb_pointer")
                    .into_iter()
                    .filter(|field| field.path.contains(".pointer.")),
            );
        }
        Group::Chunk | Group::Entries | Group::Sketch => {
            let sketch = group == Group::Sketch;
            let slot = chosen_chunk(&logs.version_state, space, volume)
                .ok_or_else(|| CaseError(format!("{group:?}: the base has no chunk to craft")))?;
            let p = "chunk[live]";
            if group == Group::Entries {
                fields.extend(entry_fields(volume, slot, p, &ctx)?);
            } else {
                fields.extend(chunk_fields(volume, slot, p, &ctx, sketch)?);
            }
        }
        Group::ValueChunk => {
            let meta = logs
                .version_state
                .value_chunks
                .values()
                .next()
                .ok_or_else(|| CaseError("the base has no value chunk".into()))?;
            fields.extend(value_chunk_fields(volume, meta.slot, "value_chunk[0].footer", &ctx)?);
        }
        Group::Undo => {
            let file = volume.undo_index().ok_or_else(|| CaseError("the base has no undo file".into()))?;
            fields.extend(super::undo::fields(&volume.files[file], file));
        }
    }
    Ok(fields)
}

/// True when the write batch at `place` holds a pointer entry (kind 2).
fn batch_has_pointer(bytes: &[u8], place: &ObjectPlace) -> bool {
    let at = place.at() + HEADER_LEN;
    let end = at + read_le(bytes, place.at() + 40, 4) as usize;
    let count = read_le(bytes, at + 8, 4);
    let mut cursor = at + 16;
    for _ in 0..count {
        if cursor + 7 > end {
            return false;
        }
        if bytes[cursor] == 2 {
            return true;
        }
        cursor += 7 + read_le(bytes, cursor + 1, 2) as usize + read_le(bytes, cursor + 3, 4) as usize;
    }
    false
}
