//! Guards `lds fsck`: every f_ fixture gives its expected problem code and exit code (insta
//! snapshots of the whole output), every d_ golden image and an engine-written volume check
//! clean, fsck never changes a byte, and it refuses a volume the engine holds.

use std::path::{Path, PathBuf};

use lds_cli::fsck::{run, FsckOptions};

fn fixtures(prefix: &str) -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    let mut found: Vec<(String, PathBuf)> = std::fs::read_dir(&root)
        .unwrap_or_else(|error| panic!("{}: {error}", root.display()))
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.file_name().is_some_and(|name| name.to_string_lossy().starts_with(prefix)))
        .map(|path| (path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default(), path))
        .collect();
    found.sort();
    found
}

fn unpack(folder: &Path, name: &str) -> PathBuf {
    use std::io::Read;
    let mut bytes = Vec::new();
    let file = std::fs::File::open(folder.join("image.gz")).unwrap_or_else(|error| panic!("{name}: {error}"));
    flate2::read::GzDecoder::new(file).read_to_end(&mut bytes).unwrap_or_else(|error| panic!("{name}: {error}"));
    let path = std::env::temp_dir().join(format!("lds-fsck-test-{}-{name}.img", std::process::id()));
    std::fs::write(&path, bytes).unwrap_or_else(|error| panic!("{error}"));
    path
}

fn fsck(path: &Path, json: bool) -> (i32, String) {
    let options = FsckOptions { path: path.to_path_buf(), deep: true, json, ..FsckOptions::default() };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(&options, &mut out, &mut err);
    let mut text =
        String::from_utf8_lossy(&out).replace(&path.display().to_string(), "IMAGE") + &String::from_utf8_lossy(&err);
    // Timings vary between runs.
    text = text
        .lines()
        .map(|line| match line.find(" bytes of chunks in ") {
            Some(at) => format!("{} bytes of chunks in (time)", &line[..at]),
            None if line.trim_start().starts_with("\"seconds\"") => "    \"seconds\": (time),".to_string(),
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    (code, text)
}

#[test]
fn every_corruption_fixture_gives_its_code_and_exit_code() {
    let cases = fixtures("f_");
    assert!(cases.len() >= 20, "expected at least 20 fsck fixtures, found {}", cases.len());
    for (name, folder) in cases {
        let expect = std::fs::read_to_string(folder.join("expect")).unwrap_or_else(|error| panic!("{name}: {error}"));
        let code: u16 = expect
            .lines()
            .find_map(|line| line.strip_prefix("code "))
            .and_then(|text| text.parse().ok())
            .unwrap_or_else(|| panic!("{name}: no code"));
        let exit: i32 = expect
            .lines()
            .find_map(|line| line.strip_prefix("exit "))
            .and_then(|text| text.parse().ok())
            .unwrap_or_else(|| panic!("{name}: no exit"));
        let image = unpack(&folder, &name);
        let before = std::fs::read(&image).unwrap_or_default();
        let (status, output) = fsck(&image, false);
        assert_eq!(status, exit, "{name}: exit code\n{output}");
        assert!(
            output.lines().any(|line| line.len() > 4 && line[1..].starts_with(&format!("{code} "))),
            "{name}: no problem {code}\n{output}"
        );
        insta::assert_snapshot!(name.clone(), format!("exit {status}\n{output}"));
        assert!(std::fs::read(&image).unwrap_or_default() == before, "{name}: fsck changed the image");
        let _ = std::fs::remove_file(&image);
    }
}

#[test]
fn golden_images_are_clean() {
    for (name, folder) in fixtures("d_") {
        let image = unpack(&folder, &name);
        let (status, output) = fsck(&image, false);
        assert_eq!(status, 0, "{name}\n{output}");
        assert!(!output.lines().any(|line| line.starts_with('E') || line.starts_with('W')), "{name}\n{output}");
        let _ = std::fs::remove_file(&image);
    }
}

#[test]
fn json_output_follows_the_schema() {
    let (name, folder) = fixtures("f_block_checksum").into_iter().next().unwrap_or_else(|| panic!("fixture"));
    let image = unpack(&folder, &name);
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
    insta::assert_snapshot!("f_block_checksum_json", output);
    let _ = std::fs::remove_file(&image);
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
