//! Why the simulator could not run something (`SimError`): a workload on the engine, a
//! tool's recorded run, a case's setup. Apart from what an oracle finds on a crash image,
//! which `enumerate::Failure` carries (the oracle, the state, what went wrong).
//!
//! Each variant keeps the text the simulator printed before it had typed errors (`lds
//! crashtest` prints them, tests compare some) and the error it comes from as `source()`.

use lds_check::CheckError;
use lds_format::algorithms::recovery::VersionLogError;
use lds_format::label::LabelChoiceError;
use lds_format::FormatError;
use lds_repair::resize::ResizeError;
use lds_repair::RepairError;
use lds_tools::mkfs::MkfsError;
use lds_volume::undo::UndoError;
use lds_volume::{DeviceError, VolumeError};

/// Why the simulator could not run a workload, a tool or a case.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The simulator's layout, or a case's variant of it, cannot be planned (SPEC.md §4).
    #[error("{source}")]
    Layout {
        /// The planner's refusal.
        #[source]
        source: FormatError,
    },
    /// The engine refuses the technique names `set_techniques` was given.
    #[error("{reason}")]
    Techniques {
        /// The names, as given.
        names: String,
        /// The engine's refusal (`Options::with_techniques`).
        reason: String,
    },
    /// The engine failed opening a store, running an operation, reading or closing it.
    #[error("{step}{source}")]
    Engine {
        /// What it was doing and where, as the message opens with it (`operation 3 (put
        /// key-001): `, `open before the compaction: `); empty where the engine's own message
        /// names it.
        step: String,
        /// The engine's error.
        #[source]
        source: lds_engine::Error,
    },
    /// fsck could not check the volume (not a problem it found: it could not run).
    #[error("fsck: {source}")]
    Check {
        /// fsck's error.
        #[source]
        source: CheckError,
    },
    /// A device of the simulated volume could not be read: its labels, its log areas.
    #[error("{source}")]
    Device {
        /// The device's error, naming the device and the offset.
        #[source]
        source: DeviceError,
    },
    /// The windows of the simulated device do not assemble into a volume (SPEC.md §4.3).
    #[error("{source}")]
    Volume {
        /// Why.
        #[source]
        source: VolumeError,
    },
    /// No label copy of the volume can be used (SPEC.md §4.2).
    #[error("{choice:?}")]
    Labels {
        /// Why (neither copy valid, or a conflict).
        choice: LabelChoiceError,
    },
    /// The version log of an instance does not recover (SPEC.md §9.2).
    #[error("{at}{source}")]
    VersionLog {
        /// Where, as the message opens with it (`instance 1: `); empty for instance 0 of the
        /// simulator's one-instance volume.
        at: String,
        /// Why.
        #[source]
        source: VersionLogError,
    },
    /// The backup log of the simulated volume does not recover (SPEC.md §9.3).
    #[error("the backup log is damaged: {damage}")]
    BackupLogDamaged {
        /// The damage recovery found, as `Debug` shows it.
        damage: String,
    },
    /// A structure on the simulated volume does not decode.
    #[error("{at}{source}")]
    Decode {
        /// Where, as the message opens with it (`slot 12: `); empty where the decoder's
        /// message gives the offset.
        at: String,
        /// The decoder's error.
        #[source]
        source: FormatError,
    },
    /// `lds repair -y` failed.
    #[error("repair: {source}")]
    Repair {
        /// The repair's error (its refusals say that nothing was written).
        #[source]
        source: RepairError,
    },
    /// A resize or a device change (or the plan of one) failed or was refused.
    #[error("{source}")]
    Resize {
        /// The tool's error, naming the device.
        #[source]
        source: ResizeError,
    },
    /// mkfs's read-back does not accept the volume it wrote.
    #[error("{source}")]
    MkfsVerify {
        /// The read-back's error.
        #[source]
        source: MkfsError,
    },
    /// Oracle U on the finished undo file of a completed run: the file could not be used.
    #[error("U: {step}: {source}")]
    Undo {
        /// What failed: finishing it, parsing it, undoing from it.
        step: &'static str,
        /// The undo file's error.
        #[source]
        source: UndoError,
    },
    /// Salvage of an image failed, or a completed repair does not keep what salvage reads
    /// (I10): `salvage_oracle`'s message.
    #[error("{detail}")]
    Salvage {
        /// What went wrong, with the key and where salvage read it.
        detail: String,
    },
    /// A completed run broke an oracle before any crash state was built.
    #[error("{oracle}: {detail}")]
    Violated {
        /// The oracle (docs/reliability.md).
        oracle: &'static str,
        /// What went wrong.
        detail: String,
    },
    /// A case's starting volume cannot be made as the case needs it.
    #[error("{what}")]
    Setup {
        /// What is missing, and on which device.
        what: String,
    },
    /// A tool's completed run (before any crash) did not end where it must.
    #[error("{case}: {what}")]
    Unfinished {
        /// The case.
        case: String,
        /// What is wrong after the run.
        what: String,
    },
    /// I4: a recovery after a second crash went back before the first recovery's sequence
    /// number or the last synced write's.
    #[error("the recovered sequence number {recovered} is below {floor}")]
    SequenceBelow {
        /// The recovered store's last sequence number.
        recovered: u64,
        /// The least it may be.
        floor: u64,
    },
    /// An error of a named case or step.
    #[error("{context}: {source}")]
    Within {
        /// The case or step (`join a device`, `after repair`, `operation 3 (put key-001 on
        /// instance 1)`).
        context: String,
        /// What failed in it.
        #[source]
        source: Box<SimError>,
    },
}

impl SimError {
    /// The engine's `source`, failing at `step` (see `Engine`).
    pub(crate) fn engine(step: impl Into<String>) -> impl FnOnce(lds_engine::Error) -> Self {
        let step = step.into();
        move |source| Self::Engine { step, source }
    }

    /// This error, in the case or step `context`.
    pub fn within(context: impl Into<String>) -> impl FnOnce(Self) -> Self {
        let context = context.into();
        move |source| Self::Within { context, source: Box::new(source) }
    }

    /// A salvage oracle's message (`salvage_oracle` returns text).
    pub(crate) fn salvage(detail: String) -> Self {
        Self::Salvage { detail }
    }

    /// True when the error is a refusal that says nothing was written (repair with too few
    /// free slots or no room in the version log: `lds salvage` is the way out).
    pub fn wrote_nothing(&self) -> bool {
        match self {
            Self::Repair { .. } | Self::Resize { .. } => self.to_string().contains("nothing was written"),
            Self::Within { source, .. } => source.wrote_nothing(),
            _ => false,
        }
    }
}

impl From<lds_engine::Error> for SimError {
    fn from(source: lds_engine::Error) -> Self {
        Self::Engine { step: String::new(), source }
    }
}

impl From<CheckError> for SimError {
    fn from(source: CheckError) -> Self {
        Self::Check { source }
    }
}

impl From<DeviceError> for SimError {
    fn from(source: DeviceError) -> Self {
        Self::Device { source }
    }
}

impl From<VolumeError> for SimError {
    fn from(source: VolumeError) -> Self {
        Self::Volume { source }
    }
}

impl From<LabelChoiceError> for SimError {
    fn from(choice: LabelChoiceError) -> Self {
        Self::Labels { choice }
    }
}

impl From<ResizeError> for SimError {
    fn from(source: ResizeError) -> Self {
        Self::Resize { source }
    }
}

impl From<MkfsError> for SimError {
    fn from(source: MkfsError) -> Self {
        Self::MkfsVerify { source }
    }
}

impl From<RepairError> for SimError {
    fn from(source: RepairError) -> Self {
        Self::Repair { source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_case_error_keeps_its_text_and_its_source() {
        let inner = SimError::Setup { what: "no device 3 to join".into() };
        let error = SimError::within("join a device")(inner);
        assert_eq!(error.to_string(), "join a device: no device 3 to join");
        assert_eq!(error.source().map(ToString::to_string).as_deref(), Some("no device 3 to join"));
        assert!(matches!(error, SimError::Within { ref source, .. } if matches!(**source, SimError::Setup { .. })));
        assert!(!error.wrote_nothing());
    }

    #[test]
    fn the_sequence_finding_reads_as_before() {
        let error = SimError::SequenceBelow { recovered: 4, floor: 9 };
        assert_eq!(error.to_string(), "the recovered sequence number 4 is below 9");
        assert!(error.source().is_none());
    }
}
