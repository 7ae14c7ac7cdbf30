//! Guards `lds metadump` on a volume with value chunks (SPEC.md §8.6): the image holds no byte
//! of any value, inline or in a value chunk, yet lds fsck finds in it what it finds in the
//! volume, its tree has the volume's shape, and the engine reads every key of it with a value
//! of zeros as long as the volume's: pointers keep their extents and name zeros, value chunks
//! keep their footers.

mod volumes;

use std::path::Path;
use std::time::Duration;

use lds_cli::metadump::{run, MetadumpArgs};
use lds_engine::{Db, Options, WriteOptions};

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|window| window == needle)
}

/// fsck's exit code and problem codes.
fn fsck(path: &Path) -> (i32, Vec<String>, String) {
    let options = lds_cli::fsck::FsckOptions { path: path.to_path_buf(), ..Default::default() };
    let mut out = Vec::new();
    let code = lds_cli::fsck::run(&options, &mut out, &mut Vec::new());
    let text = String::from_utf8_lossy(&out).into_owned();
    let mut codes: Vec<String> = text
        .lines()
        .filter(|line| line.starts_with('E') || line.starts_with('W'))
        .filter_map(|line| line.split(' ').next())
        .map(str::to_string)
        .collect();
    codes.sort();
    (code, codes, text)
}

/// Every key and value the engine reads.
fn read_all(path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let (db, _) =
        Db::open_read_only(path, Options::default(), Duration::ZERO).unwrap_or_else(|error| panic!("open: {error}"));
    db.iter().and_then(Iterator::collect).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

fn secret(number: usize, len: usize) -> String {
    format!("SECRETVALUE-{number}-").chars().cycle().take(len).collect()
}

/// A volume with value chunks: values loaded with `lds load --technique kv-separation` (small
/// ones inline, from 1 KiB in value chunks, some larger than a quarter of a slot), then
/// writes left in the backup log, large ones as pointers to value chunks written directly.
fn written_volume(source: &Path) {
    volumes::mkfs_with_value_chunks(source, 64 << 20, 256 << 10);
    let input: String = (0..3000)
        .map(|number| {
            let len = match number % 10 {
                0 => 3000 + number % 5000,
                1 if number % 100 == 1 => 80_000 + number * 10,
                _ => 20 + number % 500,
            };
            format!("key{number:06}\t{}\n", secret(number, len))
        })
        .collect();
    volumes::load_separated(source, &input, false);
    let db = volumes::open_separated(source, 16 << 10);
    for number in 0..20 {
        let len = if number % 4 == 0 { 40_000 + number } else { 100 + number };
        let key = format!("late{number:03}");
        db.put(key.as_bytes(), secret(10_000 + number, len).as_bytes(), WriteOptions { sync: true })
            .unwrap_or_else(|error| panic!("{error}"));
    }
    db.close().unwrap_or_else(|error| panic!("{error}"));
}

#[test]
fn a_metadump_of_a_volume_with_value_chunks_holds_no_value_and_reads_like_it() {
    let source = volumes::scratch("metadump-values", "source");
    let mut files = volumes::Files(vec![source.clone()]);
    written_volume(&source);
    let original = std::fs::read(&source).unwrap_or_default();
    assert!(contains(&original, b"SECRETVALUE-10000-") && contains(&original, b"SECRETVALUE-101-"));
    let source_read = read_all(&source);
    assert_eq!(source_read.len(), 3020);
    let (source_code, source_codes, source_text) = fsck(&source);

    let output = volumes::scratch("metadump-values", "dump");
    files.0.push(output.clone());
    let args =
        MetadumpArgs { path: source.clone(), output: output.clone(), keep_keys: false, force: false, json: true };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(run(&args, &mut out, &mut err), 0, "{}", String::from_utf8_lossy(&err));
    assert!(std::fs::read(&source).unwrap_or_default() == original, "metadump wrote to the volume");
    let report: serde_json::Value = serde_json::from_slice(&out).unwrap_or_else(|error| panic!("{error}"));
    assert!(report["value_chunks"].as_u64() > Some(0), "{report}");
    assert!(report["values_removed"].as_u64() >= Some(3020), "{report}");

    let image = std::fs::read(&output).unwrap_or_default();
    assert_eq!(image.len(), original.len());
    assert!(!contains(&image, b"SECRETVALUE"), "a value is in the metadump");
    assert!(!contains(&image, b"key000") && !contains(&image, b"late0"), "a key is in the metadump");
    let (code, codes, text) = fsck(&output);
    assert_eq!(
        (code, &codes),
        (source_code, &source_codes),
        "fsck of the volume:\n{source_text}\nof the image:\n{text}"
    );
    assert_eq!(volumes::tree_shape(&output), volumes::tree_shape(&source));
    // The same number of keys in the same order, each value zeros as long as the volume's.
    let image_read = read_all(&output);
    assert_eq!(image_read.len(), source_read.len());
    for ((key, value), (source_key, source_value)) in image_read.iter().zip(&source_read) {
        assert_eq!(key.len(), source_key.len());
        assert!(value.len() == source_value.len() && value.iter().all(|&byte| byte == 0), "{key:?}");
    }

    // --keep-keys: the keys stay, and each reads zeros as long as its value.
    let kept = volumes::scratch("metadump-values", "keep-keys");
    files.0.push(kept.clone());
    let args = MetadumpArgs { path: source.clone(), output: kept.clone(), keep_keys: true, force: false, json: false };
    let mut out = Vec::new();
    assert_eq!(run(&args, &mut out, &mut Vec::new()), 0);
    assert!(
        String::from_utf8_lossy(&out).contains("value chunks (bodies zeroed)"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    let image = std::fs::read(&kept).unwrap_or_default();
    assert!(contains(&image, b"key001234") && !contains(&image, b"SECRETVALUE"));
    assert_eq!(fsck(&kept).0, source_code);
    let kept_read = read_all(&kept);
    assert_eq!(kept_read.len(), source_read.len());
    for ((key, value), (source_key, source_value)) in kept_read.iter().zip(&source_read) {
        assert_eq!(key, source_key);
        assert!(value.len() == source_value.len() && value.iter().all(|&byte| byte == 0), "{key:?}");
    }
}

/// Every key and value of each instance.
fn read_instances(path: &Path, instance_count: u32) -> Vec<(u32, Vec<u8>, Vec<u8>)> {
    let mut all = Vec::new();
    for instance in 0..instance_count {
        let options = Options { instance, ..Options::default() };
        let (db, _) = Db::open_read_only(path, options, Duration::ZERO).unwrap_or_else(|error| panic!("open: {error}"));
        for pair in db.iter().unwrap_or_else(|error| panic!("{error}")) {
            let (key, value) = pair.unwrap_or_else(|error| panic!("{}: {error}", path.display()));
            all.push((instance, key, value));
        }
    }
    all
}

/// The volumes format 1.4 was frozen with (value chunks written at flush and before their
/// batch, relocated and collected, two instances, pointers left in the backup log): the
/// metadump of each is clean for fsck as the volume is, and reads as the volume with every
/// value zeros.
#[test]
fn the_metadump_of_each_frozen_volume_with_value_chunks_reads_as_zeros() {
    let folders = volumes::frozen_folders("1.4");
    assert!(folders.len() >= 5, "{folders:?}");
    for folder in folders {
        let name = folder.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        let source = volumes::scratch("metadump-values", &format!("frozen-{name}"));
        let output = volumes::scratch("metadump-values", &format!("frozen-{name}-dump"));
        let _files = volumes::Files(vec![source.clone(), output.clone()]);
        let packed = std::fs::read(folder.join("image.gz")).unwrap_or_else(|error| panic!("{error}"));
        let bytes = lds_fixtures::decompress(&packed).unwrap_or_else(|error| panic!("{name}: {error}"));
        std::fs::write(&source, bytes).unwrap_or_else(|error| panic!("{error}"));
        let device =
            lds_volume::Device::open(&source, lds_volume::OpenMode::ReadOnly).unwrap_or_else(|error| panic!("{error}"));
        let labels = lds_volume::read_labels(&device).unwrap_or_else(|error| panic!("{error}"));
        let instance_count =
            labels.choose().map(|(_, label)| label.geometry.instance_count).unwrap_or_else(|error| panic!("{error:?}"));
        drop(device);
        let (source_code, source_codes, source_text) = fsck(&source);
        for keep_keys in [false, true] {
            let args =
                MetadumpArgs { path: source.clone(), output: output.clone(), keep_keys, force: true, json: false };
            let mut err = Vec::new();
            assert_eq!(run(&args, &mut Vec::new(), &mut err), 0, "{name}: {}", String::from_utf8_lossy(&err));
            let (code, codes, text) = fsck(&output);
            assert_eq!((code, &codes), (source_code, &source_codes), "{name}:\n{source_text}\n{text}");
            let (want, got) = (read_instances(&source, instance_count), read_instances(&output, instance_count));
            assert_eq!(got.len(), want.len(), "{name}");
            for ((instance, key, value), (want_instance, want_key, want_value)) in got.iter().zip(&want) {
                assert_eq!(instance, want_instance);
                assert!(!keep_keys || key == want_key, "{name}: {key:?}");
                assert!(value.len() == want_value.len() && value.iter().all(|&byte| byte == 0), "{name}: {key:?}");
            }
        }
    }
}
