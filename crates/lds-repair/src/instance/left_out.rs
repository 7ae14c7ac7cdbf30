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
            let found = by_digest.get(&sub_chunk.digest).and_then(|candidates| {
                candidates.iter().find(|(slot, footer)| {
                    !claimed.contains(slot)
                        && !slots.contains(slot)
                        && footer.level == meta.level
                        && usize::from(footer.sub_chunk_index) == index
                        && usize::from(footer.num_sub_chunks) == count
                })
            });
            match found {
                Some((slot, footer)) => {
                    slots.push(*slot);
                    if footer.chunk_id != slots[0] {
                        break;
                    }
                }
                None => break,
            }
        }
        let whole = slots.len() == count
            && count > 0
            && by_digest.get(&meta.sub_chunks[0].digest).is_some_and(|candidates| {
                candidates.iter().any(|(slot, footer)| *slot == slots[0] && footer.chunk_id == slots[0])
            });
        if !whole {
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
