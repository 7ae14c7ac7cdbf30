//! Checksum repair, so that afl's mutations reach the code behind each checksum. A target
//! runs on its input as given (which exercises the checksum checks) and again repaired (which
//! exercises everything they guard). Where each checksum lies and what it covers is SPEC.md's:
//! §4 the label, §5 log objects, §8.2 blocks, §8.3 the footer, index, filter and digest, §8.6
//! value chunk footers (and a value pointer's counts); docs/undo-file.md's for undo files.

use std::ops::Range;

use lds_format::chunk::block::BLOCK_TRAILER_LEN;
use lds_format::chunk::footer::{Footer, FOOTER_LEN};
use lds_format::chunk::index::decode_index;
use lds_format::codec::crc32c;
use lds_format::geometry::{LogKind, SECTOR_SIZE_MAX, SECTOR_SIZE_MIN};
use lds_format::label::{Label, LABEL_LEN, LABEL_MAGIC};
use lds_format::log::{HEADER_LEN, OBJECT_MAGIC};
use lds_format::value::{EXTENT_LEN, POINTER_FIXED_LEN, VALUE_FOOTER_LEN};

/// SPEC.md §4: the label's crc32c is its last field and covers every byte before it.
const LABEL_CRC_AT: usize = LABEL_LEN - 4;
/// SPEC.md §5: `header_crc32c` follows the magic and covers the rest of the header.
const HEADER_CRC_AT: usize = 4;
/// SPEC.md §5: where the header's checksum coverage starts.
const HEADER_CRC_COVERS_FROM: usize = 8;
/// SPEC.md §5: `len_payload`.
const LEN_PAYLOAD_AT: usize = 40;
/// SPEC.md §5: `payload_crc32c`.
const PAYLOAD_CRC_AT: usize = 44;

fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

/// Repairs the checksum of a label at the start of `bytes` (nothing if it is shorter).
pub(crate) fn label(bytes: &mut [u8]) {
    if bytes.len() >= LABEL_LEN {
        let crc = crc32c(&bytes[..LABEL_CRC_AT]);
        put_u32(bytes, LABEL_CRC_AT, crc);
    }
}

/// Repairs the header and payload checksums of the object at `offset` of `area`.
pub(crate) fn log_object(area: &mut [u8], offset: usize) {
    let Some(header_end) = offset.checked_add(HEADER_LEN).filter(|&end| end <= area.len()) else {
        return;
    };
    let at = offset + LEN_PAYLOAD_AT;
    let len_payload = u32::from_le_bytes([area[at], area[at + 1], area[at + 2], area[at + 3]]) as usize;
    if let Some(payload_end) = header_end.checked_add(len_payload).filter(|&end| end <= area.len()) {
        let crc = crc32c(&area[header_end..payload_end]);
        put_u32(area, offset + PAYLOAD_CRC_AT, crc);
    }
    let crc = crc32c(&area[offset + HEADER_CRC_COVERS_FROM..header_end]);
    put_u32(area, offset + HEADER_CRC_AT, crc);
}

/// Repairs every object of a log area: each 8-byte aligned position that starts with the
/// object magic, whether or not it is on a chain.
pub(crate) fn log_area(area: &mut [u8]) {
    let mut offset = 0;
    while offset + HEADER_LEN <= area.len() {
        if area[offset..offset + OBJECT_MAGIC.len()] == OBJECT_MAGIC {
            log_object(area, offset);
        }
        offset += 8;
    }
}

/// Repairs a block's trailer checksum (SPEC.md §8.2: the last four bytes).
pub(crate) fn block(block: &mut [u8]) {
    if block.len() >= BLOCK_TRAILER_LEN {
        let at = block.len() - 4;
        let crc = crc32c(&block[..at]);
        put_u32(block, at, crc);
    }
}

fn span(start: u32, len: u32, limit: usize) -> Option<Range<usize>> {
    let start = start as usize;
    let end = start.checked_add(len as usize)?;
    (end <= limit).then_some(start..end)
}

/// Repairs a whole slot: the index and filter checksums, the checksum of every block the
/// index lists, the digest and the footer checksum. The footer is re-encoded from its fields
/// (reserved bytes become zero).
pub(crate) fn slot(slot: &mut [u8]) {
    if slot.len() < FOOTER_LEN {
        return;
    }
    let footer_at = slot.len() - FOOTER_LEN;
    let Ok(mut footer) = Footer::parse_raw(&slot[footer_at..], 0) else {
        return;
    };
    let index = span(footer.ofs_index, footer.len_index, footer_at);
    if let Some(index) = &index {
        footer.index_crc32c = crc32c(&slot[index.clone()]);
    }
    if let Some(filter) = span(footer.ofs_filter, footer.len_filter, footer_at) {
        footer.filter_crc32c = crc32c(&slot[filter]);
    }
    if let Some(index) = index {
        if let Ok(entries) = decode_index(&slot[index], 0, &footer) {
            for entry in entries {
                if let Some(range) = span(entry.ofs_block, entry.len_block, footer_at) {
                    block(&mut slot[range]);
                }
            }
        }
    }
    let body_end = footer.len_body as usize;
    let tail_start = footer.ofs_index as usize;
    if body_end <= footer_at && tail_start <= footer_at {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&slot[..body_end]);
        hasher.update(&slot[tail_start..footer_at]);
        hasher.update(&footer.encode_digest_covered());
        footer.digest = *hasher.finalize().as_bytes();
    }
    slot[footer_at..].copy_from_slice(&footer.encode());
}

fn range(offset: u64, len: u64, limit: usize) -> Option<Range<usize>> {
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    (end <= limit).then_some(start..end)
}

/// Repairs a whole image: both labels, every object of every log area and every slot that
/// holds a footer, wherever the (repaired) primary label places them.
pub(crate) fn image(image: &mut [u8]) {
    let has_label_magic = |bytes: &[u8]| bytes.len() >= LABEL_LEN && bytes[..LABEL_MAGIC.len()] == LABEL_MAGIC;
    if has_label_magic(image) {
        label(image);
    }
    let primary = Label::decode(image, 0).ok();
    let backup_offsets: Vec<u64> = match &primary {
        Some(primary) => vec![primary.geometry.ofs_backup_label()],
        None => {
            let mut sizes = Vec::new();
            let mut sector = SECTOR_SIZE_MIN;
            while sector <= SECTOR_SIZE_MAX {
                sizes.push((image.len() as u64).saturating_sub(u64::from(sector)));
                sector *= 2;
            }
            sizes
        }
    };
    for offset in backup_offsets {
        if let Some(range) = range(offset, LABEL_LEN as u64, image.len()) {
            if has_label_magic(&image[range.clone()]) {
                label(&mut image[range]);
            }
        }
    }
    let Some(geometry) = primary.map(|label| label.geometry) else {
        return;
    };
    for instance in 0..geometry.instance_count {
        for kind in [LogKind::Version, LogKind::Backup] {
            let (offset, len) = geometry.log_area(kind, instance);
            if let Some(area) = range(offset, len, image.len()) {
                log_area(&mut image[area]);
            }
        }
    }
    for slot_number in 0..geometry.num_slots {
        let Some(slot_range) = range(geometry.slot_offset(slot_number), geometry.slot_size, image.len()) else {
            break;
        };
        let bytes = &mut image[slot_range];
        if Footer::has_magic(&bytes[bytes.len() - FOOTER_LEN..]) {
            slot(bytes);
        }
    }
}

/// Repairs a value chunk footer at the start of `bytes` (SPEC.md §8.6: `footer_crc32c`, its
/// last field, covers the 156 bytes before it).
pub(crate) fn value_footer(bytes: &mut [u8]) {
    if bytes.len() >= VALUE_FOOTER_LEN {
        let at = VALUE_FOOTER_LEN - 4;
        let crc = crc32c(&bytes[..at]);
        put_u32(bytes, at, crc);
    }
}

/// SPEC.md §8.6: a value pointer's `len_value`, `num_extents`, and where its extents start.
const POINTER_LEN_VALUE_AT: usize = 0;
const POINTER_NUM_EXTENTS_AT: usize = 8;
/// An extent's `len` within it.
const EXTENT_LEN_AT: usize = 20;

/// Repairs the counts of a value pointer (the nearest it has to a checksum): `num_extents`
/// from its length (when that is 12 + 24n) and `len_value` the sum of its extents' lengths
/// (when it fits 32 bits).
pub(crate) fn value_pointer(bytes: &mut [u8]) {
    let Some(extents) = bytes.len().checked_sub(POINTER_FIXED_LEN) else { return };
    if extents % EXTENT_LEN != 0 || extents / EXTENT_LEN > usize::from(u16::MAX) {
        return;
    }
    let count = extents / EXTENT_LEN;
    bytes[POINTER_NUM_EXTENTS_AT..POINTER_NUM_EXTENTS_AT + 2].copy_from_slice(&(count as u16).to_le_bytes());
    let total: u64 = (0..count)
        .map(|index| {
            let at = POINTER_FIXED_LEN + index * EXTENT_LEN + EXTENT_LEN_AT;
            u64::from(u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]))
        })
        .sum();
    if let Ok(total) = u32::try_from(total) {
        put_u32(bytes, POINTER_LEN_VALUE_AT, total);
    }
}

/// Repairs the checksums and digests of an undo file (docs/undo-file.md, LDSUNDO2): the
/// header's, the state block's, every record's and every batch's, as a writer would have
/// written them over these bytes (`lds_volume::undo::reseal`). Bytes of another format are
/// left as they are.
pub(crate) fn undo_file(bytes: &mut [u8]) {
    lds_volume::undo::reseal(bytes);
}

#[cfg(test)]
mod tests {
    use lds_format::algorithms::recovery::physical_walk;
    use lds_format::geometry::LogKind;
    use lds_format::label::Label;
    use lds_format::log::{area_context, read_object};

    use super::{EXTENT_LEN_AT, POINTER_FIXED_LEN, POINTER_NUM_EXTENTS_AT, VALUE_FOOTER_LEN};
    use crate::seeds;

    fn seed_image(name: &str) -> Vec<u8> {
        let seed = seeds::all().into_iter().find(|seed| seed.target == "image" && seed.name == name);
        seed.unwrap_or_else(|| panic!("no seed image {name}")).bytes
    }

    #[test]
    fn repairing_a_valid_image_changes_nothing() {
        for name in ["trimmed", "wrapped", "journal"] {
            let image = seed_image(name);
            let mut repaired = image.clone();
            super::image(&mut repaired);
            assert!(repaired == image, "{name}: the repair computes other checksums than the encoders");
        }
    }

    #[test]
    fn a_repaired_object_reads_again_with_its_changed_payload() {
        let mut image = seed_image("wrapped");
        let geometry = Label::decode(&image, 0).unwrap_or_else(|error| panic!("{error}")).geometry;
        let (offset, len) = geometry.log_area(LogKind::Backup, 0);
        let area = &mut image[offset as usize..(offset + len) as usize];
        let context = area_context(&geometry, LogKind::Backup, 0);
        let walked = physical_walk(area, 0, 512);
        assert!(walked.len() > 3, "the seed's backup log has objects");
        let (object_offset, header) = walked[2];
        let at = object_offset as usize + 64 + header.len_payload as usize - 1;
        area[at] ^= 0x40;
        assert!(read_object(area, object_offset, &context).is_err(), "a flipped payload byte goes unnoticed");
        super::log_area(area);
        let repaired = read_object(area, object_offset, &context).unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(repaired.payload.last().copied(), Some(area[at]));
    }

    fn seeds_of(target: &str) -> Vec<Vec<u8>> {
        seeds::all().into_iter().filter(|seed| seed.target == target).map(|seed| seed.bytes).collect()
    }

    #[test]
    fn a_repaired_undo_file_parses_again_with_its_changed_bytes() {
        let name = std::path::Path::new("undo");
        for bytes in seeds_of("undo_file") {
            let mut repaired = bytes.clone();
            super::undo_file(&mut repaired);
            assert!(repaired == bytes, "the repair computes other checksums than UndoLog");
            let file = lds_volume::undo::UndoFile::parse(&bytes, name).unwrap_or_else(|error| panic!("{error}"));
            let (&offset, original) = file.originals.iter().next().unwrap_or_else(|| panic!("a saved sector"));
            // The first saved sector's first byte, found by its bytes (records follow the header).
            let at = bytes.windows(original.len()).position(|window| window == &original[..]).unwrap_or(0);
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            let refused = lds_volume::undo::UndoFile::parse(&damaged, name);
            assert!(refused.is_err(), "a changed saved sector passes its record's checksum");
            super::undo_file(&mut damaged);
            let again = lds_volume::undo::UndoFile::parse(&damaged, name).unwrap_or_else(|error| panic!("{error}"));
            assert_eq!(again.torn_tail, file.torn_tail);
            assert_eq!(again.originals.get(&offset).map(|sector| sector[0]), Some(original[0] ^ 0x40));
        }
    }

    #[test]
    fn a_repaired_value_footer_and_pointer_decode_again() {
        for input in seeds_of("value_footer") {
            let slot_size = lds_format::geometry::SLOT_SIZE_MIN << input[0];
            let mut footer = input[1..1 + VALUE_FOOTER_LEN].to_vec();
            let decoded = lds_format::value::ValueFooter::decode(&footer, 0, slot_size);
            let decoded = decoded.unwrap_or_else(|error| panic!("{error}"));
            footer[16] ^= 0x40;
            assert!(lds_format::value::ValueFooter::decode(&footer, 0, slot_size).is_err());
            super::value_footer(&mut footer);
            let again = lds_format::value::ValueFooter::decode(&footer, 0, slot_size);
            assert_eq!(again.map(|footer| footer.value_chunk_id), Ok(decoded.value_chunk_id ^ 0x40));
        }
        for mut pointer in seeds_of("value_pointer") {
            let at = POINTER_FIXED_LEN + EXTENT_LEN_AT;
            pointer[at] = pointer[at].wrapping_add(1).max(1);
            pointer[POINTER_NUM_EXTENTS_AT] ^= 0x10;
            super::value_pointer(&mut pointer);
            let decoded = lds_format::value::ValuePointer::decode(&pointer, 0);
            assert!(decoded.is_ok(), "{decoded:?}");
        }
    }

    #[test]
    fn a_repaired_slot_opens_and_verifies() {
        let image = seed_image("flushed");
        let geometry = Label::decode(&image, 0).unwrap_or_else(|error| panic!("{error}")).geometry;
        let start = geometry.slot_offset(0) as usize;
        let mut slot = image[start..start + geometry.slot_size as usize].to_vec();
        let footer =
            lds_format::chunk::view::SubChunkView::open(&slot, 0).unwrap_or_else(|error| panic!("{error}")).footer;
        slot[footer.len_body as usize / 2] ^= 1;
        slot[footer.ofs_filter as usize + 8] ^= 0x10;
        assert!(lds_format::chunk::view::SubChunkView::open(&slot, 0).is_err(), "a flipped filter bit goes unnoticed");
        super::slot(&mut slot);
        let view = lds_format::chunk::view::SubChunkView::open(&slot, 0);
        let view = view.unwrap_or_else(|error| panic!("the repaired tail does not open: {error}"));
        view.verify_digest(0).unwrap_or_else(|error| panic!("the repaired digest does not verify: {error}"));
    }
}
