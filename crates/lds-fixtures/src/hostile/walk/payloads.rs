//! The payloads of log objects (SPEC.md §6, §7): base and delta versions, their chunk and
//! value chunk metadata, compaction journal records, write batches with their value pointers
//! and log references.

use lds_format::chunk::footer::FOOTER_LEN;

use super::super::walker::Walker;
use super::super::{le, read_le, Kind, Seal, Variant};
use super::labels::geometry;
use super::Ctx;

/// Compact pointers (SPEC.md §6.1): the first one's fields.
pub(super) fn compact_pointers(w: &mut Walker<'_>, p: &str, count: u64) -> Option<()> {
    for index in 0..count {
        w.quiet = index > 0;
        w.num(&format!("{p}.compact_pointer[{index}].level"), 1, &[(Variant::PastEnd, 16)])?;
        w.key(&format!("{p}.compact_pointer[{index}].key"))?;
    }
    w.quiet = false;
    Some(())
}

/// One chunk metadata (SPEC.md §6.4).
pub(super) fn chunk_meta(w: &mut Walker<'_>, p: &str, ctx: &Ctx<'_>, quiet: bool) -> Option<()> {
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
pub(super) fn value_meta(w: &mut Walker<'_>, p: &str, ctx: &Ctx<'_>, quiet: bool) -> Option<()> {
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
pub(super) fn base_version(w: &mut Walker<'_>, p: &str, ctx: &Ctx<'_>) -> Option<()> {
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
pub(super) fn count_extra(w: &mut Walker<'_>, count: u64, back: usize, width: usize) {
    let len = w.out.len();
    if let Some(field) = len.checked_sub(back + 1).and_then(|index| w.out.get_mut(index)) {
        if field.kind == Kind::Num {
            field.extras.push((Variant::PastEnd, le(count + 1, width)));
        }
    }
}

/// `ofs_backup_start` and `lsn_backup_start` (SPEC.md §6.1, §6.2).
pub(super) fn backup_start(w: &mut Walker<'_>, p: &str, ctx: &Ctx<'_>) -> Option<()> {
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
pub(super) fn delta_version(w: &mut Walker<'_>, p: &str, ctx: &Ctx<'_>) -> Option<()> {
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
pub(super) fn added_id(w: &Walker<'_>, deleted: u64, pointers: u64) -> Option<u64> {
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
pub(super) fn journal(w: &mut Walker<'_>, p: &str, ctx: &Ctx<'_>) -> Option<()> {
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
pub(super) fn pointer(w: &mut Walker<'_>, p: &str, len: usize, ctx: &Ctx<'_>) -> Option<()> {
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
pub(super) fn log_ref(w: &mut Walker<'_>, p: &str, ctx: &Ctx<'_>) -> Option<()> {
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
pub(super) fn write_batch(w: &mut Walker<'_>, p: &str, ctx: &Ctx<'_>, lsn: u64, previous_first: u64) -> Option<()> {
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
