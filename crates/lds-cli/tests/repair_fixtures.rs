//! Guards `lds repair` and `lds undo` on every f_ fixture: `repair -n` writes nothing; `repair
//! -y` gives exactly the output kept beside the image in `fixtures/f_*/repair.1` (its last
//! line is the exit code), after which fsck exits 0 and the engine reads the volume, a second
//! `repair -y` changes nothing, and `lds undo` restores the image byte for byte. Fixtures
//! repair cannot fix in place (no valid label, a device shorter than the volume) are left
//! unchanged, with exit code 4 and no undo file.
//!
//! After a deliberate change of repair's output, rewrite every `repair.1` with
//! `LDS_BLESS=1 cargo test -p lds-cli --test repair_fixtures` and review the diff.

use std::path::{Path, PathBuf};

use lds_cli::repair::{run, RepairArgs};
use lds_cli::undo::{run as run_undo, UndoArgs};

fn blessing() -> bool {
    std::env::var_os("LDS_BLESS").is_some_and(|value| value == "1")
}

/// Runs `lds repair` and returns its exit code and output with the paths replaced.
fn repair(image: &Path, args: RepairArgs) -> (i32, String) {
    let undo = args.undo_file.clone();
    let args = RepairArgs { path: image.to_path_buf(), ..args };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(&args, &mut out, &mut err);
    let mut text = String::from_utf8_lossy(&out).into_owned() + &String::from_utf8_lossy(&err);
    if let Some(undo) = undo {
        text = text.replace(&undo.display().to_string(), "UNDO");
    }
    (code, text.replace(&image.display().to_string(), "IMAGE"))
}

fn fsck_code(image: &Path) -> (i32, String) {
    let options = lds_cli::fsck::FsckOptions { path: image.to_path_buf(), deep: true, ..Default::default() };
    let mut out = Vec::new();
    let code = lds_cli::fsck::run(&options, &mut out, &mut Vec::new());
    (code, String::from_utf8_lossy(&out).into_owned())
}

fn scratch(name: &str, what: &str) -> PathBuf {
    std::env::temp_dir().join(format!("lds-repair-test-{}-{name}.{what}", std::process::id()))
}

#[test]
fn every_fixture_is_repaired_converges_and_undoes() {
    let names = lds_fixtures::fsck_case_names();
    assert!(names.len() >= 30, "found {} fsck fixtures", names.len());
    let bless = blessing();
    let mut mismatches = Vec::new();
    let mut repaired = 0;
    for name in names {
        let image = lds_fixtures::unpack(&name, "repair");
        let original = std::fs::read(&image).unwrap_or_default();
        let undo = scratch(&name, "undo");
        let _ = std::fs::remove_file(&undo);

        let (code, output) = repair(&image, RepairArgs { dry_run: true, ..RepairArgs::default() });
        assert!(std::fs::read(&image).unwrap_or_default() == original, "{name}: repair -n changed the image");
        assert!(code == 0 || code == 4, "{name}: repair -n exit {code}\n{output}");

        let (code, output) =
            repair(&image, RepairArgs { yes: true, undo_file: Some(undo.clone()), ..RepairArgs::default() });
        let output = format!("{output}exit {code}\n");
        let expected_path = lds_fixtures::fixtures_root().join(&name).join("repair.1");
        if bless {
            std::fs::write(&expected_path, &output)
                .unwrap_or_else(|error| panic!("{}: {error}", expected_path.display()));
        } else {
            let expected = std::fs::read_to_string(&expected_path).unwrap_or_else(|error| {
                panic!(
                    "{}: {error} (write it with LDS_BLESS=1 cargo test -p lds-cli --test repair_fixtures)",
                    expected_path.display()
                )
            });
            if output != expected {
                mismatches
                    .push(format!("fixtures/{name}/repair.1 differs\n--- expected\n{expected}--- actual\n{output}"));
            }
        }
        let after = std::fs::read(&image).unwrap_or_default();
        match code {
            0 => {
                assert!(after == original, "{name}: nothing to fix, yet the image changed");
                assert!(!undo.exists(), "{name}: nothing was written, yet an undo file was left");
            }
            1 => {
                repaired += 1;
                let (fsck, report) = fsck_code(&image);
                assert_eq!(fsck, 0, "{name}: fsck after repair\n{report}");
                let scan = lds_cli::kv::Target {
                    path: image.clone(),
                    instance: 0,
                    wait: None,
                    hex: false,
                    technique: String::new(),
                };
                let range = lds_cli::kv::ScanRange { start: None, end: None, prefix: None, limit: None, json: false };
                let mut err = Vec::new();
                assert_eq!(
                    lds_cli::kv::scan(&scan, &range, &mut Vec::new(), &mut err),
                    0,
                    "{name}: scan after repair: {}",
                    String::from_utf8_lossy(&err)
                );
                let (again, output) = repair(&image, RepairArgs { yes: true, no_undo: true, ..RepairArgs::default() });
                assert_eq!(again, 0, "{name}: a second repair -y\n{output}");
                assert!(
                    std::fs::read(&image).unwrap_or_default() == after,
                    "{name}: the second repair changed the image"
                );
                let undone = UndoArgs { undo_file: undo.clone(), path: image.clone(), force: false, dry_run: false };
                let (mut out, mut err) = (Vec::new(), Vec::new());
                assert_eq!(run_undo(&undone, &mut out, &mut err), 0, "{name}: undo: {}", String::from_utf8_lossy(&err));
                assert!(
                    std::fs::read(&image).unwrap_or_default() == original,
                    "{name}: undo did not restore the image"
                );
            }
            4 => {
                assert!(after == original, "{name}: repair left errors and changed the image");
                assert!(!undo.exists(), "{name}: nothing was written, yet an undo file was left");
                assert!(output.contains("cannot repair"), "{name}: exit 4 without saying why\n{output}");
            }
            other => panic!("{name}: repair -y exit {other}\n{output}"),
        }
        let _ = std::fs::remove_file(&undo);
    }
    assert!(repaired >= 28, "only {repaired} fixtures were repaired");
    assert!(
        mismatches.is_empty(),
        "{}\n{} fixture(s) differ; if intended, rewrite repair.1 with `LDS_BLESS=1 cargo test -p lds-cli --test repair_fixtures`",
        mismatches.join("\n"),
        mismatches.len()
    );
}

#[test]
fn an_undo_file_is_refused_after_the_volume_changed() {
    let name = "f_block_checksum";
    let image = lds_fixtures::unpack(name, "repair-changed");
    let undo = scratch(name, "changed-undo");
    let _ = std::fs::remove_file(&undo);
    let (code, output) =
        repair(&image, RepairArgs { yes: true, undo_file: Some(undo.clone()), ..RepairArgs::default() });
    assert_eq!(code, 1, "{output}");
    // A write after the repair, over a sector the repair wrote.
    let put =
        lds_cli::kv::Target { path: image.clone(), instance: 0, wait: None, hex: false, technique: String::new() };
    for number in 0..200 {
        assert_eq!(lds_cli::kv::put(&put, &format!("later{number:04}"), "v", true, &mut Vec::new()), 0);
    }
    let flushed = lds_engine::Db::open(&image, lds_engine::Options::default()).and_then(|db| {
        db.flush()?;
        db.close()
    });
    assert!(flushed.is_ok(), "{flushed:?}");
    let changed = std::fs::read(&image).unwrap_or_default();
    let args = UndoArgs { undo_file: undo.clone(), path: image.clone(), force: false, dry_run: false };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(run_undo(&args, &mut out, &mut err), 1, "{}", String::from_utf8_lossy(&out));
    assert!(
        String::from_utf8_lossy(&err).contains("written to after repair finished"),
        "{}",
        String::from_utf8_lossy(&err)
    );
    assert!(std::fs::read(&image).unwrap_or_default() == changed, "a refused undo changed the image");
    // An existing undo file is never overwritten.
    let (code, output) =
        repair(&image, RepairArgs { yes: true, undo_file: Some(undo.clone()), ..RepairArgs::default() });
    assert!(code == 0 || output.contains("undo file exists"), "{code}\n{output}");
    let _ = std::fs::remove_file(&undo);
}
