//! Undo files (docs/undo-file.md): a healthy one written by the real undo writer
//! (`lds_volume::undo::UndoLog`), its fields, and resealing one after a field changed.

use std::path::Path;
use std::sync::Mutex;

use lds_format::codec::crc32c;
use lds_format::label::Label;
use lds_volume::undo::{MemorySink, UndoHeader, UndoLog};
use lds_volume::{BlockDevice, DeviceError, ReadAt};

use super::{read_le, CaseError, FieldRef, Seal, Variant, Volume};

const HEADER_LEN: usize = 128;
const STATE_AT: usize = 128;
const FIRST_BATCH: usize = 196;
const BATCH_HEADER_LEN: usize = 60;
const RECORD_HEADER_LEN: usize = 16;
const WRITTEN_PAYLOAD: usize = 16;
const KIND_ORIGINAL: u8 = 1;
const KIND_WRITTEN: u8 = 2;
const KIND_FINAL: u8 = 3;
/// Records read at most in one batch while resealing: a count no file of the generator
/// reaches, so that a hostile count does not make the loop run long.
const RECORDS_MAX: u64 = 1 << 16;

/// A device in memory for the undo writer.
struct Memory {
    bytes: Mutex<Vec<u8>>,
}

impl ReadAt for Memory {
    fn name(&self) -> &Path {
        Path::new("memory")
    }
    fn len(&self) -> u64 {
        self.bytes.lock().map_or(0, |bytes| bytes.len() as u64)
    }
    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        let bytes = self.bytes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let start = offset as usize;
        match bytes.get(start..start + buffer.len()) {
            Some(source) => {
                buffer.copy_from_slice(source);
                Ok(())
            }
            None => Err(DeviceError::Read {
                path: "memory".into(),
                offset,
                len: buffer.len() as u64,
                source: std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            }),
        }
    }
}

impl BlockDevice for Memory {
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        let mut bytes = self.bytes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let start = offset as usize;
        if let Some(target) = bytes.get_mut(start..start + data.len()) {
            target.copy_from_slice(data);
        }
        Ok(())
    }
    fn flush(&self) -> Result<(), DeviceError> {
        Ok(())
    }
    fn flush_range(&self, _offset: u64, _len: u64) -> Result<(), DeviceError> {
        Ok(())
    }
}

/// The volume after three writes to `before` (the backup label rewritten as it is, a pattern
/// over a sector boundary in the last slot, zeros over the version log's last sector), each
/// saved by the real undo writer first, and the finished undo file.
pub fn make(before: &[u8]) -> Result<(Vec<u8>, Vec<u8>), CaseError> {
    let label = Label::decode(before.get(..lds_format::label::LABEL_LEN).unwrap_or_default(), 0)
        .map_err(|error| CaseError(format!("undo base: {error}")))?;
    let g = label.geometry;
    let sector = g.sector();
    let device = Memory { bytes: Mutex::new(before.to_vec()) };
    let header = UndoHeader {
        volume_uuid: g.volume_uuid,
        device_len: before.len() as u64,
        sector_size: g.sector_size,
        tool: "repair".into(),
        // A fixed time: the same bytes every run (docs/reliability.md I8).
        created: 1_700_000_000,
    };
    let sink = MemorySink::default();
    let mut log = UndoLog::with_sink(Box::new(sink.clone()), Path::new("hostile.lds-undo"), header);
    let backup_label = g.ofs_backup_label();
    let label_sector = before[backup_label as usize..(backup_label + sector) as usize].to_vec();
    let last_slot = g.slot_offset(g.num_slots - 1);
    let (vlog, vlog_len) = g.log_area(lds_format::geometry::LogKind::Version, 0);
    let writes: Vec<(u64, Vec<u8>)> = vec![
        (backup_label, label_sector),
        (last_slot + sector / 2, vec![0xa5; sector as usize]),
        (vlog + vlog_len - sector, vec![0; sector as usize]),
    ];
    let error = |error: lds_volume::undo::UndoError| CaseError(format!("undo base: {error}"));
    for (offset, bytes) in &writes {
        log.before_write(&device, *offset, bytes).map_err(error)?;
        device.write_at(*offset, bytes).map_err(|error| CaseError(error.to_string()))?;
    }
    let (blog, blog_len) = g.log_area(lds_format::geometry::LogKind::Backup, 0);
    let regions = [(0, sector), (backup_label, sector), (vlog, vlog_len), (blog, blog_len)];
    log.finish(&device, &regions).map_err(error)?;
    let after = device.bytes.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner);
    let file = sink.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    Ok((after, file))
}

/// The fields of an undo file: header, state block, the first and last batches' headers and
/// their first records.
pub fn fields(bytes: &[u8], file: usize) -> Vec<FieldRef> {
    let seals = vec![Seal::Undo { file }];
    let len = bytes.len() as u64;
    let sector = read_le(bytes, 12, 4);
    let device_len = read_le(bytes, 16, 8);
    let mut w = super::walker::Walker::new(bytes, file, 0, bytes.len(), seals.clone());
    let _ = (|| {
        w.magic("header.magic", 8)?;
        w.num("header.version", 4, &[(Variant::PastEnd, 3)])?;
        w.num("header.sector_size", 4, &[(Variant::PastEnd, 1 << 17), (Variant::Overlap, sector / 2)])?;
        w.num(
            "header.device_len",
            8,
            &[(Variant::PastEnd, device_len + sector), (Variant::Overlap, device_len - sector)],
        )?;
        w.uuid("header.volume_uuid", &[(Variant::Other, super::walker::FOREIGN_UUID)])?;
        w.num("header.created", 8, &[])?;
        let tool_len = read_le(bytes, 48, 1);
        w.num("header.tool_len", 1, &[(Variant::PastEnd, 73)])?;
        w.reserved("header.reserved", 3)?;
        w.skip(tool_len.min(72) as usize)?;
        w.reserved("header.tool_padding", 72 - tool_len.min(72) as usize)?;
        w.skip(4)?;
        w.num("state.state", 4, &[(Variant::Unknown, 3), (Variant::Cycle, 1)])?;
        w.reserved("state.reserved", 4)?;
        w.num("state.len", 8, &[(Variant::PastEnd, len + 1), (Variant::Overlap, len - 1)])?;
        let batches = read_le(bytes, STATE_AT + 16, 8);
        w.num("state.batches", 8, &[(Variant::PastEnd, batches + 1)])?;
        let records = read_le(bytes, STATE_AT + 24, 8);
        w.num("state.records", 8, &[(Variant::PastEnd, records + 1)])
    })();
    let mut out = w.finish();
    // The batches: the first and the last (the FINAL record's).
    let starts = batch_starts(bytes);
    let last = starts.len().saturating_sub(1);
    for (number, &start) in starts.iter().enumerate() {
        if number != 0 && number != last {
            continue;
        }
        let p = if number == 0 { "batch[0]".to_string() } else { "batch[last]".to_string() };
        let records_len = read_le(bytes, start + 16, 8) as usize;
        let end = (start + BATCH_HEADER_LEN + records_len).min(bytes.len());
        let mut w = super::walker::Walker::new(bytes, file, start, end, seals.clone());
        let _ = (|| {
            w.magic(&format!("{p}.magic"), 4)?;
            let count = read_le(bytes, start + 4, 4);
            w.num(&format!("{p}.count"), 4, &[(Variant::PastEnd, count + 1)])?;
            let cycle = if number == 0 { 1 } else { (number as u64).saturating_sub(1) };
            w.num(&format!("{p}.number"), 8, &[(Variant::Cycle, cycle), (Variant::PastEnd, number as u64 + 1)])?;
            w.num(
                &format!("{p}.len_records"),
                8,
                &[(Variant::PastEnd, len), (Variant::Overlap, records_len as u64 + 1)],
            )?;
            w.skip(36)?;
            // The first record.
            let kind = read_le(bytes, w_at(start), 1);
            w.num(
                &format!("{p}.record[0].kind"),
                1,
                &[(Variant::Unknown, 4), (Variant::Overlap, u64::from(KIND_WRITTEN))],
            )?;
            w.reserved(&format!("{p}.record[0].reserved"), 3)?;
            let record_len = read_le(bytes, w_at(start) + 4, 4);
            w.num(
                &format!("{p}.record[0].len"),
                4,
                &[(Variant::PastEnd, sector + 1), (Variant::Overlap, record_len + 1)],
            )?;
            let other = other_record_offset(bytes, &starts, read_le(bytes, w_at(start) + 8, 8));
            let offset_extras = [(Variant::PastEnd, device_len), (Variant::Overlap, other), (Variant::Cycle, 1)];
            w.num(&format!("{p}.record[0].offset"), 8, &offset_extras)?;
            if kind == u64::from(KIND_FINAL) {
                let regions = read_le(bytes, w_at(start) + RECORD_HEADER_LEN, 4);
                w.num(&format!("{p}.final.num_regions"), 4, &[(Variant::PastEnd, regions + 1)])?;
                w.num(&format!("{p}.final.region[0].offset"), 8, &[(Variant::PastEnd, device_len)])?;
                w.num(&format!("{p}.final.region[0].len"), 8, &[(Variant::PastEnd, device_len + 1)])?;
            }
            Some(())
        })();
        out.extend(w.finish());
    }
    out
}

/// The first record of the batch at `start`.
fn w_at(start: usize) -> usize {
    start + BATCH_HEADER_LEN
}

/// A sector offset of another record than the one at `offset` (the first ORIGINAL record of
/// another sector).
fn other_record_offset(bytes: &[u8], starts: &[usize], offset: u64) -> u64 {
    starts
        .iter()
        .map(|&start| read_le(bytes, w_at(start) + 8, 8))
        .find(|&other| other != offset && other != 0)
        .unwrap_or(offset.wrapping_add(read_le(bytes, 12, 4)))
}

/// Where each batch starts, by the record lengths the batch headers give (bounded by the
/// file).
fn batch_starts(bytes: &[u8]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut at = FIRST_BATCH;
    while at + BATCH_HEADER_LEN <= bytes.len() {
        starts.push(at);
        let len = read_le(bytes, at + 16, 8) as usize;
        match at.checked_add(BATCH_HEADER_LEN).and_then(|end| end.checked_add(len)) {
            Some(next) if next > at => at = next,
            _ => break,
        }
    }
    starts
}

/// Writes `bytes` at an offset of a file of the volume (a seal's guarded write).
pub type Put<'a> = dyn Fn(&mut Volume, usize, usize, &[u8]) + 'a;

/// Recomputes every check of the undo file at `file` (docs/undo-file.md), in the order a
/// writer computes them: each record's crc32c (a FINAL record's digest first, over the
/// volume's regions), the header's crc32c, each batch's chain digest and crc32c, and, in a
/// finished file, the state block's length, counts and last chain digest, then its crc32c.
/// `put` writes (and keeps off the changed field).
pub fn reseal(volume: &mut Volume, file: usize, put: &Put<'_>) {
    let header_crc = crc32c(&volume.files[file][..HEADER_LEN - 4]).to_le_bytes();
    put(volume, file, HEADER_LEN - 4, &header_crc);
    let mut chain = *blake3::hash(&volume.files[file][..HEADER_LEN]).as_bytes();
    let starts = batch_starts(&volume.files[file]);
    let mut total_records = 0u64;
    for &start in &starts {
        let bytes = &volume.files[file];
        let count = read_le(bytes, start + 4, 4).min(RECORDS_MAX);
        let len = read_le(bytes, start + 16, 8) as usize;
        let records_end = (start + BATCH_HEADER_LEN).saturating_add(len).min(bytes.len());
        let mut at = start + BATCH_HEADER_LEN;
        for _ in 0..count {
            let bytes = &volume.files[file];
            if at + RECORD_HEADER_LEN > records_end {
                break;
            }
            let kind = bytes[at];
            let record_len = read_le(bytes, at + 4, 4) as usize;
            let payload = match kind {
                KIND_WRITTEN => WRITTEN_PAYLOAD,
                KIND_ORIGINAL | KIND_FINAL => record_len,
                _ => break,
            };
            let crc_at = at + RECORD_HEADER_LEN + payload;
            if crc_at + 4 > records_end {
                break;
            }
            if kind == KIND_FINAL {
                seal_final(volume, file, at + RECORD_HEADER_LEN, payload, put);
            }
            let crc = crc32c(&volume.files[file][at..crc_at]).to_le_bytes();
            put(volume, file, crc_at, &crc);
            at = crc_at + 4;
        }
        total_records += read_le(&volume.files[file], start + 4, 4);
        let bytes = &volume.files[file];
        let records = &bytes[(start + BATCH_HEADER_LEN).min(records_end)..records_end];
        let mut hasher = blake3::Hasher::new();
        hasher.update(&chain);
        hasher.update(&bytes[start..start + 24]);
        hasher.update(records);
        chain = *hasher.finalize().as_bytes();
        put(volume, file, start + 24, &chain);
        let crc = crc32c(&volume.files[file][start..start + 56]).to_le_bytes();
        put(volume, file, start + 56, &crc);
    }
    if read_le(&volume.files[file], STATE_AT, 4) == 2 {
        let len = volume.files[file].len() as u64;
        put(volume, file, STATE_AT + 8, &len.to_le_bytes());
        put(volume, file, STATE_AT + 16, &(starts.len() as u64).to_le_bytes());
        put(volume, file, STATE_AT + 24, &total_records.to_le_bytes());
        put(volume, file, STATE_AT + 32, &chain);
    }
    let crc = crc32c(&volume.files[file][STATE_AT..STATE_AT + 64]).to_le_bytes();
    put(volume, file, STATE_AT + 64, &crc);
}

/// A FINAL record's digest: blake3 of the regions it lists, read from the first device.
fn seal_final(volume: &mut Volume, file: usize, at: usize, len: usize, put: &Put<'_>) {
    let bytes = &volume.files[file];
    let regions = read_le(bytes, at, 4) as usize;
    if len != 4 + 16 * regions + 32 || at + len > bytes.len() {
        return;
    }
    let device = &volume.files[0];
    let mut hasher = blake3::Hasher::new();
    for index in 0..regions {
        let offset = read_le(bytes, at + 4 + 16 * index, 8) as usize;
        let region = read_le(bytes, at + 12 + 16 * index, 8) as usize;
        let Some(part) = offset.checked_add(region).and_then(|end| device.get(offset..end)) else { return };
        hasher.update(part);
    }
    let digest = *hasher.finalize().as_bytes();
    put(volume, file, at + len - 32, &digest);
}
