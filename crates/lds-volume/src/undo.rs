//! Undo files (docs/undo-file.md): every offline tool that writes to a volume saves, before
//! each write, the original bytes of every sector the write touches (the first time it is
//! touched) and a digest of the sector as the write leaves it, and makes that durable before
//! the write is issued. (A sector is written whole: a partial write lands on the sector's
//! current bytes, so each state a sector can be found in is its original or one of these.) `undo` then restores the volume byte for byte, after checking that
//! every touched sector still holds either its original bytes or bytes the tool wrote there
//! (so that a volume changed since by anything else is refused), and can be run again after a
//! crash of its own: sectors it already restored hold their original bytes.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use lds_format::codec::crc32c;

use crate::device::{BlockDevice, DeviceError};

/// The first bytes of an undo file.
pub const UNDO_MAGIC: [u8; 8] = *b"LDSUNDO1";
/// The undo file format version.
pub const UNDO_VERSION: u32 = 1;
const RECORD_ORIGINAL: u8 = 1;
const RECORD_WRITTEN: u8 = 2;
const RECORD_FINAL: u8 = 3;
/// Bytes of a record before its payload: kind, 3 reserved, length, offset.
const RECORD_HEADER_LEN: usize = 16;
/// Bytes of a piece digest.
const DIGEST_LEN: usize = 16;

/// Why an undo file could not be written, read or applied.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UndoError {
    /// The undo file could not be created, written or synced.
    #[error("{}: undo file: {source}", path.display())]
    File {
        /// The undo file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The undo file exists already (it may be the only way back from an earlier run).
    #[error("{}: an undo file exists there already; apply it with `lds undo`, move it away, or give another path with --undo-file", path.display())]
    Exists {
        /// The undo file.
        path: PathBuf,
    },
    /// The undo file is not one, or is damaged before its records.
    #[error("{}: not an LDS undo file: {reason}", path.display())]
    NotAnUndoFile {
        /// The undo file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The volume is not the one the undo file was written for.
    #[error("{}: the undo file was written for {expected}, this device is {found}", path.display())]
    OtherVolume {
        /// The device.
        path: PathBuf,
        /// What the undo file records.
        expected: String,
        /// What the device is.
        found: String,
    },
    /// A sector holds neither its original bytes nor bytes the tool wrote: something else
    /// changed the volume since.
    #[error("{}: the sector at offset {offset} changed since the undo file was written (it holds neither its original bytes nor bytes the tool wrote); nothing was restored (--force restores anyway)", path.display())]
    Changed {
        /// The device.
        path: PathBuf,
        /// Device offset of the sector.
        offset: u64,
    },
    /// The tool finished, and the volume's metadata (labels and logs) changed since: other
    /// writes followed, which undoing would tear apart.
    #[error("{}: the volume was written to after {tool} finished (its labels or logs changed since); nothing was restored (--force restores anyway, losing those writes)", path.display())]
    WrittenSince {
        /// The device.
        path: PathBuf,
        /// The tool.
        tool: String,
    },
    /// The device failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
}

/// Where undo records go: a file, or memory (the crash simulator).
pub trait UndoSink: Send {
    /// Appends bytes.
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()>;
    /// Makes everything appended durable.
    fn sync(&mut self) -> std::io::Result<()>;
}

/// An undo file in memory, shared with whoever reads it afterwards.
#[derive(Clone, Default)]
pub struct MemorySink(pub Arc<Mutex<Vec<u8>>>);

impl UndoSink for MemorySink {
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend_from_slice(bytes);
        Ok(())
    }
    fn sync(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What an undo file says about the volume it was written for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndoHeader {
    /// The volume's uuid (zeros when the tool did not know it).
    pub volume_uuid: [u8; 16],
    /// Bytes of the device when the undo file was started.
    pub device_len: u64,
    /// Sector size the records are split at.
    pub sector_size: u32,
    /// The tool that wrote it (`repair`, `compaction resume`, ...).
    pub tool: String,
    /// Seconds since the Unix epoch when it was started.
    pub created: u64,
}

impl UndoHeader {
    fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&UNDO_MAGIC);
        bytes.extend_from_slice(&UNDO_VERSION.to_le_bytes());
        bytes.extend_from_slice(&self.sector_size.to_le_bytes());
        bytes.extend_from_slice(&self.device_len.to_le_bytes());
        bytes.extend_from_slice(&self.volume_uuid);
        bytes.extend_from_slice(&self.created.to_le_bytes());
        let tool = &self.tool.as_bytes()[..self.tool.len().min(255)];
        bytes.extend_from_slice(&(tool.len() as u16).to_le_bytes());
        bytes.extend_from_slice(tool);
        let crc = crc32c(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes
    }

    fn decode(bytes: &[u8]) -> Result<(Self, usize), String> {
        const FIXED: usize = 8 + 4 + 4 + 8 + 16 + 8 + 2;
        if bytes.len() < FIXED + 4 || bytes[..8] != UNDO_MAGIC {
            return Err("no undo file magic".into());
        }
        let u32_at = |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
        let u64_at = |at: usize| {
            let mut array = [0u8; 8];
            array.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(array)
        };
        let version = u32_at(8);
        if version != UNDO_VERSION {
            return Err(format!("undo file version {version}, this build reads {UNDO_VERSION}"));
        }
        let tool_len = usize::from(u16::from_le_bytes([bytes[FIXED - 2], bytes[FIXED - 1]]));
        let end = FIXED + tool_len;
        if bytes.len() < end + 4 {
            return Err("the header is truncated".into());
        }
        if crc32c(&bytes[..end]) != u32_at(end) {
            return Err("the header checksum does not match".into());
        }
        let mut volume_uuid = [0u8; 16];
        volume_uuid.copy_from_slice(&bytes[24..40]);
        let header = Self {
            sector_size: u32_at(12),
            device_len: u64_at(16),
            volume_uuid,
            created: u64_at(40),
            tool: String::from_utf8_lossy(&bytes[FIXED..end]).into_owned(),
        };
        if header.sector_size == 0 || !header.sector_size.is_power_of_two() {
            return Err(format!("sector size {}", header.sector_size));
        }
        Ok((header, end + 4))
    }
}

fn digest(bytes: &[u8]) -> [u8; DIGEST_LEN] {
    let mut hash = [0u8; DIGEST_LEN];
    hash.copy_from_slice(&blake3::hash(bytes).as_bytes()[..DIGEST_LEN]);
    hash
}

fn record(kind: u8, offset: u64, len: u32, payload: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(RECORD_HEADER_LEN + payload.len() + 4);
    bytes.push(kind);
    bytes.extend_from_slice(&[0; 3]);
    bytes.extend_from_slice(&len.to_le_bytes());
    bytes.extend_from_slice(&offset.to_le_bytes());
    bytes.extend_from_slice(payload);
    let crc = crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

/// Writes an undo file as a tool writes to a volume.
pub struct UndoLog {
    sink: Box<dyn UndoSink>,
    name: PathBuf,
    header: UndoHeader,
    started: bool,
    saved: HashSet<u64>,
    written_bytes: u64,
}

impl UndoLog {
    /// An undo log that creates the file `path` at its first record (a run that writes
    /// nothing leaves no file). Fails when the file exists already.
    pub fn create(path: &Path, header: UndoHeader) -> Result<Self, UndoError> {
        if path.exists() {
            return Err(UndoError::Exists { path: path.to_path_buf() });
        }
        Ok(Self {
            sink: Box::new(LazyFile { path: path.to_path_buf(), file: None }),
            name: path.to_path_buf(),
            header,
            started: false,
            saved: HashSet::new(),
            written_bytes: 0,
        })
    }

    /// An undo log into `sink` (named `name` in errors).
    pub fn with_sink(sink: Box<dyn UndoSink>, name: &Path, header: UndoHeader) -> Self {
        Self { sink, name: name.to_path_buf(), header, started: false, saved: HashSet::new(), written_bytes: 0 }
    }

    /// Bytes of the undo file so far.
    pub fn len(&self) -> u64 {
        self.written_bytes
    }

    /// True before the first record.
    pub fn is_empty(&self) -> bool {
        !self.started
    }

    /// The path (or name) of the undo file.
    pub fn path(&self) -> &Path {
        &self.name
    }

    fn append(&mut self, bytes: &[u8]) -> Result<(), UndoError> {
        self.sink.append(bytes).map_err(|source| UndoError::File { path: self.name.clone(), source })?;
        self.written_bytes += bytes.len() as u64;
        Ok(())
    }

    /// Records what a write of `bytes` at `offset` to `device` changes, and makes it durable:
    /// call before issuing the write.
    pub fn before_write(&mut self, device: &dyn BlockDevice, offset: u64, bytes: &[u8]) -> Result<(), UndoError> {
        if bytes.is_empty() {
            return Ok(());
        }
        if !self.started {
            let header = self.header.encode();
            self.append(&header)?;
            self.started = true;
        }
        let sector = u64::from(self.header.sector_size);
        let end = offset + bytes.len() as u64;
        let mut at = offset;
        // One record (two the first time) per sector the write touches: the sector as it will
        // be once the write lands on what is there now.
        while at < end {
            let sector_start = at / sector * sector;
            let piece_end = (sector_start + sector).min(end);
            let len = sector.min(device.len().saturating_sub(sector_start));
            let mut content = device.read_vec(sector_start, len)?;
            if self.saved.insert(sector_start) {
                self.append(&record(RECORD_ORIGINAL, sector_start, len as u32, &content))?;
            }
            let from = (at - sector_start) as usize;
            let to = ((piece_end - sector_start) as usize).min(content.len());
            content[from..to].copy_from_slice(&bytes[(at - offset) as usize..(at - offset) as usize + (to - from)]);
            self.append(&record(RECORD_WRITTEN, sector_start, len as u32, &digest(&content)))?;
            at = piece_end;
        }
        self.sink.sync().map_err(|source| UndoError::File { path: self.name.clone(), source })
    }
}

impl UndoLog {
    /// Records the digest of `regions` of `device` as the tool leaves them (its last record):
    /// `undo` then refuses a volume whose regions changed since. Does nothing when the tool
    /// wrote nothing.
    pub fn finish(&mut self, device: &dyn BlockDevice, regions: &[(u64, u64)]) -> Result<(), UndoError> {
        if !self.started {
            return Ok(());
        }
        let mut payload = Vec::new();
        payload.extend_from_slice(&(regions.len() as u32).to_le_bytes());
        for &(offset, len) in regions {
            payload.extend_from_slice(&offset.to_le_bytes());
            payload.extend_from_slice(&len.to_le_bytes());
        }
        payload.extend_from_slice(&regions_digest(device, regions)?);
        let len = payload.len() as u32;
        self.append(&record(RECORD_FINAL, 0, len, &payload))?;
        self.sink.sync().map_err(|source| UndoError::File { path: self.name.clone(), source })
    }
}

/// Bytes of a region read at once for its digest.
const DIGEST_PIECE: u64 = 1 << 20;

fn regions_digest(device: &dyn BlockDevice, regions: &[(u64, u64)]) -> Result<[u8; 32], DeviceError> {
    let mut hasher = blake3::Hasher::new();
    for &(offset, len) in regions {
        // A piece at a time, bounded by the region: its length comes from the undo file.
        let mut done = 0;
        while done < len {
            let piece = DIGEST_PIECE.min(len - done);
            hasher.update(&device.read_vec(offset.saturating_add(done), piece)?);
            done += piece;
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
            let directory = match self.path.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
                _ => PathBuf::from("."),
            };
            std::fs::File::open(directory)?.sync_all()?;
            self.file = Some(file);
        }
        match &mut self.file {
            Some(file) => file.write_all(bytes),
            None => Ok(()),
        }
    }
    fn sync(&mut self) -> std::io::Result<()> {
        match &mut self.file {
            Some(file) => file.sync_data(),
            None => Ok(()),
        }
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

    /// The undo log's path and its length so far (0: nothing was written).
    pub fn undo_file(&self) -> (PathBuf, u64) {
        let log = self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (log.path().to_path_buf(), log.len())
    }
}

impl BlockDevice for UndoDevice {
    fn name(&self) -> &Path {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        self.inner.read_at(offset, buffer)
    }
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
    fn flush_except(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        self.inner.flush_except(offset, len)
    }
    fn volume_labels(&self) -> Option<Result<lds_format::label::LabelPair, DeviceError>> {
        self.inner.volume_labels()
    }
    fn member_labels(&self) -> Vec<crate::members::MemberLabels> {
        self.inner.member_labels()
    }
    // Labels of the other devices only repeat the first device's table entry by entry; their
    // writes are not in the undo file (docs/undo-file.md).
    fn write_member(&self, index: usize, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        self.inner.write_member(index, offset, bytes)
    }
}

/// The state a tool left: `(offset, len)` regions of the device and the blake3 digest of
/// their bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalState {
    /// The regions.
    pub regions: Vec<(u64, u64)>,
    /// Their digest.
    pub digest: [u8; 32],
}

/// A parsed undo file: the header, each touched sector's original bytes, and the digests of
/// what was written in each piece of it.
#[derive(Debug, Clone)]
pub struct UndoFile {
    /// The header.
    pub header: UndoHeader,
    /// Original bytes by sector offset.
    pub originals: BTreeMap<u64, Vec<u8>>,
    /// By sector offset: the digest of each state the tool's writes left the sector in.
    pub written: BTreeMap<u64, Vec<[u8; DIGEST_LEN]>>,
    /// The regions and their digest as the tool left them, when it finished.
    pub final_state: Option<FinalState>,
    /// Bytes at the end that are not a whole valid record (a crash while appending; the
    /// write they describe was never issued).
    pub torn_tail: u64,
}

impl UndoFile {
    /// Parses the bytes of an undo file (`name` for errors).
    pub fn parse(bytes: &[u8], name: &Path) -> Result<Self, UndoError> {
        let not = |reason: String| UndoError::NotAnUndoFile { path: name.to_path_buf(), reason };
        let (header, mut at) = UndoHeader::decode(bytes).map_err(not)?;
        let sector = u64::from(header.sector_size);
        let mut originals = BTreeMap::new();
        let mut written: BTreeMap<u64, Vec<[u8; DIGEST_LEN]>> = BTreeMap::new();
        let mut final_state = None;
        // Each record advances `at` by at least its header.
        while at + RECORD_HEADER_LEN + 4 <= bytes.len() {
            let kind = bytes[at];
            let len = u32::from_le_bytes([bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]]);
            let mut offset_bytes = [0u8; 8];
            offset_bytes.copy_from_slice(&bytes[at + 8..at + 16]);
            let offset = u64::from_le_bytes(offset_bytes);
            let payload_len = match kind {
                RECORD_ORIGINAL | RECORD_FINAL => len as usize,
                RECORD_WRITTEN => DIGEST_LEN,
                _ => break,
            };
            let end = at + RECORD_HEADER_LEN + payload_len;
            if end + 4 > bytes.len() || (kind != RECORD_FINAL && u64::from(len) > sector) {
                break;
            }
            let stored = u32::from_le_bytes([bytes[end], bytes[end + 1], bytes[end + 2], bytes[end + 3]]);
            if crc32c(&bytes[at..end]) != stored {
                break;
            }
            let payload = &bytes[at + RECORD_HEADER_LEN..end];
            if kind == RECORD_FINAL {
                final_state = parse_final(payload);
                // The regions are read back by `undo`: each must lie inside the device the
                // file was written for.
                let past = final_state.iter().flat_map(|state| &state.regions).find(|(offset, len)| {
                    offset.checked_add(*len).is_none_or(|region_end| region_end > header.device_len)
                });
                if let Some((offset, len)) = past {
                    return Err(not(format!(
                        "its final record names {len} bytes at offset {offset}, past the device's {} bytes",
                        header.device_len
                    )));
                }
                at = end + 4;
                continue;
            }
            if offset % sector != 0 {
                break;
            }
            if kind == RECORD_ORIGINAL {
                originals.entry(offset).or_insert_with(|| payload.to_vec());
            } else {
                let mut hash = [0u8; DIGEST_LEN];
                hash.copy_from_slice(payload);
                written.entry(offset).or_default().push(hash);
            }
            at = end + 4;
        }
        Ok(Self { header, originals, written, final_state, torn_tail: (bytes.len() - at) as u64 })
    }

    /// Reads and parses an undo file.
    pub fn read(path: &Path) -> Result<Self, UndoError> {
        let bytes = std::fs::read(path).map_err(|source| UndoError::File { path: path.to_path_buf(), source })?;
        Self::parse(&bytes, path)
    }

    /// Bytes of the volume the undo file restores.
    pub fn restored_bytes(&self) -> u64 {
        self.originals.values().map(|bytes| bytes.len() as u64).sum()
    }

    /// The first sector of `device` that holds neither its original bytes nor the bytes it
    /// had after one of the tool's writes, if any: something else changed it since.
    pub fn first_changed_sector(&self, device: &dyn BlockDevice) -> Result<Option<u64>, DeviceError> {
        for (&sector_offset, original) in &self.originals {
            let current = device.read_vec(sector_offset, original.len() as u64)?;
            if &current == original {
                continue;
            }
            let hash = digest(&current);
            let states = self.written.get(&sector_offset).map(Vec::as_slice).unwrap_or_default();
            if !states.contains(&hash) {
                return Ok(Some(sector_offset));
            }
        }
        Ok(None)
    }
}

fn parse_final(payload: &[u8]) -> Option<FinalState> {
    let count = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?) as usize;
    let mut regions = Vec::new();
    let mut at = 4;
    for _ in 0..count {
        let offset = u64::from_le_bytes(payload.get(at..at + 8)?.try_into().ok()?);
        let len = u64::from_le_bytes(payload.get(at + 8..at + 16)?.try_into().ok()?);
        regions.push((offset, len));
        at += 16;
    }
    let digest: [u8; 32] = payload.get(at..at + 32)?.try_into().ok()?;
    Some(FinalState { regions, digest })
}

/// What `undo` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UndoOutcome {
    /// Sectors restored.
    pub sectors: u64,
    /// Bytes restored.
    pub bytes: u64,
    /// Sectors that already held their original bytes.
    pub unchanged: u64,
}

/// Restores the sectors an undo file saved, on `device` (whose volume uuid, if known, is
/// `volume_uuid`): checks first that the file is for this device and that no sector changed
/// since (unless `force`), then writes every original sector and flushes. Running it again
/// (after a crash during it, or after it finished) restores the same bytes.
pub fn undo(
    file: &UndoFile,
    device: &dyn BlockDevice,
    volume_uuid: Option<[u8; 16]>,
    force: bool,
) -> Result<UndoOutcome, UndoError> {
    let path = device.name().to_path_buf();
    let describe = |uuid: [u8; 16], len: u64| format!("volume {} of {len} bytes", lds_format::error::hex(&uuid));
    let uuid_differs =
        volume_uuid.is_some_and(|uuid| file.header.volume_uuid != [0; 16] && uuid != file.header.volume_uuid);
    if !force && (device.len() != file.header.device_len || uuid_differs) {
        return Err(UndoError::OtherVolume {
            path,
            expected: describe(file.header.volume_uuid, file.header.device_len),
            found: describe(volume_uuid.unwrap_or([0; 16]), device.len()),
        });
    }
    if !force {
        if let Some(FinalState { regions, digest }) = &file.final_state {
            // Once restored (by an earlier run, or partly before a crash) the regions hold
            // what they held before the tool: only when no sector is restored yet must they
            // be as the tool left them.
            let untouched = file.originals.iter().all(|(&offset, original)| {
                device.read_vec(offset, original.len() as u64).is_ok_and(|current| current != *original)
            });
            if untouched && regions_digest(device, regions)? != *digest {
                return Err(UndoError::WrittenSince { path, tool: file.header.tool.clone() });
            }
        }
        if let Some(offset) = file.first_changed_sector(device)? {
            return Err(UndoError::Changed { path, offset });
        }
    }
    let mut outcome = UndoOutcome { sectors: 0, bytes: 0, unchanged: 0 };
    for (&offset, original) in &file.originals {
        if offset + original.len() as u64 > device.len() {
            continue;
        }
        if device.read_vec(offset, original.len() as u64)? == *original {
            outcome.unchanged += 1;
            continue;
        }
        device.write_at(offset, original)?;
        outcome.sectors += 1;
        outcome.bytes += original.len() as u64;
    }
    device.flush()?;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A device in memory (writes land at once).
    struct Memory(Mutex<Vec<u8>>);

    impl BlockDevice for Memory {
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

    fn snapshot(device: &Memory) -> Vec<u8> {
        device.0.lock().map(|bytes| bytes.clone()).unwrap_or_default()
    }

    fn header() -> UndoHeader {
        UndoHeader { volume_uuid: [3; 16], device_len: 16384, sector_size: 512, tool: "test".into(), created: 1 }
    }

    /// Writes three overlapping, unaligned ranges through an undo device.
    fn written() -> (Arc<Memory>, Vec<u8>, MemorySink) {
        let original: Vec<u8> = (0..16384u32).map(|index| (index * 7 % 251) as u8).collect();
        let memory = Arc::new(Memory(Mutex::new(original.clone())));
        let sink = MemorySink::default();
        let device =
            UndoDevice::new(memory.clone(), UndoLog::with_sink(Box::new(sink.clone()), Path::new("undo"), header()));
        for (offset, len, fill) in [(100u64, 1000usize, 1u8), (600, 20, 2), (4096, 512, 3), (1000, 3000, 4)] {
            assert!(device.write_at(offset, &vec![fill; len]).is_ok());
        }
        (memory, original, sink)
    }

    fn parsed(sink: &MemorySink) -> UndoFile {
        let bytes = sink.0.lock().map(|bytes| bytes.clone()).unwrap_or_default();
        match UndoFile::parse(&bytes, Path::new("undo")) {
            Ok(file) => file,
            Err(error) => panic!("{error}"),
        }
    }

    #[test]
    fn undo_restores_every_byte_and_can_run_again() {
        let (memory, original, sink) = written();
        assert_ne!(snapshot(&memory), original);
        let file = parsed(&sink);
        assert_eq!(file.header, header());
        assert_eq!(file.torn_tail, 0);
        let outcome = undo(&file, memory.as_ref(), Some([3; 16]), false);
        assert!(outcome.is_ok(), "{outcome:?}");
        assert_eq!(snapshot(&memory), original);
        let again = undo(&file, memory.as_ref(), Some([3; 16]), false);
        assert!(matches!(again, Ok(UndoOutcome { sectors: 0, .. })), "{again:?}");
        assert_eq!(snapshot(&memory), original);
    }

    #[test]
    fn a_partly_restored_or_partly_written_volume_is_accepted() {
        let (memory, original, sink) = written();
        let file = parsed(&sink);
        // A crash during undo: one sector restored, the others not.
        let first = *file.originals.keys().next().unwrap_or(&0);
        assert!(memory.write_at(first, &original[first as usize..first as usize + 512]).is_ok());
        assert!(matches!(file.first_changed_sector(memory.as_ref()), Ok(None)));
        assert!(undo(&file, memory.as_ref(), None, false).is_ok());
        assert_eq!(snapshot(&memory), original);
    }

    #[test]
    fn a_volume_changed_since_is_refused_and_left_alone() {
        let (memory, _, sink) = written();
        let file = parsed(&sink);
        assert!(memory.write_at(700, b"someone else").is_ok());
        let before = snapshot(&memory);
        let refused = undo(&file, memory.as_ref(), None, false);
        assert!(matches!(refused, Err(UndoError::Changed { offset: 512, .. })), "{refused:?}");
        assert_eq!(snapshot(&memory), before);
        let other = undo(&file, memory.as_ref(), Some([9; 16]), false);
        assert!(matches!(other, Err(UndoError::OtherVolume { .. })), "{other:?}");
    }

    #[test]
    fn a_torn_record_ends_the_file() {
        let (_, _, sink) = written();
        let mut bytes = sink.0.lock().map(|bytes| bytes.clone()).unwrap_or_default();
        let whole = parsed(&sink);
        bytes.truncate(bytes.len() - 3);
        let Ok(torn) = UndoFile::parse(&bytes, Path::new("undo")) else { panic!("parses") };
        assert!(torn.torn_tail > 0);
        let pieces = |file: &UndoFile| file.written.values().map(Vec::len).sum::<usize>();
        assert_eq!(pieces(&torn) + 1, pieces(&whole));
        assert!(matches!(UndoFile::parse(b"LDSUNDO2", Path::new("x")), Err(UndoError::NotAnUndoFile { .. })));
    }

    #[test]
    fn a_final_record_past_the_device_is_refused_by_name() {
        let (_, _, sink) = written();
        let bytes = sink.0.lock().map(|bytes| bytes.clone()).unwrap_or_default();
        // One region from the last byte of the device on: 2 bytes, one past its end.
        let mut payload = 1u32.to_le_bytes().to_vec();
        payload.extend_from_slice(&(header().device_len - 1).to_le_bytes());
        payload.extend_from_slice(&2u64.to_le_bytes());
        payload.extend_from_slice(&[0; 32]);
        let mut past = bytes.clone();
        past.extend(record(RECORD_FINAL, 0, payload.len() as u32, &payload));
        let refused = UndoFile::parse(&past, Path::new("undo"));
        assert!(
            matches!(&refused, Err(UndoError::NotAnUndoFile { reason, .. }) if reason.contains("past the device")),
            "{refused:?}"
        );
        // A region that ends at the device's end is its own.
        let at = 4 + 8;
        payload[at..at + 8].copy_from_slice(&1u64.to_le_bytes());
        let mut inside = bytes;
        inside.extend(record(RECORD_FINAL, 0, payload.len() as u32, &payload));
        let parsed = UndoFile::parse(&inside, Path::new("undo"));
        assert!(matches!(&parsed, Ok(file) if file.final_state.is_some()), "{parsed:?}");
    }
}
