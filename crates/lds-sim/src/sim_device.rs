//! A simulated block device (docs/reliability.md F2 to F7): reads see every write; only flushed
//! writes are durable. It records the order of writes and flushes so that crash states can
//! be built afterwards, and it injects media faults: errors on reads, writes and flushes
//! (EIO, ENOSPC, short writes), lost and misdirected writes, misdirected reads, and damage to
//! stored sectors (a flipped bit, a sector reverted to an older content).

use std::sync::{Arc, Mutex, MutexGuard};

use lds_volume::{BlockDevice, DeviceError, PageCache, ReadAt};

/// One write as the device saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// Device offset.
    pub offset: u64,
    /// The bytes.
    pub bytes: Vec<u8>,
}

/// One event: a write, or a flush making some earlier writes durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A write (its index in `writes`).
    Write(usize),
    /// A flush: the writes it made durable.
    Flush(Vec<usize>),
}

/// An injected fault. Reads, writes and flushes are each numbered from 0 in the order the
/// device receives them; a write that fails keeps its number (it is recorded with no bytes),
/// so that the writes after it keep theirs. Damage to stored sectors (F5 bit rot, F6 stale
/// sectors) is not a fault of an operation: see `SimDevice::flip_bit`, `SimDevice::damage`
/// and `SimDevice::revert_sector`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// F7: the write with this number fails with EIO and writes nothing.
    Write(usize),
    /// F7: the flush with this number fails with EIO and makes nothing durable.
    Flush(usize),
    /// F7: the write with this number fails with ENOSPC and writes nothing.
    NoSpace(usize),
    /// F7: the write `write` lands only its first `sectors` sectors (counted at the device's
    /// sector boundaries), then fails with EIO.
    ShortWrite {
        /// The write's number.
        write: usize,
        /// Sectors that land.
        sectors: u64,
    },
    /// F5: the read with this number fails with EIO.
    Read(usize),
    /// F5: every read touching `[offset, offset + len)` fails with EIO (a latent sector error).
    ReadRange {
        /// Device offset.
        offset: u64,
        /// Bytes.
        len: u64,
    },
    /// F6: the write with this number is acknowledged, and flushes after it succeed, but it
    /// never reaches the media: reads and the durable image keep the old bytes.
    LostWrite(usize),
    /// F4: the write `write` lands at `target` (sector-aligned) instead of its own offset.
    MisdirectedWrite {
        /// The write's number.
        write: usize,
        /// Where it lands.
        target: u64,
    },
    /// F4: a read of the sector at `sector` returns the sector at `source` (both offsets
    /// sector-aligned; a read covering more returns the rest correctly).
    MisdirectedRead {
        /// The sector asked for.
        sector: u64,
        /// The sector returned.
        source: u64,
    },
}

/// The sector size the simulator's volumes use unless told otherwise (`workload::layout`).
pub const SECTOR_SIZE_DEFAULT: u64 = 512;

/// Damage to the stored bytes, applied after `after_writes` writes.
#[derive(Debug, Clone)]
struct Damage {
    after_writes: usize,
    write: Write,
}

#[derive(Debug)]
struct State {
    faults: Vec<Fault>,
    flushes: usize,
    reads: usize,
    /// What reads see.
    /// What reads see; shared with `initial` until the first write or damage changes it.
    current: Arc<Vec<u8>>,
    writes: Vec<Write>,
    events: Vec<Event>,
    /// Writes not yet durable.
    pending: Vec<usize>,
    damage: Vec<Damage>,
}

/// A device in memory that records its history.
#[derive(Debug, Clone)]
pub struct SimDevice {
    state: Arc<Mutex<State>>,
    initial: Arc<Vec<u8>>,
    sector_size: u64,
}

const PATH: &str = "simulated device";

fn os_error(code: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(code)
}

fn write_error(offset: u64, len: usize, code: i32) -> DeviceError {
    DeviceError::Write { path: PATH.into(), offset, len: len as u64, source: os_error(code) }
}

const EIO: i32 = 5;
const ENOSPC: i32 = 28;

impl SimDevice {
    /// A device holding `image` (durable), with 512-byte sectors.
    pub fn new(image: Vec<u8>) -> Self {
        Self::shared(Arc::new(image))
    }

    /// A device holding `image` (durable), with 512-byte sectors, that copies it only when
    /// written to (recovering a crash image writes nothing, SPEC.md §9.5).
    pub fn shared(initial: Arc<Vec<u8>>) -> Self {
        Self {
            state: Arc::new(Mutex::new(State {
                current: Arc::clone(&initial),
                faults: Vec::new(),
                flushes: 0,
                reads: 0,
                writes: Vec::new(),
                events: Vec::new(),
                pending: Vec::new(),
                damage: Vec::new(),
            })),
            initial,
            sector_size: SECTOR_SIZE_DEFAULT,
        }
    }

    /// The same device with another sector size (for tears, short writes and misdirection).
    pub fn with_sector_size(mut self, sector_size: u64) -> Self {
        assert!(sector_size.is_power_of_two());
        self.sector_size = sector_size;
        self
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds a fault; several may be armed at once.
    pub fn inject(&self, fault: Fault) {
        self.lock().faults.push(fault);
    }

    /// Disarms every fault.
    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// F5 bit rot: flips bit `bit` (0 to 7) of the stored byte at `offset`. Reads and the
    /// durable image see it.
    pub fn flip_bit(&self, offset: u64, bit: u8) {
        let Some(&byte) = self.lock().current.get(offset as usize) else { return };
        self.damage(offset, &[byte ^ (1 << (bit % 8))]);
    }

    /// F5 or F6: the stored bytes at `offset` become `bytes`, as if the media changed them by
    /// itself. Reads and the durable image see it.
    pub fn damage(&self, offset: u64, bytes: &[u8]) {
        let mut state = self.lock();
        let start = offset as usize;
        let Some(end) = start.checked_add(bytes.len()).filter(|&end| end <= state.current.len()) else { return };
        Arc::make_mut(&mut state.current)[start..end].copy_from_slice(bytes);
        let after_writes = state.writes.len();
        state.damage.push(Damage { after_writes, write: Write { offset, bytes: bytes.to_vec() } });
    }

    /// F6 stale sector (a phantom write): the sector at `offset` reverts to the content it held
    /// `laps_back` changes ago (1: the content before its latest write). Returns false when the
    /// sector has no such history.
    pub fn revert_sector(&self, offset: u64, laps_back: usize) -> bool {
        let contents = self.sector_contents(offset);
        if laps_back == 0 {
            return false;
        }
        let Some(older) = contents.len().checked_sub(laps_back + 1) else { return false };
        self.damage(offset - offset % self.sector_size, &contents[older]);
        true
    }

    /// The contents the sector holding `offset` has had, oldest first, as reads saw them: the
    /// initial image, then after each write or damage that changed it.
    pub fn sector_contents(&self, offset: u64) -> Vec<Vec<u8>> {
        let state = self.lock();
        let changes = in_order(&state, |_| true);
        sector_contents_of(&self.initial, changes.into_iter(), offset, self.sector_size)
    }

    /// The durable image now: the initial image with every flushed write applied, and the
    /// damage done to the media in between.
    pub fn durable(&self, sector_size: u64) -> Vec<u8> {
        let state = self.lock();
        let mut image = self.initial.as_ref().clone();
        for write in in_order(&state, |index| !state.pending.contains(&index)) {
            apply(&mut image, write, sector_size, None);
        }
        image
    }

    /// Events so far.
    pub fn event_count(&self) -> usize {
        self.lock().events.len()
    }

    /// Writes received so far, failed ones included.
    pub fn write_count(&self) -> usize {
        self.lock().writes.len()
    }

    /// Flushes received so far, failed ones included.
    pub fn flush_count(&self) -> usize {
        self.lock().flushes
    }

    /// Reads received so far, failed ones included.
    pub fn read_count(&self) -> usize {
        self.lock().reads
    }

    /// The recorded history: the initial image, the writes and the events.
    pub fn history(&self) -> History {
        let state = self.lock();
        History { initial: Arc::clone(&self.initial), writes: state.writes.clone(), events: state.events.clone() }
    }

    /// What reads see now.
    pub fn current(&self) -> Vec<u8> {
        self.lock().current.as_ref().clone()
    }

    fn flush_where(&self, covered: impl Fn(&Write) -> bool) -> Result<(), DeviceError> {
        let mut state = self.lock();
        let number = state.flushes;
        state.flushes += 1;
        if state.faults.contains(&Fault::Flush(number)) {
            return Err(DeviceError::Flush { path: PATH.into(), source: os_error(EIO) });
        }
        let (durable, still): (Vec<usize>, Vec<usize>) =
            state.pending.iter().partition(|&&index| covered(&state.writes[index]));
        state.pending = still;
        state.events.push(Event::Flush(durable));
        Ok(())
    }
}

/// The writes selected by `keep` (by number) and every damage, in the order they happened.
fn in_order(state: &State, keep: impl Fn(usize) -> bool) -> Vec<&Write> {
    let mut changes = Vec::with_capacity(state.writes.len() + state.damage.len());
    let mut damage = state.damage.iter().peekable();
    for (index, write) in state.writes.iter().enumerate() {
        while let Some(done) = damage.next_if(|done| done.after_writes <= index) {
            changes.push(&done.write);
        }
        if keep(index) {
            changes.push(write);
        }
    }
    changes.extend(damage.map(|done| &done.write));
    changes
}

/// What one write does, given the armed faults.
enum WriteOutcome {
    /// Lands whole at this offset.
    Land(u64),
    /// Lands its first bytes, then fails.
    Short(usize),
    /// Fails, writing nothing.
    Fail(i32),
    /// Acknowledged, never lands.
    Lost,
}

fn write_outcome(faults: &[Fault], number: usize, offset: u64, len: usize, sector_size: u64) -> WriteOutcome {
    for fault in faults {
        match *fault {
            Fault::Write(at) if at == number => return WriteOutcome::Fail(EIO),
            Fault::NoSpace(at) if at == number => return WriteOutcome::Fail(ENOSPC),
            Fault::LostWrite(at) if at == number => return WriteOutcome::Lost,
            Fault::ShortWrite { write, sectors } if write == number => {
                let boundary = (offset / sector_size + sectors) * sector_size;
                return WriteOutcome::Short((boundary.saturating_sub(offset) as usize).min(len));
            }
            Fault::MisdirectedWrite { write, target } if write == number => {
                return WriteOutcome::Land(target + offset % sector_size);
            }
            _ => {}
        }
    }
    WriteOutcome::Land(offset)
}

fn out_of_range(offset: u64, len: u64) -> DeviceError {
    DeviceError::Read {
        path: PATH.into(),
        offset,
        len,
        source: std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
    }
}

impl ReadAt for SimDevice {
    fn name(&self) -> &std::path::Path {
        std::path::Path::new(PATH)
    }

    fn len(&self) -> u64 {
        self.lock().current.len() as u64
    }

    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        let mut state = self.lock();
        let number = state.reads;
        state.reads += 1;
        let len = buffer.len() as u64;
        let start = offset as usize;
        let end = start
            .checked_add(buffer.len())
            .filter(|&end| end <= state.current.len())
            .ok_or_else(|| out_of_range(offset, len))?;
        let failed = state.faults.iter().any(|fault| match *fault {
            Fault::Read(at) => at == number,
            Fault::ReadRange { offset: bad, len: bad_len } => bad < offset + len && offset < bad + bad_len,
            _ => false,
        });
        if failed {
            return Err(DeviceError::Read { path: PATH.into(), offset, len, source: os_error(EIO) });
        }
        buffer.copy_from_slice(&state.current[start..end]);
        for fault in &state.faults {
            let Fault::MisdirectedRead { sector, source } = *fault else { continue };
            // The part of the read inside the misdirected sector comes from the source sector.
            let low = sector.max(offset);
            let high = (sector + self.sector_size).min(offset + len);
            let source_end = source + self.sector_size;
            if low >= high || source_end > state.current.len() as u64 {
                continue;
            }
            let from = (source + (low - sector)) as usize;
            let count = (high - low) as usize;
            buffer[(low - offset) as usize..(high - offset) as usize]
                .copy_from_slice(&state.current[from..from + count]);
        }
        Ok(())
    }
}

impl BlockDevice for SimDevice {
    fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        let mut state = self.lock();
        let number = state.writes.len();
        let outcome = write_outcome(&state.faults, number, offset, bytes.len(), self.sector_size);
        let (target, landed, result) = match outcome {
            WriteOutcome::Land(target) => (target, bytes, Ok(())),
            WriteOutcome::Short(count) => (offset, &bytes[..count], Err(write_error(offset, bytes.len(), EIO))),
            WriteOutcome::Fail(code) => {
                // Counted, so that later writes keep their numbers; nothing is written.
                state.writes.push(Write { offset, bytes: Vec::new() });
                return Err(write_error(offset, bytes.len(), code));
            }
            WriteOutcome::Lost => {
                state.writes.push(Write { offset, bytes: Vec::new() });
                return Ok(());
            }
        };
        let start = target as usize;
        let end = start
            .checked_add(landed.len())
            .filter(|&end| end <= state.current.len())
            .ok_or_else(|| out_of_range(target, landed.len() as u64))?;
        Arc::make_mut(&mut state.current)[start..end].copy_from_slice(landed);
        state.writes.push(Write { offset: target, bytes: landed.to_vec() });
        state.pending.push(number);
        state.events.push(Event::Write(number));
        result
    }

    fn flush(&self) -> Result<(), DeviceError> {
        self.flush_where(|_| true)
    }

    fn flush_range(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        // Like sync_file_range on a block device: only the writes inside the range.
        self.flush_where(|write| write.offset < offset + len && offset < write.offset + write.bytes.len() as u64)
    }

    fn page_cache(&self) -> Option<&dyn PageCache> {
        Some(self)
    }
}

/// A flush that leaves the excluded range's writes pending, as the page cache does.
impl PageCache for SimDevice {
    fn flush_except(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        // Only the writes wholly outside the range.
        self.flush_where(|write| !(write.offset < offset + len && offset < write.offset + write.bytes.len() as u64))
    }
}

/// A device's recorded history.
#[derive(Debug, Clone)]
pub struct History {
    /// The image before the first write.
    pub initial: Arc<Vec<u8>>,
    /// Every write.
    pub writes: Vec<Write>,
    /// Writes and flushes in order.
    pub events: Vec<Event>,
}

impl History {
    /// The contents the sector holding `offset` has had over the writes, oldest first (the
    /// initial image first), each distinct from the one before.
    pub fn sector_contents(&self, offset: u64, sector_size: u64) -> Vec<Vec<u8>> {
        sector_contents_of(&self.initial, self.writes.iter(), offset, sector_size)
    }
}

fn sector_contents_of<'a>(
    initial: &[u8],
    writes: impl Iterator<Item = &'a Write>,
    offset: u64,
    sector_size: u64,
) -> Vec<Vec<u8>> {
    let start = offset - offset % sector_size;
    let Some(first) = initial.get(start as usize..(start + sector_size) as usize) else { return Vec::new() };
    let mut sector = first.to_vec();
    let mut contents = vec![sector.clone()];
    for write in writes {
        let write_end = write.offset + write.bytes.len() as u64;
        let low = write.offset.max(start);
        let high = write_end.min(start + sector_size);
        if low >= high {
            continue;
        }
        sector[(low - start) as usize..(high - start) as usize]
            .copy_from_slice(&write.bytes[(low - write.offset) as usize..(high - write.offset) as usize]);
        if contents.last() != Some(&sector) {
            contents.push(sector.clone());
        }
    }
    contents
}

/// Applies a write to an image, or only its first `sectors` sectors (a torn write).
pub fn apply(image: &mut [u8], write: &Write, sector_size: u64, sectors: Option<u64>) {
    let start = write.offset as usize;
    let len = match sectors {
        None => write.bytes.len(),
        Some(count) => {
            // The write's first sector may start mid-sector: tear at the device's sector
            // boundaries, not the write's.
            let boundary = (write.offset / sector_size + count) * sector_size;
            (boundary.saturating_sub(write.offset) as usize).min(write.bytes.len())
        }
    };
    image[start..start + len].copy_from_slice(&write.bytes[..len]);
}

/// Sectors a write touches.
pub fn sectors_touched(write: &Write, sector_size: u64) -> u64 {
    let first = write.offset / sector_size;
    let last = (write.offset + write.bytes.len() as u64).div_ceil(sector_size);
    last - first
}
