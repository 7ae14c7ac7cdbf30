//! Pass 4: every chunk the trees reference (SPEC.md §8): footers against the version,
//! indexes, filters and every block's checksum, key order and ranges, sequence numbers, the
//! level rules (disjoint levels, one odd chunk each); with `deep`, each sub-chunk's digest and
//! every key against its filter; every log reference (`pass_logrefs`).

use lds_format::batch::SEQUENCE_MAX;
use lds_format::chunk::{decode_block, decode_index, sub_chunk_digest, Filter, Footer, FOOTER_LEN};
use lds_format::label::{Geometry, Label};
use lds_format::recovery::VersionLogState;
use lds_format::version::ChunkMeta;
use lds_format::FormatError;
use lds_volume::volume::read_tolerant;
use lds_volume::{DeviceError, ReadAt};

use crate::pass_logrefs::{ChunkLogRefs, LogCheck};
use crate::pass_values::{ChunkValues, ValueChunks};
use crate::problem::{Code, Report};
use crate::{CheckError, CheckOptions, Tree};

/// Checks every tree's chunks; `progress(done, total)` hears bytes of chunks.
pub(crate) fn check_trees(
    device: &(impl ReadAt + Sync + ?Sized),
    label: &Label,
    trees: &[Tree],
    options: CheckOptions,
    report: &mut Report,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(), CheckError> {
    let total: u64 = trees
        .iter()
        .flat_map(|tree| tree.recovery.version_log.version.chunks.values().map(|chunk| chunk.len_data))
        .sum();
    let mut done = 0u64;
    for tree in trees {
        check_tree(device, label, tree, options, report, &mut |bytes| {
            done += bytes;
            progress(done, total);
        })?;
    }
    Ok(())
}

/// Checks every chunk of a tree, and the level rules.
fn check_tree(
    device: &(impl ReadAt + Sync + ?Sized),
    label: &Label,
    tree: &Tree,
    options: CheckOptions,
    report: &mut Report,
    progress: &mut dyn FnMut(u64),
) -> Result<(), CheckError> {
    let instance = tree.instance;
    let state: &VersionLogState = &tree.recovery.version_log;
    let geometry = &label.geometry;
    let version = &state.version;
    // Value chunks (SPEC.md §8.6): their footers, the replayed batches' pointers, then each
    // chunk's pointers as the chunk is checked.
    let mut value_chunks = None;
    if label.has_value_chunks() {
        let pending: std::collections::BTreeMap<u64, u64> = tree
            .replayed_pointers
            .iter()
            .flat_map(|pointed| pointed.pointer.extents.iter())
            .filter(|extent| !version.value_chunks.contains_key(&extent.value_chunk_id))
            .map(|extent| (extent.value_chunk_id, extent.slot))
            .collect();
        let mut checked = ValueChunks::check(device, label, instance, version, &pending, options.deep, report)?;
        let structure = format!("backup log of instance {instance}");
        checked.check_pointers(device, &tree.replayed_pointers, &structure, options.deep, report)?;
        value_chunks = Some(checked);
    }
    // Log chunks (SPEC.md §8.9): the references resolve against the area recovery read.
    let log =
        tree.backup_area.as_deref().map(|backup_area| LogCheck { backup_area, log_tables: label.has_log_tables() });
    if let Some(log) = &log {
        let retained = crate::pass_logrefs::retained_bytes(version, log.backup_area.len() as u64);
        report.summary.log_retained.push((instance, retained));
    }
    let mut check_one = |images: &[Vec<u8>], chunk: &ChunkMeta, report: &mut Report| -> Result<(), CheckError> {
        let values = check_chunk(images, geometry, instance, chunk, version.last_sequence, options, log, report);
        if let Some(checked) = value_chunks.as_mut() {
            let structure = format!("chunk {} of instance {instance}", chunk.chunk_id);
            checked.check_pointers(device, &values.pointers, &structure, options.deep, report)?;
        }
        Ok(())
    };
    for level in 1..version.num_levels as u8 {
        let chunks = version.level(level);
        for pair in chunks.windows(2) {
            if pair[0].largest_key >= pair[1].smallest_key {
                report.add(
                    Code::LevelOverlap,
                    format!("level {level} of instance {instance}"),
                    geometry.slot_offset(pair[1].chunk_id),
                    format!("chunks {} and {} overlap", pair[0].chunk_id, pair[1].chunk_id),
                );
            }
        }
        let odd: Vec<u64> = chunks.iter().filter(|chunk| chunk.is_odd()).map(|chunk| chunk.chunk_id).collect();
        if odd.len() > 1 {
            report.add(
                Code::OddChunksInLevel,
                format!("level {level} of instance {instance}"),
                0,
                format!("{} odd chunks: {odd:?} (SPEC.md §11 allows one)", odd.len()),
            );
        }
    }
    // The chunks reads can reach: the version's, except inputs an unfinished compaction
    // cleaned (their slots are free and may hold anything by now, SPEC.md §12), and the
    // outputs its last journal record lists.
    let cleaned: std::collections::BTreeSet<u64> =
        state.unfinished_compactions.values().flat_map(|journal| journal.cleaned.iter().copied()).collect();
    let chunks: Vec<&ChunkMeta> = version
        .chunks
        .values()
        .filter(|chunk| !cleaned.contains(&chunk.chunk_id))
        .chain(state.unfinished_compactions.values().flat_map(|journal| journal.outputs.iter()))
        .filter(|chunk| {
            // A slot no device holds (a removed device's, SPEC.md §4.3) cannot be read.
            let absent = chunk.slots().find(|&slot| slot < geometry.num_slots && !label.slot_present(slot));
            if let Some(slot) = absent {
                report.add(
                    Code::SlotOutOfRange,
                    format!("chunk {} of instance {instance}", chunk.chunk_id),
                    0,
                    format!("slot {slot} is in no device of the volume"),
                );
            }
            absent.is_none()
        })
        .collect();
    // A reader thread fetches whole slots in slot order, at most two chunks ahead, so that
    // reading overlaps checking and the device sees one sequential read per slot. A small
    // tree is read inline: a thread costs more than it saves there (the crash simulator
    // checks thousands of tiny volumes).
    let read_chunk = |chunk: &ChunkMeta| -> Vec<SlotRead> {
        chunk
            .slots()
            .filter(|&slot| slot < geometry.num_slots)
            .map(|slot| read_tolerant(device, geometry.slot_offset(slot), geometry.slot_size, geometry.sector()))
            .collect()
    };
    // Sectors that cannot be read are zeros (their blocks fail their checksums), reported.
    let images_of = |chunk: &ChunkMeta, read: Vec<SlotRead>, report: &mut Report| -> Result<Vec<Vec<u8>>, CheckError> {
        let mut images = Vec::new();
        for result in read {
            let (image, unreadable) = result?;
            if let (Some(&first), Some(&last)) = (unreadable.first(), unreadable.last()) {
                report.add(
                    Code::UnreadableSector,
                    format!("chunk {} of instance {instance}", chunk.chunk_id),
                    first,
                    format!(
                        "{} sectors from offset {first} to {last} cannot be read; they are read as zeros",
                        unreadable.len()
                    ),
                );
            }
            images.push(image);
        }
        Ok(images)
    };
    if chunks.len() <= INLINE_CHUNKS_MAX {
        for chunk in chunks {
            let images = images_of(chunk, read_chunk(chunk), report)?;
            check_one(&images, chunk, report)?;
            progress(chunk.len_data);
        }
        return Ok(());
    }
    std::thread::scope(|scope| -> Result<(), CheckError> {
        let (sender, receiver) = std::sync::mpsc::sync_channel::<Vec<SlotRead>>(2);
        let reader_chunks = chunks.clone();
        scope.spawn(move || {
            for chunk in reader_chunks {
                if sender.send(read_chunk(chunk)).is_err() {
                    return;
                }
            }
        });
        for chunk in chunks {
            let read = receiver.recv().map_err(|_| CheckError::ReaderStopped)?;
            let images = images_of(chunk, read, report)?;
            check_one(&images, chunk, report)?;
            progress(chunk.len_data);
        }
        Ok(())
    })
}

/// A slot's bytes (unreadable sectors as zeros) and the offsets of those sectors.
type SlotRead = Result<(Vec<u8>, Vec<u64>), DeviceError>;

/// Trees of at most this many chunks are read without a reader thread.
const INLINE_CHUNKS_MAX: usize = 16;

/// Checks one chunk: every sub-chunk's footer, index, filter and blocks, its key order and
/// range, its log references (resolved when `log` gives the backup log area), and with
/// `deep` its digest and filter.
#[expect(clippy::too_many_arguments, reason = "the chunk, its context and the report, as both entry points pass them")]
pub(crate) fn check_chunk(
    images: &[Vec<u8>],
    geometry: &Geometry,
    instance: u32,
    chunk: &ChunkMeta,
    last_sequence: u64,
    options: CheckOptions,
    log: Option<LogCheck<'_>>,
    report: &mut Report,
) -> ChunkValues {
    let mut values = ChunkValues::default();
    let mut log_refs = ChunkLogRefs::new(geometry, instance, log);
    let structure = format!("chunk {} of instance {instance}", chunk.chunk_id);
    report.summary.chunks += 1;
    let problems_before = report.problems.len();
    let mut previous: Option<(Vec<u8>, u64)> = None;
    let mut first_key: Option<Vec<u8>> = None;
    let mut entries = 0u64;
    let (mut smallest_seq, mut largest_seq) = (u64::MAX, 0u64);
    for (index, sub_chunk) in chunk.sub_chunks.iter().enumerate() {
        let slot = sub_chunk.slot;
        if slot >= geometry.num_slots {
            report.add(
                Code::SlotOutOfRange,
                structure.clone(),
                0,
                format!("slot {slot} is beyond the {} slots", geometry.num_slots),
            );
            return values;
        }
        let Some(image) = images.get(index) else { return values };
        let slot_offset = geometry.slot_offset(slot);
        let footer_offset = slot_offset + geometry.slot_size - FOOTER_LEN as u64;
        let footer_at = image.len() - FOOTER_LEN;
        let footer = match Footer::decode(&image[footer_at..], footer_offset, geometry.slot_size) {
            Ok(footer) => footer,
            Err(error) => {
                report.add(Code::FooterInvalid, structure.clone(), footer_offset, error.to_string());
                continue;
            }
        };
        let expected = [
            ("chunk_id", footer.chunk_id, chunk.chunk_id),
            ("sub_chunk_index", u64::from(footer.sub_chunk_index), index as u64),
            ("num_sub_chunks", u64::from(footer.num_sub_chunks), chunk.sub_chunks.len() as u64),
            ("instance", u64::from(footer.instance), u64::from(instance)),
        ];
        for (field, found, wanted) in expected {
            if found != wanted {
                report.add(
                    Code::FooterMismatch,
                    structure.clone(),
                    footer_offset,
                    format!("the footer of slot {slot} has {field} {found}, the version says {wanted}"),
                );
            }
        }
        if footer.volume_uuid != geometry.volume_uuid {
            report.add(
                Code::FooterMismatch,
                structure.clone(),
                footer_offset,
                format!("slot {slot} holds a chunk of another volume"),
            );
        }
        if footer.digest != sub_chunk.digest {
            report.add(
                Code::FooterMismatch,
                structure.clone(),
                footer_offset,
                format!("the footer digest of slot {slot} differs from the version's"),
            );
        }
        if footer.len_sketch != 0 {
            // Footer::decode checked that the sketch lies between the body and the index.
            let range = footer.ofs_sketch as usize..footer.ofs_index as usize;
            let sketch_offset = slot_offset + u64::from(footer.ofs_sketch);
            report.summary.key_sketches += 1;
            if let Err(error) = lds_format::sketch::Sketch::decode(&image[range], sketch_offset, footer.sketch_crc32c) {
                report.add(Code::SketchInvalid, structure.clone(), sketch_offset, error.to_string());
            }
        }
        // Footer::decode checked that body, index and filter lie inside the slot.
        let body = &image[..footer.len_body as usize];
        let tail = &image[footer.ofs_index as usize..footer_at];
        report.summary.bytes_verified += body.len() as u64 + tail.len() as u64 + FOOTER_LEN as u64;
        let (index_bytes, filter_bytes) = tail.split_at(footer.len_index as usize);
        let index_entries = match decode_index(index_bytes, slot_offset + u64::from(footer.ofs_index), &footer) {
            Ok(index_entries) => index_entries,
            Err(error) => {
                report.add(
                    Code::IndexInvalid,
                    structure.clone(),
                    slot_offset + u64::from(footer.ofs_index),
                    error.to_string(),
                );
                continue;
            }
        };
        let filter = match Filter::decode(filter_bytes, slot_offset + u64::from(footer.ofs_filter), &footer) {
            Ok(filter) => Some(filter),
            Err(error) => {
                report.add(
                    Code::FilterInvalid,
                    structure.clone(),
                    slot_offset + u64::from(footer.ofs_filter),
                    error.to_string(),
                );
                None
            }
        };
        let mut sub_entries = 0u64;
        let mut blocks_unreadable = false;
        for entry in &index_entries {
            let block_offset = slot_offset + u64::from(entry.ofs_block);
            let range = entry.ofs_block as usize..(entry.ofs_block + entry.len_block) as usize;
            let Some(block) = body.get(range) else {
                report.add(Code::IndexInvalid, structure.clone(), block_offset, "a block lies beyond the body");
                continue;
            };
            report.summary.blocks += 1;
            let decoded = match decode_block(block, block_offset) {
                Ok(decoded) => decoded,
                Err(error @ FormatError::ChecksumMismatch { .. }) => {
                    report.add(Code::BlockChecksum, structure.clone(), block_offset, error.to_string());
                    blocks_unreadable = true;
                    continue;
                }
                Err(error @ FormatError::InvalidField { field: "key", .. }) => {
                    report.add(Code::KeysUnsorted, structure.clone(), block_offset, error.to_string());
                    blocks_unreadable = true;
                    continue;
                }
                Err(error) => {
                    report.add(Code::BlockChecksum, structure.clone(), block_offset, error.to_string());
                    blocks_unreadable = true;
                    continue;
                }
            };
            if let Some(last) = decoded.last() {
                if (last.key, lds_format::chunk::pack_seq_kind(last.sequence, last.kind))
                    != (entry.last_key.as_slice(), entry.last_seq_kind)
                {
                    report.add(
                        Code::IndexInvalid,
                        structure.clone(),
                        block_offset,
                        "the block's last entry is not the one the index names",
                    );
                }
            }
            for found in &decoded {
                if let Some((key, sequence)) = &previous {
                    if (key.as_slice(), std::cmp::Reverse(*sequence)) >= (found.key, std::cmp::Reverse(found.sequence))
                    {
                        report.add(
                            Code::KeysUnsorted,
                            structure.clone(),
                            block_offset,
                            format!(
                                "key {} follows {}",
                                lds_format::error::hex(found.key),
                                lds_format::error::hex(key)
                            ),
                        );
                    }
                }
                if first_key.is_none() {
                    first_key = Some(found.key.to_vec());
                }
                if options.deep {
                    if let Some(filter) = &filter {
                        if !filter.may_contain(found.key) {
                            report.add(
                                Code::FilterFalseNegative,
                                structure.clone(),
                                slot_offset + u64::from(footer.ofs_filter),
                                format!(
                                    "the filter of slot {slot} rejects key {}, which the chunk holds",
                                    lds_format::error::hex(found.key)
                                ),
                            );
                        }
                    }
                }
                values.entry(found.kind, found.key, found.sequence, found.value, (block_offset, &structure), report);
                log_refs.entry(found.kind, found.key, found.sequence, found.value, (block_offset, &structure));
                smallest_seq = smallest_seq.min(found.sequence);
                largest_seq = largest_seq.max(found.sequence);
                previous = Some((found.key.to_vec(), found.sequence));
                sub_entries += 1;
            }
        }
        report.summary.entries += sub_entries;
        entries += sub_entries;
        if !blocks_unreadable && sub_entries != footer.num_entries {
            report.add(
                Code::FooterMismatch,
                structure.clone(),
                footer_offset,
                format!("slot {slot} holds {sub_entries} entries, its footer says {}", footer.num_entries),
            );
        }
        if options.deep && sub_chunk_digest(body, tail, &footer) != footer.digest {
            report.add(
                Code::DigestMismatch,
                structure.clone(),
                slot_offset,
                format!(
                    "the {} digest of slot {slot} does not match its contents",
                    match lds_format::chunk::DigestKind::of_flags(footer.flags) {
                        lds_format::chunk::DigestKind::Blake3 => "blake3",
                        lds_format::chunk::DigestKind::Xxh3 => "xxh3-128",
                    }
                ),
            );
        }
    }
    let blocks_read = report.problems.len() == problems_before;
    log_refs.finish(chunk, blocks_read, (geometry.slot_offset(chunk.chunk_id), &structure), report);
    if !blocks_read {
        return values;
    }
    values.compare(chunk, &structure, geometry.slot_offset(chunk.chunk_id), report);
    let last_key = previous.map(|(key, _)| key);
    if first_key.as_deref() != Some(chunk.smallest_key.as_slice())
        || last_key.as_deref() != Some(chunk.largest_key.as_slice())
    {
        report.add(
            Code::KeyRangeMismatch,
            structure.clone(),
            geometry.slot_offset(chunk.chunk_id),
            format!(
                "holds keys {}..{}, the version says {}..{}",
                first_key.as_deref().map(lds_format::error::hex).unwrap_or_default(),
                last_key.as_deref().map(lds_format::error::hex).unwrap_or_default(),
                lds_format::error::hex(&chunk.smallest_key),
                lds_format::error::hex(&chunk.largest_key)
            ),
        );
    }
    if entries != chunk.num_entries || smallest_seq != chunk.smallest_seq || largest_seq != chunk.largest_seq {
        report.add(
            Code::FooterMismatch,
            structure.clone(),
            geometry.slot_offset(chunk.chunk_id),
            format!(
                "holds {entries} entries with sequences {smallest_seq}..{largest_seq}, the version says {} with {}..{}",
                chunk.num_entries, chunk.smallest_seq, chunk.largest_seq
            ),
        );
    }
    if largest_seq > last_sequence || largest_seq > SEQUENCE_MAX {
        report.add(
            Code::SequenceImplausible,
            structure,
            geometry.slot_offset(chunk.chunk_id),
            format!("holds sequence {largest_seq}, above the version's last sequence {last_sequence}"),
        );
    }
    values
}
