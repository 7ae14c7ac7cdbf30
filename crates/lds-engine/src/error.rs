//! Engine errors: each names what failed and where, and keeps its cause as `source()`.

use std::sync::Arc;

use lds_format::algorithms::instance::LogDamage;
use lds_format::algorithms::recovery::VersionLogError;
use lds_format::FormatError;
use lds_volume::{DeviceError, VolumeError};

/// Why an engine operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The device failed (a read, write or flush; the device, offset and OS error are in it).
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// The volume cannot be opened (no label, truncated, ...).
    #[error(transparent)]
    Volume(VolumeError),
    /// On-disk data is corrupt.
    #[error("{path}: corrupt: {source}")]
    Corrupt {
        /// The device.
        path: String,
        /// What and where (structure, field, device offset).
        source: FormatError,
    },
    /// Recovery failed (SPEC.md §9).
    #[error("{path}: instance {instance}: recovery failed: {source}")]
    Recovery {
        /// The device.
        path: String,
        /// The instance.
        instance: u32,
        /// Why.
        source: Box<RecoveryError>,
    },
    /// The instance does not exist.
    #[error("{path}: instance {instance} does not exist (the volume has {instance_count})")]
    NoSuchInstance {
        /// The device.
        path: String,
        /// The instance asked for.
        instance: u32,
        /// Instances of the volume.
        instance_count: u32,
    },
    /// The volume has features this build may read but must not write (SPEC.md §4).
    #[error("{path}: the volume has read-only-compatible features this build does not know (0x{features:x}): it can only be opened read-only")]
    ReadOnlyFeatures {
        /// The device.
        path: String,
        /// `features_ro_compat`.
        features: u64,
    },
    /// A write on a store opened read-only.
    #[error("{path}: the store is open read-only")]
    ReadOnly {
        /// The device.
        path: String,
    },
    /// No free slot is left ("space full", SPEC.md §10.4). The store stays readable.
    #[error("space full: no {needed} free slots among {num_slots}; the store stays readable")]
    SpaceFull {
        /// Slots needed.
        needed: u64,
        /// Slots in the volume.
        num_slots: u64,
    },
    /// The version log cannot hold one base version of the tree and the wrap objects
    /// (SPEC.md §10.3): the tree has outgrown its version log.
    #[error("{path}: instance {instance}: the version log is full: {reason}")]
    VersionLogFull {
        /// The device.
        path: String,
        /// The instance.
        instance: u32,
        /// What did not fit.
        reason: String,
    },
    /// The backup log has no room for a write: log chunks retain it (TRIAD-LOG, SPEC.md
    /// §8.9) and no level-0 merge released them in time.
    #[error("{path}: instance {instance}: the backup log is full: {reason}")]
    BackupLogFull {
        /// The device.
        path: String,
        /// The instance.
        instance: u32,
        /// What holds it.
        reason: String,
    },
    /// Sequence numbers or log sequence numbers ran out (SPEC.md §16).
    #[error("{what} exhausted")]
    Exhausted {
        /// Which numbers.
        what: &'static str,
    },
    /// A device write or flush failed (now or earlier): writes are refused until the volume
    /// is reopened and recovered (SPEC.md §2.4).
    #[error("writes refused after a failed device write or flush ({cause}); reopen the volume to recover")]
    Poisoned {
        /// The original failure, with its device, offset and cause (an EIO, an ENOSPC, ...);
        /// `source()` gives it as an `Arc<Error>`.
        #[source]
        cause: Arc<Error>,
    },
    /// A journaled compaction cleaned inputs already: it can only be resumed, not aborted.
    #[error("compaction {compaction_id} cleaned {cleaned} inputs already: their slots may hold its outputs, so only resuming it is safe (lds compaction resume)")]
    CompactionCleaned {
        /// The compaction.
        compaction_id: u64,
        /// Inputs cleaned.
        cleaned: usize,
    },
    /// A key, value or batch is outside the limits of SPEC.md §16.
    #[error("invalid argument: {reason}")]
    InvalidArgument {
        /// What is wrong.
        reason: String,
    },
    /// The background thread could not be started.
    #[error("cannot start the background thread: {source}")]
    Thread {
        /// The OS error.
        source: std::io::Error,
    },
    /// An option needs a feature the volume lacks.
    #[error("{path}: {what} needs feature {feature}, which the volume lacks ({hint})")]
    FeatureMissing {
        /// The volume.
        path: String,
        /// What needs it.
        what: &'static str,
        /// The feature.
        feature: &'static str,
        /// How to get a volume with it.
        hint: &'static str,
    },
    /// An internal invariant failed: a bug, reported rather than acted on.
    #[error("internal invariant failed: {what}")]
    Invariant {
        /// What.
        what: String,
    },
}

/// Why recovery of an instance failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RecoveryError {
    /// The version log has no live version (SPEC.md §9.2).
    #[error(transparent)]
    VersionLog(#[from] VersionLogError),
    /// Damage no crash explains (SPEC.md §9.6): opening would serve an older state silently.
    #[error("{damage} (problem {} of the checker: damage, not a crash; opening would lose it silently)", damage.problem_number())]
    Damage {
        /// What damage.
        #[from]
        damage: LogDamage,
    },
    /// Two instances reference one slot.
    #[error("slot {slot} is referenced by instances {} and {}", instances.0, instances.1)]
    SlotConflict {
        /// The slot.
        slot: u64,
        /// The instances.
        instances: (u32, u32),
    },
    /// Two chunks of one level from 1 down overlap: reads would miss keys (problem 409 of the checker).
    #[error("chunks {} and {} of level {level} overlap", chunks.0, chunks.1)]
    LevelOverlap {
        /// The level.
        level: u8,
        /// The chunks.
        chunks: (u64, u64),
    },
    /// More than one unfinished journaled compaction: the engine runs one at a time.
    #[error("unfinished journaled compactions {ids:?}: the engine runs one at a time, so this is damage")]
    UnfinishedCompactions {
        /// Their ids.
        ids: Vec<u64>,
    },
    /// A batch replayed from the backup log points to a value chunk that is not there
    /// (SPEC.md §8.6: a value chunk written directly is durable before its batch).
    #[error("a replayed batch points to value chunk {value_chunk_id} in slot {slot}: {reason}")]
    PendingValueMissing {
        /// The value chunk.
        value_chunk_id: u64,
        /// The slot the pointer names.
        slot: u64,
        /// What the slot holds instead.
        reason: String,
    },
    /// An unfinished compaction names an input the version does not hold (problem 601 of the
    /// checker).
    #[error("compaction {compaction_id}: input chunk {chunk_id} is not in the version (problem 601 of the checker)")]
    JournalInputMissing {
        /// The compaction.
        compaction_id: u64,
        /// The input.
        chunk_id: u64,
    },
}

impl From<VolumeError> for Error {
    fn from(error: VolumeError) -> Self {
        match error {
            // A device error is the device's, whatever was being read.
            VolumeError::Device(error) => Self::Device(error),
            other => Self::Volume(other),
        }
    }
}

impl Error {
    /// The error a failed write leaves behind: the original failure, not wrapped twice.
    pub(crate) fn into_cause(self) -> Arc<Error> {
        match self {
            Self::Poisoned { cause } => cause,
            other => Arc::new(other),
        }
    }
}

/// Result of engine operations.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_poisoned_error_keeps_the_device_error_as_its_source() {
        let device = DeviceError::Flush { path: "/dev/x".into(), source: std::io::Error::from_raw_os_error(5) };
        let poisoned = Error::Poisoned { cause: Error::Device(device).into_cause() };
        let message = poisoned.to_string();
        assert!(message.contains("/dev/x: flush failed"), "{message}");
        let Some(source) = poisoned.source() else { panic!("no source") };
        let Some(device) = source.downcast_ref::<Arc<Error>>() else { panic!("the source is not the engine error") };
        assert!(matches!(device.as_ref(), Error::Device(DeviceError::Flush { .. })), "{device:?}");
        // `Device` is transparent: its source is the device error's, the OS error.
        let Some(os) = device.source() else { panic!("no OS error below") };
        assert!(os.to_string().contains("Input/output error"), "{os}");
        // Poisoning again keeps the first cause, not a wrapper of it.
        let again = Error::Poisoned { cause: poisoned.into_cause() };
        assert!(!again.to_string().contains("writes refused after a failed device write or flush (writes refused"));
    }
}
