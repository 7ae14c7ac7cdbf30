//! The `undo_file` target: an undo file (docs/undo-file.md) through `UndoFile::parse` and
//! `lds undo`'s restore, as given and with its checksums repaired (`fixup::undo_file`).
//!
//! Oracles: parsing returns (a file or an error) without panicking; what parses keeps its
//! promises (a power-of-two sector size, every saved sector aligned to it and no longer, the
//! restored bytes their sum, a torn tail inside the input) and parses the same without its
//! torn tail; restored with `--force` onto a device of the length it records, every saved
//! sector holds its original bytes afterwards, no sector counts as changed, and a second
//! restore writes nothing; restored without `--force`, it either refuses and writes nothing
//! or leaves every saved sector original.

use std::path::Path;
use std::sync::Mutex;

use lds_volume::undo::{undo, UndoFile};
use lds_volume::{BlockDevice, DeviceError, ReadAt};

use crate::fixup;

/// Devices longer than this are not restored (a mutated header can ask for any length).
const DEVICE_LEN_MAX: u64 = 1 << 20;

/// A device in memory whose writes land at once, each byte `offset * 7 % 251` at first (so
/// that a restored sector differs from what was there).
pub(crate) struct MemoryDevice(Mutex<Vec<u8>>);

impl MemoryDevice {
    pub(crate) fn new(bytes: Vec<u8>) -> Self {
        Self(Mutex::new(bytes))
    }

    fn patterned(len: u64) -> Self {
        Self::new((0..len).map(|offset| (offset * 7 % 251) as u8).collect())
    }

    pub(crate) fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

impl ReadAt for MemoryDevice {
    fn name(&self) -> &Path {
        Path::new("device in memory")
    }
    fn len(&self) -> u64 {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len() as u64
    }
    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        let bytes = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let range = usize::try_from(offset).ok().and_then(|start| Some(start..start.checked_add(buffer.len())?));
        match range.and_then(|range| bytes.get(range)) {
            Some(found) => {
                buffer.copy_from_slice(found);
                Ok(())
            }
            None => Err(DeviceError::Read {
                path: self.name().to_path_buf(),
                offset,
                len: buffer.len() as u64,
                source: std::io::Error::other("past the end of the device"),
            }),
        }
    }
}

impl BlockDevice for MemoryDevice {
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        let mut bytes = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let range = usize::try_from(offset).ok().and_then(|start| Some(start..start.checked_add(data.len())?));
        match range.and_then(|range| bytes.get_mut(range)) {
            Some(target) => {
                target.copy_from_slice(data);
                Ok(())
            }
            None => panic!("undo file: restore writes {} bytes at {offset}, past the end of the device", data.len()),
        }
    }
    fn flush(&self) -> Result<(), DeviceError> {
        Ok(())
    }
    fn flush_range(&self, _: u64, _: u64) -> Result<(), DeviceError> {
        Ok(())
    }
}

/// `undo_file`: see the module documentation.
pub fn undo_file(data: &[u8]) {
    check(data);
    let mut repaired = data.to_vec();
    fixup::undo_file(&mut repaired);
    if repaired != data {
        check(&repaired);
    }
}

fn check(bytes: &[u8]) {
    let name = Path::new("undo file");
    let Ok(file) = UndoFile::parse(bytes, name) else {
        return;
    };
    let sector = u64::from(file.header.sector_size);
    assert!(sector.is_power_of_two(), "undo file: parsed with sector size {sector}");
    for (&offset, original) in &file.originals {
        assert!(
            offset % sector == 0 && original.len() as u64 <= sector,
            "undo file: a saved sector of {} bytes at {offset} (sector size {sector})",
            original.len()
        );
    }
    let saved: u64 = file.originals.values().map(|original| original.len() as u64).sum();
    assert_eq!(file.restored_bytes(), saved, "undo file: restored_bytes is not the saved sectors' bytes");
    assert!(file.torn_tail <= bytes.len() as u64, "undo file: a torn tail longer than the file");
    let whole = &bytes[..bytes.len() - file.torn_tail as usize];
    match UndoFile::parse(whole, name) {
        Ok(again) => assert!(
            again.torn_tail == 0
                && again.header == file.header
                && again.originals == file.originals
                && again.written == file.written
                && again.final_state == file.final_state,
            "undo file: it parses differently without its torn tail"
        ),
        Err(error) => panic!("undo file: without its torn tail it does not parse: {error}"),
    }
    let device_len = file.header.device_len;
    if device_len == 0 || device_len > DEVICE_LEN_MAX {
        return;
    }
    // Without --force: a refusal writes nothing; a restore leaves every saved sector original.
    let device = MemoryDevice::patterned(device_len);
    let before = device.bytes();
    match undo(&file, &device, None, false) {
        Ok(_) => assert_restored(&file, &device),
        Err(_) => assert!(device.bytes() == before, "undo file: a refused restore changed the device"),
    }
    // With --force: every saved sector inside the device is restored, and a second run finds
    // nothing to do.
    let device = MemoryDevice::patterned(device_len);
    match undo(&file, &device, None, true) {
        Ok(_) => assert_restored(&file, &device),
        Err(error) => panic!("undo file: a forced restore onto a device of its length fails: {error}"),
    }
    match undo(&file, &device, None, true) {
        Ok(outcome) => assert_eq!(outcome.sectors, 0, "undo file: a second restore writes again"),
        Err(error) => panic!("undo file: a second forced restore fails: {error}"),
    }
}

/// Every saved sector that lies inside the device holds its original bytes, and none counts
/// as changed since.
fn assert_restored(file: &UndoFile, device: &MemoryDevice) {
    let bytes = device.bytes();
    let mut inside = true;
    for (&offset, original) in &file.originals {
        let range = usize::try_from(offset).ok().and_then(|start| Some(start..start.checked_add(original.len())?));
        match range.and_then(|range| bytes.get(range)) {
            Some(current) => assert!(current == &original[..], "undo file: the sector at {offset} is not restored"),
            None => inside = false,
        }
    }
    if inside {
        let changed = file.first_changed_sector(device);
        assert!(matches!(changed, Ok(None)), "undo file: after a restore a sector counts as changed: {changed:?}");
    }
}
