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
        std::fs::write(backing, vec![0u8; len as usize]).ok()?;
        let output = Command::new("losetup").args(["--find", "--show"]).arg(backing).output().ok()?;
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

/// Whether the test runs as root (attaching a loop device needs it).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|status| {
            status.lines().any(|line| line.starts_with("Uid:") && line.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}
