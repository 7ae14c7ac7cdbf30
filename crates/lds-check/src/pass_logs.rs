//! Passes 2 and 3: each instance's version log and backup log, recovered once by the format
//! crate's `recover_instance` (SPEC.md §9.2, §9.3), and how each live chain ends (§9.6).

use lds_format::algorithms::instance::{
    recover_instance, BackupRecovery, ChainEndVerdict, InstanceRecovery, LaterObjects,
};
use lds_format::algorithms::recovery::{ChainEnd, PhysicalWalk, VersionLogError};
use lds_format::geometry::{Geometry, LogKind};
use lds_format::label::Label;
use lds_format::log::{area_context, AreaContext};
use lds_format::version::ReplayError;
use lds_volume::ReadAt;

use crate::problem::{Code, Report};
use crate::CheckError;

/// One instance's areas and what recovering them gave.
pub(crate) struct Recovered {
    pub(crate) instance: u32,
    pub(crate) recovery: Result<InstanceRecovery, VersionLogError>,
    /// The pointers of the batches recovery replays (SPEC.md §8.6).
    pub(crate) replayed_pointers: Vec<crate::pass_values::Pointed>,
    /// The backup log area, kept for pass 4 to resolve log references (SPEC.md §8.9) when
    /// the volume has feature `log_tables` or the recovered version holds log chunks.
    pub(crate) backup_area: Option<Vec<u8>>,
}

/// Reads and recovers every instance; counts the objects of the physical walks. The backup
/// log area is kept when `log_tables` (the volume's feature) or the version holds log chunks.
pub(crate) fn recover_all(
    device: &(impl ReadAt + ?Sized),
    geometry: &Geometry,
    log_tables: bool,
    report: &mut Report,
) -> Result<Vec<Recovered>, CheckError> {
    let mut recovered = Vec::new();
    for instance in 0..geometry.instance_count {
        let (version_offset, version_len) = geometry.log_area(LogKind::Version, instance);
        let (backup_offset, backup_len) = geometry.log_area(LogKind::Backup, instance);
        let version_area = read_reporting(
            device,
            version_offset,
            version_len,
            geometry.sector(),
            &format!("version log of instance {instance}"),
            report,
        )?;
        let backup_area = read_reporting(
            device,
            backup_offset,
            backup_len,
            geometry.sector(),
            &format!("backup log of instance {instance}"),
            report,
        )?;
        for area in [&version_area, &backup_area] {
            // Counted as walked, not collected: a version log may hold hundreds of thousands.
            report.summary.log_objects += PhysicalWalk::new(area, 0, geometry.sector()).count() as u64;
        }
        let recovery = recover_instance(geometry, instance, &version_area, &backup_area);
        let replayed_pointers = match &recovery {
            Ok(recovery) => replayed_pointers(geometry, instance, recovery, &backup_area, report),
            Err(_) => Vec::new(),
        };
        let keep = recovery
            .as_ref()
            .is_ok_and(|recovery| log_tables || crate::pass_logrefs::has_log_chunks(&recovery.version_log));
        let backup_area = keep.then_some(backup_area);
        recovered.push(Recovered { instance, recovery, replayed_pointers, backup_area });
    }
    Ok(recovered)
}

fn replay_code(error: &ReplayError) -> Code {
    match error {
        ReplayError::SlotInUse { .. } => Code::SlotReferencedTwice,
        ReplayError::SlotOutOfRange { .. } => Code::SlotOutOfRange,
        ReplayError::LevelOutOfRange { .. } => Code::LevelOutOfRange,
        ReplayError::LogChunkLevel { .. } => Code::LogChunkInvalid,
        _ => Code::VersionLogReplay,
    }
}

/// Pass 2: the version log of one instance.
pub(crate) fn check_version_log(geometry: &Geometry, label: &Label, recovered: &Recovered, report: &mut Report) {
    let instance = recovered.instance;
    let structure = format!("version log of instance {instance}");
    let context = area_context(geometry, LogKind::Version, instance);
    let recovery = match &recovered.recovery {
        Ok(recovery) => recovery,
        Err(error) => {
            let (code, offset) = match error {
                VersionLogError::NoStart { .. } => (Code::VersionLogNoStart, context.ofs_area),
                VersionLogError::BadStart { .. } => (Code::VersionLogBadStart, context.ofs_area),
                VersionLogError::BadWrapLeft { .. } => (Code::VersionLogBadWrapLeft, context.ofs_area),
                VersionLogError::SnMismatch { offset, .. } => (Code::VersionLogSnMismatch, context.ofs_area + offset),
                VersionLogError::Replay { offset, error } => (replay_code(error), context.ofs_area + offset),
                _ => (Code::VersionLogReplay, context.ofs_area),
            };
            report.add(code, structure, offset, error.to_string());
            return;
        }
    };
    let state = &recovery.version_log;
    report.summary.live_log_objects += state.live_count() as u64;
    report_chain_end(&recovery.version_end, &context, report, &structure);
    if state.base.geometry != *geometry && state.base.label_generation >= label.generation {
        report.add(
            Code::GeometryReplicaDiffers,
            structure,
            context.ofs_area + state.base_offset,
            "the live base version's geometry replica differs from the label's",
        );
    }
}

/// Pass 3: the backup log of one instance whose version log recovered.
pub(crate) fn check_backup_log(geometry: &Geometry, recovery: &InstanceRecovery, report: &mut Report) {
    let structure = format!("backup log of instance {}", recovery.instance);
    let context = area_context(geometry, LogKind::Backup, recovery.instance);
    match &recovery.backup {
        BackupRecovery::StartOutside { ofs_backup_start, len_area } => report.add(
            Code::BackupStartOutside,
            structure,
            context.ofs_area,
            format!("the backup start point {ofs_backup_start} is not an object position of the {len_area}-byte area"),
        ),
        BackupRecovery::StartMismatch { offset, recorded_lsn, found_lsn } => {
            // SPEC.md §9.6: a larger lsn, or a smaller one on an object written after the version.
            let why = if found_lsn > recorded_lsn {
                ""
            } else {
                ", written after the version (it holds sequence numbers above the version's last sequence, or its chain passes the recorded lsn elsewhere)"
            };
            report.add(
                Code::BackupStartMismatch,
                structure,
                context.ofs_area + offset,
                format!("the version says the backup log restarts with lsn {recorded_lsn}, but the object there has lsn {found_lsn}{why}: its writes are not replayed"),
            );
        }
        BackupRecovery::Sequence(error) => {
            let offset = match error {
                lds_format::algorithms::recovery::BackupLogError::SequenceNotIncreasing { offset, .. } => *offset,
            };
            report.add(Code::BackupLogSequence, structure, context.ofs_area + offset, error.to_string());
        }
        BackupRecovery::Recovered { state, end, .. } => {
            report.summary.live_log_objects += state.objects.len() as u64;
            report_chain_end(end, &context, report, &structure);
            if let Some(above) = &state.sn_above {
                report.add(
                    Code::BackupLogSnAbove,
                    structure,
                    context.ofs_area + above.offset,
                    format!(
                        "the {} with lsn {} has sn {}, above the version log's {}: no writer writes one; recovery counts it as the sn before it",
                        above.object_type.name(),
                        above.lsn,
                        above.sn,
                        above.ceiling
                    ),
                );
            }
        }
    }
}

fn why(end: &ChainEnd) -> String {
    match end {
        ChainEnd::Invalid { error, .. } => error.to_string(),
        ChainEnd::Stale { lsn, expected_lsn, .. } => {
            format!("an object with lsn {lsn} where {expected_lsn} was expected")
        }
        ChainEnd::WrapRight | ChainEnd::AreaEnd => String::new(),
    }
}

fn lost(later: &LaterObjects) -> String {
    format!("{later} {}", if later.count == 1 { "is" } else { "are" })
}

/// Reports how a live chain ends: damage (207, 303), a torn head (206, 306) or unflushed
/// writes after a gap (307).
fn report_chain_end(verdict: &ChainEndVerdict, context: &AreaContext, report: &mut Report, structure: &str) {
    let version_log = context.kind == LogKind::Version;
    match verdict {
        ChainEndVerdict::Clean => {}
        ChainEndVerdict::Broken { offset, end, later } => {
            let code = if version_log { Code::VersionLogChainBroken } else { Code::BackupLogChainBroken };
            report.add(
                code,
                structure,
                context.ofs_area + offset,
                format!("the live chain breaks here ({}); {} lost to recovery", why(end), lost(later)),
            );
        }
        ChainEndVerdict::UnflushedAfterGap { offset, later } => report.add(
            Code::BackupLogUnflushedAfterGap,
            structure,
            context.ofs_area + offset,
            format!("{} valid objects (lsn {} to {}) stand after a position the next append never reached (stale or empty bytes there): unflushed writes a crash reordered; recovery ignores them", later.count, later.first_lsn, later.last_lsn),
        ),
        ChainEndVerdict::TornHead { offset, next_lsn, end, later } => {
            let code = if version_log { Code::VersionLogTornHead } else { Code::BackupLogTornHead };
            let why = match end {
                ChainEnd::Invalid { error, .. } => error.to_string(),
                _ => "its magic or header is damaged".to_string(),
            };
            let after = later.map_or_else(String::new, |later| {
                format!(
                    "; {} valid later objects (lsn {} to {}) follow, unsynced writes that landed before it (if they were synced, damage lost them)",
                    later.count, later.first_lsn, later.last_lsn
                )
            });
            report.add(code, structure, context.ofs_area + offset, format!("the object at the head (lsn {next_lsn}) is incomplete or damaged ({why}); recovery ignores it, as a write a crash interrupted{after}"));
        }
    }
}

/// Reads a structure, sectors that cannot be read as zeros, reporting them (107).
pub(crate) fn read_reporting(
    device: &(impl ReadAt + ?Sized),
    offset: u64,
    len: u64,
    sector: u64,
    structure: &str,
    report: &mut Report,
) -> Result<Vec<u8>, CheckError> {
    let (bytes, unreadable) = lds_volume::block::read_tolerant(device, offset, len, sector)?;
    report_unreadable(&unreadable, structure, report);
    Ok(bytes)
}

/// Reports the sectors of a structure that could not be read and were read as zeros (107).
pub(crate) fn report_unreadable(unreadable: &[u64], structure: &str, report: &mut Report) {
    if let (Some(&first), Some(&last)) = (unreadable.first(), unreadable.last()) {
        report.add(
            Code::UnreadableSector,
            structure.to_string(),
            first,
            format!(
                "{} sectors from offset {first} to {last} cannot be read; they are read as zeros",
                unreadable.len()
            ),
        );
    }
}

/// The value pointers of the batches `recovery` replays; a pointer that does not decode is
/// reported.
fn replayed_pointers(
    geometry: &Geometry,
    instance: u32,
    recovery: &InstanceRecovery,
    backup_area: &[u8],
    report: &mut Report,
) -> Vec<crate::pass_values::Pointed> {
    let context = lds_format::log::area_context(geometry, LogKind::Backup, instance);
    let (ofs_area, _) = geometry.log_area(LogKind::Backup, instance);
    let structure = format!("backup log of instance {instance}");
    let mut values = crate::pass_values::ChunkValues::default();
    let mut problems = Report::default();
    // Replay failures are the backup log checks' to report.
    let _ = recovery.replay(backup_area, &context, |sequence, kind, key, value| {
        values.entry(kind, key, sequence, value, (ofs_area, &structure), &mut problems);
    });
    report.problems.extend(problems.problems);
    values.pointers
}
