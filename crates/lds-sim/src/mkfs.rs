//! Crash-safe mkfs (`lds crashtest --workload mkfs`): mkfs's writes, in the order
//! `lds_tools::mkfs::write_volume` issues them, over an old engine-written volume and over
//! zeros on the simulated device, and every crash state of them checked:
//! - **M (old, refused or new)**: the crash image is a whole new volume (both labels the new
//!   one, every instance an empty tree, fsck clean, no key), or the engine refuses it with an
//!   error, or it reads exactly what the old volume read, or it opens with the new label
//!   (one copy of it written) and reads no key: a crash never leaves a volume that opens with
//!   part of the old data, or with the new label over old data;
//! - **R (run again)**: mkfs run again on the crash image writes the new volume, which the
//!   read-back accepts and fsck finds clean.

use std::ops::ControlFlow;

use lds_format::geometry::{plan_layout, LayoutRequest};
use lds_format::label::Label;
use lds_tools::mkfs::{verify, write_volume};
use lds_volume::MemoryImage;

use crate::enumerate::{Counts, Failure};
use crate::error::SimError;
use crate::images::Bounds;
use crate::media::build_volume;
use crate::repair::{enumerate_history, problems_of, reads_of, Verdict};
use crate::sim_device::{History, SimDevice};
use crate::workload::{layout, Model};

/// A format to check: the image before it and the label it writes.
#[derive(Debug, Clone)]
pub struct MkfsCase {
    /// What it formats over, for people.
    pub name: String,
    /// The image before mkfs.
    pub image: Vec<u8>,
    /// The label mkfs writes.
    pub label: Label,
    /// What the old volume reads (`None` over zeros).
    pub old: Option<Model>,
}

/// A format recorded on the simulated device.
#[derive(Debug, Clone)]
pub struct MkfsRun {
    /// The case.
    pub name: String,
    /// The device history (its initial image is the one before mkfs).
    pub history: History,
    /// The label written.
    pub label: Label,
    /// What the old volume reads.
    pub old: Option<Model>,
    /// The sector size.
    pub sector_size: u64,
}

/// The new label of a case: the simulator's layout with `change` applied, another uuid.
fn new_label(uuid: [u8; 16], change: impl FnOnce(&mut LayoutRequest)) -> Result<Label, SimError> {
    let mut request = layout();
    change(&mut request);
    let geometry = plan_layout(&request, uuid).map_err(|source| SimError::Layout { source })?;
    Ok(Label::new(geometry, "mkfs").with_sync_watermark().with_fast_digest().with_compact_entries())
}

/// mkfs with the same layout, with a longer version log (its areas over the old slots), and
/// with that and the old volume's own uuid (`mkfs --uuid`: only the zeroing keeps its old
/// objects from reading as the new volume's) over the media matrix's engine-written volume
/// (both logs wrapped, chunks on three levels), and with the same layout over zeros.
pub fn mkfs_cases() -> Result<Vec<MkfsCase>, SimError> {
    let volume = build_volume()?;
    let old = reads_of(volume.image.clone())?;
    let zeros = vec![0u8; volume.image.len()];
    let same = new_label([0x6d; 16], |_| {})?;
    // Log areas are laid out in whole slots: 128 KiB moves the backup log and the slot area
    // over the old volume's first slots.
    let longer = new_label([0x6d; 16], |request| request.len_version_log = Some(128 << 10))?;
    // `mkfs --uuid` with the old volume's own uuid: recovery cannot tell old objects from
    // new ones by their uuid.
    let own = volume.geometry.volume_uuid;
    let own_uuid = new_label(own, |request| request.len_version_log = Some(128 << 10))?;
    Ok(vec![
        MkfsCase {
            name: "mkfs over an old volume, the same layout".into(),
            image: volume.image.clone(),
            label: same.clone(),
            old: Some(old.clone()),
        },
        MkfsCase {
            name: "mkfs over an old volume, a longer version log".into(),
            image: volume.image.clone(),
            label: longer,
            old: Some(old.clone()),
        },
        MkfsCase {
            name: "mkfs over an old volume with its own uuid, a longer version log".into(),
            image: volume.image,
            label: own_uuid,
            old: Some(old),
        },
        MkfsCase { name: "mkfs over zeros".into(), image: zeros, label: same, old: None },
    ])
}

/// Runs mkfs's writes of `case` on the simulated device and checks that they leave the new
/// volume.
pub fn record_mkfs(case: &MkfsCase, sector_size: u64) -> Result<MkfsRun, SimError> {
    let device = SimDevice::new(case.image.clone()).with_sector_size(sector_size);
    write_volume(&device, &case.label).map_err(|source| SimError::within(case.name.clone())(source.into()))?;
    let after = device.current();
    verify(&MemoryImage(&after), &case.name, &case.label)?;
    Ok(MkfsRun {
        name: case.name.clone(),
        history: device.history(),
        label: case.label.clone(),
        old: case.old.clone(),
        sector_size,
    })
}

/// Whether `image` is the whole new volume: the read-back accepts it, fsck is clean and the
/// engine reads no key.
fn new_volume(run: &MkfsRun, image: &[u8], oracle: &'static str) -> Verdict {
    verify(&MemoryImage(image), &run.name, &run.label).map_err(|error| (oracle, error.to_string()))?;
    let problems = problems_of(image).map_err(|error| (oracle, error.to_string()))?;
    if !problems.is_empty() {
        return Err((oracle, format!("the new volume has problems {problems:?}")));
    }
    match reads_of(image.to_vec()) {
        Ok(model) if model.is_empty() => Ok(()),
        Ok(model) => Err((oracle, format!("the new volume reads {} keys", model.len()))),
        Err(error) => Err((oracle, format!("the engine does not open the new volume: {error}"))),
    }
}

fn check_image(run: &MkfsRun, image: &[u8]) -> Verdict {
    // M: the new volume, a refusal, or the old volume whole.
    if verify(&MemoryImage(image), &run.name, &run.label).is_ok() {
        new_volume(run, image, "M")?;
    } else if let Ok(model) = reads_of(image.to_vec()) {
        // Before the last flush the new label may stand in one copy only (the backup label,
        // flushed first, over a device whose primary label is not valid): the engine opens
        // the new, empty volume, fsck reports the missing copy, and mkfs again finishes it.
        let chosen = lds_volume::volume::choose_label(&MemoryImage(image), &run.name).map(|(_, _, label)| label);
        let new_and_empty = model.is_empty() && chosen.is_ok_and(|label| label == run.label);
        if run.old.as_ref() != Some(&model) && !new_and_empty {
            return Err((
                "M",
                format!(
                    "the engine opens the crash image and reads {} keys, {}",
                    model.len(),
                    match &run.old {
                        Some(old) => format!("not the old volume's {} keys and values", old.len()),
                        None => "over zeros".to_string(),
                    }
                ),
            ));
        }
    }
    // R: mkfs again writes the new volume.
    let device = SimDevice::new(image.to_vec());
    write_volume(&device, &run.label).map_err(|error| ("R", format!("mkfs again fails: {error}")))?;
    new_volume(run, &device.current(), "R")
}

/// Enumerates the crash states of a recorded mkfs and checks each against M and R.
pub fn enumerate_mkfs(
    run: &MkfsRun,
    bounds: &Bounds,
    on_failure: &mut dyn FnMut(Failure) -> ControlFlow<()>,
) -> Counts {
    let mut check = |_: usize, _: usize, image: &[u8]| check_image(run, image);
    enumerate_history(&run.history, run.sector_size, bounds, &mut check, on_failure)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crash_state_of_mkfs_is_the_old_volume_refused_or_the_new_one() {
        let cases = mkfs_cases();
        assert!(cases.is_ok(), "{:?}", cases.as_ref().err());
        let Ok(cases) = cases else { return };
        let bounds = Bounds { exhaustive_max: 4, samples: 4, tears: true, seed: 3 };
        for case in &cases {
            let run = record_mkfs(case, 512);
            assert!(run.is_ok(), "{:?}", run.as_ref().err());
            let Ok(run) = run else { return };
            // Zeroing, the backup label, a flush, the primary label and base versions, a flush.
            assert!(run.history.writes.len() >= 4, "{}: {} writes", case.name, run.history.writes.len());
            let mut failures = Vec::new();
            let counts = enumerate_mkfs(&run, &bounds, &mut |failure| {
                failures.push(format!(
                    "{} {}: {} ({})",
                    failure.oracle, failure.crash_point, failure.message, failure.state
                ));
                ControlFlow::Break(())
            });
            assert!(failures.is_empty(), "{}: {failures:?}", case.name);
            // Over zeros only the label and base version writes make images that differ.
            assert!(counts.distinct_images >= 4, "{}: {counts:?}", case.name);
        }
    }

    /// `image` with one more key written by the engine.
    fn with_a_key(image: Vec<u8>) -> Vec<u8> {
        let device = SimDevice::new(image);
        let shared: std::sync::Arc<dyn lds_volume::BlockDevice> = std::sync::Arc::new(device.clone());
        let opened = lds_engine::Db::open_device(shared, std::path::Path::new("mkfs"), crate::workload::options(true));
        assert!(opened.is_ok(), "{:?}", opened.as_ref().err());
        let Ok((db, _)) = opened else { return device.current() };
        let written = db.put(b"written-after", b"value", lds_engine::WriteOptions { sync: true });
        assert!(written.and_then(|()| db.close()).is_ok());
        device.current()
    }

    /// The oracle fails what it must: a volume that opens and reads neither the old keys nor
    /// none at all (the old volume with a key more, the new one with a key).
    #[test]
    fn the_oracle_fails_a_volume_that_reads_other_keys() {
        let cases = mkfs_cases();
        assert!(cases.is_ok(), "{:?}", cases.as_ref().err());
        let Ok(cases) = cases else { return };
        let Some(case) = cases.first() else { return };
        let run = record_mkfs(case, 512);
        let Ok(run) = run else { return };
        assert_eq!(check_image(&run, &case.image), Ok(()), "the old volume itself");
        let verdict = check_image(&run, &with_a_key(case.image.clone()));
        assert!(matches!(&verdict, Err(("M", message)) if message.contains("not the old volume's")), "{verdict:?}");
        let new = SimDevice::new(case.image.clone());
        assert!(write_volume(&new, &case.label).is_ok());
        assert_eq!(check_image(&run, &new.current()), Ok(()), "the new volume itself");
        let verdict = check_image(&run, &with_a_key(new.current()));
        assert!(matches!(&verdict, Err(("M", message)) if message.contains("reads 1 keys")), "{verdict:?}");
    }
}
