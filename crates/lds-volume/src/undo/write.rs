//! Writing an undo file as a tool writes to a volume: the records of each write, batched,
//! chained and made durable before the write is issued; the final state once the tool ends.

use super::*;

/// Writes an undo file as a tool writes to a volume.
pub struct UndoLog {
    sink: Box<dyn UndoSink>,
    name: PathBuf,
    pub(super) header: UndoHeader,
    started: bool,
    /// Why no more records may be appended, once that is so.
    closed: Option<&'static str>,
    saved: HashSet<u64>,
    written_bytes: u64,
    batches: u64,
    records: u64,
    chain: [u8; 32],
}

impl UndoLog {
    /// An undo log that creates the file `path` at its first record (a run that writes
    /// nothing leaves no file). Fails when the file exists already.
    pub fn create(path: &Path, header: UndoHeader) -> Result<Self, UndoError> {
        if path.exists() {
            return Err(UndoError::Exists { path: path.to_path_buf() });
        }
        Ok(Self::with_sink(Box::new(LazyFile { path: path.to_path_buf(), file: None }), path, header))
    }

    /// An undo log into `sink` (named `name` in errors).
    pub fn with_sink(sink: Box<dyn UndoSink>, name: &Path, header: UndoHeader) -> Self {
        Self {
            sink,
            name: name.to_path_buf(),
            header,
            started: false,
            closed: None,
            saved: HashSet::new(),
            written_bytes: 0,
            batches: 0,
            records: 0,
            chain: [0; 32],
        }
    }

    /// Bytes of the undo file so far.
    pub fn len(&self) -> u64 {
        self.written_bytes
    }

    /// Batches made durable so far: 0 means no write was ever issued through the log, so
    /// the file (if any: a header a full disk cut short) restores nothing.
    pub fn batches(&self) -> u64 {
        self.batches
    }

    /// True before the first record.
    pub fn is_empty(&self) -> bool {
        !self.started
    }

    /// The path (or name) of the undo file.
    pub fn path(&self) -> &Path {
        &self.name
    }

    fn file_error(&self, source: std::io::Error) -> UndoError {
        UndoError::File { path: self.name.clone(), source }
    }

    /// Appends and syncs `bytes`; after a failure the log is closed, because bytes of the
    /// failed append may sit in the file and nothing appended after them could be read back.
    fn append_synced(&mut self, bytes: &[u8]) -> Result<(), UndoError> {
        let result = self.sink.append(bytes).and_then(|()| self.sink.sync());
        if let Err(source) = result {
            self.closed = Some("an earlier append to the undo file failed");
            return Err(self.file_error(source));
        }
        self.written_bytes += bytes.len() as u64;
        Ok(())
    }

    /// Writes the header and the running state block, synced, before the first batch: a
    /// crash while creating the file leaves it shorter than both, and the volume unwritten.
    fn start(&mut self) -> Result<(), UndoError> {
        // An undo file must name the volume it restores (`undo` refuses one that does not),
        // and split at a sector size a volume can have.
        let refused = if self.header.volume_uuid == [0; 16] {
            Some("its header would name no volume (the volume uuid is zero)")
        } else if !sector_size_valid(self.header.sector_size) {
            Some("its header's sector size is not one a volume can have")
        } else {
            None
        };
        if let Some(reason) = refused {
            self.closed = Some(reason);
            return Err(UndoError::Closed { path: self.name.clone(), reason });
        }
        let header = self.header.encode();
        let mut start = header.to_vec();
        start.extend_from_slice(&encode_state(State::Running));
        self.append_synced(&start)?;
        self.chain = *blake3::hash(&header).as_bytes();
        self.started = true;
        Ok(())
    }

    /// Appends one batch of `count` records, synced.
    pub(super) fn append_batch(&mut self, records: &[u8], count: u32) -> Result<(), UndoError> {
        let mut batch = Vec::with_capacity(BATCH_HEADER_LEN + records.len());
        batch.extend_from_slice(&BATCH_MAGIC);
        batch.extend_from_slice(&count.to_le_bytes());
        batch.extend_from_slice(&self.batches.to_le_bytes());
        batch.extend_from_slice(&(records.len() as u64).to_le_bytes());
        let chain = chain_digest(&self.chain, &batch, records);
        batch.extend_from_slice(&chain);
        let crc = crc32c(&batch);
        batch.extend_from_slice(&crc.to_le_bytes());
        batch.extend_from_slice(records);
        self.append_synced(&batch)?;
        self.chain = chain;
        self.batches += 1;
        self.records += u64::from(count);
        Ok(())
    }

    /// Records what a write of `bytes` at `offset` to `device` changes, and makes it durable:
    /// call before issuing the write.
    pub fn before_write(&mut self, device: &dyn BlockDevice, offset: u64, bytes: &[u8]) -> Result<(), UndoError> {
        if bytes.is_empty() {
            return Ok(());
        }
        if let Some(reason) = self.closed {
            return Err(UndoError::Closed { path: self.name.clone(), reason });
        }
        if !self.started {
            self.start()?;
        }
        let sector = u64::from(self.header.sector_size);
        let end = offset + bytes.len() as u64;
        let mut at = offset;
        let mut records = Vec::new();
        let mut count = 0u32;
        let mut newly_saved = Vec::new();
        // One record (two the first time) per sector the write touches: the sector as it will
        // be once the write lands on what is there now. All of them form one batch.
        while at < end {
            let sector_start = at / sector * sector;
            let piece_end = (sector_start + sector).min(end);
            let len = sector.min(device.len().saturating_sub(sector_start));
            let mut content = device.read_vec(sector_start, len)?;
            if !self.saved.contains(&sector_start) && !newly_saved.contains(&sector_start) {
                record(RECORD_ORIGINAL, sector_start, len as u32, &content, &mut records);
                newly_saved.push(sector_start);
                count += 1;
            }
            let from = (at - sector_start) as usize;
            let to = ((piece_end - sector_start) as usize).min(content.len());
            content[from..to].copy_from_slice(&bytes[(at - offset) as usize..(at - offset) as usize + (to - from)]);
            record(RECORD_WRITTEN, sector_start, len as u32, &digest(&content), &mut records);
            count += 1;
            at = piece_end;
        }
        self.append_batch(&records, count)?;
        // Saved only once durable: a write refused here saves nothing.
        self.saved.extend(newly_saved);
        Ok(())
    }

    /// Records the digest of `regions` of `device` as the tool leaves them (its last batch),
    /// then marks the file finished in its state block: `undo` then refuses a volume whose
    /// regions changed since, and a file that does not verify to its end. Does nothing when
    /// the tool wrote nothing.
    pub fn finish(&mut self, device: &dyn BlockDevice, regions: &[(u64, u64)]) -> Result<(), UndoError> {
        if !self.started {
            return Ok(());
        }
        if let Some(reason) = self.closed {
            return Err(UndoError::Closed { path: self.name.clone(), reason });
        }
        let mut payload = Vec::new();
        payload.extend_from_slice(&(regions.len() as u32).to_le_bytes());
        for &(offset, len) in regions {
            payload.extend_from_slice(&offset.to_le_bytes());
            payload.extend_from_slice(&len.to_le_bytes());
        }
        payload.extend_from_slice(&regions_digest(device, regions)?);
        let mut records = Vec::new();
        record(RECORD_FINAL, 0, payload.len() as u32, &payload, &mut records);
        self.append_batch(&records, 1)?;
        let state = State::Finished {
            len: self.written_bytes,
            batches: self.batches,
            records: self.records,
            digest: self.chain,
        };
        // One write inside the file's first sector, then a sync: the state block is either
        // still "running" (the file then verifies as a tool's that did not finish: every batch
        // whole) or "finished".
        self.closed = Some("the tool finished");
        let result = self.sink.overwrite(STATE_AT as u64, &encode_state(state)).and_then(|()| self.sink.sync());
        result.map_err(|source| self.file_error(source))
    }
}

/// The blake3 digest of `regions` of `device`, read in pieces of at most `REGION_PIECE`
/// bytes; every region is checked to lie on the device before anything is read.
pub(super) fn regions_digest(device: &dyn BlockDevice, regions: &[(u64, u64)]) -> Result<[u8; 32], UndoError> {
    for &(offset, len) in regions {
        if offset.checked_add(len).is_none_or(|end| end > device.len()) {
            return Err(UndoError::BeyondDevice {
                path: device.name().to_path_buf(),
                what: "final region",
                offset,
                len,
                device_len: device.len(),
            });
        }
    }
    let mut hasher = blake3::Hasher::new();
    for &(offset, len) in regions {
        let mut at = offset;
        // Bounded: each piece advances `at` by at least one byte toward `offset + len`.
        while at < offset + len {
            let piece = REGION_PIECE.min(offset + len - at);
            hasher.update(&device.read_vec(at, piece)?);
            at += piece;
        }
    }
    Ok(*hasher.finalize().as_bytes())
}

/// A file created at the first append, with its directory synced so that it survives a crash.
struct LazyFile {
    path: PathBuf,
    file: Option<std::fs::File>,
}

impl UndoSink for LazyFile {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if self.file.is_none() {
            let file = std::fs::OpenOptions::new().write(true).create_new(true).open(&self.path)?;
            // Ours from here on (`discard` may remove it), even if syncing its directory fails.
            self.file = Some(file);
            let directory = match self.path.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
                _ => PathBuf::from("."),
            };
            std::fs::File::open(directory)?.sync_all()?;
        }
        match &mut self.file {
            Some(file) => file.write_all(bytes),
            None => Ok(()),
        }
    }
    fn overwrite(&mut self, offset: u64, bytes: &[u8]) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        match &self.file {
            // A positioned write: the append position (the file's cursor) does not move.
            Some(file) => file.write_all_at(bytes, offset),
            None => Err(std::io::Error::other("the undo file was never created")),
        }
    }
    fn sync(&mut self) -> std::io::Result<()> {
        match &mut self.file {
            Some(file) => file.sync_data(),
            None => Ok(()),
        }
    }
    fn discard(&mut self) -> std::io::Result<bool> {
        // Only a file this sink created (create_new): never one that was there before.
        if self.file.take().is_none() {
            return Ok(false);
        }
        std::fs::remove_file(&self.path)?;
        Ok(true)
    }
}

/// A device whose every write is first recorded in an undo log.
pub struct UndoDevice {
    inner: Arc<dyn BlockDevice>,
    log: Mutex<UndoLog>,
}

impl UndoDevice {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn BlockDevice>, log: UndoLog) -> Self {
        Self { inner, log: Mutex::new(log) }
    }

    /// Records the final state of `regions` (see [`UndoLog::finish`]).
    pub fn finish(&self, regions: &[(u64, u64)]) -> Result<(), UndoError> {
        let mut log = self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        log.finish(self.inner.as_ref(), regions)
    }

    /// Removes the undo file when no write was ever issued through this device (no batch is
    /// durable: the file, if the first append left one, restores nothing), and says whether
    /// it did; a file that holds a batch is kept, whatever happened since.
    pub fn discard_if_unused(&self) -> bool {
        let mut log = self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if log.batches() > 0 {
            return false;
        }
        // Nothing more may go into it once it is gone.
        log.closed = Some("the undo file was discarded: no write had been issued through it");
        log.sink.discard().unwrap_or(false)
    }

    /// The undo log's path and its length so far (0: nothing was written).
    pub fn undo_file(&self) -> (PathBuf, u64) {
        let log = self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (log.path().to_path_buf(), log.len())
    }
}

impl ReadAt for UndoDevice {
    fn name(&self) -> &Path {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        self.inner.read_at(offset, buffer)
    }
    // The volume's devices are the wrapped volume's. Labels of the other devices only repeat
    // the first device's table entry by entry; their writes are not in the undo file
    // (docs/undo-file.md).
    fn member(&self, index: usize) -> Option<&dyn ReadAt> {
        self.inner.member(index)
    }
}

impl BlockDevice for UndoDevice {
    fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        let mut log = self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        log.before_write(self.inner.as_ref(), offset, bytes).map_err(|error| DeviceError::Write {
            path: self.inner.name().to_path_buf(),
            offset,
            len: bytes.len() as u64,
            source: std::io::Error::other(format!("the undo record could not be saved first: {error}")),
        })?;
        self.inner.write_at(offset, bytes)
    }
    fn flush(&self) -> Result<(), DeviceError> {
        self.inner.flush()
    }
    fn flush_range(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.inner.flush_range(offset, len)
    }
    fn page_cache(&self) -> Option<&dyn PageCache> {
        Some(self)
    }
}

/// Every write goes through `write_at`, which records it first (the defaults); a commit leaves
/// the backup log's appends to their own flushes as on the wrapped device.
impl PageCache for UndoDevice {
    fn flush_except(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.inner.flush_except(offset, len)
    }
}

/// The uuid of the volume on `device`: its chosen label's, else a valid copy's (two valid
/// copies that conflict still name the volume); `None` when no copy is valid.
pub fn volume_uuid_of(device: &dyn BlockDevice) -> Option<[u8; 16]> {
    let labels = crate::labels::read_labels(device).ok()?;
    if let Ok((_, label)) = labels.choose() {
        return Some(label.geometry.volume_uuid);
    }
    labels.primary.as_ref().ok().or(labels.backup.as_ref().ok()).map(|label| label.geometry.volume_uuid)
}
