//! Guards the simulated device's media faults (docs/reliability.md F4 to F7): each one does to
//! reads, writes and the durable image exactly what its documentation says, so that the tests
//! built on them inject what they claim to.

use lds_sim::sim_device::{Fault, SimDevice};
use lds_volume::{BlockDevice, DeviceError, ReadAt};

const SECTOR: usize = 512;

fn device() -> SimDevice {
    SimDevice::new(vec![0u8; 8 * SECTOR])
}

fn read(device: &SimDevice, offset: usize, len: usize) -> Result<Vec<u8>, DeviceError> {
    device.read_vec(offset as u64, len as u64)
}

fn os_error(error: &DeviceError) -> Option<i32> {
    match error {
        DeviceError::Write { source, .. } | DeviceError::Read { source, .. } | DeviceError::Flush { source, .. } => {
            source.raw_os_error()
        }
        _ => None,
    }
}

#[test]
fn eio_and_enospc_on_writes_write_nothing_and_keep_numbers() {
    let device = device();
    device.inject(Fault::Write(0));
    device.inject(Fault::NoSpace(1));
    let first = device.write_at(0, &[1; SECTOR]).err();
    let second = device.write_at(0, &[2; SECTOR]).err();
    assert_eq!(first.as_ref().and_then(os_error), Some(5), "{first:?}");
    assert_eq!(second.as_ref().and_then(os_error), Some(28), "{second:?}");
    let message = second.map(|error| error.to_string()).unwrap_or_default();
    assert!(message.contains("at offset 0") && message.contains("No space left"), "{message}");
    assert!(read(&device, 0, SECTOR).is_ok_and(|bytes| bytes == [0; SECTOR]));
    // The third write is number 2 and lands.
    assert!(device.write_at(0, &[3; SECTOR]).is_ok());
    assert_eq!(device.write_count(), 3);
    assert!(read(&device, 0, SECTOR).is_ok_and(|bytes| bytes == [3; SECTOR]));
}

#[test]
fn a_short_write_lands_its_first_sectors_then_fails() {
    let device = device();
    device.inject(Fault::ShortWrite { write: 0, sectors: 2 });
    let result = device.write_at(SECTOR as u64, &[7; 4 * SECTOR]);
    assert!(result.is_err());
    let bytes = read(&device, 0, 6 * SECTOR).unwrap_or_default();
    assert_eq!(bytes[..SECTOR], [0; SECTOR]);
    assert_eq!(bytes[SECTOR..3 * SECTOR], [7; 2 * SECTOR]);
    assert_eq!(bytes[3 * SECTOR..], [0; 3 * SECTOR]);
    // The part that landed is not durable until a flush.
    assert_eq!(device.durable(SECTOR as u64), vec![0; 8 * SECTOR]);
    assert!(device.flush().is_ok());
    assert_eq!(device.durable(SECTOR as u64)[SECTOR..3 * SECTOR], [7; 2 * SECTOR]);
}

#[test]
fn read_errors_by_number_and_by_range() {
    let device = device();
    device.inject(Fault::Read(1));
    device.inject(Fault::ReadRange { offset: 5 * SECTOR as u64, len: 1 });
    assert!(read(&device, 0, SECTOR).is_ok());
    assert!(read(&device, 0, SECTOR).is_err(), "the second read fails");
    assert!(read(&device, 0, SECTOR).is_ok());
    assert!(read(&device, 4 * SECTOR, 2 * SECTOR).is_err(), "a read touching the bad sector fails");
    assert!(read(&device, 5 * SECTOR + 1, 1).is_ok(), "the bad range is one byte");
    assert_eq!(device.read_count(), 5);
}

#[test]
fn a_lost_write_is_acknowledged_and_flushed_but_never_lands() {
    let device = device();
    device.inject(Fault::LostWrite(1));
    assert!(device.write_at(0, &[1; SECTOR]).is_ok());
    assert!(device.write_at(SECTOR as u64, &[2; SECTOR]).is_ok());
    assert!(device.flush().is_ok());
    let bytes = read(&device, 0, 2 * SECTOR).unwrap_or_default();
    assert_eq!(bytes[..SECTOR], [1; SECTOR]);
    assert_eq!(bytes[SECTOR..], [0; SECTOR]);
    assert_eq!(device.durable(SECTOR as u64)[SECTOR..2 * SECTOR], [0; SECTOR]);
}

#[test]
fn misdirected_writes_and_reads() {
    let device = device();
    device.inject(Fault::MisdirectedWrite { write: 0, target: 6 * SECTOR as u64 });
    assert!(device.write_at(SECTOR as u64, &[9; SECTOR]).is_ok());
    let bytes = read(&device, 0, 8 * SECTOR).unwrap_or_default();
    assert_eq!(bytes[SECTOR..2 * SECTOR], [0; SECTOR], "the intended sector is untouched");
    assert_eq!(bytes[6 * SECTOR..7 * SECTOR], [9; SECTOR], "the write landed elsewhere");
    device.inject(Fault::MisdirectedRead { sector: 2 * SECTOR as u64, source: 6 * SECTOR as u64 });
    let bytes = read(&device, SECTOR + 100, 2 * SECTOR).unwrap_or_default();
    assert_eq!(bytes[..SECTOR - 100], [0; SECTOR - 100]);
    assert_eq!(bytes[SECTOR - 100..2 * SECTOR - 100], [9; SECTOR], "sector 2 reads as sector 6");
    assert_eq!(bytes[2 * SECTOR - 100..], [0; 100]);
}

#[test]
fn bit_rot_and_stale_sectors_reach_reads_and_the_durable_image() {
    let device = device();
    for lap in 1..=3u8 {
        assert!(device.write_at(0, &[lap; SECTOR]).is_ok());
        assert!(device.flush().is_ok());
    }
    assert!(device.write_at(SECTOR as u64, &[4; SECTOR]).is_ok());
    device.flip_bit(10, 1);
    let bytes = read(&device, 0, SECTOR).unwrap_or_default();
    assert_eq!(bytes[10], 3 ^ 2);
    assert_eq!(device.durable(SECTOR as u64)[10], 3 ^ 2);
    // Contents of sector 0: zeros, 1, 2, 3, 3 with a flipped bit.
    assert_eq!(device.sector_contents(0).len(), 5);
    assert!(device.revert_sector(0, 3), "back three changes: the first lap");
    assert!(read(&device, 0, SECTOR).is_ok_and(|bytes| bytes == [1; SECTOR]));
    assert_eq!(device.durable(SECTOR as u64)[..SECTOR], [1; SECTOR]);
    // The unflushed write to sector 1 is not durable; the damage to sector 0 is.
    assert_eq!(device.durable(SECTOR as u64)[SECTOR..2 * SECTOR], [0; SECTOR]);
    assert!(!device.revert_sector(7 * SECTOR as u64, 1), "sector 7 has no history");
    assert!(!device.revert_sector(0, 0));
}

#[test]
fn damage_before_a_later_write_is_overwritten_by_it() {
    let device = device();
    device.damage(0, &[5; SECTOR]);
    assert!(device.write_at(0, &[6; SECTOR]).is_ok());
    assert!(device.flush().is_ok());
    assert_eq!(device.durable(SECTOR as u64)[..SECTOR], [6; SECTOR]);
    assert!(read(&device, 0, SECTOR).is_ok_and(|bytes| bytes == [6; SECTOR]));
}
