//! Crash-safe device changes (`lds crashtest --workload devices`): `lds device add` and
//! `lds device remove` (SPEC.md §4.3) run on engine-written volumes whose devices are windows
//! of one simulated device, so that one history holds every device's writes and flushes (a
//! flush of one device covers only its own window, as a flush of one real device does). Every
//! crash state is checked:
//! - **I3**: fsck finds no warning or error but 104 (the first device's two label copies of
//!   different generations: the switch was written, the other copy not yet; SPEC.md §4.2 uses
//!   the newer, and the change run again writes the other);
//! - **I1/I2**: the engine reads every key with its value, as before the change;
//! - **W**: the engine opens it for writing, and a synced put and a flush leave fsck as clean;
//! - **R**: the same change run again finishes: the first device's labels and every base
//!   version hold the target table and geometry, fsck is clean and every key reads as before.
//!
//! Devices are found as `lds` finds them (SPEC.md §4.3): the first device's table names the
//! others by uuid, and a window whose labels the table does not name is not part of the volume.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use lds_check::{check, CheckOptions, Code, Severity};
use lds_engine::{Db, WriteOptions};
use lds_format::device_table::member_ofs_slot_area;
use lds_format::label::Label;
use lds_repair::devices::{add_device, finish_removal, remove_device, JoinUuids};
use lds_volume::labels::read_device_labels;
use lds_volume::Members;
use lds_volume::{BlockDevice, DeviceError, PageCache, ReadAt};

use crate::enumerate::{Counts, Failure};
use crate::error::SimError;
use crate::images::Bounds;
use crate::media::build_volume;
use crate::repair::{enumerate_history, Verdict};
use crate::sim_device::{History, SimDevice};
use crate::workload::{options, Model};

/// One device of a simulated multi-device volume: a window of the simulated device.
#[derive(Debug, Clone)]
pub struct Window {
    inner: SimDevice,
    base: u64,
    len: u64,
    name: PathBuf,
}

impl Window {
    /// The window `[base, base + len)` of `inner`, named `device N` in messages.
    pub fn new(inner: SimDevice, base: u64, len: u64, index: usize) -> Self {
        Self { inner, base, len, name: PathBuf::from(format!("simulated device {index}")) }
    }

    fn check(&self, offset: u64, len: u64) -> Result<(), std::io::Error> {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
        }
        Ok(())
    }
}

impl ReadAt for Window {
    fn name(&self) -> &Path {
        &self.name
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        self.check(offset, buffer.len() as u64).map_err(|source| DeviceError::Read {
            path: self.name.clone(),
            offset,
            len: buffer.len() as u64,
            source,
        })?;
        self.inner.read_at(self.base + offset, buffer)
    }
}

impl BlockDevice for Window {
    fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        self.check(offset, bytes.len() as u64).map_err(|source| DeviceError::Write {
            path: self.name.clone(),
            offset,
            len: bytes.len() as u64,
            source,
        })?;
        self.inner.write_at(self.base + offset, bytes)
    }
    // A device's flush covers its own writes only: the window's.
    fn flush(&self) -> Result<(), DeviceError> {
        self.inner.flush_range(self.base, self.len)
    }
    fn flush_range(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.inner.flush_range(self.base + offset, len)
    }
    fn page_cache(&self) -> Option<&dyn PageCache> {
        Some(self)
    }
}

/// A commit's flush leaves the window's part of the excluded range pending.
impl PageCache for Window {
    fn flush_except(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        let end = offset.saturating_add(len).min(self.len);
        self.inner.flush_range(self.base, offset.min(self.len))?;
        self.inner.flush_range(self.base + end, self.len - end)
    }
}

/// The windows `sizes` describe, in order, over `device`.
pub fn windows(device: &SimDevice, sizes: &[u64]) -> Vec<Window> {
    let mut base = 0;
    sizes
        .iter()
        .enumerate()
        .map(|(index, &len)| {
            let window = Window::new(device.clone(), base, len, index);
            base += len;
            window
        })
        .collect()
}

/// The volume the windows hold, found as `lds` finds a volume's devices (the first window is
/// the first device).
pub fn volume_of(device: &SimDevice, sizes: &[u64]) -> Result<Members<Window>, SimError> {
    Ok(Members::assemble_found(windows(device, sizes))?)
}

/// A device change to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Join the window with this index.
    Add(usize),
    /// Remove the window with this index (its place in the window list, which is its place in
    /// the table too: the cases join devices in window order).
    Remove(usize),
}

/// A change and the image it starts from.
#[derive(Debug, Clone)]
pub struct DeviceCase {
    /// What it does, for people.
    pub name: String,
    /// The devices' images, one after the other.
    pub image: Vec<u8>,
    /// Each device's length.
    pub sizes: Vec<u64>,
    /// The change.
    pub change: Change,
}

/// The uuids the simulated joins give (fixed, so that runs repeat, docs/reliability.md I8).
fn uuids(index: usize) -> JoinUuids {
    JoinUuids { first: [0xd0; 16], joining: [0xd0 + index as u8; 16] }
}

/// Applies `change` to the volume on `device` (windows of `sizes`) as `lds device` does, with
/// fixed uuids; returns the number of writes.
pub fn apply(device: &SimDevice, sizes: &[u64], change: Change) -> Result<usize, SimError> {
    let volume = volume_of(device, sizes)?;
    let done = match change {
        Change::Add(index) => {
            let joining = windows(device, sizes)
                .into_iter()
                .nth(index)
                .ok_or_else(|| SimError::Setup { what: format!("no device {index} to join") })?;
            add_device(&volume, &joining, uuids(index))?.1
        }
        Change::Remove(index) => {
            let leaving = windows(device, sizes)
                .into_iter()
                .nth(index)
                .ok_or_else(|| SimError::Setup { what: format!("no device {index}") })?;
            match volume.devices().iter().position(|member| member.name() == leaving.name()) {
                Some(position) => remove_device(&volume, position)?.1,
                // Past the switch: the table no longer lists it (as `lds device remove` finds).
                None => finish_removal(&volume, &leaving)?,
            }
        }
    };
    Ok(done.len())
}

/// A member device of `slots` slots for the volume `label` describes: its length.
pub fn member_len(label: &Label, slots: u64) -> u64 {
    let geometry = &label.geometry;
    member_ofs_slot_area(geometry) + slots * geometry.slot_size + geometry.sector()
}

/// Writes keys through the engine, one store open throughout (its allocation cursor moves on
/// through the slots, SPEC.md §10.4), until device `index` holds a live chunk (bounded: 200
/// rounds).
fn fill_onto(device: &SimDevice, sizes: &[u64], index: usize, round: &mut u32) -> Result<(), SimError> {
    let volume = volume_of(device, sizes)?;
    let entry =
        volume.table().ok_or_else(|| SimError::Setup { what: "the volume has one device".into() })?.devices[index];
    let (db, _) = Db::open_device(Arc::new(volume), Path::new("device case"), options(true))?;
    for _ in 0..200 {
        if db.chunks().iter().any(|chunk| chunk.slots().any(|slot| entry.holds(slot))) {
            return Ok(db.close()?);
        }
        for number in 0..60u32 {
            let key = format!("fill-{:05}", (*round * 60 + number) * 7 % 3000);
            let value = format!("{round}-{number}-{}", "f".repeat(200));
            db.put(key.as_bytes(), value.as_bytes(), WriteOptions { sync: false })?;
        }
        db.flush()?;
        *round += 1;
    }
    Err(SimError::Setup { what: format!("200 rounds of writes put no chunk on device {index}") })
}

/// Three changes on the media matrix's engine-written volume (both logs wrapped, three
/// levels): a device joins; the second device, holding chunks, leaves (the volume is on one
/// device again); the middle one of three devices, holding chunks, leaves (a gap of slots).
pub fn device_cases() -> Result<Vec<DeviceCase>, SimError> {
    let volume = build_volume()?;
    let label =
        lds_volume::read_labels(&lds_volume::MemoryImage(&volume.image))?.choose().map(|(_, label)| label.clone())?;
    let member = member_len(&label, 12);
    let mut image = volume.image.clone();
    image.resize(image.len() + 2 * member as usize, 0);
    let sizes = vec![volume.image.len() as u64, member, member];
    let mut cases = vec![DeviceCase {
        name: "join a device".into(),
        image: image.clone(),
        sizes: sizes.clone(),
        change: Change::Add(1),
    }];
    let device = SimDevice::new(image);
    apply(&device, &sizes, Change::Add(1))?;
    let mut round = 0;
    fill_onto(&device, &sizes, 1, &mut round)?;
    cases.push(DeviceCase {
        name: "remove the second of two devices (its chunks move; one device is left)".into(),
        image: device.current(),
        sizes: sizes.clone(),
        change: Change::Remove(1),
    });
    apply(&device, &sizes, Change::Add(2))?;
    fill_onto(&device, &sizes, 2, &mut round)?;
    cases.push(DeviceCase {
        name: "remove the middle of three devices (its chunks move; a gap of slots is left)".into(),
        image: device.current(),
        sizes,
        change: Change::Remove(1),
    });
    Ok(cases)
}

/// A change recorded on the simulated device.
#[derive(Debug, Clone)]
pub struct DeviceRun {
    /// The case.
    pub name: String,
    /// The device history (its initial image is the volume before the change).
    pub history: History,
    /// The devices' lengths.
    pub sizes: Vec<u64>,
    /// The change.
    pub change: Change,
    /// What every key reads.
    pub model: Model,
    /// The first device's label after the completed change.
    pub target: Label,
    /// Writes the change made.
    pub writes: usize,
    /// The sector size.
    pub sector_size: u64,
}

fn reads(device: &SimDevice, sizes: &[u64]) -> Result<Model, SimError> {
    let volume = volume_of(device, sizes)?;
    let (db, _) = Db::open_device_read_only(Arc::new(volume), Path::new("device case"), options(true))?;
    Ok(db.iter().and_then(Iterator::collect)?)
}

/// fsck's warnings and errors, by number, but `tolerated`.
fn problems(device: &SimDevice, sizes: &[u64], tolerated: &[Code]) -> Result<Vec<u16>, SimError> {
    let volume = volume_of(device, sizes)?;
    let report = check(&volume, CheckOptions { deep: true, ..Default::default() }, &mut |_, _| {})?;
    let mut numbers: Vec<u16> = report
        .problems
        .iter()
        .filter(|problem| problem.code.severity() != Severity::Info && !tolerated.contains(&problem.code))
        .map(|problem| problem.code.number())
        .collect();
    numbers.dedup();
    Ok(numbers)
}

fn first_label(device: &SimDevice, sizes: &[u64]) -> Result<Label, SimError> {
    let first =
        windows(device, sizes).into_iter().next().ok_or_else(|| SimError::Setup { what: "no device".into() })?;
    let labels = read_device_labels(&first)?;
    Ok(labels.choose()?.1.clone())
}

/// Whether the change is complete: both copies of the first device's label are the target and
/// every base version replicates its geometry and generation.
fn finished(device: &SimDevice, sizes: &[u64], target: &Label) -> Result<bool, SimError> {
    let first =
        windows(device, sizes).into_iter().next().ok_or_else(|| SimError::Setup { what: "no device".into() })?;
    let labels = read_device_labels(&first)?;
    if labels.primary.as_ref().ok() != Some(target) || labels.backup.as_ref().ok() != Some(target) {
        return Ok(false);
    }
    let volume = volume_of(device, sizes)?;
    for (instance, state) in lds_volume::inspect::all_versions(&volume, &target.geometry)? {
        let state = state.map_err(|source| SimError::VersionLog { at: format!("instance {instance}: "), source })?;
        if state.base.geometry != target.geometry || state.base.label_generation != target.generation {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Runs the change of `case`, recording every write and flush.
pub fn record_change(case: &DeviceCase, sector_size: u64) -> Result<DeviceRun, SimError> {
    let before = SimDevice::new(case.image.clone()).with_sector_size(sector_size);
    let model = reads(&before, &case.sizes)?;
    let device = SimDevice::new(case.image.clone()).with_sector_size(sector_size);
    let writes = apply(&device, &case.sizes, case.change).map_err(SimError::within(case.name.clone()))?;
    let target = first_label(&device, &case.sizes)?;
    let unfinished = |what: String| SimError::Unfinished { case: case.name.clone(), what };
    let found = problems(&device, &case.sizes, &[])?;
    if !found.is_empty() {
        return Err(unfinished(format!("fsck after the change reports {found:?}")));
    }
    if !finished(&device, &case.sizes, &target)? {
        return Err(unfinished("the change did not finish".into()));
    }
    if reads(&device, &case.sizes)? != model {
        return Err(unfinished("the change altered what the volume reads".into()));
    }
    Ok(DeviceRun {
        name: case.name.clone(),
        history: device.history(),
        sizes: case.sizes.clone(),
        change: case.change,
        model,
        target,
        writes,
        sector_size,
    })
}

fn check_image(run: &DeviceRun, image: &[u8]) -> Verdict {
    let device = SimDevice::new(image.to_vec()).with_sector_size(run.sector_size);
    let found =
        problems(&device, &run.sizes, &[Code::LabelsGenerationsDiffer]).map_err(|error| ("I3", error.to_string()))?;
    if !found.is_empty() {
        return Err(("I3", format!("fsck reports {found:?}")));
    }
    let read = reads(&device, &run.sizes).map_err(|error| ("I1/I2", error.to_string()))?;
    if read != run.model {
        return Err((
            "I1/I2",
            format!("the volume reads {} keys, {} before the change (or other values)", read.len(), run.model.len()),
        ));
    }
    // W: the engine writes to it as it is.
    let written = SimDevice::new(image.to_vec()).with_sector_size(run.sector_size);
    let volume = volume_of(&written, &run.sizes).map_err(|error| ("W", error.to_string()))?;
    let (db, _) = Db::open_device(Arc::new(volume), Path::new("crash image"), options(true))
        .map_err(|error| ("W", format!("the engine does not open it for writing: {error}")))?;
    let write = db.put(b"written-after-the-crash", b"value", WriteOptions { sync: true }).and_then(|()| db.flush());
    write.and_then(|()| db.close()).map_err(|error| ("W", format!("a write and a flush fail: {error}")))?;
    let found =
        problems(&written, &run.sizes, &[Code::LabelsGenerationsDiffer]).map_err(|error| ("W", error.to_string()))?;
    if !found.is_empty() {
        return Err(("W", format!("after a write and a flush fsck reports {found:?}")));
    }
    // R: the same change again finishes it.
    apply(&device, &run.sizes, run.change)
        .map_err(|error| ("R", format!("running the change again fails: {error}")))?;
    if !finished(&device, &run.sizes, &run.target).map_err(|error| ("R", error.to_string()))? {
        return Err(("R", "running the change again did not reach the target".into()));
    }
    let found = problems(&device, &run.sizes, &[]).map_err(|error| ("R", error.to_string()))?;
    if !found.is_empty() {
        return Err(("R", format!("after running the change again fsck reports {found:?}")));
    }
    if reads(&device, &run.sizes).map_err(|error| ("R", error.to_string()))? != run.model {
        return Err(("R", "after running the change again the volume reads other keys or values".into()));
    }
    Ok(())
}

/// Enumerates the crash states of a recorded change and checks each.
pub fn enumerate_change(
    run: &DeviceRun,
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
    fn every_crash_state_of_a_join_and_two_removals_is_old_new_or_finished_by_a_second_run() {
        let cases = device_cases();
        assert!(cases.is_ok(), "{:?}", cases.as_ref().err());
        let Ok(cases) = cases else { return };
        assert_eq!(cases.len(), 3);
        let bounds = Bounds { exhaustive_max: 4, samples: 4, tears: true, seed: 7 };
        for case in &cases {
            let run = record_change(case, 512);
            assert!(run.is_ok(), "{:?}", run.as_ref().err());
            let Ok(run) = run else { return };
            let mut failures = Vec::new();
            let counts = enumerate_change(&run, &bounds, &mut |failure| {
                failures.push(format!(
                    "{} {}: {} ({})",
                    failure.oracle, failure.crash_point, failure.message, failure.state
                ));
                ControlFlow::Break(())
            });
            assert!(failures.is_empty(), "{}: {failures:?}", case.name);
            assert!(counts.distinct_images > 5, "{}: {counts:?}", case.name);
        }
    }
}
