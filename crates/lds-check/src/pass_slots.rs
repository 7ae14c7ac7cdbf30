//! Pass 5: the online map over every instance (SPEC.md §9.4: a slot referenced twice is an
//! error), and free slots that still hold chunks of this volume.

use lds_format::algorithms::recovery::online_map as build_online_map;
use lds_format::chunk::footer::{Footer, FOOTER_LEN};
use lds_format::geometry::Geometry;
use lds_format::version::meta::ChunkMeta;
use lds_volume::{DeviceError, ReadAt};

use crate::problem::{Code, Report};
use crate::{CheckError, Tree};

/// The online map of every recovered tree; a slot two instances use is reported, and the map
/// then marks every referenced slot so that the other passes go on.
pub(crate) fn online_map(geometry: &Geometry, trees: &[Tree], report: &mut Report) -> Vec<bool> {
    let versions = trees.iter().map(|tree| {
        let state = &tree.recovery.version_log;
        (tree.instance, &state.version, &state.unfinished_compactions)
    });
    let map = match build_online_map(geometry.num_slots, versions) {
        Ok(map) => map,
        Err(conflict) => {
            report.add(
                Code::SlotReferencedTwice,
                format!("slot {}", conflict.slot),
                geometry.slot_offset(conflict.slot),
                format!("referenced by instances {} and {}", conflict.instances.0, conflict.instances.1),
            );
            let mut map = vec![false; geometry.num_slots as usize];
            for tree in trees {
                for slot in tree.recovery.version_log.version.chunks.values().flat_map(ChunkMeta::slots) {
                    if let Some(bit) = map.get_mut(slot as usize) {
                        *bit = true;
                    }
                }
            }
            map
        }
    };
    report.summary.slots_in_use = map.iter().filter(|&&used| used).count() as u64;
    map
}

/// Threads reading free slots' footers: a queue of small reads is much faster than one at a
/// time on most devices.
const FOOTER_READERS: usize = 8;

/// Free slots at or above which the footers are read by `FOOTER_READERS` threads; fewer are
/// read inline (threads cost more than they save there; the crash simulator checks
/// thousands of tiny volumes).
pub(crate) const THREADED_FREE_SLOTS_MIN: usize = FOOTER_READERS * 32;

/// Counts free slots holding chunks of this volume (one info line).
pub(crate) fn check_free_slots(
    device: &(impl ReadAt + Sync + ?Sized),
    geometry: &Geometry,
    map: &[bool],
    report: &mut Report,
) -> Result<(), CheckError> {
    let free: Vec<u64> = (0..geometry.num_slots).filter(|&slot| !map[slot as usize]).collect();
    let scan = |slots: &[u64]| -> Result<Vec<u64>, DeviceError> {
        let mut stale = Vec::new();
        for &slot in slots {
            let offset = geometry.slot_offset(slot) + geometry.slot_size - FOOTER_LEN as u64;
            // A free slot whose footer cannot be read holds nothing reads can reach.
            let Ok(bytes) = device.read_vec(offset, FOOTER_LEN as u64) else { continue };
            if Footer::decode(&bytes, offset, geometry.slot_size)
                .is_ok_and(|footer| footer.volume_uuid == geometry.volume_uuid)
            {
                stale.push(slot);
            }
        }
        Ok(stale)
    };
    let found: Vec<Result<Vec<u64>, DeviceError>> = if free.len() < THREADED_FREE_SLOTS_MIN {
        vec![scan(&free)]
    } else {
        let per_thread = free.len().div_ceil(FOOTER_READERS).max(1);
        std::thread::scope(|scope| {
            let workers: Vec<_> = free.chunks(per_thread).map(|slots| scope.spawn(move || scan(slots))).collect();
            workers.into_iter().map(|worker| worker.join().unwrap_or_else(|_| Ok(Vec::new()))).collect()
        })
    };
    let mut stale = Vec::new();
    for part in found {
        stale.extend(part?);
    }
    if let Some(&first) = stale.first() {
        let listed: Vec<String> = stale.iter().take(8).map(u64::to_string).collect();
        let more = if stale.len() > 8 { format!(" and {} more", stale.len() - 8) } else { String::new() };
        report.add(
            Code::StaleChunksInFreeSlots,
            "slot area",
            geometry.slot_offset(first),
            format!("{} free slots hold chunks no version references (slots {}{more}): freed, or written by a flush or compaction that never committed; reused on allocation", stale.len(), listed.join(", ")),
        );
    }
    Ok(())
}
