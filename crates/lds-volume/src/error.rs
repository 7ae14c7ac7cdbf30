//! Why a volume cannot be opened: its labels (SPEC.md §4.2) or its devices (§4.3).

use lds_format::label::LabelChoiceError;
use lds_format::FormatError;

use crate::block::DeviceError;

/// Why a volume cannot be opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VolumeError {
    /// The device failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// No usable label.
    #[error("{path}: {}{}{}", label_choice(choice), primary.as_ref().map(|error| format!("; primary label: {error}")).unwrap_or_default(), backup.as_ref().map(|error| format!("; backup label: {error}")).unwrap_or_default())]
    Label {
        /// The device path.
        path: String,
        /// Why no copy can be used.
        choice: LabelChoiceError,
        /// The primary copy's error, if any.
        primary: Option<Box<FormatError>>,
        /// The backup copy's error, if any.
        backup: Option<Box<FormatError>>,
    },
    /// The devices of a volume of several devices do not fit together (SPEC.md §4.3).
    #[error("{path}: {reason}")]
    Devices {
        /// The device path.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A device of the volume was not found.
    #[error("{path}: the volume's device {index} (uuid {}, slots {first_slot} to {}) was not found among the files beside it, the block devices of /proc/partitions and LDS_DEVICES; give its path in LDS_DEVICES", uuid_string(device_uuid), first_slot + num_slots - 1)]
    MissingDevice {
        /// The path the volume was named by.
        path: String,
        /// The device's place in the table.
        index: usize,
        /// Its uuid.
        device_uuid: [u8; 16],
        /// Its first slot.
        first_slot: u64,
        /// Its slots.
        num_slots: u64,
    },
    /// Two or more devices claim to be one device of the volume (a clone, or a copy of its
    /// labels): none of them is used, since writing the wrong one would destroy data.
    #[error("{path}: {} devices claim to be the volume's device {index} (uuid {}): {}; refusing to guess (name the right one in LDS_DEVICES, or move the others away)", candidates.len(), uuid_string(device_uuid), candidates.iter().map(|path| path.display().to_string()).collect::<Vec<_>>().join(", "))]
    AmbiguousDevice {
        /// The path the volume was named by.
        path: String,
        /// The device's place in the table.
        index: usize,
        /// Its uuid.
        device_uuid: [u8; 16],
        /// Every path claiming it.
        candidates: Vec<std::path::PathBuf>,
    },
    /// The volume is larger than the device holding it.
    #[error("{path}: the label says the volume is {volume_len} bytes but the device has {device_len}")]
    Truncated {
        /// The device path.
        path: String,
        /// `volume_len` of the label.
        volume_len: u64,
        /// Bytes of the device.
        device_len: u64,
    },
}

/// A uuid in the canonical 8-4-4-4-12 form.
pub fn uuid_string(uuid: &[u8; 16]) -> String {
    let hex: String = uuid.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

fn label_choice(choice: &LabelChoiceError) -> &'static str {
    match choice {
        LabelChoiceError::NoValidLabel => "not an LDS volume: no valid label",
        LabelChoiceError::Conflict => "the primary and backup labels differ with the same generation",
    }
}
