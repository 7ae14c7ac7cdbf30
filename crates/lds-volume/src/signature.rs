//! Known on-disk signatures, so that mkfs refuses to format over data (docs/tools.md).

use crate::block::DeviceError;
use crate::os_device::Device;

/// A signature found on a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// What it is.
    pub name: &'static str,
    /// Where it was found.
    pub offset: u64,
}

const SIGNATURES: &[(&str, u64, &[u8])] = &[
    ("LDS volume (primary label)", 0, b"LDSLABEL"),
    ("ext2/ext3/ext4 file system", 1080, &[0x53, 0xEF]),
    ("XFS file system", 0, b"XFSB"),
    ("btrfs file system", 65600, b"_BHRfS_M"),
    ("f2fs file system", 1024, &[0x10, 0x20, 0xF5, 0xF2]),
    ("LUKS encrypted volume", 0, b"LUKS\xba\xbe"),
    ("Linux swap", 4086, b"SWAPSPACE2"),
    ("GPT partition table", 512, b"EFI PART"),
    ("SquashFS", 0, b"hsqs"),
];

/// Looks for known signatures (and an LDS backup label at the last sector for every sector
/// size). Reads beyond the device's end are skipped.
pub fn find_signatures(device: &Device) -> Result<Vec<Signature>, DeviceError> {
    let mut found = Vec::new();
    for &(name, offset, magic) in SIGNATURES {
        if offset + magic.len() as u64 > device.len() {
            continue;
        }
        if device.read_vec(offset, magic.len() as u64)? == magic {
            found.push(Signature { name, offset });
        }
    }
    let mut sector = 512u64;
    while sector <= 65536 {
        if device.len() >= sector {
            let offset = device.len() - sector;
            if device.read_vec(offset, 8)? == b"LDSLABEL" {
                found.push(Signature { name: "LDS volume (backup label)", offset });
                break;
            }
        }
        sector *= 2;
    }
    if device.len() >= 512 {
        let boot = device.read_vec(510, 2)?;
        if boot == [0x55, 0xAA] && !found.iter().any(|signature| signature.name.starts_with("GPT")) {
            found.push(Signature { name: "MBR partition table or boot sector", offset: 510 });
        }
    }
    Ok(found)
}
