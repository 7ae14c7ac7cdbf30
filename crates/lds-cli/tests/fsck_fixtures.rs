//! Guards `lds fsck`: every f_ fixture gives its expected problem code and exit code
//! (`fixtures/f_*/expect`) and exactly the text output kept beside its image in
//! `fixtures/f_*/expect.1` (e2fsprogs' tests/f_*/expect.1: the output of `lds fsck --deep`,
//! the image path replaced by `IMAGE` and the seconds by `(time)`); every d_ golden image and
//! an engine-written volume check clean, fsck never changes a byte, and it refuses a volume
//! the engine holds.
//!
//! After a deliberate change of fsck's output or of the fixtures, rewrite every `expect.1`
//! with `LDS_BLESS=1 cargo test -p lds-cli --test fsck_fixtures` and review the diff; the
//! problem code and exit code of `expect` are still checked while blessing.

use std::path::Path;

use lds_cli::fsck::{run, FsckOptions};

/// True when the expected outputs are to be rewritten rather than compared.
fn blessing() -> bool {
    std::env::var_os("LDS_BLESS").is_some_and(|value| value == "1")
}

/// Runs fsck --deep and returns its exit code and output (stdout then stderr), filtered of
/// what changes between runs: the image path and the seconds.
fn fsck(path: &Path, json: bool) -> (i32, String) {
    let options = FsckOptions { path: path.to_path_buf(), deep: true, json, ..FsckOptions::default() };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(&options, &mut out, &mut err);
    let raw = String::from_utf8_lossy(&out).into_owned() + &String::from_utf8_lossy(&err);
    let text = raw
        .replace(&path.display().to_string(), "IMAGE")
        .lines()
        .map(|line| match line.find(" bytes of chunks in ") {
            Some(at) => format!("{} bytes of chunks in (time)\n", &line[..at]),
            None if line.trim_start().starts_with("\"seconds\"") => "    \"seconds\": (time),\n".to_string(),
            None => format!("{line}\n"),
        })
        .collect();
    (code, text)
}

/// The `code N` and `exit M` of `fixtures/<name>/expect`.
fn expected_code_and_exit(name: &str) -> (u16, i32) {
    let path = lds_fixtures::fixtures_root().join(name).join("expect");
    let expect = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let field = |key: &str| {
        expect
            .lines()
            .find_map(|line| line.strip_prefix(key))
            .unwrap_or_else(|| panic!("{}: no `{key}` line", path.display()))
            .to_string()
    };
    let code = field("code ").parse().unwrap_or_else(|error| panic!("{}: code: {error}", path.display()));
    let exit = field("exit ").parse().unwrap_or_else(|error| panic!("{}: exit: {error}", path.display()));
    (code, exit)
}

#[test]
fn every_corruption_fixture_gives_its_code_exit_code_and_expected_output() {
    let names = lds_fixtures::fsck_case_names();
    assert!(names.len() >= 20, "expected at least 20 fsck fixtures, found {}", names.len());
    let bless = blessing();
    let mut mismatches = Vec::new();
    for name in names {
        let (code, exit) = expected_code_and_exit(&name);
        let image = lds_fixtures::unpack(&name, "fsck");
        let before = std::fs::read(&image).unwrap_or_default();
        let (status, output) = fsck(&image, false);
        assert!(std::fs::read(&image).unwrap_or_default() == before, "{name}: fsck changed the image");
        assert_eq!(status, exit, "{name}: exit code\n{output}");
        assert!(
            output.lines().any(|line| line.len() > 4 && line[1..].starts_with(&format!("{code} "))),
            "{name}: no problem {code}\n{output}"
        );
        let path = lds_fixtures::fixtures_root().join(&name).join("expect.1");
        if bless {
            std::fs::write(&path, &output).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            continue;
        }
        let expected = std::fs::read_to_string(&path).unwrap_or_else(|error| {
            panic!("{}: {error} (write it with LDS_BLESS=1 cargo test -p lds-cli --test fsck_fixtures)", path.display())
        });
        if output != expected {
            mismatches.push(format!(
                "fixtures/{name}/expect.1 differs from the output\n--- expected\n{expected}--- actual\n{output}"
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{}\n{} fixture(s) differ; if the change is intended, rewrite expect.1 with \
         `LDS_BLESS=1 cargo test -p lds-cli --test fsck_fixtures` and review the diff",
        mismatches.join("\n"),
        mismatches.len()
    );
}

#[test]
fn golden_images_are_clean() {
    for name in lds_fixtures::dump_fixture_names() {
        let image = lds_fixtures::unpack(&name, "fsck-clean");
        let (status, output) = fsck(&image, false);
        assert_eq!(status, 0, "{name}\n{output}");
        assert!(!output.lines().any(|line| line.starts_with('E') || line.starts_with('W')), "{name}\n{output}");
    }
}

#[test]
fn json_output_follows_the_schema() {
    let image = lds_fixtures::unpack("f_block_checksum", "fsck-json");
    let options = FsckOptions { path: image.clone(), deep: true, json: true, ..FsckOptions::default() };
    let mut raw = Vec::new();
    assert_eq!(run(&options, &mut raw, &mut Vec::new()), 4);
    let document: serde_json::Value = serde_json::from_slice(&raw).unwrap_or_else(|error| panic!("{error}"));
    let (_, output) = fsck(&image, true);
    assert_eq!(document["schema"], "lds-fsck/1");
    assert_eq!(document["exit_code"], 4);
    assert_eq!(document["problems"][0]["code"], 405);
    assert_eq!(document["problems"][0]["severity"], "error");
    assert!(document["summary"]["chunks"].as_u64() >= Some(4));
    insta::assert_snapshot!("f_block_checksum_json", output.trim_end());
}

#[test]
fn an_engine_written_volume_is_clean_and_a_held_one_is_refused() {
    let path = std::env::temp_dir().join(format!("lds-fsck-test-{}-engine.img", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mkfs = lds_cli::mkfs::MkfsOptions {
        path: path.clone(),
        size: Some(16 << 20),
        slot_size: Some(64 << 10),
        ..Default::default()
    };
    assert_eq!(lds_cli::mkfs::run(&mkfs, &mut Vec::new(), &mut Vec::new()), 0);
    let options = lds_engine::Options { level1_max_bytes: 128 << 10, level_size_multiplier: 4, ..Default::default() };
    let db = lds_engine::Db::open(&path, options).unwrap_or_else(|error| panic!("{error}"));
    for number in 0..20_000u64 {
        let key = format!("key{:05}", number % 7000);
        let value = format!("value-{number}-{}", "x".repeat((number % 60) as usize));
        db.put(key.as_bytes(), value.as_bytes(), lds_engine::WriteOptions::default())
            .unwrap_or_else(|error| panic!("{error}"));
        if number % 9 == 0 {
            db.delete(format!("key{:05}", (number * 7) % 7000).as_bytes(), lds_engine::WriteOptions::default())
                .unwrap_or_else(|error| panic!("{error}"));
        }
    }
    db.flush().unwrap_or_else(|error| panic!("{error}"));
    assert!(db.chunks().iter().any(|chunk| chunk.level >= 2), "the workload should reach level 2");
    let (status, output) = fsck(&path, false);
    assert_eq!(status, 8, "fsck must refuse a volume the engine holds\n{output}");
    assert!(output.contains("in use by another process"), "{output}");
    let forced = FsckOptions { path: path.clone(), deep: true, force_readonly: true, ..FsckOptions::default() };
    let mut out = Vec::new();
    assert_eq!(run(&forced, &mut out, &mut Vec::new()), 0, "{}", String::from_utf8_lossy(&out));
    db.close().unwrap_or_else(|error| panic!("{error}"));
    let (status, output) = fsck(&path, false);
    assert_eq!(status, 0, "{output}");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn not_a_volume_is_an_operational_error() {
    let path = std::env::temp_dir().join(format!("lds-fsck-test-{}-zeros.img", std::process::id()));
    std::fs::write(&path, vec![0u8; 1 << 20]).unwrap_or_else(|error| panic!("{error}"));
    let (status, output) = fsck(&path, false);
    assert_eq!(status, 8);
    assert!(output.contains("not an LDS volume"), "{output}");
    let _ = std::fs::remove_file(&path);
}
