//! `lds-hostile`: crafts hostile volumes from SPEC.md's field tables and runs every `lds`
//! command against each (docs/reliability.md F9, oracles I6, I9 and I10;
//! `lds_fixtures::hostile`).
//!
//! ```text
//! lds-hostile list [FILTER]                    the case names (those containing FILTER)
//! lds-hostile craft CASE DIR                   writes the case's files into DIR
//! lds-hostile run [OPTIONS] [CASE|FILTER ...]  runs the cases (all of them without one)
//!   --lds PATH        the lds binary (default target/release/lds)
//!   --work DIR        where case directories go (default: the temporary directory)
//!   --jobs N          cases at once (default 1)
//!   --timeout SECONDS (default 20)     --memory BYTES (default 1 GiB, RLIMIT_AS)
//!   --only LABEL      only the commands whose label contains LABEL (repeatable)
//!   --every N         every Nth case of the selection
//!   --keep            keep the directories of cases with findings
//!   --findings FILE   also write the findings there, one per line
//!   --stats           also print how often each command ended with each exit code
//! ```
//! Exit 0 when nothing was found, 1 with findings, 2 on a usage error or a case that could
//! not be built.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use lds_fixtures::hostile::{self, runner};

fn usage(message: &str) -> i32 {
    eprintln!("lds-hostile: {message}");
    eprintln!("usage: lds-hostile list [FILTER] | craft CASE DIR | run [--lds PATH] [--work DIR] [--jobs N] [--timeout S] [--memory BYTES] [--only LABEL] [--every N] [--keep] [--findings FILE] [--stats] [CASE|FILTER ...]");
    2
}

fn select(patterns: &[String]) -> Result<Vec<String>, String> {
    let all = hostile::cases().map_err(|error| error.to_string())?;
    if patterns.is_empty() {
        return Ok(all.into_iter().map(|case| case.name).collect());
    }
    let mut chosen = Vec::new();
    for pattern in patterns {
        let exact = all.iter().any(|case| &case.name == pattern);
        let matching: Vec<String> = all
            .iter()
            .filter(|case| if exact { &case.name == pattern } else { case.name.contains(pattern.as_str()) })
            .map(|case| case.name.clone())
            .collect();
        if matching.is_empty() {
            return Err(format!("no case matches {pattern}"));
        }
        chosen.extend(matching);
    }
    chosen.dedup();
    Ok(chosen)
}

fn run(args: &[String]) -> i32 {
    let mut options = runner::Options::new(PathBuf::from("target/release/lds"));
    // Children started by a small process of their own: their peak memory is theirs alone.
    options.spawner = std::env::current_exe().ok();
    let (mut jobs, mut every, mut findings_file, mut patterns) = (1usize, 1usize, None, Vec::new());
    let mut stats = false;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let mut value = |name: &str| iter.next().cloned().ok_or(format!("{name} needs a value"));
        let parsed: Result<(), String> = (|| {
            match arg.as_str() {
                "--lds" => options.lds = PathBuf::from(value("--lds")?),
                "--work" => options.work = PathBuf::from(value("--work")?),
                "--jobs" => jobs = value("--jobs")?.parse().map_err(|_| "--jobs takes a number")?,
                "--every" => every = value("--every")?.parse().map_err(|_| "--every takes a number")?,
                "--timeout" => {
                    options.timeout =
                        Duration::from_secs(value("--timeout")?.parse().map_err(|_| "--timeout takes seconds")?)
                }
                "--memory" => options.memory_limit = value("--memory")?.parse().map_err(|_| "--memory takes bytes")?,
                "--only" => options.only_commands.push(value("--only")?),
                "--keep" => options.keep = true,
                "--stats" => stats = true,
                "--findings" => findings_file = Some(PathBuf::from(value("--findings")?)),
                other if other.starts_with("--") => return Err(format!("unknown option {other}")),
                other => patterns.push(other.to_string()),
            }
            Ok(())
        })();
        if let Err(message) = parsed {
            return usage(&message);
        }
    }
    if !options.lds.is_file() {
        return usage(&format!(
            "{} is not a file: build it (cargo build --release -p lds-cli) or give --lds",
            options.lds.display()
        ));
    }
    // Children run in each case's directory: a relative path would name nothing there.
    match std::fs::canonicalize(&options.lds) {
        Ok(absolute) => options.lds = absolute,
        Err(error) => return usage(&format!("{}: {error}", options.lds.display())),
    }
    let names = match select(&patterns) {
        Ok(names) => names.into_iter().step_by(every.max(1)).collect::<Vec<_>>(),
        Err(message) => return usage(&message),
    };
    eprintln!("lds-hostile: {} cases with {}, {} at once", names.len(), options.lds.display(), jobs);
    let done = Mutex::new(0usize);
    let total = names.len();
    let progress = |name: &str, summary: &runner::Summary| {
        let mut done = done.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *done += 1;
        for finding in &summary.findings {
            println!("FINDING {finding}");
        }
        for error in &summary.errors {
            println!("ERROR {error}");
        }
        if *done % 100 == 0 || *done == total {
            eprintln!("lds-hostile: {done}/{total} cases ({name})");
        }
    };
    let summary = match runner::run_all(&names, &options, jobs, &progress) {
        Ok(summary) => summary,
        Err(error) => return usage(&error.to_string()),
    };
    if let Some(path) = findings_file {
        let text: String = summary.findings.iter().map(|finding| format!("{finding}\n")).collect();
        if let Err(error) = std::fs::write(&path, text) {
            eprintln!("lds-hostile: {}: {error}", path.display());
        }
    }
    if stats {
        let mut by_command: std::collections::BTreeMap<&str, Vec<String>> = std::collections::BTreeMap::new();
        for ((label, exit), count) in &summary.exits {
            by_command.entry(label.as_str()).or_default().push(format!("{exit}: {count}"));
        }
        for (label, exits) in by_command {
            println!("{label:32} {}", exits.join(", "));
        }
    }
    let cases_with_findings: std::collections::BTreeSet<&str> =
        summary.findings.iter().map(|f| f.case.as_str()).collect();
    println!(
        "cases {}, commands {}, runs {}, findings {} (in {} cases), errors {}, repairs checked against salvage {}, keys dropped without being named {}, keys a crash's tail explains {}, worst peak memory {} KiB ({}; lds --version run the same way: {} KiB), time {:.1} s",
        summary.cases,
        summary.commands.len(),
        summary.runs,
        summary.findings.len(),
        cases_with_findings.len(),
        summary.errors.len(),
        summary.repairs_checked,
        summary.unnamed_losses,
        summary.crash_explained,
        summary.worst_rss_kib,
        summary.worst_rss_run,
        summary.baseline_rss_kib,
        summary.elapsed.as_secs_f64()
    );
    if !summary.errors.is_empty() {
        2
    } else if summary.findings.is_empty() {
        0
    } else {
        1
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("list") => match select(&args[1..]) {
            Ok(names) => {
                let mut out = std::io::stdout().lock();
                for name in names {
                    let _ = writeln!(out, "{name}");
                }
                0
            }
            Err(message) => usage(&message),
        },
        Some("craft") if args.len() == 3 => match hostile::craft(&args[1]) {
            Ok(crafted) => {
                let dir = PathBuf::from(&args[2]);
                let written = std::fs::create_dir_all(&dir).and_then(|()| {
                    for (index, bytes) in crafted.volume.files.iter().enumerate() {
                        let name = if index == 0 {
                            runner::VOLUME.to_string()
                        } else if Some(index) == crafted.volume.undo_index() {
                            runner::UNDO_FILE.to_string()
                        } else {
                            format!("vol-{index}.img")
                        };
                        std::fs::write(dir.join(&name), bytes)?;
                        println!("{}", dir.join(name).display());
                    }
                    Ok(())
                });
                match written {
                    Ok(()) => 0,
                    Err(error) => usage(&format!("{}: {error}", dir.display())),
                }
            }
            Err(error) => usage(&error.to_string()),
        },
        Some("run") => run(&args[1..]),
        Some(runner::SPAWNER_ARG) => match runner::serve_spawns(std::io::stdin().lock(), std::io::stdout().lock()) {
            Ok(()) => 0,
            Err(error) => usage(&format!("spawner: {error}")),
        },
        _ => usage("give list, craft or run"),
    };
    std::process::exit(code);
}
