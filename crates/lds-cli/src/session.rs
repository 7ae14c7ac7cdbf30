//! What the commands that write a volume share on the command line: the undo file's
//! arguments, and the lines a session prints (the devices it may write, why it could not
//! start, where its undo file is). The session itself is `lds_tools::session`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lds_tools::session::{Finished, UndoKept};
use lds_tools::{Session, SessionError};
use lds_volume::{DeviceError, Members, OpenMode, VolumeDevice, VolumeError};

/// Exit code: the command could not run.
pub const EXIT_OPERATIONAL: i32 = 8;
/// Exit code: usage error.
pub const EXIT_USAGE: i32 = 16;

/// The undo file options of every offline tool that writes (`lds repair`, `lds resize`,
/// `lds compaction resume|abort`, `lds recover`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct UndoChoice {
    /// Where to save the bytes the command overwrites (default: next to an image file,
    /// PATH.lds-undo; for a block device, NAME.lds-undo in the current directory).
    #[arg(long, value_name = "FILE", conflicts_with = "no_undo")]
    pub undo_file: Option<PathBuf>,
    /// Write no undo file.
    #[arg(long)]
    pub no_undo: bool,
}

impl UndoChoice {
    /// The session's form of the choice.
    pub fn choice(&self) -> lds_tools::UndoChoice {
        lds_tools::UndoChoice { file: self.undo_file.clone(), none: self.no_undo }
    }
}

/// Opens the session of `command` on the volume `path` names and says which devices it may
/// write (a volume of several, docs/safety.md); `Err` is why it could not, for the user.
pub fn open(path: &Path, command: &str, wait: Duration, err: &mut dyn Write) -> Result<Session, SessionError> {
    let session = Session::open(path, command, wait)?;
    state_devices(session.devices(), command, err);
    Ok(session)
}

/// Says which devices a writing command may write, before its first write, when the volume
/// has several.
pub fn state_devices(devices: Option<&str>, command: &str, err: &mut dyn Write) {
    if let Some(devices) = devices {
        let _ = writeln!(err, "lds {command}: the volume's devices, which it may write: {devices}");
    }
}

/// Why a session could not start, for a command whose volume another process may hold:
/// `wait_hint` adds that `--wait` waits for it.
pub fn open_error(error: &SessionError, wait_hint: bool) -> String {
    match error {
        SessionError::InUse(error) if wait_hint => {
            format!("{error}; refusing to write to a volume in use (--wait SECONDS waits for it)")
        }
        SessionError::InUse(error) => format!("{error}; refusing a volume in use"),
        error => error.to_string(),
    }
}

/// Opens the volume of a command that only reads, under the shared lock (refused while a
/// writer holds it). Prints the error as `lds COMMAND: ...` and returns exit code 8.
pub fn open_read(path: &Path, command: &str, err: &mut dyn Write) -> Result<VolumeDevice, i32> {
    Members::open(path, OpenMode::ReadOnlyLocked, Duration::ZERO).map_err(|error| {
        let _ = writeln!(err, "lds {command}: {}", read_error(&error));
        EXIT_OPERATIONAL
    })
}

/// Why a volume could not be opened for reading, for the user.
pub fn read_error(error: &VolumeError) -> String {
    match error {
        VolumeError::Device(DeviceError::Locked { .. }) => format!("{error}; refusing a volume in use"),
        error => error.to_string(),
    }
}

/// Says what a finished session of an engine command left: why its undo file's final state
/// could not be recorded, and where the undo file is when anything was written.
pub fn report_finished<D>(finished: &Finished<D>, path: &Path, command: &str, err: &mut dyn Write) {
    report_error(finished, command, err);
    if let Some(UndoKept { path: undo, bytes }) = finished.written() {
        let _ = writeln!(
            err,
            "lds {command}: undo file {} ({bytes} bytes): lds undo {} {} restores the volume",
            undo.display(),
            undo.display(),
            path.display()
        );
    }
}

/// Says why a session's undo file could not record its final state (the undo file still
/// restores).
pub fn report_error<D>(finished: &Finished<D>, command: &str, err: &mut dyn Write) {
    if let Some(error) = &finished.error {
        let _ = writeln!(err, "lds {command}: {error}");
    }
}

/// The line that says where the undo file of a finished command is, on its output.
pub fn undo_line(kept: &UndoKept, volume: &Path) -> String {
    format!(
        "undo file: {} ({} bytes; lds undo {} {} restores the volume)",
        kept.path.display(),
        kept.bytes,
        kept.path.display(),
        volume.display()
    )
}
