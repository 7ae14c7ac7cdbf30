//! Guards that `lds dump` holds no record per log object (LDS issue 39, case 9), nor do
//! `lds fsck` and `lds metadump`: on two volumes with the same version log area, one holding
//! about a thousand objects and one full of them (about 18,000), each command's peak heap is
//! the same within a bound far below what even eight bytes an object would add, while what it
//! reports grows with the objects. Before the fix, a version log of 64 MiB (599,071 objects)
//! took 5.8 GB to dump.
//!
//! The heap is measured by a counting global allocator (this test binary's only), around each
//! run of the library command, in this binary's single test: nothing else allocates meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use lds_cli::dump::{run, DumpOptions, DumpWhat};
use lds_cli::fsck::FsckOptions;
use lds_cli::metadump::MetadumpArgs;
use lds_fixtures::many_objects::{many_objects, ManyObjects};

/// The system allocator, counting the bytes live now and the most live since the last reset.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to the system allocator with the caller's arguments; the counters
// are plain atomics and allocate nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as given.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            grew(layout.size());
        }
        pointer
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as given.
        let pointer = unsafe { System.alloc_zeroed(layout) };
        if !pointer.is_null() {
            grew(layout.size());
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: forwarded as given.
        unsafe { System.dealloc(pointer, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as given.
        let moved = unsafe { System.realloc(pointer, layout, new_size) };
        if !moved.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        moved
    }
}

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Version log bytes of both volumes.
const LEN_VERSION_LOG: u64 = 2 << 20;
/// Objects of the smaller volume's version log (the larger one is filled).
const FEW_OBJECTS: u64 = 1_000;
/// How much more the larger volume may take at its peak: a record of 8 bytes an object would
/// add about 140 KiB over the 17,000 more objects, anything dump kept per object before far
/// more (10 KB an object).
const PEAK_DIFFERENCE_MAX: usize = 64 << 10;

/// Output that is counted, not kept (keeping it would be a record per object), but for its
/// first bytes (a summary).
#[derive(Default)]
struct Counted {
    lines: u64,
    head: Vec<u8>,
}

/// Bytes of output kept for a look.
const HEAD_LEN: usize = 4096;

impl Write for Counted {
    fn write(&mut self, buffer: &[u8]) -> std::io::Result<usize> {
        self.lines += buffer.iter().filter(|&&byte| byte == b'\n').count() as u64;
        let room = HEAD_LEN.saturating_sub(self.head.len());
        self.head.extend_from_slice(&buffer[..room.min(buffer.len())]);
        Ok(buffer.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// One run of a command (`run(out, err)`): its exit code, what it printed (lines, and all of
/// it when it printed little) and the most heap it held above what was live when it started.
fn measure(run: impl FnOnce(&mut dyn Write, &mut dyn Write) -> i32) -> (i32, Counted, usize) {
    let mut out = Counted::default();
    let mut err = Vec::with_capacity(4096);
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let code = run(&mut out, &mut err);
    let peak = PEAK.load(Ordering::Relaxed) - before;
    assert!(err.is_empty(), "{}", String::from_utf8_lossy(&err));
    (code, out, peak)
}

fn dump(path: &Path, what: DumpWhat, json: bool) -> impl FnOnce(&mut dyn Write, &mut dyn Write) -> i32 {
    let options = DumpOptions {
        path: path.to_path_buf(),
        what,
        instance: 0,
        json,
        entries: false,
        wait: std::time::Duration::ZERO,
    };
    move |out, err| run(&options, out, err)
}

/// Writes the volume and returns its path and the objects of its version log.
fn volume(objects: Option<u64>, name: &str) -> (PathBuf, u64) {
    let built = many_objects(ManyObjects { len_version_log: LEN_VERSION_LOG, objects });
    let path = std::env::temp_dir().join(format!("lds-dump-memory-{}-{name}.img", std::process::id()));
    std::fs::write(&path, &built.image.bytes).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    (path, built.version_log_objects)
}

#[test]
fn dump_fsck_and_metadump_hold_no_record_per_log_object() {
    let (few, few_objects) = volume(Some(FEW_OBJECTS), "few");
    let (many, many_objects) = volume(None, "many");
    assert!(many_objects > 15 * few_objects, "{few_objects} and {many_objects} objects");
    let more = many_objects - few_objects;
    // (view, JSON, lines printed per log object at least)
    let views = [
        (DumpWhat::VersionLog, false, 1),
        (DumpWhat::VersionLog, true, 10),
        (DumpWhat::Volume, false, 1),
        (DumpWhat::Volume, true, 10),
        (DumpWhat::Tree, false, 0),
        (DumpWhat::Slots, false, 0),
        (DumpWhat::BackupLog, false, 0),
    ];
    let mut failures = Vec::new();
    let mut compare = |name: &str, few_peak: usize, many_peak: usize| {
        let grown = many_peak.saturating_sub(few_peak);
        if grown > PEAK_DIFFERENCE_MAX {
            failures.push(format!(
                "{name}: peak heap {few_peak} bytes with {few_objects} objects, {many_peak} with {many_objects} ({} bytes an object more)",
                grown as u64 / more
            ));
        }
    };
    for (what, json, lines_per_object) in views {
        let name = format!("dump {what:?} json {json}");
        let (few_code, few_out, few_peak) = measure(dump(&few, what.clone(), json));
        let (many_code, many_out, many_peak) = measure(dump(&many, what.clone(), json));
        assert_eq!((few_code, many_code), (0, 0), "{name}");
        // The objects were listed: the output grows with them.
        assert!(
            many_out.lines >= few_out.lines + lines_per_object * more,
            "{name}: {} then {} lines for {more} more objects",
            few_out.lines,
            many_out.lines
        );
        compare(&name, few_peak, many_peak);
    }
    // fsck counts every object of the log, and the live ones.
    let fsck = |path: &Path| {
        let options = FsckOptions { path: path.to_path_buf(), read_only: true, ..FsckOptions::default() };
        move |out: &mut dyn Write, err: &mut dyn Write| lds_cli::fsck::run(&options, out, err)
    };
    let (few_code, few_out, few_peak) = measure(fsck(&few));
    let (many_code, many_out, many_peak) = measure(fsck(&many));
    assert_eq!((few_code, many_code), (0, 0), "fsck");
    let summary = String::from_utf8_lossy(&many_out.head).into_owned();
    // The backup log holds two batches, the one after the flush live.
    let checked = format!("checked {} log objects ({} live)", many_objects + 2, many_objects + 1);
    assert!(summary.contains(&checked), "fsck says: {summary} (expected {checked})");
    assert!(!few_out.head.is_empty());
    compare("fsck", few_peak, many_peak);
    // metadump rewrites every object of the log.
    let metadump = |path: &Path| {
        let args = MetadumpArgs {
            path: path.to_path_buf(),
            output: path.with_extension("metadump"),
            keep_keys: false,
            force: true,
            json: false,
        };
        move |out: &mut dyn Write, err: &mut dyn Write| lds_cli::metadump::run(&args, out, err)
    };
    let (few_code, _, few_peak) = measure(metadump(&few));
    let (many_code, many_out, many_peak) = measure(metadump(&many));
    assert_eq!((few_code, many_code), (0, 0), "metadump");
    let summary = String::from_utf8_lossy(&many_out.head).into_owned();
    let objects = format!("{many_objects} version log and 2 backup log objects");
    assert!(summary.contains(&objects), "metadump says: {summary} (expected {objects})");
    compare("metadump", few_peak, many_peak);
    for path in [&few, &many] {
        let _ = std::fs::remove_file(path);
        let _ = std::fs::remove_file(path.with_extension("metadump"));
    }
    assert!(failures.is_empty(), "memory grows with the log's objects:\n{}", failures.join("\n"));
}
