//! The command line of `wfhost-child`.

mod command;
mod exec;

use std::ffi::OsString;

use clap::{Parser, Subcommand, ValueEnum};
use wfhost_child::DrainBehavior;

/// Host work for the wfhost supervisor. Must be started by `wfhost supervise`,
/// which passes the control channel at fd 3 and the WFHOST_* environment.
#[derive(Debug, Parser)]
#[command(name = "wfhost-child", version)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a plain command as this child's one run, in its own process group.
    ///
    /// Drain stops it (SIGTERM) or waits for it, a signed cancel kills it
    /// (SIGKILL), Shutdown and SIGTERM/SIGINT are forwarded to it, and the
    /// child exits with its status (128+N if it died by signal N).
    Exec(ExecArgs),
}

/// What `exec` runs and how it behaves on drain.
#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// On drain: `cancel` sends SIGTERM to the command; `wait` lets it finish.
    #[arg(long, value_enum, default_value_t = DrainArg::Cancel)]
    drain: DrainArg,
    /// The run id reported to the supervisor [default: exec-<this pid>].
    #[arg(long, value_name = "NAME")]
    run: Option<String>,
    /// The command and its arguments (after `--`).
    #[arg(
        value_name = "CMD",
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    command: Vec<OsString>,
}

/// `--drain` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DrainArg {
    /// Stop the command on drain (SIGTERM to its process group).
    Cancel,
    /// Let the command finish on drain.
    Wait,
}

impl From<DrainArg> for DrainBehavior {
    fn from(arg: DrainArg) -> Self {
        match arg {
            DrainArg::Cancel => Self::Cancel,
            DrainArg::Wait => Self::Wait,
        }
    }
}

/// Runs the chosen subcommand and returns the process exit code.
pub async fn run(cli: Cli) -> u8 {
    match cli.command {
        Command::Exec(args) => exec::run(args).await,
    }
}
