//! `wfhost-child exec`: one plain command as one run with one step,
//! `command`, stopped, waited for or killed as the supervisor asks.
//!
//! | event | what happens to the command |
//! |---|---|
//! | `Drain`, `--drain cancel` | SIGTERM to its process group; `Drained` after it exits |
//! | `Drain`, `--drain wait` | nothing; `Drained` at once (exec never holds mail) |
//! | the lease (`Lease`) runs out, `--drain cancel` | SIGTERM, as on `Drain` |
//! | verified `Cancel` of its run or every run | SIGKILL to its process group |
//! | `Shutdown` | SIGTERM to its process group |
//! | SIGTERM / SIGINT to wfhost-child | forwarded to its process group |
//! | control channel EOF | SIGTERM, SIGKILL 5 s later |
//! | `Mail` | acknowledged `Failed` at once: a plain command takes no mail (during a drain it is not taken at all: the next child gets it) |
//!
//! When the command exits: whatever it left behind outside its process
//! group (adopted by wfhost-child, a child subreaper) is killed, then
//! `StepFinished` and `RunTerminal` (`Cancelled` if drain or a cancel
//! stopped it, else from its status), then exit with its status. Orphans
//! that die while it runs are reaped.
//!
//! The command's environment is the child's, without the control channel
//! (`WFHOST_CONTROL_FD` and the rest of the `WFHOST_*` contract are
//! removed), plus who it works for:
//!
//! | variable | value |
//! |---|---|
//! | `WFHOST_DEPLOYMENT` | the deployment id |
//! | `WFHOST_CHANNEL_ID` | this child's channel id, new for every spawn |
//! | `WFHOST_RUN` | the run it is (`--run`, else `exec-<wfhost-child's pid>`) |

use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::{Instant, sleep_until};
use wfhost_child::{CancelCause, CancelToken, DrainBehavior, Options, Outcome, Runtime};

use super::ExecArgs;
use super::command::{
    Identity, adopt_orphans, exit_code_of, kill_leftovers, outcome_of, reap_orphans, signal_group,
    spawn,
};

/// How long the command gets between SIGTERM and SIGKILL once the
/// supervisor is gone.
const ORPHAN_KILL_AFTER: Duration = Duration::from_secs(5);

/// The step name every exec run reports.
const STEP: &str = "command";

/// What mail gets in exec mode.
const NO_MAIL: &str = "wfhost-child exec hosts a plain command and takes no mail";

/// Runs `wfhost-child exec` and returns the exit code.
pub async fn run(args: ExecArgs) -> u8 {
    let options = Options {
        takes_mail: false,
        ..Options::default()
    };
    let rt = match Runtime::connect_as(options).await {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("wfhost-child: cannot connect to the supervisor: {e}");
            eprintln!(
                "wfhost-child: `wfhost-child exec` must be started by `wfhost supervise` (as a deployment's command), which passes the control channel at fd 3"
            );
            return 2;
        }
    };
    let drain: DrainBehavior = args.drain.into();
    let run = args
        .run
        .unwrap_or_else(|| format!("exec-{}", std::process::id()));

    // Installed before the spawn, so a signal from here on is forwarded.
    let (mut sigterm, mut sigint, mut sigchld) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::child()),
    ) {
        (Ok(t), Ok(i), Ok(c)) => (t, i, c),
        (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
            eprintln!("wfhost-child: cannot watch SIGTERM/SIGINT/SIGCHLD: {e}");
            return 1;
        }
    };
    adopt_orphans();

    let identity = Identity {
        deployment: rt.deployment(),
        channel_id: rt.channel_id(),
        run: &run,
    };
    let mut child = match spawn(&args.command, &identity) {
        Ok(child) => child,
        Err(e) => {
            let program = args
                .command
                .first()
                .map(|p| p.to_string_lossy().into_owned());
            let program = program.unwrap_or_default();
            eprintln!("wfhost-child: cannot start {program:?}: {e}");
            let outcome = Outcome::Failed(format!("cannot start {program:?}: {e}"));
            let _ = rt.run_terminal(&run, outcome).await;
            let _ = rt.close().await;
            return if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };
    let pgid = child.id();
    let signal_command = |sig: Signal| {
        if let Some(pgid) = pgid {
            signal_group(pgid, sig);
        }
    };

    // Ready first: the supervisor accepts steps only from a ready child.
    if let Err(e) = rt.ready().await {
        // The closure reaches the loop below through the token.
        eprintln!("wfhost-child: cannot report Ready: {e}");
    }
    let step = rt.start_step(&run, STEP, drain).await;
    let token = match &step {
        Ok(step) => step.token().clone(),
        Err(e) => {
            eprintln!("wfhost-child: cannot report the command's start: {e}");
            let token = CancelToken::new();
            token.cancel(CancelCause::Disconnected);
            token
        }
    };

    let mut acted_on: Option<CancelCause> = None;
    let mut kill_at: Option<Instant> = None;
    let mut mail = rt.mail();
    let mut mail_open = true;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            cause = token.escalated(acted_on) => {
                acted_on = Some(cause);
                match cause {
                    CancelCause::Drain => {
                        eprintln!("wfhost-child: drain: stopping the command (SIGTERM)");
                        signal_command(Signal::SIGTERM);
                    }
                    CancelCause::LeaseExpired => {
                        eprintln!("wfhost-child: lease expired: stopping the command (SIGTERM)");
                        signal_command(Signal::SIGTERM);
                    }
                    CancelCause::Shutdown => {
                        eprintln!("wfhost-child: shutdown: stopping the command (SIGTERM)");
                        signal_command(Signal::SIGTERM);
                    }
                    CancelCause::Disconnected => {
                        eprintln!(
                            "wfhost-child: the supervisor is gone: stopping the command (SIGTERM, SIGKILL in {}s)",
                            ORPHAN_KILL_AFTER.as_secs()
                        );
                        signal_command(Signal::SIGTERM);
                        kill_at = Some(Instant::now() + ORPHAN_KILL_AFTER);
                    }
                    CancelCause::Cancel => {
                        eprintln!("wfhost-child: run {run} cancelled: killing the command (SIGKILL)");
                        signal_command(Signal::SIGKILL);
                    }
                }
            }
            () = sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                kill_at = None;
                eprintln!("wfhost-child: the command outlived its grace period: SIGKILL");
                signal_command(Signal::SIGKILL);
            }
            Some(()) = sigterm.recv() => signal_command(Signal::SIGTERM),
            Some(()) = sigchld.recv() => reap_orphans(pgid),
            Some(()) = sigint.recv() => signal_command(Signal::SIGINT),
            next = mail.next(), if mail_open => match next {
                Some(m) => {
                    let _ = m.ack(Outcome::Failed(NO_MAIL.to_owned())).await;
                }
                None => mail_open = false,
            },
        }
    };
    // The command is gone; whatever it started goes with it (its group,
    // and every orphan adopted from it), so nothing outlives the step.
    signal_command(Signal::SIGKILL);
    let left = kill_leftovers().await;
    if left > 0 {
        eprintln!("wfhost-child: killed {left} process(es) the command left behind");
    }

    let status = match status {
        Ok(status) => status,
        Err(e) => {
            eprintln!("wfhost-child: cannot wait for the command: {e}");
            let outcome = Outcome::Failed(format!("wfhost-child lost the command: {e}"));
            if let Ok(step) = step {
                let _ = step.finish_run(outcome.clone(), outcome).await;
            }
            let _ = rt.close().await;
            return 1;
        }
    };
    let cancelled = matches!(
        acted_on,
        Some(CancelCause::Drain | CancelCause::LeaseExpired | CancelCause::Cancel)
    );
    let outcome = if cancelled {
        Outcome::Cancelled
    } else {
        outcome_of(status)
    };
    match step {
        Ok(step) => {
            let _ = step.finish_run(outcome.clone(), outcome).await;
        }
        Err(_) => {
            let _ = rt.run_terminal(&run, outcome).await;
        }
    }
    let _ = rt.close().await;
    exit_code_of(status)
}
