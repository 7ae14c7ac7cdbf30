//! Guards `lds crashtest`: a named workload runs, its crash states are counted and checked
//! with no failure (with engine techniques too), and usage errors are named.

use lds_cli::crashtest::{run_crashtest, CrashtestOptions};

fn options(workload: &str) -> CrashtestOptions {
    CrashtestOptions {
        workload: workload.into(),
        seed: 1,
        runs: 1,
        ops: 40,
        exhaustive: 4,
        samples: 4,
        no_tears: false,
        unbuffered: true,
        out: std::env::temp_dir().join(format!("lds-crashtest-test-{}", std::process::id())),
        minimize: 20,
        minimize_seconds: 60,
        json: true,
        technique: String::new(),
    }
}

#[test]
fn basic_workload_has_no_failing_crash_state() {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(run_crashtest(&options("basic"), &mut out, &mut err), 0, "{}", String::from_utf8_lossy(&err));
    let counts: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(counts["schema"], "lds-crashtest/1");
    assert_eq!(counts["failures"], 0);
    assert_eq!(counts["reproducer_operations"], serde_json::json!([]));
    assert!(counts["distinct_images"].as_u64() > Some(10), "{counts}");
}

#[test]
fn a_short_random_workload_has_no_failing_crash_state() {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(run_crashtest(&options("random"), &mut out, &mut err), 0, "{}", String::from_utf8_lossy(&err));
}

#[test]
fn a_short_wrap_heavy_workload_has_no_failing_crash_state() {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let options = CrashtestOptions { ops: 80, ..options("random-wrap") };
    assert_eq!(run_crashtest(&options, &mut out, &mut err), 0, "{}", String::from_utf8_lossy(&err));
}

#[test]
fn an_unknown_workload_is_a_usage_error() {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(run_crashtest(&options("nonsense"), &mut out, &mut err), 2);
    assert!(String::from_utf8_lossy(&err).contains("unknown workload 'nonsense'"));
}

#[test]
fn every_crash_state_of_lds_repair_undoes_or_finishes() {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(run_crashtest(&options("repair"), &mut out, &mut err), 0, "{}", String::from_utf8_lossy(&err));
    let counts: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(counts["failures"], 0);
    // One repair per kind of damage the checker reports (labels, both logs, chunk footers,
    // tails and blocks; zeroed, flipped, stale), each with its crash states.
    assert!(counts["workloads"].as_u64() >= Some(15), "{counts}");
    assert!(counts["distinct_images"].as_u64() > Some(300), "{counts}");
}

#[test]
fn every_crash_state_of_lds_resize_is_consistent_and_finished_by_a_second_run() {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(run_crashtest(&options("resize"), &mut out, &mut err), 0, "{}", String::from_utf8_lossy(&err));
    let counts: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(counts["failures"], 0);
    // A grow and two shrinks that move chunks, a device joining and two leaving with their
    // chunks, each with its crash states.
    assert_eq!(counts["workloads"], 6, "{counts}");
    assert!(counts["distinct_images"].as_u64() > Some(200), "{counts}");
    let err = String::from_utf8_lossy(&err);
    assert!(err.contains("chunks moved"), "{err}");
    assert!(err.contains("join a device") && err.contains("remove the middle of three devices"), "{err}");
}

#[test]
fn every_crash_state_of_lds_mkfs_is_the_old_volume_refused_or_the_new_one() {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(run_crashtest(&options("mkfs"), &mut out, &mut err), 0, "{}", String::from_utf8_lossy(&err));
    let counts: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(counts["failures"], 0);
    // Over a volume with the same layout, with a longer version log, with its own uuid, and
    // over zeros.
    assert_eq!(counts["workloads"], 4, "{counts}");
    assert!(counts["distinct_images"].as_u64() > Some(100), "{counts}");
    let err = String::from_utf8_lossy(&err);
    assert!(err.contains("mkfs over zeros"), "{err}");
}

#[test]
fn every_crash_state_of_two_instances_opened_together_recovers_each_instance() {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let options = CrashtestOptions { runs: 2, unbuffered: true, ..options("instances") };
    assert_eq!(run_crashtest(&options, &mut out, &mut err), 0, "{}", String::from_utf8_lossy(&err));
    let counts: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(counts["failures"], 0);
    assert_eq!(counts["workloads"], 2, "{counts}");
    assert!(counts["distinct_images"].as_u64() > Some(100), "{counts}");
}

#[test]
fn crash_states_with_level_pinning_recover_and_read_through_pinned_tails() {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let options = CrashtestOptions { ops: 120, technique: "level-pinning".into(), ..options("random-journal") };
    assert_eq!(run_crashtest(&options, &mut out, &mut err), 0, "{}", String::from_utf8_lossy(&err));
    let counts: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(counts["failures"], 0);
    assert_eq!(counts["techniques"], "level-pinning");
    assert!(counts["distinct_images"].as_u64() > Some(50), "{counts}");
}

#[test]
fn an_unknown_technique_is_a_usage_error_naming_the_known_ones() {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let options = CrashtestOptions { technique: "warp-drive".into(), ..options("basic") };
    assert_eq!(run_crashtest(&options, &mut out, &mut err), 2);
    let err = String::from_utf8_lossy(&err);
    assert!(err.contains("unknown technique 'warp-drive'") && err.contains("level-pinning"), "{err}");
}

#[test]
fn crash_states_with_log_chunks_recover_and_read_through_references() {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let options = CrashtestOptions { ops: 120, technique: "triad-log".into(), ..options("random-log") };
    assert_eq!(run_crashtest(&options, &mut out, &mut err), 0, "{}", String::from_utf8_lossy(&err));
    let counts: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(counts["failures"], 0);
    assert_eq!(counts["techniques"], "triad-log");
    assert!(counts["distinct_images"].as_u64() > Some(500), "{counts}");
}

#[test]
fn the_three_triad_techniques_run_together_on_a_volume_with_every_feature_they_need() {
    // The engine refuses to open a volume without chunk_sketches (triad-disk) or log_tables
    // (triad-log): a run that checks crash images at all had both.
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let technique = "triad-mem,triad-disk,triad-log".to_string();
    let options = CrashtestOptions { ops: 80, technique, ..options("random-log") };
    assert_eq!(run_crashtest(&options, &mut out, &mut err), 0, "{}", String::from_utf8_lossy(&err));
    let counts: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(counts["failures"], 0);
    assert!(counts["distinct_images"].as_u64() > Some(100), "{counts}");
}

#[test]
fn techniques_the_engine_refuses_together_are_a_usage_error() {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let options = CrashtestOptions { technique: "triad-log,forest".into(), ..options("random-log") };
    assert_eq!(run_crashtest(&options, &mut out, &mut err), 2);
    let err = String::from_utf8_lossy(&err);
    assert!(err.contains("--technique") && err.contains("triad-log does not go with"), "{err}");
    assert!(out.is_empty());
}
