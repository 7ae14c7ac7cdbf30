//! `lds bench` end to end on a small image: every benchmark runs, counts add up, and what
//! the reads find matches what the writes put.

use clap::Parser;
use lds_cli::bench::{run, BenchOptions};

#[derive(Parser)]
struct Wrapper {
    #[command(flatten)]
    options: BenchOptions,
}

fn options(args: &[&str]) -> BenchOptions {
    Wrapper::parse_from(std::iter::once("lds-bench").chain(args.iter().copied())).options
}

fn run_json(options: &BenchOptions) -> serde_json::Value {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(options, &mut out, &mut err);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&out)))
}

fn result<'a>(document: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    document["results"]
        .as_array()
        .and_then(|results| results.iter().find(|result| result["benchmark"] == name))
        .unwrap_or_else(|| panic!("no result for {name}"))
}

#[test]
fn every_benchmark_runs_on_a_small_image() {
    let path = std::env::temp_dir().join(format!("lds-bench-test-{}.img", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let path_text = path.display().to_string();
    let options = options(&[
        "--benchmarks",
        "all",
        "--num",
        "3000",
        "--sync-ops",
        "50",
        "--ycsb-ops",
        "2000",
        "--size",
        "48MiB",
        "--slot-size",
        "256KiB",
        "--write-buffer",
        "64KiB",
        "--json",
        &path_text,
    ]);
    let document = run_json(&options);
    let _ = std::fs::remove_file(&path);
    assert_eq!(document["schema"], "lds-bench/1");
    assert_eq!(document["results"].as_array().map(Vec::len), Some(15));
    // fillseq writes keys 0..3000; readseq then reads exactly those.
    assert_eq!(result(&document, "fillseq")["ops"], 3000);
    // fillrandom starts fresh: readseq after it sees only the distinct keys it drew.
    let readseq = result(&document, "readseq")["ops"].as_u64().unwrap_or(0);
    assert!(readseq > 1500 && readseq <= 3000, "readseq read {readseq}");
    // After fillrandom and overwrite about 86% of the key space is present.
    let found = result(&document, "readrandom")["found"].as_u64().unwrap_or(0);
    assert!(found > 2200 && found < 3000, "readrandom found {found}");
    // Every YCSB-C read hits a loaded record; every E scan (95% of its operations, the rest
    // inserts) finds something.
    assert_eq!(result(&document, "ycsb-c")["found"], 2000);
    let scans = result(&document, "ycsb-e")["found"].as_u64().unwrap_or(0);
    assert!((1800..2000).contains(&scans), "ycsb-e scans that found entries: {scans}");
    for benchmark in document["results"].as_array().into_iter().flatten() {
        assert!(benchmark["ops_per_sec"].as_f64().unwrap_or(0.0) > 0.0, "{benchmark}");
        assert!(benchmark["p50_us"].as_f64().unwrap_or(-1.0) >= 0.0, "{benchmark}");
    }
    let fill = result(&document, "fillrandom");
    assert!(fill["user_bytes_written"].as_u64().unwrap_or(0) > 3000 * 16);
    assert!(fill["write_amp"].as_f64().unwrap_or(0.0) > 0.0, "{fill}");
    assert!(result(&document, "fillsync")["flushes_per_op"].as_f64().unwrap_or(0.0) >= 1.0);
}

#[test]
fn level_pinning_runs_reads_through_pinned_tails() {
    let path = std::env::temp_dir().join(format!("lds-bench-pinning-{}.img", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let path_text = path.display().to_string();
    let arguments = [
        "--benchmarks",
        "fillrandom,readrandom",
        "--num",
        "20000",
        "--size",
        "48MiB",
        "--slot-size",
        "256KiB",
        "--write-buffer",
        "64KiB",
        "--technique",
        "level-pinning",
        "--lds-option",
        "tail_cache_bytes=0",
        "--json",
        &path_text,
    ];
    let document = run_json(&options(&arguments));
    let _ = std::fs::remove_file(&path);
    assert_eq!(document["techniques"], "level-pinning");
    let found = result(&document, "readrandom")["found"].as_u64().unwrap_or(0);
    // 20,000 random draws from 20,000 keys leave about 63% of them (1 - 1/e).
    assert!(found > 11_500 && found < 13_800, "readrandom found {found}");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let unknown =
        options(&["--technique", "nonsense", "--num", "10", "--size", "48MiB", "--slot-size", "256KiB", &path_text]);
    assert_eq!(run(&unknown, &mut out, &mut err), 1);
    let _ = std::fs::remove_file(&path);
    assert!(
        String::from_utf8_lossy(&err).contains("unknown technique 'nonsense'"),
        "{}",
        String::from_utf8_lossy(&err)
    );
}

#[test]
fn a_peer_not_built_in_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("lds-bench-peer-{}", std::process::id()));
    let dir_text = dir.display().to_string();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(&options(&["--engine", "nosuchdb", &dir_text]), &mut out, &mut err);
    assert_eq!(code, 1);
    let message = String::from_utf8_lossy(&err);
    assert!(message.contains("unknown engine 'nosuchdb'"), "{message}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn device_limits_on_an_image_file() {
    let path = std::env::temp_dir().join(format!("lds-bench-limits-{}.img", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let path_text = path.display().to_string();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(
        &options(&["--device-limits", "--size", "16MiB", "--slot-size", "1MiB", "--json", &path_text]),
        &mut out,
        &mut err,
    );
    let _ = std::fs::remove_file(&path);
    let message = String::from_utf8_lossy(&err);
    if code != 0 {
        // A temporary directory on tmpfs has no O_DIRECT; the error says so and names the file.
        assert!(message.contains("O_DIRECT") && message.contains(&path_text), "{message}");
        return;
    }
    let document: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(document["limits"]["sequential_bytes"], 8u64 << 20);
    assert!(document["limits"]["append_flush_p50_us"].as_f64().unwrap_or(0.0) > 0.0);
}

/// `--full-compaction` on a small image: the journaled rewrite of the last level needs fewer
/// extra slots than the plain one, and a rewrite killed halfway resumes from its journal (the
/// binary itself runs, since the crash is a child process aborting).
#[test]
fn full_compaction_measures_early_cleaning_and_resume() {
    let path = std::env::temp_dir().join(format!("lds-bench-fc-{}.img", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_lds"))
        .args(["bench", "--full-compaction", "--num", "30000", "--value-max", "100"])
        .args(["--slot-size", "64KiB", "--size", "64MiB", "--json"])
        .arg(&path)
        .output()
        .unwrap_or_else(|error| panic!("lds bench: {error}"));
    let _ = std::fs::remove_file(&path);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let document: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("{error}: {}", String::from_utf8_lossy(&output.stdout)));
    assert_eq!(document["schema"], "lds-bench-compaction/1");
    let (plain, journaled) = (&document["without_journal"], &document["with_journal"]);
    let live = plain["live_slots"].as_u64().unwrap_or(0);
    assert!(live >= 16, "too small to journal: {document}");
    // Without the journal every input stays until the end: the outputs need as many again.
    assert!(plain["extra_slots"].as_u64() >= Some(live), "{document}");
    assert_eq!(plain["journal_records"], 0);
    // With it, cleaned inputs are reused: far fewer extra slots.
    assert!(journaled["journal_records"].as_u64() >= Some(2), "{document}");
    assert!(journaled["extra_slots"].as_u64() < Some(live / 2), "{document}");
    assert_eq!(plain["outputs"], journaled["outputs"]);
    let crash = &document["crash"];
    assert_eq!(crash["process_aborted"], true, "{document}");
    assert!(crash["outputs_persisted"].as_u64() > Some(0), "{document}");
    assert!(crash["resumed_compaction_id"].is_u64(), "{document}");
    assert_eq!(crash["content_verified"], true);
    assert!(document["live_entries"].as_u64() > Some(15_000), "{document}");
}
