//! fsck's chunk pass over a tree of many chunks, which it reads on one thread and checks on
//! the others while the free slots' footers are read: the report is the one a chunk-by-chunk
//! pass writes (each chunk's problems, in the tree's chunk order, then the free slots'
//! finding), its counts are the whole tree's, and a slot that cannot be read ends the check
//! with an error naming it, the threads stopped.

mod common;

use lds_check::{check, chunk_problems, CheckOptions, Code};
use lds_engine::{Db, Options, WriteOptions};
use lds_format::algorithms::recovery::recover_version_log;
use lds_format::geometry::{Geometry, LogKind};
use lds_format::log::area_context;
use lds_format::version::meta::ChunkMeta;
use lds_volume::DeviceError;
use lds_volume::{read_labels, MemoryImage, ReadAt};

/// Three checkers, whatever the cores: chunks finish out of order and the merge must
/// restore it.
const DEEP: CheckOptions = CheckOptions { deep: true, checkers: 3 };

/// A store of many chunks, closed; its image, geometry, last sequence and chunks.
fn many_chunks(name: &str) -> (Vec<u8>, Geometry, u64, Vec<ChunkMeta>) {
    // 48 MiB of 64 KiB slots: more than the 256 slots at which fsck reads the free slots'
    // footers while it checks the chunks.
    let image = common::Image::new(name, &common::small_layout(48 << 20, 256 << 10, 1 << 20));
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
    assert!(geometry.num_slots >= 256, "{} slots", geometry.num_slots);
    let context = area_context(&geometry, LogKind::Version, 0);
    let area = MemoryImage(&original).read_vec(context.ofs_area, context.len_area).expect("version log");
    let version = recover_version_log(&area, &context).expect("recover").version;
    let chunks: Vec<ChunkMeta> = version.chunks.values().cloned().collect();
    assert!(chunks.len() > 32, "{} chunks: too few for the threaded pass", chunks.len());
    (original, geometry, version.last_sequence, chunks)
}

#[test]
fn a_tree_of_many_chunks_reports_each_damaged_chunk_in_chunk_order() {
    let (original, geometry, last_sequence, chunks) = many_chunks("fsck-chunks");
    let deep = DEEP;
    let clean = check(&MemoryImage(&original), deep, &mut |_, _| {}).expect("check");
    assert_eq!(clean.exit_code(), 0, "{:?}", clean.problems);
    assert_eq!(clean.summary.chunks, chunks.len() as u64);
    assert_eq!(clean.summary.entries, chunks.iter().map(|chunk| chunk.num_entries).sum::<u64>());
    assert_eq!(clean.summary.bytes_verified, chunks.iter().map(|chunk| chunk.len_data).sum::<u64>());
    // Compactions left chunks in free slots: the free slots' pass found them, and said so last.
    let last = clean.problems.last().map(|problem| problem.code);
    assert_eq!(last, Some(Code::StaleChunksInFreeSlots), "{:?}", clean.problems);

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
        expected.extend(chunk_problems(&images, &geometry, 0, chunk, last_sequence, deep));
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
    assert_eq!(report.problems.last().map(|problem| problem.code), Some(Code::StaleChunksInFreeSlots));
}

/// A memory image whose reads touching one range fail, as a dead region of a device.
struct Failing<'a> {
    image: MemoryImage<'a>,
    bad: std::ops::Range<u64>,
}

impl Failing<'_> {
    /// The error a read of `[offset, offset + len)` gets when it touches the dead range.
    fn dead(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        if offset < self.bad.end && offset + len > self.bad.start {
            return Err(DeviceError::Read {
                path: "failing".into(),
                offset,
                len,
                source: std::io::Error::from_raw_os_error(5),
            });
        }
        Ok(())
    }
}

impl ReadAt for Failing<'_> {
    fn name(&self) -> &std::path::Path {
        std::path::Path::new("failing")
    }
    fn len(&self) -> u64 {
        self.image.len()
    }
    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        self.dead(offset, buffer.len() as u64)?;
        self.image.read_at(offset, buffer)
    }
    fn read_vec(&self, offset: u64, len: u64) -> Result<Vec<u8>, DeviceError> {
        self.dead(offset, len)?;
        self.image.read_vec(offset, len)
    }
}

#[test]
fn a_slot_that_cannot_be_read_ends_the_check_with_an_error_naming_it() {
    let (original, geometry, _, chunks) = many_chunks("fsck-unreadable");
    let original = std::sync::Arc::new(original);
    for at in [1, chunks.len() / 2, chunks.len() - 1] {
        let slot = chunks[at].chunk_id;
        let start = geometry.slot_offset(slot);
        let (sender, receiver) = std::sync::mpsc::channel();
        let bytes = original.clone();
        // Not a scoped thread: a check that hangs must fail the test, not hang it.
        std::thread::spawn(move || {
            let failing = Failing { image: MemoryImage(&bytes), bad: start..start + geometry.slot_size };
            let _ = sender.send(check(&failing, DEEP, &mut |_, _| {}).map(|_| ()));
        });
        let error = match receiver.recv_timeout(std::time::Duration::from_secs(120)) {
            Ok(Err(error)) => error.to_string(),
            Ok(Ok(())) => panic!("slot {slot} cannot be read and the check succeeded"),
            Err(_) => panic!("the check of a volume whose slot {slot} cannot be read did not end"),
        };
        assert!(error.contains(&start.to_string()), "{error}");
    }
}
