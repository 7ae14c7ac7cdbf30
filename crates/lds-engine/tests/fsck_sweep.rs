//! Guards fsck's coverage: one byte flipped in each metadata sector of a golden volume
//! (both labels, every sector of both logs, every referenced chunk's tail) and fsck either
//! reports a problem or the volume reads exactly as before (the byte was unused). fsck never
//! panics.

use lds_check::{check, CheckOptions};
use lds_format::algorithms::recovery::{recover_backup_log, recover_version_log};
use lds_format::batch::decode_entries;
use lds_format::chunk::view::SubChunkView;
use lds_format::geometry::LogKind;
use lds_format::log::{area_context, read_object};
use lds_volume::{read_labels, MemoryImage, ReadAt};

/// Everything a reader can observe: each instance's version, the batches recovery replays,
/// and every referenced chunk's entries.
fn observable(bytes: &[u8]) -> String {
    let image = MemoryImage(bytes);
    let Ok(labels) = read_labels(&image) else { return "unreadable labels".into() };
    let Ok((_, label)) = labels.choose() else { return "no label".into() };
    let geometry = label.geometry;
    let mut seen = format!("{geometry:?}\n");
    for instance in 0..geometry.instance_count {
        let context = area_context(&geometry, LogKind::Version, instance);
        let Ok(area) = image.read_vec(context.ofs_area, context.len_area) else { return "short".into() };
        let state = match recover_version_log(&area, &context) {
            Ok(state) => state,
            Err(error) => return format!("version log: {error}"),
        };
        seen += &format!("{:?}\n{:?}\n", state.version.chunks, state.unfinished_compactions);
        let backup_context = area_context(&geometry, LogKind::Backup, instance);
        let Ok(backup_area) = image.read_vec(backup_context.ofs_area, backup_context.len_area) else {
            return "short".into();
        };
        let version = &state.version;
        match recover_backup_log(
            &backup_area,
            &backup_context,
            version.ofs_backup_start,
            version.lsn_backup_start,
            version.last_sequence,
            state.sn,
        ) {
            Ok(backup) => {
                for batch in &backup.batches {
                    let Ok(raw) = read_object(&backup_area, batch.offset, &backup_context) else {
                        return "batch".into();
                    };
                    let _ = decode_entries(raw.payload, 0, |kind, key, value| {
                        seen += &format!("{kind:?} {key:?} {value:?}\n")
                    });
                }
            }
            Err(error) => return format!("backup log: {error}"),
        }
        for chunk in version.chunks.values() {
            for slot in chunk.slots() {
                let offset = geometry.slot_offset(slot);
                let Ok(slot_image) = image.read_vec(offset, geometry.slot_size) else { return "short".into() };
                match SubChunkView::open(&slot_image, offset)
                    .and_then(|view| view.entries(offset).map(|entries| format!("{entries:?}")))
                {
                    Ok(entries) => seen += &entries,
                    Err(error) => return format!("chunk {slot}: {error}"),
                }
            }
        }
    }
    seen
}

/// The sectors to sweep: labels, both logs of every instance, and referenced chunk tails.
fn metadata_sectors(bytes: &[u8]) -> Vec<(u64, u64)> {
    let image = MemoryImage(bytes);
    let labels = read_labels(&image).unwrap_or_else(|error| panic!("{error}"));
    let (_, label) = labels.choose().unwrap_or_else(|_| panic!("no label"));
    let geometry = label.geometry;
    let sector = geometry.sector();
    let mut sectors = vec![(0, sector), (geometry.ofs_backup_label(), sector)];
    for instance in 0..geometry.instance_count {
        for kind in [LogKind::Version, LogKind::Backup] {
            let (offset, len) = geometry.log_area(kind, instance);
            sectors.extend((0..len / sector).map(|index| (offset + index * sector, sector)));
        }
        let context = area_context(&geometry, LogKind::Version, instance);
        let area = image.read_vec(context.ofs_area, context.len_area).unwrap_or_else(|error| panic!("{error}"));
        let state = recover_version_log(&area, &context).unwrap_or_else(|error| panic!("{error}"));
        for slot in state.version.chunks.values().flat_map(|chunk| chunk.slots().collect::<Vec<_>>()) {
            let offset = geometry.slot_offset(slot);
            let slot_image = image.read_vec(offset, geometry.slot_size).unwrap_or_else(|error| panic!("{error}"));
            let view = SubChunkView::open(&slot_image, offset).unwrap_or_else(|error| panic!("{error}"));
            let tail_start = u64::from(view.footer.ofs_index) / sector * sector;
            sectors.extend(
                (tail_start / sector..geometry.slot_size / sector).map(|index| (offset + index * sector, sector)),
            );
        }
    }
    sectors
}

fn sweep(name: &str) -> (usize, usize, usize) {
    let original = lds_fixtures::load(name);
    let reference = observable(&original);
    // The clean image's own findings (info lines); a flip is reported when fsck says more.
    let baseline = check(&MemoryImage(&original), CheckOptions { deep: true, ..Default::default() }, &mut |_, _| {})
        .unwrap_or_else(|error| panic!("{error}"))
        .problems;
    assert!(
        baseline.iter().all(|problem| problem.code.severity() == lds_check::Severity::Info),
        "{name} is not clean: {baseline:?}"
    );
    let (mut reported, mut unused, mut runs) = (0, 0, 0);
    for (offset, len) in metadata_sectors(&original) {
        for position in [0, 7, 13, 64, 100, 257, 511, len - 1] {
            if position >= len {
                continue;
            }
            let at = (offset + position) as usize;
            let mut bytes = original.clone();
            bytes[at] ^= 0x01 << (at % 8);
            runs += 1;
            let report = check(&MemoryImage(&bytes), CheckOptions { deep: true, ..Default::default() }, &mut |_, _| {});
            let found = match &report {
                Ok(report) => report.problems != baseline,
                Err(_) => true,
            };
            if found {
                reported += 1;
            } else {
                assert!(
                    observable(&bytes) == reference,
                    "{name}: a flip at byte {at} changed what readers see but fsck reported nothing"
                );
                unused += 1;
            }
        }
    }
    (runs, reported, unused)
}

#[test]
fn every_metadata_flip_is_reported_or_harmless() {
    for name in ["d_versions", "d_wrapped", "d_journal", "d_two_instances"] {
        let (runs, reported, unused) = sweep(name);
        eprintln!("{name}: {runs} flips, {reported} reported, {unused} in unused bytes");
        assert!(reported > 0 && unused > 0, "{name}: the sweep should hit both used and unused bytes");
    }
}
