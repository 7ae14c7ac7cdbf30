//! The in-memory version: base versions build it, delta versions change it with every check
//! of SPEC.md §6.2, and the payloads round-trip.

use std::collections::BTreeMap;

use crate::codec::{Reader, Writer};
use crate::entry::SEQUENCE_MAX;
use crate::error::FormatError;
use crate::geometry::{plan_layout, Geometry, LayoutRequest};
use crate::log::LogPosition;
use crate::value::{Extent, ValueChunkMeta, ValuePointer};
use crate::version::meta::*;
use crate::version::payload::*;
use crate::version::*;

pub(crate) fn geometry() -> Geometry {
    plan_layout(&LayoutRequest { volume_len: 8 << 20, ..LayoutRequest::default() }, [5; 16]).expect("layout")
}

pub(crate) fn meta(chunk_id: u64, level: u8, smallest: &[u8], largest: &[u8]) -> ChunkMeta {
    ChunkMeta {
        chunk_id,
        level,
        flags: 0,
        num_entries: 10,
        smallest_seq: 1,
        largest_seq: 10,
        len_data: 4096,
        smallest_key: smallest.to_vec(),
        largest_key: largest.to_vec(),
        sub_chunks: vec![SubChunkRef { slot: chunk_id, digest: [chunk_id as u8; 32] }],
        value_refs: Vec::new(),
        log_start: None,
    }
}

/// The clone-then-apply replay `Version::apply` replaced, kept as the reference.
fn apply_by_clone(version: &Version, delta: &DeltaVersion) -> Result<Version, ReplayError> {
    let mut next = version.clone();
    for deleted in &delta.deleted {
        match next.chunks.get(&deleted.chunk_id) {
            Some(chunk) if chunk.level == deleted.level => {}
            _ => return Err(ReplayError::DeletedMissing { chunk_id: deleted.chunk_id, level: deleted.level }),
        }
        if let Some(chunk) = next.chunks.remove(&deleted.chunk_id) {
            for slot in chunk.slots() {
                next.slot_owner.remove(&slot);
            }
        }
    }
    for added in &delta.added {
        next.add(added.clone())?;
    }
    for pointer in &delta.compact_pointers {
        next.compact_pointers.insert(pointer.level, pointer.key.clone());
    }
    next.last_sequence = delta.last_sequence;
    next.ofs_backup_start = delta.ofs_backup_start;
    next.lsn_backup_start = delta.lsn_backup_start;
    Ok(next)
}

#[test]
fn a_large_delta_is_checked_like_a_small_one() {
    let mut geometry_base = base();
    geometry_base.geometry.num_slots = geometry_base.geometry.num_slots.max(200);
    let version = Version::from_base(&geometry_base).expect("base");
    let chunks: Vec<ChunkMeta> = (20..60).map(|id| meta(id, 6, b"a", b"b")).collect();
    let valid = DeltaVersion {
        added: chunks.clone(),
        deleted: vec![DeletedChunk { chunk_id: 3, level: 0 }],
        ..DeltaVersion::default()
    };
    let mut applied = version.clone();
    applied.apply(&valid).expect("a valid large delta");
    assert_eq!(Ok(applied), apply_by_clone(&version, &valid));
    // The last chunk claims the slot of chunk 25, and of chunk 5 (kept): the errors the
    // reference meets first, in its order.
    for (slot, expected_owner) in [(25, 25), (5, 5)] {
        let mut bad = valid.clone();
        bad.added[39].sub_chunks.push(SubChunkRef { slot, digest: [0; 32] });
        let mut refused = version.clone();
        assert_eq!(refused.apply(&bad), Err(ReplayError::SlotInUse { slot, owner: expected_owner }));
        assert_eq!(apply_by_clone(&version, &bad), Err(ReplayError::SlotInUse { slot, owner: expected_owner }));
        assert_eq!(refused, version);
    }
}

#[test]
fn in_place_apply_matches_clone_then_apply_on_random_deltas() {
    let mut state = 0x1234_5678_u64;
    let mut next = |bound: u64| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (state >> 33) % bound
    };
    let mut version = Version::from_base(&base()).expect("base");
    let (mut applied, mut refused) = (0, 0);
    for round in 0..20_000u64 {
        // Small id and slot spaces so that collisions, missing deletes and reused slots
        // are common; a few multi-slot chunks and out-of-range levels and slots.
        let deleted = (0..next(3))
            .map(|_| {
                let existing: Vec<&ChunkMeta> = version.chunks.values().collect();
                match (existing.is_empty(), next(5)) {
                    (false, 0..=3) => {
                        let chunk = existing[next(existing.len() as u64) as usize];
                        DeletedChunk { chunk_id: chunk.chunk_id, level: if next(10) == 0 { 9 } else { chunk.level } }
                    }
                    _ => DeletedChunk { chunk_id: next(12), level: next(3) as u8 },
                }
            })
            .collect();
        // Now and then a delta large enough for the set-based checks.
        let count = if next(25) == 0 { 34 + next(8) } else { next(3) };
        let added = (0..count)
            .map(|_| {
                let id = next(14);
                let mut chunk = meta(id, if next(40) == 0 { 8 } else { next(3) as u8 }, b"a", b"b");
                chunk.sub_chunks[0].slot = if next(50) == 0 { 1 << 40 } else { next(14) };
                if next(6) == 0 {
                    chunk.sub_chunks.push(SubChunkRef { slot: next(14), digest: [1; 32] });
                }
                chunk
            })
            .collect();
        let delta = DeltaVersion { last_sequence: 100 + round, deleted, added, ..DeltaVersion::default() };
        let expected = apply_by_clone(&version, &delta);
        let before = version.clone();
        let got = version.apply(&delta);
        match expected {
            Ok(expected) => {
                assert_eq!(got, Ok(()), "round {round}: {delta:?}");
                assert_eq!(version, expected, "round {round}");
                applied += 1;
            }
            Err(error) => {
                assert_eq!(got, Err(error), "round {round}: {delta:?}");
                assert_eq!(version, before, "round {round}: a refused delta changed the version");
                refused += 1;
            }
        }
    }
    assert!(applied > 2_000 && refused > 2_000, "applied {applied}, refused {refused}");
}

fn base() -> BaseVersion {
    BaseVersion {
        geometry: geometry(),
        instance: 0,
        num_levels: 7,
        last_sequence: 100,
        label_generation: 1,
        ofs_backup_start: 4096,
        lsn_backup_start: 12,
        compact_pointers: vec![CompactPointer { level: 1, key: b"m".to_vec() }],
        chunks: vec![meta(3, 0, b"a", b"k"), meta(5, 1, b"c", b"z")],
        values: None,
    }
}

fn delta() -> DeltaVersion {
    DeltaVersion {
        last_sequence: 120,
        ofs_backup_start: 8192,
        lsn_backup_start: 20,
        compaction_id: 0,
        deleted: vec![DeletedChunk { chunk_id: 3, level: 0 }, DeletedChunk { chunk_id: 5, level: 1 }],
        compact_pointers: vec![CompactPointer { level: 0, key: b"k".to_vec() }],
        added: vec![meta(7, 1, b"a", b"m"), meta(8, 1, b"n", b"z")],
        values: None,
    }
}

fn journal() -> CompactionJournal {
    CompactionJournal {
        compaction_id: 4,
        source_level: 1,
        target_level: 2,
        resume_key: b"key-0042".to_vec(),
        inputs: vec![3, 5, 9],
        cleaned: vec![3],
        outputs: vec![meta(11, 2, b"a", b"key-0042")],
    }
}

#[test]
fn round_trips() {
    let base = base();
    assert_eq!(BaseVersion::decode(&base.encode(), 0), Ok(base));
    let delta = delta();
    assert_eq!(DeltaVersion::decode(&delta.encode(), 0), Ok(delta));
    let journal = journal();
    assert_eq!(CompactionJournal::decode(&journal.encode(), 0), Ok(journal));
}

#[test]
fn meta_encoded_len_is_exact() {
    let chunk = meta(3, 0, b"abc", b"defgh");
    let mut writer = Writer::new();
    chunk.encode(&mut writer);
    assert_eq!(writer.len(), chunk.encoded_len());
}

#[test]
fn truncated_payloads_fail_cleanly() {
    let bytes = base().encode();
    for len in 0..bytes.len() {
        assert!(BaseVersion::decode(&bytes[..len], 0).is_err(), "prefix {len} decoded");
    }
    let bytes = delta().encode();
    for len in 0..bytes.len() {
        assert!(DeltaVersion::decode(&bytes[..len], 0).is_err(), "prefix {len} decoded");
    }
    let bytes = journal().encode();
    for len in 0..bytes.len() {
        assert!(CompactionJournal::decode(&bytes[..len], 0).is_err(), "prefix {len} decoded");
    }
}

#[test]
fn replay_applies_and_converts_back() {
    let base = base();
    let mut version = Version::from_base(&base).expect("base");
    version.apply(&delta()).expect("delta");
    version.assert_invariants();
    assert_eq!(version.chunks.keys().copied().collect::<Vec<_>>(), vec![7, 8]);
    assert_eq!(version.last_sequence, 120);
    assert_eq!(version.compact_pointers.get(&0).map(Vec::as_slice), Some(&b"k"[..]));
    let trimmed = version.to_base(base.geometry, 0);
    assert_eq!(Version::from_base(&trimmed), Ok(version));
}

#[test]
fn replay_rejects_contradictions_and_leaves_version_unchanged() {
    let mut version = Version::from_base(&base()).expect("base");
    let before = version.clone();
    let missing = DeltaVersion { deleted: vec![DeletedChunk { chunk_id: 3, level: 1 }], ..DeltaVersion::default() };
    assert_eq!(version.apply(&missing), Err(ReplayError::DeletedMissing { chunk_id: 3, level: 1 }));
    let twice = DeltaVersion { added: vec![meta(5, 1, b"a", b"b")], ..DeltaVersion::default() };
    assert_eq!(version.apply(&twice), Err(ReplayError::AddedTwice { chunk_id: 5 }));
    let mut shared = meta(9, 1, b"a", b"b");
    shared.sub_chunks.push(SubChunkRef { slot: 3, digest: [0; 32] });
    let shared_slot = DeltaVersion { added: vec![shared], ..DeltaVersion::default() };
    assert_eq!(version.apply(&shared_slot), Err(ReplayError::SlotInUse { slot: 3, owner: 3 }));
    let deep = DeltaVersion { added: vec![meta(9, 9, b"a", b"b")], ..DeltaVersion::default() };
    assert_eq!(version.apply(&deep), Err(ReplayError::LevelOutOfRange { chunk_id: 9, level: 9 }));
    assert_eq!(version, before);
}

#[test]
fn meta_invariants_are_checked() {
    let mut bad = meta(3, 0, b"z", b"a");
    let mut writer = Writer::new();
    bad.encode(&mut writer);
    assert!(ChunkMeta::decode(&mut Reader::new(writer.as_slice(), "t", 0)).is_err());
    bad = meta(3, 0, b"a", b"z");
    bad.sub_chunks[0].slot = 4;
    let mut writer = Writer::new();
    bad.encode(&mut writer);
    assert!(ChunkMeta::decode(&mut Reader::new(writer.as_slice(), "t", 0)).is_err());
}

#[test]
fn a_sequence_number_above_2_56_is_refused_in_every_version_object() {
    // lds-hostile values:vlog.dv.last_sequence=past_end: a delta version whose
    // last_sequence is 2^56 decoded, and replay then skipped every batch silently.
    let mut delta = delta();
    delta.last_sequence = SEQUENCE_MAX;
    assert!(DeltaVersion::decode(&delta.encode(), 0).is_ok());
    for last_sequence in [SEQUENCE_MAX + 1, u64::MAX] {
        delta.last_sequence = last_sequence;
        let error = DeltaVersion::decode(&delta.encode(), 64).expect_err("last_sequence above 2^56 - 1");
        assert!(error.to_string().contains("last_sequence"), "{error}");
        let mut base = base();
        base.last_sequence = last_sequence;
        let error = BaseVersion::decode(&base.encode(), 64).expect_err("last_sequence above 2^56 - 1");
        assert!(error.to_string().contains("last_sequence"), "{error}");
        let mut journal = journal();
        journal.outputs[0].largest_seq = last_sequence;
        let error = CompactionJournal::decode(&journal.encode(), 64).expect_err("largest_seq above 2^56 - 1");
        assert!(error.to_string().contains("largest_seq"), "{error}");
    }
}

#[test]
fn a_chunk_listing_one_slot_twice_is_refused() {
    // Found by the delta_version fuzz target: replay took such a chunk, and the version
    // then owned fewer slots than its chunks list (fuzz/regressions/delta_version).
    let mut twice = meta(3, 0, b"a", b"z");
    twice.sub_chunks.push(SubChunkRef { slot: 3, digest: [0; 32] });
    let mut writer = Writer::new();
    twice.encode(&mut writer);
    assert!(matches!(
        ChunkMeta::decode(&mut Reader::new(writer.as_slice(), "t", 0)),
        Err(FormatError::InvalidField { field: "slot", .. })
    ));
    let delta = DeltaVersion { added: vec![twice], ..DeltaVersion::default() };
    assert!(DeltaVersion::decode(&delta.encode(), 0).is_err());
}

#[test]
fn journal_cleaned_must_be_inputs() {
    let mut bad = journal();
    bad.cleaned = vec![77];
    assert!(CompactionJournal::decode(&bad.encode(), 0).is_err());
}

fn value_chunk(id: u64, slot: u64) -> ValueChunkMeta {
    ValueChunkMeta { value_chunk_id: id, slot, len_body: 1000, digest: [id as u8; 32] }
}

fn with_refs(mut chunk: ChunkMeta, refs: &[(u64, u64)]) -> ChunkMeta {
    chunk.flags |= CHUNK_FLAG_VALUE_REFS;
    chunk.value_refs = refs.to_vec();
    chunk
}

fn valued_base() -> BaseVersion {
    BaseVersion {
        geometry: geometry(),
        instance: 0,
        num_levels: 7,
        last_sequence: 10,
        label_generation: 1,
        ofs_backup_start: 0,
        lsn_backup_start: 1,
        compact_pointers: Vec::new(),
        chunks: vec![with_refs(meta(1, 1, b"a", b"f"), &[(3, 400), (4, 50)]), meta(2, 1, b"g", b"k")],
        values: Some(ValueSection { next_value_chunk_id: 5, chunks: vec![value_chunk(3, 5), value_chunk(4, 6)] }),
    }
}

#[test]
fn unlisted_value_chunks_are_the_replayed_pointers_new_ids_at_their_first_slot() {
    let version = Version::from_base(&valued_base()).unwrap_or_else(|error| panic!("{error}"));
    let extent = |value_chunk_id, slot| Extent { value_chunk_id, slot, offset: 0, len: 10 };
    let pointer =
        |extents: Vec<Extent>| ValuePointer { len_value: 10 * extents.len() as u32, value_crc32c: 0, extents };
    let pointers = [
        // Value chunk 3 is listed (at slot 5): a pointer's slot for it is no claim.
        pointer(vec![extent(3, 40), extent(9, 20)]),
        // A later extent naming another slot for 9 does not move it.
        pointer(vec![extent(9, 21)]),
        pointer(vec![extent(11, 30)]),
    ];
    assert_eq!(version.unlisted_value_chunks(&pointers), BTreeMap::from([(9, 20), (11, 30)]));
    assert_eq!(version.unlisted_value_chunks(&[]), BTreeMap::new());
}

#[test]
fn value_sections_round_trip_and_count_live_bytes() {
    let base = valued_base();
    assert_eq!(BaseVersion::decode(&base.encode(), 0), Ok(base.clone()));
    let version = Version::from_base(&base).unwrap_or_else(|error| panic!("{error}"));
    version.assert_invariants();
    assert_eq!((version.live_bytes(3), version.live_bytes(4)), (400, 50));
    assert_eq!(version.slot_owner.get(&5), Some(&(VALUE_CHUNK_OWNER | 3)));
    assert_eq!(version.to_base(base.geometry, 0), base);
    let delta = DeltaVersion {
        last_sequence: 11,
        deleted: vec![DeletedChunk { chunk_id: 1, level: 1 }],
        added: vec![with_refs(meta(7, 2, b"a", b"f"), &[(3, 400), (8, 9)])],
        values: Some(ValueDelta { next_value_chunk_id: 9, deleted: vec![4], added: vec![value_chunk(8, 9)] }),
        ..DeltaVersion::default()
    };
    assert_eq!(DeltaVersion::decode(&delta.encode(), 0), Ok(delta.clone()));
    let mut next = version.clone();
    next.apply(&delta).unwrap_or_else(|error| panic!("{error}"));
    next.assert_invariants();
    assert_eq!((next.live_bytes(3), next.live_bytes(4), next.live_bytes(8)), (400, 0, 9));
    assert!(!next.value_chunks.contains_key(&4) && !next.slot_owner.contains_key(&6));
    assert_eq!(next.next_value_chunk_id, 9);
}

fn log_chunk(chunk_id: u64, lsn: u64, offset: u64) -> ChunkMeta {
    ChunkMeta {
        flags: CHUNK_FLAG_LOG_REFS,
        log_start: Some(LogPosition { offset, lsn }),
        ..meta(chunk_id, 0, b"b", b"d")
    }
}

#[test]
fn log_chunks_round_trip_stay_in_level_0_and_hold_the_retention_start() {
    let mut base = base();
    base.chunks.push(log_chunk(9, 10, 2048));
    let bytes = base.encode();
    assert_eq!(BaseVersion::decode(&bytes, 0), Ok(base.clone()));
    let mut version = Version::from_base(&base).unwrap_or_else(|error| panic!("{error}"));
    // The backup start is lsn 12 at 4096; the log chunk names lsn 10 at 2048.
    assert_eq!(version.retention_start(), LogPosition { offset: 2048, lsn: 10 });
    let newer = DeltaVersion {
        last_sequence: 130,
        ofs_backup_start: 8192,
        lsn_backup_start: 20,
        added: vec![log_chunk(11, 12, 4096)],
        ..DeltaVersion::default()
    };
    assert_eq!(DeltaVersion::decode(&newer.encode(), 0), Ok(newer.clone()));
    version.apply(&newer).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(version.retention_start(), LogPosition { offset: 2048, lsn: 10 });
    assert_eq!(version.backup_start(), LogPosition { offset: 8192, lsn: 20 });
    assert_eq!(version.retained_bytes(16384), 8192 - 2048, "from the log start to the backup start");
    assert_eq!(version.retained_bytes(4096), 4096, "a backup start outside the area: all of it");
    // A merge takes the older log chunk: the retention start moves to the newer one's.
    let merged = DeltaVersion {
        last_sequence: 130,
        ofs_backup_start: 8192,
        lsn_backup_start: 20,
        deleted: vec![DeletedChunk { chunk_id: 9, level: 0 }],
        added: vec![meta(12, 1, b"b", b"d")],
        ..DeltaVersion::default()
    };
    version.apply(&merged).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(version.retention_start(), LogPosition { offset: 4096, lsn: 12 });
    let last = DeltaVersion { deleted: vec![DeletedChunk { chunk_id: 11, level: 0 }], ..merged.clone() };
    let last = DeltaVersion { added: Vec::new(), ..last };
    version.apply(&last).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(version.retention_start(), LogPosition { offset: 8192, lsn: 20 }, "no log chunk: the backup start");
    assert_eq!(version.retained_bytes(16384), 0, "no log chunk: nothing retained");
    // A log chunk never leaves level 0: not by a delta, nor in a base version.
    let moved =
        DeltaVersion { added: vec![ChunkMeta { level: 1, ..log_chunk(13, 20, 8192) }], deleted: Vec::new(), ..last };
    assert_eq!(version.clone().apply(&moved), Err(ReplayError::LogChunkLevel { chunk_id: 13, level: 1 }));
    let mut deep = base.clone();
    deep.chunks.push(ChunkMeta { level: 2, ..log_chunk(14, 10, 2048) });
    assert_eq!(Version::from_base(&deep).err(), Some(ReplayError::LogChunkLevel { chunk_id: 14, level: 2 }));
    // The log start is encoded after the flag; an unaligned offset is refused.
    let mut unaligned = log_chunk(9, 10, 2048);
    unaligned.log_start = Some(LogPosition { offset: 2052, lsn: 10 });
    let mut writer = Writer::new();
    unaligned.encode(&mut writer);
    assert!(ChunkMeta::decode(&mut Reader::new(writer.as_slice(), "chunk metadata", 0)).is_err());
    assert_eq!(log_chunk(9, 10, 2048).encoded_len(), meta(9, 0, b"b", b"d").encoded_len() + LOG_START_LEN);
}

#[test]
fn value_deltas_that_contradict_the_version_are_refused() {
    let version = Version::from_base(&valued_base()).unwrap_or_else(|error| panic!("{error}"));
    let refused = |delta: DeltaVersion| version.clone().apply(&delta).err();
    let values =
        |deleted: Vec<u64>, added: Vec<ValueChunkMeta>| Some(ValueDelta { next_value_chunk_id: 20, deleted, added });
    // Value chunk 4 is still referred to by chunk 1, which stays.
    assert_eq!(
        refused(DeltaVersion { values: values(vec![4], Vec::new()), ..DeltaVersion::default() }),
        Some(ReplayError::ValueChunkReferenced { value_chunk_id: 4 })
    );
    // A chunk naming a value chunk no one adds.
    let dangling = with_refs(meta(8, 1, b"x", b"z"), &[(12, 1)]);
    assert_eq!(
        refused(DeltaVersion { added: vec![dangling], ..DeltaVersion::default() }),
        Some(ReplayError::DanglingValueRef { chunk_id: 8, value_chunk_id: 12 })
    );
    // A value chunk on a chunk's slot, on another value chunk's, twice, or past the ids.
    assert_eq!(
        refused(DeltaVersion { values: values(Vec::new(), vec![value_chunk(9, 2)]), ..DeltaVersion::default() }),
        Some(ReplayError::SlotInUse { slot: 2, owner: 2 })
    );
    assert_eq!(
        refused(DeltaVersion { values: values(Vec::new(), vec![value_chunk(9, 6)]), ..DeltaVersion::default() }),
        Some(ReplayError::SlotInUse { slot: 6, owner: VALUE_CHUNK_OWNER | 4 })
    );
    assert_eq!(
        refused(DeltaVersion { values: values(Vec::new(), vec![value_chunk(3, 30)]), ..DeltaVersion::default() }),
        Some(ReplayError::ValueChunkTwice { value_chunk_id: 3 })
    );
    assert_eq!(
        refused(DeltaVersion { values: values(Vec::new(), vec![value_chunk(25, 30)]), ..DeltaVersion::default() }),
        Some(ReplayError::ValueChunkTwice { value_chunk_id: 25 })
    );
    // A chunk on a value chunk's slot.
    assert_eq!(
        refused(DeltaVersion { added: vec![meta(5, 1, b"x", b"z")], ..DeltaVersion::default() }),
        Some(ReplayError::SlotInUse { slot: 5, owner: VALUE_CHUNK_OWNER | 3 })
    );
    // Ids never go down; a moved value chunk (deleted and added with its id) is fine.
    assert_eq!(
        refused(DeltaVersion {
            values: Some(ValueDelta { next_value_chunk_id: 2, ..ValueDelta::default() }),
            ..DeltaVersion::default()
        }),
        Some(ReplayError::ValueIdDecreased { before: 5, after: 2 })
    );
    let mut moved = version.clone();
    let delta = DeltaVersion { values: values(vec![3], vec![value_chunk(3, 40)]), ..DeltaVersion::default() };
    moved.apply(&delta).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!((moved.value_chunks[&3].slot, moved.live_bytes(3)), (40, 400));
    moved.assert_invariants();
}
