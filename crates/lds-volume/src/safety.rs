//! The safety contract of docs/safety.md, in one place: what every command that writes must
//! refuse before its first byte.
//!
//! - **Output is input.** Two paths name the same bytes when they are the same file (through
//!   symlinks and hard links: the same device and inode), the same block device (the same
//!   device number, through any device node), a partition and the disk holding it, or a loop
//!   device and its backing file. [`Identity`] says what a path is; [`refuse_overlap`] refuses
//!   an output that overlaps an input.
//! - **In use.** A block device that the kernel holds (mounted, a device-mapper or md member,
//!   swap, or opened exclusively by another program) and an image file attached to a loop
//!   device or used as swap are never opened for writing: [`in_use`] says by what. `Device`
//!   opens block devices for writing with `O_EXCL`, the kernel's own claim, so the check
//!   cannot race with a mount.
//! - **Replacing a volume.** Commands that format their target (mkfs, bench, salvage
//!   `--output`, device add) refuse one holding an LDS volume or another known signature
//!   without `--force`: [`refuse_replacing`].
//! - **Membership.** A device found by discovery is written only when its labels prove it is
//!   the one member of the volume they claim: `Members::open` refuses two devices claiming one
//!   member.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::device::{Device, DeviceError};
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

/// What a path names, as far as writing through it goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// A regular file: its file system's device and its inode.
    File {
        /// `st_dev`.
        device: u64,
        /// `st_ino`.
        inode: u64,
    },
    /// A block device.
    Block {
        /// Its device number (`st_rdev`).
        rdev: u64,
        /// The disk holding it, when it is a partition.
        disk: Option<u64>,
        /// The file behind it, when it is a loop device: (`st_dev`, `st_ino`).
        backing: Option<(u64, u64)>,
    },
    /// Anything else (a directory, a character device): never written.
    Other {
        /// `st_dev`.
        device: u64,
        /// `st_ino`.
        inode: u64,
    },
}

/// The sysfs directory of a block device number.
fn sysfs_block(rdev: u64) -> PathBuf {
    PathBuf::from(format!("/sys/dev/block/{}:{}", libc::major(rdev), libc::minor(rdev)))
}

/// Parses "MAJ:MIN" as a device number.
fn parse_dev(text: &str) -> Option<u64> {
    let (major, minor) = text.trim().split_once(':')?;
    Some(libc::makedev(major.parse().ok()?, minor.parse().ok()?))
}

/// The file a loop device reads, by `/sys/dev/block/M:m/loop/backing_file`.
fn loop_backing(rdev: u64) -> Option<(u64, u64)> {
    let name = std::fs::read_to_string(sysfs_block(rdev).join("loop/backing_file")).ok()?;
    let metadata = std::fs::metadata(name.trim_end_matches('\n')).ok()?;
    Some((metadata.dev(), metadata.ino()))
}

/// The disk a partition is on (its sysfs directory's parent).
fn partition_disk(rdev: u64) -> Option<u64> {
    let directory = std::fs::canonicalize(sysfs_block(rdev)).ok()?;
    if !directory.join("partition").exists() {
        return None;
    }
    parse_dev(&std::fs::read_to_string(directory.parent()?.join("dev")).ok()?)
}

/// What `path` names (following symlinks).
pub fn identity(path: &Path) -> std::io::Result<Identity> {
    identity_of(&std::fs::metadata(path)?)
}

/// What the file `metadata` describes names.
pub fn identity_of(metadata: &std::fs::Metadata) -> std::io::Result<Identity> {
    let kind = metadata.file_type();
    Ok(if kind.is_file() {
        Identity::File { device: metadata.dev(), inode: metadata.ino() }
    } else if kind.is_block_device() {
        let rdev = metadata.rdev();
        Identity::Block { rdev, disk: partition_disk(rdev), backing: loop_backing(rdev) }
    } else {
        Identity::Other { device: metadata.dev(), inode: metadata.ino() }
    })
}

impl Identity {
    /// How writing through one of the two would change what the other reads: `None` when
    /// it would not.
    pub fn overlap(&self, other: &Identity) -> Option<&'static str> {
        use Identity::{Block, File, Other};
        match (self, other) {
            (File { device, inode }, File { device: other_device, inode: other_inode })
            | (Other { device, inode }, Other { device: other_device, inode: other_inode }) => {
                (device == other_device && inode == other_inode).then_some("is the same file as")
            }
            (File { device, inode }, Block { backing: Some(backing), .. }) => {
                (*backing == (*device, *inode)).then_some("is the file behind the loop device")
            }
            (Block { backing: Some(backing), .. }, File { device, inode }) => {
                (*backing == (*device, *inode)).then_some("is a loop device reading the file")
            }
            (Block { rdev, disk, backing }, Block { rdev: other_rdev, disk: other_disk, backing: other_backing }) => {
                if rdev == other_rdev {
                    Some("is the same block device as")
                } else if *disk == Some(*other_rdev) {
                    Some("is a partition of")
                } else if *other_disk == Some(*rdev) {
                    Some("is the disk holding the partition")
                } else if backing.is_some() && backing == other_backing {
                    Some("reads the same file as the loop device")
                } else {
                    None
                }
            }
            _ => None,
        }
    }
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

/// Where the block device `rdev` (or a partition of it) is mounted, from
/// `/proc/self/mountinfo` (field 3 is MAJ:MIN, field 5 the mount point).
fn mount_point(rdev: u64) -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mounts.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        let mounted = parse_dev(fields.get(2)?)?;
        (mounted == rdev || partition_disk(mounted) == Some(rdev))
            .then(|| format!("mounted at {}", fields.get(4).copied().unwrap_or("?")))
    })
}

/// The kernel devices holding `rdev` (device mapper, md), from its `holders` directory.
fn holders(rdev: u64) -> Option<String> {
    let names: Vec<String> = std::fs::read_dir(sysfs_block(rdev).join("holders"))
        .ok()?
        .take(16)
        .filter_map(|entry| entry.ok().map(|entry| entry.file_name().to_string_lossy().into_owned()))
        .collect();
    (!names.is_empty()).then(|| format!("held by {}", names.join(", ")))
}

/// Whether `metadata`'s file or device is listed in `/proc/swaps`.
fn swap(identity: &Identity) -> Option<String> {
    let swaps = std::fs::read_to_string("/proc/swaps").ok()?;
    // "Filename Type Size Used Priority", after a header line; names escape spaces as \040.
    swaps.lines().skip(1).find_map(|line| {
        let name = line.split_whitespace().next()?.replace("\\040", " ");
        let listed = self::identity(Path::new(&name)).ok()?;
        listed.overlap(identity).map(|_| format!("in use as swap ({name})"))
    })
}

/// The loop devices reading the file `(device, inode)`.
fn loop_devices_of(file: (u64, u64)) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/sys/block") else { return Vec::new() };
    let mut found: Vec<String> = entries
        .take(4096)
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with("loop") {
                return None;
            }
            let backing = std::fs::read_to_string(entry.path().join("loop/backing_file")).ok()?;
            let metadata = std::fs::metadata(backing.trim_end_matches('\n')).ok()?;
            ((metadata.dev(), metadata.ino()) == file).then(|| format!("/dev/{name}"))
        })
        .collect();
    found.sort();
    found
}

/// Why the device or file `identity` names must not be written now, if it must not: mounted,
/// held by a kernel device, used as swap, or (a file) attached to a loop device.
pub fn in_use(identity: &Identity) -> Option<String> {
    match identity {
        Identity::Block { rdev, .. } => mount_point(*rdev).or_else(|| holders(*rdev)).or_else(|| swap(identity)),
        Identity::File { device, inode } => {
            let loops = loop_devices_of((*device, *inode));
            if !loops.is_empty() {
                return Some(format!(
                    "attached to {} (write through that device, or detach it with losetup -d)",
                    loops.join(", ")
                ));
            }
            swap(identity)
        }
        Identity::Other { .. } => None,
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
    let ours = crate::volume::read_labels(device)
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
