//! The `image` target (docs/reliability.md L1, F9, I6): the input is a whole volume image (or a
//! gzip of one). It goes through everything that reads a volume: both labels, recovery of
//! both logs of every instance, `fsck --deep`, every `lds dump` view, and the engine (open,
//! get, scan). It runs as given and again with every checksum repaired, so that mutations
//! reach the code behind the checksums.
//!
//! Oracles, for a volume fsck finds clean (no error or warning): every dump view succeeds; the
//! engine opens it, scans it, and `get` agrees with the scan; a synced put and a flush are
//! then durable (I1) and leave the volume clean (I3).

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use lds_check::{check, CheckOptions};
use lds_cli::dump::{run_on, DumpOptions, DumpWhat};
use lds_engine::{Db, WriteOptions};
use lds_format::label::Label;
use lds_sim::sim_device::SimDevice;
use lds_sim::workload::options;
use lds_volume::{read_labels, MemoryImage};

use crate::fixup;

/// A gzip input decompresses to at most this many bytes.
const GUNZIP_LEN_MAX: u64 = 16 << 20;
/// Entries a scan of a damaged volume reads.
const SCAN_LEN_MAX: usize = 64;
/// Instances whose per-instance dumps run.
const DUMPED_INSTANCES_MAX: u32 = 2;
/// Chunks dumped with their entries.
const DUMPED_CHUNKS_MAX: usize = 4;
/// The key the write oracle puts.
const WRITTEN_KEY: &[u8] = b"written-by-the-fuzzer";

pub(crate) fn gunzip(data: &[u8]) -> Option<Vec<u8>> {
    if !data.starts_with(&[0x1f, 0x8b]) {
        return None;
    }
    let mut image = Vec::new();
    flate2::read::GzDecoder::new(data).take(GUNZIP_LEN_MAX).read_to_end(&mut image).ok()?;
    Some(image)
}

/// `image`: see the module documentation.
pub fn image(data: &[u8]) {
    let image = gunzip(data).unwrap_or_else(|| data.to_vec());
    check_image(&image);
    let mut repaired = image.clone();
    fixup::image(&mut repaired);
    if repaired != image {
        check_image(&repaired);
    }
}

/// What the format crate's recovery makes of the volume: the chosen label, and whether every
/// instance recovers with at most one unfinished compaction (which the engine resumes, SPEC.md
/// §12) and a backup log without damage.
fn recover(image: &[u8]) -> Option<(Label, bool)> {
    let labels = read_labels(&MemoryImage(image)).ok()?;
    let label = labels.choose().ok()?.1.clone();
    let geometry = label.geometry;
    if geometry.volume_len > image.len() as u64 {
        return Some((label, false));
    }
    let mut resumable = true;
    for instance in 0..geometry.instance_count {
        let Ok((_, recovery)) = lds_volume::inspect::recover(&MemoryImage(image), &geometry, instance) else {
            resumable = false;
            continue;
        };
        let Ok(recovery) = recovery else {
            resumable = false;
            continue;
        };
        // An unfinished journaled compaction resumes (SPEC.md §12); two are damage.
        resumable &= recovery.version_log.unfinished_compactions.len() <= 1;
        resumable &= recovery.backup_state().is_some();
    }
    Some((label, resumable))
}

/// fsck finds no error or warning.
fn fsck_clean(image: &[u8]) -> bool {
    match check(&MemoryImage(image), CheckOptions { deep: true, ..Default::default() }, &mut |_, _| {}) {
        Ok(report) => {
            for problem in &report.problems {
                let _ = lds_cli::fsck::problem_line(problem);
            }
            report.exit_code() == 0
        }
        Err(_) => false,
    }
}

fn check_image(image: &[u8]) {
    let recovered = recover(image);
    let clean = fsck_clean(image);
    let instance_count = recovered.as_ref().map_or(1, |(label, _)| label.geometry.instance_count);
    dump_everything(image, instance_count, clean);
    let writable = recovered.as_ref().is_some_and(|(label, resumable)| *resumable && label.writable());
    engine(image, clean && writable);
}

fn dump_everything(image: &[u8], instance_count: u32, clean: bool) {
    let device = MemoryImage(image);
    let dump = |what: DumpWhat, instance: u32, json: bool| {
        let options = DumpOptions {
            path: "fuzzed image".into(),
            what,
            instance,
            json,
            entries: true,
            wait: std::time::Duration::ZERO,
        };
        let mut err = Vec::new();
        let code = run_on(&device, &options, &mut std::io::sink(), &mut err);
        assert!(
            !clean || code == 0,
            "image: fsck finds the volume clean but lds dump {:?} of instance {instance} fails: {}",
            options.what,
            String::from_utf8_lossy(&err)
        );
    };
    // The human volume view runs every other human view on every instance.
    dump(DumpWhat::Volume, 0, false);
    for instance in 0..instance_count.min(DUMPED_INSTANCES_MAX) {
        for what in [DumpWhat::Label, DumpWhat::Volume, DumpWhat::VersionLog, DumpWhat::BackupLog, DumpWhat::Slots] {
            if instance == 0 || matches!(what, DumpWhat::VersionLog | DumpWhat::BackupLog) {
                dump(what, instance, true);
            }
        }
        dump(DumpWhat::Tree, instance, true);
    }
    // The chunks the live version of instance 0 references.
    if let Ok(labels) = read_labels(&device) {
        if let Ok((_, label)) = labels.choose() {
            if let Ok((_, Ok(recovery))) = lds_volume::inspect::recover(&device, &label.geometry, 0) {
                for &chunk_id in recovery.version_log.version.chunks.keys().take(DUMPED_CHUNKS_MAX) {
                    dump(DumpWhat::Chunk(chunk_id), 0, false);
                    dump(DumpWhat::Chunk(chunk_id), 0, true);
                    // Log references followed into the backup log (SPEC.md §8.9).
                    dump(DumpWhat::ChunkResolved(chunk_id), 0, true);
                }
            }
        }
    }
}

fn engine(image: &[u8], clean: bool) {
    let device = SimDevice::new(image.to_vec());
    let opened = Db::open_device(Arc::new(device.clone()), Path::new("fuzzed image"), options(true));
    let db = match opened {
        Ok((db, _)) => db,
        Err(error) => {
            assert!(!clean, "image: fsck finds the volume clean but the engine cannot open it: {error}");
            return;
        }
    };
    let _ = db.get(b"key-00");
    match db.iter() {
        Ok(entries) => {
            for (number, entry) in entries.enumerate() {
                match entry {
                    Ok((key, value)) if clean => {
                        let got = db.get(&key);
                        assert!(
                            matches!(&got, Ok(Some(found)) if *found == value),
                            "image: a scan shows a key that get reads differently ({got:?}) on a clean volume"
                        );
                    }
                    Ok(_) => {}
                    Err(error) => assert!(!clean, "image: scanning a clean volume fails: {error}"),
                }
                if !clean && number >= SCAN_LEN_MAX {
                    break;
                }
            }
        }
        Err(error) => assert!(!clean, "image: a scan of a clean volume cannot start: {error}"),
    }
    if !clean {
        let _ = db.close();
        return;
    }
    let written = db.put(WRITTEN_KEY, b"value", WriteOptions { sync: true }).and_then(|()| db.flush());
    let closed = db.close();
    if written.is_err() || closed.is_err() {
        return;
    }
    let durable = device.durable(device_sector(image));
    assert!(fsck_clean(&durable), "image: a clean volume is not clean after a put, a flush and a close");
    let device = SimDevice::new(durable);
    let (db, _) = Db::open_device(Arc::new(device), Path::new("fuzzed image"), options(true)).unwrap_or_else(|error| {
        panic!("image: a clean volume does not open after a put, a flush and a close: {error}")
    });
    let got = db.get(WRITTEN_KEY);
    assert!(matches!(&got, Ok(Some(value)) if value == b"value"), "image: a synced and flushed put is lost: {got:?}");
}

fn device_sector(image: &[u8]) -> u64 {
    read_labels(&MemoryImage(image))
        .ok()
        .and_then(|labels| labels.choose().ok().map(|(_, label)| label.geometry.sector()))
        .unwrap_or(512)
}

#[cfg(test)]
mod tests {
    #[test]
    fn seed_images_are_clean_so_that_the_oracles_apply() {
        let images: Vec<_> = crate::seeds::all().into_iter().filter(|seed| seed.target == "image").collect();
        assert!(images.len() >= 5);
        for seed in images {
            assert!(super::fsck_clean(&seed.bytes), "{}: fsck is not clean", seed.name);
            let recovered = super::recover(&seed.bytes);
            let resumable = recovered.is_some_and(|(label, resumable)| resumable && label.writable());
            assert!(resumable, "{}: the engine cannot take writes on a seed", seed.name);
        }
    }
}
