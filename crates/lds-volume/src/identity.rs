//! What a path names, as far as writing through it goes, and whether the kernel or another
//! program uses it now: the facts the safety contract (`safety`, docs/safety.md) and
//! `Device::open` judge by. Two paths name the same bytes when they are the same file
//! (through symlinks and hard links: the same device and inode), the same block device (the
//! same device number, through any device node), a partition and the disk holding it, or a
//! loop device and its backing file.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

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
