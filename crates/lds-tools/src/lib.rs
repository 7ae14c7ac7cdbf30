//! The library of the tools that write a volume, below the `lds` command (which only parses
//! arguments and renders results) and beside the simulator that crash-tests them:
//! - `session`: the session every tool that writes a volume runs in: the volume opened
//!   exclusive with the refusals of docs/safety.md, the devices it may write named, the undo
//!   file kept and finished (one way for `repair`, `resize`, `recover`, `compaction`,
//!   `device` and `undo`);
//! - `mkfs`: the label a format asks for, the crash-safe order of its writes, and the
//!   read-back that checks them;
//! - `load`: the input of `lds load`, lines parsed and gathered into write batches;
//! - `salvage`: the volume `lds salvage --output` writes.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![deny(unsafe_code)]

pub mod load;
pub mod mkfs;
pub mod salvage;
pub mod session;

pub use session::{Session, SessionError, UndoChoice};
