//! Benchmarks for LDS and its peers: db_bench's workloads and YCSB A to F from one generator,
//! driven through one `Store` interface, with CPU, memory and device counters; plus the
//! device's own limits. `lds bench` is the command; tools/bench/run.sh runs the whole
//! comparison of BENCHMARKS.md.
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod error;
pub mod full_compaction;
pub mod gen;
pub mod hist;
pub mod limits;
pub mod measure;
pub mod peers;
pub mod recovery;
pub mod run;
pub mod store;
pub mod volume;

pub use error::BenchError;
