//! An LDS volume on a device, below both the engine and the checker: what a volume is read and
//! written through (`block`), block devices and pre-allocated image files with their locks and
//! flushes (`os_device`, SPEC.md §2), a volume of several devices (`members`), the two label
//! copies (`labels`, SPEC.md §4), the safety contract of a writer (`safety`) and known
//! signatures for mkfs. It reads and writes bytes and runs the inspection walks (SPEC.md §15)
//! for dump tools; what the bytes mean is `lds-format`'s.
//!
//! Its files import each other without a circle, from `block` (the traits) up to `volume`,
//! `safety` and `undo`.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![deny(unsafe_code)]

pub mod block;
pub mod error;
pub mod identity;
pub mod inspect;
pub mod labels;
mod mapped;
pub mod members;
pub mod os_device;
pub mod safety;
pub mod signature;
pub mod undo;
pub mod volume;

pub use block::{Access, AlignedBuffer, BlockDevice, DeviceError, MemoryImage, PageCache, ReadAt};
pub use error::VolumeError;
pub use labels::read_labels;
pub use members::{Members, VolumeDevice};
pub use os_device::{Device, DeviceKind, OpenMode};
pub use volume::Volume;
