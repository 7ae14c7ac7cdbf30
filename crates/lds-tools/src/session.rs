//! The session every tool that writes a volume runs in (docs/safety.md, docs/undo-file.md):
//!
//! 1. **open** the volume exclusive (`Members::open` for writing: the lock, and every refusal
//!    of docs/safety.md: a device that cannot be proved a member, a device in use);
//! 2. **name** the devices it may write (`Session::devices`), which the tool says before its
//!    first write;
//! 3. **keep an undo file** unless told not to (`Session::keep_undo`): every sector the tool
//!    overwrites is saved to it, and synced, before the write reaches the device;
//! 4. **run** the tool through `Session::target` (or `Session::shared` for the engine);
//! 5. **finish**: record the state the tool left in the undo file, so that `lds undo` refuses
//!    a volume written to since (`Session::finish`), or leave it unfinished when the tool
//!    failed (`Session::abandon`: the undo file still restores what was written);
//! 6. **report** what the undo file holds (`Finished::undo_file`).
//!
//! One way for every writing tool (`repair -p|-y`, `resize`, `recover`, `compaction
//! resume|abort`, `device add|remove`, `undo`), so that a new tool gets the refusals and the
//! undo file by opening its volume here.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lds_format::geometry::LogKind;
use lds_volume::read_labels;
use lds_volume::undo::{volume_uuid_of, UndoDevice, UndoError, UndoHeader, UndoLog};
use lds_volume::{BlockDevice, Device, DeviceError, DeviceKind, Members, OpenMode, VolumeDevice, VolumeError};

/// Why a session could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// Another process holds the volume (the lock, docs/tools.md).
    #[error("{0}")]
    InUse(VolumeError),
    /// The volume's devices cannot be opened for writing (a refusal of docs/safety.md, or
    /// an I/O error), naming the device.
    #[error("{0}")]
    Open(VolumeError),
    /// The undo file cannot be created (it exists, or its directory is not writable).
    #[error("{0}")]
    Undo(#[from] UndoError),
}

impl From<VolumeError> for SessionError {
    fn from(error: VolumeError) -> Self {
        match error {
            error @ VolumeError::Device(DeviceError::Locked { .. }) => Self::InUse(error),
            error => Self::Open(error),
        }
    }
}

/// Whether, and where, a tool keeps an undo file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UndoChoice {
    /// Where (default: `default_undo_path`).
    pub file: Option<PathBuf>,
    /// Keep none.
    pub none: bool,
}

/// The undo file a session kept: its path and length (0 when the tool wrote nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndoKept {
    /// The file.
    pub path: PathBuf,
    /// Its bytes.
    pub bytes: u64,
}

/// A volume opened for one tool to write: `D` is the whole volume (`VolumeDevice`) or, for a
/// tool that works on one device (`lds resize`), that device.
pub struct Session<D: BlockDevice + 'static = VolumeDevice> {
    tool: String,
    path: PathBuf,
    kind: DeviceKind,
    devices: Option<String>,
    device: Arc<D>,
    undo: Option<Arc<UndoDevice>>,
}

impl Session<VolumeDevice> {
    /// Opens the volume that `path` names (any of its devices) exclusive for `tool` (named
    /// in the undo file), waiting at most `wait` for another process to release it.
    pub fn open(path: &Path, tool: &str, wait: Duration) -> Result<Self, SessionError> {
        let device = Members::open(path, OpenMode::ReadWrite, wait)?;
        Ok(Self {
            tool: tool.to_string(),
            path: path.to_path_buf(),
            kind: device.first().kind(),
            devices: device.describe(),
            device: Arc::new(device),
            undo: None,
        })
    }

    /// The session of the volume's only device, before the undo file is kept; the session
    /// back, with the number of its devices, when it has several (a tool that changes one
    /// device's size refuses those).
    pub fn into_single(self) -> Result<Session<Device>, (Self, usize)> {
        let count = self.device.devices().len();
        if self.undo.is_some() || count != 1 {
            return Err((self, count));
        }
        let Self { tool, path, kind, devices, device, undo: _ } = self;
        let volume = match Arc::try_unwrap(device) {
            Ok(volume) => volume,
            Err(device) => return Err((Self { tool, path, kind, devices, device, undo: None }, count)),
        };
        match volume.into_single() {
            Ok(single) => Ok(Session { tool, path, kind, devices, device: Arc::new(single), undo: None }),
            Err(volume) => Err((Self { tool, path, kind, devices, device: Arc::new(*volume), undo: None }, count)),
        }
    }
}

impl<D: BlockDevice + 'static> Session<D> {
    /// The devices the tool may write, for the line it prints before its first write
    /// (docs/safety.md); `None` for a volume on one device.
    pub fn devices(&self) -> Option<&str> {
        self.devices.as_deref()
    }

    /// The path the volume was named by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tool, as the undo file names it.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The kind of the volume's first device.
    pub fn kind(&self) -> DeviceKind {
        self.kind
    }

    /// The volume, for reading and for what a tool does before its first write.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The volume for changes the undo file does not cover (an image file grown before the
    /// tool writes); `None` once the undo file is kept.
    pub fn device_mut(&mut self) -> Option<&mut D> {
        match self.undo {
            None => Arc::get_mut(&mut self.device),
            Some(_) => None,
        }
    }

    /// Starts the undo file `choice` asks for (none with `UndoChoice::none`): created at the
    /// first write, every sector saved and synced before it is overwritten.
    pub fn keep_undo(&mut self, choice: &UndoChoice) -> Result<(), SessionError> {
        if choice.none || self.undo.is_some() {
            return Ok(());
        }
        // A path the user gave is theirs: refused if it exists. The default never collides
        // with an earlier run's file, so that routine work is never blocked by one.
        let path = match &choice.file {
            Some(file) => file.clone(),
            None => free_undo_path(&default_undo_path(&self.path, self.kind), &self.tool, now_seconds()),
        };
        let log = undo_log(self.device.as_ref(), &path, &self.tool)?;
        let inner = Arc::clone(&self.device) as Arc<dyn BlockDevice>;
        self.undo = Some(Arc::new(UndoDevice::new(inner, log)));
        Ok(())
    }

    /// What the tool writes through: the undo log around the volume, or the volume.
    pub fn target(&self) -> &dyn BlockDevice {
        match &self.undo {
            Some(undo) => undo.as_ref(),
            None => self.device.as_ref(),
        }
    }

    /// `target` for a tool that keeps the device (the engine's `Db::open_device`); the
    /// session finishes once the tool has dropped it.
    pub fn shared(&self) -> Arc<dyn BlockDevice> {
        match &self.undo {
            Some(undo) => Arc::clone(undo) as Arc<dyn BlockDevice>,
            None => Arc::clone(&self.device) as Arc<dyn BlockDevice>,
        }
    }

    /// The undo file as it stands.
    pub fn undo_file(&self) -> Option<UndoKept> {
        self.undo.as_ref().map(|undo| kept(undo))
    }

    /// Ends a tool that ran to its end: records the state it left in the undo file, so that
    /// `lds undo` refuses a volume written to since (a failure to record is in
    /// `Finished::error`; the undo file still restores).
    pub fn finish(self) -> Finished<D> {
        let error = self.undo.as_ref().and_then(|undo| undo.finish(&metadata_regions(undo.as_ref())).err());
        self.end(error)
    }

    /// Ends a tool that failed: the undo file stays as it is (unfinished), and restores what
    /// was written.
    pub fn abandon(self) -> Finished<D> {
        self.end(None)
    }

    fn end(self, error: Option<UndoError>) -> Finished<D> {
        // An undo file through which no write was issued restores nothing: a header that a
        // full disk cut short would only block the next run (`lds undo` cannot read it).
        if let Some(undo) = &self.undo {
            undo.discard_if_unused();
        }
        let undo_file = self.undo_file();
        // The undo log holds the volume too: dropped, the volume is the caller's alone again.
        drop(self.undo);
        Finished { undo_file, error, device: self.device }
    }
}

/// What a session left.
pub struct Finished<D> {
    /// The undo file, when one was kept.
    pub undo_file: Option<UndoKept>,
    /// Why its final state could not be recorded.
    pub error: Option<UndoError>,
    device: Arc<D>,
}

impl<D> Finished<D> {
    /// The undo file, when one was kept and the tool wrote anything.
    pub fn written(&self) -> Option<&UndoKept> {
        self.undo_file.as_ref().filter(|kept| kept.bytes > 0)
    }

    /// The volume, once nothing else holds it (the engine closed).
    pub fn into_device(self) -> Option<D> {
        Arc::try_unwrap(self.device).ok()
    }
}

fn kept(undo: &UndoDevice) -> UndoKept {
    let (path, bytes) = undo.undo_file();
    UndoKept { path, bytes }
}

/// The default undo file of a volume: next to an image file, in the current directory for a
/// block device (`/dev` is no place for it).
pub fn default_undo_path(path: &Path, kind: DeviceKind) -> PathBuf {
    match kind {
        DeviceKind::ImageFile => PathBuf::from(format!("{}.lds-undo", path.display())),
        DeviceKind::BlockDevice => {
            let name = path.file_name().map_or_else(|| "device".into(), |name| name.to_string_lossy().into_owned());
            PathBuf::from(format!("{name}.lds-undo"))
        }
    }
}

/// `default` when no file is there; else the same name with the tool and the time (UTC) in
/// it, `IMAGE.resize-20261129T012345Z.lds-undo`, and a count after it when even that exists.
pub fn free_undo_path(default: &Path, tool: &str, seconds: u64) -> PathBuf {
    if !default.exists() && default.symlink_metadata().is_err() {
        return default.to_path_buf();
    }
    let text = default.to_string_lossy();
    let stem = text.strip_suffix(".lds-undo").unwrap_or(&text);
    // The tool's name as a file name part: `compaction resume` -> `compaction-resume`.
    let tool: String = tool.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }).collect();
    let stamp = utc_stamp(seconds);
    // Bounded: the count only grows past files that exist.
    (1..=10_000u32)
        .map(|count| match count {
            1 => PathBuf::from(format!("{stem}.{tool}-{stamp}.lds-undo")),
            count => PathBuf::from(format!("{stem}.{tool}-{stamp}-{count}.lds-undo")),
        })
        .find(|path| path.symlink_metadata().is_err())
        .unwrap_or_else(|| PathBuf::from(format!("{stem}.{tool}-{stamp}-{seconds}.lds-undo")))
}

fn now_seconds() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_secs())
}

/// The UTC date and time of `seconds` since the Unix epoch, in the proleptic Gregorian
/// calendar: year, month, day, hour, minute, second (how undo files are named and shown).
pub fn utc_fields(seconds: u64) -> (i64, i64, i64, u64, u64, u64) {
    let days = seconds / 86_400;
    let in_day = seconds % 86_400;
    // Howard Hinnant's days-to-civil, for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day, in_day / 3600, in_day % 3600 / 60, in_day % 60)
}

/// `YYYYMMDDTHHMMSSZ` of `seconds` since the Unix epoch.
fn utc_stamp(seconds: u64) -> String {
    let (year, month, day, hour, minute, second) = utc_fields(seconds);
    format!("{year:04}{month:02}{day:02}T{hour:02}{minute:02}{second:02}Z")
}

/// The header of an undo file for `tool` about to write to `device` (its label, if readable,
/// names the volume and the sector size the records use), made at `created` (seconds since
/// the Unix epoch). With no valid label the header names no volume and the log refuses the
/// first write (`lds undo` could not check the volume); the tools that write find a label
/// first.
pub fn undo_header(device: &dyn BlockDevice, tool: &str, created: u64) -> UndoHeader {
    let label = read_labels(device).ok().and_then(|labels| labels.choose().ok().map(|(_, label)| label.clone()));
    UndoHeader {
        volume_uuid: volume_uuid_of(device).unwrap_or([0; 16]),
        device_len: device.len(),
        sector_size: label.as_ref().map_or(512, |label| label.geometry.sector_size),
        tool: tool.to_string(),
        created,
    }
}

/// An undo log in the file `undo_path` for `tool` about to write to `device`.
fn undo_log(device: &dyn BlockDevice, undo_path: &Path, tool: &str) -> Result<UndoLog, UndoError> {
    UndoLog::create(undo_path, undo_header(device, tool, now_seconds()))
}

/// The regions that hold a volume's state (both label sectors and every log area), by the
/// label the device has now; empty when it has none. Their bytes are the final state an undo
/// file records.
pub fn metadata_regions(device: &dyn BlockDevice) -> Vec<(u64, u64)> {
    let Some(label) = read_labels(device).ok().and_then(|labels| labels.choose().ok().map(|(_, label)| label.clone()))
    else {
        return Vec::new();
    };
    let geometry = label.geometry;
    let mut regions = vec![(0, geometry.sector()), (geometry.ofs_backup_label(), geometry.sector())];
    for instance in 0..geometry.instance_count {
        for kind in [LogKind::Version, LogKind::Backup] {
            regions.push(geometry.log_area(kind, instance));
        }
    }
    regions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_stamps_follow_the_calendar() {
        assert_eq!(utc_stamp(0), "19700101T000000Z");
        assert_eq!(utc_stamp(951_782_400), "20000229T000000Z", "a leap day of a century year");
        assert_eq!(utc_stamp(1_764_380_000), "20251129T013320Z");
        assert_eq!(utc_stamp(4_102_444_799), "20991231T235959Z");
    }

    #[test]
    fn a_default_undo_path_never_names_an_existing_file() {
        let directory = std::env::temp_dir().join(format!("lds-undo-names-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&directory);
        std::fs::create_dir_all(&directory).unwrap_or_else(|error| panic!("{error}"));
        let default = directory.join("a.img.lds-undo");
        let result = std::panic::catch_unwind(|| {
            assert_eq!(free_undo_path(&default, "repair", 0), default, "free: the plain name");
            std::fs::write(&default, b"earlier run").unwrap_or_else(|error| panic!("{error}"));
            let second = free_undo_path(&default, "compaction resume", 1_764_380_000);
            assert_eq!(second, directory.join("a.img.compaction-resume-20251129T013320Z.lds-undo"));
            std::fs::write(&second, b"").unwrap_or_else(|error| panic!("{error}"));
            let third = free_undo_path(&default, "compaction resume", 1_764_380_000);
            assert_eq!(third, directory.join("a.img.compaction-resume-20251129T013320Z-2.lds-undo"));
            // A dangling symlink is a name taken too: never written through.
            std::os::unix::fs::symlink(directory.join("nowhere"), &third).unwrap_or_else(|error| panic!("{error}"));
            let fourth = free_undo_path(&default, "compaction resume", 1_764_380_000);
            assert_eq!(fourth, directory.join("a.img.compaction-resume-20251129T013320Z-3.lds-undo"));
        });
        let _ = std::fs::remove_dir_all(&directory);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    }
}
