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
    /// behaviour, milliseconds), a failure, a result, whether it can be
    /// cancelled, a recycle request, a custom event (docs/conformance.md).
    /// Items are processed concurrently.
    Conformance(ConformanceArgs),
}

/// Which protocol the conformance child may speak.
#[derive(Debug, clap::Args)]
pub struct ConformanceArgs {
    /// The newest protocol version to speak, whatever the supervisor
    /// offers: 2 makes this a child of protocol 2 (as deployed before
    /// version 3), for `wfhost-conformance --protocol 2`.
    #[arg(long, value_name = "VERSION", default_value_t = wfhost_ipc::PROTOCOL_VERSION,
          value_parser = clap::value_parser!(u32).range(2..=i64::from(wfhost_ipc::PROTOCOL_VERSION)))]
    protocol: u32,
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

/// What to run: `exec` runs on the calling thread alone; everything else
/// needs the async runtime.
pub enum Chosen {
    /// `wfhost-child exec`.
    Exec(ExecArgs),
    /// Any other subcommand.
    Other(Cli),
}

impl Chosen {
    /// The subcommand of this process's arguments: an ordinary `exec`
    /// line is read by hand (clap's parser costs a plain command's
    /// wrapper more than the rest of its start); anything else, help and
    /// mistakes included, goes through clap.
    pub fn from_args() -> Self {
        if let Some(args) = exec_line(std::env::args_os().skip(1)) {
            return Self::Exec(args);
        }
        match Cli::parse().command {
            Command::Exec(args) => Self::Exec(args),
            other => Self::Other(Cli { command: other }),
        }
    }
}

/// `exec [--drain cancel|wait] [--run NAME] [--] CMD ARGS…` read by hand,
/// or `None` for anything clap must judge (a help flag, an unknown flag,
/// a bad value, no command).
fn exec_line(mut args: impl Iterator<Item = OsString>) -> Option<ExecArgs> {
    if args.next()? != "exec" {
        return None;
    }
    let mut drain = DrainArg::Cancel;
    let mut run = None;
    let mut command = Vec::new();
    while let Some(arg) = args.next() {
        let text = arg.to_str();
        let (flag, inline) = match text.and_then(|t| t.split_once('=')) {
            Some((flag, value)) if flag.starts_with("--") => (Some(flag), Some(value.to_owned())),
            _ => (text, None),
        };
        match flag {
            Some("--") => {
                command.extend(args.by_ref());
                break;
            }
            Some("--drain") => {
                let value = match inline {
                    Some(v) => v,
                    None => args.next()?.into_string().ok()?,
                };
                drain = match value.as_str() {
                    "cancel" => DrainArg::Cancel,
                    "wait" => DrainArg::Wait,
                    _ => return None,
                };
            }
            Some("--run") => {
                run = Some(match inline {
                    Some(v) => v,
                    None => args.next()?.into_string().ok()?,
                });
            }
            Some(f) if f.starts_with('-') => return None,
            _ => {
                command.push(arg);
                command.extend(args.by_ref());
                break;
            }
        }
    }
    if command.is_empty() {
        return None;
    }
    Some(ExecArgs {
        drain,
        run,
        command,
    })
}

/// Runs `exec` on this thread and returns the process exit code.
pub fn run_exec(args: ExecArgs) -> u8 {
    exec::run(args)
}

/// Runs any other subcommand and returns the process exit code.
pub async fn run(cli: Cli) -> u8 {
    match cli.command {
        Command::Exec(args) => exec::run(args),
        Command::Demo(args) => demo::run(args).await,
        Command::Conformance(args) => conformance::run(args.protocol).await,
        Command::Man(args) => man::run(args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(args: &[&str]) -> Option<ExecArgs> {
        exec_line(args.iter().map(OsString::from))
    }

    #[test]
    fn ordinary_exec_lines_are_read_by_hand() {
        let a = line(&["exec", "--", "sleep", "1"]).unwrap();
        assert_eq!((a.drain, a.run.as_deref()), (DrainArg::Cancel, None));
        assert_eq!(a.command, ["sleep", "1"]);
        let a = line(&[
            "exec",
            "--drain",
            "wait",
            "--run=job",
            "--",
            "sh",
            "-c",
            "x",
        ])
        .unwrap();
        assert_eq!((a.drain, a.run.as_deref()), (DrainArg::Wait, Some("job")));
        assert_eq!(a.command, ["sh", "-c", "x"]);
        let a = line(&["exec", "--drain=cancel", "--run", "r", "cat", "--", "-n"]).unwrap();
        assert_eq!(
            a.command,
            ["cat", "--", "-n"],
            "all after the command is its own"
        );
    }

    #[test]
    fn anything_unusual_is_left_to_clap() {
        for args in [
            &["exec", "--help"][..],
            &["exec", "-h", "--", "x"],
            &["exec", "--drain", "later", "--", "x"],
            &["exec", "--drain"],
            &["exec", "--bogus", "--", "x"],
            &["exec", "--"],
            &["exec"],
            &["demo"],
            &[],
        ] {
            assert!(line(args).is_none(), "{args:?}");
        }
    }

    #[test]
    fn the_hand_reading_agrees_with_clap() {
        let args = [
            "wfhost-child",
            "exec",
            "--run",
            "r",
            "--drain",
            "wait",
            "--",
            "a",
            "-b",
        ];
        let Command::Exec(by_clap) = Cli::parse_from(args).command else {
            panic!("not exec");
        };
        let by_hand = line(&args[1..]).unwrap();
        assert_eq!(by_hand.drain, by_clap.drain);
        assert_eq!(by_hand.run, by_clap.run);
        assert_eq!(by_hand.command, by_clap.command);
    }
}
