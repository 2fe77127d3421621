//! The command line of `wfhost-child`.

mod command;
mod conformance;
mod demo;
mod exec;
pub mod log;
mod man;

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
    ///
    /// The command gets the child's environment without the control channel
    /// (no WFHOST_CONTROL_FD), plus WFHOST_DEPLOYMENT (the deployment id),
    /// WFHOST_CHANNEL_ID (this child's channel id) and WFHOST_RUN (its run).
    Exec(ExecArgs),
    /// Run the demo workflow: each mail item is one run of three steps.
    ///
    /// `fetch` (cancel on drain), `approve` (waited for on drain: a person
    /// approving) and `apply` (cancel on drain), one item at a time, one log
    /// line per step on stdout. Mail is acknowledged when its run succeeds or
    /// a signed cancel ends it; mail whose run drain, shutdown or a lost
    /// channel cut short is left for redelivery.
    Demo(DemoArgs),
    /// Write the manual pages (wfhost-child.1 and one for each command) into a directory.
    Man(man::ManArgs),
    /// Run the conformance child that `wfhost-conformance` tests.
    ///
    /// Each mail item's JSON payload says what to do: steps (name, drain
    /// behaviour, milliseconds), a failure, a recycle request, a custom
    /// event (docs/conformance.md). Items are processed concurrently.
    Conformance,
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

/// How the demo workflow paces itself and when it asks to be recycled.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Ask to be recycled after every N acknowledged mail items (0: never).
    #[arg(long, value_name = "N", default_value_t = 0)]
    recycle_every: u64,
    /// How long `fetch` and `apply` each take, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 50)]
    step_ms: u64,
    /// How long `approve` takes (a person approving), in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 100)]
    approve_ms: u64,
    /// How long a drained `fetch` or `apply` winds down before it stops, in
    /// milliseconds; a signed cancel stops it at once. Above the deployment's
    /// drain_timeout, the drain budget runs out and escalates.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    cleanup_ms: u64,
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
        Command::Demo(args) => demo::run(args).await,
        Command::Conformance => conformance::run().await,
        Command::Man(args) => man::run(args),
    }
}
