//! The `lds` binary: parses the command line and runs the library command.

use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;

fn main() {
    restore_sigpipe();
    use clap::{CommandFactory, FromArgMatches};
    let parsed = lds_cli::cli::Cli::command()
        .try_get_matches()
        .and_then(|matches| Ok((lds_cli::cli::Cli::from_arg_matches(&matches)?, matches)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => {
            let _ = error.print();
            let arguments: Vec<String> = std::env::args().collect();
            if arguments.get(1).map(String::as_str) == Some("fsck")
                && arguments.iter().skip(2).any(|argument| ["-p", "-y", "-a", "-f"].contains(&argument.as_str()))
            {
                // e2fsck's habits: fsck here only checks; the fixing modes are repair's.
                eprintln!("hint: lds fsck only checks (e2fsck -n); to fix, run lds repair -p or -y on the volume");
            }
            // fsck(8) and e2fsck report usage errors as 16; the other commands use clap's 2.
            let fsck = matches!(
                std::env::args().nth(1).as_deref(),
                Some("fsck" | "repair" | "resize" | "salvage" | "metadump")
            );
            let code = match (error.use_stderr(), fsck) {
                (false, _) => 0,
                (true, true) => 16,
                (true, false) => 2,
            };
            std::process::exit(code);
        }
    };
    // The subcommand as parsed (an argument before it could be a flag).
    let command = matches.subcommand_name().unwrap_or("").to_string();
    // Standard output's descriptor, unbuffered: CheckedOutput buffers, so that the bytes it
    // reports written are bytes written (docs/safety.md).
    let stdout = match std::io::stdout().as_fd().try_clone_to_owned() {
        Ok(descriptor) => std::fs::File::from(descriptor),
        Err(error) => {
            eprintln!("lds {command}: standard output: {error}");
            std::process::exit(8);
        }
    };
    let mut out = if std::io::stdout().is_terminal() {
        lds_cli::output::CheckedOutput::line_buffered(stdout)
    } else {
        lds_cli::output::CheckedOutput::new(stdout)
    };
    let mut err = std::io::stderr().lock();
    let mut code = lds_cli::cli::run(cli, &mut out, &mut err);
    // A write error on the output fails the command, whatever it returned (docs/safety.md).
    if let Err((error, written)) = out.finish() {
        let (failed, message) = lds_cli::output::output_failed(&command, &error, written);
        let _ = writeln!(err, "{message}");
        code = failed;
    }
    drop(err);
    std::process::exit(code);
}

/// Output piped into `head` ends quietly, as Unix tools do, instead of reporting EPIPE.
fn restore_sigpipe() {
    #[expect(unsafe_code, reason = "resetting one signal disposition at startup")]
    // SAFETY: called before any thread starts; SIG_DFL is a valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
