//! Guards `lds completions` and `lds man`: generated from the same definitions as `--help`,
//! they name every subcommand and every long option `--help` shows.

use std::path::PathBuf;
use std::process::Command;

fn lds(args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_lds")).args(args).output().unwrap_or_else(|error| panic!("{error}"));
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The subcommands `lds --help` lists.
fn subcommands() -> Vec<String> {
    let (code, help, _) = lds(&["--help"]);
    assert_eq!(code, 0);
    let commands: Vec<String> = help
        .split("Commands:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Commands: in\n{help}"))
        .split("Options:")
        .next()
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect();
    assert!(commands.len() >= 15, "{commands:?}");
    commands
}

/// The long options `lds SUBCOMMAND --help` shows.
fn long_options(subcommand: &str) -> Vec<String> {
    let (_, help, _) = lds(&[subcommand, "--help"]);
    let mut options: Vec<String> = help
        .split(|c: char| c.is_whitespace() || c == ',' || c == '[' || c == '=' || c == '<')
        .filter(|word| {
            word.starts_with("--") && word.len() > 2 && word[2..].chars().all(|c| c.is_ascii_lowercase() || c == '-')
        })
        .map(str::to_string)
        .collect();
    options.sort();
    options.dedup();
    options
}

#[test]
fn bash_completion_names_every_subcommand_and_option() {
    let (code, script, stderr) = lds(&["completions", "bash"]);
    assert_eq!(code, 0, "{stderr}");
    for subcommand in subcommands() {
        assert!(script.contains(&subcommand), "the bash script lacks {subcommand}");
        for option in long_options(&subcommand) {
            assert!(script.contains(&option), "the bash script lacks {subcommand} {option}");
        }
    }
    for shell in ["zsh", "fish"] {
        let (code, script, stderr) = lds(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {stderr}");
        // fish names long options without their dashes (`-l size`).
        assert!(script.contains("mkfs") && (script.contains("--size") || script.contains("-l size")), "{shell}");
    }
    let (code, _, stderr) = lds(&["completions", "tcsh"]);
    assert_ne!(code, 0, "an unknown shell is a usage error");
    assert!(stderr.contains("tcsh"), "{stderr}");
}

#[test]
fn a_man_page_for_every_subcommand_with_every_option() {
    let directory: PathBuf = std::env::temp_dir().join(format!("lds-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    let directory_text = directory.to_string_lossy().into_owned();
    let (code, stdout, stderr) = lds(&["man", &directory_text]);
    let read = |name: &str| std::fs::read_to_string(directory.join(name));
    let result = std::panic::catch_unwind(|| {
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.contains("man pages"), "{stdout}");
        let root = read("lds.1").unwrap_or_else(|error| panic!("lds.1: {error}"));
        assert!(root.contains(".TH lds"), "{root}");
        for subcommand in subcommands() {
            let page =
                read(&format!("lds-{subcommand}.1")).unwrap_or_else(|error| panic!("lds-{subcommand}.1: {error}"));
            assert!(page.contains(&format!(".TH lds-{subcommand}")), "lds-{subcommand}.1 has no title");
            for option in long_options(&subcommand) {
                // roff escapes each '-' as '\-'.
                let escaped = option.replace('-', "\\-");
                assert!(page.contains(&escaped), "lds-{subcommand}.1 lacks {option}");
            }
        }
        assert!(read("lds-device-add.1").is_ok(), "nested subcommands get pages too");
    });
    let _ = std::fs::remove_dir_all(&directory);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn a_page_that_is_a_symlink_is_replaced_not_written_through() {
    let directory: PathBuf = std::env::temp_dir().join(format!("lds-man-link-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    let pages = directory.join("man1");
    std::fs::create_dir_all(&pages).unwrap_or_else(|error| panic!("{error}"));
    let victim = directory.join("victim");
    std::fs::write(&victim, b"someone's file").unwrap_or_else(|error| panic!("{error}"));
    std::os::unix::fs::symlink(&victim, pages.join("lds-mkfs.1")).unwrap_or_else(|error| panic!("{error}"));
    let (code, _, stderr) = lds(&["man", &pages.to_string_lossy()]);
    let kept = std::fs::read(&victim).unwrap_or_default();
    let replaced = std::fs::symlink_metadata(pages.join("lds-mkfs.1")).map(|meta| meta.file_type().is_file());
    let _ = std::fs::remove_dir_all(&directory);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(kept, b"someone's file", "lds man wrote through the symlink");
    assert!(matches!(replaced, Ok(true)), "the page is a file of its own now: {replaced:?}");
}
