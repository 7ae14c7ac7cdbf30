//! The safety contract of docs/safety.md, in one place: what every command that writes must
//! refuse before its first byte.
//!
//! - **Output is input.** Two paths name the same bytes when they are the same file, the same
//!   block device, a partition and the disk holding it, or a loop device and its backing
//!   file: [`Identity`](crate::identity::Identity) says what a path is; [`refuse_overlap`]
//!   refuses an output that overlaps an input.
//! - **In use.** A block device that the kernel holds (mounted, a device-mapper or md member,
//!   swap, or opened exclusively by another program) and an image file attached to a loop
//!   device or used as swap are never opened for writing: [`in_use`](crate::identity::in_use)
//!   says by what. `Device` opens block devices for writing with `O_EXCL`, the kernel's own
//!   claim, so the check cannot race with a mount.
//! - **Replacing a volume.** Commands that format their target (mkfs, bench, salvage
//!   `--output`, device add) refuse one holding an LDS volume or another known signature
//!   without `--force`: [`refuse_replacing`].
//! - **Membership.** A device found by discovery is written only when its labels prove it is
//!   the one member of the volume they claim: `Members::open` refuses two devices claiming one
//!   member.

use std::path::{Path, PathBuf};

use crate::block::DeviceError;
use crate::identity::{identity, in_use};
use crate::os_device::Device;
use crate::signature::find_signatures;

/// Why a command refused to write, before writing anything.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SafetyError {
    /// The output names the same bytes as an input.
    #[error("{}: {how} {}; a command never writes its own input (give another output)", output.display(), input.display())]
    SameBytes {
        /// The output path.
        output: PathBuf,
        /// The input it overlaps.
        input: PathBuf,
        /// How they overlap ("is the same file as", ...).
        how: &'static str,
    },
    /// The target holds a volume or file system the command would replace.
    #[error("{}: holds {what} (signature at offset {offset}); {command} would replace it: give --force to do so", path.display())]
    HoldsData {
        /// The target.
        path: PathBuf,
        /// What it holds.
        what: String,
        /// Where its signature is.
        offset: u64,
        /// The command.
        command: String,
    },
    /// The target could not be read to find out what it holds.
    #[error(transparent)]
    Device(#[from] DeviceError),
}

/// Refuses `output` when it names the same bytes as any of `inputs` (an output that does not
/// exist yet overlaps nothing). `inputs` are paths that exist; one that cannot be examined is
/// skipped (it cannot be opened either).
pub fn refuse_overlap(output: &Path, inputs: &[&Path]) -> Result<(), SafetyError> {
    let Ok(target) = identity(output) else { return Ok(()) };
    for input in inputs {
        let Ok(source) = identity(input) else { continue };
        if let Some(how) = target.overlap(&source) {
            return Err(SafetyError::SameBytes { output: output.to_path_buf(), input: input.to_path_buf(), how });
        }
    }
    Ok(())
}

/// Refuses an output path a command would write (a metadata image, a salvaged volume) when it
/// names the same bytes as any of `inputs`, or is in use (`in_use`).
pub fn refuse_output(output: &Path, inputs: &[&Path]) -> Result<(), SafetyError> {
    refuse_overlap(output, inputs)?;
    match identity(output).ok().as_ref().and_then(in_use) {
        Some(by) => Err(SafetyError::Device(DeviceError::InUse { path: output.to_path_buf(), by })),
        None => Ok(()),
    }
}

/// Refuses to replace what `device` holds (an LDS volume or another known signature) unless
/// `force`, for `command` (mkfs, bench, salvage --output, device add). `keep` names a label
/// the command may replace without `--force` (bench's own volumes); a device it accepts is
/// not refused for its LDS signatures.
pub fn refuse_replacing(
    device: &Device,
    force: bool,
    command: &str,
    keep: impl Fn(&lds_format::label::Label) -> bool,
) -> Result<(), SafetyError> {
    if force {
        return Ok(());
    }
    let signatures = find_signatures(device)?;
    let ours = crate::labels::read_labels(device)
        .ok()
        .and_then(|labels| labels.choose().ok().map(|(_, label)| keep(label)))
        .unwrap_or(false);
    let refused = signatures.iter().find(|signature| !(ours && signature.name.starts_with("LDS volume"))).cloned();
    match refused {
        Some(signature) => Err(SafetyError::HoldsData {
            path: device.path().to_path_buf(),
            what: signature.name.to_string(),
            offset: signature.offset,
            command: command.to_string(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::Identity;

    fn scratch(name: &str) -> PathBuf {
        let directory = std::env::temp_dir().join(format!("lds-safety-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&directory);
        directory.join(name)
    }

    #[test]
    fn links_name_the_same_file_and_copies_do_not() {
        let file = scratch("a.img");
        assert!(std::fs::write(&file, b"volume").is_ok());
        let link = scratch("link.img");
        let hard = scratch("hard.img");
        let copy = scratch("copy.img");
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_file(&hard);
        assert!(std::os::unix::fs::symlink(&file, &link).is_ok());
        assert!(std::fs::hard_link(&file, &hard).is_ok());
        assert!(std::fs::copy(&file, &copy).is_ok());
        for same in [&file, &link, &hard] {
            let refused = refuse_overlap(same, &[&file]);
            assert!(matches!(refused, Err(SafetyError::SameBytes { how: "is the same file as", .. })), "{refused:?}");
        }
        assert!(refuse_overlap(&copy, &[&file]).is_ok());
        assert!(refuse_overlap(&scratch("absent.img"), &[&file]).is_ok());
        assert!(in_use(&identity(&file).unwrap_or(Identity::Other { device: 0, inode: 0 })).is_none());
    }
}
