//! `wfhost`: the supervisor and the operator's CLI in one binary.

mod clock;
mod commands;
mod config;
mod console;
mod contain;
mod control;
mod deployment;
mod exit;
mod fleet;
mod host;
mod human;
mod journal;
mod localtime;
mod logging;
mod login;
mod observe;
mod procfs;
mod record;
mod shared;
mod signing_key;
mod status;
mod store;

use std::process::ExitCode;

use clap::{CommandFactory, Parser};

/// A workflow host: supervises workflow children, drains them under a
/// budget, recycles them without losing mail.
#[derive(Debug, Parser)]
#[command(
    name = "wfhost",
    version,
    propagate_version = true,
    after_help = "Client commands find the supervisor through --socket PATH, else --config PATH, else \
                  $WFHOST_CONFIG, else /etc/wfhost/wfhost.toml (its state_dir has the socket).\n\
                  Exit status: 0 success, 1 the operation failed, 2 usage or config error, 3 supervisor unreachable."
)]
struct Cli {
    #[command(subcommand)]
    command: commands::Command,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if !matches!(cli.command, commands::Command::Supervise(_)) {
        // Client commands behave like other Unix tools in a pipeline:
        // `wfhost events --follow | head` ends quietly when head exits.
        // SAFETY: setting a signal disposition before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let code = commands::run(cli.command, Cli::command);
    // The supervisor's last lines may still wait for stderr.
    logging::flush(std::time::Duration::from_secs(2));
    ExitCode::from(code)
}
