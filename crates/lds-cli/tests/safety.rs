//! Guards the safety contract (docs/safety.md): each way a single command was once found to
//! destroy data it was never asked to touch is run here as a user would run it (the `lds`
//! binary, exit codes, messages), and must be refused with nothing written.
//!
//! The other cases of the same review have their own files: repair writing over an intact
//! chunk (repair_keeps_intact.rs), a damaged undo file (undo_damaged.rs), memory on a huge
//! version log (dump_memory.rs).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A directory of the test's own: discovery looks at the files beside a volume, so tests that
/// share a directory would see each other's volumes. Removed when the test ends, passed or not.
struct Directory(PathBuf);

impl std::ops::Deref for Directory {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Directory {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Directory {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn directory(name: &str) -> Directory {
    let path = std::env::temp_dir().join(format!("lds-safety-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    std::fs::create_dir_all(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    Directory(path)
}

fn lds(args: &[&str], directory: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lds"))
        .args(args)
        .current_dir(directory)
        .env_remove("LDS_DEVICES")
        .output()
        .unwrap_or_else(|error| panic!("lds {args:?}: {error}"))
}

fn lds_with_input(args: &[&str], directory: &Path, input: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_lds"))
        .args(args)
        .current_dir(directory)
        .env_remove("LDS_DEVICES")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("lds {args:?}: {error}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).unwrap_or_else(|error| panic!("{error}"));
    }
    child.wait_with_output().unwrap_or_else(|error| panic!("{error}"))
}

fn succeeds(output: &Output) -> String {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A 64 MiB volume holding `keys` keys, in `directory`.
fn volume(directory: &Path, name: &str, keys: usize) -> PathBuf {
    succeeds(&lds(&["mkfs", "--size", "64MiB", name], directory));
    let input: String = (0..keys).map(|number| format!("key{number:05}\tvalue-{number}\n")).collect();
    succeeds(&lds_with_input(&["load", name], directory, &input));
    directory.join(name)
}

fn hash(path: &Path) -> blake3::Hash {
    blake3::hash(&std::fs::read(path).unwrap_or_else(|error| panic!("{}: {error}", path.display())))
}

fn scan(directory: &Path, name: &str) -> String {
    succeeds(&lds(&["scan", name], directory))
}

#[test]
fn metadump_never_writes_over_its_source() {
    let directory = directory("metadump");
    let source = volume(&directory, "q.img", 50);
    std::os::unix::fs::symlink(&source, directory.join("link.img")).unwrap_or_else(|error| panic!("{error}"));
    std::fs::hard_link(&source, directory.join("hard.img")).unwrap_or_else(|error| panic!("{error}"));
    let before = hash(&source);
    for output in ["q.img", "link.img", "hard.img", "./q.img"] {
        let refused = lds(&["metadump", "q.img", output, "--force"], &directory);
        assert_eq!(refused.status.code(), Some(16), "{output}: {}", stderr(&refused));
        assert!(stderr(&refused).contains("never writes its own input"), "{}", stderr(&refused));
        assert_eq!(hash(&source), before, "metadump onto {output} changed the volume");
    }
    assert_eq!(succeeds(&lds(&["get", "q.img", "key00001"], &directory)), "value-1\n");
    // A real output still works.
    succeeds(&lds(&["metadump", "q.img", "report.img"], &directory));
    assert_eq!(hash(&source), before);
}

#[test]
fn metadump_never_writes_through_its_partial_file() {
    let directory = directory("metadump-partial");
    let source = volume(&directory, "q.img", 50);
    let before = hash(&source);
    let other = directory.join("other");
    std::fs::write(&other, b"someone's file").unwrap_or_else(|error| panic!("{error}"));
    let partial = directory.join("out.img.lds-metadump-partial");
    // A partial file that is a symlink to the volume: refused, with or without --force.
    std::os::unix::fs::symlink(&source, &partial).unwrap_or_else(|error| panic!("{error}"));
    for force in [&[][..], &["--force"]] {
        let refused = lds(&[&["metadump", "q.img", "out.img"][..], force].concat(), &directory);
        assert_eq!(refused.status.code(), Some(16), "{force:?}: {}", stderr(&refused));
        assert!(stderr(&refused).contains("never writes its own input"), "{}", stderr(&refused));
        assert_eq!(hash(&source), before, "metadump wrote the volume through its partial file");
        assert!(!directory.join("out.img").exists());
    }
    // A symlink to someone's file: refused without --force; with it, the link (not the file it
    // names) is replaced.
    std::fs::remove_file(&partial).unwrap_or_else(|error| panic!("{error}"));
    std::os::unix::fs::symlink(&other, &partial).unwrap_or_else(|error| panic!("{error}"));
    let refused = lds(&["metadump", "q.img", "out.img"], &directory);
    assert_eq!(refused.status.code(), Some(16), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("lds-metadump-partial exists"), "{}", stderr(&refused));
    assert_eq!(std::fs::read(&other).ok().as_deref(), Some(&b"someone's file"[..]));
    succeeds(&lds(&["metadump", "q.img", "out.img", "--force"], &directory));
    assert_eq!(std::fs::read(&other).ok().as_deref(), Some(&b"someone's file"[..]));
    assert!(std::fs::symlink_metadata(&partial).is_err(), "the partial file was left");
    assert!(std::fs::symlink_metadata(directory.join("out.img")).is_ok_and(|metadata| metadata.is_file()));
    assert_eq!(hash(&source), before);
    // An output that is a symlink to the volume, given with --force: refused.
    std::os::unix::fs::symlink(&source, directory.join("to-source.img")).unwrap_or_else(|error| panic!("{error}"));
    let refused = lds(&["metadump", "q.img", "to-source.img", "--force"], &directory);
    assert_eq!(refused.status.code(), Some(16), "{}", stderr(&refused));
    assert_eq!(hash(&source), before);
}

#[test]
fn metadump_never_writes_a_block_device() {
    if !common::skip_unless_root() {
        return;
    }
    let _serial = common::serial();
    let directory = directory("metadump-device");
    volume(&directory, "q.img", 50);
    let Some(device) = common::LoopDevice::attach(&directory.join("target.img"), 64 << 20) else {
        panic!("cannot attach a loop device")
    };
    let path = device.device.to_string_lossy().into_owned();
    std::fs::write(&device.device, vec![0xA5u8; 1 << 20]).unwrap_or_else(|error| panic!("{error}"));
    let device_before = hash(&device.device);
    let refused = lds(&["metadump", "q.img", &path, "--force"], &directory);
    assert_eq!(refused.status.code(), Some(16), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("is a block device"), "{}", stderr(&refused));
    assert!(std::fs::metadata(&device.device).is_ok_and(|metadata| {
        use std::os::unix::fs::FileTypeExt;
        metadata.file_type().is_block_device()
    }));
    assert_eq!(hash(&device.device), device_before);
    let partial = format!("{path}.lds-metadump-partial");
    assert!(std::fs::symlink_metadata(&partial).is_err(), "{partial} was left");
    // A symlink to the device is the device.
    std::os::unix::fs::symlink(&device.device, directory.join("dev-link")).unwrap_or_else(|error| panic!("{error}"));
    let refused = lds(&["metadump", "q.img", "dev-link", "--force"], &directory);
    assert_eq!(refused.status.code(), Some(16), "{}", stderr(&refused));
    assert!(std::fs::symlink_metadata(directory.join("dev-link")).is_ok_and(|metadata| metadata.is_symlink()));
    assert_eq!(hash(&device.device), device_before);
}

#[test]
fn a_volume_never_joins_itself() {
    let directory = directory("join-self");
    let path = volume(&directory, "r.img", 20);
    std::os::unix::fs::symlink(&path, directory.join("link.img")).unwrap_or_else(|error| panic!("{error}"));
    let before = hash(&path);
    for joining in ["r.img", "link.img"] {
        let refused = lds(&["device", "add", "r.img", joining], &directory);
        assert_eq!(refused.status.code(), Some(1), "{joining}: {}", stderr(&refused));
        assert!(stderr(&refused).contains("cannot join itself"), "{}", stderr(&refused));
        assert_eq!(hash(&path), before);
    }
    let fsck = lds(&["fsck", "r.img"], &directory);
    assert_eq!(fsck.status.code(), Some(0), "{}", stderr(&fsck));
    assert_eq!(scan(&directory, "r.img").lines().count(), 20);
    // Joining a device still works, and so does finishing that join again.
    succeeds(&lds(&["device", "add", "r.img", "r-2.img", "--size", "64MiB"], &directory));
    let again = lds(&["device", "add", "r.img", "r-2.img"], &directory);
    assert!(String::from_utf8_lossy(&again.stdout).contains("nothing to do"), "{}", stderr(&again));
    let first = lds(&["device", "add", "r-2.img", "r.img"], &directory);
    assert_eq!(first.status.code(), Some(1), "{}", stderr(&first));
    // Copies of the volume's devices, where discovery does not look (a subdirectory): their
    // labels name this volume and a device its table lists. Refused, even with --force, and
    // neither written nor grown to --size.
    let copies = directory.join("copies");
    std::fs::create_dir_all(&copies).unwrap_or_else(|error| panic!("{error}"));
    for (member, copy) in [("r.img", "copies/r-copy.img"), ("r-2.img", "copies/r-2-copy.img")] {
        std::fs::copy(directory.join(member), directory.join(copy)).unwrap_or_else(|error| panic!("{error}"));
        let before = (hash(&directory.join("r.img")), hash(&directory.join("r-2.img")), hash(&directory.join(copy)));
        let len = std::fs::metadata(directory.join(copy)).map(|metadata| metadata.len()).unwrap_or_default();
        for force in [&[][..], &["--force"]] {
            let refused = lds(&[&["device", "add", "r.img", copy, "--size", "128MiB"][..], force].concat(), &directory);
            assert_eq!(refused.status.code(), Some(1), "{copy} {force:?}: {}", stderr(&refused));
            assert!(stderr(&refused).contains("is a copy of a device already in the volume"), "{}", stderr(&refused));
            let after = (hash(&directory.join("r.img")), hash(&directory.join("r-2.img")), hash(&directory.join(copy)));
            assert_eq!(before, after, "{copy} {force:?}: a refused join wrote");
            let grown = std::fs::metadata(directory.join(copy)).map(|metadata| metadata.len()).unwrap_or_default();
            assert_eq!(grown, len, "{copy}: a refused join grew the file");
        }
        let dry = lds(&["device", "add", "-n", "r.img", copy], &directory);
        assert_eq!(dry.status.code(), Some(1), "{copy}: {}", stderr(&dry));
    }
    // Another volume's device: refused without --force, and not grown either.
    succeeds(&lds(&["mkfs", "--size", "64MiB", "copies/other.img"], &directory));
    let other = hash(&directory.join("copies/other.img"));
    let refused = lds(&["device", "add", "r.img", "copies/other.img", "--size", "128MiB"], &directory);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--force"), "{}", stderr(&refused));
    assert_eq!(hash(&directory.join("copies/other.img")), other);
    assert_eq!(std::fs::metadata(directory.join("copies/other.img")).map(|m| m.len()).ok(), Some(64 << 20));
    assert_eq!(scan(&directory, "r.img").lines().count(), 20);
}

#[test]
fn bench_replaces_only_its_own_volumes_without_force() {
    let directory = directory("bench");
    let path = volume(&directory, "b.img", 10);
    let before = hash(&path);
    let bench = ["bench", "--num", "200", "--size", "64MiB", "--benchmarks", "fillseq"];
    let refused = lds(&[&bench[..], &["b.img"]].concat(), &directory);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(stderr(&refused).contains("--force"), "{}", stderr(&refused));
    assert_eq!(hash(&path), before);
    for mode in ["--device-limits", "--recovery"] {
        let refused = lds(&["bench", mode, "--size", "64MiB", "b.img"], &directory);
        assert_eq!(refused.status.code(), Some(1), "{mode}: {}", stderr(&refused));
        assert_eq!(hash(&path), before, "{mode}");
    }
    assert_eq!(scan(&directory, "b.img").lines().count(), 10);
    // Its own volume, and any with --force.
    succeeds(&lds(&[&bench[..], &["new.img"]].concat(), &directory));
    succeeds(&lds(&[&bench[..], &["new.img"]].concat(), &directory));
    succeeds(&lds(&[&bench[..], &["--force", "b.img"]].concat(), &directory));
    // A peer's directory of someone's data is never emptied.
    let data = directory.join("data");
    std::fs::create_dir_all(&data).unwrap_or_else(|error| panic!("{error}"));
    std::fs::write(data.join("precious"), b"keep me").unwrap_or_else(|error| panic!("{error}"));
    // A read benchmark first opens the peer without a fresh fill: that open must not mark
    // the directory as a benchmark's (the next fill would then empty it).
    for benchmarks in ["readrandom", "fillseq", "readrandom,fillseq"] {
        let peer = lds(&["bench", "--engine", "nosuch", "--num", "10", "--benchmarks", benchmarks, "data"], &directory);
        assert!(!peer.status.success(), "{benchmarks}");
        assert!(data.join("precious").exists(), "{benchmarks}: {}", stderr(&peer));
        assert!(!data.join(".lds-bench").exists(), "{benchmarks}: the marker was written into someone's directory");
    }
    // A peer that is not built here touches nothing: not even a directory that is missing.
    let peer = lds(&["bench", "--engine", "rocksdb", "--num", "10", "--benchmarks", "readrandom", "fresh"], &directory);
    assert!(!peer.status.success());
    assert!(!directory.join("fresh").exists() || lds_bench_peers_built(), "{}", stderr(&peer));
}

/// Whether this `lds` was built with the peers (`--features peers`): a peer then runs.
fn lds_bench_peers_built() -> bool {
    cfg!(feature = "peers")
}

#[test]
fn a_copy_of_a_members_labels_is_refused_and_nothing_is_written() {
    let directory = directory("clone");
    succeeds(&lds(&["mkfs", "--size", "64MiB", "--slot-size", "1MiB", "a.img"], &directory));
    succeeds(&lds(&["device", "add", "a.img", "a-2.img", "--size", "64MiB"], &directory));
    // Enough keys that chunks land on both devices.
    let input: String = (0..60_000).map(|number| format!("key{number:06}\t{:0200}\n", number)).collect();
    succeeds(&lds_with_input(&["load", "a.img"], &directory, &input));
    let keys = scan(&directory, "a.img").lines().count();
    assert_eq!(keys, 60_000);
    // evil.img: a-2.img's labels, the slots zeroed.
    let member = std::fs::read(directory.join("a-2.img")).unwrap_or_default();
    let mut evil = vec![0u8; member.len()];
    evil[..4096].copy_from_slice(&member[..4096]);
    let end = member.len() - 4096;
    evil[end..].copy_from_slice(&member[end..]);
    std::fs::write(directory.join("evil.img"), &evil).unwrap_or_else(|error| panic!("{error}"));
    let before = (hash(&directory.join("a.img")), hash(&directory.join("a-2.img")), hash(&directory.join("evil.img")));
    for command in [&["repair", "-y", "evil.img"][..], &["repair", "-y", "a.img"], &["put", "evil.img", "k", "v"]] {
        let refused = lds(command, &directory);
        assert!(!refused.status.success(), "{command:?}");
        let message = stderr(&refused);
        assert!(message.contains("2 devices claim") && message.contains("evil.img"), "{message}");
        assert!(message.contains("a-2.img"), "{message}");
    }
    let after = (hash(&directory.join("a.img")), hash(&directory.join("a-2.img")), hash(&directory.join("evil.img")));
    assert_eq!(before, after, "a refused command wrote");
    // Naming the right one in LDS_DEVICES chooses it; the copy, named, is still refused.
    let chosen = Command::new(env!("CARGO_BIN_EXE_lds"))
        .args(["fsck", "a.img"])
        .current_dir(&directory)
        .env("LDS_DEVICES", directory.join("a-2.img"))
        .output()
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(chosen.status.code(), Some(0), "{}", stderr(&chosen));
    let copy = Command::new(env!("CARGO_BIN_EXE_lds"))
        .args(["repair", "-y", "evil.img"])
        .current_dir(&directory)
        .env("LDS_DEVICES", directory.join("a-2.img"))
        .output()
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(copy.status.code(), Some(8), "{}", stderr(&copy));
    assert!(stderr(&copy).contains("this one is a copy"), "{}", stderr(&copy));
    std::fs::remove_file(directory.join("evil.img")).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(scan(&directory, "a.img").lines().count(), keys);
    // A writing command says which devices it may write.
    let repair = lds(&["repair", "-y", "a.img"], &directory);
    assert_eq!(repair.status.code(), Some(0), "{}", stderr(&repair));
    assert!(stderr(&repair).contains("a-2.img (device 1)"), "{}", stderr(&repair));
}

#[test]
fn exports_that_cannot_be_written_fail() {
    let directory = directory("full");
    volume(&directory, "v.img", 2_000);
    let full = || std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap_or_else(|error| panic!("{error}"));
    for args in [&["scan", "v.img"][..], &["scan", "v.img", "--json"], &["dump", "v.img", "tree"]] {
        let output = Command::new(env!("CARGO_BIN_EXE_lds"))
            .args(args)
            .current_dir(&directory)
            .stdout(full())
            .output()
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(output.status.code(), Some(8), "{args:?}: {}", stderr(&output));
        assert!(stderr(&output).contains("No space left on device"), "{}", stderr(&output));
        assert!(stderr(&output).contains("the output is incomplete"), "{}", stderr(&output));
    }
    let export = Command::new(env!("CARGO_BIN_EXE_lds"))
        .args(["salvage", "v.img", "--export", "ndjson"])
        .current_dir(&directory)
        .stdout(full())
        .output()
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(export.status.code(), Some(8), "{}", stderr(&export));
}

#[test]
fn a_volume_cut_short_is_read_up_to_its_end() {
    let directory = directory("truncated");
    succeeds(&lds(&["mkfs", "--size", "64MiB", "--slot-size", "1MiB", "t.img"], &directory));
    let input: String = (0..3_000).map(|number| format!("key{number:05}\tvalue-{number}\n")).collect();
    succeeds(&lds_with_input(&["load", "t.img"], &directory, &input));
    let file = std::fs::OpenOptions::new().write(true).open(directory.join("t.img")).unwrap_or_else(|e| panic!("{e}"));
    file.set_len(40 << 20).unwrap_or_else(|error| panic!("{error}"));
    drop(file);
    let fsck = lds(&["fsck", "t.img"], &directory);
    assert_eq!(fsck.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&fsck.stdout).contains("E106"));
    let label = lds(&["dump", "t.img", "label"], &directory);
    let text = succeeds(&label);
    assert!(text.contains("the label says the volume is 67108864 bytes but the device has 41943040"), "{text}");
    let json = succeeds(&lds(&["dump", "t.img", "label", "--json"], &directory));
    assert!(json.contains("\"device_len\": 41943040"), "{json}");
    let salvage = lds(&["salvage", "t.img", "--export", "ndjson"], &directory);
    assert_eq!(salvage.status.code(), Some(1), "{}", stderr(&salvage));
    assert_eq!(String::from_utf8_lossy(&salvage.stdout).lines().count(), 3_000);
    assert!(stderr(&salvage).contains("past the device's end"), "{}", stderr(&salvage));
    succeeds(&lds(&["mkfs", "--size", "64MiB", "new.img"], &directory));
    let copied = lds(&["salvage", "t.img", "--output", "new.img", "--force"], &directory);
    assert_eq!(copied.status.code(), Some(1), "{}", stderr(&copied));
    assert_eq!(scan(&directory, "new.img").lines().count(), 3_000);
}

#[test]
fn mkfs_never_formats_a_mounted_or_held_device() {
    if !common::skip_unless_root() {
        return;
    }
    let _serial = common::serial();
    let directory = directory("mounted");
    let Some(device) = common::LoopDevice::attach(&directory.join("fs.img"), 64 << 20) else {
        panic!("cannot attach a loop device")
    };
    let path = device.device.to_string_lossy().into_owned();
    let made = Command::new("mkfs.ext4").args(["-q", &path]).status();
    assert!(made.is_ok_and(|status| status.success()), "mkfs.ext4");
    let mount_point = directory.join("mnt");
    std::fs::create_dir_all(&mount_point).unwrap_or_else(|error| panic!("{error}"));
    let mounted = Command::new("mount").arg(&path).arg(&mount_point).status();
    assert!(mounted.is_ok_and(|status| status.success()), "mount");
    /// Unmounts even when an assertion fails.
    struct Mounted(PathBuf);
    impl Drop for Mounted {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let mounted = Mounted(mount_point.clone());
    std::fs::write(mount_point.join("file"), b"hello").unwrap_or_else(|error| panic!("{error}"));
    for force in [
        &["mkfs", "-f", &path][..],
        &["bench", "--force", "--size", "64MiB", "--num", "10", "--benchmarks", "fillseq", &path],
    ] {
        let refused = lds(force, &directory);
        assert!(!refused.status.success(), "{force:?}");
        assert!(stderr(&refused).contains("mounted at"), "{}", stderr(&refused));
    }
    // Neither is the file behind the loop device written.
    let backing = lds(&["mkfs", "-f", "fs.img"], &directory);
    assert!(stderr(&backing).contains("attached to"), "{}", stderr(&backing));
    drop(mounted);
    assert_eq!(
        std::fs::read(directory.join("fs.img")).map(|bytes| bytes[1080..1082].to_vec()).ok(),
        Some(vec![0x53, 0xEF])
    );
    // Held by another program (an exclusive open), also refused; free again, formatted.
    {
        use std::os::unix::fs::OpenOptionsExt;
        let _held = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_EXCL)
            .open(&path)
            .unwrap_or_else(|error| panic!("{error}"));
        let refused = lds(&["mkfs", "-f", &path], &directory);
        assert!(stderr(&refused).contains("opened exclusively"), "{}", stderr(&refused));
    }
    succeeds(&lds(&["mkfs", "-f", &path], &directory));
}

#[test]
fn a_file_read_by_a_loop_device_is_in_use_by_any_of_its_names() {
    if !common::skip_unless_root() {
        return;
    }
    let _serial = common::serial();
    let directory = directory("loop-inode");
    let Some(device) = common::LoopDevice::attach(&directory.join("attached.img"), 64 << 20) else {
        panic!("cannot attach a loop device")
    };
    // Another name for the file, and the one the loop device was attached by gone: the path
    // sysfs gives for the loop device ("... (deleted)") names nothing, the kernel's inode
    // still is this file.
    std::fs::hard_link(&device.backing, directory.join("other-name.img")).unwrap_or_else(|error| panic!("{error}"));
    std::fs::remove_file(&device.backing).unwrap_or_else(|error| panic!("{error}"));
    let before = hash(&directory.join("other-name.img"));
    let refused = lds(&["mkfs", "-f", "other-name.img"], &directory);
    assert!(!refused.status.success(), "mkfs wrote a file a loop device reads");
    assert!(stderr(&refused).contains("attached to"), "{}", stderr(&refused));
    assert!(stderr(&refused).contains(&device.device.display().to_string()), "{}", stderr(&refused));
    assert_eq!(hash(&directory.join("other-name.img")), before);
    // As the output of salvage or metadump, too.
    volume(&directory, "v.img", 10);
    for command in [
        &["metadump", "v.img", "other-name.img", "--force"][..],
        &["salvage", "v.img", "--output", "other-name.img", "--force"],
    ] {
        let refused = lds(command, &directory);
        assert_eq!(refused.status.code(), Some(16), "{command:?}: {}", stderr(&refused));
        assert_eq!(hash(&directory.join("other-name.img")), before, "{command:?}");
    }
}

#[test]
fn a_failed_export_says_how_many_bytes_got_out() {
    if !common::skip_unless_root() {
        return;
    }
    let _serial = common::serial();
    let directory = directory("tiny");
    volume(&directory, "v.img", 20_000);
    // A file system that fills after 128 KiB, mounted for this test and unmounted even when
    // an assertion fails.
    let tiny = directory.join("tiny");
    std::fs::create_dir_all(&tiny).unwrap_or_else(|error| panic!("{error}"));
    let mounted = Command::new("mount").args(["-t", "tmpfs", "-o", "size=128k", "tmpfs"]).arg(&tiny).status();
    assert!(mounted.is_ok_and(|status| status.success()), "mount tmpfs");
    struct Mounted(PathBuf);
    impl Drop for Mounted {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _mounted = Mounted(tiny.clone());
    let file = std::fs::File::create(tiny.join("out")).unwrap_or_else(|error| panic!("{error}"));
    let output = Command::new(env!("CARGO_BIN_EXE_lds"))
        .args(["scan", "v.img"])
        .current_dir(&directory)
        .env_remove("LDS_DEVICES")
        .stdout(file)
        .output()
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(output.status.code(), Some(8), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(message.contains("lds scan: writing standard output failed after "), "{message}");
    let reported: u64 = message
        .split("failed after ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("no byte count in {message}"));
    let landed = std::fs::metadata(tiny.join("out")).map(|metadata| metadata.len()).unwrap_or_default();
    assert!(landed > 0 && landed < 20_000 * 16, "{landed}");
    assert_eq!(reported, landed, "the count reported is not what reached the file");
}
