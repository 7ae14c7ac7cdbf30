//! The logs (SPEC.md §5, §15): the objects recovery finds live in instance 0's logs, each
//! object's header and payload fields, lists made to repeat an element, and the digests chunk
//! metadata repeats.

use lds_format::algorithms::instance::recover_instance;
use lds_format::algorithms::recovery::physical_walk;
use lds_format::geometry::LogKind;
use lds_format::log::{ObjectType, HEADER_LEN};

use super::super::walker::{Walker, FOREIGN_UUID};
use super::super::{read_le, CaseError, FieldRef, Kind, Seal, Space, Variant, Volume};
use super::payloads::{base_version, delta_version, journal, write_batch};
use super::Ctx;

/// The header of the log object at `at` (SPEC.md §5) and the seals of its fields.
pub(super) struct ObjectPlace {
    pub(super) file: usize,
    pub(super) area_at: usize,
    pub(super) area_len: usize,
    /// Area offset of the object.
    pub(super) offset: u64,
    /// Area offset of the object before it in its chain (its own offset for the first).
    pub(super) previous: u64,
    /// Its lsn and the previous object's.
    pub(super) lsn: u64,
    pub(super) previous_lsn: u64,
    pub(super) sn: u64,
    /// Where the object after it starts (area offset), or the area's end.
    pub(super) next: u64,
}

impl ObjectPlace {
    pub(super) fn at(&self) -> usize {
        self.area_at + self.offset as usize
    }

    pub(super) fn seal(&self) -> Seal {
        Seal::Object { file: self.file, area_at: self.area_at, area_len: self.area_len, at: self.at() }
    }
}

pub(super) fn object_header(
    volume: &Volume,
    place: &ObjectPlace,
    p: &str,
    kind: LogKind,
    ctx: &Ctx<'_>,
) -> Option<Vec<FieldRef>> {
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
pub(super) fn payload_walker<'a>(volume: &'a Volume, place: &ObjectPlace) -> Walker<'a> {
    let bytes = &volume.files[place.file];
    let at = place.at();
    let len = read_le(bytes, at + 40, 4) as usize;
    Walker::new(bytes, place.file, at + HEADER_LEN, at + HEADER_LEN + len, vec![place.seal()])
}

/// The live objects of instance 0's logs, as recovery finds them.
pub(super) struct Logs {
    pub(super) version: Vec<ObjectPlace>,
    pub(super) version_types: Vec<ObjectType>,
    pub(super) backup: Vec<ObjectPlace>,
    pub(super) backup_types: Vec<ObjectType>,
    /// Each backup log object's first sequence (batches) or 0.
    pub(super) backup_first: Vec<u64>,
    pub(super) version_state: lds_format::version::Version,
}

pub(super) fn logs(volume: &Volume, space: &Space) -> Result<Logs, CaseError> {
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
pub(super) fn walk_area(area: &[u8], area_at: usize, sector: u64) -> (Vec<ObjectPlace>, Vec<ObjectType>) {
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

/// The fields of one log object: header and payload.
pub(super) fn object_fields(
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
pub(super) fn repeated_lists(
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
pub(super) fn pick(places: &[ObjectPlace], types: &[ObjectType], wanted: ObjectType, last: bool) -> Option<usize> {
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

/// True when the write batch at `place` holds a pointer entry (kind 2).
pub(super) fn batch_has_pointer(bytes: &[u8], place: &ObjectPlace) -> bool {
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
