//! The chunks in the slot area (SPEC.md §8): a chunk's footer, index, filter, block trailer and
//! entries, and a value chunk's footer.

use lds_format::chunk::footer::FOOTER_LEN;

use super::super::walker::{Walker, FOREIGN_UUID};
use super::super::{le, read_le, CaseError, FieldRef, Seal, Variant, Volume};
use super::payloads::{log_ref, pointer};
use super::Ctx;

/// The footer, index, filter and first block trailer of the chunk in `slot` (SPEC.md §8.3).
pub(super) fn chunk_fields(
    volume: &Volume,
    slot: u64,
    p: &str,
    ctx: &Ctx<'_>,
    sketch: bool,
) -> Result<Vec<FieldRef>, CaseError> {
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
pub(super) fn entry_fields(volume: &Volume, slot: u64, p: &str, ctx: &Ctx<'_>) -> Result<Vec<FieldRef>, CaseError> {
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
pub(super) fn value_chunk_fields(
    volume: &Volume,
    slot: u64,
    p: &str,
    ctx: &Ctx<'_>,
) -> Result<Vec<FieldRef>, CaseError> {
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
