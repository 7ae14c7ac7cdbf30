//! Guards how a volume of several devices is read through the narrow block device traits
//! (issue 40): its labels come from its first device (`ReadAt::member`), not from its address
//! space; a wrapper that forwards `member` (the undo device) reads the same; and the checker
//! reads every other device's labels through it, reporting a damaged one (fsck 108).

use std::path::Path;
use std::sync::Arc;

use lds_check::{check, CheckOptions, Code};
use lds_format::algorithms::image::ImageBuilder;
use lds_format::geometry::{plan_layout, LayoutRequest};
use lds_format::label::Label;
use lds_sim::device_changes::{apply, member_len, volume_of, Change};
use lds_sim::sim_device::SimDevice;
use lds_volume::labels::read_device_labels;
use lds_volume::members::member_labels;
use lds_volume::undo::{MemorySink, UndoDevice, UndoHeader, UndoLog};
use lds_volume::{read_labels, BlockDevice, ReadAt};

/// A volume of two devices (windows of one simulated device) and the devices' lengths.
fn two_devices() -> (SimDevice, Vec<u64>, Label) {
    let request = LayoutRequest { volume_len: 32 << 20, ..LayoutRequest::default() };
    let geometry = plan_layout(&request, [0x41; 16]).unwrap_or_else(|error| panic!("{error}"));
    let label = Label::new(geometry, "two devices");
    let mut image = ImageBuilder::format(label.clone()).bytes;
    let mut sizes = vec![image.len() as u64];
    let len = member_len(&label, 8);
    sizes.push(len);
    image.resize(image.len() + len as usize, 0);
    let device = SimDevice::new(image);
    apply(&device, &sizes, Change::Add(1)).unwrap_or_else(|error| panic!("join: {error}"));
    (device, sizes, label)
}

#[test]
fn the_labels_of_a_volume_of_several_devices_are_its_first_devices() {
    let (device, sizes, _) = two_devices();
    let volume = volume_of(&device, &sizes).unwrap_or_else(|error| panic!("{error}"));
    assert!(volume.table().is_some(), "the volume has a device table");
    let labels = read_labels(&volume).unwrap_or_else(|error| panic!("{error}"));
    let first = read_device_labels(&volume.devices()[0]).unwrap_or_else(|error| panic!("{error}"));
    assert!(labels.primary.is_ok() && labels.backup.is_ok(), "{labels:?}");
    assert_eq!(labels.primary.as_ref().ok(), first.primary.as_ref().ok());
    assert_eq!(labels.backup.as_ref().ok(), first.backup.as_ref().ok());
    // Read at the places the address space puts them, the backup copy is not there.
    let in_address_space = read_device_labels(&volume).unwrap_or_else(|error| panic!("{error}"));
    assert!(in_address_space.backup.is_err(), "{in_address_space:?}");
    // The engine and the writing tools see the volume through wrappers such as the undo device.
    let header = UndoHeader {
        volume_uuid: [0x41; 16],
        device_len: volume.len(),
        sector_size: 512,
        tool: "test".into(),
        created: 0,
    };
    let log = UndoLog::with_sink(Box::new(MemorySink::default()), Path::new("undo in memory"), header);
    let wrapped: Arc<dyn BlockDevice> = Arc::new(UndoDevice::new(Arc::new(volume), log));
    let through = read_labels(wrapped.as_ref()).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(through.backup.as_ref().ok(), first.backup.as_ref().ok());
}

#[test]
fn the_checker_reads_every_other_devices_labels_through_the_volume() {
    let (device, sizes, _) = two_devices();
    let volume = volume_of(&device, &sizes).unwrap_or_else(|error| panic!("{error}"));
    let labels = read_labels(&volume).unwrap_or_else(|error| panic!("{error}"));
    let label = labels.choose().map(|(_, label)| label.clone()).unwrap_or_else(|error| panic!("{error:?}"));
    let members = member_labels(&volume, &label);
    assert_eq!(members.len(), 1);
    assert_eq!(members[0].index, 1);
    assert!(members[0].labels.as_ref().is_ok_and(|pair| pair.primary.is_ok() && pair.backup.is_ok()));
    // The first device alone presents no other device.
    assert!(member_labels(&volume.devices()[0], &label).is_empty());
    let clean = check(&volume, CheckOptions::default(), &mut |_, _| {}).unwrap_or_else(|error| panic!("{error}"));
    assert!(!clean.problems.iter().any(|problem| problem.code == Code::DeviceLabelInvalid), "{:?}", clean.problems);
    // Device 1's primary label zeroed: fsck names it.
    volume.devices()[1].write_at(0, &[0u8; 512]).unwrap_or_else(|error| panic!("{error}"));
    let damaged = check(&volume, CheckOptions::default(), &mut |_, _| {}).unwrap_or_else(|error| panic!("{error}"));
    let found: Vec<&str> = damaged
        .problems
        .iter()
        .filter(|problem| problem.code == Code::DeviceLabelInvalid)
        .map(|problem| problem.structure.as_str())
        .collect();
    assert!(found.iter().any(|structure| structure.starts_with("primary label of device 1")), "{found:?}");
}
