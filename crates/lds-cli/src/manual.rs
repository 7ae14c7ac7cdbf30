//! `lds completions SHELL` and `lds man DIR`: shell completion scripts and man pages, both
//! generated from the clap definitions in `cli.rs`, so that they say what `--help` says.

use std::io::Write;
use std::path::Path;

/// Prints the completion script of `command` (the `lds` command's definition) for `shell`;
/// returns the exit code (0, or 1 when the output cannot be written).
pub fn completions(
    mut command: clap::Command,
    shell: clap_complete::Shell,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "lds", &mut script);
    match out.write_all(&script) {
        Ok(()) => 0,
        Err(error) => {
            let _ = writeln!(err, "lds completions: cannot write the script: {error}");
            1
        }
    }
}

/// The man pages of `root` (the `lds` command's definition): `lds.1`, then one per
/// subcommand and nested subcommand (`lds-mkfs.1`, `lds-device-add.1`), each with its file
/// name and roff text.
pub fn pages(root: &clap::Command) -> Result<Vec<(String, Vec<u8>)>, std::io::Error> {
    let mut pages = Vec::new();
    add_pages(root, "lds", &mut pages)?;
    Ok(pages)
}

fn add_pages(command: &clap::Command, name: &str, pages: &mut Vec<(String, Vec<u8>)>) -> Result<(), std::io::Error> {
    // clap_mangen titles a page by the command's name: a subcommand's is its full name.
    let named = command.clone().name(name.to_string()).bin_name(name.replace('-', " "));
    let mut roff = Vec::new();
    clap_mangen::Man::new(named).render(&mut roff)?;
    pages.push((format!("{name}.1"), roff));
    for sub in command.get_subcommands().filter(|sub| sub.get_name() != "help") {
        add_pages(sub, &format!("{name}-{}", sub.get_name()), pages)?;
    }
    Ok(())
}

/// Writes every man page of `root` into `directory` (created if missing); returns the exit
/// code (0, or 1 when a page cannot be written, naming which).
pub fn man_pages(root: &clap::Command, directory: &Path, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let pages = match pages(root) {
        Ok(pages) => pages,
        Err(error) => {
            let _ = writeln!(err, "lds man: cannot render the pages: {error}");
            return 1;
        }
    };
    if let Err(error) = std::fs::create_dir_all(directory) {
        let _ = writeln!(err, "lds man: {}: cannot create the directory: {error}", directory.display());
        return 1;
    }
    for (name, roff) in &pages {
        let path = directory.join(name);
        if let Err(error) = replace_page(&path, roff) {
            let _ = writeln!(err, "lds man: {}: cannot write: {error}", path.display());
            return 1;
        }
    }
    let _ = writeln!(out, "wrote {} man pages to {}", pages.len(), directory.display());
    0
}

/// Writes `roff` to `path` through a new file renamed over it: a page that is a symlink is
/// replaced itself, never the file it points to (docs/safety.md: a command writes only what
/// it was named).
fn replace_page(path: &Path, roff: &[u8]) -> std::io::Result<()> {
    let partial = path.with_extension(format!("1.partial-{}", std::process::id()));
    let _ = std::fs::remove_file(&partial);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&partial)
        .and_then(|mut file| file.write_all(roff))
        .and_then(|()| std::fs::rename(&partial, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written
}
