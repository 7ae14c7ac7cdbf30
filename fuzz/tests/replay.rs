//! Guards docs/reliability.md I6 with every input the fuzzers have: each file of fuzz/corpus/T/ and
//! fuzz/regressions/T/ goes through target T and must not panic (a panic is a failed oracle or
//! a crash); every folder names a target; and the committed corpus is what the generator in
//! `lds_fuzz::seeds` builds (I8).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// Every file under `folder`/T/, by target.
fn inputs(folder: &str) -> Vec<(String, PathBuf)> {
    let mut files = Vec::new();
    let Ok(targets) = std::fs::read_dir(root().join(folder)) else {
        return files;
    };
    for target in targets.flatten() {
        let name = target.file_name().to_string_lossy().into_owned();
        assert!(lds_fuzz::target(&name).is_some(), "fuzz/{folder}/{name} names no target");
        let entries = std::fs::read_dir(target.path()).unwrap_or_else(|error| panic!("fuzz/{folder}/{name}: {error}"));
        for entry in entries.flatten() {
            files.push((name.clone(), entry.path()));
        }
    }
    files.sort();
    files
}

fn replay(folder: &str) -> usize {
    let files = inputs(folder);
    for (target, path) in &files {
        let bytes = std::fs::read(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let run = lds_fuzz::target(target).unwrap_or_else(|| panic!("{target}: no such target"));
        let started = Instant::now();
        let outcome = std::panic::catch_unwind(|| run(&bytes));
        assert!(outcome.is_ok(), "{}: target {target} panicked (see the message above)", path.display());
        eprintln!("{}: {:.0} ms", path.display(), started.elapsed().as_secs_f64() * 1000.0);
    }
    files.len()
}

#[test]
fn every_corpus_input_passes_its_target() {
    let count = replay("corpus");
    let targets: BTreeSet<String> = inputs("corpus").into_iter().map(|(target, _)| target).collect();
    for (target, _) in lds_fuzz::TARGETS {
        assert!(
            targets.contains(*target),
            "fuzz/corpus/{target} is missing: run `cargo run -p lds-fuzz --bin make-corpus`"
        );
    }
    assert!(count >= 2 * lds_fuzz::TARGETS.len(), "only {count} corpus files");
}

#[test]
fn every_regression_input_passes_its_target() {
    replay("regressions");
}

#[test]
fn committed_corpus_matches_the_generator() {
    let seeds = lds_fuzz::seeds::all();
    let generated = lds_fuzz::seeds::file_names(&seeds);
    let committed: BTreeSet<(String, String)> = inputs("corpus")
        .into_iter()
        .map(|(target, path)| {
            (target, path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default())
        })
        .collect();
    assert!(
        committed == generated,
        "fuzz/corpus differs from the generator: run `cargo run -p lds-fuzz --bin make-corpus`"
    );
    for seed in &seeds {
        let path = root().join("corpus").join(seed.target).join(seed.file_name());
        let bytes = std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let committed = if matches!(seed.target, "image" | "repair") {
            let mut decoded = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut decoded)
                .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            decoded
        } else {
            bytes
        };
        assert!(committed == seed.bytes, "{} differs from the generator: run make-corpus", path.display());
    }
}

#[test]
fn every_target_has_an_afl_binary_and_every_binary_a_target() {
    let folder = root().join("afl/src/bin");
    let binaries: BTreeSet<String> = std::fs::read_dir(&folder)
        .unwrap_or_else(|error| panic!("{}: {error}", folder.display()))
        .flatten()
        .filter_map(|entry| entry.file_name().to_string_lossy().strip_suffix(".rs").map(str::to_string))
        .collect();
    let targets: BTreeSet<String> = lds_fuzz::TARGETS.iter().map(|(name, _)| name.to_string()).collect();
    assert_eq!(binaries, targets, "fuzz/afl/src/bin and lds_fuzz::TARGETS differ");
    for name in &binaries {
        let source = std::fs::read_to_string(folder.join(format!("{name}.rs"))).unwrap_or_default();
        assert!(
            source.contains(&format!("lds_fuzz::{name}(data)")),
            "fuzz/afl/src/bin/{name}.rs does not call its target"
        );
    }
}
