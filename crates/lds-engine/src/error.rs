//! Engine errors: each names what failed and where.

use lds_format::FormatError;

use crate::device::DeviceError;
use crate::inspect::InspectError;

/// Why an engine operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The device failed.
    Device(DeviceError),
    /// The volume cannot be opened (no label, truncated, ...).
    Volume(InspectError),
    /// On-disk data is corrupt.
    Corrupt {
        /// The device.
        path: String,
        /// What and where.
        error: FormatError,
    },
    /// Recovery failed (SPEC.md §9).
    Recovery {
        /// The device.
        path: String,
        /// The instance.
        instance: u32,
        /// Why.
        reason: String,
    },
    /// No free slot is left ("space full", SPEC.md §10.4). The store stays readable.
    SpaceFull {
        /// Slots needed.
        needed: u64,
        /// Slots in the volume.
        num_slots: u64,
    },
    /// A device write or flush failed (now or earlier): writes are refused until the volume
    /// is reopened and recovered (SPEC.md §2.4).
    Poisoned {
        /// The original failure: the device error, naming the device, the offset and the
        /// cause (an EIO, an ENOSPC, ...).
        reason: String,
    },
    /// A key or value is outside the limits of SPEC.md §16.
    InvalidArgument {
        /// What is wrong.
        reason: String,
    },
    /// The instance does not exist or the volume is read-only for this build.
    Unsupported {
        /// What is wrong.
        reason: String,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Device(error) => write!(f, "{error}"),
            Self::Volume(error) => write!(f, "{error}"),
            Self::Corrupt { path, error } => write!(f, "{path}: corrupt: {error}"),
            Self::Recovery { path, instance, reason } => {
                write!(f, "{path}: instance {instance}: recovery failed: {reason}")
            }
            Self::SpaceFull { needed, num_slots } => {
                write!(f, "space full: no {needed} free slots among {num_slots}; the store stays readable")
            }
            Self::Poisoned { reason } => {
                write!(
                    f,
                    "writes refused after a failed device write or flush ({reason}); reopen the volume to recover"
                )
            }
            Self::InvalidArgument { reason } => write!(f, "invalid argument: {reason}"),
            Self::Unsupported { reason } => write!(f, "{reason}"),
        }
    }
}

impl std::error::Error for Error {}

impl Error {
    /// What poisons the store when this error fails a write: the original failure of a
    /// `Poisoned` error (not wrapped twice), or the error's message.
    pub(crate) fn poison_reason(&self) -> String {
        match self {
            Self::Poisoned { reason } => reason.clone(),
            _ => self.to_string(),
        }
    }
}

impl From<DeviceError> for Error {
    fn from(error: DeviceError) -> Self {
        Self::Device(error)
    }
}

impl From<InspectError> for Error {
    fn from(error: InspectError) -> Self {
        Self::Volume(error)
    }
}

/// Result of engine operations.
pub type Result<T> = std::result::Result<T, Error>;
