//! The `lds` command as a library: each subcommand is a function that takes its options and
//! output streams and returns an exit code, so commands are tested without spawning
//! processes.
#![deny(clippy::unwrap_used)]

pub mod bench;
pub mod cli;
pub mod compaction;
pub mod crashtest;
pub mod device;
pub mod dump;
pub mod fsck;
pub mod json;
pub mod json_stream;
pub mod kv;
pub mod manual;
pub mod metadump;
pub mod mkfs;
pub mod output;
pub mod render;
pub mod repair;
pub mod resize;
pub mod salvage;
pub mod session;
pub mod undo;
pub mod units;
