//! `wfhost`: the supervisor and the operator's CLI in one binary.

mod client;
mod commands;
mod config;
mod control;
mod control_server;
mod deployment;
mod journal;
mod live_child;
mod logging;
mod procfs;
mod shared;
mod signing_key;
mod spawn;
mod status;
mod store;
mod supervisor;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit codes every command uses (DESIGN §8).
pub mod exit {
    /// The operation succeeded.
    pub const OK: u8 = 0;
    /// The operation failed.
    pub const FAILED: u8 = 1;
    /// Usage or configuration error.
    pub const USAGE: u8 = 2;
    /// The supervisor could not be reached.
    pub const UNREACHABLE: u8 = 3;
}

/// A workflow host: supervises workflow children, drains them under a
/// budget, recycles them without losing mail.
#[derive(Debug, Parser)]
#[command(name = "wfhost", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the supervisor in the foreground.
    Supervise(commands::supervise::Args),
    /// Show every deployment: state, pid, uptime, restarts, last exit.
    Status(commands::status::Args),
    /// SIGKILL a deployment's child now, even one stuck stopping.
    Kill(commands::kill::Args),
    /// Validate a config file; errors name the file, line and column.
    CheckConfig(commands::check_config::Args),
    /// Write a new ed25519 signing key (PKCS#8 PEM, mode 0600).
    Keygen(commands::keygen::Args),
    /// Check or list the signed journal.
    #[command(subcommand)]
    Journal(commands::journal::Command),
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
    let code = match cli.command {
        Command::Supervise(args) => commands::supervise::run(args),
        Command::Status(args) => commands::status::run(args),
        Command::Kill(args) => commands::kill::run(args),
        Command::CheckConfig(args) => commands::check_config::run(args),
        Command::Keygen(args) => commands::keygen::run(args),
        Command::Journal(cmd) => commands::journal::run(cmd),
    };
    ExitCode::from(code)
}
