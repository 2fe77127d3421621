//! `wfhost`: the supervisor and the operator's CLI in one binary.

mod commands;
mod config;
mod control;
mod deployment;
mod host;
mod journal;
mod logging;
mod mail_retention;
mod observe;
mod procfs;
mod shared;
mod signing_key;
mod store;
mod store_handle;
mod unwritten;

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
    /// A self-contained tour: spawn, mail, recycles, drain with escalation, journal.
    Demo(commands::demo::Args),
    /// Show every deployment: state, pid, uptime, restarts, last exit.
    Status(commands::status::Args),
    /// Replace a deployment's child without losing mail; prints the new pid.
    Recycle(commands::recycle::Args),
    /// Drain a deployment under its budget; it stays drained until resumed.
    Drain(commands::drain::Args),
    /// Start a drained or failed deployment again.
    Resume(commands::resume::Args),
    /// Cancel a run (or every run) with a signed, journaled request.
    Cancel(commands::cancel::Args),
    /// Accept mail for a deployment (durable before it returns).
    Send(commands::send::Args),
    /// Print the durable event stream, optionally following it live.
    Events(commands::events::Args),
    /// SIGKILL a deployment's child now, even one stuck stopping.
    Kill(commands::kill::Args),
    /// Validate a config file; errors name the file, line and column.
    CheckConfig(commands::check_config::Args),
    /// Write a new ed25519 signing key (PKCS#8 PEM, mode 0600).
    Keygen(commands::keygen::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Check or list the signed journal.
    #[command(subcommand)]
    Journal(commands::journal::Command),
    /// List and inspect stored mail; retry or purge dead mail.
    #[command(subcommand)]
    Mail(commands::mail::Command),
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
    if !matches!(cli.command, Command::Supervise(_)) {
        // Client commands behave like other Unix tools in a pipeline:
        // `wfhost events --follow | head` ends quietly when head exits.
        // SAFETY: setting a signal disposition before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let code = match cli.command {
        Command::Supervise(args) => commands::supervise::run(args),
        Command::Demo(args) => commands::demo::run(args),
        Command::Status(args) => commands::status::run(args),
        Command::Recycle(args) => commands::recycle::run(args),
        Command::Drain(args) => commands::drain::run(args),
        Command::Resume(args) => commands::resume::run(args),
        Command::Cancel(args) => commands::cancel::run(args),
        Command::Send(args) => commands::send::run(args),
        Command::Events(args) => commands::events::run(args),
        Command::Kill(args) => commands::kill::run(args),
        Command::CheckConfig(args) => commands::check_config::run(args),
        Command::Keygen(args) => commands::keygen::run(args),
        Command::Journal(cmd) => commands::journal::run(cmd),
        Command::Mail(cmd) => commands::mail::run(cmd),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "wfhost", &mut std::io::stdout());
            exit::OK
        }
    };
    ExitCode::from(code)
}
