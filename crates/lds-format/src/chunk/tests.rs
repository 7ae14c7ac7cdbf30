//! Sub-chunks built by `ChunkBuilder` and read back through `SubChunkView`: entries, index,
//! filter, key sketch and digest round-trip, and every damaged byte is noticed.

use crate::chunk::block::{entry_header_len, BLOCK_FLAG_COMPACT, ENTRY_FIXED_LEN};
use crate::chunk::builder::{BuiltSubChunk, ChunkBuilder, ChunkIdentity, ChunkOptions};
use crate::chunk::footer::{Footer, SubChunkDigest, FOOTER_LEN};
use crate::chunk::view::SubChunkView;
use crate::digest::DigestKind;
use crate::entry::{compare_internal, pack_seq_kind, EntryKind, SEQUENCE_MAX};

const SLOT: u64 = 64 * 1024;

fn options() -> ChunkOptions {
    ChunkOptions {
        slot_size: SLOT,
        block_size: 1024,
        bloom_bits_per_key: 10,
        digest: DigestKind::Blake3,
        sketch_precision: 0,
        compact_entries: false,
    }
}

fn identity() -> ChunkIdentity {
    ChunkIdentity {
        volume_uuid: [3; 16],
        instance: 0,
        chunk_id: 9,
        sub_chunk_index: 0,
        num_sub_chunks: 1,
        level: 1,
        flags: 0,
    }
}

fn key(number: u32) -> Vec<u8> {
    format!("key-{number:06}").into_bytes()
}

fn build(count: u32) -> BuiltSubChunk {
    let mut builder = ChunkBuilder::new(options());
    for number in 0..count {
        let kind = if number % 7 == 3 { EntryKind::Delete } else { EntryKind::Put };
        let value = if kind == EntryKind::Put { vec![number as u8; (number % 50) as usize] } else { Vec::new() };
        assert!(builder.add(&key(number), u64::from(number) + 1, kind, &value));
    }
    builder.finish(identity()).expect("not empty")
}

/// Entries of every length class a varint has: sequences near each 7-bit boundary and the
/// largest, keys of 10 to 300 bytes, values of 0 to 20,000, puts and deletes.
fn varied_entries() -> Vec<(Vec<u8>, u64, EntryKind, Vec<u8>)> {
    let sequences = [1u64, 31, 32, 127, 128, 1 << 19, (1 << 19) - 1, 1 << 26, SEQUENCE_MAX - 1, SEQUENCE_MAX];
    let mut entries = Vec::new();
    for number in 0..400u32 {
        let mut key = key(number);
        key.resize(key.len().max((number as usize * 37) % 300), b'k');
        let kind = if number % 5 == 2 { EntryKind::Delete } else { EntryKind::Put };
        let len_value = [0usize, 1, 127, 128, 300, 16_383, 16_384, 20_000][number as usize % 8];
        let value = if kind == EntryKind::Put { vec![number as u8; len_value] } else { Vec::new() };
        entries.push((key, sequences[number as usize % sequences.len()], kind, value));
    }
    entries.sort_by(|a, b| compare_internal(&a.0, pack_seq_kind(a.1, a.2), &b.0, pack_seq_kind(b.1, b.2)));
    entries.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
    entries
}

fn build_entries(options: ChunkOptions, entries: &[(Vec<u8>, u64, EntryKind, Vec<u8>)]) -> BuiltSubChunk {
    let mut builder = ChunkBuilder::new(options);
    for (key, sequence, kind, value) in entries {
        assert!(builder.add(key, *sequence, *kind, value), "fits the slot");
    }
    builder.finish(identity()).expect("not empty")
}

#[test]
fn compact_entries_read_back_as_written_and_take_fewer_bytes() {
    let entries = varied_entries();
    let options = ChunkOptions { slot_size: 4 << 20, ..options() };
    let fixed = build_entries(options, &entries);
    let compact = build_entries(ChunkOptions { compact_entries: true, ..options }, &entries);
    for (built, flag) in [(&fixed, 0), (&compact, BLOCK_FLAG_COMPACT)] {
        let image = built.slot_image();
        let view = SubChunkView::open(&image, 0).expect("opens");
        view.verify_digest(0).expect("digest");
        let read: Vec<_> = view
            .entries(0)
            .expect("decodes")
            .into_iter()
            .map(|entry| (entry.key.to_vec(), entry.sequence, entry.kind, entry.value.to_vec()))
            .collect();
        assert_eq!(read, entries);
        for index in 0..view.index.len() {
            let block = view.block(index);
            let trailer = u32::from_le_bytes(block[block.len() - 8..block.len() - 4].try_into().expect("4"));
            assert_eq!(trailer & BLOCK_FLAG_COMPACT, flag, "block {index}");
        }
    }
    // Each header is exactly what `entry_header_len` says: the bodies differ by the sum.
    let saved: usize = entries
        .iter()
        .map(|(key, sequence, kind, value)| {
            ENTRY_FIXED_LEN - entry_header_len(true, *sequence, *kind, key.len(), value.len())
        })
        .sum();
    assert!(saved > 0);
    let blocks = |built: &BuiltSubChunk| built.footer.num_blocks as usize;
    assert_eq!(blocks(&fixed), blocks(&compact), "same block boundaries at this size");
    assert_eq!(fixed.footer.len_body as usize - compact.footer.len_body as usize, saved);
}

#[test]
fn a_key_sketch_lies_before_the_index_and_counts_the_keys() {
    let mut builder = ChunkBuilder::new(ChunkOptions { sketch_precision: 10, ..options() });
    for number in 0..800 {
        // Two versions of each key: the sketch counts keys, not entries.
        assert!(builder.add(&key(number), 2_000 - u64::from(number), EntryKind::Put, b"v"));
        assert!(builder.add(&key(number), 1_000 - u64::from(number), EntryKind::Put, b"w"));
    }
    let built = builder.finish(identity()).expect("not empty");
    assert_eq!(built.footer.len_sketch as usize, 4 + 1024);
    assert_eq!(built.footer.ofs_sketch + built.footer.len_sketch, built.footer.ofs_index);
    let image = built.slot_image();
    let view = SubChunkView::open(&image, 0).expect("opens");
    view.verify_digest(0).expect("the digest does not cover the sketch");
    let estimate = view.sketch(0).expect("checks").expect("present").estimate();
    assert!((estimate - 800.0).abs() < 80.0, "800 keys estimated as {estimate}");
    // A damaged sketch is named, and the chunk still opens.
    let mut damaged = image.clone();
    damaged[built.footer.ofs_sketch as usize + 9] ^= 0x40;
    let view = SubChunkView::open(&damaged, 0).expect("opens");
    assert!(view.sketch(0).expect_err("crc").to_string().contains("key sketch"));
    // The footer's sketch fields must describe the place before the index.
    let mut footer = built.footer;
    footer.ofs_sketch -= 1;
    let bytes = footer.encode();
    assert!(Footer::decode(&bytes, 0, SLOT).is_err());
    let mut footer = built.footer;
    footer.len_sketch = 0;
    assert!(Footer::decode(&footer.encode(), 0, SLOT).is_err(), "an offset without a sketch");
    assert_eq!(build(10).footer.len_sketch, 0);
}

#[test]
fn round_trip_through_a_slot_image() {
    let built = build(500);
    let image = built.slot_image();
    let view = SubChunkView::open(&image, 0).expect("opens");
    assert_eq!(view.footer, built.footer);
    view.verify_digest(0).expect("digest");
    let entries = view.entries(0).expect("entries");
    assert_eq!(entries.len(), 500);
    assert_eq!(entries[3].kind, EntryKind::Delete);
    assert_eq!(entries[11].key, key(11).as_slice());
    assert_eq!(entries[11].value, vec![11u8; 11].as_slice());
    assert!(view.index.len() > 1);
    for number in 0..500 {
        assert!(view.filter.may_contain(&key(number)));
    }
    let false_positives = (1000..3000).filter(|&number| view.filter.may_contain(&key(number))).count();
    assert!(false_positives < 100, "{false_positives} false positives of 2000");
}

#[test]
fn a_digest_hashed_in_pieces_is_the_footers_and_sees_one_changed_byte() {
    for digest in [DigestKind::Blake3, DigestKind::Xxh3] {
        let mut builder = ChunkBuilder::new(ChunkOptions { digest, ..options() });
        for number in 0..500 {
            assert!(builder.add(&key(number), u64::from(number) + 1, EntryKind::Put, b"value"));
        }
        let built = builder.finish(identity()).expect("not empty");
        let image = built.slot_image();
        let footer = built.footer;
        let tail = &image[footer.ofs_index as usize..image.len() - FOOTER_LEN];
        let in_pieces = |image: &[u8], piece: usize| {
            let mut hashed = SubChunkDigest::new(&footer);
            for part in image[..footer.len_body as usize].chunks(piece) {
                hashed.body(part);
            }
            hashed.finish(tail)
        };
        for piece in [1, 7, 4096, footer.len_body as usize] {
            assert_eq!(in_pieces(&image, piece), footer.digest, "{digest:?} in pieces of {piece}");
        }
        let mut changed = image.clone();
        changed[footer.len_body as usize / 2] ^= 1;
        assert_ne!(in_pieces(&changed, 1000), footer.digest, "{digest:?}: a changed body byte");
    }
}

#[test]
fn builder_refuses_what_does_not_fit_and_the_result_fits() {
    let mut builder = ChunkBuilder::new(options());
    let value = vec![7u8; 1000];
    let mut added = 0u32;
    while builder.add(&key(added), u64::from(added) + 1, EntryKind::Put, &value) {
        added += 1;
        assert!(builder.estimated_len() <= SLOT as usize);
    }
    assert!(added > 50);
    let built = builder.finish(identity()).expect("not empty");
    assert!(built.len_data() <= SLOT);
    let image = built.slot_image();
    assert_eq!(SubChunkView::open(&image, 0).expect("opens").entries(0).expect("entries").len(), added as usize);
}

#[test]
fn multiple_versions_of_one_key_are_ordered_newest_first() {
    let mut builder = ChunkBuilder::new(options());
    assert!(builder.add(b"a", 9, EntryKind::Put, b"new"));
    assert!(builder.add(b"a", 4, EntryKind::Delete, b""));
    assert!(builder.add(b"b", 1, EntryKind::Put, b"x"));
    let built = builder.finish(identity()).expect("not empty");
    let image = built.slot_image();
    let view = SubChunkView::open(&image, 0).expect("opens");
    let sequences: Vec<u64> = view.entries(0).expect("entries").iter().map(|entry| entry.sequence).collect();
    assert_eq!(sequences, vec![9, 4, 1]);
}

#[test]
fn flip_any_tail_byte_is_detected() {
    let built = build(40);
    let image = built.slot_image();
    let tail_start = SLOT as usize - built.tail().len();
    for index in tail_start..SLOT as usize {
        if (SLOT as usize - FOOTER_LEN + 136..SLOT as usize - 4).contains(&index) {
            continue; // reserved bytes: covered by the footer crc, checked below
        }
        let mut flipped = image.clone();
        flipped[index] ^= 0x04;
        let opened = SubChunkView::open(&flipped, 0);
        let detected = match opened {
            Err(_) => true,
            Ok(view) => view.verify_digest(0).is_err(),
        };
        assert!(detected, "flip at {index} went unnoticed");
    }
    let mut reserved = image.clone();
    reserved[SLOT as usize - 10] ^= 1;
    assert!(SubChunkView::open(&reserved, 0).is_err());
}

#[test]
fn flip_any_body_byte_is_detected_by_the_block_crc() {
    let built = build(40);
    let image = built.slot_image();
    for index in 0..built.body.len() {
        let mut flipped = image.clone();
        flipped[index] ^= 0x20;
        let view = SubChunkView::open(&flipped, 0).expect("tail intact");
        assert!(view.entries(0).is_err(), "flip at {index} went unnoticed");
        assert!(view.verify_digest(0).is_err());
    }
}

#[test]
fn empty_builder_gives_nothing() {
    assert!(ChunkBuilder::new(options()).finish(identity()).is_none());
}

#[test]
fn set_identity_reseals() {
    let mut built = build(10);
    built.set_identity(33, 1, 2);
    let image = built.slot_image();
    let view = SubChunkView::open(&image, 0).expect("opens");
    assert_eq!(view.footer.chunk_id, 33);
    assert_eq!(view.footer.sub_chunk_index, 1);
    view.verify_digest(0).expect("digest");
}
