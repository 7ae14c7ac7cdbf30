//! A volume opened for reading: its devices, both label copies and the label chosen by SPEC.md
//! §4.2. Never writes.

use std::path::Path;
use std::time::Duration;

use lds_format::chunk::footer::FOOTER_LEN;
use lds_format::geometry::{Geometry, LogKind};
use lds_format::label::{Label, LabelChoice, LabelPair};
use lds_format::log::{area_context, AreaContext};

use crate::block::{DeviceError, ReadAt};
use crate::error::VolumeError;
use crate::labels::read_labels;
use crate::members::{Members, VolumeDevice};
use crate::os_device::OpenMode;

/// A volume opened for reading: its device, both label copies and the label chosen by
/// SPEC.md §4.2.
#[derive(Debug)]
pub struct Volume {
    /// The device, or the devices of a volume of several (SPEC.md §4.3).
    pub device: VolumeDevice,
    /// Both label copies.
    pub labels: LabelPair,
    /// The label chosen by SPEC.md §4.2.
    pub label: Label,
    /// Which copy.
    pub choice: LabelChoice,
}

/// Chooses the label of a volume on `device` (named `name` in errors) and checks that the
/// device holds the whole volume.
pub fn choose_label(
    device: &(impl ReadAt + ?Sized),
    name: &str,
) -> Result<(LabelPair, LabelChoice, Label), VolumeError> {
    let labels = read_labels(device)?;
    let (choice, label) = labels.choose().map_err(|choice| VolumeError::Label {
        path: name.to_string(),
        choice,
        primary: labels.primary.as_ref().err().cloned().map(Box::new),
        backup: labels.backup.as_ref().err().cloned().map(Box::new),
    })?;
    let label = label.clone();
    if label.geometry.volume_len > device.len() {
        return Err(VolumeError::Truncated {
            path: name.to_string(),
            volume_len: label.geometry.volume_len,
            device_len: device.len(),
        });
    }
    Ok((labels, choice, label))
}

impl Volume {
    /// Opens a volume for reading under a shared lock (any number of readers; fails while a
    /// writer holds it, after waiting at most `wait`) and chooses its label.
    pub fn open(path: &Path, wait: Duration) -> Result<Self, VolumeError> {
        let device = Members::open(path, OpenMode::ReadOnlyLocked, wait)?;
        let (labels, choice, label) = choose_label(&device, &path.display().to_string())?;
        Ok(Self { device, labels, label, choice })
    }

    /// The chosen geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.label.geometry
    }

    /// The context of a log area.
    pub fn area_context(&self, kind: LogKind, instance: u32) -> AreaContext {
        area_context(&self.label.geometry, kind, instance)
    }

    /// Reads a whole log area.
    pub fn read_area(&self, kind: LogKind, instance: u32) -> Result<Vec<u8>, DeviceError> {
        let (offset, len) = self.label.geometry.log_area(kind, instance);
        self.device.read_vec(offset, len)
    }

    /// Reads the footer bytes of a slot.
    pub fn read_footer(&self, slot: u64) -> Result<Vec<u8>, DeviceError> {
        let geometry = &self.label.geometry;
        let offset = geometry.slot_offset(slot) + geometry.slot_size - FOOTER_LEN as u64;
        self.device.read_vec(offset, FOOTER_LEN as u64)
    }

    /// Reads a whole slot.
    pub fn read_slot(&self, slot: u64) -> Result<Vec<u8>, DeviceError> {
        let geometry = &self.label.geometry;
        self.device.read_vec(geometry.slot_offset(slot), geometry.slot_size)
    }
}
