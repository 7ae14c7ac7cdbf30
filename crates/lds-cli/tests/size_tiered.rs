//! Size-tiered volumes (technique `size-tiered`) on a real image: loaded through `lds load`,
//! checked clean with `fsck --deep`, their chunks of several sub-chunks dumped, and a damaged
//! block in one sub-chunk found and repaired with only that block's keys lost.

mod volumes;

#[test]
fn a_size_tiered_volume_checks_dumps_and_repairs() {
    let path = volumes::scratch("size-tiered", "volume");
    let _files = volumes::Files(vec![path.clone()]);
    volumes::mkfs_small(&path);
    for round in 0..4u32 {
        let input: String = (0..12_000u32)
            .map(|n| {
                format!("key{:05}\tvalue-{round}-{}\n", (n * 7_919 + round) % 40_000, "z".repeat((n % 60) as usize))
            })
            .collect();
        volumes::load_with(&path, "size-tiered", &input);
    }
    volumes::settle(&path, "size-tiered", true);
    assert_eq!(volumes::fsck_codes(&path), (0, Vec::new()));
    let keys = volumes::count_keys(&path);
    let chunks = volumes::read_only(&path).chunks();
    let multi = chunks
        .iter()
        .find(|chunk| chunk.sub_chunks.len() >= 3)
        .unwrap_or_else(|| panic!("no chunk of three sub-chunks"));
    assert!(chunks.iter().all(|chunk| chunk.level == 0));
    // A flipped byte in the first block of the chunk's second sub-chunk.
    volumes::damage_block_and_repair(&path, multi.sub_chunks[1].slot, keys);
}
