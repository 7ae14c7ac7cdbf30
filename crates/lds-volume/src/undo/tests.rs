//! Undo files written, torn, damaged and applied.

use super::*;

/// A device in memory (writes land at once).
struct Memory(Mutex<Vec<u8>>);

impl ReadAt for Memory {
    fn name(&self) -> &Path {
        Path::new("memory")
    }
    fn len(&self) -> u64 {
        self.0.lock().map_or(0, |bytes| bytes.len() as u64)
    }
    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        let bytes = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        buffer.copy_from_slice(&bytes[offset as usize..offset as usize + buffer.len()]);
        Ok(())
    }
}

impl BlockDevice for Memory {
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        let mut bytes = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        bytes[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn flush(&self) -> Result<(), DeviceError> {
        Ok(())
    }
    fn flush_range(&self, _: u64, _: u64) -> Result<(), DeviceError> {
        Ok(())
    }
}

const UUID: [u8; 16] = [3; 16];
/// Overlapping, unaligned writes: (offset, length, fill).
const WRITES: [(u64, usize, u8); 4] = [(100, 1000, 1), (600, 20, 2), (4096, 512, 3), (1000, 3000, 4)];

fn header() -> UndoHeader {
    UndoHeader { volume_uuid: UUID, device_len: 16384, sector_size: 512, tool: "test".into(), created: 1 }
}

fn original() -> Vec<u8> {
    (0..16384u32).map(|index| (index * 7 % 251) as u8).collect()
}

fn device_of(bytes: &[u8]) -> Memory {
    Memory(Mutex::new(bytes.to_vec()))
}

fn snapshot(device: &Memory) -> Vec<u8> {
    device.0.lock().map(|bytes| bytes.clone()).unwrap_or_default()
}

fn contents(sink: &MemorySink) -> Vec<u8> {
    sink.0.lock().map(|bytes| bytes.clone()).unwrap_or_default()
}

/// A tool's run: the undo file as it stood after each write's batch was synced, and the
/// device after each write.
struct Run {
    files: Vec<Vec<u8>>,
    images: Vec<Vec<u8>>,
    /// The whole file (finished when the run was).
    file: Vec<u8>,
    device: Vec<u8>,
}

impl Run {
    /// Where batch `index` starts.
    fn batch_start(&self, index: usize) -> usize {
        if index == 0 {
            UNDO_REWRITTEN_PREFIX
        } else {
            self.files[index - 1].len()
        }
    }
    /// The device before write `index` was issued.
    fn before(&self, index: usize) -> Vec<u8> {
        if index == 0 {
            original()
        } else {
            self.images[index - 1].clone()
        }
    }
}

fn run(finish: bool) -> Run {
    let memory = Arc::new(device_of(&original()));
    let sink = MemorySink::default();
    let device =
        UndoDevice::new(memory.clone(), UndoLog::with_sink(Box::new(sink.clone()), Path::new("undo"), header()));
    let (mut files, mut images) = (Vec::new(), Vec::new());
    for (offset, len, fill) in WRITES {
        assert!(device.write_at(offset, &vec![fill; len]).is_ok());
        files.push(contents(&sink));
        images.push(snapshot(&memory));
    }
    if finish {
        let finished = device.finish(&[(0, 1024), (4096, 512)]);
        assert!(finished.is_ok(), "{finished:?}");
    }
    Run { files, images, file: contents(&sink), device: snapshot(&memory) }
}

fn parsed(bytes: &[u8]) -> UndoFile {
    match UndoFile::parse(bytes, Path::new("undo")) {
        Ok(file) => file,
        Err(error) => panic!("{error}"),
    }
}

/// Applies `file` to a device holding `image`; the device afterwards.
fn applied(file: &UndoFile, image: &[u8], force: bool) -> Result<Vec<u8>, UndoError> {
    let device = device_of(image);
    undo(file, &device, Some(UUID), force)?;
    Ok(snapshot(&device))
}

#[test]
fn the_header_round_trips_and_cuts_a_long_name_at_a_character() {
    let encoded = header().encode();
    let decoded = UndoHeader::decode(&encoded, Path::new("undo"));
    assert!(matches!(decoded, Ok((ref decoded, None)) if *decoded == header()), "{decoded:?}");
    // A name longer than the field is cut at a character boundary.
    let long = UndoHeader { tool: "é".repeat(40), ..header() };
    let decoded = UndoHeader::decode(&long.encode(), Path::new("undo"));
    assert!(matches!(decoded, Ok((ref decoded, None)) if decoded.tool == "é".repeat(36)), "{decoded:?}");
}

#[test]
fn a_lost_batch_before_the_last_is_damage_not_a_tear() {
    let run = run(false);
    // Batch 2 cut out of a running file: batch 3 now sits where batch 2 should.
    let (start, end) = (run.batch_start(2), run.batch_start(3));
    let mut bytes = run.file[..start].to_vec();
    bytes.extend_from_slice(&run.file[end..]);
    let refused = UndoFile::parse(&bytes, Path::new("undo"));
    assert!(matches!(refused, Err(UndoError::Damaged { .. })), "{refused:?}");
}

#[test]
fn a_torn_last_batch_whose_write_was_issued_is_refused() {
    let run = run(false);
    // The file cut inside its last batch, but the write of that batch issued: it did not
    // tear in a crash (a write is issued only after its batch is synced).
    let last = WRITES.len() - 1;
    let torn = &run.file[..run.files[last].len() - 5];
    let file = parsed(torn);
    assert!(file.torn_tail > 0);
    // Sectors only the torn batch names (the last write's sectors 1536 to 3584).
    assert_eq!(file.torn_originals.keys().copied().collect::<Vec<_>>(), vec![1536, 2048, 2560, 3072, 3584]);
    for image in [run.images[last].clone(), {
        // Only those sectors as the write left them (the others as before it).
        let mut image = run.before(last);
        image[1536..4096].copy_from_slice(&run.images[last][1536..4096]);
        image
    }] {
        let device = device_of(&image);
        let refused = undo(&file, &device, Some(UUID), false);
        assert!(matches!(refused, Err(UndoError::TornBatchWritten { .. } | UndoError::Changed { .. })), "{refused:?}");
        assert_eq!(snapshot(&device), image, "a refused undo wrote");
    }
    let mut image = run.before(last);
    image[1536..4096].copy_from_slice(&run.images[last][1536..4096]);
    let refused = undo(&file, &device_of(&image), Some(UUID), false);
    assert!(matches!(refused, Err(UndoError::TornBatchWritten { offset: 1536, .. })), "{refused:?}");
    // The crash it looks like: the write not issued; then the file restores.
    let restored = applied(&file, &run.before(last), false);
    assert!(matches!(restored, Ok(ref bytes) if *bytes == original()), "{:?}", restored.err());
}

#[test]
fn a_write_leaving_a_sector_as_it_was_does_not_hide_later_writes() {
    let memory = Arc::new(device_of(&original()));
    let sink = MemorySink::default();
    let device =
        UndoDevice::new(memory.clone(), UndoLog::with_sink(Box::new(sink.clone()), Path::new("undo"), header()));
    // The first sector written with what it holds, then another changed.
    assert!(device.write_at(0, &original()[..512]).is_ok());
    assert!(device.write_at(1024, &[9u8; 512]).is_ok());
    assert!(device.finish(&[(0, 2048)]).is_ok());
    let file = parsed(&contents(&sink));
    // Written since the tool finished, in the recorded regions.
    assert!(memory.write_at(1600, b"later").is_ok());
    let refused = undo(&file, memory.as_ref(), Some(UUID), false);
    assert!(matches!(refused, Err(UndoError::WrittenSince { .. })), "{refused:?}");
}

#[test]
fn a_finished_file_round_trips_and_undo_can_run_again() {
    let run = run(true);
    assert_ne!(run.device, original());
    let file = parsed(&run.file);
    assert_eq!(file.header, header());
    assert!(file.finished && file.damage.is_empty() && file.torn_tail == 0);
    assert_eq!(file.batches, WRITES.len() as u64 + 1);
    assert!(matches!(file.final_state, Some(FinalState { ref regions, .. }) if regions.len() == 2));
    assert_eq!(file.ranges(), vec![(0, 4608)]);
    let device = device_of(&run.device);
    let outcome = undo(&file, &device, Some(UUID), false);
    assert!(matches!(outcome, Ok(UndoOutcome { sectors: 9, bytes: 4608, unchanged: 0 })), "{outcome:?}");
    assert!(snapshot(&device) == original());
    let again = undo(&file, &device, Some(UUID), false);
    assert!(matches!(again, Ok(UndoOutcome { sectors: 0, unchanged: 9, .. })), "{again:?}");
    assert!(snapshot(&device) == original());
}

#[test]
fn every_truncation_of_a_finished_file_is_refused() {
    let run = run(true);
    for len in 0..run.file.len() {
        let cut = UndoFile::parse(&run.file[..len], Path::new("undo"));
        assert!(matches!(cut, Err(UndoError::Damaged { .. })), "cut at {len}: {cut:?}");
    }
    let mut longer = run.file.clone();
    longer.push(0);
    assert!(matches!(UndoFile::parse(&longer, Path::new("undo")), Err(UndoError::Damaged { .. })));
    let cut = UndoFile::parse(&run.file[..run.file.len() - 1], Path::new("undo"));
    assert!(
        matches!(cut, Err(UndoError::Damaged { ref reason, .. }) if reason.contains("state block says")),
        "{cut:?}"
    );
}

#[test]
fn every_byte_flip_of_a_finished_file_is_refused() {
    let run = run(true);
    for at in 0..run.file.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut damaged = run.file.clone();
            damaged[at] ^= flip;
            let parsed = UndoFile::parse(&damaged, Path::new("undo"));
            assert!(parsed.is_err(), "byte {at} ^ {flip:#x} was not noticed");
        }
    }
}

#[test]
fn a_file_torn_inside_its_last_batch_restores_what_was_recorded() {
    let run = run(false);
    for (index, whole) in run.files.iter().enumerate() {
        let start = run.batch_start(index);
        let before = run.before(index);
        let earlier = if index == 0 { 0 } else { parsed(&run.files[index - 1]).records };
        // Cut anywhere inside the batch, or its bytes never landed (zeros) though the
        // file grew: the write it describes was never issued.
        let mut torn: Vec<Vec<u8>> = (start..whole.len()).map(|len| whole[..len].to_vec()).collect();
        for zeroed_from in [start, start + 8, start + BATCH_HEADER_LEN, whole.len() - 1] {
            let mut zeroed = whole.clone();
            zeroed[zeroed_from..].fill(0);
            torn.push(zeroed);
        }
        for bytes in torn {
            let file = parsed(&bytes);
            assert!(!file.finished);
            assert_eq!(file.torn_tail, (bytes.len() - start) as u64, "batch {index}, {} bytes", bytes.len());
            assert_eq!(file.records, earlier);
            let restored = applied(&file, &before, false);
            assert!(restored.is_ok_and(|restored| restored == original()), "batch {index}, {} bytes", bytes.len());
        }
        // The whole batch: its write may have been issued, and is undone too.
        let file = parsed(whole);
        assert_eq!(file.torn_tail, 0);
        assert!(applied(&file, &run.images[index], false).is_ok_and(|restored| restored == original()));
    }
}

#[test]
fn a_flip_before_the_last_batch_of_an_unfinished_file_is_refused() {
    let run = run(false);
    let last = run.batch_start(WRITES.len() - 1);
    for at in 0..run.file.len() {
        let mut damaged = run.file.clone();
        damaged[at] ^= 0x01;
        let parsed = UndoFile::parse(&damaged, Path::new("undo"));
        if at < last {
            assert!(parsed.is_err(), "byte {at} was not noticed");
        } else {
            // Inside the last batch, damage looks like a tear: that batch is left out.
            assert!(
                parsed.as_ref().is_ok_and(|file| file.torn_tail == (run.file.len() - last) as u64),
                "byte {at}: {parsed:?}"
            );
        }
    }
}

#[test]
fn a_zero_uuid_is_refused_by_the_writer_and_by_undo() {
    let memory = Arc::new(device_of(&original()));
    let sink = MemorySink::default();
    let nameless = UndoHeader { volume_uuid: [0; 16], ..header() };
    let device = UndoDevice::new(memory.clone(), UndoLog::with_sink(Box::new(sink.clone()), Path::new("u"), nameless));
    let refused = device.write_at(0, &[9; 512]);
    assert!(refused.is_err());
    assert!(snapshot(&memory) == original(), "the write was issued without its undo record");
    assert!(contents(&sink).is_empty());

    // A file written with no uuid (as an older or foreign writer might): refused unless
    // forced.
    let sink = MemorySink::default();
    let mut log =
        UndoLog::with_sink(Box::new(sink.clone()), Path::new("u"), UndoHeader { volume_uuid: [0; 16], ..header() });
    log.header.volume_uuid = UUID;
    let device = device_of(&original());
    assert!(log.before_write(&device, 0, &[9; 512]).is_ok());
    assert!(device.write_at(0, &[9; 512]).is_ok());
    let mut bytes = contents(&sink);
    let mut nameless = header();
    nameless.volume_uuid = [0; 16];
    bytes[..HEADER_LEN].copy_from_slice(&nameless.encode());
    // Rechain the one batch from the new header, as a writer of that header would have.
    let chain = *blake3::hash(&bytes[..HEADER_LEN]).as_bytes();
    let records = bytes[UNDO_REWRITTEN_PREFIX + BATCH_HEADER_LEN..].to_vec();
    let stored = chain_digest(&chain, &bytes[UNDO_REWRITTEN_PREFIX..], &records);
    let at = UNDO_REWRITTEN_PREFIX + BATCH_DIGEST_AT;
    bytes[at..at + 32].copy_from_slice(&stored);
    let crc = crc32c(&bytes[UNDO_REWRITTEN_PREFIX..UNDO_REWRITTEN_PREFIX + BATCH_HEADER_LEN - 4]);
    bytes[UNDO_REWRITTEN_PREFIX + BATCH_HEADER_LEN - 4..UNDO_REWRITTEN_PREFIX + BATCH_HEADER_LEN]
        .copy_from_slice(&crc.to_le_bytes());
    let file = parsed(&bytes);
    assert_eq!(file.header.volume_uuid, [0; 16]);
    let image = snapshot(&device);
    let refused = undo(&file, &device, Some(UUID), false);
    assert!(matches!(refused, Err(UndoError::NoUuid { .. })), "{refused:?}");
    assert!(snapshot(&device) == image);
    assert!(undo(&file, &device, Some(UUID), true).is_ok());
    assert!(snapshot(&device) == original());
}

#[test]
fn a_device_with_another_or_no_uuid_is_refused() {
    let run = run(true);
    let file = parsed(&run.file);
    for uuid in [Some([9; 16]), None] {
        let device = device_of(&run.device);
        let refused = undo(&file, &device, uuid, false);
        assert!(matches!(refused, Err(UndoError::OtherVolume { .. })), "{refused:?}");
        assert!(snapshot(&device) == run.device);
    }
    let shorter = device_of(&run.device[..4096]);
    let refused = undo(&file, &shorter, Some(UUID), false);
    assert!(matches!(refused, Err(UndoError::OtherVolume { .. })), "{refused:?}");
    // Forced, a saved sector past the device's end is still refused before any write.
    let refused = undo(&file, &shorter, Some(UUID), true);
    assert!(matches!(refused, Err(UndoError::BeyondDevice { offset: 4096, .. })), "{refused:?}");
    assert!(snapshot(&shorter) == run.device[..4096]);
}

#[test]
fn an_oversized_region_is_refused_before_anything_is_allocated() {
    const HUGE: u64 = 1 << 40;
    // The writer: finish refuses it (reading it whole would allocate 1 TiB).
    let memory = Arc::new(device_of(&original()));
    let sink = MemorySink::default();
    let device = UndoDevice::new(memory.clone(), UndoLog::with_sink(Box::new(sink), Path::new("u"), header()));
    assert!(device.write_at(0, &[1; 512]).is_ok());
    let refused = device.finish(&[(0, HUGE)]);
    assert!(matches!(refused, Err(UndoError::BeyondDevice { len: HUGE, .. })), "{refused:?}");
    let refused = device.finish(&[(u64::MAX, 2)]);
    assert!(matches!(refused, Err(UndoError::BeyondDevice { .. })), "{refused:?}");

    // A file whose final record names it (a writer that did not check): refused when read.
    let sink = MemorySink::default();
    let mut log = UndoLog::with_sink(Box::new(sink.clone()), Path::new("u"), header());
    let device = device_of(&original());
    assert!(log.before_write(&device, 0, &[1; 512]).is_ok());
    let mut payload = 1u32.to_le_bytes().to_vec();
    payload.extend_from_slice(&0u64.to_le_bytes());
    payload.extend_from_slice(&HUGE.to_le_bytes());
    payload.extend_from_slice(&[0; 32]);
    let mut records = Vec::new();
    record(RECORD_FINAL, 0, payload.len() as u32, &payload, &mut records);
    assert!(log.append_batch(&records, 1).is_ok());
    let refused = UndoFile::parse(&contents(&sink), Path::new("u"));
    assert!(
        matches!(refused, Err(UndoError::Damaged { ref reason, .. }) if reason.contains("past the device's end")),
        "{refused:?}"
    );

    // And `undo`, given such a final state: refused before reading it.
    let run = run(true);
    let mut file = parsed(&run.file);
    file.final_state = Some(FinalState { regions: vec![(0, HUGE)], digest: [0; 32] });
    let device = device_of(&run.device);
    let refused = undo(&file, &device, Some(UUID), false);
    assert!(matches!(refused, Err(UndoError::BeyondDevice { len: HUGE, .. })), "{refused:?}");
    assert!(snapshot(&device) == run.device);
}

#[test]
fn forced_a_damaged_file_restores_only_the_records_that_verify() {
    let run = run(true);
    // Sector 1024's original is the fifth record of the first batch.
    let first = UNDO_REWRITTEN_PREFIX + BATCH_HEADER_LEN;
    let original_record = RECORD_HEADER_LEN + 512 + 4;
    let written_record = RECORD_HEADER_LEN + DIGEST_LEN + 4;
    let at = first + 2 * (original_record + written_record) + RECORD_HEADER_LEN + 7;
    assert_eq!(u64_at(&run.file, at - 7 - 8), 1024);
    let mut damaged = run.file.clone();
    damaged[at] ^= 0x01;
    assert!(matches!(UndoFile::parse(&damaged, Path::new("u")), Err(UndoError::Damaged { .. })));
    let Ok(file) = UndoFile::parse_salvaging(&damaged, Path::new("u")) else { panic!("salvages") };
    assert!(!file.damage.is_empty());
    assert!(!file.originals.contains_key(&1024));
    assert_eq!(file.unrestorable(), vec![1024]);
    let refused = applied(&file, &run.device, false);
    assert!(matches!(refused, Err(UndoError::Damaged { .. })), "{refused:?}");
    let Ok(forced) = applied(&file, &run.device, true) else { panic!("forced") };
    let mut expected = original();
    expected[1024..1536].copy_from_slice(&run.device[1024..1536]);
    assert!(forced == expected);
}

#[test]
fn a_failed_append_closes_the_log() {
    struct Failing(u32);
    impl UndoSink for Failing {
        fn append(&mut self, _: &[u8]) -> std::io::Result<()> {
            self.0 += 1;
            if self.0 == 2 {
                return Err(std::io::Error::other("disk full"));
            }
            Ok(())
        }
        fn overwrite(&mut self, _: u64, _: &[u8]) -> std::io::Result<()> {
            Ok(())
        }
        fn sync(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let device = device_of(&original());
    let mut log = UndoLog::with_sink(Box::new(Failing(0)), Path::new("u"), header());
    assert!(matches!(log.before_write(&device, 0, &[1; 10]), Err(UndoError::File { .. })));
    // The failed batch may sit half-written in the file: nothing may follow it.
    assert!(matches!(log.before_write(&device, 0, &[1; 10]), Err(UndoError::Closed { .. })));
    assert!(matches!(log.finish(&device, &[]), Err(UndoError::Closed { .. })));
}

#[test]
fn a_version_1_file_is_read_only_to_be_forced() {
    // LDSUNDO1: header, then records with no batches (docs/undo-file.md, history).
    let mut bytes = UNDO_MAGIC_V1.to_vec();
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&512u32.to_le_bytes());
    bytes.extend_from_slice(&16384u64.to_le_bytes());
    bytes.extend_from_slice(&UUID);
    bytes.extend_from_slice(&1u64.to_le_bytes());
    bytes.extend_from_slice(&4u16.to_le_bytes());
    bytes.extend_from_slice(b"test");
    let crc = crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    let image = original();
    record(RECORD_ORIGINAL, 512, 512, &image[512..1024], &mut bytes);
    let mut written = image.clone();
    written[512..1024].fill(7);
    record(RECORD_WRITTEN, 512, 512, &digest(&written[512..1024]), &mut bytes);
    let refused = UndoFile::parse(&bytes, Path::new("u"));
    assert!(matches!(refused, Err(UndoError::Damaged { ref reason, .. }) if reason.contains("LDSUNDO1")));
    let Ok(file) = UndoFile::parse_salvaging(&bytes, Path::new("u")) else { panic!("salvages") };
    assert_eq!((file.version, file.records), (1, 2));
    assert!(applied(&file, &written, true).is_ok_and(|restored| restored == original()));
}

#[test]
fn a_volume_changed_since_is_refused_and_left_alone() {
    let run = run(false);
    let file = parsed(&run.file);
    let device = device_of(&run.device);
    assert!(device.write_at(700, b"someone else").is_ok());
    let before = snapshot(&device);
    let refused = undo(&file, &device, Some(UUID), false);
    assert!(matches!(refused, Err(UndoError::Changed { offset: 512, .. })), "{refused:?}");
    assert!(snapshot(&device) == before);
    // A crash during undo: one sector restored, the others not.
    let device = device_of(&run.device);
    assert!(device.write_at(0, &original()[..512]).is_ok());
    assert!(matches!(file.first_changed_sector(&device), Ok(None)));
    assert!(applied(&file, &snapshot(&device), false).is_ok_and(|restored| restored == original()));
}
