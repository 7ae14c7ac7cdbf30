//! `lds repair` (e2fsck's modes and exit codes) and `lds undo` (e2undo): repair writes an undo
//! file before it touches the volume, and `lds undo` restores the volume from it byte for byte.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressStyle};
use lds_check::Severity;
use lds_repair::{repair, FixClass, FixState, Mode, RepairOptions, RepairReport};
use lds_volume::undo::{check_undo, undo, volume_uuid_of, UndoDevice, UndoError, UndoFile, UndoHeader, UndoLog};
use lds_volume::{read_labels, VolumeError};
use lds_volume::{BlockDevice, DeviceError, DeviceKind, OpenMode};
use lds_volume::{Members, VolumeDevice};
use serde_json::json;

/// Exit code: the repair could not run.
pub const EXIT_OPERATIONAL: i32 = 8;
/// Exit code: usage error.
pub const EXIT_USAGE: i32 = 16;

/// Options of `lds repair`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RepairArgs {
    /// Block device or image file.
    pub path: PathBuf,
    /// Report what would be fixed; write nothing.
    #[arg(short = 'n', long = "no-changes", conflicts_with_all = ["preen", "yes"])]
    pub dry_run: bool,
    /// Fix only what loses no data (rewrite a label copy, rebuild a filter, ...); leave the rest (exit 4).
    #[arg(short = 'p', long = "preen", conflicts_with = "yes")]
    pub preen: bool,
    /// Fix everything repair can; each drop of data is reported.
    #[arg(short = 'y', long = "yes")]
    pub yes: bool,
    /// Where to save the bytes repair overwrites (default: next to an image file,
    /// PATH.lds-undo; for a block device, NAME.lds-undo in the current directory).
    #[arg(long, value_name = "FILE", conflicts_with = "no_undo")]
    pub undo_file: Option<PathBuf>,
    /// Write no undo file.
    #[arg(long)]
    pub no_undo: bool,
    /// Print JSON (schema lds-repair/1, docs/repair-json.md).
    #[arg(long)]
    pub json: bool,
}

/// Options of `lds undo`.
#[derive(Debug, Clone, clap::Args)]
pub struct UndoArgs {
    /// The undo file a writing tool left.
    pub undo_file: PathBuf,
    /// The block device or image file to restore.
    pub path: PathBuf,
    /// Restore even if sectors changed since, the device is not the one recorded, or the undo
    /// file does not verify (then only its records whose checksums verify, exit 1).
    #[arg(long)]
    pub force: bool,
    /// Print what would be restored (sectors, bytes, ranges, the tool and time recorded,
    /// whether the file verified, what the checks say); write nothing.
    #[arg(short = 'n', long = "dry-run")]
    pub dry_run: bool,
}

/// The undo file options of every offline tool that writes through the engine
/// (`lds compaction resume|abort`, `lds recover`).
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

/// A volume opened for writing (exclusive lock) through an undo log, for the engine
/// (`Db::open_device`): the undo file is created at the first write and synced before it.
pub struct UndoTarget {
    /// The device the engine writes to.
    pub device: Arc<dyn BlockDevice>,
    undo: Option<Arc<UndoDevice>>,
}

impl UndoTarget {
    /// Opens `path` for writing (refused while another process holds it, after waiting at
    /// most `wait`) with an undo log unless `--no-undo`. Errors are messages for the user.
    pub fn open(
        path: &Path,
        choice: &UndoChoice,
        tool: &str,
        wait: std::time::Duration,
        err: &mut dyn Write,
    ) -> Result<Self, String> {
        let device = Members::open(path, OpenMode::ReadWrite, wait).map_err(|error| match error {
            error @ VolumeError::Device(DeviceError::Locked { .. }) => {
                format!("{error}; refusing to write to a volume in use (--wait SECONDS waits for it)")
            }
            error => error.to_string(),
        })?;
        state_devices(&device, tool, err);
        if choice.no_undo {
            return Ok(Self { device: Arc::new(device), undo: None });
        }
        let undo_path = choice.undo_file.clone().unwrap_or_else(|| default_undo_path(path, device.first().kind()));
        let log = undo_log(&device, &undo_path, tool).map_err(|error| error.to_string())?;
        let undo = Arc::new(UndoDevice::new(Arc::new(device), log));
        Ok(Self { device: Arc::clone(&undo) as Arc<dyn BlockDevice>, undo: Some(undo) })
    }

    /// Records the final state in the undo file (once the engine is closed) and says where
    /// it is, when anything was written.
    pub fn finish(self, path: &Path, err: &mut dyn Write, command: &str) {
        let Some(undo) = self.undo else { return };
        finish_undo(&undo, err, command);
        let (undo_path, len) = undo.undo_file();
        if len > 0 {
            let _ = writeln!(
                err,
                "lds {command}: undo file {} ({len} bytes): lds undo {} {} restores the volume",
                undo_path.display(),
                undo_path.display(),
                path.display()
            );
        }
    }
}

/// Opens the volume of an offline tool: `ReadWrite` takes the exclusive lock, refused while
/// another process holds it. Prints the error as `lds COMMAND: ...` and returns exit code 8.
///
/// The volume is named by any of its devices; a volume of several devices opens all of them
/// (SPEC.md §4.3).
pub fn open_volume(path: &Path, mode: OpenMode, command: &str, err: &mut dyn Write) -> Result<VolumeDevice, i32> {
    let device = Members::open(path, mode, std::time::Duration::ZERO).map_err(|error| {
        let _ = match error {
            VolumeError::Device(DeviceError::Locked { .. }) => {
                writeln!(err, "lds {command}: {error}; refusing a volume in use")
            }
            error => writeln!(err, "lds {command}: {error}"),
        };
        EXIT_OPERATIONAL
    })?;
    if mode == OpenMode::ReadWrite {
        state_devices(&device, command, err);
    }
    Ok(device)
}

/// Says which devices a writing command may write, before its first write, when the volume
/// has several (docs/safety.md: a command names what it writes).
pub fn state_devices(device: &VolumeDevice, command: &str, err: &mut dyn Write) {
    if let Some(devices) = device.describe() {
        let _ = writeln!(err, "lds {command}: the volume's devices, which it may write: {devices}");
    }
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

/// An undo log for a tool about to write to `device` (its label, if readable, names the
/// volume and the sector size the records use). With no valid label the header names no
/// volume and the log refuses the first write (`lds undo` could not check the volume); the
/// tools that write find a label first.
pub fn undo_log(device: &dyn BlockDevice, undo_path: &Path, tool: &str) -> Result<UndoLog, UndoError> {
    let label = read_labels(device).ok().and_then(|labels| labels.choose().ok().map(|(_, label)| label.clone()));
    let header = UndoHeader {
        volume_uuid: volume_uuid_of(device).unwrap_or([0; 16]),
        device_len: device.len(),
        sector_size: label.as_ref().map_or(512, |label| label.geometry.sector_size),
        tool: tool.to_string(),
        created: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |since| since.as_secs()),
    };
    UndoLog::create(undo_path, header)
}

/// The regions that hold a volume's state (both label sectors and every log area), by the
/// label the device has now; empty when it has none.
pub fn metadata_regions(device: &dyn BlockDevice) -> Vec<(u64, u64)> {
    let Some(label) = read_labels(device).ok().and_then(|labels| labels.choose().ok().map(|(_, label)| label.clone()))
    else {
        return Vec::new();
    };
    let geometry = label.geometry;
    let mut regions = vec![(0, geometry.sector()), (geometry.ofs_backup_label(), geometry.sector())];
    for instance in 0..geometry.instance_count {
        for kind in [lds_format::geometry::LogKind::Version, lds_format::geometry::LogKind::Backup] {
            regions.push(geometry.log_area(kind, instance));
        }
    }
    regions
}

/// Records the state a tool leaves in its undo file, so that `lds undo` refuses a volume
/// written to since; a failure is reported on `err` (the undo file still restores).
pub fn finish_undo(undo_device: &UndoDevice, err: &mut dyn Write, command: &str) {
    if let Err(error) = undo_device.finish(&metadata_regions(undo_device)) {
        let _ = writeln!(err, "lds {command}: {error}");
    }
}

fn state_name(state: &FixState) -> &'static str {
    match state {
        FixState::Applied => "applied",
        FixState::Planned => "planned",
        FixState::Refused(_) => "refused",
    }
}

fn problems_json(report: &lds_check::Report) -> serde_json::Value {
    json!(report
        .problems
        .iter()
        .map(|problem| json!({
            "code": problem.code.number(),
            "severity": problem.code.severity().name(),
            "structure": problem.structure,
            "offset": problem.offset,
            "message": problem.message,
        }))
        .collect::<Vec<_>>())
}

/// One range of entries a fix drops (docs/repair-json.md): keys in lowercase hex.
fn lost_json(lost: &lds_repair::Lost) -> serde_json::Value {
    use lds_format::error::hex;
    let mut value = json!({ "instance": lost.instance });
    if let serde_json::Value::Object(map) = &mut value {
        match &lost.from {
            lds_repair::KeyFrom::First => {}
            lds_repair::KeyFrom::Key(key) => {
                map.insert("key_from".into(), json!(hex(key)));
            }
            lds_repair::KeyFrom::After(key) => {
                map.insert("key_after".into(), json!(hex(key)));
            }
        }
        if let Some(through) = &lost.through {
            map.insert("key_through".into(), json!(hex(through)));
        }
        map.insert("smallest_seq".into(), json!(lost.smallest_seq));
        map.insert("largest_seq".into(), json!(lost.largest_seq));
    }
    value
}

fn print_json(
    args: &RepairArgs,
    mode: Mode,
    report: &RepairReport,
    undo_file: Option<(PathBuf, u64)>,
    out: &mut dyn Write,
) {
    let document = json!({
        "schema": "lds-repair/1",
        "device": args.path.display().to_string(),
        "mode": match mode { Mode::DryRun => "n", Mode::Preen => "p", Mode::Yes => "y" },
        "before": problems_json(&report.before),
        "fixes": report.fixes.iter().map(|fix| json!({
            "codes": fix.codes.iter().map(|code| code.number()).collect::<Vec<_>>(),
            "structure": fix.structure,
            "offset": fix.offset,
            "action": fix.action,
            "dropped": fix.dropped.iter().map(|dropped| dropped.what.as_str()).collect::<Vec<_>>(),
            "lost": fix.dropped.iter().flat_map(|dropped| dropped.lost.iter().map(lost_json)).collect::<Vec<_>>(),
            "class": match fix.class { FixClass::Preen => "preen", FixClass::Fix => "fix" },
            "state": state_name(&fix.state),
            "refused_because": match &fix.state { FixState::Refused(why) => Some(why.clone()), _ => None },
        })).collect::<Vec<_>>(),
        "unrepairable": report.unrepairable,
        "writes": report.writes.iter().map(|write| json!({
            "structure": write.structure,
            "offset": write.offset,
            "len": write.len,
        })).collect::<Vec<_>>(),
        "bytes_written": if mode == Mode::DryRun { 0 } else { report.bytes_written() },
        "undo_file": undo_file.map(|(path, len)| json!({ "path": path.display().to_string(), "bytes": len })),
        "after": report.after.as_ref().map(problems_json),
        "exit_code": report.exit_code(),
    });
    let _ = writeln!(out, "{}", serde_json::to_string_pretty(&document).unwrap_or_default());
}

fn print_text(
    args: &RepairArgs,
    mode: Mode,
    report: &RepairReport,
    undo_file: Option<(PathBuf, u64)>,
    out: &mut dyn Write,
) {
    for problem in &report.before.problems {
        let _ = writeln!(out, "{}", problem.line());
    }
    for fix in &report.fixes {
        let _ = writeln!(out, "{}", fix.line());
        for dropped in &fix.dropped {
            let _ = writeln!(out, "  dropped: {dropped}");
        }
    }
    for what in &report.unrepairable {
        let _ = writeln!(out, "cannot repair {what}");
    }
    match mode {
        Mode::DryRun if !report.writes.is_empty() => {
            let bytes: u64 = report.writes.iter().map(|write| write.len).sum();
            let _ = writeln!(out, "would write {} times, {bytes} bytes; nothing was written (-n)", report.writes.len());
        }
        _ if !report.writes.is_empty() => {
            let _ = writeln!(out, "wrote {} times, {} bytes", report.writes.len(), report.bytes_written());
        }
        _ => {}
    }
    if let Some((path, len)) = undo_file.filter(|(_, len)| *len > 0) {
        let _ = writeln!(
            out,
            "undo file: {} ({len} bytes; lds undo {} {} restores the volume)",
            path.display(),
            path.display(),
            args.path.display()
        );
    }
    if let Some(after) = &report.after {
        for problem in after.problems.iter().filter(|problem| problem.code.severity() != Severity::Info) {
            let _ = writeln!(out, "after repair: {}", problem.line());
        }
    }
    let verdict = match report.exit_code() {
        0 => "clean, nothing to fix",
        1 => "errors corrected",
        _ => "errors left uncorrected",
    };
    let _ = writeln!(out, "{}: {verdict}", args.path.display());
}

/// Runs `lds repair`; returns the exit code.
pub fn run(args: &RepairArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let mode = match (args.dry_run, args.preen, args.yes) {
        (true, _, _) => Mode::DryRun,
        (_, true, _) => Mode::Preen,
        (_, _, true) => Mode::Yes,
        _ => {
            let _ = writeln!(
                err,
                "lds repair: choose -n (report only), -p (fix what loses no data) or -y (fix everything)"
            );
            return EXIT_USAGE;
        }
    };
    let open_mode = if mode == Mode::DryRun { OpenMode::ReadOnlyLocked } else { OpenMode::ReadWrite };
    let device = match open_volume(&args.path, open_mode, "repair", err) {
        Ok(device) => device,
        Err(code) => return code,
    };
    let undo_path = args.undo_file.clone().unwrap_or_else(|| default_undo_path(&args.path, device.first().kind()));
    let log = if mode == Mode::DryRun || args.no_undo {
        None
    } else {
        match undo_log(&device, &undo_path, "repair") {
            Ok(log) => Some(log),
            Err(error) => {
                let _ = writeln!(err, "lds repair: {error}");
                return EXIT_OPERATIONAL;
            }
        }
    };
    let device: Arc<dyn BlockDevice> = Arc::new(device);
    let undo_device = log.map(|log| UndoDevice::new(Arc::clone(&device), log));
    let target: &dyn BlockDevice = match &undo_device {
        Some(undo_device) => undo_device,
        None => device.as_ref(),
    };
    let terminal = std::io::stderr().is_terminal() && !args.json;
    let bar = if terminal { ProgressBar::new(0) } else { ProgressBar::hidden() };
    bar.set_style(
        ProgressStyle::with_template("checking chunks [{bar:20}] {percent:>3}% {bytes}/{total_bytes}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut progress = |done: u64, total: u64| {
        if total >= (64 << 20) {
            bar.set_length(total);
            bar.set_position(done);
        }
    };
    let result = repair(target, RepairOptions::new(mode), &mut progress);
    bar.finish_and_clear();
    if let (Some(undo_device), Ok(_)) = (&undo_device, &result) {
        finish_undo(undo_device, err, "repair");
    }
    let undo_file = undo_device.as_ref().map(UndoDevice::undo_file);
    let report = match result {
        Ok(report) => report,
        Err(error) => {
            let _ = writeln!(err, "lds repair: {error}");
            if let Some((path, len)) = undo_file.filter(|(_, len)| *len > 0) {
                let _ = writeln!(
                    err,
                    "lds repair: the undo file {} ({len} bytes) restores what was written: lds undo {} {}",
                    path.display(),
                    path.display(),
                    args.path.display()
                );
            }
            return EXIT_OPERATIONAL;
        }
    };
    if args.json {
        print_json(args, mode, &report, undo_file, out);
    } else {
        print_text(args, mode, &report, undo_file, out);
    }
    report.exit_code()
}

/// Seconds since the Unix epoch as a UTC date and time (`2024-05-01 12:00:00 UTC`).
fn utc(seconds: u64) -> String {
    let days = seconds / 86_400;
    let rest = seconds % 86_400;
    // Civil from days (Howard Hinnant's algorithm), for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC", rest / 3600, rest % 3600 / 60, rest % 60)
}

/// What an undo file holds and whether it verified, for `lds undo -n` and before a forced run.
fn describe_undo_file(args: &UndoArgs, file: &UndoFile, out: &mut dyn Write) {
    let header = &file.header;
    let _ = writeln!(
        out,
        "undo file {}: LDSUNDO{} written by {} at {} ({}), for volume {} of {} bytes, sectors of {} bytes",
        args.undo_file.display(),
        file.version,
        header.tool,
        utc(header.created),
        header.created,
        lds_format::error::hex(&header.volume_uuid),
        header.device_len,
        header.sector_size
    );
    let run = if file.finished { "the tool finished" } else { "the tool did not finish" };
    if file.damage.is_empty() {
        let torn = if file.torn_tail > 0 {
            format!(
                "; its last batch was torn by the crash ({} bytes left out: their write was never issued)",
                file.torn_tail
            )
        } else {
            String::new()
        };
        let _ = writeln!(out, "verified: {run}; {} batches, {} records{torn}", file.batches, file.records);
    } else {
        let _ = writeln!(
            out,
            "NOT verified ({run}): {} records verified by their own checksums; what does not verify:",
            file.records
        );
        for damage in &file.damage {
            let _ = writeln!(out, "  byte {}: {}", damage.offset, damage.reason);
        }
        let lost = file.unrestorable();
        if !lost.is_empty() {
            let offsets: Vec<String> = lost.iter().map(u64::to_string).collect();
            let _ = writeln!(
                out,
                "  sectors the tool wrote whose original bytes are lost with them (not restorable): {}",
                offsets.join(", ")
            );
        }
    }
    let ranges: Vec<String> = file.ranges().iter().map(|(offset, len)| format!("{offset}..{}", offset + len)).collect();
    let _ = writeln!(
        out,
        "saved: {} sectors ({} bytes) in {} ranges: {}",
        file.originals.len(),
        file.restored_bytes(),
        ranges.len(),
        if ranges.is_empty() { "none".to_string() } else { ranges.join(", ") }
    );
}

/// The exit code of a refusal of `lds undo`: 1 when nothing was written because of what the
/// undo file or the volume holds, 8 when a device or the file could not be read or written.
fn undo_refusal_code(error: &UndoError) -> i32 {
    match error {
        UndoError::File { .. } | UndoError::Device(_) | UndoError::Exists { .. } | UndoError::Closed { .. } => {
            EXIT_OPERATIONAL
        }
        _ => 1,
    }
}

/// Runs `lds undo`; returns the exit code (0 restored; 1 refused, nothing written, or forced
/// and only part restored; 8 could not run).
pub fn run_undo(args: &UndoArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let bytes = match std::fs::read(&args.undo_file) {
        Ok(bytes) => bytes,
        Err(error) => {
            let _ = writeln!(err, "lds undo: {}: {error}", args.undo_file.display());
            return EXIT_OPERATIONAL;
        }
    };
    // Without --force or -n a file must verify whole; with them, the records that verify are
    // read and what does not verify is said.
    let parsed = if args.force || args.dry_run {
        UndoFile::parse_salvaging(&bytes, &args.undo_file)
    } else {
        UndoFile::parse(&bytes, &args.undo_file)
    };
    let file = match parsed {
        Ok(file) => file,
        Err(error) => {
            let code = undo_refusal_code(&error);
            let _ = writeln!(
                err,
                "lds undo: {error}; nothing was written{}",
                if args.force || !matches!(error, UndoError::Damaged { .. }) {
                    ""
                } else {
                    " (--force restores only the records that verify)"
                }
            );
            return code;
        }
    };
    let mode = if args.dry_run { OpenMode::ReadOnlyLocked } else { OpenMode::ReadWrite };
    let device = match open_volume(&args.path, mode, "undo", err) {
        Ok(device) => device,
        Err(code) => return code,
    };
    let uuid = volume_uuid_of(&device);
    if args.dry_run {
        describe_undo_file(args, &file, out);
        return match check_undo(&file, &device, uuid, args.force) {
            Ok(outcome) => {
                let _ = writeln!(
                    out,
                    "{}: would restore {} sectors ({} bytes); {} already hold their original bytes; nothing was written (-n)",
                    args.path.display(),
                    outcome.sectors,
                    outcome.bytes,
                    outcome.unchanged
                );
                i32::from(!file.damage.is_empty())
            }
            Err(error) => {
                let _ = writeln!(out, "{}: would refuse: {error}; nothing was written (-n)", args.path.display());
                undo_refusal_code(&error)
            }
        };
    }
    if !file.damage.is_empty() {
        describe_undo_file(args, &file, err);
    }
    match undo(&file, &device, uuid, args.force) {
        Ok(outcome) => {
            let _ = writeln!(
                out,
                "{}: restored {} sectors ({} bytes) that {} wrote; {} already held their original bytes",
                args.path.display(),
                outcome.sectors,
                outcome.bytes,
                file.header.tool,
                outcome.unchanged
            );
            if file.damage.is_empty() {
                return 0;
            }
            let _ = writeln!(
                err,
                "lds undo: {}: --force restored only the records that verify; what the parts of the file listed above held is not restored, so the volume is not as it was before {}",
                args.undo_file.display(),
                file.header.tool
            );
            1
        }
        Err(error) => {
            let _ = writeln!(err, "lds undo: {error}");
            undo_refusal_code(&error)
        }
    }
}
