//! Pass 4: every chunk the trees reference (SPEC.md §8): footers against the version,
//! indexes, filters and every block's checksum, key order and ranges, sequence numbers, the
//! level rules (disjoint levels, one odd chunk each); with `deep`, each sub-chunk's digest and
//! every key against its filter; every log reference (`pass_logrefs`).

use lds_format::algorithms::recovery::VersionLogState;
use lds_format::chunk::block::visit_block;
use lds_format::chunk::filter::Filter;
use lds_format::chunk::footer::{sub_chunk_digest, Footer, FOOTER_LEN};
use lds_format::chunk::index::decode_index;
use lds_format::entry::SEQUENCE_MAX;
use lds_format::geometry::Geometry;
use lds_format::label::Label;
use lds_format::version::meta::ChunkMeta;
use lds_format::FormatError;
use lds_volume::block::read_tolerant_into;
use lds_volume::{AlignedBuffer, DeviceError, ReadAt};

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
        let pending = version.unlisted_value_chunks(tree.replayed_pointers.iter().map(|pointed| &pointed.pointer));
        let mut checked = ValueChunks::check(device, label, instance, version, &pending, options.deep, report)?;
        let structure = format!("backup log of instance {instance}");
        checked.check_pointers(device, &tree.replayed_pointers, &structure, options.deep, report)?;
        value_chunks = Some(checked);
    }
    // Log chunks (SPEC.md §8.9): the references resolve against the area recovery read.
    let log =
        tree.backup_area.as_deref().map(|backup_area| LogCheck { backup_area, log_tables: label.has_log_tables() });
    if let Some(log) = &log {
        let retained = version.retained_bytes(log.backup_area.len() as u64);
        report.summary.log_retained.push((instance, retained));
    }
    let mut pointers = |chunk: &ChunkMeta, values: ChunkValues, report: &mut Report| -> Result<(), CheckError> {
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
    // A reader thread fetches whole slots in slot order into reused page-aligned buffers
    // (around the page cache on a raw block device, `ReadAt::read_bulk`), so the device sees
    // one sequential read per slot; checkers on the other cores verify whole chunks, each
    // into a report of its own, which this thread merges in chunk order, so the report reads
    // as a single pass would write it. A small tree is checked inline: threads cost more
    // than they save there (the crash simulator checks thousands of tiny volumes).
    let slot_len = geometry.slot_size as usize;
    let read_chunk = |chunk: &ChunkMeta, buffers: &mut dyn FnMut() -> Option<AlignedBuffer>| -> Option<ChunkRead> {
        let mut images = Vec::new();
        for slot in chunk.slots().filter(|&slot| slot < geometry.num_slots) {
            let mut buffer = buffers()?;
            let read = read_tolerant_into(device, geometry.slot_offset(slot), &mut buffer, geometry.sector());
            images.push((buffer, read));
        }
        Some(images)
    };
    // Sectors that cannot be read are zeros (their blocks fail their checksums), reported.
    let verify = |chunk: &ChunkMeta, read: &mut ChunkRead, report: &mut Report| -> Result<ChunkValues, CheckError> {
        for (_, result) in read.iter_mut() {
            let unreadable = std::mem::replace(result, Ok(Vec::new()))?;
            let structure = format!("chunk {} of instance {instance}", chunk.chunk_id);
            crate::pass_logs::report_unreadable(&unreadable, &structure, report);
        }
        let images: Vec<&[u8]> = read.iter().map(|(buffer, _)| &buffer[..]).collect();
        Ok(check_chunk(&images, geometry, instance, chunk, version.last_sequence, options, log, report))
    };
    // A core is left to the reader (and the kernel threads completing its reads): on two
    // cores one checker keeps up with the device and two slow the reads down.
    let checkers = match options.checkers {
        0 => std::thread::available_parallelism().map_or(1, usize::from).saturating_sub(1).clamp(1, CHECKERS_MAX),
        checkers => checkers,
    };
    if chunks.len() <= INLINE_CHUNKS_MAX {
        let mut spare: Vec<AlignedBuffer> = Vec::new();
        for chunk in chunks {
            let mut read = read_chunk(chunk, &mut || Some(spare.pop().unwrap_or_else(|| AlignedBuffer::new(slot_len))))
                .ok_or(CheckError::ReaderStopped)?;
            let values = verify(chunk, &mut read, report)?;
            pointers(chunk, values, report)?;
            progress(chunk.len_data);
            spare.extend(read.into_iter().map(|(buffer, _)| buffer));
        }
        return Ok(());
    }
    // At most this many slot buffers exist at once (enough for the largest chunk).
    let most_slots = chunks.iter().map(|chunk| chunk.sub_chunks.len()).max().unwrap_or(1);
    let buffers_max = (2 * checkers + 2).max(most_slots);
    let (free_sender, free) = std::sync::mpsc::channel::<AlignedBuffer>();
    let (work_sender, work) = std::sync::mpsc::sync_channel::<(usize, ChunkRead)>(checkers);
    // The checkers alone hold the work queue: once they stop, the reader's next send fails.
    let work = std::sync::Arc::new(std::sync::Mutex::new(work));
    let (done_sender, done) = std::sync::mpsc::channel::<Checked>();
    std::thread::scope(|scope| -> Result<(), CheckError> {
        // Dropped when this closure returns, early or not: the reader waiting for a buffer
        // and the checkers sending a result then stop, and with the checkers the reader
        // waiting to hand over a chunk.
        let (free_sender, done) = (free_sender, done);
        let reader_chunks = chunks.clone();
        scope.spawn(move || {
            let mut made = 0;
            let mut buffers = || {
                free.try_recv().ok().or_else(|| {
                    if made < buffers_max {
                        made += 1;
                        return Some(AlignedBuffer::new(slot_len));
                    }
                    free.recv().ok()
                })
            };
            for (index, chunk) in reader_chunks.into_iter().enumerate() {
                let Some(read) = read_chunk(chunk, &mut buffers) else { return };
                if work_sender.send((index, read)).is_err() {
                    return;
                }
            }
        });
        for _ in 0..checkers {
            let (work, done_sender, chunks, verify) = (work.clone(), done_sender.clone(), &chunks, &verify);
            scope.spawn(move || loop {
                let next = work.lock().map_or(None, |work| work.recv().ok());
                let Some((index, mut read)) = next else { return };
                let mut local = Report::default();
                // A panic goes to the caller with the chunk's place in the order, where it
                // resumes: a checker that died silently would leave the merge waiting.
                let values = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    verify(chunks[index], &mut read, &mut local)
                }));
                if done_sender.send((index, local, values, read)).is_err() {
                    return;
                }
            });
        }
        drop((work, done_sender));
        let mut waiting = std::collections::BTreeMap::new();
        for (next, chunk) in chunks.iter().enumerate() {
            let (local, values, read) = loop {
                if let Some(checked) = waiting.remove(&next) {
                    break checked;
                }
                let (index, local, values, read) = done.recv().map_err(|_| CheckError::ReaderStopped)?;
                waiting.insert(index, (local, values, read));
            };
            report.absorb(local);
            let values = values.unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
            pointers(chunk, values, report)?;
            progress(chunk.len_data);
            for (buffer, _) in read {
                // The reader may have finished: its buffers are no longer wanted.
                let _ = free_sender.send(buffer);
            }
        }
        Ok(())
    })
}

/// The slots of a chunk: each slot's buffer and the offsets of its sectors that cannot be
/// read (zeros in the buffer), or why none of it can.
type ChunkRead = Vec<(AlignedBuffer, Result<Vec<u64>, DeviceError>)>;

/// A checked chunk: its index in the tree's list, its report, its values (or the checker's
/// panic), its buffers.
type Checked = (usize, Report, std::thread::Result<Result<ChunkValues, CheckError>>, ChunkRead);

/// Checking threads at most, unless `CheckOptions::checkers` says otherwise.
const CHECKERS_MAX: usize = 4;

/// Trees of at most this many chunks are read without a reader thread.
const INLINE_CHUNKS_MAX: usize = 16;

/// Checks one chunk: every sub-chunk's footer, index, filter and blocks, its key order and
/// range, its log references (resolved when `log` gives the backup log area), and with
/// `deep` its digest and filter.
#[expect(clippy::too_many_arguments, reason = "the chunk, its context and the report, as both entry points pass them")]
pub(crate) fn check_chunk(
    images: &[impl AsRef<[u8]>],
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
    let mut previous: Option<(&[u8], u64)> = None;
    let mut first_key: Option<&[u8]> = None;
    let mut entries = 0u64;
    let (mut smallest_seq, mut largest_seq) = (u64::MAX, 0u64);
    // One block's entries at a time, the vector reused.
    let mut decoded = Vec::new();
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
        let Some(image) = images.get(index).map(AsRef::as_ref) else { return values };
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
            decoded.clear();
            match visit_block(block, block_offset, |entry| decoded.push(entry)) {
                Ok(_) => {}
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
                if (last.key, lds_format::entry::pack_seq_kind(last.sequence, last.kind))
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
                    if (*key, std::cmp::Reverse(*sequence)) >= (found.key, std::cmp::Reverse(found.sequence)) {
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
                    first_key = Some(found.key);
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
                previous = Some((found.key, found.sequence));
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
                    match lds_format::digest::DigestKind::of_flags(footer.flags) {
                        lds_format::digest::DigestKind::Blake3 => "blake3",
                        lds_format::digest::DigestKind::Xxh3 => "xxh3-128",
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
    if first_key != Some(chunk.smallest_key.as_slice()) || last_key != Some(chunk.largest_key.as_slice()) {
        report.add(
            Code::KeyRangeMismatch,
            structure.clone(),
            geometry.slot_offset(chunk.chunk_id),
            format!(
                "holds keys {}..{}, the version says {}..{}",
                first_key.map(lds_format::error::hex).unwrap_or_default(),
                last_key.map(lds_format::error::hex).unwrap_or_default(),
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
