//! Fixtures that settle what SPEC.md §15.1 once left a foreign reader to guess, so that the
//! three Kaitai readers (tools/kaitai, checked against `lds dump` and `lds scan` on every
//! fixture by tools/tests) prove the normative text, not only lds:
//! - `d_journal_reused_slot` (SPEC.md §12, §15.1 step 4): an unfinished compaction whose
//!   output reuses the slot, and so the chunk id, of an input it cleaned;
//! - `f_sequence_read_cap` (SPEC.md §15.1 step 6): chunk entries on both sides of the read
//!   cap, the last replayed sequence number, which lies above the version's `last_sequence`;
//! - `d_large_sequences` (SPEC.md §8.2, §15.1 "Widths"): compact entries whose varint tags
//!   pass 2^31 and 2^32 (sequence numbers from 2^30 up), which a 32-bit integer cuts.
//!
//! `f_sequence_read_cap` is an fsck case (warning 410): crate::fsck_cases lists it.
//!
//! The third guess, which label copy of the first device holds the device table and in which
//! order the devices are given (SPEC.md §4.3, §15.1 rule 7), needs a volume of several
//! devices; tools/tests builds that one with the lds binary.

use lds_format::algorithms::image::ImageBuilder;
use lds_format::batch::BatchEntry;
use lds_format::entry::EntryKind;
use lds_format::version::payload::{CompactionJournal, DeltaVersion};

use crate::{added, expect, new_label, small, Fixture};

/// A chunk entry: key, sequence number, kind, value.
type Entry = (Vec<u8>, u64, EntryKind, Vec<u8>);

/// Entries `key{first..first+count}` at sequence numbers from `first_sequence`, each value
/// naming `version` so that two versions of a key read differently; with `tombstones`, every
/// seventh is a delete.
fn versioned(first: u32, count: u32, first_sequence: u64, version: &str, tombstones: bool) -> Vec<Entry> {
    (0..count)
        .map(|index| {
            let number = first + index;
            let (kind, value) = if tombstones && number % 7 == 6 {
                (EntryKind::Delete, Vec::new())
            } else {
                (EntryKind::Put, format!("{version}-{number}").into_bytes())
            };
            (format!("key{number:05}").into_bytes(), first_sequence + u64::from(index), kind, value)
        })
        .collect()
}

/// The slot of the cleaned input whose slot an output of [`journal_reused_slot_image`]
/// reuses: chunk id 3 names the cleaned input in the version and the output in the journal.
pub const REUSED_SLOT: u64 = 3;
/// The slot of the input [`journal_reused_slot_image`] cleaned without reusing it: zeroed,
/// as a cleaned slot may hold anything (SPEC.md §12).
pub const CLEANED_ZEROED_SLOT: u64 = 4;

/// An unfinished compaction of level 1 into level 2 (SifrDB §4.2, SPEC.md §12) that cleaned
/// inputs 3 and 4 and wrote its second output into slot 3, so that chunk id 3 names both the
/// cleaned input (level 1, in the version) and an output (level 2, in the last compaction
/// journal record). Slot 4 (cleaned, not reused) is zeroed. Reads must take keys up to the
/// resume key from the outputs (slots 10 and 3), the others from inputs 5 and 6, and never
/// read a cleaned input: a reader that drops the output with a cleaned id, or reads slot 3
/// as the input, loses keys 20 to 39; one that reads a cleaned input fails at slot 4.
pub fn journal_reused_slot_image() -> ImageBuilder {
    let mut image = ImageBuilder::format(new_label(small(4096), 0xa1, "journal reused slot"));
    // Level 2 holds the older version of keys 0..59; level 1 the newer one, with tombstones.
    let older = image.reserve_sequences(0, 60);
    let target = image.write_chunk(0, 6, 2, 0, &versioned(0, 60, older, "old", false));
    let mut all = Vec::new();
    for index in 0..3u32 {
        let sequence = image.reserve_sequences(0, 20);
        let slot = 3 + u64::from(index);
        all.push(image.write_chunk(0, slot, 1, 0, &versioned(index * 20, 20, sequence, "new", true)));
    }
    let newer = older + 60;
    all.push(target);
    let delta = added(&image, 0, all, image.last_sequence(0));
    expect(image.append_delta(0, &delta));
    // The merge keeps each key's newest version (level 1's, sequence numbers unchanged) and,
    // level 2 not being the base level, its tombstones.
    let first = image.write_chunk(0, 10, 2, 0, &versioned(0, 20, newer, "new", true));
    let mut record = CompactionJournal {
        compaction_id: 1,
        source_level: 1,
        target_level: 2,
        resume_key: first.largest_key.clone(),
        inputs: vec![3, 4, 5, 6],
        cleaned: vec![3],
        outputs: vec![first],
    };
    expect(image.append_journal(0, &record));
    // Input 3 is cleaned and its slot freed: the next output takes it, and its id.
    let second = image.write_chunk(0, REUSED_SLOT, 2, 0, &versioned(20, 20, newer + 20, "new", true));
    record.resume_key = second.largest_key.clone();
    record.cleaned = vec![3, 4];
    record.outputs.push(second);
    expect(image.append_journal(0, &record));
    let geometry = image.label.geometry;
    let at = geometry.slot_offset(CLEANED_ZEROED_SLOT) as usize;
    image.bytes[at..at + geometry.slot_size as usize].fill(0);
    expect(image.append_batch(0, crate::puts(&["after-the-journal"])));
    image
}

/// The sequence numbers of [`read_cap_image`]'s level-1 chunk, above the version's
/// `last_sequence` (`L`): `key` and how far above `L` its entry is. The replay ends at
/// `L + 4`, the read cap.
pub const READ_CAP_ENTRIES: [(&str, u64); 5] =
    [("above-cap", 9), ("below-cap", 2), ("older-version", 7), ("replayed-1", 8), ("zzz-at-cap", 4)];

/// A volume whose version's `last_sequence` is `L`, with four entries replayed from the
/// backup log (`L + 1` to `L + 4`: the read cap is `L + 4`, SPEC.md §15.1 step 6) and a
/// level-1 chunk whose entries lie above `L` ([`READ_CAP_ENTRIES`]): `below-cap` (`L + 2`)
/// and `zzz-at-cap` (`L + 4`) are read, `above-cap` (`L + 9`) is not, `older-version`
/// shows its older entry (sequence 2) because its newer one (`L + 7`) is above the cap,
/// and `replayed-1` shows its replayed put (`L + 1`), not the chunk's (`L + 8`).
pub fn read_cap_image() -> ImageBuilder {
    let mut image = ImageBuilder::format(new_label(small(4096), 0xa2, "read cap"));
    let flushed = crate::puts(&["flushed-a", "flushed-b"]);
    let first = expect(image.append_batch(0, flushed.clone()));
    let entries: Vec<Entry> = flushed
        .into_iter()
        .zip(first..)
        .map(|(entry, sequence)| (entry.key, sequence, entry.kind, entry.value))
        .collect();
    let chunk = image.write_chunk(0, 3, 0, 0, &entries);
    let (ofs, lsn) = image.instances[0].backup_log.next_position();
    let last = image.last_sequence(0);
    expect(image.append_delta(
        0,
        &DeltaVersion { ofs_backup_start: ofs, lsn_backup_start: lsn, ..added(&image, 0, vec![chunk], last) },
    ));
    // Replayed: L + 1 .. L + 4.
    expect(image.append_batch(0, crate::puts(&["replayed-1", "replayed-2"])));
    expect(image.append_batch(0, crate::puts(&["replayed-3", "replayed-4"])));
    // A level-1 chunk that a writer's bug left with entries above the version's last
    // sequence (fsck warning 410), added by a delta that keeps `last_sequence` at L.
    let mut above: Vec<Entry> = READ_CAP_ENTRIES
        .iter()
        .map(|&(key, ahead)| {
            (key.as_bytes().to_vec(), last + ahead, EntryKind::Put, format!("chunk-{key}-at-L+{ahead}").into_bytes())
        })
        .collect();
    above.push((b"older-version".to_vec(), 2, EntryKind::Put, b"chunk-older-version-at-2".to_vec()));
    // Sorted by key, then by sequence number descending (SPEC.md §8.1).
    above.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    let chunk = image.write_chunk(0, 4, 1, 0, &above);
    let delta = DeltaVersion { ofs_backup_start: ofs, lsn_backup_start: lsn, ..added(&image, 0, vec![chunk], last) };
    expect(image.append_delta(0, &delta));
    image
}

/// Sequence numbers past 2^30 (a put's varint tag, `sequence * 2 + 1`, past 2^31), 2^31 and
/// 2^32, up to 2^40 (exact in every reader, SPEC.md §15.1 "Widths"), in the compact entries
/// of [`large_sequences_image`]'s chunk: key, sequence, kind.
pub const LARGE_SEQUENCES: [(&str, u64, EntryKind); 8] = [
    ("at-2^30", 1 << 30, EntryKind::Put),
    ("below-2^30", (1 << 30) - 1, EntryKind::Put),
    ("deleted", (1 << 31) + 7, EntryKind::Delete),
    ("deleted", (1 << 30) + 1, EntryKind::Put),
    ("past-2^32", (1 << 32) + 5, EntryKind::Put),
    ("past-2^40", (1 << 40) + 7, EntryKind::Put),
    ("twice", (1 << 32) + 1, EntryKind::Put),
    ("twice", (1 << 31) + 1, EntryKind::Put),
];

/// A format 1.7 volume (feature `compact_entries`, SPEC.md §8.2) whose level-0 chunk holds
/// the compact entries of [`LARGE_SEQUENCES`] (a delete hiding an older put, two puts of one
/// key), committed with `last_sequence` 2^40 + 8, then a batch replayed above it.
pub fn large_sequences_image() -> ImageBuilder {
    let mut image = ImageBuilder::format(new_label(small(4096), 0xa3, "large sequences").with_compact_entries());
    let Some(&(_, largest, _)) = LARGE_SEQUENCES.iter().max_by_key(|entry| entry.1) else {
        unreachable!("LARGE_SEQUENCES is not empty")
    };
    image.reserve_sequences(0, largest + 1);
    let entries: Vec<Entry> = LARGE_SEQUENCES
        .iter()
        .map(|&(key, sequence, kind)| {
            let value = if kind == EntryKind::Put { format!("{key}@{sequence}").into_bytes() } else { Vec::new() };
            (key.as_bytes().to_vec(), sequence, kind, value)
        })
        .collect();
    let chunk = image.write_chunk(0, 3, 0, 0, &entries);
    let (ofs, lsn) = image.instances[0].backup_log.next_position();
    let last = image.last_sequence(0);
    expect(image.append_delta(
        0,
        &DeltaVersion { ofs_backup_start: ofs, lsn_backup_start: lsn, ..added(&image, 0, vec![chunk], last) },
    ));
    let replayed = BatchEntry { kind: EntryKind::Put, key: b"twice".to_vec(), value: b"replayed".to_vec() };
    expect(image.append_batch(0, vec![replayed]));
    image
}

/// The golden images of this module (fsck finds them clean).
pub fn all() -> Vec<Fixture> {
    vec![
        Fixture {
            name: "d_journal_reused_slot",
            description: "an unfinished compaction whose second output reuses the slot and chunk id of a cleaned \
                          input; the other cleaned input's slot zeroed (SPEC.md §12, §15.1 step 4)",
            image: journal_reused_slot_image().bytes,
        },
        Fixture {
            name: "d_large_sequences",
            description: "compact entries at sequence numbers from 2^30 - 1 to 2^40 + 7: varint tags past 2^31 and \
                          2^32 (SPEC.md §8.2, §15.1)",
            image: large_sequences_image().bytes,
        },
    ]
}
