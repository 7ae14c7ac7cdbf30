//! Split-forest volumes (technique `forest`) on a real image: loaded through `lds load` in
//! sequential and scattered rounds, grown to the format's 16 levels, checked clean with `fsck
//! --deep`, every level dumped by `lds dump tree`, and a damaged block in a tree found and
//! repaired with only that block's keys lost.

mod volumes;

#[test]
fn a_forest_volume_checks_dumps_and_repairs() {
    let path = volumes::scratch("forest", "volume");
    let _files = volumes::Files(vec![path.clone()]);
    volumes::mkfs_small(&path);
    for round in 0..6u32 {
        // Even rounds append fresh keys in order, odd rounds scatter over everything.
        let input: String = (0..10_000u32)
            .map(|n| {
                let key = if round % 2 == 0 { round * 10_000 + n } else { (n * 7_919 + round) % 60_000 };
                format!("key{key:05}\tvalue-{round}-{}\n", "z".repeat((n % 60) as usize))
            })
            .collect();
        volumes::load_with(&path, "forest", &input);
    }
    volumes::settle(&path, "forest", false);
    assert_eq!(volumes::fsck_codes(&path), (0, Vec::new()));
    let deepest = volumes::read_only(&path).chunks().iter().map(|chunk| chunk.level).max().unwrap_or(0);
    assert!(deepest >= 7, "no tree beyond the mkfs default of 7 levels: deepest {deepest}");
    let mut out = Vec::new();
    let dump = lds_cli::dump::DumpOptions {
        path: path.clone(),
        what: lds_cli::dump::DumpWhat::Tree,
        instance: 0,
        json: false,
        entries: false,
        wait: std::time::Duration::ZERO,
    };
    assert_eq!(lds_cli::dump::run(&dump, &mut out, &mut Vec::new()), 0);
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains(&format!("level {deepest}:")), "{text}");

    // One tree (every key once), then a flipped byte in the first block of one of its chunks.
    volumes::settle(&path, "forest", true);
    assert_eq!(volumes::fsck_codes(&path), (0, Vec::new()));
    let keys = volumes::count_keys(&path);
    let chunks = volumes::read_only(&path).chunks();
    assert!(chunks.iter().all(|chunk| chunk.level == 15), "a manual compaction leaves one tree in level 15");
    volumes::damage_block_and_repair(&path, chunks[chunks.len() / 2].sub_chunks[0].slot, keys);
}
