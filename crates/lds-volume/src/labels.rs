//! Reading a volume's two label copies where they lie (SPEC.md §4.2): on a device, the primary
//! at offset 0 and the backup in the last sector the primary gives the device; on a volume of
//! several devices, the first device's (§4.3), outside the volume's address space.

use lds_format::label::{Label, LabelPair, LABEL_LEN};
use lds_format::FormatError;

use crate::block::{DeviceError, ReadAt};

/// Reads both label copies of the volume (SPEC.md §4.2): the primary at offset 0 and the
/// backup in the last sector of the bytes the primary gives the device (`volume_len`, or on a
/// volume of several devices its table entry's `len_device`, §4.3). A volume of several
/// devices (`Members`) reads them from its first device. A copy whose sector cannot be read
/// counts as invalid, so that the other one is used.
pub fn read_labels(device: &(impl ReadAt + ?Sized)) -> Result<LabelPair, DeviceError> {
    // The volume's backup label is the last sector of its address space, but a copy not yet
    // rewritten to the table (an interrupted `lds device` command) puts it elsewhere in it:
    // the first device's labels are read where they lie on that device.
    match device.member(0) {
        Some(first) => read_device_labels(first),
        None => read_device_labels(device),
    }
}

/// Reads the label copy at `offset`: decoded, or why it is not valid (a sector that cannot be
/// read is a copy lost, so that the other one is used, SPEC.md §4.2).
pub(crate) fn read_label_at(
    device: &(impl ReadAt + ?Sized),
    offset: u64,
) -> Result<Result<Label, FormatError>, DeviceError> {
    if offset + LABEL_LEN as u64 > device.len() {
        return Ok(Err(FormatError::Truncated {
            structure: "label",
            offset,
            needed: LABEL_LEN as u64,
            available: device.len().saturating_sub(offset),
        }));
    }
    match device.read_vec(offset, LABEL_LEN as u64) {
        Ok(bytes) => Ok(Label::decode(&bytes, offset)),
        Err(error) => Ok(Err(FormatError::invalid("label", "sector", offset, format!("cannot be read: {error}")))),
    }
}

/// Reads both label copies of one device where they lie on that device (SPEC.md §4.2, §4.3):
/// the primary at offset 0; the backup in the last sector of the bytes the primary says the
/// volume uses of this device, or (the primary not valid) found by probing the device's end.
pub fn read_device_labels(device: &(impl ReadAt + ?Sized)) -> Result<LabelPair, DeviceError> {
    let read_label = |offset: u64| read_label_at(device, offset);
    let primary = read_label(0)?;
    let backup = match &primary {
        Ok(label) => read_label(label.ofs_backup_label_on_device())?,
        Err(_) => {
            let mut probe = Err(FormatError::BadMagic { structure: "label", offset: device.len(), found: Vec::new() });
            let mut sector = 512u64;
            while sector <= 65536 && sector <= device.len() {
                let candidate = read_label(device.len() - sector)?;
                if candidate.as_ref().is_ok_and(|label| label.geometry.sector() == sector) {
                    probe = candidate;
                    break;
                }
                if sector == 512 {
                    probe = candidate;
                }
                sector *= 2;
            }
            probe
        }
    };
    Ok(LabelPair { primary, backup })
}
