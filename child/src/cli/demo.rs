//! `wfhost-child demo`: the demo workflow of the `wfhost demo` tour and the
//! example config. Every mail item is one run, `mail-<id>`, of three steps,
//! one item at a time in delivery order:
//!
//! | step | drain behaviour | takes |
//! |---|---|---|
//! | `fetch` | cancel | `--step-ms` (50 ms) |
//! | `approve` | wait (a person approving) | `--approve-ms` (100 ms) |
//! | `apply` | cancel | `--step-ms` (50 ms) |
//!
//! Each step reports `StepStarted` and `StepFinished`, the run ends with
//! `RunTerminal`, and stdout gets one line per step ("mail 7: fetch done"),
//! so the supervisor's log tells the story. A step waits for its work or
//! its token, whichever comes first; the first step that does not succeed
//! ends the run.
//!
//! How a run ends decides its acknowledgement:
//!
//! | run ended by | `RunTerminal` | `MailAck` |
//! |---|---|---|
//! | every step succeeding | `Succeeded` | `Succeeded` |
//! | a verified signed cancel (operator, or drain escalation) | `Cancelled` | `Cancelled`: the cancel is a decision, so the mail is done |
//! | drain (a cancel-behaviour step stopped, or not started) | `Cancelled` | none: the work was lost, not refused, so the mail goes back to the inbox and the next child runs it again |
//! | `Shutdown` or the supervisor gone | `Cancelled` (if it can still be sent) | none, for the same reason |
//!
//! In protocol 3 each item starts with `MailStarted` (cancellable) and ends
//! with `MailDone` (empty result) in place of `MailAck`; a verified cancel
//! of the item (`CancelMail`) ends it like a signed cancel of its run.
//!
//! After every `--recycle-every N` acknowledged items (0: never) the child
//! sends one `RecycleRequest` ("processed N items"), unless it is draining.
//!
//! On `Drain` it takes no more mail (the runtime hands out none; mail that
//! is queued or still arrives is left unacknowledged, for redelivery), lets
//! a running `approve` finish, settles the item in hand (the runtime sends
//! `Drained` only after that: after its `MailAck`, or after the run ends
//! when the mail goes back), and then waits for `Shutdown` or the end of the
//! channel to exit 0. A drained
//! `fetch` or `apply` stops at once, or, with `--cleanup-ms MS`, winds down
//! for up to MS first (a signed cancel cuts that short): set MS above the
//! deployment's `drain_timeout` to watch the budget run out and escalate.
//! A redelivery of mail already acknowledged is answered by the runtime and
//! never reaches this loop. SIGTERM ends the demo cleanly (exit 0), like
//! `Shutdown`: the supervisor sends both when it stops a child.

use std::fmt;
use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::time::sleep;
use wfhost_child::{CancelCause, CloseReason, DrainBehavior, Mail, Outcome, Runtime, RuntimeError};

use super::DemoArgs;

/// Writes one line to stdout; a closed stdout (the supervisor gone) is no
/// reason to panic.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// Writes one line to stderr, prefixed with the program name.
macro_rules! complain {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), "wfhost-child: {}", format_args!($($arg)*));
    }};
}

/// Payload characters shown in the "received" line.
const PREVIEW_CHARS: usize = 60;

/// One step of a mail item's run.
#[derive(Debug, Clone, Copy)]
struct StepPlan {
    name: &'static str,
    drain: DrainBehavior,
    takes: Duration,
}

/// The steps every mail item runs, in order.
fn plan(args: &DemoArgs) -> [StepPlan; 3] {
    let step = Duration::from_millis(args.step_ms);
    [
        StepPlan {
            name: "fetch",
            drain: DrainBehavior::Cancel,
            takes: step,
        },
        StepPlan {
            name: "approve",
            drain: DrainBehavior::Wait,
            takes: Duration::from_millis(args.approve_ms),
        },
        StepPlan {
            name: "apply",
            drain: DrainBehavior::Cancel,
            takes: step,
        },
    ]
}

/// Why a step, and so its run, did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stopped {
    /// Its token fired, for this (most severe) cause.
    Cancelled(CancelCause),
    /// The step could not be reported: the channel is closed.
    Lost(RuntimeError),
}

impl fmt::Display for Stopped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cancelled(cause) => write!(f, "cancelled ({})", cause.as_str()),
            Self::Lost(e) => write!(f, "not run: {e}"),
        }
    }
}

/// How a run is reported (`RunTerminal`) and whether its mail is
/// acknowledged, and with what; `None` leaves it for redelivery.
fn disposition(stopped: Option<&Stopped>) -> (Outcome, Option<Outcome>) {
    match stopped {
        None => (Outcome::Succeeded, Some(Outcome::Succeeded)),
        Some(Stopped::Cancelled(CancelCause::Cancel)) => {
            (Outcome::Cancelled, Some(Outcome::Cancelled))
        }
        Some(Stopped::Cancelled(
            CancelCause::Drain
            | CancelCause::LeaseExpired
            | CancelCause::Shutdown
            | CancelCause::Disconnected,
        ))
        | Some(Stopped::Lost(_)) => (Outcome::Cancelled, None),
    }
}

/// Runs `wfhost-child demo` and returns the exit code.
pub async fn run(args: DemoArgs) -> u8 {
    let rt = match Runtime::connect().await {
        Ok(rt) => rt,
        Err(e) => {
            complain!("cannot connect to the supervisor: {e}");
            complain!(
                "`wfhost-child demo` must be started by `wfhost supervise` (as a deployment's command), which passes the control channel at fd 3"
            );
            return 2;
        }
    };
    if let Err(e) = rt.ready().await {
        complain!("cannot report Ready: {e}");
        return 1;
    }
    let recycle = match args.recycle_every {
        0 => "never".to_owned(),
        n => format!("every {n} items"),
    };
    say!(
        "demo: ready for deployment {} (steps {} ms, approval {} ms, recycle {recycle})",
        rt.deployment(),
        args.step_ms,
        args.approve_ms
    );

    let steps = plan(&args);
    let cleanup = Duration::from_millis(args.cleanup_ms);
    let mut inbox = rt.mail();
    let mut processed: u64 = 0;
    let mut term = match signal(SignalKind::terminate()) {
        Ok(term) => Some(term),
        Err(e) => {
            complain!("cannot watch SIGTERM ({e}); it will end the demo abruptly");
            None
        }
    };
    loop {
        let mail = tokio::select! {
            biased;
            () = sigterm(&mut term) => {
                say!("demo: SIGTERM; exiting");
                return 0;
            }
            () = rt.draining() => break,
            next = inbox.next() => match next {
                Some(mail) => mail,
                None => break,
            },
        };
        if process(&rt, mail, &steps, cleanup).await.is_none() {
            continue;
        }
        processed += 1;
        let every = args.recycle_every;
        if every > 0 && processed.is_multiple_of(every) && !rt.is_draining() {
            let reason = format!("processed {processed} items");
            say!("demo: {reason}: asking to be recycled");
            if let Err(e) = rt.request_recycle(&reason).await {
                complain!("cannot ask for a recycle: {e}");
            }
        }
    }

    if rt.is_draining() && rt.close_reason().is_none() {
        say!("demo: draining: taking no more mail; waiting for the supervisor to stop this child");
    }
    let reason = tokio::select! {
        reason = rt.closed() => reason,
        () = sigterm(&mut term) => {
            say!("demo: SIGTERM; exiting");
            return 0;
        }
    };
    let _ = rt.close().await;
    match reason {
        CloseReason::Shutdown => {
            say!("demo: shutdown requested; exiting");
            0
        }
        CloseReason::Disconnected => {
            say!("demo: the supervisor closed the channel; exiting");
            0
        }
        CloseReason::Failed(why) => {
            complain!("control channel failed: {why}; exiting");
            1
        }
    }
}

/// Runs one mail item as run `mail-<id>` and settles its mail; returns the
/// acknowledged outcome, or `None` when the mail was left for redelivery.
async fn process(
    rt: &Runtime,
    mail: Mail,
    steps: &[StepPlan],
    cleanup: Duration,
) -> Option<Outcome> {
    let id = mail.id();
    let run = format!("mail-{id}");
    say!("mail {id}: received {}", preview(mail.payload()));
    let mut stopped = None;
    for plan in steps {
        match step(rt, id, &run, plan, cleanup).await {
            Ok(()) => say!("mail {id}: {} done", plan.name),
            Err(why) => {
                say!("mail {id}: {} {why}", plan.name);
                stopped = Some(why);
                break;
            }
        }
    }
    let (run_outcome, ack) = disposition(stopped.as_ref());
    if let Err(e) = rt.run_terminal(&run, run_outcome).await {
        complain!("mail {id}: cannot report the end of run {run}: {e}");
        return None;
    }
    let Some(outcome) = ack else {
        say!("mail {id}: not acknowledged: it goes back to the inbox for the next child");
        return None;
    };
    let shown = outcome_name(&outcome);
    match mail.ack(outcome.clone()).await {
        Ok(()) => {
            say!("mail {id}: acknowledged ({shown})");
            Some(outcome)
        }
        Err(e) => {
            complain!("mail {id}: cannot acknowledge: {e}");
            None
        }
    }
}

/// Runs one step: its work is a sleep of `plan.takes`, dropped as soon as
/// the step's token fires. A cancel-behaviour step stopped by drain mid-way
/// winds down for `cleanup` first, unless its token escalates.
async fn step(
    rt: &Runtime,
    id: u64,
    run: &str,
    plan: &StepPlan,
    cleanup: Duration,
) -> Result<(), Stopped> {
    let step = rt
        .start_step(run, plan.name, plan.drain)
        .await
        .map_err(Stopped::Lost)?;
    let token = step.token().clone();
    let cause = match token.cause() {
        // Fired before it began (drained, cancelled, closed): nothing to undo.
        Some(cause) => cause,
        None => {
            let cause = tokio::select! {
                biased;
                () = sleep(plan.takes) => None,
                cause = token.cancelled() => Some(cause),
            };
            match cause {
                None => {
                    // A failed report is the runtime's closure, seen by the loop.
                    let _ = step.finish(Outcome::Succeeded).await;
                    return Ok(());
                }
                Some(CancelCause::Drain) if !cleanup.is_zero() => {
                    say!(
                        "mail {id}: {}: drained, winding down for {} ms",
                        plan.name,
                        cleanup.as_millis()
                    );
                    tokio::select! {
                        () = sleep(cleanup) => CancelCause::Drain,
                        cause = token.escalated(Some(CancelCause::Drain)) => cause,
                    }
                }
                Some(cause) => cause,
            }
        }
    };
    let _ = step.finish(Outcome::Cancelled).await;
    Err(Stopped::Cancelled(cause))
}

/// The payload as a short quoted string for the log.
fn preview(payload: &[u8]) -> String {
    let text = String::from_utf8_lossy(payload);
    let mut shown: String = text.chars().take(PREVIEW_CHARS).collect();
    if text.chars().count() > PREVIEW_CHARS {
        shown.push('…');
    }
    format!("{shown:?} ({} bytes)", payload.len())
}

/// The lower-case name of an outcome for the log.
fn outcome_name(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Succeeded => "succeeded".to_owned(),
        Outcome::Cancelled => "cancelled".to_owned(),
        Outcome::Failed(why) => format!("failed: {why}"),
    }
}

/// Resolves on SIGTERM; never, when it could not be watched.
async fn sigterm(term: &mut Option<Signal>) {
    match term {
        Some(term) => {
            term.recv().await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loss_leaves_mail_for_redelivery() {
        assert_eq!(
            disposition(None),
            (Outcome::Succeeded, Some(Outcome::Succeeded))
        );
        assert_eq!(
            disposition(Some(&Stopped::Cancelled(CancelCause::Cancel))),
            (Outcome::Cancelled, Some(Outcome::Cancelled)),
            "a signed cancel is a decision"
        );
        for cause in [
            CancelCause::Drain,
            CancelCause::LeaseExpired,
            CancelCause::Shutdown,
            CancelCause::Disconnected,
        ] {
            assert_eq!(
                disposition(Some(&Stopped::Cancelled(cause))),
                (Outcome::Cancelled, None),
                "{cause:?} loses the work, so the mail comes again"
            );
        }
        let lost = Stopped::Lost(RuntimeError::Closed("gone".into()));
        assert_eq!(disposition(Some(&lost)), (Outcome::Cancelled, None));
    }

    #[test]
    fn the_plan_mixes_both_drain_behaviours() {
        let args = DemoArgs {
            recycle_every: 0,
            step_ms: 5,
            approve_ms: 7,
            cleanup_ms: 0,
        };
        let steps = plan(&args);
        let shape: Vec<_> = steps
            .iter()
            .map(|s| (s.name, s.drain, s.takes.as_millis()))
            .collect();
        assert_eq!(
            shape,
            [
                ("fetch", DrainBehavior::Cancel, 5),
                ("approve", DrainBehavior::Wait, 7),
                ("apply", DrainBehavior::Cancel, 5),
            ]
        );
    }

    #[test]
    fn previews_are_quoted_and_bounded() {
        assert_eq!(preview(b"hi"), "\"hi\" (2 bytes)");
        let long = "x".repeat(100);
        let shown = preview(long.as_bytes());
        assert!(shown.contains('…'), "{shown}");
        assert!(shown.ends_with("(100 bytes)"), "{shown}");
        assert!(shown.len() < 80, "{shown}");
    }
}
