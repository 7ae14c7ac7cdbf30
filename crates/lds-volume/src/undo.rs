//! Undo files (docs/undo-file.md): every offline tool that writes to a volume saves, before
//! each write, the original bytes of every sector the write touches (the first time it is
//! touched) and a digest of the sector as the write leaves it, and makes that durable before
//! the write is issued. (A sector is written whole: a partial write lands on the sector's
//! current bytes, so each state a sector can be found in is its original or one of these.)
//! `undo` then restores the volume byte for byte, after checking that every touched sector
//! still holds either its original bytes or bytes the tool wrote there (so that a volume
//! changed since by anything else is refused), and can be run again after a crash of its own:
//! sectors it already restored hold their original bytes.
//!
//! The file itself is verified whole before a byte of the volume is written: the records of
//! each write form a batch whose digest is chained from the previous batch's, and a state
//! block after the header, rewritten in place once the tool finishes, says how long the file
//! is and what its last digest is. A finished file must verify to its last byte; the file of a
//! tool that never finished may only be torn inside its last batch (the one being appended at
//! the crash, whose write was never issued). Anything else is a damaged file, refused.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use lds_format::codec::crc32c;
use lds_format::geometry::{SECTOR_SIZE_MAX, SECTOR_SIZE_MIN};

use crate::block::{BlockDevice, DeviceError, PageCache, ReadAt};

/// The first bytes of an undo file.
pub const UNDO_MAGIC: [u8; 8] = *b"LDSUNDO2";
/// The undo file format version.
pub const UNDO_VERSION: u32 = 2;
/// The first bytes of an undo file of the first format (read only with `force`).
pub const UNDO_MAGIC_V1: [u8; 8] = *b"LDSUNDO1";
/// Bytes of the header, its checksum included.
const HEADER_LEN: usize = 128;
/// Where the tool's name starts in the header, and its most bytes.
const TOOL_AT: usize = 52;
const TOOL_MAX: usize = 72;
/// The state block follows the header; the first batch follows the state block.
const STATE_AT: usize = HEADER_LEN;
const STATE_LEN: usize = 68;
/// Bytes at the start of an undo file that a writer rewrites in place (the header and the
/// state block, all inside the file's first 512-byte sector); everything after them is only
/// ever appended.
pub const UNDO_REWRITTEN_PREFIX: usize = STATE_AT + STATE_LEN;
// The state block's one rewrite must fall inside the file's first sector (written whole).
const _: () = assert!(UNDO_REWRITTEN_PREFIX <= 512);
const STATE_RUNNING: u32 = 1;
const STATE_FINISHED: u32 = 2;
const BATCH_MAGIC: [u8; 4] = *b"UNDB";
/// Bytes of a batch header: magic, record count, batch number, records' length, chain
/// digest, checksum. The digest covers the first `BATCH_DIGEST_AT` bytes.
const BATCH_HEADER_LEN: usize = 60;
const BATCH_DIGEST_AT: usize = 24;
const RECORD_ORIGINAL: u8 = 1;
const RECORD_WRITTEN: u8 = 2;
const RECORD_FINAL: u8 = 3;
/// Bytes of a record before its payload: kind, 3 reserved, length, offset.
const RECORD_HEADER_LEN: usize = 16;
/// Bytes of a piece digest.
const DIGEST_LEN: usize = 16;
/// The most bytes of the device read at once when hashing regions (a region may be as long as
/// the device).
const REGION_PIECE: u64 = 1 << 20;

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
    /// The file is not an undo file this build reads.
    #[error("{}: not an LDS undo file: {reason}", path.display())]
    NotAnUndoFile {
        /// The undo file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The undo file does not verify: it was damaged or truncated after it was written.
    #[error("{}: the undo file is damaged at byte {offset}: {reason}", path.display())]
    Damaged {
        /// The undo file.
        path: PathBuf,
        /// Byte offset in the undo file of the first thing that does not verify.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The undo file names no volume (a zero uuid).
    #[error("{}: the undo file names no volume (its volume uuid is zero), so it cannot be checked against this device; nothing was restored (--force restores anyway)", path.display())]
    NoUuid {
        /// The undo file.
        path: PathBuf,
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
    /// A record or region of the undo file lies past the device's end.
    #[error("{}: the undo file's {what} at device offset {offset} ({len} bytes) lies past the device's end ({device_len} bytes); nothing was restored", path.display())]
    BeyondDevice {
        /// The device.
        path: PathBuf,
        /// A saved sector or a final region.
        what: &'static str,
        /// Its device offset.
        offset: u64,
        /// Its length.
        len: u64,
        /// The device's length.
        device_len: u64,
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
    /// The undo log takes no more records: an append failed (what follows it in the file
    /// could not be read back), the tool finished, or the header names no volume.
    #[error("{}: the undo log takes no more records: {reason}; the write was not issued", path.display())]
    Closed {
        /// The undo file.
        path: PathBuf,
        /// Why.
        reason: &'static str,
    },
    /// The undo file's last batch looks torn by a crash of the tool, but a sector it names
    /// holds other bytes than the original it records: its write was issued, so the file was
    /// damaged afterwards and cannot restore that sector.
    #[error("{}: the undo file's last batch looks torn by a crash, but the sector at offset {offset} no longer holds the original bytes it records: the tool wrote it, so the file was damaged since and cannot restore it; nothing was restored", path.display())]
    TornBatchWritten {
        /// The device.
        path: PathBuf,
        /// Device offset of the sector.
        offset: u64,
    },
    /// The device failed.
    #[error(transparent)]
    Device(#[from] DeviceError),
}

/// Where undo records go: a file, or memory (the crash simulator).
pub trait UndoSink: Send {
    /// Appends bytes.
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()>;
    /// Writes `bytes` over what the file holds at `offset` (inside what was appended).
    fn overwrite(&mut self, offset: u64, bytes: &[u8]) -> std::io::Result<()>;
    /// Makes everything appended or overwritten durable.
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
    fn overwrite(&mut self, offset: u64, bytes: &[u8]) -> std::io::Result<()> {
        let mut file = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let start = usize::try_from(offset).map_err(std::io::Error::other)?;
        let end = start.checked_add(bytes.len()).filter(|&end| end <= file.len());
        let Some(end) = end else {
            return Err(std::io::Error::other(format!("overwrite at {offset} past the end ({} bytes)", file.len())));
        };
        file[start..end].copy_from_slice(bytes);
        Ok(())
    }
    fn sync(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What an undo file says about the volume it was written for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndoHeader {
    /// The volume's uuid (a writer refuses to start without one).
    pub volume_uuid: [u8; 16],
    /// Bytes of the device when the undo file was started.
    pub device_len: u64,
    /// Sector size the records are split at.
    pub sector_size: u32,
    /// The tool that wrote it (`repair`, `compaction resume`, ...; at most 72 bytes kept).
    pub tool: String,
    /// Seconds since the Unix epoch when it was started.
    pub created: u64,
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut array = [0u8; 4];
    array.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(array)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut array = [0u8; 8];
    array.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(array)
}

fn sector_size_valid(sector_size: u32) -> bool {
    sector_size.is_power_of_two() && (SECTOR_SIZE_MIN..=SECTOR_SIZE_MAX).contains(&sector_size)
}

impl UndoHeader {
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut bytes = [0u8; HEADER_LEN];
        bytes[..8].copy_from_slice(&UNDO_MAGIC);
        bytes[8..12].copy_from_slice(&UNDO_VERSION.to_le_bytes());
        bytes[12..16].copy_from_slice(&self.sector_size.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.device_len.to_le_bytes());
        bytes[24..40].copy_from_slice(&self.volume_uuid);
        bytes[40..48].copy_from_slice(&self.created.to_le_bytes());
        // Cut at a character boundary, so that the name reads back as it was given.
        let mut tool_len = self.tool.len().min(TOOL_MAX);
        while !self.tool.is_char_boundary(tool_len) {
            tool_len -= 1;
        }
        bytes[48] = tool_len as u8;
        bytes[TOOL_AT..TOOL_AT + tool_len].copy_from_slice(&self.tool.as_bytes()[..tool_len]);
        let crc = crc32c(&bytes[..HEADER_LEN - 4]);
        bytes[HEADER_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// Decodes the header at the start of `bytes` (at least `HEADER_LEN` of them): the header
    /// and, when its checksum or a reserved byte is wrong, what is wrong (its fields are then
    /// as read, for `force`). `Err` when the fields cannot be used at all.
    fn decode(bytes: &[u8], name: &Path) -> Result<(Self, Option<Damage>), UndoError> {
        let not = |reason: String| UndoError::NotAnUndoFile { path: name.to_path_buf(), reason };
        let version = u32_at(bytes, 8);
        if version != UNDO_VERSION {
            return Err(not(format!("byte 8: format version {version}, this build reads {UNDO_VERSION}")));
        }
        let tool_len = usize::from(bytes[48]);
        let sector_size = u32_at(bytes, 12);
        let unusable = |reason: String| UndoError::Damaged { path: name.to_path_buf(), offset: 0, reason };
        if tool_len > TOOL_MAX {
            return Err(unusable(format!("the header says the tool's name is {tool_len} bytes, at most {TOOL_MAX}")));
        }
        if !sector_size_valid(sector_size) {
            return Err(unusable(format!(
                "the header's sector size {sector_size} is not a power of two from {SECTOR_SIZE_MIN} to {SECTOR_SIZE_MAX}"
            )));
        }
        let mut volume_uuid = [0u8; 16];
        volume_uuid.copy_from_slice(&bytes[24..40]);
        let header = Self {
            sector_size,
            device_len: u64_at(bytes, 16),
            volume_uuid,
            created: u64_at(bytes, 40),
            tool: String::from_utf8_lossy(&bytes[TOOL_AT..TOOL_AT + tool_len]).into_owned(),
        };
        let damage = if crc32c(&bytes[..HEADER_LEN - 4]) != u32_at(bytes, HEADER_LEN - 4) {
            Some(Damage::at(0, "the header's checksum does not match"))
        } else if bytes[49..52].iter().chain(&bytes[TOOL_AT + tool_len..HEADER_LEN - 4]).any(|&byte| byte != 0) {
            // Covered by the checksum too: only a writer that is not this one puts them there.
            Some(Damage::at(49, "a reserved byte of the header is not zero"))
        } else {
            None
        };
        Ok((header, damage))
    }
}

/// What the state block says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The tool had not finished when the file was last written.
    Running,
    /// The tool finished: the file is `len` bytes of `batches` batches holding `records`
    /// records, the last batch's chain digest `digest`.
    Finished { len: u64, batches: u64, records: u64, digest: [u8; 32] },
    /// The state block does not verify.
    Unknown,
}

fn encode_state(state: State) -> [u8; STATE_LEN] {
    let mut bytes = [0u8; STATE_LEN];
    match state {
        State::Running | State::Unknown => bytes[..4].copy_from_slice(&STATE_RUNNING.to_le_bytes()),
        State::Finished { len, batches, records, digest } => {
            bytes[..4].copy_from_slice(&STATE_FINISHED.to_le_bytes());
            bytes[8..16].copy_from_slice(&len.to_le_bytes());
            bytes[16..24].copy_from_slice(&batches.to_le_bytes());
            bytes[24..32].copy_from_slice(&records.to_le_bytes());
            bytes[32..64].copy_from_slice(&digest);
        }
    }
    let crc = crc32c(&bytes[..STATE_LEN - 4]);
    bytes[STATE_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
    bytes
}

/// Decodes the state block (`STATE_LEN` bytes); a damage when it does not verify.
fn decode_state(bytes: &[u8]) -> Result<State, Damage> {
    let at = |offset: usize| (STATE_AT + offset) as u64;
    if crc32c(&bytes[..STATE_LEN - 4]) != u32_at(bytes, STATE_LEN - 4) {
        return Err(Damage::at(at(0), "the state block's checksum does not match"));
    }
    if bytes[4..8].iter().any(|&byte| byte != 0) {
        return Err(Damage::at(at(4), "a reserved byte of the state block is not zero"));
    }
    match u32_at(bytes, 0) {
        STATE_RUNNING if bytes[8..STATE_LEN - 4].iter().all(|&byte| byte == 0) => Ok(State::Running),
        STATE_RUNNING => Err(Damage::at(at(8), "the state block says running, with a length or digest set")),
        STATE_FINISHED => {
            let mut digest = [0u8; 32];
            digest.copy_from_slice(&bytes[32..64]);
            Ok(State::Finished {
                len: u64_at(bytes, 8),
                batches: u64_at(bytes, 16),
                records: u64_at(bytes, 24),
                digest,
            })
        }
        other => {
            Err(Damage::at(at(0), format!("the state block's state is {other}, neither running (1) nor finished (2)")))
        }
    }
}

fn digest(bytes: &[u8]) -> [u8; DIGEST_LEN] {
    let mut hash = [0u8; DIGEST_LEN];
    hash.copy_from_slice(&blake3::hash(bytes).as_bytes()[..DIGEST_LEN]);
    hash
}

/// The chain digest of a batch: over the previous one's, the batch header's first fields and
/// the records.
fn chain_digest(previous: &[u8; 32], header: &[u8], records: &[u8]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(previous);
    hasher.update(&header[..BATCH_DIGEST_AT]);
    hasher.update(records);
    *hasher.finalize().as_bytes()
}

/// Recomputes every checksum and digest of undo file `bytes` in place (the header's and state
/// block's crc32c, each record's crc32c, each batch's chain digest and crc32c, a finished state
/// block's last digest) and changes no other field, so that the fuzzers' mutations get past the
/// checks to the code behind them (fuzz/src/fixup.rs). Bytes that do not frame a batch end the
/// walk. Not for real files: a file resealed proves nothing.
#[doc(hidden)]
pub fn reseal(bytes: &mut [u8]) {
    if bytes.len() < UNDO_REWRITTEN_PREFIX || bytes[..UNDO_MAGIC.len()] != UNDO_MAGIC {
        return;
    }
    let crc = crc32c(&bytes[..HEADER_LEN - 4]);
    bytes[HEADER_LEN - 4..HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
    let mut previous = *blake3::hash(&bytes[..HEADER_LEN]).as_bytes();
    let mut at = UNDO_REWRITTEN_PREFIX;
    // Each batch advances `at` by at least its header.
    while at + BATCH_HEADER_LEN <= bytes.len() {
        let records_start = at + BATCH_HEADER_LEN;
        let Some(end) = usize::try_from(u64_at(bytes, at + 16))
            .ok()
            .and_then(|len| records_start.checked_add(len))
            .filter(|&end| end <= bytes.len())
        else {
            break;
        };
        let mut record_at = records_start;
        // Each record advances `record_at` by at least its header and checksum.
        while record_at + RECORD_HEADER_LEN + 4 <= end {
            let payload = match bytes[record_at] {
                RECORD_ORIGINAL | RECORD_FINAL => u32_at(bytes, record_at + 4) as usize,
                RECORD_WRITTEN => DIGEST_LEN,
                _ => break,
            };
            let Some(record_end) =
                (record_at + RECORD_HEADER_LEN).checked_add(payload).filter(|&record_end| record_end + 4 <= end)
            else {
                break;
            };
            let crc = crc32c(&bytes[record_at..record_end]);
            bytes[record_end..record_end + 4].copy_from_slice(&crc.to_le_bytes());
            record_at = record_end + 4;
        }
        let digest = chain_digest(&previous, &bytes[at..records_start], &bytes[records_start..end]);
        bytes[at + BATCH_DIGEST_AT..at + BATCH_DIGEST_AT + 32].copy_from_slice(&digest);
        let crc = crc32c(&bytes[at..at + BATCH_HEADER_LEN - 4]);
        bytes[at + BATCH_HEADER_LEN - 4..at + BATCH_HEADER_LEN].copy_from_slice(&crc.to_le_bytes());
        previous = digest;
        at = end;
    }
    let state = &mut bytes[STATE_AT..STATE_AT + STATE_LEN];
    if u32_at(state, 0) == STATE_FINISHED {
        state[32..64].copy_from_slice(&previous);
    }
    let crc = crc32c(&state[..STATE_LEN - 4]);
    state[STATE_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
}

fn record(kind: u8, offset: u64, len: u32, payload: &[u8], into: &mut Vec<u8>) {
    let start = into.len();
    into.push(kind);
    into.extend_from_slice(&[0; 3]);
    into.extend_from_slice(&len.to_le_bytes());
    into.extend_from_slice(&offset.to_le_bytes());
    into.extend_from_slice(payload);
    let crc = crc32c(&into[start..]);
    into.extend_from_slice(&crc.to_le_bytes());
}

/// Writes an undo file as a tool writes to a volume.
pub struct UndoLog {
    sink: Box<dyn UndoSink>,
    name: PathBuf,
    header: UndoHeader,
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
    fn append_batch(&mut self, records: &[u8], count: u32) -> Result<(), UndoError> {
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
fn regions_digest(device: &dyn BlockDevice, regions: &[(u64, u64)]) -> Result<[u8; 32], UndoError> {
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

/// The state a tool left: `(offset, len)` regions of the device and the blake3 digest of
/// their bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FinalState {
    /// The regions.
    pub regions: Vec<(u64, u64)>,
    /// Their digest.
    pub digest: [u8; 32],
}

/// Something in an undo file that does not verify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Byte offset in the undo file.
    pub offset: u64,
    /// What is wrong, and what it costs.
    pub reason: String,
}

impl Damage {
    fn at(offset: u64, reason: impl Into<String>) -> Self {
        Self { offset, reason: reason.into() }
    }
}

/// A parsed undo file: the header, each touched sector's original bytes, and the digests of
/// what was written in each piece of it.
#[derive(Debug, Clone)]
pub struct UndoFile {
    /// The file's path (or name), for messages.
    pub name: PathBuf,
    /// The header.
    pub header: UndoHeader,
    /// The format version (1: `LDSUNDO1`, 2: `LDSUNDO2`).
    pub version: u32,
    /// Original bytes by sector offset.
    pub originals: BTreeMap<u64, Vec<u8>>,
    /// By sector offset: the digest of each state the tool's writes left the sector in.
    pub written: BTreeMap<u64, Vec<[u8; DIGEST_LEN]>>,
    /// The regions and their digest as the tool left them, when it finished.
    pub final_state: Option<FinalState>,
    /// Whether the state block says the tool finished (the whole file then verified).
    pub finished: bool,
    /// Batches read (the final one included).
    pub batches: u64,
    /// Records read.
    pub records: u64,
    /// Bytes at the end of the file of a tool that did not finish that are not a whole batch
    /// (a crash while appending it; the write it describes was never issued).
    pub torn_tail: u64,
    /// Sectors the torn last batch records the original bytes of (records whose own checksum
    /// verifies), for sectors no earlier batch saved: since that batch's write was never
    /// issued, they must still hold those bytes, and `undo` refuses a device where one does not
    /// (the file was damaged after the tool wrote, not torn by its crash).
    pub torn_originals: BTreeMap<u64, Vec<u8>>,
    /// What does not verify, in file order; empty for a file that verified. Only
    /// [`UndoFile::parse_salvaging`] returns a file with damage: its records are those whose
    /// own checksum verified, and `undo` applies it only with `force`.
    pub damage: Vec<Damage>,
}

/// A record as read.
enum Record<'a> {
    Original { offset: u64, bytes: &'a [u8] },
    Written { offset: u64, digest: [u8; DIGEST_LEN] },
    Final(FinalState),
}

/// Reads the record at `at` of a batch's `bytes` (`base` their file offset): the record and
/// where the next one starts, or what is wrong and, when the record's own fields still say
/// where it ends (only its bytes fail the checksum), where the next one would start.
fn read_record<'a>(
    bytes: &'a [u8],
    at: usize,
    base: u64,
    header: &UndoHeader,
) -> Result<(Record<'a>, usize), (Damage, Option<usize>)> {
    let here = base + at as u64;
    let fail = |reason: String| Err((Damage::at(here, reason), None));
    if bytes.len() - at < RECORD_HEADER_LEN + 4 {
        return fail("a record is cut short by its batch's end".into());
    }
    let kind = bytes[at];
    let len = u32_at(bytes, at + 4);
    let offset = u64_at(bytes, at + 8);
    let payload_len = match kind {
        RECORD_ORIGINAL | RECORD_FINAL => len as usize,
        RECORD_WRITTEN => DIGEST_LEN,
        other => return fail(format!("a record of unknown kind {other}")),
    };
    let Some(end) = (at + RECORD_HEADER_LEN).checked_add(payload_len).filter(|end| end + 4 <= bytes.len()) else {
        return fail(format!("a record of {payload_len} bytes runs past its batch's end"));
    };
    // A saved sector lies on the device and is whole: the sector size, or less only at the
    // device's end.
    let sector = u64::from(header.sector_size);
    let expected = sector.min(header.device_len.saturating_sub(offset));
    let sector_fields = offset % sector == 0 && offset < header.device_len && u64::from(len) == expected;
    let reserved_zero = bytes[at + 1..at + 4] == [0; 3];
    if crc32c(&bytes[at..end]) != u32_at(bytes, end) {
        let what = match kind {
            RECORD_ORIGINAL => format!("the original bytes of the sector at device offset {offset}"),
            RECORD_WRITTEN => format!("a digest of the sector at device offset {offset}"),
            _ => "the final record".into(),
        };
        let reason = format!("a record's checksum does not match (it held {what}, if its fields are right)");
        // Its fields are plausible: the next record may still be read (its own checksum then
        // says whether that guess was right).
        let next = (kind != RECORD_FINAL && sector_fields && reserved_zero).then_some(end + 4);
        return Err((Damage::at(here, reason), next));
    }
    if !reserved_zero {
        return fail("a record's reserved bytes are not zero".into());
    }
    let payload = &bytes[at + RECORD_HEADER_LEN..end];
    let record = match kind {
        RECORD_FINAL => {
            let Some(state) = parse_final(payload) else {
                return fail("the final record's regions do not add up to its length".into());
            };
            let beyond = state
                .regions
                .iter()
                .find(|&&(offset, len)| offset.checked_add(len).is_none_or(|end| end > header.device_len));
            if let Some(&(offset, len)) = beyond {
                return fail(format!(
                    "the final record's region at device offset {offset} ({len} bytes) lies past the device's end ({} bytes)",
                    header.device_len
                ));
            }
            Record::Final(state)
        }
        _ if !sector_fields => {
            return fail(format!(
                "a record for {len} bytes at device offset {offset}, not a sector of a device of {} bytes",
                header.device_len
            ));
        }
        RECORD_ORIGINAL => Record::Original { offset, bytes: payload },
        _ => {
            let mut digest = [0u8; DIGEST_LEN];
            digest.copy_from_slice(payload);
            Record::Written { offset, digest }
        }
    };
    Ok((record, end + 4))
}

/// Reads the records of one batch, `base` being the file offset of `bytes`: every record whose
/// checksum and fields verify, and what is wrong with those that do not. Past a record whose
/// fields cannot be trusted nothing more of the batch is read.
fn read_records<'a>(
    bytes: &'a [u8],
    base: u64,
    header: &UndoHeader,
    count: Option<u32>,
) -> (Vec<(u64, Record<'a>)>, Vec<Damage>) {
    let mut records = Vec::new();
    let mut damage = Vec::new();
    let mut at = 0;
    // Each record advances `at` by at least its header and checksum.
    while at < bytes.len() {
        match read_record(bytes, at, base, header) {
            Ok((record, next)) => {
                records.push((base + at as u64, record));
                at = next;
            }
            Err((what, next)) => {
                damage.push(what);
                match next {
                    Some(next) => at = next,
                    None => break,
                }
            }
        }
    }
    if let Some(count) = count.filter(|&count| damage.is_empty() && records.len() as u64 != u64::from(count)) {
        damage.push(Damage::at(base, format!("the batch holds {} records, its header says {count}", records.len())));
    }
    (records, damage)
}

/// A batch header that verifies at `at`: (record count, batch number, records' length, chain
/// digest).
fn batch_header(bytes: &[u8], at: usize) -> Option<(u32, u64, u64, [u8; 32])> {
    let header = bytes.get(at..at.checked_add(BATCH_HEADER_LEN)?)?;
    if header[..4] != BATCH_MAGIC || crc32c(&header[..BATCH_HEADER_LEN - 4]) != u32_at(header, BATCH_HEADER_LEN - 4) {
        return None;
    }
    let mut chain = [0u8; 32];
    chain.copy_from_slice(&header[BATCH_DIGEST_AT..BATCH_DIGEST_AT + 32]);
    Some((u32_at(header, 4), u64_at(header, 8), u64_at(header, 16), chain))
}

/// The first offset from `from` on where a batch header numbered `above` or more verifies.
fn next_batch_header(bytes: &[u8], from: usize, above: u64) -> Option<(usize, u64)> {
    // Bounded by the file's length; the magic filters before the checksum.
    (from..bytes.len().saturating_sub(BATCH_HEADER_LEN - 1)).find_map(|at| {
        if bytes[at..at + 4] != BATCH_MAGIC {
            return None;
        }
        batch_header(bytes, at).filter(|&(_, number, _, _)| number >= above).map(|(_, number, _, _)| (at, number))
    })
}

/// What reading the batches found.
#[derive(Default)]
struct Contents<'a> {
    records: Vec<(u64, Record<'a>)>,
    batches: u64,
    /// The chain digest of the last batch, while every batch so far verified by the chain.
    chain: Option<[u8; 32]>,
    /// Where the batches end (the torn tail starts here).
    end: usize,
    /// The original bytes the torn last batch records for sectors, where a record of it
    /// verifies by its own checksum: the write it describes was never issued, so those sectors
    /// must still hold them (else the file was damaged, not torn).
    torn_originals: Vec<(u64, Vec<u8>)>,
    damage: Vec<Damage>,
}

/// The original bytes that the records of a torn batch (`bytes`, at file offset `base`) hold,
/// where a record verifies by its own checksum.
fn torn_originals(bytes: &[u8], base: u64, header: &UndoHeader) -> Vec<(u64, Vec<u8>)> {
    read_records(bytes, base, header, None)
        .0
        .into_iter()
        .filter_map(|(_, record)| match record {
            Record::Original { offset, bytes } => Some((offset, bytes.to_vec())),
            _ => None,
        })
        .collect()
}

/// Reads the batches after the state block. A batch verifies when its header's checksum and
/// its chain digest do; where one does not, the file of a running tool may end (torn inside
/// its last batch: the batch runs past the file's end or ends at it, or its header is torn and
/// no later batch header follows); anything else is damage, and reading goes on at the next
/// batch header that verifies, keeping only records whose own checksum verifies.
fn read_batches<'a>(bytes: &'a [u8], header: &UndoHeader, state: State) -> Contents<'a> {
    let mut contents = Contents {
        chain: Some(*blake3::hash(&bytes[..HEADER_LEN]).as_bytes()),
        end: UNDO_REWRITTEN_PREFIX,
        ..Contents::default()
    };
    let mut at = UNDO_REWRITTEN_PREFIX;
    let mut number = 0u64;
    let mut after_final = false;
    // Each pass moves `at` forward by a whole batch, or to a later batch header, or ends.
    while at < bytes.len() {
        let found = batch_header(bytes, at).filter(|&(_, found, _, _)| found == number);
        let Some((count, _, records_len, stored)) = found else {
            // From `at` itself: a later batch sitting where this one should (this one lost)
            // is damage, not a tear.
            let torn = next_batch_header(bytes, at, number + 1);
            if state == State::Running && torn.is_none() {
                // The header of the last batch is torn: the tool crashed appending it.
                break;
            }
            let reason = if bytes.len() - at < BATCH_HEADER_LEN {
                format!("the file ends inside the header of batch {number}")
            } else {
                format!("the header of batch {number} does not verify")
            };
            contents.damage.push(Damage::at(at as u64, reason));
            contents.chain = None;
            match torn {
                Some((next, next_number)) => {
                    at = next;
                    number = next_number;
                    continue;
                }
                None => {
                    contents.end = bytes.len();
                    return contents;
                }
            }
        };
        let start = at + BATCH_HEADER_LEN;
        let end =
            usize::try_from(records_len).ok().and_then(|len| start.checked_add(len)).filter(|&end| end <= bytes.len());
        let Some(end) = end else {
            if state == State::Running {
                // The file ends inside its last batch.
                contents.torn_originals = torn_originals(&bytes[start.min(bytes.len())..], start as u64, header);
                break;
            }
            let reason = format!("batch {number} ({records_len} bytes of records) runs past the file's end");
            contents.damage.push(Damage::at(at as u64, reason));
            contents.chain = None;
            contents.end = bytes.len();
            break;
        };
        let verified = contents.chain.map(|chain| chain_digest(&chain, &bytes[at..], &bytes[start..end]) == stored);
        if verified == Some(false) {
            if state == State::Running && end == bytes.len() {
                // The last batch, ending at the file's end, with bytes that never landed.
                contents.torn_originals = torn_originals(&bytes[start..end], start as u64, header);
                break;
            }
            contents.damage.push(Damage::at(at as u64, format!("batch {number} does not match its digest")));
        }
        if after_final {
            contents.damage.push(Damage::at(at as u64, format!("batch {number} follows the final record")));
        }
        let (records, damage) = read_records(&bytes[start..end], start as u64, header, Some(count));
        after_final |= records.iter().any(|(_, record)| matches!(record, Record::Final(_)));
        contents.records.extend(records);
        contents.damage.extend(damage);
        // The next batch's digest is chained from the one this batch's header stores (its
        // header verified), so after a batch with damaged records, or one read after a
        // damaged header, the chain verifies again from here.
        contents.chain = Some(stored);
        contents.batches += 1;
        number += 1;
        at = end;
        contents.end = end;
    }
    contents
}

impl UndoFile {
    /// Parses the bytes of an undo file (`name` for errors), refusing one that does not
    /// verify: a finished file must verify to its last byte, the file of a tool that did not
    /// finish may only end inside its last batch. An `LDSUNDO1` file is refused (its records
    /// cannot be verified as a whole; [`UndoFile::parse_salvaging`] reads it).
    pub fn parse(bytes: &[u8], name: &Path) -> Result<Self, UndoError> {
        let file = Self::parse_salvaging(bytes, name)?;
        match file.damage.first() {
            Some(Damage { offset, reason }) => {
                Err(UndoError::Damaged { path: name.to_path_buf(), offset: *offset, reason: reason.clone() })
            }
            None => Ok(file),
        }
    }

    /// Parses an undo file, keeping every record whose own checksum verifies even where the
    /// file does not verify (what is wrong is in [`UndoFile::damage`]); for `--force` and
    /// `--dry-run`. Fails only when no record can be read at all: not an undo file, or a
    /// header whose fields cannot be used.
    pub fn parse_salvaging(bytes: &[u8], name: &Path) -> Result<Self, UndoError> {
        let damaged = |offset: usize, reason: String| UndoError::Damaged {
            path: name.to_path_buf(),
            offset: offset as u64,
            reason,
        };
        let magic_len = bytes.len().min(8);
        if bytes[..magic_len] != UNDO_MAGIC[..magic_len] {
            if bytes.len() >= 8 && bytes[..8] == UNDO_MAGIC_V1 {
                return parse_v1(bytes, name);
            }
            return Err(UndoError::NotAnUndoFile {
                path: name.to_path_buf(),
                reason: "bytes 0..8 are not the magic LDSUNDO2".into(),
            });
        }
        if bytes.len() < HEADER_LEN {
            return Err(damaged(
                bytes.len(),
                format!("the file ends at byte {}, inside its {HEADER_LEN}-byte header", bytes.len()),
            ));
        }
        let (header, header_damage) = UndoHeader::decode(bytes, name)?;
        let mut damage: Vec<Damage> = header_damage.into_iter().collect();
        let state = if bytes.len() < UNDO_REWRITTEN_PREFIX {
            damage.push(Damage::at(
                bytes.len() as u64,
                format!(
                    "the file ends at byte {}, inside its state block (bytes {STATE_AT}..{UNDO_REWRITTEN_PREFIX}); a tool that crashed creating it wrote nothing to the volume",
                    bytes.len()
                ),
            ));
            State::Unknown
        } else {
            decode_state(&bytes[STATE_AT..UNDO_REWRITTEN_PREFIX]).unwrap_or_else(|error| {
                damage.push(error);
                State::Unknown
            })
        };
        let contents = if bytes.len() >= UNDO_REWRITTEN_PREFIX {
            read_batches(bytes, &header, state)
        } else {
            Contents { end: bytes.len(), ..Contents::default() }
        };
        if let State::Finished { len, .. } = state {
            // Named first: it is what a truncation or an appended tail looks like.
            if bytes.len() as u64 != len {
                let reason = format!(
                    "the file is {} bytes, its state block says the tool left {len}: it was cut short or added to since",
                    bytes.len()
                );
                damage.insert(0, Damage::at(len.min(bytes.len() as u64), reason));
            }
        }
        damage.extend(contents.damage);
        let records = contents.records.len() as u64;
        let mut file = Self {
            name: name.to_path_buf(),
            header,
            version: UNDO_VERSION,
            originals: BTreeMap::new(),
            written: BTreeMap::new(),
            final_state: None,
            finished: matches!(state, State::Finished { .. }),
            batches: contents.batches,
            records,
            torn_tail: (bytes.len() - contents.end) as u64,
            torn_originals: BTreeMap::new(),
            damage,
        };
        if let State::Finished { batches, records: recorded, digest, .. } = state {
            if file.damage.is_empty() && (contents.batches != batches || records != recorded) {
                let reason = format!(
                    "{} batches of {records} records, the state block says {batches} of {recorded}",
                    contents.batches
                );
                file.damage.push(Damage::at(STATE_AT as u64, reason));
            } else if file.damage.is_empty() && contents.chain != Some(digest) {
                let reason = "the last batch's digest is not the one the state block records";
                file.damage.push(Damage::at(STATE_AT as u64, reason));
            }
            let ends_final = matches!(contents.records.last(), Some((_, Record::Final(_))));
            if file.damage.is_empty() && !ends_final {
                file.damage.push(Damage::at(STATE_AT as u64, "the tool finished, and its final record is missing"));
            }
        }
        file.add(contents.records);
        // Sectors an earlier batch saved were possibly written: only the others must still
        // hold what the torn batch recorded.
        for (offset, original) in contents.torn_originals {
            if !file.originals.contains_key(&offset) {
                file.torn_originals.entry(offset).or_insert(original);
            }
        }
        Ok(file)
    }

    fn add(&mut self, records: Vec<(u64, Record<'_>)>) {
        for (_, record) in records {
            match record {
                Record::Original { offset, bytes } => {
                    self.originals.entry(offset).or_insert_with(|| bytes.to_vec());
                }
                Record::Written { offset, digest } => self.written.entry(offset).or_default().push(digest),
                Record::Final(state) => self.final_state = Some(state),
            }
        }
    }

    /// Reads and parses an undo file, refusing one that does not verify.
    pub fn read(path: &Path) -> Result<Self, UndoError> {
        let bytes = std::fs::read(path).map_err(|source| UndoError::File { path: path.to_path_buf(), source })?;
        Self::parse(&bytes, path)
    }

    /// Bytes of the volume the undo file restores.
    pub fn restored_bytes(&self) -> u64 {
        self.originals.values().map(|bytes| bytes.len() as u64).sum()
    }

    /// The device ranges `(offset, len)` the saved sectors cover, adjacent sectors merged.
    pub fn ranges(&self) -> Vec<(u64, u64)> {
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for (&offset, bytes) in &self.originals {
            match ranges.last_mut() {
                Some((start, len)) if *start + *len == offset => *len += bytes.len() as u64,
                _ => ranges.push((offset, bytes.len() as u64)),
            }
        }
        ranges
    }

    /// Sectors the file says the tool wrote whose original bytes it does not hold (their
    /// records did not verify): they cannot be restored.
    pub fn unrestorable(&self) -> Vec<u64> {
        self.written.keys().copied().filter(|offset| !self.originals.contains_key(offset)).collect()
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

/// Reads an `LDSUNDO1` file: records in sequence, each with its checksum, up to the first
/// that does not verify. Nothing in that format tells a file cut at a record's end from a
/// whole one, so the file always carries a damage (only `force` applies it).
fn parse_v1(bytes: &[u8], name: &Path) -> Result<UndoFile, UndoError> {
    const FIXED: usize = 8 + 4 + 4 + 8 + 16 + 8 + 2;
    let damaged = |offset: usize, reason: &str| UndoError::Damaged {
        path: name.to_path_buf(),
        offset: offset as u64,
        reason: reason.to_string(),
    };
    if bytes.len() < FIXED + 4 {
        return Err(damaged(bytes.len(), "the LDSUNDO1 header is cut short"));
    }
    let version = u32_at(bytes, 8);
    if version != 1 {
        return Err(UndoError::NotAnUndoFile {
            path: name.to_path_buf(),
            reason: format!("byte 8: magic LDSUNDO1 with format version {version}"),
        });
    }
    let tool_len = usize::from(u16::from_le_bytes([bytes[FIXED - 2], bytes[FIXED - 1]]));
    let header_end = FIXED + tool_len;
    if bytes.len() < header_end + 4 {
        return Err(damaged(bytes.len(), "the LDSUNDO1 header is cut short"));
    }
    if crc32c(&bytes[..header_end]) != u32_at(bytes, header_end) {
        return Err(damaged(0, "the LDSUNDO1 header's checksum does not match"));
    }
    let sector_size = u32_at(bytes, 12);
    if !sector_size_valid(sector_size) {
        return Err(damaged(12, "the LDSUNDO1 header's sector size is not one a volume can have"));
    }
    let mut volume_uuid = [0u8; 16];
    volume_uuid.copy_from_slice(&bytes[24..40]);
    let header = UndoHeader {
        sector_size,
        device_len: u64_at(bytes, 16),
        volume_uuid,
        created: u64_at(bytes, 40),
        tool: String::from_utf8_lossy(&bytes[FIXED..header_end]).into_owned(),
    };
    let at = header_end + 4;
    // The records of version 1 are those of version 2 without batches: read them as one.
    let (records, stop) = read_records(&bytes[at..], at as u64, &header, None);
    let mut damage =
        vec![Damage::at(0, "an LDSUNDO1 file (the format before LDSUNDO2), which cannot be verified whole")];
    damage.extend(stop);
    let mut file = UndoFile {
        name: name.to_path_buf(),
        header,
        version: 1,
        originals: BTreeMap::new(),
        written: BTreeMap::new(),
        final_state: None,
        finished: records.iter().any(|(_, record)| matches!(record, Record::Final(_))),
        batches: 0,
        records: records.len() as u64,
        torn_tail: 0,
        torn_originals: BTreeMap::new(),
        damage,
    };
    file.add(records);
    Ok(file)
}

fn parse_final(payload: &[u8]) -> Option<FinalState> {
    let count = u32::from_le_bytes(payload.get(..4)?.try_into().ok()?) as usize;
    // The payload's length bounds the count: no allocation from the count alone.
    if payload.len() != 4 + count.checked_mul(16)? + 32 {
        return None;
    }
    let mut regions = Vec::with_capacity(count);
    let mut at = 4;
    for _ in 0..count {
        regions.push((u64_at(payload, at), u64_at(payload, at + 8)));
        at += 16;
    }
    let digest: [u8; 32] = payload.get(at..at + 32)?.try_into().ok()?;
    Some(FinalState { regions, digest })
}

/// What `undo` did, or would do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UndoOutcome {
    /// Sectors restored.
    pub sectors: u64,
    /// Bytes restored.
    pub bytes: u64,
    /// Sectors that already held their original bytes.
    pub unchanged: u64,
}

/// Checks that `file` may be applied to `device` (whose volume uuid, read from its labels, is
/// `volume_uuid`; `None` when no label copy is valid) and says what `undo` would restore,
/// writing nothing. Without `force`: the file must have verified, name a volume, and match
/// the device's length and uuid; a finished tool's regions must be as it left them (unless a
/// sector is restored already); every saved sector must hold its original bytes or bytes the
/// tool wrote. Always: every saved sector lies on the device.
pub fn check_undo(
    file: &UndoFile,
    device: &dyn BlockDevice,
    volume_uuid: Option<[u8; 16]>,
    force: bool,
) -> Result<UndoOutcome, UndoError> {
    let path = device.name().to_path_buf();
    if !force {
        if let Some(Damage { offset, reason }) = file.damage.first() {
            return Err(UndoError::Damaged { path: file.name.clone(), offset: *offset, reason: reason.clone() });
        }
        if file.header.volume_uuid == [0; 16] {
            return Err(UndoError::NoUuid { path: file.name.clone() });
        }
        if device.len() != file.header.device_len || volume_uuid != Some(file.header.volume_uuid) {
            let describe = |uuid: Option<[u8; 16]>, len: u64| match uuid {
                Some(uuid) => format!("volume {} of {len} bytes", lds_format::error::hex(&uuid)),
                None => format!("a device of {len} bytes with no valid label"),
            };
            return Err(UndoError::OtherVolume {
                path,
                expected: describe(Some(file.header.volume_uuid), file.header.device_len),
                found: describe(volume_uuid, device.len()),
            });
        }
    }
    for (&offset, original) in &file.originals {
        let len = original.len() as u64;
        if offset.checked_add(len).is_none_or(|end| end > device.len()) {
            return Err(UndoError::BeyondDevice { path, what: "saved sector", offset, len, device_len: device.len() });
        }
    }
    if !force {
        if let Some(FinalState { regions, digest }) = &file.final_state {
            // Once restored (by an earlier run, or partly before a crash) the regions hold
            // what they held before the tool: only when no sector is restored yet must they
            // be as the tool left them.
            // A sector the tool left holding its original bytes (a write of what was there)
            // says nothing either way, and is not counted.
            let untouched = file.originals.iter().all(|(&offset, original)| {
                let left_as_original =
                    file.written.get(&offset).is_some_and(|states| states.contains(&self::digest(original)));
                left_as_original
                    || device.read_vec(offset, original.len() as u64).is_ok_and(|current| current != *original)
            });
            if untouched && regions_digest(device, regions)? != *digest {
                return Err(UndoError::WrittenSince { path, tool: file.header.tool.clone() });
            }
        }
        if let Some(offset) = file.first_changed_sector(device)? {
            return Err(UndoError::Changed { path, offset });
        }
        // The torn batch's write was never issued: the sectors only it names hold their
        // original bytes still. One that does not shows the write was issued, so the batch
        // was not torn by the tool's crash but damaged since, and what it saved is lost.
        for (&offset, original) in &file.torn_originals {
            if offset + original.len() as u64 <= device.len()
                && device.read_vec(offset, original.len() as u64)? != *original
            {
                return Err(UndoError::TornBatchWritten { path, offset });
            }
        }
    }
    let mut outcome = UndoOutcome { sectors: 0, bytes: 0, unchanged: 0 };
    for (&offset, original) in &file.originals {
        if device.read_vec(offset, original.len() as u64)? == *original {
            outcome.unchanged += 1;
        } else {
            outcome.sectors += 1;
            outcome.bytes += original.len() as u64;
        }
    }
    Ok(outcome)
}

/// Restores the sectors an undo file saved, on `device` (whose volume uuid, read from its
/// labels, is `volume_uuid`): checks first ([`check_undo`]; `force` skips what it lets skip,
/// and applies a damaged file's verified records only), then writes every original sector
/// and flushes. Running it again (after a crash during it, or after it finished) restores the
/// same bytes.
pub fn undo(
    file: &UndoFile,
    device: &dyn BlockDevice,
    volume_uuid: Option<[u8; 16]>,
    force: bool,
) -> Result<UndoOutcome, UndoError> {
    check_undo(file, device, volume_uuid, force)?;
    let mut outcome = UndoOutcome { sectors: 0, bytes: 0, unchanged: 0 };
    for (&offset, original) in &file.originals {
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
            assert!(
                matches!(refused, Err(UndoError::TornBatchWritten { .. } | UndoError::Changed { .. })),
                "{refused:?}"
            );
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
        let device =
            UndoDevice::new(memory.clone(), UndoLog::with_sink(Box::new(sink.clone()), Path::new("u"), nameless));
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
}
