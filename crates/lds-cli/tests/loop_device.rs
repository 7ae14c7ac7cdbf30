//! Guards mkfs and dump on a real block device: a loop device this test attaches itself and
//! detaches (exactly the one it got) even when an assertion fails.

mod common;

use common::{serial, skip_unless_root, LoopDevice};
use lds_cli::dump::{DumpOptions, DumpWhat};
use lds_cli::mkfs::{run, MkfsOptions};
use lds_volume::Access;

#[test]
fn mkfs_and_dump_on_a_loop_device() {
    let _serial = serial();
    if !skip_unless_root() {
        return;
    }
    let loop_device = attached("test", 64 << 20);
    let device = loop_device.device.clone();
    let mut out = Vec::new();
    let mut err = Vec::new();
    let options = MkfsOptions { path: device.clone(), ..MkfsOptions::default() };
    let code = run(&options, &mut out, &mut err);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    // A block device keeps its size: the volume spans it.
    let dump = DumpOptions {
        path: device.clone(),
        what: DumpWhat::Label,
        instance: 0,
        json: true,
        entries: false,
        wait: std::time::Duration::ZERO,
    };
    let mut out = Vec::new();
    assert_eq!(lds_cli::dump::run(&dump, &mut out, &mut err), 0);
    let label: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(label["primary"]["geometry"]["volume_len"], 64u64 << 20);
    assert_eq!(label["chosen"], "both");
    // The engine on a block device: synced appends flush their range (sync_file_range).
    let target =
        lds_cli::kv::Target { path: device.clone(), instance: 0, hex: false, wait: None, technique: String::new() };
    assert_eq!(lds_cli::kv::put(&target, "on-a-block-device", "yes", true, &mut err), 0);
    let lines = (0..3000).map(|number| format!("key{number:05}\tvalue{number}\n")).collect::<String>();
    assert_eq!(
        lds_cli::kv::load(
            &target,
            Some(lds_cli::kv::LoadFormat::Tsv),
            true,
            &mut lines.as_bytes(),
            &mut Vec::new(),
            &mut err
        ),
        0
    );
    let mut got = Vec::new();
    let keys = vec!["on-a-block-device".to_string(), "key02999".to_string()];
    assert_eq!(lds_cli::kv::get(&target, &keys, None, &mut got, &mut err), 0, "{}", String::from_utf8_lossy(&err));
    assert_eq!(String::from_utf8_lossy(&got), "on-a-block-device\tyes\nkey02999\tvalue2999\n");
    // A size beyond the device is refused; so is a second format without --force.
    let too_big = MkfsOptions { path: device.clone(), size: Some(128 << 20), force: true, ..MkfsOptions::default() };
    let mut err = Vec::new();
    assert_eq!(run(&too_big, &mut Vec::new(), &mut err), 1);
    assert!(String::from_utf8_lossy(&err).contains("exceeds the device"));
    let mut err = Vec::new();
    assert_eq!(run(&options, &mut Vec::new(), &mut err), 1);
    assert!(String::from_utf8_lossy(&err).contains("--force"));
}

#[test]
fn a_range_flush_also_flushes_a_volatile_write_cache() {
    let _serial = serial();
    use lds_volume::OpenMode;
    if !skip_unless_root() {
        return;
    }
    let loop_device = attached("cache", 8 << 20);
    let name = name_of(&loop_device);
    let mode = std::path::PathBuf::from(format!("/sys/block/{name}/queue/write_cache"));
    let original = std::fs::read_to_string(&mode).unwrap_or_else(|error| panic!("{}: {error}", mode.display()));
    let open = || opened(&loop_device, OpenMode::ReadOnly);
    assert_eq!(open().has_volatile_cache(), original.trim() != "write through", "mode {original:?}");
    // The kernel lets root declare the cache safe; then sync_file_range alone suffices.
    for (set, volatile) in [("write through", false), ("write back", true)] {
        std::fs::write(&mode, set).unwrap_or_else(|error| panic!("{}: {error}", mode.display()));
        assert_eq!(open().has_volatile_cache(), volatile, "after writing {set:?}");
    }
    let _ = std::fs::write(&mode, original.trim());
}

/// A loop device of `len` bytes over a backing file named for `tag` and this process.
fn attached(tag: &str, len: u64) -> LoopDevice {
    let backing = std::env::temp_dir().join(format!("lds-loop-{tag}-{}.img", std::process::id()));
    LoopDevice::attach(&backing, len).unwrap_or_else(|| panic!("cannot attach a loop device as root"))
}

/// The attached device, opened in `mode`.
fn opened(loop_device: &LoopDevice, mode: lds_volume::OpenMode) -> lds_volume::Device {
    lds_volume::Device::open(&loop_device.device, mode).unwrap_or_else(|error| panic!("{error}"))
}

/// The device's name, as in /sys/block (`loopN`).
fn name_of(loop_device: &LoopDevice) -> String {
    loop_device.device.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default()
}

/// Sectors written and flush requests completed, from `/sys/block/NAME/stat`.
fn written_and_flushes(name: &str) -> (u64, u64) {
    let stat = lds_bench::measure::BlockStat::named(name).unwrap_or_else(|error| panic!("{error}"));
    let counters = stat.read().unwrap_or_else(|error| panic!("{error}"));
    (counters.bytes_written / 512, counters.flushes)
}

#[test]
fn a_flush_except_a_range_leaves_its_dirty_pages_and_flushes_the_cache() {
    let _serial = serial();
    use lds_volume::{BlockDevice, OpenMode};
    if !skip_unless_root() {
        return;
    }
    let loop_device = attached("except", 16 << 20);
    let name = name_of(&loop_device);
    let device = opened(&loop_device, OpenMode::ReadWrite);
    assert!(device.has_volatile_cache(), "a loop device reports a write-back cache");
    let (excluded, excluded_len) = (4u64 << 20, 1u64 << 20);
    let (other, other_len) = (8u64 << 20, 256u64 << 10);
    device.write_at(excluded, &vec![0xa5; excluded_len as usize]).unwrap_or_else(|error| panic!("{error}"));
    device.write_at(other, &vec![0x5a; other_len as usize]).unwrap_or_else(|error| panic!("{error}"));
    let before = written_and_flushes(&name);
    // As the engine calls it: on any device, through its page-cache operations.
    let any_device: &dyn BlockDevice = &device;
    any_device.flush_except(excluded, excluded_len).unwrap_or_else(|error| panic!("{error}"));
    let after = written_and_flushes(&name);
    let written = (after.0 - before.0) * 512;
    assert!(written >= other_len, "the range outside was written back: {written} bytes");
    assert!(written < excluded_len, "the excluded range stayed in the page cache: {written} bytes written");
    assert!(after.1 > before.1, "the write cache was flushed");
    // A range flush writes back just its range, and flushes the cache too.
    device.write_at(other, &vec![0x77; other_len as usize]).unwrap_or_else(|error| panic!("{error}"));
    let before = after;
    device.flush_range(excluded, excluded_len).unwrap_or_else(|error| panic!("{error}"));
    let after = written_and_flushes(&name);
    let written = (after.0 - before.0) * 512;
    assert!(written >= excluded_len, "the range was written back: {written} bytes");
    assert!(written < excluded_len + other_len, "nothing else was: {written} bytes");
    assert!(after.1 > before.1, "the write cache was flushed");
    // A full flush writes back the rest.
    let before = after;
    device.flush().unwrap_or_else(|error| panic!("{error}"));
    let after = written_and_flushes(&name);
    assert!((after.0 - before.0) * 512 >= other_len, "the full flush wrote the rest back");
}

#[test]
fn mkfs_takes_the_sector_size_the_device_writes_atomically() {
    let _serial = serial();
    if !skip_unless_root() {
        return;
    }
    let backing = std::env::temp_dir().join(format!("lds-loop-test-{}-4k.img", std::process::id()));
    let loop_device = LoopDevice::attach_with_sector(&backing, 32 << 20, Some(4096))
        .unwrap_or_else(|| panic!("cannot attach a loop device as root"));
    let device = loop_device.device.clone();
    // Below the device's 4096-byte blocks: refused, nothing written.
    let options = MkfsOptions { path: device.clone(), sector_size: Some(512), ..MkfsOptions::default() };
    let mut err = Vec::new();
    assert_eq!(run(&options, &mut Vec::new(), &mut err), 1);
    assert!(String::from_utf8_lossy(&err).contains("below the device's 4096"), "{}", String::from_utf8_lossy(&err));
    // By default: the device's size.
    let options = MkfsOptions { path: device.clone(), ..MkfsOptions::default() };
    assert_eq!(run(&options, &mut Vec::new(), &mut err), 0, "{}", String::from_utf8_lossy(&err));
    let dump = DumpOptions {
        path: device.clone(),
        what: DumpWhat::Label,
        instance: 0,
        json: true,
        entries: false,
        wait: std::time::Duration::ZERO,
    };
    let mut out = Vec::new();
    assert_eq!(lds_cli::dump::run(&dump, &mut out, &mut err), 0);
    let label: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(label["primary"]["geometry"]["sector_size"], 4096);
    drop(loop_device);
}

#[test]
fn a_direct_write_reaches_the_device_at_once_and_reads_stay_coherent() {
    let _serial = serial();
    use lds_volume::OpenMode;
    if !skip_unless_root() {
        return;
    }
    let loop_device = attached("direct", 8 << 20);
    let name = name_of(&loop_device);
    let device = opened(&loop_device, OpenMode::ReadWrite);
    let at = 1u64 << 20;
    // A buffered write leaves a dirty page; the direct write over it replaces it on the device.
    device.write_at(at, &[0x11; 8192]).unwrap_or_else(|error| panic!("{error}"));
    let mapped = device.read_vec_mapped(at, 8192, Access::Point).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(mapped, vec![0x11; 8192]);
    let before = written_and_flushes(&name);
    device.write_direct(at, &[0x22; 4096]).unwrap_or_else(|error| panic!("{error}"));
    let after = written_and_flushes(&name);
    assert!((after.0 - before.0) * 512 >= 4096, "the direct write reached the device without a flush");
    let expected: Vec<u8> = [[0x22u8; 4096], [0x11u8; 4096]].concat();
    assert_eq!(device.read_vec(at, 8192).unwrap_or_else(|error| panic!("{error}")), expected, "pread");
    assert_eq!(
        device.read_vec_mapped(at, 8192, Access::Point).unwrap_or_else(|error| panic!("{error}")),
        expected,
        "mapping"
    );
    // A write the device cannot take directly (not whole blocks) is a buffered one.
    device.write_direct(at + 100, &[0x33; 50]).unwrap_or_else(|error| panic!("{error}"));
    let mut expected = expected;
    expected[100..150].fill(0x33);
    assert_eq!(device.read_vec(at, 8192).unwrap_or_else(|error| panic!("{error}")), expected);
    device.flush().unwrap_or_else(|error| panic!("{error}"));
    // And a direct write after it sees the buffered bytes it keeps.
    device.write_direct(at + 4096, &expected[4096..]).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(device.read_vec_mapped(at, 8192, Access::Point).unwrap_or_else(|error| panic!("{error}")), expected);
}

/// Sectors read, from `/sys/block/NAME/stat` (its third field).
fn sectors_read(name: &str) -> u64 {
    let stat = std::fs::read_to_string(format!("/sys/block/{name}/stat")).unwrap_or_else(|error| panic!("{error}"));
    stat.split_whitespace().nth(2).and_then(|field| field.parse().ok()).unwrap_or_else(|| panic!("{stat}"))
}

/// fsck --deep reads slots with `read_bulk`: through a descriptor of its own opened read-only
/// as fsck opens a volume, around the page cache (the device sees the read even though the
/// pages are cached), seeing the bytes another descriptor wrote and did not flush; a buffer
/// or range `O_DIRECT` cannot take is read through the page cache.
#[test]
fn a_bulk_read_goes_to_the_device_and_sees_unflushed_writes() {
    let _serial = serial();
    use lds_volume::OpenMode;
    if !skip_unless_root() {
        return;
    }
    let loop_device = attached("bulk", 8 << 20);
    let name = name_of(&loop_device);
    let writer = opened(&loop_device, OpenMode::ReadWrite);
    let reader = opened(&loop_device, OpenMode::ReadOnly);
    let at = 2u64 << 20;
    writer.write_at(at, &[0x44; 16384]).unwrap_or_else(|error| panic!("{error}"));
    // The pages are cached now: a buffered read would not reach the device.
    assert_eq!(reader.read_vec(at, 16384).unwrap_or_else(|error| panic!("{error}")), vec![0x44; 16384]);
    let before = sectors_read(&name);
    let mut buffer = lds_volume::AlignedBuffer::new(16384);
    reader.read_bulk(at, &mut buffer).unwrap_or_else(|error| panic!("{error}"));
    assert!(buffer.iter().all(|&byte| byte == 0x44), "the bulk read sees the unflushed write");
    assert!((sectors_read(&name) - before) * 512 >= 16384, "the bulk read went to the device");
    writer.write_at(at + 4096, &[0x55; 100]).unwrap_or_else(|error| panic!("{error}"));
    reader.read_bulk(at, &mut buffer).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(&buffer[4096..4196], &[0x55; 100], "the later write, too");
    // Not whole blocks: read through the page cache.
    let before = sectors_read(&name);
    reader.read_bulk(at + 4000, &mut buffer[..200]).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(sectors_read(&name), before, "an unaligned bulk read is served from the page cache");
    let expected: Vec<u8> = [vec![0x44; 96], vec![0x55; 100], vec![0x44; 4]].concat();
    assert_eq!(&buffer[..200], &expected[..]);
}

/// Synced puts write the backup log's sectors around the page cache, again whole with the
/// bytes of the buffered puts before them: puts of varied sizes, a third of them buffered
/// (some written out by the background thread alone), through several laps of the log; the
/// store is dropped without a flush of its memtable (its last puts are the log's alone) and
/// reopened with every put present.
#[test]
fn synced_and_buffered_puts_share_the_log_sectors_on_a_block_device() {
    let _serial = serial();
    use lds_engine::{Db, Options, WriteOptions};
    if !skip_unless_root() {
        return;
    }
    let loop_device = attached("synced", 32 << 20);
    let options = MkfsOptions { path: loop_device.device.clone(), ..MkfsOptions::default() };
    let mut err = Vec::new();
    assert_eq!(run(&options, &mut Vec::new(), &mut err), 0, "{}", String::from_utf8_lossy(&err));
    let key = |number: u32| format!("key{number:06}").into_bytes();
    let value = |number: u32| format!("{number}-{}", "v".repeat((number % 211) as usize)).into_bytes();
    let puts = 12_000u32;
    {
        let db = Db::open(&loop_device.device, Options::default()).unwrap_or_else(|error| panic!("{error}"));
        for number in 0..puts {
            let sync = number % 3 != 1 || number + 1 == puts;
            db.put(&key(number), &value(number), WriteOptions { sync }).unwrap_or_else(|error| panic!("{error}"));
            // Now and then the background thread writes a buffered put out on its own (after
            // 100 ms), into the sector the last synced put ended in.
            if !sync && (number % 1500 == 1 || puts - number < 30) {
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
        }
        assert!(db.stats().memtable_flushes > 0, "the log went round at least once");
    }
    let db = Db::open(&loop_device.device, Options::default()).unwrap_or_else(|error| panic!("{error}"));
    for number in 0..puts {
        assert_eq!(db.get(&key(number)).unwrap_or_else(|error| panic!("{error}")), Some(value(number)), "{number}");
    }
}
