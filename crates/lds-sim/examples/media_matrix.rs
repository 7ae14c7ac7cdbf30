//! Writes docs/media-matrix.md: the single-fault media matrix (docs/reliability.md L4) over every
//! metadata sector and every block sector of the matrix's volume, eight flips per sector.
//! `cargo run -p lds-sim --example media_matrix [-- OUTPUT]`.

use std::time::Instant;

use lds_sim::media::{build_volume, markdown, run_matrix, targets, MatrixRun};

fn main() {
    let output = std::env::args()
        .nth(1)
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/media-matrix.md").to_string());
    let started = Instant::now();
    let volume = build_volume().unwrap_or_else(|error| panic!("cannot build the volume: {error}"));
    let data_sectors_per_slot = u64::MAX;
    let targets = targets(&volume, data_sectors_per_slot).unwrap_or_else(|error| panic!("{error}"));
    let flips = 8;
    // The engine's panics are caught and counted; keep their messages out of the output.
    std::panic::set_hook(Box::new(|_| {}));
    let matrix = run_matrix(&volume, &targets, flips);
    let _ = std::panic::take_hook();
    let run = MatrixRun { flips, data_sectors_per_slot };
    let document = markdown(&volume, &matrix, &run);
    std::fs::write(&output, document).unwrap_or_else(|error| panic!("{output}: {error}"));
    let total = matrix.total();
    println!(
        "{} sectors, {} cases in {:.1} s: {} detected, {} tolerated, {} prefix, {} rolled back, {} wrong, {} engine wrong, {} broken; written to {output}",
        targets.len(),
        total.cases,
        started.elapsed().as_secs_f64(),
        total.detected,
        total.tolerated,
        total.prefix,
        total.rolled_back,
        total.wrong,
        total.engine_wrong,
        total.broken
    );
}
