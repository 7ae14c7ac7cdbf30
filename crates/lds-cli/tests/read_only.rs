//! Guards read-only access and honest exit codes (issue 11): every read-only command (get,
//! scan, dump of each view, fsck) leaves a volume whose tree is over its compaction trigger
//! and whose backup log has batches to replay byte for byte unchanged; any number of readers
//! run at once; writing commands fail at once while a reader holds the volume, or wait for it
//! with --wait; and a writing command whose write or flush fails exits non-zero.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lds_cli::dump::{DumpOptions, DumpWhat};
use lds_cli::fsck::FsckOptions;
use lds_cli::kv::{self, ScanRange, Target, EXIT_ERROR, EXIT_OK};
use lds_cli::mkfs::{run, MkfsOptions};
use lds_engine::{Db, Options, WriteOptions};
use lds_sim::sim_device::{Fault, SimDevice};

struct Volume(PathBuf);

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A 32 MiB image file whose level 0 holds five chunks (over the default trigger of four)
/// and whose backup log holds batches no chunk has yet.
fn busy_volume(name: &str) -> Volume {
    let path = std::env::temp_dir().join(format!("lds-read-only-{}-{name}.img", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let options = MkfsOptions { path: path.clone(), size: Some(32 << 20), ..MkfsOptions::default() };
    assert_eq!(run(&options, &mut Vec::new(), &mut Vec::new()), 0);
    let quiet = Options { level0_compaction_trigger: 100, level0_stop_writes_trigger: 200, ..Options::default() };
    let db = Db::open(&path, quiet).unwrap_or_else(|error| panic!("{error}"));
    for round in 0..5u32 {
        for key in 0..200u32 {
            let value = format!("value-{round}-{key}");
            db.put(format!("key-{key:04}").as_bytes(), value.as_bytes(), WriteOptions::default())
                .unwrap_or_else(|error| panic!("{error}"));
        }
        db.flush().unwrap_or_else(|error| panic!("{error}"));
    }
    for key in 0..50u32 {
        db.put(format!("late-{key:04}").as_bytes(), b"in the backup log only", WriteOptions::default())
            .unwrap_or_else(|error| panic!("{error}"));
    }
    db.close().unwrap_or_else(|error| panic!("{error}"));
    Volume(path)
}

fn digest(path: &Path) -> blake3::Hash {
    blake3::hash(&std::fs::read(path).unwrap_or_else(|error| panic!("{error}")))
}

fn target(path: &Path, wait: Option<u64>) -> Target {
    Target { path: path.to_path_buf(), instance: 0, hex: false, wait, technique: String::new() }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs every read-only command once; returns what `get` printed.
fn read_everything(path: &Path) -> String {
    let target = target(path, None);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let keys = vec!["key-0007".to_string(), "late-0003".to_string()];
    assert_eq!(kv::get(&target, &keys, None, &mut out, &mut err), EXIT_OK, "{}", text(&err));
    let got = text(&out);
    let (mut scanned, mut err) = (Vec::new(), Vec::new());
    assert_eq!(kv::scan(&target, &ScanRange::default(), &mut scanned, &mut err), EXIT_OK, "{}", text(&err));
    assert_eq!(text(&scanned).lines().count(), 250);
    for what in [
        DumpWhat::Label,
        DumpWhat::Volume,
        DumpWhat::VersionLog,
        DumpWhat::BackupLog,
        DumpWhat::Slots,
        DumpWhat::Tree,
        DumpWhat::Chunk(0),
    ] {
        for json in [false, true] {
            let options = DumpOptions {
                path: path.to_path_buf(),
                what: what.clone(),
                instance: 0,
                json,
                entries: true,
                wait: Duration::ZERO,
            };
            let mut err = Vec::new();
            assert_eq!(lds_cli::dump::run(&options, &mut Vec::new(), &mut err), 0, "{what:?}: {}", text(&err));
        }
    }
    let fsck = FsckOptions { path: path.to_path_buf(), deep: true, ..FsckOptions::default() };
    let mut err = Vec::new();
    assert_eq!(lds_cli::fsck::run(&fsck, &mut Vec::new(), &mut err), 0, "{}", text(&err));
    got
}

#[test]
fn read_only_commands_change_no_byte_of_a_volume_that_needs_work() {
    let volume = busy_volume("unchanged");
    let before = digest(&volume.0);
    let got = read_everything(&volume.0);
    assert_eq!(got, "key-0007\tvalue-4-7\nlate-0003\tin the backup log only\n");
    assert_eq!(digest(&volume.0), before, "a read-only command wrote to the volume");
    // The same volume opened for writing does change: the test would see a read that writes.
    let db = Db::open(&volume.0, Options::default()).unwrap_or_else(|error| panic!("{error}"));
    db.flush().unwrap_or_else(|error| panic!("{error}"));
    db.close().unwrap_or_else(|error| panic!("{error}"));
    assert_ne!(digest(&volume.0), before, "a writer's open changed nothing: the volume needs no work");
}

#[test]
fn readers_run_together_and_writers_wait_for_them() {
    let volume = busy_volume("locks");
    let path = volume.0.clone();
    // A reader holds the volume (another open file, as another process would have).
    let (held, _) =
        Db::open_read_only(&path, Options::default(), Duration::ZERO).unwrap_or_else(|error| panic!("{error}"));
    read_everything(&path);
    let mut err = Vec::new();
    assert_eq!(kv::put(&target(&path, None), "k", "v", false, &mut err), EXIT_ERROR);
    let message = text(&err);
    assert!(message.contains("in use by another process") && message.contains("--wait"), "{message}");
    // --wait gives up after its bound.
    let started = Instant::now();
    assert_eq!(kv::put(&target(&path, Some(1)), "k", "v", false, &mut Vec::new()), EXIT_ERROR);
    assert!(started.elapsed() >= Duration::from_millis(900), "{:?}", started.elapsed());
    // ... and succeeds once the reader goes.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(held);
    });
    let mut err = Vec::new();
    assert_eq!(kv::put(&target(&path, Some(20)), "k", "v", true, &mut err), EXIT_OK, "{}", text(&err));
    releaser.join().unwrap_or_else(|_| panic!("the releasing thread panicked"));
    // A writer holds it: readers fail at once, naming why.
    let writer = Db::open(&path, Options::default()).unwrap_or_else(|error| panic!("{error}"));
    let mut err = Vec::new();
    assert_eq!(kv::get(&target(&path, None), &["k".into()], None, &mut Vec::new(), &mut err), EXIT_ERROR);
    assert!(text(&err).contains("a writer holds it"), "{}", text(&err));
    drop(writer);
    let mut out = Vec::new();
    assert_eq!(kv::get(&target(&path, None), &["k".into()], None, &mut out, &mut Vec::new()), EXIT_OK);
    assert_eq!(text(&out), "v\n");
}

/// A store on a simulated device whose next write (or flush) fails.
fn failing_store(fault: impl Fn(&SimDevice) -> Fault) -> Db {
    let image = lds_sim::workload::formatted_image().unwrap_or_else(|error| panic!("{error}"));
    let device = SimDevice::new(image);
    let options = Options { background: false, ..Options::default() };
    let (db, _) = Db::open_device(Arc::new(device.clone()), Path::new("failing device"), options)
        .unwrap_or_else(|error| panic!("{error}"));
    device.inject(fault(&device));
    db
}

#[test]
fn a_write_that_fails_after_the_command_returned_it_still_fails_the_command() {
    // Buffered: the put is only gathered in memory; the write happens at close, and fails.
    let db = failing_store(|device| Fault::Write(device.write_count()));
    let result = kv::put_on(db, b"key", Some(b"value"), false).map_err(|error| error.to_string());
    let Err(message) = result else { panic!("a buffered put whose write failed succeeded") };
    assert!(message.contains("simulated device") && message.contains("Input/output error"), "{message}");
    // Synced: the flush fails.
    let db = failing_store(|device| Fault::Flush(device.flush_count()));
    let Err(message) = kv::put_on(db, b"key", Some(b"value"), true).map_err(|error| error.to_string()) else {
        panic!("a synced put whose flush failed succeeded")
    };
    assert!(message.contains("flush failed"), "{message}");
    // A delete too.
    let db = failing_store(|device| Fault::Write(device.write_count()));
    assert!(kv::put_on(db, b"key", None, false).is_err(), "a buffered delete whose write failed succeeded");
    // And with no fault, all is well.
    let db = failing_store(|_| Fault::Write(usize::MAX));
    let written = kv::put_on(db, b"key", Some(b"value"), false);
    assert!(written.is_ok(), "{written:?}");
}
