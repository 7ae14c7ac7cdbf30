//! The labels (SPEC.md §4): the geometry, the device table, both copies of each device's
//! label.

use lds_format::label::{Label, LABEL_LEN};

use super::super::walker::{Walker, FOREIGN_UUID};
use super::super::{CaseError, FieldRef, Seal, Variant, Volume};
use super::Ctx;

/// The geometry (SPEC.md §4.1) at the walker's position.
pub(super) fn geometry(w: &mut Walker<'_>, p: &str, ctx: &Ctx<'_>) -> Option<()> {
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
pub(super) fn device_table(w: &mut Walker<'_>, p: &str, label: &Label, ctx: &Ctx<'_>, len_this: u64) -> Option<()> {
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
pub(super) fn label_fields(volume: &Volume, file: usize, at: usize, p: &str, ctx: &Ctx<'_>) -> Option<Vec<FieldRef>> {
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
pub(super) fn both_labels(volume: &Volume, file: usize, p: &str, ctx: &Ctx<'_>) -> Result<Vec<FieldRef>, CaseError> {
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
