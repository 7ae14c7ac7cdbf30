//! Guards `lds scan | lds load`: a volume whose keys and values hold every byte value is
//! copied exactly through TSV (escaped), through JSON lines, and through `--json --hex`, run
//! as a user runs them (the binary, pipes).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn lds(args: &[&str], input: Option<&[u8]>) -> (i32, Vec<u8>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lds"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("lds {args:?}: {error}"));
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input.unwrap_or_default()).unwrap_or_else(|error| panic!("{error}"));
    }
    let output = child.wait_with_output().unwrap_or_else(|error| panic!("{error}"));
    (output.status.code().unwrap_or(-1), output.stdout, String::from_utf8_lossy(&output.stderr).into_owned())
}

fn volume(directory: &Path, name: &str) -> String {
    let path = directory.join(name).to_string_lossy().into_owned();
    let (code, _, stderr) = lds(&["mkfs", "--size", "32MiB", &path], None);
    assert_eq!(code, 0, "{stderr}");
    path
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The volume's pairs, read back as hex JSON lines (a form independent of the TSV escapes).
fn pairs(path: &str) -> Vec<u8> {
    let (code, out, stderr) = lds(&["scan", path, "--json", "--hex"], None);
    assert_eq!(code, 0, "{stderr}");
    out
}

#[test]
fn every_byte_value_survives_scan_then_load() {
    let directory = std::env::temp_dir().join(format!("lds-kv-round-trip-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).unwrap_or_else(|error| panic!("{error}"));
    let _scratch = Scratch(directory.clone());

    // Keys: each byte value alone, then the byte between text; values: all 256 bytes, a
    // backslash followed by what looks like an escape, CR LF and a tab.
    let mut input = String::new();
    for byte in 0..=255u8 {
        let key = [b'k', byte, b'k'];
        let value: Vec<u8> = (0..=255u8).rev().chain([byte, b'\\', b'x', b'4', b'1', b'\r', b'\n', b'\t']).collect();
        input.push_str(&format!("{{\"key_hex\": \"{}\", \"value_hex\": \"{}\"}}\n", hex(&key), hex(&value)));
        input.push_str(&format!("{{\"key_hex\": \"{}\", \"value_hex\": \"{}\"}}\n", hex(&[byte]), hex(&[byte, byte])));
    }
    let source = volume(&directory, "source.img");
    let (code, _, stderr) = lds(&["load", &source], Some(input.as_bytes()));
    assert_eq!(code, 0, "{stderr}");
    let expected = pairs(&source);
    assert_eq!(expected.iter().filter(|&&byte| byte == b'\n').count(), 512, "the source holds 512 keys");

    // TSV, the default: no raw tab or newline inside a field, and load reads it back.
    let (code, tsv, stderr) = lds(&["scan", &source], None);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(tsv.iter().filter(|&&byte| byte == b'\n').count(), 512, "one line per key");
    assert!(tsv.split(|&byte| byte == b'\n').all(|line| line.iter().filter(|&&byte| byte == b'\t').count() <= 1));
    assert!(std::str::from_utf8(&tsv).is_ok(), "escaped TSV is UTF-8 text");
    let copy = volume(&directory, "tsv.img");
    let (code, _, stderr) = lds(&["load", &copy, "--format", "tsv"], Some(&tsv));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(pairs(&copy), expected, "TSV copy differs");

    // JSON lines (key/value where UTF-8, key_hex/value_hex where not), and --json --hex.
    for args in [vec!["--json"], vec!["--json", "--hex"]] {
        let mut scan = vec!["scan", source.as_str()];
        scan.extend(args.iter().copied());
        let (code, lines, stderr) = lds(&scan, None);
        assert_eq!(code, 0, "{stderr}");
        if args.len() == 2 {
            assert!(!lines.windows(6).any(|window| window == b"\"key\":"), "--hex writes key_hex only");
        }
        let name = format!("json{}.img", args.len());
        let copy = volume(&directory, &name);
        let mut load = vec!["load", copy.as_str()];
        if args.len() == 2 {
            load.push("--hex");
        }
        let (code, _, stderr) = lds(&load, Some(&lines));
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(pairs(&copy), expected, "{args:?} copy differs");
    }

    // A backslash that starts no escape is refused with its line and column.
    let bad = volume(&directory, "bad.img");
    let (code, _, stderr) = lds(&["load", &bad, "--format", "tsv"], Some(b"a\t1\nb\\q\t2\n"));
    assert_ne!(code, 0);
    assert!(stderr.contains("line 2") && stderr.contains("column 2"), "{stderr}");
}
