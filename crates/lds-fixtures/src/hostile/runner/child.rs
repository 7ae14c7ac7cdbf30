//! Running the commands: a child process with a timeout and an address-space limit, through
//! a spawner process of its own so that its peak memory is its own, and the hashes of the
//! files of a case's directory before and after.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{Options, DIRECTORY_ENTRIES_MAX};

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
