//! The `lds` binary: parses the command line and runs the library command.

use clap::Parser;

fn main() {
    restore_sigpipe();
    let cli = lds_cli::cli::Cli::parse();
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    let code = lds_cli::cli::run(cli, &mut out, &mut err);
    drop(out);
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
