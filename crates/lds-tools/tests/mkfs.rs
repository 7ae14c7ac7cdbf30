//! Guards mkfs's library half: what a request is refused for (naming the path and the
//! cause), that a volume holding data is replaced only with `force`, that the write order
//! leaves a volume the read-back accepts, and that the read-back refuses what is not the
//! volume written.

use std::path::PathBuf;

use lds_tools::mkfs::{format, plan, verify, write_volume, MkfsError, Request};
use lds_volume::safety::SafetyError;
use lds_volume::MemoryImage;

fn scratch(name: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("lds-tools-mkfs-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&directory);
    let path = directory.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn request(name: &str) -> Request {
    let mut request = Request::new(&scratch(name));
    request.size = Some(8 << 20);
    request
}

#[test]
fn requests_are_refused_naming_what_is_wrong() {
    let mut long = request("long.img");
    long.name = "n".repeat(65);
    assert!(matches!(plan(&long), Err(MkfsError::NameTooLong { len: 65 })));
    let mut no_size = request("absent.img");
    no_size.size = None;
    let refused = plan(&no_size);
    assert!(matches!(&refused, Err(MkfsError::NoSize { path }) if path == &no_size.path), "{refused:?}");
    let mut old = request("old.img");
    old.format_minor = 2;
    old.value_chunks = true;
    let refused = plan(&old);
    assert!(matches!(refused, Err(MkfsError::FeatureNeedsVersion { feature: "value-chunks", .. })));
    assert_eq!(
        plan(&old).map(|_| ()).map_err(|error| error.to_string()),
        Err(format!("{}: --value-chunks needs format 1.4 (it is asked with --format-version 1.2)", old.path.display()))
    );
    let mut tiny = request("tiny.img");
    tiny.size = Some(4096);
    assert!(matches!(plan(&tiny), Err(MkfsError::Layout { .. })));
}

#[test]
fn a_volume_is_replaced_only_with_force() {
    let mut request = request("replace.img");
    let Ok(label) = plan(&request) else { return };
    assert!(format(&request, &label).is_ok());
    let refused = format(&request, &label);
    assert!(matches!(refused, Err(MkfsError::Refused(SafetyError::HoldsData { .. }))), "{refused:?}");
    request.force = true;
    let Ok(label) = plan(&request) else { return };
    let replaced = format(&request, &label);
    assert!(replaced.is_ok(), "{replaced:?}");
}

#[test]
fn the_write_order_over_an_old_volume_leaves_the_new_one_and_the_read_back_checks_it() {
    let mut request = request("memory.img");
    request.uuid = Some([7; 16]);
    let Ok(old) = plan(&request) else { return };
    request.uuid = Some([8; 16]);
    request.version_log_size = Some(256 << 10);
    let Ok(new) = plan(&request) else { return };
    let image = old_volume(&old);
    let written = write_volume(&image, &new);
    assert!(written.is_ok(), "{written:?}");
    let bytes = image.bytes();
    let checked = verify(&MemoryImage(&bytes), "memory", &new);
    assert!(checked.is_ok(), "{checked:?}");
    // The old label is not what was written: the read-back refuses it.
    let refused = verify(&MemoryImage(&bytes), "memory", &old);
    assert!(matches!(refused, Err(MkfsError::LabelsDiffer { .. })), "{refused:?}");
    let zeros = vec![0u8; bytes.len()];
    assert!(matches!(verify(&MemoryImage(&zeros), "zeros", &new), Err(MkfsError::Reopen(_))));
}

/// An image in memory that takes writes: the old volume `label` formatted on it.
fn old_volume(label: &lds_format::label::Label) -> Memory {
    let image = Memory(std::sync::Mutex::new(vec![0u8; label.geometry.volume_len as usize]));
    let written = write_volume(&image, label);
    assert!(written.is_ok(), "{written:?}");
    image
}

struct Memory(std::sync::Mutex<Vec<u8>>);

impl Memory {
    fn bytes(&self) -> Vec<u8> {
        self.0.lock().map(|bytes| bytes.clone()).unwrap_or_default()
    }
}

impl lds_volume::ReadAt for Memory {
    fn name(&self) -> &std::path::Path {
        std::path::Path::new("memory")
    }
    fn len(&self) -> u64 {
        self.bytes().len() as u64
    }
    fn read_at(&self, offset: u64, buffer: &mut [u8]) -> Result<(), lds_volume::DeviceError> {
        let bytes = self.bytes();
        buffer.copy_from_slice(&bytes[offset as usize..offset as usize + buffer.len()]);
        Ok(())
    }
}

impl lds_volume::BlockDevice for Memory {
    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), lds_volume::DeviceError> {
        if let Ok(mut bytes) = self.0.lock() {
            bytes[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        }
        Ok(())
    }
    fn flush(&self) -> Result<(), lds_volume::DeviceError> {
        Ok(())
    }
    fn flush_range(&self, _offset: u64, _len: u64) -> Result<(), lds_volume::DeviceError> {
        Ok(())
    }
}
