//! fsck's chunk pass over a tree of many chunks, which it reads on one thread and checks on
//! the others: the report is the one a chunk-by-chunk pass writes (each chunk's problems,
//! in the tree's chunk order) and its counts are the whole tree's.

mod common;

use lds_check::{check, chunk_problems, CheckOptions};
use lds_engine::{Db, Options, WriteOptions};
use lds_format::image::area_context;
use lds_format::label::LogKind;
use lds_format::recovery::recover_version_log;
use lds_volume::volume::{read_labels, MemoryImage, ReadAt};

#[test]
fn a_tree_of_many_chunks_reports_each_damaged_chunk_in_chunk_order() {
    let image = common::Image::new("fsck-chunks", &common::small_layout(32 << 20, 256 << 10, 1 << 20));
    {
        let db = Db::open(image.path(), Options { write_buffer_size: 64 << 10, ..Options::default() }).expect("open");
        for index in 0..30_000u32 {
            let key = format!("key{:06}", index * 7919 % 30_000);
            db.put(key.as_bytes(), format!("{index}-{}", "v".repeat(90)).as_bytes(), WriteOptions::default())
                .expect("put");
        }
        db.flush().expect("flush");
    }
    let original = std::fs::read(image.path()).expect("read the image");
    let labels = read_labels(&MemoryImage(&original)).expect("labels");
    let geometry = labels.choose().expect("a label").1.geometry;
    let context = area_context(&geometry, LogKind::Version, 0);
    let area = MemoryImage(&original).read_vec(context.ofs_area, context.len_area).expect("version log");
    let version = recover_version_log(&area, &context).expect("recover").version;
    let chunks: Vec<_> = version.chunks.values().collect();
    assert!(chunks.len() > 32, "{} chunks: too few for the threaded pass", chunks.len());

    let deep = CheckOptions { deep: true };
    let clean = check(&MemoryImage(&original), deep, &mut |_, _| {}).expect("check");
    assert_eq!(clean.exit_code(), 0, "{:?}", clean.problems);
    assert_eq!(clean.summary.chunks, chunks.len() as u64);
    assert_eq!(clean.summary.entries, chunks.iter().map(|chunk| chunk.num_entries).sum::<u64>());

    // A byte of the first block of every fifth chunk flipped.
    let mut damaged = original.clone();
    let hit: Vec<u64> = chunks.iter().step_by(5).map(|chunk| chunk.chunk_id).collect();
    for &chunk_id in &hit {
        damaged[(geometry.slot_offset(chunk_id) + 20) as usize] ^= 0x10;
    }
    let report = check(&MemoryImage(&damaged), deep, &mut |_, _| {}).expect("check");
    // What checking each chunk alone, in the tree's order, finds.
    let mut expected = Vec::new();
    for chunk in &chunks {
        let images: Vec<Vec<u8>> = chunk
            .slots()
            .map(|slot| {
                let offset = geometry.slot_offset(slot) as usize;
                damaged[offset..offset + geometry.slot_size as usize].to_vec()
            })
            .collect();
        expected.extend(chunk_problems(&images, &geometry, 0, chunk, version.last_sequence, deep));
    }
    let found: Vec<_> = report.problems.iter().filter(|problem| problem.structure.starts_with("chunk ")).collect();
    let expected: Vec<_> = expected.iter().collect();
    assert!(found == expected, "fsck found\n{found:#?}\nchecking chunk by chunk finds\n{expected:#?}");
    let reported: Vec<u64> = found
        .iter()
        .filter_map(|problem| problem.structure.strip_prefix("chunk ")?.split(' ').next()?.parse().ok())
        .collect();
    let mut distinct = reported.clone();
    distinct.dedup();
    assert_eq!(distinct, hit, "the damaged chunks, each reported, in chunk order");
    assert_eq!(report.summary.chunks, chunks.len() as u64);
    assert_eq!(report.summary.blocks, clean.summary.blocks, "every block was verified (and the damaged ones failed)");
    assert!(report.summary.entries < clean.summary.entries, "the damaged blocks' entries are not counted");
}
