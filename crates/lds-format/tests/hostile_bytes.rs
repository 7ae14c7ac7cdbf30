//! Guards docs/reliability.md I6 for the format crate: every decoder and recovery function, fed
//! random bytes and mutations (flips, truncations, extensions) of valid encodings, returns
//! without panicking, and no single allocation exceeds what the input can justify (16 bytes
//! of memory per input byte, plus 64 KiB).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use lds_format::algorithms::image::ImageBuilder;
use lds_format::algorithms::recovery::{physical_walk, recover_backup_log, recover_version_log};
use lds_format::batch::{BatchEntry, WriteBatchRecord};
use lds_format::chunk::block::decode_block;
use lds_format::chunk::builder::{ChunkBuilder, ChunkIdentity, ChunkOptions};
use lds_format::chunk::filter::Filter;
use lds_format::chunk::footer::Footer;
use lds_format::chunk::view::SubChunkView;
use lds_format::codec::Reader;
use lds_format::entry::EntryKind;
use lds_format::geometry::{plan_layout, LayoutRequest, LogKind};
use lds_format::label::Label;
use lds_format::log::{area_context, read_object, ObjectHeader, WrapLeft};
use lds_format::logref::{LogBatch, LogRef};
use lds_format::version::meta::ChunkMeta;
use lds_format::version::payload::{BaseVersion, CompactionJournal, DeltaVersion};

struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: delegates to the system allocator unchanged; only records sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: the pointer came from `alloc` with this layout.
        unsafe { System.dealloc(pointer, layout) }
    }
    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(pointer, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// xorshift64*: deterministic, seedable, no dependency.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }
}

fn mutate(random: &mut Random, valid: &[u8]) -> Vec<u8> {
    let mut bytes = valid.to_vec();
    match random.below(5) {
        0 => {
            for _ in 0..1 + random.below(4) {
                if !bytes.is_empty() {
                    let at = random.below(bytes.len());
                    bytes[at] ^= 1 << random.below(8);
                }
            }
        }
        1 => bytes.truncate(random.below(bytes.len() + 1)),
        2 => bytes.extend((0..random.below(64)).map(|_| random.next() as u8)),
        3 => {
            // A plausible but huge count or length somewhere.
            if bytes.len() >= 4 {
                let at = random.below(bytes.len() - 3);
                bytes[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
            }
        }
        _ => bytes = (0..random.below(600)).map(|_| random.next() as u8).collect(),
    }
    bytes
}

fn check_allocation(input_len: usize, what: &str) {
    let largest = LARGEST.swap(0, Ordering::Relaxed);
    let bound = 16 * input_len + (64 << 10);
    assert!(largest <= bound, "{what}: an allocation of {largest} bytes for {input_len} input bytes");
}

fn label() -> Label {
    let request = LayoutRequest {
        volume_len: 2 << 20,
        sector_size: Some(512),
        len_version_log: Some(16 << 10),
        len_backup_log: Some(8 << 10),
        ..LayoutRequest::default()
    };
    Label::new(plan_layout(&request, [7; 16]).unwrap_or_else(|error| panic!("{error}")), "x")
}

#[test]
fn decoders_survive_hostile_bytes() {
    let mut random = Random(0x5EED_1DD5);
    let label = label();
    let geometry = label.geometry;
    let mut image = ImageBuilder::format(label.clone());
    let entries: Vec<_> =
        (0..30u64).map(|n| (format!("k{n:03}").into_bytes(), n + 1, EntryKind::Put, vec![n as u8; 9])).collect();
    let meta: ChunkMeta = image.write_chunk(0, 2, 0, 0, &entries);
    let delta =
        DeltaVersion { added: vec![meta.clone()], last_sequence: 30, lsn_backup_start: 1, ..DeltaVersion::default() };
    image.append_delta(0, &delta).unwrap_or_else(|error| panic!("{error}"));
    image
        .append_batch(0, vec![BatchEntry { kind: EntryKind::Put, key: b"a".to_vec(), value: b"b".to_vec() }])
        .unwrap_or_else(|error| panic!("{error}"));
    let base = image.instances[0].version.to_base(geometry, 0);
    let journal = CompactionJournal {
        compaction_id: 1,
        resume_key: b"k".to_vec(),
        inputs: vec![2],
        cleaned: vec![2],
        outputs: vec![meta.clone()],
        ..CompactionJournal::default()
    };
    let batch = WriteBatchRecord {
        first_sequence: 5,
        entries: vec![BatchEntry { kind: EntryKind::Delete, key: b"z".to_vec(), value: Vec::new() }],
        synced_lsn_low: 9,
    };
    let options = ChunkOptions {
        slot_size: geometry.slot_size,
        block_size: 512,
        bloom_bits_per_key: 10,
        digest: lds_format::digest::DigestKind::Blake3,
        sketch_precision: 0,
        compact_entries: false,
    };
    let mut builder = ChunkBuilder::new(options);
    for (key, sequence, kind, value) in &entries {
        assert!(builder.add(key, *sequence, *kind, value));
    }
    let identity = ChunkIdentity {
        volume_uuid: [7; 16],
        instance: 0,
        chunk_id: 2,
        sub_chunk_index: 0,
        num_sub_chunks: 1,
        level: 0,
        flags: 0,
    };
    let slot = builder.finish(identity).unwrap_or_else(|| panic!("chunk")).slot_image();
    let footer_bytes = slot[slot.len() - 160..].to_vec();
    let valid_footer = Footer::decode(&footer_bytes, 0, geometry.slot_size).unwrap_or_else(|error| panic!("{error}"));
    let index_bytes = slot[valid_footer.ofs_index as usize..valid_footer.ofs_filter as usize].to_vec();
    let filter_bytes = slot[valid_footer.ofs_filter as usize..slot.len() - 160].to_vec();
    let block_bytes = slot[..valid_footer.len_body as usize].to_vec();
    // The same entries as compact entries (format 1.7): its first block.
    let mut builder = ChunkBuilder::new(ChunkOptions { compact_entries: true, ..options });
    for (key, sequence, kind, value) in &entries {
        assert!(builder.add(key, *sequence, *kind, value));
    }
    let compact_slot = builder.finish(identity).unwrap_or_else(|| panic!("chunk")).slot_image();
    let compact_view = SubChunkView::open(&compact_slot, 0).unwrap_or_else(|error| panic!("{error}"));
    let compact_block = compact_view.block(0).to_vec();
    assert!(decode_block(&compact_block, 0).is_ok());

    let samples: Vec<(&str, Vec<u8>)> = vec![
        ("label", label.encode().to_vec()),
        ("base", base.encode()),
        ("delta", delta.encode()),
        ("journal", journal.encode()),
        ("batch", batch.encode()),
        ("wrap_left", WrapLeft { ofs_first_live: 512, lsn_first_live: 3 }.encode(512)),
        ("footer", footer_bytes.clone()),
        ("index", index_bytes),
        ("filter", filter_bytes),
        ("block", block_bytes),
        ("compact_block", compact_block),
        ("log_ref", LogRef { lsn: 3, ofs_object: 64, entry_index: 0, len_value: 1 }.encode().to_vec()),
    ];
    for round in 0..6000 {
        let (name, valid) = &samples[round % samples.len()];
        let mut bytes = mutate(&mut random, valid);
        if *name == "compact_block" && bytes.len() >= 8 {
            // The crc made to hold, so that the entries' varints are parsed, not refused.
            let crc_at = bytes.len() - 4;
            let crc = lds_format::codec::crc32c(&bytes[..crc_at]);
            bytes[crc_at..].copy_from_slice(&crc.to_le_bytes());
        }
        LARGEST.store(0, Ordering::Relaxed);
        match *name {
            "label" => drop(Label::decode(&bytes, 0)),
            "base" => drop(BaseVersion::decode(&bytes, 0)),
            "delta" => drop(DeltaVersion::decode(&bytes, 0)),
            "journal" => drop(CompactionJournal::decode(&bytes, 0)),
            "batch" => drop(WriteBatchRecord::decode(&bytes, 0)),
            "wrap_left" => drop(WrapLeft::decode(&bytes, 0)),
            "footer" => drop(Footer::decode(&bytes, 0, geometry.slot_size)),
            "index" => drop(lds_format::chunk::index::decode_index(&bytes, 0, &valid_footer)),
            "filter" => drop(Filter::decode(&bytes, 0, &valid_footer)),
            "log_ref" => drop(LogRef::decode(&bytes, 0)),
            _ => drop(decode_block(&bytes, 0)),
        }
        drop(ObjectHeader::parse_raw(&bytes, 0));
        drop(ChunkMeta::decode(&mut Reader::new(&bytes, "meta", 0)));
        check_allocation(bytes.len().max(valid.len()), name);
    }

    // Whole areas and slots: flip bytes of real log areas and slot images, then recover.
    let version_context = area_context(&geometry, LogKind::Version, 0);
    let backup_context = area_context(&geometry, LogKind::Backup, 0);
    for round in 0..600 {
        let mut version_area = image.area(LogKind::Version, 0).to_vec();
        let mut backup_area = image.area(LogKind::Backup, 0).to_vec();
        let mut slot_image = slot.clone();
        for _ in 0..1 + random.below(3) {
            let at = random.below(1024);
            version_area[at] ^= 1 << random.below(8);
            let at = random.below(512);
            backup_area[at] ^= 1 << random.below(8);
            let at = slot_image.len() - 1 - random.below(600);
            slot_image[at] ^= 1 << random.below(8);
        }
        if round % 7 == 0 {
            version_area.iter_mut().for_each(|byte| *byte = random.next() as u8);
        }
        LARGEST.store(0, Ordering::Relaxed);
        if let Ok(state) = recover_version_log(&version_area, &version_context) {
            drop(recover_backup_log(
                &backup_area,
                &backup_context,
                state.version.ofs_backup_start,
                state.version.lsn_backup_start,
                0,
                state.sn,
            ));
        }
        drop(recover_backup_log(&backup_area, &backup_context, random.below(9000) as u64, random.next() % 4, 0, 1));
        drop(physical_walk(&version_area, 0, 512));
        drop(read_object(&version_area, (random.below(2000) * 8) as u64, &version_context));
        // A log reference followed into a damaged backup log (SPEC.md §8.9).
        let at = random.below(backup_area.len() / 8) * 8;
        drop(LogBatch::read(&backup_area[at..], at as u64, &backup_context));
        check_allocation(version_area.len(), "log areas");
        if let Ok(view) = SubChunkView::open(&slot_image, 0) {
            drop(view.entries(0));
            drop(view.verify_digest(0));
        }
        check_allocation(slot_image.len(), "slot");
    }
}
