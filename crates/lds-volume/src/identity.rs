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

/// The major number of loop devices (Documentation/admin-guide/devices.txt).
const LOOP_MAJOR: u32 = 7;

/// `LOOP_GET_STATUS64` (linux/loop.h), which libc does not name.
const LOOP_GET_STATUS64: libc::c_ulong = 0x4C05;

/// `struct loop_info64` (linux/loop.h): what `LOOP_GET_STATUS64` fills.
#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// The device node of the block device `rdev`: `/dev/NAME`, NAME from its sysfs directory,
/// when that node is the device.
fn device_node(rdev: u64) -> Option<PathBuf> {
    let directory = std::fs::canonicalize(sysfs_block(rdev)).ok()?;
    let node = Path::new("/dev").join(directory.file_name()?);
    let metadata = std::fs::metadata(&node).ok()?;
    (metadata.file_type().is_block_device() && metadata.rdev() == rdev).then_some(node)
}

/// The file a loop device reads, `(st_dev, st_ino)`, from the kernel's own record of it
/// (`LOOP_GET_STATUS64`: `lo_device`, `lo_inode`): right even when the file was renamed, or
/// unlinked with another hard link left, where the path sysfs gives names nothing or another
/// file. `None` for a device that is not a loop device or reads nothing.
fn loop_status(rdev: u64) -> Option<(u64, u64)> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;
    if libc::major(rdev) != LOOP_MAJOR {
        return None;
    }
    // O_NONBLOCK: an open that never waits on media; read only, no claim.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(device_node(rdev)?)
        .ok()?;
    let mut info = LoopInfo64 {
        lo_device: 0,
        lo_inode: 0,
        lo_rdevice: 0,
        lo_offset: 0,
        lo_sizelimit: 0,
        lo_number: 0,
        lo_encrypt_type: 0,
        lo_encrypt_key_size: 0,
        lo_flags: 0,
        lo_file_name: [0; 64],
        lo_crypt_name: [0; 64],
        lo_encrypt_key: [0; 32],
        lo_init: [0; 2],
    };
    #[expect(unsafe_code, reason = "LOOP_GET_STATUS64 on an owned descriptor; neither rustix nor libc wraps it")]
    // SAFETY: the descriptor is open for the call; `info` is a live, writable loop_info64 the
    // kernel fills and does not keep.
    let result = unsafe { libc::ioctl(file.as_raw_fd(), LOOP_GET_STATUS64, &mut info as *mut LoopInfo64) };
    // ENXIO: a loop device with no file attached.
    (result == 0).then_some((info.lo_device, info.lo_inode))
}

/// The file a loop device reads: by `LOOP_GET_STATUS64` (`loop_status`), else by the path in
/// `/sys/dev/block/M:m/loop/backing_file`.
fn loop_backing(rdev: u64) -> Option<(u64, u64)> {
    if let Some(backing) = loop_status(rdev) {
        return Some(backing);
    }
    let name = std::fs::read_to_string(sysfs_block(rdev).join("loop/backing_file")).ok()?;
    let metadata = std::fs::metadata(name.trim_end_matches('\n')).ok()?;
    Some((metadata.dev(), metadata.ino()))
}

/// Devices stacked on a device at most this deep (a device-mapper device over an md array
/// over partitions is three).
const STACK_DEPTH_MAX: usize = 8;

/// Devices read at most when following a stack of devices.
const STACK_DEVICES_MAX: usize = 256;

/// The device numbers listed in a sysfs directory of links to block devices (`slaves`,
/// `holders`), at most `STACK_DEVICES_MAX`.
fn linked_devices(rdev: u64, directory: &str) -> Vec<u64> {
    let Ok(entries) = std::fs::read_dir(sysfs_block(rdev).join(directory)) else { return Vec::new() };
    entries
        .take(STACK_DEVICES_MAX)
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| parse_dev(&std::fs::read_to_string(entry.path().join("dev")).ok()?))
        .collect()
}

/// `rdev` and every device it is built on (device mapper, md: its `slaves`, theirs, ...),
/// by `slaves_of`, bounded by depth and count.
fn built_on(rdev: u64, slaves_of: &dyn Fn(u64) -> Vec<u64>) -> Vec<u64> {
    let mut found = vec![rdev];
    let mut frontier = vec![rdev];
    for _ in 0..STACK_DEPTH_MAX {
        let mut next = Vec::new();
        for device in frontier {
            for slave in slaves_of(device) {
                if !found.contains(&slave) && found.len() < STACK_DEVICES_MAX {
                    found.push(slave);
                    next.push(slave);
                }
            }
        }
        if next.is_empty() {
            break;
        }
        frontier = next;
    }
    found
}

/// Whether writing one of the block devices `a` or `b` changes what the other reads through
/// a device stacked on another (device mapper, md): a device either is built on shares a
/// device, a partition and its disk, or a loop device's file with one the other is built on.
/// The devices themselves are compared by `Identity::overlap`; this looks below them.
fn stacked_overlap(
    a: u64,
    b: u64,
    slaves_of: &dyn Fn(u64) -> Vec<u64>,
    disk_of: &dyn Fn(u64) -> Option<u64>,
    backing_of: &dyn Fn(u64) -> Option<(u64, u64)>,
) -> bool {
    let (below_a, below_b) = (built_on(a, slaves_of), built_on(b, slaves_of));
    if below_a.len() == 1 && below_b.len() == 1 {
        return false;
    }
    below_a.iter().any(|&x| {
        below_b.iter().any(|&y| {
            x == y
                || disk_of(x) == Some(y)
                || disk_of(y) == Some(x)
                || backing_of(x).is_some_and(|file| backing_of(y) == Some(file))
        })
    })
}

/// Whether the file `(device, inode)` is read by a loop device among those the block device
/// `rdev` is built on (below a device mapper or md device: `rdev` itself is compared by
/// `Identity::overlap`).
fn stacked_on_file(rdev: u64, file: (u64, u64)) -> bool {
    built_on(rdev, &|device| linked_devices(device, "slaves"))
        .iter()
        .skip(1)
        .any(|&below| loop_backing(below) == Some(file))
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
    /// Whether the two are the same file (device and inode) or the same block device (device
    /// number): what a descriptor opened by a path must still be to be the one judged.
    pub fn same(&self, other: &Identity) -> bool {
        use Identity::{Block, File, Other};
        match (self, other) {
            (File { device, inode }, File { device: other_device, inode: other_inode })
            | (Other { device, inode }, Other { device: other_device, inode: other_inode }) => {
                device == other_device && inode == other_inode
            }
            (Block { rdev, .. }, Block { rdev: other_rdev, .. }) => rdev == other_rdev,
            _ => false,
        }
    }

    /// How writing through one of the two would change what the other reads: `None` when
    /// it would not.
    pub fn overlap(&self, other: &Identity) -> Option<&'static str> {
        use Identity::{Block, File, Other};
        match (self, other) {
            (File { device, inode }, File { device: other_device, inode: other_inode })
            | (Other { device, inode }, Other { device: other_device, inode: other_inode }) => {
                (device == other_device && inode == other_inode).then_some("is the same file as")
            }
            (File { device, inode }, Block { backing, rdev, .. }) => {
                if *backing == Some((*device, *inode)) {
                    Some("is the file behind the loop device")
                } else {
                    stacked_on_file(*rdev, (*device, *inode)).then_some("is the file behind a device stacked under")
                }
            }
            (Block { backing, rdev, .. }, File { device, inode }) => {
                if *backing == Some((*device, *inode)) {
                    Some("is a loop device reading the file")
                } else {
                    stacked_on_file(*rdev, (*device, *inode)).then_some("is stacked on a loop device reading the file")
                }
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
                } else if stacked_overlap(
                    *rdev,
                    *other_rdev,
                    &|device| linked_devices(device, "slaves"),
                    &partition_disk,
                    &loop_backing,
                ) {
                    Some("shares bytes, through a device-mapper or md device, with")
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

/// The kernel devices holding `rdev` or one of its partitions (device mapper, md), from
/// their `holders` directories.
fn holders(rdev: u64) -> Option<String> {
    let mut devices = vec![rdev];
    // A disk's partitions are the subdirectories of its sysfs directory with a `partition`
    // file.
    if let Ok(entries) = std::fs::read_dir(sysfs_block(rdev)) {
        devices.extend(
            entries
                .take(STACK_DEVICES_MAX)
                .filter_map(|entry| entry.ok())
                .filter(|entry| entry.path().join("partition").exists())
                .filter_map(|entry| parse_dev(&std::fs::read_to_string(entry.path().join("dev")).ok()?)),
        );
    }
    let names: Vec<String> = devices
        .iter()
        .flat_map(|device| {
            std::fs::read_dir(sysfs_block(*device).join("holders"))
                .into_iter()
                .flatten()
                .take(16)
                .filter_map(|entry| entry.ok().map(|entry| entry.file_name().to_string_lossy().into_owned()))
        })
        .take(16)
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
            let rdev = parse_dev(&std::fs::read_to_string(entry.path().join("dev")).ok()?)?;
            (loop_backing(rdev)? == file).then(|| format!("/dev/{name}"))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up machine: dm-0 (253:0) on sda1 (8:1) and md0 (9:0) on loop0 (7:0) and sdb
    /// (8:16); sda (8:0) holds sda1 and sda2 (8:2); loop1 (7:1) reads loop0's file.
    fn slaves(rdev: u64) -> Vec<u64> {
        match (libc::major(rdev), libc::minor(rdev)) {
            (253, 0) => vec![libc::makedev(8, 1)],
            (9, 0) => vec![libc::makedev(7, 0), libc::makedev(8, 16)],
            _ => Vec::new(),
        }
    }

    fn disk(rdev: u64) -> Option<u64> {
        matches!((libc::major(rdev), libc::minor(rdev)), (8, 1) | (8, 2)).then(|| libc::makedev(8, 0))
    }

    fn backing(rdev: u64) -> Option<(u64, u64)> {
        matches!((libc::major(rdev), libc::minor(rdev)), (7, 0) | (7, 1)).then_some((1, 42))
    }

    fn overlaps(a: (u32, u32), b: (u32, u32)) -> bool {
        stacked_overlap(libc::makedev(a.0, a.1), libc::makedev(b.0, b.1), &slaves, &disk, &backing)
    }

    #[test]
    fn a_device_stacked_on_another_overlaps_it() {
        // dm-0 and what it is built on: its slave, the slave's disk; not the disk's other
        // partition.
        assert!(overlaps((253, 0), (8, 1)));
        assert!(overlaps((8, 1), (253, 0)));
        assert!(overlaps((253, 0), (8, 0)));
        assert!(!overlaps((253, 0), (8, 2)));
        // md0 over loop0 and sdb: those, and loop1, which reads loop0's file.
        assert!(overlaps((9, 0), (7, 0)));
        assert!(overlaps((9, 0), (8, 16)));
        assert!(overlaps((7, 1), (9, 0)));
        assert!(!overlaps((9, 0), (253, 0)));
        // Devices stacked on nothing are left to `Identity::overlap`.
        assert!(!overlaps((8, 1), (8, 2)));
    }

    #[test]
    fn a_stack_is_followed_a_bounded_depth() {
        // A chain deeper than the bound, and a cycle: both end.
        let chain = |rdev: u64| vec![rdev + 1];
        assert_eq!(built_on(0, &chain).len(), STACK_DEPTH_MAX + 1);
        let cycle = |rdev: u64| vec![(rdev + 1) % 3];
        assert_eq!(built_on(0, &cycle).len(), 3);
    }
}
