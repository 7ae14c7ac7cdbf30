//! Running every command of the `lds` binary against crafted volumes, and the oracles
//! (docs/reliability.md I6, I9, I10; docs/safety.md).
//!
//! Each case gets a fresh directory holding the crafted volume (`vol.img`, and `vol-1.img`
//! for the second device of a volume of two), a healthy volume of another uuid beside it
//! (`neighbour.img`), and for an undo case the crafted undo file (`vol.img.lds-undo`). Every
//! read command runs there as a child process with a timeout and an address-space limit
//! (`setrlimit(RLIMIT_AS)` before `exec`); the writing ones (`repair -y`, `undo`) run in a
//! copy of that directory. After each run:
//! - no panic (exit 101, or "panicked at" on standard error), no timeout, no death by a signal
//!   (an allocation refused under the limit aborts);
//! - every file of the directory hashes as before, except: a read command's named output
//!   (`metadump`, `salvage --output`), and for `repair -y` and `undo` the volume's devices and
//!   its undo file;
//! - after `repair -y` that says it corrected the volume (exit 0 or 1): `fsck --deep` finds
//!   nothing (I6), and every key that `salvage --export ndjson` read from the crafted volume
//!   with the healthy volume's value reads the same from the repaired one, or is named as
//!   dropped in repair's `--json` report (I10; see [`Loss`]);
//! - `undo` of that repair's undo file puts back the crafted bytes exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Bases, CaseError, Crafted, Seal, Space, Volume};

/// The name of the crafted volume's first device in a case's directory.
pub const VOLUME: &str = "vol.img";
/// The healthy volume beside it.
pub const NEIGHBOUR: &str = "neighbour.img";
/// The undo file of an undo case, and the one `repair -y` writes.
pub const UNDO_FILE: &str = "vol.img.lds-undo";
/// Files read at most from a case's directory when hashing it.
const DIRECTORY_ENTRIES_MAX: usize = 1000;

/// How the runner runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// The `lds` binary.
    pub lds: PathBuf,
    /// Where case directories are made (each is removed after its case unless it failed and
    /// `keep` is set).
    pub work: PathBuf,
    /// Longest a command may run.
    pub timeout: Duration,
    /// The address-space limit of each child, bytes.
    pub memory_limit: u64,
    /// Keep the directory of a case with findings.
    pub keep: bool,
    /// Only the commands whose label contains one of these (all when empty).
    pub only_commands: Vec<String>,
    /// A program that serves spawns ([`Spawner`]); without one, children are forked from the
    /// runner and their peak memory counts the runner's own.
    pub spawner: Option<PathBuf>,
}

impl Options {
    /// The defaults: 20 s, 1 GiB, the system's temporary directory.
    pub fn new(lds: PathBuf) -> Self {
        Self {
            lds,
            work: std::env::temp_dir(),
            timeout: Duration::from_secs(20),
            memory_limit: 1 << 30,
            keep: false,
            only_commands: Vec::new(),
            spawner: None,
        }
    }
}

/// One thing an oracle found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The case.
    pub case: String,
    /// The command, as run in the case's directory.
    pub command: String,
    /// What went wrong.
    pub what: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} | lds {} | {}", self.case, self.command, self.what)
    }
}

/// What repair did with a key salvage read intact, when the repaired volume does not hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// A `lost` range of one of its fixes covers the key (docs/repair-json.md: the entries a
    /// fix drops, by instance and key range).
    Named,
    /// Repair's report drops data, but no `lost` range covers the key: a finding (I10).
    Unnamed,
    /// Repair dropped nothing and the key is gone: a finding.
    Silent,
}

/// A `lost` range of repair's `--json` report, as far as keys go (the runner does not know
/// the sequence salvage read a key at): instance, the first key (inclusive, or after it),
/// the last key (inclusive); `None` ends are open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostKeys {
    /// The instance.
    pub instance: u32,
    /// The lower end: (key, inclusive).
    pub from: Option<(Vec<u8>, bool)>,
    /// The upper end, inclusive.
    pub through: Option<Vec<u8>>,
}

impl LostKeys {
    /// Whether `key` of `instance` lies in the range.
    pub fn covers(&self, instance: u32, key: &[u8]) -> bool {
        let above = match &self.from {
            None => true,
            Some((from, true)) => key >= from.as_slice(),
            Some((after, false)) => key > after.as_slice(),
        };
        instance == self.instance && above && self.through.as_ref().is_none_or(|through| key <= through.as_slice())
    }

    /// Every range of every fix of a report.
    pub fn of_report(report: &serde_json::Value) -> Vec<Self> {
        let unhex = |value: Option<&serde_json::Value>| value.and_then(serde_json::Value::as_str).and_then(unhex);
        report
            .get("fixes")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|fix| fix.get("lost").and_then(serde_json::Value::as_array))
            .flatten()
            .map(|range| Self {
                instance: range.get("instance").and_then(serde_json::Value::as_u64).unwrap_or(0) as u32,
                from: unhex(range.get("key_from"))
                    .map(|key| (key, true))
                    .or_else(|| unhex(range.get("key_after")).map(|key| (key, false))),
                through: unhex(range.get("key_through")),
            })
            .collect()
    }
}

/// Totals of a run.
#[derive(Debug, Default, Clone)]
pub struct Summary {
    /// Cases run.
    pub cases: usize,
    /// Distinct command labels run.
    pub commands: BTreeSet<String>,
    /// Command runs.
    pub runs: usize,
    /// What the oracles found.
    pub findings: Vec<Finding>,
    /// Cases that could not be built or set up (not findings of the tools).
    pub errors: Vec<String>,
    /// Peak resident memory of a child, KiB (`ru_maxrss`), and that run. Without a
    /// [`Spawner`], a child forked from the runner counts the runner's resident pages it
    /// inherited until its `exec` (Linux keeps the larger peak across `exec`): an upper bound;
    /// see `baseline_rss_kib`.
    pub worst_rss_kib: u64,
    /// The run of the worst peak.
    pub worst_rss_run: String,
    /// Keys repair lost that its report drops data for without naming them ([`Loss::Unnamed`]).
    pub unnamed_losses: usize,
    /// Repairs that said they corrected the volume, whose keys were checked against salvage.
    pub repairs_checked: usize,
    /// Keys read otherwise than salvage reads them on a volume repair left as it was, where
    /// fsck explains the difference as a crash's unflushed tail (206, 306, 307).
    pub crash_explained: usize,
    /// `ru_maxrss` of `lds --version` run the same way at the end: the least a child counts,
    /// KiB.
    pub baseline_rss_kib: u64,
    /// How often each command ended with each exit code (`signal N` and `timeout` too): how
    /// far the cases get (a command that refuses every case at the label reaches little).
    pub exits: BTreeMap<(String, String), usize>,
    /// Time taken.
    pub elapsed: Duration,
}

impl Summary {
    /// Adds another summary's counts (of cases run elsewhere).
    pub fn merge(&mut self, other: Summary) {
        self.cases += other.cases;
        self.commands.extend(other.commands);
        self.runs += other.runs;
        self.findings.extend(other.findings);
        self.errors.extend(other.errors);
        if other.worst_rss_kib > self.worst_rss_kib {
            self.worst_rss_kib = other.worst_rss_kib;
            self.worst_rss_run = other.worst_rss_run;
        }
        self.unnamed_losses += other.unnamed_losses;
        self.repairs_checked += other.repairs_checked;
        self.crash_explained += other.crash_explained;
        for (key, count) in other.exits {
            *self.exits.entry(key).or_default() += count;
        }
    }
}

/// How a child ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Its exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Killed at the timeout.
    pub timed_out: bool,
    /// Peak resident memory, KiB.
    pub max_rss_kib: u64,
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error.
    pub stderr: Vec<u8>,
    /// Time taken.
    pub elapsed: Duration,
}

/// How a child ended, without its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// Its exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Killed at the timeout.
    pub timed_out: bool,
    /// Peak resident memory, KiB (`ru_maxrss`).
    pub max_rss_kib: u64,
    /// Time taken.
    pub elapsed: Duration,
}

/// Runs `program ARGS` in `dir`, its output to `stdout` and `stderr`, with an address-space
/// limit of `memory_limit` bytes and no core dump (set between fork and exec), killed at
/// `timeout`.
pub fn run_child(
    program: &Path,
    dir: &Path,
    (stdout, stderr): (&Path, &Path),
    args: &[String],
    timeout: Duration,
    memory_limit: u64,
) -> std::io::Result<Status> {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(dir)
        .env_remove(lds_volume::members::DEVICES_VARIABLE)
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stdout(File::create(stdout)?)
        .stderr(File::create(stderr)?);
    // SAFETY: between fork and exec the closure only calls setrlimit, which is
    // async-signal-safe, on values computed before the fork.
    unsafe {
        command.pre_exec(move || {
            let address_space = libc::rlimit { rlim_cur: memory_limit, rlim_max: memory_limit };
            let no_core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            if libc::setrlimit(libc::RLIMIT_AS, &address_space) != 0
                || libc::setrlimit(libc::RLIMIT_CORE, &no_core) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let started = Instant::now();
    let child = command.spawn()?;
    let pid = child.id() as libc::pid_t;
    // The watchdog kills the child at the timeout. The child is only reaped (wait4) once the
    // watchdog is done, so the pid it kills cannot be another process's.
    let (done, wake) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if wake.recv_timeout(timeout) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
            // SAFETY: kill of our own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            return true;
        }
        false
    });
    loop {
        // SAFETY: siginfo_t is plain data; waitid with WNOWAIT waits for the child's exit
        // without reaping it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let waited = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if waited == 0 {
            break;
        }
        let error = std::io::Error::last_os_error();
        if error.kind() != std::io::ErrorKind::Interrupted {
            let _ = done.send(());
            let _ = watchdog.join();
            return Err(error);
        }
    }
    let _ = done.send(());
    let timed_out = watchdog.join().unwrap_or(false);
    let mut status = 0;
    // SAFETY: rusage is plain data, written by wait4, which reaps our exited child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::wait4(pid, &mut status, 0, &mut usage) } != pid {
        return Err(std::io::Error::last_os_error());
    }
    let elapsed = started.elapsed();
    let (code, signal) = if libc::WIFEXITED(status) {
        (Some(libc::WEXITSTATUS(status)), None)
    } else if libc::WIFSIGNALED(status) {
        (None, Some(libc::WTERMSIG(status)))
    } else {
        (None, None)
    };
    Ok(Status { code, signal, timed_out, max_rss_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0), elapsed })
}

/// A small process that starts the children for a runner, so that their peak memory is
/// their own: a child forked from the runner would count the runner's resident pages as its
/// own until its `exec` (Linux keeps the larger peak across `exec`). The spawner is a fresh
/// `exec` of a program that calls [`serve_spawns`] when given [`SPAWNER_ARG`] (lds-hostile
/// does); it reads one request per line and answers each with the child's [`Status`].
pub struct Spawner {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::io::BufReader<std::process::ChildStdout>,
}

/// The argument that makes a program serve spawns ([`serve_spawns`]).
pub const SPAWNER_ARG: &str = "__spawner";

impl Spawner {
    /// Starts `program SPAWNER_ARG`.
    pub fn start(program: &Path) -> std::io::Result<Self> {
        let mut child = Command::new(program).arg(SPAWNER_ARG).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn()?;
        let missing = || std::io::Error::other("the spawner's pipes are missing");
        let input = child.stdin.take().ok_or_else(missing)?;
        let output = std::io::BufReader::new(child.stdout.take().ok_or_else(missing)?);
        Ok(Self { child, input, output })
    }

    /// Runs one child through the spawner ([`run_child`]'s arguments).
    pub fn run(
        &mut self,
        program: &Path,
        dir: &Path,
        (stdout, stderr): (&Path, &Path),
        args: &[String],
        timeout: Duration,
        memory_limit: u64,
    ) -> std::io::Result<Status> {
        use std::io::{BufRead, Write};
        let request = serde_json::json!({
            "program": program, "dir": dir, "stdout": stdout, "stderr": stderr, "args": args,
            "timeout_ms": timeout.as_millis() as u64, "memory_limit": memory_limit,
        });
        writeln!(self.input, "{request}")?;
        self.input.flush()?;
        let mut line = String::new();
        if self.output.read_line(&mut line)? == 0 {
            return Err(std::io::Error::other("the spawner exited"));
        }
        let reply: serde_json::Value = serde_json::from_str(&line).map_err(std::io::Error::other)?;
        if let Some(error) = reply.get("error").and_then(serde_json::Value::as_str) {
            return Err(std::io::Error::other(error.to_string()));
        }
        let int = |name: &str| reply.get(name).and_then(serde_json::Value::as_i64);
        Ok(Status {
            code: int("code").map(|code| code as i32),
            signal: int("signal").map(|signal| signal as i32),
            timed_out: reply.get("timed_out").and_then(serde_json::Value::as_bool).unwrap_or(false),
            max_rss_kib: int("max_rss_kib").unwrap_or(0) as u64,
            elapsed: Duration::from_micros(int("elapsed_us").unwrap_or(0) as u64),
        })
    }
}

impl Drop for Spawner {
    fn drop(&mut self) {
        // Its input closed, the spawner's loop ends.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The spawner's loop ([`Spawner`]): one JSON request per line of `input`, one JSON answer per
/// line of `output`, until `input` ends.
pub fn serve_spawns(input: impl std::io::BufRead, mut output: impl std::io::Write) -> std::io::Result<()> {
    for line in input.lines() {
        let line = line?;
        let answer = (|| -> Result<serde_json::Value, String> {
            let request: serde_json::Value = serde_json::from_str(&line).map_err(|error| error.to_string())?;
            let path = |name: &str| {
                request.get(name).and_then(serde_json::Value::as_str).map(PathBuf::from).ok_or(format!("no {name}"))
            };
            let args: Vec<String> = request
                .get("args")
                .and_then(serde_json::Value::as_array)
                .ok_or("no args")?
                .iter()
                .filter_map(|arg| arg.as_str().map(str::to_string))
                .collect();
            let number = |name: &str| request.get(name).and_then(serde_json::Value::as_u64).ok_or(format!("no {name}"));
            let status = run_child(
                &path("program")?,
                &path("dir")?,
                (&path("stdout")?, &path("stderr")?),
                &args,
                Duration::from_millis(number("timeout_ms")?),
                number("memory_limit")?,
            )
            .map_err(|error| error.to_string())?;
            Ok(serde_json::json!({
                "code": status.code, "signal": status.signal, "timed_out": status.timed_out,
                "max_rss_kib": status.max_rss_kib, "elapsed_us": status.elapsed.as_micros() as u64,
            }))
        })()
        .unwrap_or_else(|error| serde_json::json!({ "error": error }));
        writeln!(output, "{answer}")?;
        output.flush()?;
    }
    Ok(())
}

/// Runs `lds ARGS` in `dir` with the limits of `options` (through `spawner` when there is
/// one); its output goes through files in `scratch` (outside `dir`).
pub fn run_lds(
    options: &Options,
    spawner: Option<&mut Spawner>,
    dir: &Path,
    scratch: &Path,
    args: &[String],
) -> std::io::Result<Outcome> {
    let stdout_path = scratch.join("stdout");
    let stderr_path = scratch.join("stderr");
    let files = (stdout_path.as_path(), stderr_path.as_path());
    let status = match spawner {
        Some(spawner) => spawner.run(&options.lds, dir, files, args, options.timeout, options.memory_limit)?,
        None => run_child(&options.lds, dir, files, args, options.timeout, options.memory_limit)?,
    };
    Ok(Outcome {
        code: status.code,
        signal: status.signal,
        timed_out: status.timed_out,
        max_rss_kib: status.max_rss_kib,
        stdout: std::fs::read(&stdout_path)?,
        stderr: std::fs::read(&stderr_path)?,
        elapsed: status.elapsed,
    })
}

/// The blake3 of every regular file of `dir`, by name.
pub fn snapshot(dir: &Path) -> std::io::Result<BTreeMap<String, [u8; 32]>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir)?.take(DIRECTORY_ENTRIES_MAX) {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            let mut hasher = blake3::Hasher::new();
            hasher.update_reader(File::open(entry.path())?)?;
            files.insert(entry.file_name().to_string_lossy().into_owned(), *hasher.finalize().as_bytes());
        }
    }
    Ok(files)
}

/// What changed between two snapshots, but the files `allowed`: a sentence, or `None`.
fn unexpected_changes(
    before: &BTreeMap<String, [u8; 32]>,
    after: &BTreeMap<String, [u8; 32]>,
    allowed: &[&str],
) -> Option<String> {
    let mut changes = Vec::new();
    for (name, hash) in after {
        if allowed.contains(&name.as_str()) {
            continue;
        }
        match before.get(name) {
            None => changes.push(format!("created {name}")),
            Some(old) if old != hash => changes.push(format!("changed {name}")),
            Some(_) => {}
        }
    }
    changes.extend(before.keys().filter(|name| !after.contains_key(*name)).map(|name| format!("removed {name}")));
    (!changes.is_empty()).then(|| changes.join(", "))
}

/// The last lines of standard error, for a finding.
fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().filter(|line| !line.trim().is_empty()).collect();
    let start = lines.len().saturating_sub(3);
    lines[start..].join(" / ").chars().take(400).collect()
}

/// The findings of I6 on one outcome: a panic, a hang, a death by a signal.
fn crash_findings(outcome: &Outcome, options: &Options) -> Option<String> {
    let stderr = String::from_utf8_lossy(&outcome.stderr);
    if outcome.timed_out {
        return Some(format!("hang: killed after {} s", options.timeout.as_secs()));
    }
    if let Some(signal) = outcome.signal {
        let memory =
            if stderr.contains("memory allocation") { " (an allocation refused under the memory limit)" } else { "" };
        return Some(format!("killed by signal {signal}{memory}: {}", tail(&outcome.stderr)));
    }
    if outcome.code == Some(101) || stderr.contains("panicked at") {
        return Some(format!("panic: {}", tail(&outcome.stderr)));
    }
    None
}

/// A key and value, as `lds scan --json` and `lds salvage --export ndjson` print them.
pub type Pairs = BTreeMap<(u32, Vec<u8>), Vec<u8>>;

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len() / 2).map(|index| u8::from_str_radix(text.get(2 * index..2 * index + 2)?, 16).ok()).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Parses JSON lines of `key`/`value` (or `key_hex`/`value_hex`) and an optional `instance`.
pub fn parse_pairs(text: &[u8], default_instance: u32, into: &mut Pairs) {
    for line in String::from_utf8_lossy(text).lines() {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let field = |name: &str| -> Option<Vec<u8>> {
            match (
                value.get(name).and_then(|text| text.as_str()),
                value.get(format!("{name}_hex")).and_then(|text| text.as_str()),
            ) {
                (Some(text), _) => Some(text.as_bytes().to_vec()),
                (None, Some(text)) => unhex(text),
                (None, None) => None,
            }
        };
        let instance = value.get("instance").and_then(serde_json::Value::as_u64).map_or(default_instance, |i| i as u32);
        if let (Some(key), Some(data)) = (field("key"), field("value")) {
            into.insert((instance, key), data);
        }
    }
}

/// One command of the set.
struct Step {
    /// A label without the case's paths (`dump chunk`, `repair -n`).
    label: String,
    args: Vec<String>,
    /// Files the command may create (its named output), removed after it.
    output: Option<&'static str>,
}

fn step(label: &str, args: &[&str]) -> Step {
    Step { label: label.to_string(), args: args.iter().map(|arg| (*arg).to_string()).collect(), output: None }
}

/// The read commands run on a crafted volume (never an undo case's).
fn read_steps(crafted: &Crafted, space: &Space, keys: &[Vec<u8>]) -> Vec<Step> {
    let mut steps = vec![
        step("fsck", &["fsck", VOLUME]),
        step("fsck --deep", &["fsck", "--deep", VOLUME]),
        step("fsck --json", &["fsck", "--json", VOLUME]),
    ];
    for view in ["label", "volume", "version-log", "backup-log", "slots", "tree", "value-chunks"] {
        steps.push(step(&format!("dump {view}"), &["dump", VOLUME, view]));
    }
    steps.push(step("dump volume --json", &["dump", VOLUME, "volume", "--json"]));
    let mut chunk_ids = vec![0u64, space.geometry.num_slots.saturating_sub(1), u64::MAX];
    for seal in &crafted.field.seals {
        if let Seal::Chunk { slot } | Seal::ValueChunk { slot } = seal {
            chunk_ids.insert(0, *slot);
        }
    }
    chunk_ids.dedup();
    for (index, id) in chunk_ids.iter().enumerate() {
        let id = id.to_string();
        steps.push(step("dump chunk", &["dump", VOLUME, "chunk", &id, "--entries"]));
        if index == 0 {
            steps.push(step("dump chunk --resolve", &["dump", VOLUME, "chunk", &id, "--resolve"]));
        }
    }
    let mut get = vec!["get".to_string(), VOLUME.to_string(), "--hex".to_string()];
    get.extend(keys.iter().map(|key| hex(key)));
    get.push(hex(b"no-such-key"));
    steps.push(Step { label: "get".into(), args: get, output: None });
    steps.push(step("scan", &["scan", VOLUME]));
    steps.push(step("scan --json", &["scan", VOLUME, "--json", "--hex"]));
    steps.push(step("repair -n", &["repair", "-n", VOLUME]));
    steps.push(step("repair -n --json", &["repair", "-n", "--json", VOLUME]));
    steps.push(step("salvage --export", &["salvage", VOLUME, "--export", "ndjson"]));
    steps.push(Step {
        output: Some("salvaged.img"),
        ..step("salvage --output", &["salvage", VOLUME, "--output", "salvaged.img"])
    });
    steps.push(Step { output: Some("meta.img"), ..step("metadump", &["metadump", VOLUME, "meta.img"]) });
    let grown = (space.geometry.volume_len + 2 * space.geometry.slot_size).to_string();
    steps.push(step("resize --dry-run", &["resize", "--dry-run", "--size", &grown, VOLUME]));
    steps.push(step("resize --min", &["resize", "--min", VOLUME]));
    steps.push(step("device list", &["device", "list", VOLUME]));
    steps.push(step("compaction show", &["compaction", "show", VOLUME]));
    steps
}

/// The names of a case's device files.
fn device_names(volume: &Volume) -> Vec<String> {
    (0..volume.devices).map(|index| if index == 0 { VOLUME.to_string() } else { format!("vol-{index}.img") }).collect()
}

/// Writes a case's files into `dir` (made empty first): its devices, its undo file, and the
/// healthy neighbour.
fn lay_out(dir: &Path, volume: &Volume, neighbour: &[u8]) -> std::io::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    for (name, bytes) in device_names(volume).iter().zip(&volume.files) {
        std::fs::write(dir.join(name), bytes)?;
    }
    if let Some(index) = volume.undo_index() {
        std::fs::write(dir.join(UNDO_FILE), &volume.files[index])?;
    }
    std::fs::write(dir.join(NEIGHBOUR), neighbour)
}

/// The state of the healthy volume of each base (for I10), computed once.
#[derive(Debug, Default)]
pub struct Healthy {
    states: BTreeMap<&'static str, Pairs>,
}

/// Runs cases; keeps the bases and their healthy states between cases.
pub struct Runner {
    options: Options,
    bases: Bases,
    healthy: Healthy,
    neighbour: Vec<u8>,
    /// A directory of this runner's own under `options.work`.
    root: PathBuf,
    spawner: Option<Spawner>,
}

impl Runner {
    /// A runner whose case directories go under `options.work`.
    pub fn new(options: Options) -> Result<Self, CaseError> {
        let neighbour = {
            let path = crate::fixtures_root().join("d_empty/image.gz");
            let packed = std::fs::read(&path).map_err(|error| CaseError(format!("{}: {error}", path.display())))?;
            crate::decompress(&packed).map_err(|error| CaseError(format!("{}: {error}", path.display())))?
        };
        let root = options.work.join(format!("lds-hostile-{}-{}", std::process::id(), unique()));
        std::fs::create_dir_all(&root).map_err(|error| CaseError(format!("{}: {error}", root.display())))?;
        let spawner = match &options.spawner {
            Some(program) => {
                Some(Spawner::start(program).map_err(|error| CaseError(format!("{}: {error}", program.display())))?)
            }
            None => None,
        };
        Ok(Self { options, bases: Bases::default(), healthy: Healthy::default(), neighbour, root, spawner })
    }

    fn wanted(&self, label: &str) -> bool {
        self.options.only_commands.is_empty()
            || self.options.only_commands.iter().any(|only| label.contains(only.as_str()))
    }

    /// The healthy state of `base` (every instance), read with `lds scan` once.
    fn healthy_state(&mut self, base: &'static super::Base, space: &Space) -> Result<Pairs, CaseError> {
        if let Some(state) = self.healthy.states.get(base.name) {
            return Ok(state.clone());
        }
        let healthy = self.bases.get(base)?.clone();
        let dir = self.root.join(format!("healthy-{}", base.name));
        let scratch = self.root.join(format!("healthy-{}-out", base.name));
        let io = |error: std::io::Error| CaseError(format!("{}: {error}", dir.display()));
        lay_out(&dir, &healthy, &self.neighbour).map_err(io)?;
        std::fs::create_dir_all(&scratch).map_err(io)?;
        let mut state = Pairs::new();
        for instance in 0..space.geometry.instance_count.min(64) {
            let args: Vec<String> = ["scan", VOLUME, "--json", "--hex", "--instance", &instance.to_string()]
                .iter()
                .map(|arg| (*arg).to_string())
                .collect();
            let outcome = run_lds(&self.options, self.spawner.as_mut(), &dir, &scratch, &args).map_err(io)?;
            if outcome.code != Some(0) {
                return Err(CaseError(format!(
                    "lds scan of healthy base {} failed: {}",
                    base.name,
                    tail(&outcome.stderr)
                )));
            }
            parse_pairs(&outcome.stdout, instance, &mut state);
        }
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&scratch);
        self.healthy.states.insert(base.name, state.clone());
        Ok(state)
    }

    /// Runs the case called `name`.
    pub fn run_case(&mut self, name: &str) -> Summary {
        let started = Instant::now();
        let mut summary = Summary { cases: 1, ..Summary::default() };
        if let Err(error) = self.try_case(name, &mut summary) {
            summary.errors.push(format!("{name}: {error}"));
        }
        summary.elapsed = started.elapsed();
        summary
    }

    fn try_case(&mut self, name: &str, summary: &mut Summary) -> Result<(), CaseError> {
        let (base, _, _) = super::parse_name(name)?;
        let healthy = self.bases.get(base)?.clone();
        let space = Space::of(&healthy)?;
        let crafted = super::craft_from(name, &healthy)?;
        let case_dir = self.root.join("case");
        let read_dir = case_dir.join("read");
        let write_dir = case_dir.join("write");
        let scratch = case_dir.join("out");
        let io = |error: std::io::Error| CaseError(format!("{}: {error}", case_dir.display()));
        lay_out(&read_dir, &crafted.volume, &self.neighbour).map_err(io)?;
        std::fs::create_dir_all(&scratch).map_err(io)?;
        let before = snapshot(&read_dir).map_err(io)?;
        let findings_before = summary.findings.len();
        let devices = device_names(&crafted.volume);
        let device_refs: Vec<&str> = devices.iter().map(String::as_str).collect();

        if crafted.volume.undo_index().is_some() {
            self.undo_case(&crafted, &read_dir, &write_dir, &scratch, &before, &device_refs, summary).map_err(io)?;
        } else {
            let state = self.healthy_state(base, &space)?;
            let keys: Vec<Vec<u8>> = {
                let instance0: Vec<&Vec<u8>> =
                    state.keys().filter(|(instance, _)| *instance == 0).map(|(_, key)| key).collect();
                let picks = [0, instance0.len() / 2, instance0.len().saturating_sub(1)];
                let mut keys: Vec<Vec<u8>> =
                    picks.iter().filter_map(|&index| instance0.get(index).map(|key| (*key).clone())).collect();
                keys.dedup();
                keys
            };
            let mut salvaged = None;
            let mut crash_tail = false;
            for step in read_steps(&crafted, &space, &keys) {
                if !self.wanted(&step.label) {
                    continue;
                }
                let outcome = self.run_step(name, &step, &read_dir, &scratch, summary).map_err(io)?;
                if step.label == "salvage --export" && outcome.code.is_some_and(|code| code <= 1) {
                    let mut pairs = Pairs::new();
                    parse_pairs(&outcome.stdout, 0, &mut pairs);
                    salvaged = Some(pairs);
                }
                if step.label == "fsck --json" {
                    crash_tail = problem_codes(&outcome.stdout).iter().any(|code| CRASH_TAIL_CODES.contains(code));
                }
                let after = snapshot(&read_dir).map_err(io)?;
                let allowed: Vec<&str> = step.output.into_iter().collect();
                if let Some(changes) = unexpected_changes(&before, &after, &allowed) {
                    summary.findings.push(finding(name, &step.args, format!("a read command wrote: {changes}")));
                }
                if let Some(output) = step.output {
                    let _ = std::fs::remove_file(read_dir.join(output));
                }
            }
            if self.wanted("repair -y") {
                let crash_tail = crash_tail || head_leftover(&crafted, &healthy);
                let salvage = Salvaged { pairs: salvaged.as_ref(), crash_tail };
                self.repair_and_undo(
                    &crafted,
                    &read_dir,
                    &write_dir,
                    &scratch,
                    &device_refs,
                    &state,
                    &salvage,
                    summary,
                )
                .map_err(io)?;
            }
        }
        let failed = summary.findings.len() > findings_before;
        if failed && self.options.keep {
            let kept = self.root.join(format!("failed-{}", sanitize(name)));
            let _ = std::fs::remove_dir_all(&kept);
            let _ = std::fs::rename(&case_dir, &kept);
        } else {
            let _ = std::fs::remove_dir_all(&case_dir);
        }
        Ok(())
    }

    fn run_step(
        &mut self,
        case: &str,
        step: &Step,
        dir: &Path,
        scratch: &Path,
        summary: &mut Summary,
    ) -> std::io::Result<Outcome> {
        let outcome = run_lds(&self.options, self.spawner.as_mut(), dir, scratch, &step.args)?;
        summary.runs += 1;
        summary.commands.insert(step.label.clone());
        let exit = match (outcome.timed_out, outcome.signal, outcome.code) {
            (true, _, _) => "timeout".to_string(),
            (false, Some(signal), _) => format!("signal {signal}"),
            (false, None, Some(code)) => format!("exit {code}"),
            (false, None, None) => "unknown".to_string(),
        };
        *summary.exits.entry((step.label.clone(), exit)).or_default() += 1;
        if outcome.max_rss_kib > summary.worst_rss_kib {
            summary.worst_rss_kib = outcome.max_rss_kib;
            summary.worst_rss_run = format!("{case} | lds {}", step.args.join(" "));
        }
        if let Some(what) = crash_findings(&outcome, &self.options) {
            summary.findings.push(finding(case, &step.args, what));
        }
        Ok(outcome)
    }

    /// `repair -y` on a copy, its oracles, then `undo` of its undo file.
    #[allow(clippy::too_many_arguments)]
    fn repair_and_undo(
        &mut self,
        crafted: &Crafted,
        read_dir: &Path,
        write_dir: &Path,
        scratch: &Path,
        devices: &[&str],
        healthy: &Pairs,
        salvaged: &Salvaged<'_>,
        summary: &mut Summary,
    ) -> std::io::Result<()> {
        let case = crafted.name.as_str();
        copy_dir(read_dir, write_dir)?;
        let before = snapshot(write_dir)?;
        let repair = step("repair -y", &["repair", "-y", "--json", VOLUME]);
        let outcome = self.run_step(case, &repair, write_dir, scratch, summary)?;
        let after = snapshot(write_dir)?;
        let mut allowed = devices.to_vec();
        allowed.push(UNDO_FILE);
        if let Some(changes) = unexpected_changes(&before, &after, &allowed) {
            summary.findings.push(finding(
                case,
                &repair.args,
                format!("wrote outside the volume and its undo file: {changes}"),
            ));
        }
        let report: Option<serde_json::Value> = serde_json::from_slice(&outcome.stdout).ok();
        let corrected = matches!(outcome.code, Some(0 | 1));
        if corrected {
            self.check_repaired(crafted, write_dir, scratch, healthy, salvaged, report.as_ref(), summary)?;
        }
        // Undo the repair from its undo file: the crafted bytes come back.
        if write_dir.join(UNDO_FILE).exists() {
            let dry = step("undo -n", &["undo", "-n", UNDO_FILE, VOLUME]);
            let before_dry = snapshot(write_dir)?;
            self.run_step(case, &dry, write_dir, scratch, summary)?;
            if let Some(changes) = unexpected_changes(&before_dry, &snapshot(write_dir)?, &[]) {
                summary.findings.push(finding(case, &dry.args, format!("a dry run wrote: {changes}")));
            }
            let undo = step("undo (of repair)", &["undo", UNDO_FILE, VOLUME]);
            let before_undo = snapshot(write_dir)?;
            let outcome = self.run_step(case, &undo, write_dir, scratch, summary)?;
            if let Some(changes) = unexpected_changes(&before_undo, &snapshot(write_dir)?, devices) {
                summary.findings.push(finding(case, &undo.args, format!("wrote outside the volume: {changes}")));
            }
            if outcome.code == Some(0) {
                for (name, bytes) in devices.iter().zip(&crafted.volume.files) {
                    if std::fs::read(write_dir.join(name))? != *bytes {
                        summary.findings.push(finding(
                            case,
                            &undo.args,
                            format!("exit 0 but {name} differs from the crafted volume repair started from"),
                        ));
                    }
                }
            } else {
                summary.findings.push(finding(
                    case,
                    &undo.args,
                    format!(
                        "the undo file repair wrote does not restore (exit {:?}): {}",
                        outcome.code,
                        tail(&outcome.stderr)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// After a repair that says it corrected the volume: fsck clean (I6) and no key salvage
    /// read intact lost without a word (I10).
    #[allow(clippy::too_many_arguments)]
    fn check_repaired(
        &mut self,
        crafted: &Crafted,
        dir: &Path,
        scratch: &Path,
        healthy: &Pairs,
        salvaged: &Salvaged<'_>,
        report: Option<&serde_json::Value>,
        summary: &mut Summary,
    ) -> std::io::Result<()> {
        let case = crafted.name.as_str();
        let fsck = step("fsck --deep (after repair -y)", &["fsck", "--deep", VOLUME]);
        let outcome = self.run_step(case, &fsck, dir, scratch, summary)?;
        if outcome.code != Some(0) && crash_findings(&outcome, &self.options).is_none() {
            let problems = String::from_utf8_lossy(&outcome.stdout);
            let first: Vec<&str> = problems.lines().filter(|line| line.starts_with(['E', 'W'])).take(2).collect();
            summary.findings.push(finding(
                case,
                &fsck.args,
                format!(
                    "repair -y said it corrected the volume, fsck --deep then exits {:?}: {}",
                    outcome.code,
                    first.join(" / ")
                ),
            ));
        }
        let Some(pairs) = salvaged.pairs else { return Ok(()) };
        let wrote =
            report.and_then(|report| report.get("bytes_written")).and_then(serde_json::Value::as_u64).unwrap_or(0) > 0;
        let space = Space::of(&crafted.volume).ok();
        let instances = space.map_or(1, |space| space.geometry.instance_count.clamp(1, 64));
        let mut repaired = Pairs::new();
        for instance in 0..instances {
            let scan = step(
                "scan --json (after repair -y)",
                &["scan", VOLUME, "--json", "--hex", "--instance", &instance.to_string()],
            );
            let outcome = self.run_step(case, &scan, dir, scratch, summary)?;
            if outcome.code != Some(0) {
                if crash_findings(&outcome, &self.options).is_none() {
                    summary.findings.push(finding(
                        case,
                        &scan.args,
                        format!("repair -y said it corrected the volume, scan then fails: {}", tail(&outcome.stderr)),
                    ));
                }
                return Ok(());
            }
            parse_pairs(&outcome.stdout, instance, &mut repaired);
        }
        summary.repairs_checked += 1;
        let dropped: Vec<String> = report
            .and_then(|report| report.get("fixes"))
            .and_then(serde_json::Value::as_array)
            .map(|fixes| {
                fixes
                    .iter()
                    .filter_map(|fix| fix.get("dropped").and_then(serde_json::Value::as_array))
                    .flatten()
                    .filter_map(|text| text.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let lost = report.map(LostKeys::of_report).unwrap_or_default();
        let mut silent = Vec::new();
        let mut unnamed = Vec::new();
        for ((instance, key), value) in pairs {
            if healthy.get(&(*instance, key.clone())) != Some(value)
                || repaired.get(&(*instance, key.clone())) == Some(value)
            {
                continue;
            }
            match loss(*instance, key, &lost, !dropped.is_empty()) {
                Loss::Named => {}
                Loss::Unnamed => {
                    summary.unnamed_losses += 1;
                    unnamed.push(String::from_utf8_lossy(key).into_owned());
                }
                Loss::Silent => silent.push(String::from_utf8_lossy(key).into_owned()),
            }
        }
        if !unnamed.is_empty() {
            summary.findings.push(finding(
                case,
                &["repair".into(), "-y".into(), VOLUME.into()],
                format!(
                    "lost {} key(s) salvage reads with their healthy values, and no `lost` range of its report covers them (I10): {}",
                    unnamed.len(),
                    unnamed.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        if !silent.is_empty() && !wrote {
            // Repair left the volume as it was: the keys are lost to the reading fsck and
            // repair accept, unless fsck explains it as a crash's unflushed tail.
            if salvaged.crash_tail {
                summary.crash_explained += silent.len();
            } else {
                summary.findings.push(finding(
                    case,
                    &["fsck".into(), "--deep".into(), VOLUME.into()],
                    format!(
                        "fsck and repair find nothing to fix and explain nothing as a crash, yet {} key(s) that salvage reads with their healthy values read otherwise: {}",
                        silent.len(),
                        silent.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        } else if !silent.is_empty() {
            summary.findings.push(finding(
                case,
                &["repair".into(), "-y".into(), VOLUME.into()],
                format!(
                    "lost {} key(s) salvage reads with their healthy values, and its report drops nothing (I10): {}",
                    silent.len(),
                    silent.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// An undo case: `undo -n` in the read directory, `undo` and `undo --force` on copies.
    #[allow(clippy::too_many_arguments)]
    fn undo_case(
        &mut self,
        crafted: &Crafted,
        read_dir: &Path,
        write_dir: &Path,
        scratch: &Path,
        before: &BTreeMap<String, [u8; 32]>,
        devices: &[&str],
        summary: &mut Summary,
    ) -> std::io::Result<()> {
        let case = crafted.name.as_str();
        let dry = step("undo -n (crafted file)", &["undo", "-n", UNDO_FILE, VOLUME]);
        if self.wanted(&dry.label) {
            self.run_step(case, &dry, read_dir, scratch, summary)?;
            if let Some(changes) = unexpected_changes(before, &snapshot(read_dir)?, &[]) {
                summary.findings.push(finding(case, &dry.args, format!("a dry run wrote: {changes}")));
            }
        }
        for undo in [
            step("undo (crafted file)", &["undo", UNDO_FILE, VOLUME]),
            step("undo --force (crafted file)", &["undo", "--force", UNDO_FILE, VOLUME]),
        ] {
            if !self.wanted(&undo.label) {
                continue;
            }
            copy_dir(read_dir, write_dir)?;
            let before = snapshot(write_dir)?;
            self.run_step(case, &undo, write_dir, scratch, summary)?;
            if let Some(changes) = unexpected_changes(&before, &snapshot(write_dir)?, devices) {
                summary.findings.push(finding(case, &undo.args, format!("wrote outside the volume: {changes}")));
            }
        }
        Ok(())
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        if !self.options.keep {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// fsck's codes for the states a crash leaves at a log's head (SPEC.md §9.6): the head object
/// incomplete (206), a gap or stale bytes at the backup log's head (306), valid objects after
/// it (307). Salvage reads the batches past such a tail; recovery rightly does not.
pub const CRASH_TAIL_CODES: [u64; 3] = [206, 306, 307];

/// True when the case lowers the lsn or SN in the header of the backup log's newest batch:
/// what stale bytes of an earlier lap, or an unsynced append of an earlier session, leave at
/// the head (SPEC.md §9.5, §9.6). Recovery rightly ends the log before it, and fsck reports
/// nothing, as after any wrap.
pub fn head_leftover(crafted: &Crafted, healthy: &Volume) -> bool {
    let field = &crafted.field;
    let lowered = super::read_le(&crafted.value, 0, field.width)
        < super::read_le(&healthy.files[field.file], field.at, field.width);
    lowered && (field.path == "blog.wb.header.lsn" || field.path == "blog.wb.header.sn")
}

/// What salvage read from the crafted volume, and whether fsck saw a crash's tail there.
pub struct Salvaged<'a> {
    /// The keys and values `salvage --export ndjson` printed (None: it failed).
    pub pairs: Option<&'a Pairs>,
    /// fsck reported one of [`CRASH_TAIL_CODES`], or the case leaves the head as a crash
    /// does ([`head_leftover`]).
    pub crash_tail: bool,
}

/// The problem codes of an `lds fsck --json` document.
pub fn problem_codes(json: &[u8]) -> Vec<u64> {
    let Ok(document) = serde_json::from_slice::<serde_json::Value>(json) else { return Vec::new() };
    document
        .get("problems")
        .and_then(serde_json::Value::as_array)
        .map(|problems| {
            problems.iter().filter_map(|problem| problem.get("code").and_then(serde_json::Value::as_u64)).collect()
        })
        .unwrap_or_default()
}

/// Whether a key missing after repair is named in its report ([`Loss`]): covered by one of
/// its `lost` ranges; `drops` says whether the report drops anything at all.
pub fn loss(instance: u32, key: &[u8], lost: &[LostKeys], drops: bool) -> Loss {
    if lost.iter().any(|range| range.covers(instance, key)) {
        Loss::Named
    } else if drops || !lost.is_empty() {
        Loss::Unnamed
    } else {
        Loss::Silent
    }
}

fn finding(case: &str, args: &[String], what: String) -> Finding {
    Finding { case: case.to_string(), command: args.join(" "), what }
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    if to.exists() {
        std::fs::remove_dir_all(to)?;
    }
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)?.take(DIRECTORY_ENTRIES_MAX) {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// A number that differs between runners of one process.
fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Runs `names` on `jobs` threads, each with a runner of its own; `progress` is called after
/// each case with its name and summary.
pub fn run_all(
    names: &[String],
    options: &Options,
    jobs: usize,
    progress: &(dyn Fn(&str, &Summary) + Sync),
) -> Result<Summary, CaseError> {
    let started = Instant::now();
    let jobs = jobs.clamp(1, 64);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<Result<Summary, CaseError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs)
            .map(|_| {
                scope.spawn(|| {
                    let mut runner = Runner::new(options.clone())?;
                    let mut total = Summary::default();
                    loop {
                        let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(name) = names.get(index) else { break };
                        let summary = runner.run_case(name);
                        progress(name, &summary);
                        total.merge(summary);
                    }
                    Ok(total)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().unwrap_or_else(|_| Err(CaseError("a runner thread panicked".into()))))
            .collect()
    });
    let mut total = Summary::default();
    for result in results {
        total.merge(result?);
    }
    let dir = options.work.join(format!("lds-hostile-baseline-{}-{}", std::process::id(), unique()));
    if std::fs::create_dir_all(&dir).is_ok() {
        let mut spawner = options.spawner.as_deref().and_then(|program| Spawner::start(program).ok());
        if let Ok(outcome) = run_lds(options, spawner.as_mut(), &dir, &dir, &["--version".to_string()]) {
            total.baseline_rss_kib = outcome.max_rss_kib;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    total.elapsed = started.elapsed();
    Ok(total)
}
