//! Reading an undo file back: verifying it whole (the batch chain, the state block, a torn
//! last batch of a tool that never finished), checking the volume against it, and undoing.

use super::*;

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
    pub(super) fn at(offset: u64, reason: impl Into<String>) -> Self {
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
            let torn = next_batch_header(bytes, at, number.saturating_add(1));
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
        // A header may carry any number (the resync above takes it): saturate, never wrap.
        number = number.saturating_add(1);
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
