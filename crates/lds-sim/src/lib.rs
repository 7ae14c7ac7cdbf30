//! Crash-consistency validation (docs/reliability.md): a simulated device that records every
//! write and flush, workloads run on the real engine over it, and an enumerator that builds
//! crash images (any subset of unflushed writes, torn writes) and checks each against the
//! oracles I1 (synced writes present), I2 (a prefix of the operations, batches atomic),
//! I3 (fsck clean) and I5 (recovery idempotent).
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]

pub mod device_changes;
pub mod enumerate;
pub mod error;
mod images;
pub mod instances;
pub mod media;
pub mod minimize;
pub mod mkfs;
pub mod repair;
pub mod repeat;
pub mod resize;
pub mod salvage_oracle;
pub mod sim_device;
pub mod workload;

pub use error::SimError;
