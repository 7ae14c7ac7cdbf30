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
    /// Removes what this sink created (a file it made), when it created anything; the
    /// default keeps everything.
    fn discard(&mut self) -> std::io::Result<bool> {
        Ok(false)
    }
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

mod read;
#[cfg(test)]
mod tests;
mod write;

pub use read::*;
pub use write::*;
