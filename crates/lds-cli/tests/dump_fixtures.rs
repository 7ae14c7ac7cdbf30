//! Guards `lds dump` output on the golden images of fixtures/: one insta snapshot per fixture
//! and view, human-readable and JSON, and that dump never writes.

use std::path::Path;

use lds_cli::dump::{run, DumpOptions, DumpWhat};

/// The golden images; f_ fixtures are corrupt on purpose and belong to fsck's tests.
fn fixtures() -> Vec<String> {
    let found = lds_fixtures::dump_fixture_names();
    assert!(found.len() >= 5, "expected the golden images in fixtures/, found {}", found.len());
    found
}

/// Unpacks to a file named after the test too: tests run in parallel in one process.
fn unpack(name: &str, test: &str) -> lds_fixtures::Unpacked {
    lds_fixtures::unpack(name, &format!("dump-{test}"))
}

fn dump(path: &Path, what: DumpWhat, instance: u32, json: bool) -> String {
    let options =
        DumpOptions { path: path.to_path_buf(), what, instance, json, entries: true, wait: std::time::Duration::ZERO };
    let mut out = Vec::new();
    let mut err = Vec::new();
    let code = run(&options, &mut out, &mut err);
    let text = String::from_utf8_lossy(&out).replace(&path.display().to_string(), "IMAGE");
    let err = String::from_utf8_lossy(&err).replace(&path.display().to_string(), "IMAGE");
    format!("exit {code}\n{text}{err}")
}

#[test]
fn dump_views_match_snapshots() {
    for name in fixtures() {
        let image = unpack(&name, "views");
        let before = std::fs::read(&image).unwrap_or_default();
        let views = [
            ("label", DumpWhat::Label),
            ("version_log", DumpWhat::VersionLog),
            ("backup_log", DumpWhat::BackupLog),
            ("slots", DumpWhat::Slots),
            ("tree", DumpWhat::Tree),
        ];
        for (view, what) in views {
            insta::assert_snapshot!(format!("{name}__{view}"), dump(&image, what.clone(), 0, false));
        }
        insta::assert_snapshot!(format!("{name}__tree_json"), dump(&image, DumpWhat::Tree, 0, true));
        insta::assert_snapshot!(format!("{name}__volume_json"), dump(&image, DumpWhat::Volume, 0, true));
        assert!(std::fs::read(&image).unwrap_or_default() == before, "{name}: dump changed the image");
    }
}

#[test]
fn chunk_views_match_snapshots() {
    let image = unpack("d_versions", "chunk");
    insta::assert_snapshot!("d_versions__chunk_9", dump(&image, DumpWhat::Chunk(9), 0, false));
    insta::assert_snapshot!("d_versions__chunk_9_json", dump(&image, DumpWhat::Chunk(9), 0, true));
}

#[test]
fn second_instance_is_dumped() {
    let image = unpack("d_two_instances", "instance");
    insta::assert_snapshot!("d_two_instances__tree_1", dump(&image, DumpWhat::Tree, 1, false));
    let missing = dump(&image, DumpWhat::Tree, 2, false);
    assert!(missing.starts_with("exit 1"), "{missing}");
    assert!(missing.contains("instance 2 does not exist"), "{missing}");
}

#[test]
fn not_a_volume_is_a_clear_error() {
    let path = std::env::temp_dir().join(format!("lds-dump-test-{}-garbage.img", std::process::id()));
    std::fs::write(&path, vec![0x5a; 1 << 20]).unwrap_or_else(|error| panic!("{error}"));
    let output = dump(&path, DumpWhat::Label, 0, false);
    assert!(output.starts_with("exit 1"), "{output}");
    assert!(output.contains("not an LDS volume"), "{output}");
    assert!(output.contains("primary label"), "{output}");
    let _ = std::fs::remove_file(&path);
}
