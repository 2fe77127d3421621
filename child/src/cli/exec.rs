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
//! | `Mail` | acknowledged `Failed` at once (`MailAck`; in protocol 3 `MailDone` with no result, never started): a plain command takes no mail (during a drain it is not taken at all: the next child gets it) |
//! | `CancelMail` (protocol 3) | `MailCancelVerdict` `Refused`: exec holds no mail |
//! | `Answer` (protocol 3) | logged and ignored |
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
//!
//! A wrapper sits beside every plain command for as long as it runs, so it
//! is built to cost little (issue 16: at most 0.15 MiB PSS each): one
//! thread, no async runtime, one `poll` over the channel and a `signalfd`,
//! and the runtime's own drain rules (`wfhost_child::drain`, which holds
//! nothing of the async runtime) applied to one step ([`ledger`]). The command is spawned right after `Hello`, while the
//! supervisor answers it; a `Welcome` that is refused (another protocol,
//! another deployment, none at all) kills it before it is reported.

mod ledger;
mod signals;
mod wire;

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use wfhost_child::{CancelCause, ChildEnv, ConnectError, Options};
use wfhost_ipc::{CancelVerdict, Control, Event, Outcome, SignedCancel, SignedMailCancel};

use super::ExecArgs;
use super::command::{
    Identity, adopt_orphans, exit_code_of, kill_leftovers, outcome_of, signal_group, spawn,
};
use ledger::{Ledger, MailDecision, NO_MAIL};
use signals::{Caught, Signals};
use wire::{Incoming, Wire};

/// How long the command gets between SIGTERM and SIGKILL once the
/// supervisor is gone.
const ORPHAN_KILL_AFTER: Duration = Duration::from_secs(5);

/// Runs `wfhost-child exec` and returns the exit code.
pub fn run(args: ExecArgs) -> u8 {
    let (env, mut wire) = match connect() {
        Ok(connected) => connected,
        Err(e) => return refused(&e),
    };
    let run = args
        .run
        .unwrap_or_else(|| format!("exec-{}", std::process::id()));

    // Blocked before the spawn, so a signal from here on is forwarded.
    let signals = match Signals::block() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("wfhost-child: cannot watch SIGTERM/SIGINT/SIGCHLD: {e}");
            return 1;
        }
    };
    adopt_orphans();
    let identity = Identity {
        deployment: &env.deployment,
        channel_id: &env.channel_id,
        run: &run,
    };
    // Dropping the handle neither kills nor reaps: `Shim::reap` does.
    let spawned = spawn(&args.command, &identity).map(|child| child.id());

    if let Err(e) = wire.welcome(&env) {
        if let Ok(pgid) = spawned {
            signal_group(pgid, Signal::SIGKILL);
            kill_leftovers();
        }
        return refused(&e);
    }
    let pgid = match spawned {
        Ok(pgid) => pgid,
        Err(e) => {
            let program = args
                .command
                .first()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            eprintln!("wfhost-child: cannot start {program:?}: {e}");
            let outcome = Outcome::Failed(format!("cannot start {program:?}: {e}"));
            let _ = wire.send(&[Event::RunTerminal { run, outcome }]);
            wire.close();
            return if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
        }
    };

    let mut shim = Shim {
        wire,
        ledger: Ledger::new(run, args.drain.into()),
        env,
        pgid,
        acted_on: None,
        kill_at: None,
        lease_ends: None,
        open: true,
    };
    // Ready first: the supervisor accepts steps only from a ready child.
    let mut first = vec![Event::Ready];
    first.extend(shim.ledger.start());
    if let Err(e) = shim.wire.send(&first) {
        eprintln!("wfhost-child: cannot report Ready and the command's start: {e}");
        shim.ledger.close(CancelCause::Disconnected);
    }
    let status = shim.serve(&signals);
    shim.finish(status)
}

/// The environment and the channel, with `Hello` sent.
fn connect() -> Result<(ChildEnv, Wire), ConnectError> {
    let env = ChildEnv::from_env()?;
    let mut wire = Wire::take(env.control_fd)?;
    let options = Options::default();
    wire.hello(&env, &options.implementation)?;
    Ok((env, wire))
}

/// What a failed connection prints; exit code 2.
fn refused(e: &ConnectError) -> u8 {
    eprintln!("wfhost-child: cannot connect to the supervisor: {e}");
    eprintln!(
        "wfhost-child: `wfhost-child exec` must be started by `wfhost supervise` (as a deployment's command), which passes the control channel at fd 3"
    );
    2
}

/// The running shim: the channel, the ledger and the command's group.
struct Shim {
    wire: Wire,
    ledger: Ledger,
    env: ChildEnv,
    pgid: u32,
    /// The cause last turned into a signal.
    acted_on: Option<CancelCause>,
    /// When the command is SIGKILLed after the supervisor went away.
    kill_at: Option<Instant>,
    /// When the last lease runs out, while one is held.
    lease_ends: Option<Instant>,
    /// The channel is still read.
    open: bool,
}

impl Shim {
    /// Serves the supervisor and the signals until the command exits;
    /// returns its status.
    fn serve(&mut self, signals: &Signals) -> ExitStatus {
        loop {
            if let Some(status) = self.reap() {
                return status;
            }
            self.act();
            let mut fds = [
                libc::pollfd {
                    fd: signals.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: if self.open { self.wire.fd() } else { -1 },
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let timeout = self.timeout_ms(Instant::now());
            // SAFETY: `fds` is a live array of two pollfd.
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
            if ready < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    eprintln!("wfhost-child: poll failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
            self.timers(Instant::now());
            if fds[0].revents != 0 {
                for caught in signals.drain() {
                    match caught {
                        Caught::Term => signal_group(self.pgid, Signal::SIGTERM),
                        Caught::Int => signal_group(self.pgid, Signal::SIGINT),
                        Caught::Child => {}
                    }
                }
            }
            if fds[1].revents != 0 {
                self.read();
            }
        }
    }

    /// Reaps every child that exited (adopted orphans too); the command's
    /// status once it has.
    fn reap(&self) -> Option<ExitStatus> {
        let mut exited = None;
        loop {
            let mut raw = 0;
            // SAFETY: waitpid writes the status into `raw`.
            let pid = unsafe { libc::waitpid(-1, &mut raw, libc::WNOHANG) };
            if pid <= 0 {
                return exited;
            }
            if pid as u32 == self.pgid {
                exited = Some(ExitStatus::from_raw(raw));
            }
        }
    }

    /// Turns a more severe cause into its signal for the command.
    fn act(&mut self) {
        let Some(cause) = self.ledger.cause() else {
            return;
        };
        if self.acted_on >= Some(cause) {
            return;
        }
        self.acted_on = Some(cause);
        let sig = match cause {
            CancelCause::Drain => {
                eprintln!("wfhost-child: drain: stopping the command (SIGTERM)");
                Signal::SIGTERM
            }
            CancelCause::LeaseExpired => {
                eprintln!("wfhost-child: lease expired: stopping the command (SIGTERM)");
                Signal::SIGTERM
            }
            CancelCause::Shutdown => {
                eprintln!("wfhost-child: shutdown: stopping the command (SIGTERM)");
                Signal::SIGTERM
            }
            CancelCause::Disconnected => {
                eprintln!(
                    "wfhost-child: the supervisor is gone: stopping the command (SIGTERM, SIGKILL in {}s)",
                    ORPHAN_KILL_AFTER.as_secs()
                );
                self.kill_at = Some(Instant::now() + ORPHAN_KILL_AFTER);
                Signal::SIGTERM
            }
            CancelCause::Cancel => {
                eprintln!(
                    "wfhost-child: run {} cancelled: killing the command (SIGKILL)",
                    self.ledger.run()
                );
                Signal::SIGKILL
            }
        };
        signal_group(self.pgid, sig);
    }

    /// Milliseconds until the next timer, or -1 (none).
    fn timeout_ms(&self, now: Instant) -> i32 {
        [self.kill_at, self.lease_ends]
            .into_iter()
            .flatten()
            .min()
            .map_or(-1, |at| {
                let left = at.saturating_duration_since(now);
                // Rounded up, so a wake-up is never early.
                let ms = left.as_micros().div_ceil(1000);
                i32::try_from(ms).unwrap_or(i32::MAX)
            })
    }

    /// Fires the timers that are due.
    fn timers(&mut self, now: Instant) {
        if self.kill_at.is_some_and(|at| at <= now) {
            self.kill_at = None;
            eprintln!("wfhost-child: the command outlived its grace period: SIGKILL");
            signal_group(self.pgid, Signal::SIGKILL);
        }
        if self.lease_ends.is_some_and(|at| at <= now) {
            self.lease_ends = None;
            eprintln!(
                "wfhost-child: the supervisor's lease ran out before it was renewed: draining on our own"
            );
            let events = self.ledger.drain(CancelCause::LeaseExpired);
            self.post(&events);
        }
    }

    /// Handles what the supervisor sent.
    fn read(&mut self) {
        let messages = match self.wire.receive() {
            Incoming::Messages(messages) => messages,
            Incoming::End => {
                self.open = false;
                self.ledger.close(CancelCause::Disconnected);
                return;
            }
            Incoming::Failed(e) => {
                eprintln!("wfhost-child: control channel failed: {e}; closing");
                self.open = false;
                self.ledger.close(CancelCause::Disconnected);
                return;
            }
        };
        let mut out = Vec::new();
        for message in messages {
            match message {
                Control::Ping { nonce } => out.push(Event::Pong { nonce }),
                Control::Drain { budget_ms } => {
                    if !self.ledger.is_draining() {
                        eprintln!("wfhost-child: drain requested (budget {budget_ms} ms)");
                    }
                    out.extend(self.ledger.drain(CancelCause::Drain));
                }
                Control::Cancel(cancel) => out.extend(self.cancel(&cancel)),
                Control::Mail { id, .. } => match self.ledger.mail(id) {
                    MailDecision::Ack { again } => {
                        if again {
                            eprintln!(
                                "wfhost-child: mail {id} redelivered after its ack; acknowledging again"
                            );
                        }
                        out.push(self.no_mail(id));
                    }
                    MailDecision::Declined => eprintln!(
                        "wfhost-child: mail {id} arrived after Drain, a lease expiry or Shutdown; not taken, left for redelivery to the next child"
                    ),
                },
                Control::Lease { valid_ms } => {
                    if self.ledger.is_draining() {
                        eprintln!(
                            "wfhost-child: lease of {valid_ms} ms after the drain began; nothing changes"
                        );
                    } else {
                        // A lease too long to count in is one that never runs out.
                        self.lease_ends =
                            Instant::now().checked_add(Duration::from_millis(valid_ms));
                    }
                }
                Control::Shutdown => self.ledger.close(CancelCause::Shutdown),
                Control::Welcome(_) => {
                    eprintln!(
                        "wfhost-child: protocol violation: unexpected Welcome after the handshake; closing"
                    );
                    self.open = false;
                    self.ledger.close(CancelCause::Disconnected);
                    break;
                }
                // A child of protocol 2 cannot decode these: a broken frame.
                ref v3 @ (Control::CancelMail(_) | Control::Answer { .. })
                    if self.env.protocol < v3.since() =>
                {
                    eprintln!(
                        "wfhost-child: protocol violation: {} is a protocol-{} message, and this child speaks protocol {}; closing",
                        v3.name(),
                        v3.since(),
                        self.env.protocol
                    );
                    self.open = false;
                    self.ledger.close(CancelCause::Disconnected);
                    break;
                }
                Control::CancelMail(cancel) => out.push(self.cancel_mail(&cancel)),
                Control::Answer { id, key, .. } => eprintln!(
                    "wfhost-child: answer to question {key:?} of mail {id} ignored: a plain command asks none"
                ),
            }
        }
        self.post(&out);
    }

    /// Verifies a cancel (signature, deployment, run) and runs the
    /// cascade, or says why it was refused and changes nothing.
    fn cancel(&mut self, cancel: &SignedCancel) -> Vec<Event> {
        let record = &cancel.record;
        let run_name = record.run.as_deref().unwrap_or("<every run>");
        let ledger = &self.ledger;
        let verdict = cancel.verify_for(&self.env.supervisor_key, &self.env.deployment, |run| {
            ledger.knows_run(run)
        });
        match verdict {
            Ok(()) => {
                eprintln!(
                    "wfhost-child: cancel of run {run_name} accepted (origin {}, reason {:?})",
                    record.origin.as_str(),
                    record.reason
                );
                self.ledger.cancel(record.run.as_deref())
            }
            Err(refused) => {
                eprintln!(
                    "wfhost-child: refused cancel of run {run_name} for deployment {:?} (origin {}): {refused}",
                    record.deployment,
                    record.origin.as_str()
                );
                Vec::new()
            }
        }
    }

    /// The end of mail item `id`, which a plain command never takes:
    /// `Failed` at once, never started (`MailDone` with no result in
    /// protocol 3, `MailAck` in protocol 2).
    fn no_mail(&self, id: u64) -> Event {
        let outcome = Outcome::Failed(NO_MAIL.to_owned());
        if self.env.protocol >= 3 {
            Event::MailDone {
                id,
                outcome,
                result: Vec::new(),
            }
        } else {
            Event::MailAck { id, outcome }
        }
    }

    /// Protocol 3: a cancel of one mail item, which exec never holds: the
    /// verdict is the refusal of the first check it fails (the signature,
    /// the deployment, or the item it does not hold).
    fn cancel_mail(&self, cancel: &SignedMailCancel) -> Event {
        let record = &cancel.record;
        let refused =
            match cancel.verify_for(&self.env.supervisor_key, &self.env.deployment, |_| false) {
                Err(refused) => refused.to_string(),
                Ok(()) => format!(
                    "cancel is for mail item {}, which this child does not hold",
                    record.id
                ),
            };
        eprintln!(
            "wfhost-child: refused cancel of mail {} for deployment {:?} (origin {}): {refused}",
            record.id,
            record.deployment,
            record.origin.as_str()
        );
        Event::MailCancelVerdict {
            id: record.id,
            verdict: CancelVerdict::Refused(refused),
        }
    }

    /// Sends `events`; a channel that fails is one that closed.
    fn post(&mut self, events: &[Event]) {
        if events.is_empty() {
            return;
        }
        if let Err(e) = self.wire.send(events)
            && self.open
        {
            eprintln!("wfhost-child: control channel failed: {e}; closing");
            self.open = false;
            self.ledger.close(CancelCause::Disconnected);
        }
    }

    /// The command is gone; whatever it started goes with it (its group,
    /// and every orphan adopted from it), so nothing outlives the step.
    /// Then the step and the run are reported and the command's status
    /// passed on.
    fn finish(mut self, status: ExitStatus) -> u8 {
        signal_group(self.pgid, Signal::SIGKILL);
        let left = kill_leftovers();
        if left > 0 {
            eprintln!("wfhost-child: killed {left} process(es) the command left behind");
        }
        let cancelled = matches!(
            self.acted_on,
            Some(CancelCause::Drain | CancelCause::LeaseExpired | CancelCause::Cancel)
        ) || self.ledger.is_cancelled();
        let outcome = if cancelled {
            Outcome::Cancelled
        } else {
            outcome_of(status)
        };
        let events = self.ledger.finish(outcome);
        let _ = self.wire.send(&events);
        self.wire.close();
        exit_code_of(status)
    }
}
