//! Guards the scripting commands: put, get, delete, scan (range, prefix, JSON), load (TSV and
//! NDJSON, binary keys by hex) and recover, with their exit codes and error messages.

use std::path::PathBuf;

use lds_cli::kv::{self, LoadFormat, ScanRange, Target, EXIT_ERROR, EXIT_NOT_FOUND, EXIT_OK};
use lds_cli::mkfs::{run, MkfsOptions};

struct Volume(PathBuf);

impl Volume {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("lds-kv-test-{}-{name}.img", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let options = MkfsOptions { path: path.clone(), size: Some(32 << 20), ..MkfsOptions::default() };
        assert_eq!(run(&options, &mut Vec::new(), &mut Vec::new()), 0);
        Self(path)
    }
    fn target(&self, hex: bool) -> Target {
        Target { path: self.0.clone(), instance: 0, hex, wait: None, technique: String::new() }
    }
}

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn text(bytes: impl AsRef<[u8]>) -> String {
    String::from_utf8_lossy(bytes.as_ref()).into_owned()
}

fn get(target: &Target, keys: &[&str]) -> (i32, String, String) {
    let keys: Vec<String> = keys.iter().map(|key| key.to_string()).collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = kv::get(target, &keys, None, &mut out, &mut err);
    (code, text(out), text(err))
}

fn scan(target: &Target, range: &ScanRange) -> String {
    let mut out = Vec::new();
    assert_eq!(kv::scan(target, range, &mut out, &mut Vec::new()), EXIT_OK);
    text(out)
}

#[test]
fn put_get_delete_scan() {
    let volume = Volume::new("basic");
    let target = volume.target(false);
    for (key, value) in [("user:1", "alice"), ("user:2", "bob"), ("group:1", "admins"), ("user:3", "carol")] {
        assert_eq!(kv::put(&target, key, value, true, &mut Vec::new()), EXIT_OK);
    }
    assert_eq!(kv::delete(&target, "user:2", false, &mut Vec::new()), EXIT_OK);
    assert_eq!(get(&target, &["user:1"]), (EXIT_OK, "alice\n".into(), String::new()));
    let (code, _, err) = get(&target, &["user:2"]);
    assert_eq!(code, EXIT_NOT_FOUND);
    assert!(err.contains("user:2: not found"), "{err}");
    assert_eq!(get(&target, &["user:1", "group:1"]).1, "user:1\talice\ngroup:1\tadmins\n");
    let prefix = ScanRange { prefix: Some("user:".into()), ..ScanRange::default() };
    assert_eq!(scan(&target, &prefix), "user:1\talice\nuser:3\tcarol\n");
    let bounded =
        ScanRange { start: Some("group:".into()), end: Some("user:3".into()), json: true, ..ScanRange::default() };
    assert_eq!(
        scan(&target, &bounded),
        "{\"key\":\"group:1\",\"value\":\"admins\"}\n{\"key\":\"user:1\",\"value\":\"alice\"}\n"
    );
    let limited = ScanRange { limit: Some(1), ..ScanRange::default() };
    assert_eq!(scan(&target, &limited), "group:1\tadmins\n");
}

#[test]
fn load_tsv_and_ndjson_with_binary_keys() {
    let volume = Volume::new("load");
    let target = volume.target(false);
    let tsv = (0..2500).map(|number| format!("key{number:05}\tvalue{number}\n")).collect::<String>();
    let mut out = Vec::new();
    assert_eq!(
        kv::load(&target, Some(LoadFormat::Tsv), false, &mut tsv.as_bytes(), &mut out, &mut Vec::new()),
        EXIT_OK
    );
    assert!(text(out).starts_with("loaded 2500 entries"));
    let ndjson = "{\"key\": \"plain\", \"value\": \"text\"}\n{\"key_hex\": \"00ff\", \"value_hex\": \"c0ffee\"}\n";
    assert_eq!(
        kv::load(&target, Some(LoadFormat::Ndjson), true, &mut ndjson.as_bytes(), &mut Vec::new(), &mut Vec::new()),
        EXIT_OK
    );
    assert_eq!(get(&target, &["key01234"]).1, "value1234\n");
    assert_eq!(get(&volume.target(true), &["00ff"]).1, "c0ffee\n");
    let binary = ScanRange { end: Some("01".into()), json: true, ..ScanRange::default() };
    assert_eq!(scan(&volume.target(true), &binary), "{\"key_hex\":\"00ff\",\"value_hex\":\"c0ffee\"}\n");
    let everything = scan(&target, &ScanRange::default());
    assert_eq!(everything.lines().count(), 2502);
}

#[test]
fn bad_input_is_named_and_nothing_after_it_is_loaded() {
    let volume = Volume::new("bad");
    let target = volume.target(false);
    let input = "good\t1\nno tab here\nlater\t2\n";
    let mut err = Vec::new();
    assert_eq!(
        kv::load(&target, Some(LoadFormat::Tsv), false, &mut input.as_bytes(), &mut Vec::new(), &mut err),
        EXIT_ERROR
    );
    assert!(text(&err).contains("line 2: no tab"));
    assert_eq!(get(&target, &["later"]).0, EXIT_NOT_FOUND);
    let mut err = Vec::new();
    assert_eq!(
        kv::load(&target, Some(LoadFormat::Ndjson), false, &mut "{\"key\": 1}\n".as_bytes(), &mut Vec::new(), &mut err),
        EXIT_ERROR
    );
    assert!(text(&err).contains("line 1: no string \"key\""), "{}", text(&err));
    let mut err = Vec::new();
    assert_eq!(kv::put(&volume.target(true), "zz", "00", false, &mut err), EXIT_ERROR);
    assert!(text(&err).contains("not hex"));
    let mut err = Vec::new();
    assert_eq!(kv::put(&target, "", "x", false, &mut err), EXIT_ERROR);
    assert!(text(&err).contains("keys are 1 to 65535 bytes"), "{}", text(&err));
}

#[test]
fn not_a_volume_is_a_clear_error() {
    let path = std::env::temp_dir().join(format!("lds-kv-test-{}-garbage.img", std::process::id()));
    std::fs::write(&path, vec![7u8; 1 << 20]).unwrap_or_else(|error| panic!("{error}"));
    let target = Target { path: path.clone(), instance: 0, hex: false, wait: None, technique: String::new() };
    let mut err = Vec::new();
    assert_eq!(kv::put(&target, "k", "v", false, &mut err), EXIT_ERROR);
    assert!(text(&err).contains("not an LDS volume"), "{}", text(&err));
    let _ = std::fs::remove_file(&path);
}

#[test]
fn recover_replays_the_backup_log_and_reports() {
    let volume = Volume::new("recover");
    let target = volume.target(false);
    for number in 0..10 {
        assert_eq!(kv::put(&target, &format!("k{number}"), "v", false, &mut Vec::new()), EXIT_OK);
    }
    let mut out = Vec::new();
    assert_eq!(
        kv::recover(
            &target,
            true,
            &lds_cli::session::UndoChoice { undo_file: None, no_undo: true },
            &mut out,
            &mut Vec::new()
        ),
        EXIT_OK
    );
    let report: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(report["batches_replayed"], 10);
    assert_eq!(report["entries_replayed"], 10);
    assert_eq!(report["chunks_written"], 1);
    let mut out = Vec::new();
    assert_eq!(
        kv::recover(
            &target,
            true,
            &lds_cli::session::UndoChoice { undo_file: None, no_undo: true },
            &mut out,
            &mut Vec::new()
        ),
        EXIT_OK
    );
    let again: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(again["batches_replayed"], 0, "recovery is idempotent once written");
    assert_eq!(again["chunks"], 1);
    assert_eq!(get(&target, &["k7"]).1, "v\n");
}

#[test]
fn load_detects_ndjson_or_tsv_from_the_first_non_blank_line() {
    let volume = Volume::new("detect");
    let target = volume.target(false);
    let ndjson = "\n  \n  {\"key\": \"json-key\", \"value\": \"from ndjson\"}\n{\"key\": \"b\", \"value\": \"c\"}\n";
    let mut err = Vec::new();
    assert_eq!(kv::load(&target, None, false, &mut ndjson.as_bytes(), &mut Vec::new(), &mut err), EXIT_OK);
    assert_eq!(get(&target, &["json-key"]).1, "from ndjson\n", "{}", text(&err));
    let tsv = "\ntsv-key\t{\"looks\": \"like json\"}\n";
    assert_eq!(kv::load(&target, None, false, &mut tsv.as_bytes(), &mut Vec::new(), &mut Vec::new()), EXIT_OK);
    assert_eq!(get(&target, &["tsv-key"]).1, "{\"looks\": \"like json\"}\n");
    // The first line decides for the whole input: a TSV line in NDJSON input is an error.
    let mixed = "{\"key\": \"x\", \"value\": \"y\"}\nplain\tline\n";
    let mut err = Vec::new();
    assert_eq!(kv::load(&target, None, false, &mut mixed.as_bytes(), &mut Vec::new(), &mut err), EXIT_ERROR);
    assert!(text(&err).contains("line 2: not JSON"), "{}", text(&err));
}
