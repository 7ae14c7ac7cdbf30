//! An LDS volume on a device, below both the engine and the checker: block devices and
//! pre-allocated image files with their locks and flushes (SPEC.md §2), positioned reads
//! from devices or memory, the two label copies (SPEC.md §4), and known signatures for mkfs.
//! It reads and writes bytes and runs the inspection walks (SPEC.md §15) for dump tools; what
//! the bytes mean is `lds-format`'s.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![deny(unsafe_code)]

pub mod device;
pub mod inspect;
mod mapped;
pub mod members;
pub mod safety;
pub mod signature;
pub mod undo;
pub mod volume;

pub use device::{Access, BlockDevice, Device, DeviceError, DeviceKind, OpenMode};
pub use members::{Members, VolumeDevice};
pub use volume::{read_labels, AlignedBuffer, MemoryImage, ReadAt, Volume, VolumeError};
