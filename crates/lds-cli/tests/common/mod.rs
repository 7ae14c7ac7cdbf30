//! What the tests that use a loop device share: a device each test attaches itself and
//! detaches (exactly the one it got) when dropped, even when an assertion fails.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A loop device attached for a test's lifetime.
pub struct LoopDevice {
    /// The device (`/dev/loopN`).
    pub device: PathBuf,
    /// Its backing file.
    pub backing: PathBuf,
}

impl LoopDevice {
    /// Creates a backing file of `len` zeros and attaches it; `None` when losetup fails.
    pub fn attach(backing: &Path, len: u64) -> Option<Self> {
        Self::attach_with_sector(backing, len, None)
    }

    /// As `attach`, with the device's logical (and physical) block size set to `sector`.
    pub fn attach_with_sector(backing: &Path, len: u64, sector: Option<u32>) -> Option<Self> {
        std::fs::write(backing, vec![0u8; len as usize]).ok()?;
        let mut command = Command::new("losetup");
        if let Some(sector) = sector {
            command.args(["--sector-size", &sector.to_string()]);
        }
        let output = command.args(["--find", "--show"]).arg(backing).output().ok()?;
        if !output.status.success() {
            eprintln!("losetup failed: {}", String::from_utf8_lossy(&output.stderr));
            let _ = std::fs::remove_file(backing);
            return None;
        }
        let device = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
        Some(Self { device, backing: backing.to_path_buf() })
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let status = Command::new("losetup").arg("--detach").arg(&self.device).status();
        if !status.is_ok_and(|status| status.success()) {
            eprintln!("could not detach {}", self.device.display());
        }
        let _ = std::fs::remove_file(&self.backing);
    }
}

/// True when the test runs as root (attaching a loop device needs it); otherwise says that
/// the test is skipped.
pub fn skip_unless_root() -> bool {
    let root = is_root();
    if !root {
        eprintln!("skipped: attaching a loop device needs root");
    }
    root
}

/// Whether the test runs as root (attaching a loop device needs it).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|status| {
            status.lines().any(|line| line.starts_with("Uid:") && line.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Tests that fork (losetup) run one at a time: a forked child holds a copy of every
/// descriptor the other tests have open until it execs, their locks included, and a writer
/// opening in that window would find its volume in use.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Holds the other forking tests of this binary off while it lives.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
