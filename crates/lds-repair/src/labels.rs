//! The two label copies (SPEC.md §4.2): a damaged or outdated copy is rewritten from the one
//! recovery uses; two valid copies that conflict are settled by the geometry the live base
//! version replicates; no valid copy, or a device shorter than the volume, is for salvage.

use lds_check::Code;
use lds_format::algorithms::image::label_sector;
use lds_format::algorithms::instance::recover_instance;
use lds_format::geometry::LogKind;
use lds_format::label::{Label, LabelChoiceError};
use lds_volume::block::read_tolerant;
use lds_volume::{read_labels, BlockDevice, DeviceError};

use crate::{Fix, FixClass, LabelPlan, PlannedWrite, RepairError, RepairReport};

/// True when the live base version of instance 0, read with `label`'s geometry, replicates
/// that geometry.
fn base_version_agrees(device: &dyn BlockDevice, label: &Label) -> Result<bool, DeviceError> {
    let geometry = &label.geometry;
    if geometry.volume_len > device.len() {
        return Ok(false);
    }
    let (version_offset, version_len) = geometry.log_area(LogKind::Version, 0);
    let (backup_offset, backup_len) = geometry.log_area(LogKind::Backup, 0);
    let version_area = read_tolerant(device, version_offset, version_len, geometry.sector())?.0;
    let backup_area = read_tolerant(device, backup_offset, backup_len, geometry.sector())?.0;
    Ok(recover_instance(geometry, 0, &version_area, &backup_area)
        .is_ok_and(|recovery| recovery.version_log.base.geometry == *geometry))
}

/// Decides the label and the label writes; `None` (with the reason recorded) when no label can
/// be trusted and only salvage can help.
pub(crate) fn plan(device: &dyn BlockDevice, report: &mut RepairReport) -> Result<Option<LabelPlan>, RepairError> {
    let labels = read_labels(device)?;
    let primary_write =
        |label: &Label| PlannedWrite { offset: 0, bytes: label_sector(label), structure: "primary label".into() };
    let backup_write = |label: &Label| PlannedWrite {
        offset: label.geometry.ofs_backup_label(),
        bytes: label_sector(label),
        structure: "backup label".into(),
    };
    let mut writes = Vec::new();
    let label = match labels.choose() {
        Ok((_, chosen)) => {
            let chosen = chosen.clone();
            match (&labels.primary, &labels.backup) {
                (Err(_), _) => writes.push((
                    Fix::new(
                        vec![Code::PrimaryLabelInvalid],
                        "primary label",
                        0,
                        "rewrote the primary label from the backup",
                    ),
                    primary_write(&chosen),
                )),
                (_, Err(_)) => writes.push((
                    Fix::new(
                        vec![Code::BackupLabelInvalid],
                        "backup label",
                        chosen.geometry.ofs_backup_label(),
                        "rewrote the backup label from the primary",
                    ),
                    backup_write(&chosen),
                )),
                (Ok(primary), Ok(backup)) if primary != backup => {
                    let (structure, write) = if *primary == chosen {
                        ("backup label", backup_write(&chosen))
                    } else {
                        ("primary label", primary_write(&chosen))
                    };
                    writes.push((
                        Fix::new(
                            vec![Code::LabelsGenerationsDiffer],
                            structure,
                            write.offset,
                            format!(
                                "finished the interrupted label rewrite: copied generation {} over the {structure}",
                                chosen.generation
                            ),
                        ),
                        write,
                    ));
                }
                _ => {}
            }
            chosen
        }
        Err(LabelChoiceError::Conflict) => {
            let (Ok(primary), Ok(backup)) = (&labels.primary, &labels.backup) else { return Ok(None) };
            let agrees = (base_version_agrees(device, primary)?, base_version_agrees(device, backup)?);
            let (chosen, structure, write) = match agrees {
                (true, false) => (primary.clone(), "backup label", backup_write(primary)),
                (false, true) => (backup.clone(), "primary label", primary_write(backup)),
                // The same geometry in both: the data is read the same either way; the
                // primary's other fields (name, features) are kept.
                (true, true) if primary.geometry == backup.geometry => {
                    (primary.clone(), "backup label", backup_write(primary))
                }
                _ => {
                    report.unrepairable.push(format!(
                        "103 labels: both copies are valid with generation {} and differ, and the live base version does not tell which is right; choose with lds salvage",
                        primary.generation
                    ));
                    return Ok(None);
                }
            };
            writes.push((
                Fix::new(
                    vec![Code::LabelsConflict],
                    structure,
                    write.offset,
                    format!(
                        "kept the {} label (its geometry is the one the live base version replicates); rewrote the {structure}",
                        if structure == "backup label" { "primary" } else { "backup" }
                    ),
                )
                .class(FixClass::Fix),
                write,
            ));
            chosen
        }
        Err(LabelChoiceError::NoValidLabel) => {
            report
                .unrepairable
                .push("105 labels: neither label is valid; lds salvage rebuilds a volume from the slots".into());
            return Ok(None);
        }
    };
    if label.geometry.volume_len > device.len() {
        report.unrepairable.push(format!(
            "106 labels: the volume is {} bytes and the device {}: the device lost its end; lds salvage copies what the slots still hold",
            label.geometry.volume_len,
            device.len()
        ));
        return Ok(None);
    }
    Ok(Some(LabelPlan { label, writes }))
}
