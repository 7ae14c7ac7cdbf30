//! Writes the volume of `lds_fixtures::many_objects` to a file: a version log full of small
//! valid delta versions, the case docs/tools.md ("Memory") measures every tool on.
//!
//! ```text
//! cargo run --release -p lds-fixtures --example many_objects -- OUT.img [LOG_MIB [OBJECTS]]
//! ```
//!
//! `LOG_MIB` is the version log's size in MiB (default 64: about 599,000 objects);
//! `OBJECTS` caps the delta versions appended (default: fill the log).

use std::process::ExitCode;

use lds_fixtures::many_objects::{many_objects, ManyObjects};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: many_objects OUT.img [LOG_MIB [OBJECTS]]";
    let Some(path) = args.first() else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    let number = |index: usize, what: &str| -> Result<Option<u64>, String> {
        args.get(index).map(|text| text.parse::<u64>().map_err(|error| format!("{what} {text:?}: {error}"))).transpose()
    };
    let (log_mib, objects) = match (number(1, "LOG_MIB"), number(2, "OBJECTS")) {
        (Ok(log_mib), Ok(objects)) => (log_mib.unwrap_or(64), objects),
        (Err(error), _) | (_, Err(error)) => {
            eprintln!("{error}\n{usage}");
            return ExitCode::from(2);
        }
    };
    let built = many_objects(ManyObjects { len_version_log: log_mib << 20, objects });
    if let Err(error) = std::fs::write(path, &built.image.bytes) {
        eprintln!("{path}: {error}");
        return ExitCode::FAILURE;
    }
    println!(
        "{path}: {} bytes, version log of {log_mib} MiB holding {} objects ({} bytes used)",
        built.image.bytes.len(),
        built.version_log_objects,
        built.version_log_bytes
    );
    ExitCode::SUCCESS
}
