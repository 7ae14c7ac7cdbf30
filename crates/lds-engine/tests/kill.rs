//! Guards docs/reliability.md F1 with oracles I1 and I2: a child process writing (synced, or
//! buffered) is killed with SIGKILL at random moments; after each kill the volume reopens
//! with every acknowledged write present and the recovered keys form a prefix of the writes
//! issued (no holes).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use lds_engine::{Db, Options, WriteOptions};

const CHILD_ENV: &str = "LDS_KILL_TEST_CHILD";

fn key(number: u64) -> Vec<u8> {
    format!("k{number:08}").into_bytes()
}

fn value(number: u64) -> Vec<u8> {
    format!("value-{number}-{}", "x".repeat((number % 150) as usize)).into_bytes()
}

/// The child: writes keys from `first` on, printing each acknowledged number.
fn child(path: &Path, first: u64, sync: bool) {
    let db = Db::open(path, Options::default()).unwrap_or_else(|error| panic!("child open: {error}"));
    let mut out = std::io::stdout().lock();
    // Bounded so that a fast buffered writer cannot fill the test volume; then it waits to
    // be killed.
    for number in first..KEYS_MAX {
        db.put(&key(number), &value(number), WriteOptions { sync })
            .unwrap_or_else(|error| panic!("child put: {error}"));
        let _ = writeln!(out, "{number}");
        let _ = out.flush();
    }
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Keys a child writes at most.
const KEYS_MAX: u64 = 40_000;

mod common;

/// Larger sectors and slots than the other tests: the kill test writes more.
fn image(path: &Path) {
    let request = lds_format::geometry::LayoutRequest {
        volume_len: 32 << 20,
        sector_size: Some(4096),
        slot_size: Some(256 << 10),
        len_version_log: Some(256 << 10),
        len_backup_log: Some(128 << 10),
        ..lds_format::geometry::LayoutRequest::default()
    };
    common::format_image(path, &request);
}

/// How many leading keys are present, checking each value and that nothing follows a gap.
fn recovered_prefix(path: &Path, issued_max: u64) -> u64 {
    let db = Db::open(path, Options::default()).unwrap_or_else(|error| panic!("reopen after kill: {error}"));
    let mut present = 0;
    while present <= issued_max {
        match db.get(&key(present)).unwrap_or_else(|error| panic!("get: {error}")) {
            Some(found) => {
                assert_eq!(found, value(present), "key {present} has a wrong value");
                present += 1;
            }
            None => break,
        }
    }
    for later in present + 1..=issued_max + 1 {
        assert!(
            db.get(&key(later)).unwrap_or_else(|error| panic!("get: {error}")).is_none(),
            "key {later} present after a hole at {present}"
        );
    }
    present
}

#[test]
fn killed_sync_writer_loses_no_acknowledged_write() {
    kill_rounds("killed_sync_writer_loses_no_acknowledged_write", true);
}

#[test]
fn killed_buffered_writer_leaves_a_prefix_of_its_writes() {
    kill_rounds("killed_buffered_writer_leaves_a_prefix_of_its_writes", false);
}

/// The two tests run one at a time: a child forked by one holds the other's open descriptors,
/// locks included, until it execs, and a writer opening in that window finds its volume in use.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs eight kill rounds on one image: the child writes (synced or not) until killed; the
/// recovered keys must be a prefix of those issued, holding every acknowledged key when the
/// writes were synced.
fn kill_rounds(test_name: &str, sync: bool) {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        let mut parts = spec.rsplitn(3, ':');
        let (Some(mode), Some(first), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            panic!("bad {CHILD_ENV}")
        };
        if mode == test_name {
            child(Path::new(path), first.parse().unwrap_or_else(|error| panic!("{error}")), sync);
        }
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let path = std::env::temp_dir().join(format!(
        "lds-kill-{}-{}.img",
        std::process::id(),
        if sync { "sync" } else { "buffered" }
    ));
    image(&path);
    let mut next = 0u64;
    let mut seed = 0x1234_5678_u64;
    for round in 0..8 {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let run_for = Duration::from_millis(50 + (seed >> 33) % 250);
        let mut child = Command::new(std::env::current_exe().unwrap_or_else(|error| panic!("{error}")))
            .args(["--exact", test_name, "--nocapture", "--test-threads", "1"])
            .env(CHILD_ENV, format!("{}:{next}:{test_name}", path.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|error| panic!("spawn: {error}"));
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let reader = std::thread::spawn(move || {
            let mut acknowledged = None;
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(number) = line.trim().parse::<u64>() {
                    acknowledged = Some(number);
                }
            }
            acknowledged
        });
        std::thread::sleep(run_for);
        child.kill().unwrap_or_else(|error| panic!("kill: {error}"));
        let _ = child.wait();
        let acknowledged = reader.join().unwrap_or_else(|_| panic!("reader thread"));
        let issued_max = acknowledged.map_or(next, |number| number + 1);
        let present = recovered_prefix(&path, issued_max);
        if let (true, Some(acknowledged)) = (sync, acknowledged) {
            assert!(
                present > acknowledged,
                "round {round}: key {acknowledged} was acknowledged but only {present} keys survived"
            );
        }
        assert!(present >= next, "round {round}: keys from an earlier round were lost");
        eprintln!(
            "{test_name} round {round}: {} acknowledged, {present} recovered",
            acknowledged.map_or(0, |number| number + 1)
        );
        next = present;
    }
    assert!(next > 50, "the children wrote too little for the test to mean anything: {next}");
    let _ = std::fs::remove_file(&path);
}
