//! Chunks a version names with metadata that contradicts it (a slot past the slot area, an id
//! another live chunk has), found intact in other slots by their footers, so that repair
//! keeps them instead of writing over them (docs/safety.md).

use std::collections::{BTreeMap, BTreeSet};

use lds_format::chunk::footer::{Footer, FOOTER_LEN};
use lds_format::geometry::Geometry;
use lds_format::version::meta::ChunkMeta;
use lds_volume::block::read_tolerant;
use lds_volume::{BlockDevice, DeviceError};

/// Where each of `metas` (chunks a version names with metadata that contradicts it) lies
/// intact, if anywhere outside `taken`: the slots whose footers are its sub-chunks' (this
/// volume and instance, the chunk's level, each sub-chunk's index and count, the digest the
/// metadata records for it), the first of them the chunk id every one of those footers
/// names. The metadata is returned with those slots and that id.
pub(super) fn locate_left_out(
    device: &dyn BlockDevice,
    geometry: &Geometry,
    instance: u32,
    metas: &[&ChunkMeta],
    taken: &BTreeSet<u64>,
) -> Result<Vec<Option<ChunkMeta>>, DeviceError> {
    if metas.is_empty() {
        return Ok(Vec::new());
    }
    // The footers of this instance in the free slots, by digest (one read of a footer each).
    let mut by_digest: BTreeMap<[u8; 32], Vec<(u64, Footer)>> = BTreeMap::new();
    for slot in (0..geometry.num_slots).filter(|slot| !taken.contains(slot)) {
        let footer_offset = geometry.slot_offset(slot) + geometry.slot_size - FOOTER_LEN as u64;
        let (bytes, unreadable) = read_tolerant(device, footer_offset, FOOTER_LEN as u64, geometry.sector())?;
        if !unreadable.is_empty() {
            continue;
        }
        let Ok(footer) = Footer::decode(&bytes, footer_offset, geometry.slot_size) else { continue };
        if footer.volume_uuid == geometry.volume_uuid && footer.instance == instance {
            by_digest.entry(footer.digest).or_default().push((slot, footer));
        }
    }
    let mut claimed: BTreeSet<u64> = BTreeSet::new();
    let mut located = Vec::with_capacity(metas.len());
    for meta in metas {
        let count = meta.sub_chunks.len();
        let mut slots = Vec::with_capacity(count);
        for (index, sub_chunk) in meta.sub_chunks.iter().enumerate() {
            // The chunk id is the slot of the first sub-chunk: a candidate whose footer names
            // another (a copy of the same bytes left by another chunk) is passed over for the
            // next one, never taken.
            let found = by_digest.get(&sub_chunk.digest).and_then(|candidates| {
                candidates.iter().find(|(slot, footer)| {
                    !claimed.contains(slot)
                        && !slots.contains(slot)
                        && footer.level == meta.level
                        && usize::from(footer.sub_chunk_index) == index
                        && usize::from(footer.num_sub_chunks) == count
                        && footer.chunk_id == slots.first().copied().unwrap_or(*slot)
                })
            });
            match found {
                Some((slot, _)) => slots.push(*slot),
                None => break,
            }
        }
        // Every sub-chunk found, each footer naming the first one's slot as the chunk id.
        if slots.len() != count || count == 0 {
            located.push(None);
            continue;
        }
        claimed.extend(slots.iter().copied());
        let mut found = (*meta).clone();
        found.chunk_id = slots[0];
        for (sub_chunk, slot) in found.sub_chunks.iter_mut().zip(&slots) {
            sub_chunk.slot = *slot;
        }
        located.push(Some(found));
    }
    Ok(located)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lds_format::algorithms::image::ImageBuilder;
    use lds_format::algorithms::pack::{place_group, ChunkFormat, ChunkPacker};
    use lds_format::entry::EntryKind;
    use lds_format::geometry::{plan_layout, LayoutRequest};
    use lds_format::label::Label;

    fn expect<T, E: std::fmt::Display>(result: Result<T, E>) -> T {
        result.unwrap_or_else(|error| panic!("{error}"))
    }

    /// A chunk of two sub-chunks lies intact in slots 2 and 3; slot 1 holds a copy of its
    /// second sub-chunk whose footer names another chunk id (9), its checksum recomputed and
    /// its digest left as it was (as a hostile volume's can be). The search passes over slot 1
    /// and finds slots 2 and 3.
    #[test]
    fn a_sub_chunk_whose_footer_names_another_chunk_is_passed_over() {
        let request = LayoutRequest {
            volume_len: 4 << 20,
            sector_size: Some(4096),
            slot_size: Some(64 << 10),
            ..Default::default()
        };
        let mut image = ImageBuilder::format(Label::new(expect(plan_layout(&request, [0x5b; 16])), "left out"));
        let geometry = image.label.geometry;
        let pack = || {
            let mut packer = ChunkPacker::new(ChunkFormat::new(&geometry, 0, 4096, 10));
            for index in 0..40u64 {
                packer.push(format!("key{index:03}").as_bytes(), 100 + index, EntryKind::Put, &[index as u8; 2500]);
            }
            packer.finish().into_iter().map(|packed| packed.chunk).collect::<Vec<_>>()
        };
        let mut chunk = pack();
        assert_eq!(chunk.len(), 2, "the entries fill two sub-chunks");
        let meta = place_group(&mut chunk, &[2, 3], 1, 1).unwrap_or_else(|| panic!("placed"));
        let mut copy = chunk[1].slot_image();
        let at = copy.len() - FOOTER_LEN;
        let mut footer = expect(Footer::decode(&copy[at..], 0, geometry.slot_size));
        footer.chunk_id = 9;
        copy[at..].copy_from_slice(&footer.encode());
        let mut put = |slot: u64, bytes: Vec<u8>| {
            let at = geometry.slot_offset(slot) as usize;
            image.bytes[at..at + bytes.len()].copy_from_slice(&bytes);
        };
        put(1, copy);
        put(2, chunk[0].slot_image());
        put(3, chunk[1].slot_image());
        let path = std::env::temp_dir().join(format!("lds-repair-left-out-{}.img", std::process::id()));
        expect(std::fs::write(&path, &image.bytes));
        let device = expect(lds_volume::Device::open(&path, lds_volume::OpenMode::ReadOnly));
        // The version names the chunk with a slot past the slot area.
        let mut named = meta.clone();
        named.chunk_id = geometry.num_slots + 5;
        for (sub_chunk, slot) in named.sub_chunks.iter_mut().zip(geometry.num_slots + 5..) {
            sub_chunk.slot = slot;
        }
        let located = expect(locate_left_out(&device, &geometry, 0, &[&named], &BTreeSet::new()));
        let found = located.first().cloned().flatten();
        assert_eq!(found.as_ref().map(|found| found.slots().collect::<Vec<_>>()), Some(vec![2, 3]), "{found:?}");
        assert_eq!(found.map(|found| found.chunk_id), Some(2));
        // Without the right second sub-chunk the chunk is not found whole: the copy of
        // another chunk is never taken.
        drop(device);
        let mut without = image.bytes.clone();
        let at = geometry.slot_offset(3) as usize;
        without[at..at + geometry.slot_size as usize].fill(0);
        expect(std::fs::write(&path, &without));
        let device = expect(lds_volume::Device::open(&path, lds_volume::OpenMode::ReadOnly));
        let located = expect(locate_left_out(&device, &geometry, 0, &[&named], &BTreeSet::new()));
        assert_eq!(located, vec![None]);
        drop(device);
        let _ = std::fs::remove_file(&path);
    }
}
