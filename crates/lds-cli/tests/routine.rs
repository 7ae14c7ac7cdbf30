//! Guards routine work on one volume in a row, as an operator runs it (the binary): grow,
//! load, shrink, repair twice and recover twice all succeed, each command that writes
//! keeping an undo file of its own (never refused for an earlier run's) and naming it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn lds(args: &[&str], directory: &Path, input: &str) -> (i32, String, String) {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_lds"))
        .args(args)
        .current_dir(directory)
        .env_remove("LDS_DEVICES")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("lds {args:?}: {error}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.as_bytes()).unwrap_or_else(|error| panic!("{error}"));
    }
    let output = child.wait_with_output().unwrap_or_else(|error| panic!("{error}"));
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn succeeds(args: &[&str], directory: &Path, input: &str) -> String {
    let (code, out, err) = lds(args, directory, input);
    assert_eq!(code, 0, "lds {args:?}: {err}{out}");
    out + &err
}

fn undo_files(directory: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(directory)
        .map(|entries| entries.flatten().map(|entry| entry.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.retain(|name| name.ends_with(".lds-undo"));
    names.sort();
    names
}

fn pairs(count: u32, round: u32) -> String {
    (0..count).map(|index| format!("key{index:05}\tvalue-{round}-{index}\n")).collect()
}

#[test]
fn grow_load_shrink_repair_twice_recover_twice() {
    let directory = std::env::temp_dir().join(format!("lds-routine-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).unwrap_or_else(|error| panic!("{error}"));
    let _scratch = Scratch(directory.clone());

    succeeds(&["mkfs", "--size", "32MiB", "v.img"], &directory, "");
    succeeds(&["load", "v.img"], &directory, &pairs(2_000, 0));
    succeeds(&["resize", "--size", "48MiB", "v.img"], &directory, "");
    assert_eq!(undo_files(&directory), ["v.img.lds-undo"], "the first writer takes the plain name");
    succeeds(&["load", "v.img"], &directory, &pairs(3_000, 1));
    let (_, min, _) = lds(&["resize", "--min", "v.img"], &directory, "");
    assert!(!min.is_empty());
    let shrunk = succeeds(&["resize", "--size", "40MiB", "v.img"], &directory, "");
    let after_shrink = undo_files(&directory);
    assert_eq!(after_shrink.len(), 2, "the shrink keeps an undo file of its own: {after_shrink:?}");
    let shrink_undo = after_shrink.iter().find(|name| name.contains(".resize-")).cloned();
    let shrink_undo = shrink_undo.unwrap_or_else(|| panic!("no resize-TIME undo file: {after_shrink:?}"));
    assert!(shrunk.contains(&shrink_undo), "the command names its undo file: {shrunk}");

    for _ in 0..2 {
        succeeds(&["repair", "-y", "v.img"], &directory, "");
        succeeds(&["recover", "v.img"], &directory, "");
    }
    succeeds(&["put", "v.img", "late", "write"], &directory, "");
    for _ in 0..2 {
        succeeds(&["recover", "v.img"], &directory, "");
    }
    let (code, _, err) = lds(&["fsck", "v.img"], &directory, "");
    assert_eq!(code, 0, "{err}");
    let (_, scanned, _) = lds(&["scan", "v.img"], &directory, "");
    assert_eq!(scanned.lines().count(), 3_001, "every key kept");
    assert!(scanned.contains("key02999\tvalue-1-2999"), "the newest values");
}
