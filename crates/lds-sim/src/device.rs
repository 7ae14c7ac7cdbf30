//! A simulated block device (RELIABILITY.md F2, F3): reads see every write; only flushed
//! writes are durable. It records the order of writes and flushes so that crash states can
//! be built afterwards.

use std::sync::{Arc, Mutex, MutexGuard};

use lds_engine::device::{BlockDevice, DeviceError};

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

/// An injected fault (RELIABILITY.md F7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The write with this index (counting from 0) fails with EIO and writes nothing.
    Write(usize),
    /// The flush with this index fails with EIO and makes nothing durable.
    Flush(usize),
}

#[derive(Debug)]
struct State {
    fault: Option<Fault>,
    flushes: usize,
    /// What reads see.
    current: Vec<u8>,
    writes: Vec<Write>,
    events: Vec<Event>,
    /// Writes not yet durable.
    pending: Vec<usize>,
}

/// A device in memory that records its history.
#[derive(Debug, Clone)]
pub struct SimDevice {
    state: Arc<Mutex<State>>,
    initial: Arc<Vec<u8>>,
}

impl SimDevice {
    /// A device holding `image` (durable).
    pub fn new(image: Vec<u8>) -> Self {
        Self {
            initial: Arc::new(image.clone()),
            state: Arc::new(Mutex::new(State {
                fault: None,
                flushes: 0,
                current: image,
                writes: Vec::new(),
                events: Vec::new(),
                pending: Vec::new(),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Makes one write or flush fail with EIO.
    pub fn inject(&self, fault: Fault) {
        self.lock().fault = Some(fault);
    }

    /// The durable image now: the initial image with every flushed write applied.
    pub fn durable(&self, sector_size: u64) -> Vec<u8> {
        let state = self.lock();
        let mut image = self.initial.as_ref().clone();
        for (index, write) in state.writes.iter().enumerate() {
            if !state.pending.contains(&index) {
                apply(&mut image, write, sector_size, None);
            }
        }
        image
    }

    /// Events so far.
    pub fn event_count(&self) -> usize {
        self.lock().events.len()
    }

    /// The recorded history: the initial image, the writes and the events.
    pub fn history(&self) -> History {
        let state = self.lock();
        History { initial: Arc::clone(&self.initial), writes: state.writes.clone(), events: state.events.clone() }
    }

    /// What reads see now.
    pub fn current(&self) -> Vec<u8> {
        self.lock().current.clone()
    }

    fn flush_where(&self, covered: impl Fn(&Write) -> bool) -> Result<(), DeviceError> {
        let mut state = self.lock();
        let number = state.flushes;
        state.flushes += 1;
        if state.fault == Some(Fault::Flush(number)) {
            return Err(DeviceError::Flush {
                path: "simulated device".into(),
                source: std::io::Error::from_raw_os_error(5),
            });
        }
        let (durable, still): (Vec<usize>, Vec<usize>) =
            state.pending.iter().partition(|&&index| covered(&state.writes[index]));
        state.pending = still;
        state.events.push(Event::Flush(durable));
        Ok(())
    }
}

fn out_of_range(offset: u64, len: u64) -> DeviceError {
    DeviceError::Read {
        path: "simulated device".into(),
        offset,
        len,
        source: std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
    }
}

impl BlockDevice for SimDevice {
    fn len(&self) -> u64 {
        self.lock().current.len() as u64
    }

    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), DeviceError> {
        let state = self.lock();
        let start = offset as usize;
        let end = start
            .checked_add(buffer.len())
            .filter(|&end| end <= state.current.len())
            .ok_or_else(|| out_of_range(offset, buffer.len() as u64))?;
        buffer.copy_from_slice(&state.current[start..end]);
        Ok(())
    }

    fn write_at(&self, offset: u64, bytes: &[u8]) -> Result<(), DeviceError> {
        let mut state = self.lock();
        if state.fault == Some(Fault::Write(state.writes.len())) {
            // Counted, so that later writes keep their indices; nothing is written.
            state.writes.push(Write { offset, bytes: Vec::new() });
            return Err(DeviceError::Write {
                path: "simulated device".into(),
                offset,
                len: bytes.len() as u64,
                source: std::io::Error::from_raw_os_error(5),
            });
        }
        let start = offset as usize;
        let end = start
            .checked_add(bytes.len())
            .filter(|&end| end <= state.current.len())
            .ok_or_else(|| out_of_range(offset, bytes.len() as u64))?;
        state.current[start..end].copy_from_slice(bytes);
        let index = state.writes.len();
        state.writes.push(Write { offset, bytes: bytes.to_vec() });
        state.pending.push(index);
        state.events.push(Event::Write(index));
        Ok(())
    }

    fn flush(&self) -> Result<(), DeviceError> {
        self.flush_where(|_| true)
    }

    fn flush_range(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        // Like sync_file_range on a block device: only the writes inside the range.
        self.flush_where(|write| write.offset < offset + len && offset < write.offset + write.bytes.len() as u64)
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
