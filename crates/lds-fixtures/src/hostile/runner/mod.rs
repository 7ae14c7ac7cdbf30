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

mod child;
mod oracles;
mod report;
mod steps;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{Bases, CaseError, Crafted, Space};
pub use child::{run_child, run_lds, serve_spawns, snapshot, Outcome, Spawner, Status, SPAWNER_ARG};
use oracles::{crash_findings, tail, unexpected_changes};
pub use oracles::{head_leftover, loss, parse_pairs, problem_codes, Loss, LostKeys, Pairs, Salvaged, CRASH_TAIL_CODES};
pub use report::{Finding, Summary};
use steps::{device_names, lay_out, read_steps, step, Step};

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
