//! The `repair` target (issue: offline repair; docs/reliability.md L1): the input is a volume
//! image (or a gzip of one), run as given and again with every checksum repaired (so that
//! mutations reach the code behind the checksums). `repair -y` runs on it through an undo log.
//!
//! Oracles: repair returns (an error or a report) without panicking; an error leaves the image
//! as it was; after a repair that corrected everything (exit 1) fsck is clean and a second
//! `repair -y` finds nothing to do (it converges); whatever repair wrote, the undo file
//! restores the image byte for byte; and I10 (docs/reliability.md), in its form for any
//! input: every put `lds salvage` reads from the image is read by salvage of the repaired
//! image at the same or a newer sequence number, or named in the report's dropped ranges.

use std::path::Path;
use std::sync::Arc;

use lds_repair::{repair, Mode, RepairOptions};
use lds_sim::salvage_oracle::{kept_for_salvage, lost_ranges, salvage_image};
use lds_sim::sim_device::SimDevice;
use lds_volume::undo::{undo, volume_uuid_of, MemorySink, UndoDevice, UndoFile, UndoHeader, UndoLog};

use crate::fixup;
use crate::image::gunzip;

/// Images larger than this are not repaired (a mutated length field can ask for a huge one).
const IMAGE_LEN_MAX: usize = 16 << 20;

/// `repair`: see the module documentation.
pub fn repair_target(data: &[u8]) {
    let image = gunzip(data).unwrap_or_else(|| data.to_vec());
    if image.len() > IMAGE_LEN_MAX {
        return;
    }
    check(&image);
    let mut repaired = image.clone();
    fixup::image(&mut repaired);
    if repaired != image {
        check(&repaired);
    }
}

fn check(image: &[u8]) {
    let device = SimDevice::new(image.to_vec());
    let sink = MemorySink::default();
    // As the tools do: the header names the volume; with no valid label the log refuses the
    // first write, and repair, which writes only with a label, has nothing to write then.
    let header = UndoHeader {
        volume_uuid: volume_uuid_of(&device).unwrap_or([0; 16]),
        device_len: image.len() as u64,
        sector_size: 512,
        tool: "repair".into(),
        created: 0,
    };
    let log = UndoLog::with_sink(Box::new(sink.clone()), Path::new("undo file in memory"), header);
    let undo_device = UndoDevice::new(Arc::new(device.clone()), log);
    // I10: what salvage reads before the repair.
    let salvaged = salvage_image(image).unwrap_or_else(|error| panic!("repair: I10: {error}"));
    let result = repair(&undo_device, RepairOptions::new(Mode::Yes), &mut |_, _| {});
    if let Ok(report) = &result {
        let after = salvage_image(&device.current()).unwrap_or_else(|error| panic!("repair: I10: {error}"));
        if let Err(error) = kept_for_salvage(&salvaged, &after, &lost_ranges(report)) {
            panic!("repair: {error}");
        }
    }
    match &result {
        Err(error) => assert!(device.current() == image, "repair: failed ({error}) after changing the image"),
        Ok(report) if report.exit_code() == 1 => {
            let again = repair(&device, RepairOptions::new(Mode::Yes), &mut |_, _| {});
            match again {
                Ok(again) => assert!(
                    again.exit_code() == 0 && again.writes.is_empty(),
                    "repair: a second repair -y after one that corrected everything exits {} with {} writes: {:?}",
                    again.exit_code(),
                    again.writes.len(),
                    again.before.problems.iter().map(|problem| problem.line()).collect::<Vec<_>>()
                ),
                Err(error) => panic!("repair: a second repair -y after one that corrected everything fails: {error}"),
            }
        }
        Ok(_) => {}
    }
    let bytes = sink.0.lock().map(|bytes| bytes.clone()).unwrap_or_default();
    if bytes.is_empty() {
        assert!(device.current() == image, "repair: wrote without an undo record");
        return;
    }
    let file = UndoFile::parse(&bytes, Path::new("undo file"));
    let file = file.unwrap_or_else(|error| panic!("repair: its undo file does not parse: {error}"));
    let restored = SimDevice::new(device.current());
    // The same device by construction: the oracle is the restore, not the uuid check.
    if let Err(error) = undo(&file, &restored, Some(file.header.volume_uuid), false) {
        panic!("repair: undo refused: {error}");
    }
    assert!(restored.current() == image, "repair: undo did not restore the image byte for byte");
}
