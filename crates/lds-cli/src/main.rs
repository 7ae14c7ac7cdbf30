//! The `lds` binary: parses the command line and runs the library command.

use std::io::Write;

use clap::Parser;

fn main() {
    restore_sigpipe();
    let cli = match lds_cli::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
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
    let command = std::env::args().nth(1).unwrap_or_default();
    let mut out = lds_cli::output::CheckedOutput::new(std::io::stdout().lock());
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
