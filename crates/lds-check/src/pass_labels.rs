//! Pass 1: both label copies, the choice between them (SPEC.md §4.2), the device's length.

use lds_format::label::{Label, LabelChoice, LabelChoiceError};
use lds_format::FormatError;
use lds_volume::members::{member_label_problem, member_labels};
use lds_volume::{read_labels, ReadAt};

use crate::problem::{Code, Report};
use crate::CheckError;

/// Reports label problems; returns the label to check the rest with, or `None` when the
/// volume cannot be read past its labels.
pub(crate) fn check_labels(device: &(impl ReadAt + ?Sized), report: &mut Report) -> Result<Option<Label>, CheckError> {
    let labels = read_labels(device)?;
    let magic_missing = |copy: &Result<Label, FormatError>| {
        matches!(copy, Err(FormatError::BadMagic { .. } | FormatError::Truncated { .. }))
    };
    if magic_missing(&labels.primary) && magic_missing(&labels.backup) {
        return Err(CheckError::NotAVolume);
    }
    for copy in [&labels.primary, &labels.backup] {
        if let Err(FormatError::UnsupportedVersion { major, minor, .. }) = copy {
            if labels.choose().is_err() {
                return Err(CheckError::UnsupportedVersion { major: *major, minor: *minor });
            }
        }
    }
    if let Err(error) = &labels.primary {
        report.add(Code::PrimaryLabelInvalid, "primary label", error.offset(), error.to_string());
    }
    if let Err(error) = &labels.backup {
        report.add(Code::BackupLabelInvalid, "backup label", error.offset(), error.to_string());
    }
    let label = match labels.choose() {
        Ok((choice, label)) => {
            if let (LabelChoice::Primary | LabelChoice::Backup, Ok(_), Ok(_)) =
                (choice, &labels.primary, &labels.backup)
            {
                report.add(Code::LabelsGenerationsDiffer, "labels", 0, "both labels are valid but differ: the one with the higher generation is used (an interrupted resize)");
            }
            label.clone()
        }
        Err(LabelChoiceError::Conflict) => {
            report.add(
                Code::LabelsConflict,
                "labels",
                0,
                "both labels are valid, differ, and have the same generation",
            );
            return Ok(None);
        }
        Err(LabelChoiceError::NoValidLabel) => {
            report.add(
                Code::NoValidLabel,
                "labels",
                0,
                "neither label is valid: the volume cannot be read (salvage may recover chunks)",
            );
            return Ok(None);
        }
    };
    check_member_labels(device, &label, report);
    if label.geometry.volume_len > device.len() {
        report.add(
            Code::VolumeBeyondDevice,
            "labels",
            0,
            format!("the volume is {} bytes, the device {}", label.geometry.volume_len, device.len()),
        );
        return Ok(None);
    }
    Ok(Some(label))
}

/// The labels of every device but the first of a volume of several devices (SPEC.md §4.3):
/// each copy valid, naming the volume, the device and its table entry as the first device's
/// label has it.
fn check_member_labels(device: &(impl ReadAt + ?Sized), label: &Label, report: &mut Report) {
    for member in member_labels(device, label) {
        let structure = |copy: &str| format!("{copy} label of device {} ({})", member.index, member.name.display());
        let labels = match member.labels {
            Ok(labels) => labels,
            Err(error) => {
                report.add(Code::DeviceLabelInvalid, structure("primary"), 0, error.to_string());
                continue;
            }
        };
        for (copy, offset, read) in
            [("primary", 0, &labels.primary), ("backup", member.ofs_backup_label, &labels.backup)]
        {
            if let Some(problem) = member_label_problem(label, member.index, read) {
                report.add(Code::DeviceLabelInvalid, structure(copy), offset, problem);
            }
        }
    }
}
