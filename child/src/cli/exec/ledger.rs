//! What exec owes the supervisor for its one run and one step, decided
//! without a socket: the runtime's drain rules (`wfhost_child::drain`,
//! docs/protocol.md §4.3–4.7) and its mail rules, applied to one step
//! named `command`. Every change returns the events it implies, in wire
//! order, and raises the step's cause (the token of the runtime), which
//! the shim turns into a signal for the command.

use wfhost_child::CancelCause;
use wfhost_child::drain::{self, DrainState};
use wfhost_child::remembered::Remembered;
use wfhost_ipc::{DrainBehavior, Event, Outcome};

/// The step name every exec run reports.
pub const STEP: &str = "command";

/// What mail gets in exec mode.
pub const NO_MAIL: &str = "wfhost-child exec hosts a plain command and takes no mail";

/// How many acknowledged mail ids are remembered for redeliveries (as
/// the runtime's mail ledger).
const REMEMBERED_ACKS: usize = 4096;

/// What to do with one delivered mail item.
#[derive(Debug, PartialEq, Eq)]
pub enum MailDecision {
    /// Acknowledge it `Failed` (first delivery, or a redelivery after the ack).
    Ack {
        /// Whether it was acknowledged before (logged as a redelivery).
        again: bool,
    },
    /// Not taken: a drain, a lease expiry or a shutdown stopped mail; it
    /// stays unacknowledged for the next child.
    Declined,
}

/// The run, its one step and the drain state.
#[derive(Debug)]
pub struct Ledger {
    run: String,
    drain: DrainBehavior,
    /// The step is in flight (between `StepStarted` and `StepFinished`).
    running: bool,
    /// The run is known: from its step's start to its `RunTerminal`.
    known: bool,
    cancelled: bool,
    terminal_sent: bool,
    drain_state: DrainState,
    /// The most severe reason the step was asked to stop.
    cause: Option<CancelCause>,
    acked: Remembered<u64, (), REMEMBERED_ACKS>,
}

impl Ledger {
    /// The ledger of `run`, whose step has `drain` behaviour.
    pub fn new(run: String, drain: DrainBehavior) -> Self {
        Self {
            run,
            drain,
            running: false,
            known: false,
            cancelled: false,
            terminal_sent: false,
            drain_state: DrainState::default(),
            cause: None,
            acked: Remembered::default(),
        }
    }

    /// The run's name.
    pub fn run(&self) -> &str {
        &self.run
    }

    /// The most severe reason so far for the command to stop.
    pub fn cause(&self) -> Option<CancelCause> {
        self.cause
    }

    /// Whether a drain (or a lease expiry) has started.
    pub fn is_draining(&self) -> bool {
        self.drain_state.is_draining()
    }

    /// Whether the supervisor's verified cancel named this run.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }

    /// The step starts: `StepStarted`; its cause starts raised when it is
    /// work that must not begin (a cancel step during a drain, any step
    /// after the channel closed).
    pub fn start(&mut self) -> Vec<Event> {
        self.running = true;
        self.known = true;
        if let Some(cause) = self.drain_state.start_cause(self.drain) {
            self.raise(cause);
        }
        vec![Event::StepStarted {
            run: self.run.clone(),
            step: STEP.to_owned(),
            drain: self.drain,
        }]
    }

    /// A drain starts (`Drain`, or `cause` LeaseExpired when the lease ran
    /// out): a cancel-behaviour step is asked to stop, mail stops, and
    /// `Drained` comes now if nothing is left to wait for. A second drain
    /// changes nothing.
    pub fn drain(&mut self, cause: CancelCause) -> Vec<Event> {
        let Some(cause) = self.drain_state.drain(cause) else {
            return Vec::new();
        };
        if self.running && drain::reaches(self.drain) {
            self.raise(cause);
        }
        self.drained_if_done().into_iter().collect()
    }

    /// The channel closed (`Shutdown`, end of stream, a broken frame):
    /// the step is asked to stop whatever its behaviour, and mail stops.
    pub fn close(&mut self, cause: CancelCause) {
        self.drain_state.close(cause);
        if self.running {
            self.raise(cause);
        }
    }

    /// Whether a verified cancel may name `run`: only a known run.
    pub fn knows_run(&self, run: &str) -> bool {
        self.known && run == self.run
    }

    /// The cascade of a verified cancel of `run` (every run when `None`):
    /// the step is asked to stop at once; a run with no step in flight
    /// ends now.
    pub fn cancel(&mut self, run: Option<&str>) -> Vec<Event> {
        if !self.known || !drain::cancel_reaches(run, &self.run) {
            return Vec::new();
        }
        self.cancelled = true;
        if self.running {
            self.raise(CancelCause::Cancel);
            return Vec::new();
        }
        self.terminal(Outcome::Cancelled).into_iter().collect()
    }

    /// One mail delivery: a plain command takes none, so new mail is
    /// acknowledged `Failed` at once while mail is taken, and declined
    /// after a drain or a close; a redelivery of acknowledged mail is
    /// acknowledged again, even then.
    pub fn mail(&mut self, id: u64) -> MailDecision {
        if self.acked.contains(&id) {
            return MailDecision::Ack { again: true };
        }
        if !self.drain_state.takes_mail() {
            return MailDecision::Declined;
        }
        self.acked.insert(id, ());
        MailDecision::Ack { again: false }
    }

    /// The command ended with `outcome`: `StepFinished`, `RunTerminal`
    /// (`Cancelled` for a cancelled run), then `Drained` if it is due.
    pub fn finish(&mut self, outcome: Outcome) -> Vec<Event> {
        let mut events = Vec::new();
        if self.running {
            self.running = false;
            events.push(Event::StepFinished {
                run: self.run.clone(),
                step: STEP.to_owned(),
                outcome: outcome.clone(),
            });
        }
        let run_outcome = if self.cancelled {
            Outcome::Cancelled
        } else {
            outcome
        };
        events.extend(self.terminal(run_outcome));
        events.extend(self.drained_if_done());
        events
    }

    /// `RunTerminal`, once.
    fn terminal(&mut self, outcome: Outcome) -> Option<Event> {
        self.known = false;
        if self.terminal_sent {
            return None;
        }
        self.terminal_sent = true;
        Some(Event::RunTerminal {
            run: self.run.clone(),
            outcome,
        })
    }

    /// Raises the step's cause; a milder one than the current changes nothing.
    fn raise(&mut self, cause: CancelCause) {
        self.cause = self.cause.max(Some(cause));
    }

    /// `Drained`, once, when a drain started and the step, if it is in
    /// flight, is not a cancel step (exec holds no mail).
    fn drained_if_done(&mut self) -> Option<Event> {
        let in_flight = self.running.then_some(self.drain);
        self.drain_state.drained(in_flight, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(events: &[Event]) -> Vec<&'static str> {
        events.iter().map(Event::name).collect()
    }

    #[test]
    fn a_drained_cancel_step_ends_cancelled_then_drained() {
        let mut l = Ledger::new("r".into(), DrainBehavior::Cancel);
        assert_eq!(names(&l.start()), ["StepStarted"]);
        assert!(
            l.drain(CancelCause::Drain).is_empty(),
            "the step is in flight"
        );
        assert_eq!(l.cause(), Some(CancelCause::Drain));
        assert!(l.drain(CancelCause::Drain).is_empty());
        assert_eq!(
            names(&l.finish(Outcome::Cancelled)),
            ["StepFinished", "RunTerminal", "Drained"]
        );
    }

    #[test]
    fn a_wait_step_is_drained_at_once_and_goes_on() {
        let mut l = Ledger::new("r".into(), DrainBehavior::Wait);
        l.start();
        assert_eq!(names(&l.drain(CancelCause::LeaseExpired)), ["Drained"]);
        assert_eq!(l.cause(), None, "a wait step is not stopped by a drain");
        assert_eq!(
            l.finish(Outcome::Succeeded),
            [
                Event::StepFinished {
                    run: "r".into(),
                    step: STEP.into(),
                    outcome: Outcome::Succeeded
                },
                Event::RunTerminal {
                    run: "r".into(),
                    outcome: Outcome::Succeeded
                }
            ]
        );
    }

    #[test]
    fn a_cancel_stops_any_step_and_the_run_ends_cancelled() {
        let mut l = Ledger::new("r".into(), DrainBehavior::Wait);
        assert!(!l.knows_run("r"), "not known before its step starts");
        l.start();
        assert!(l.knows_run("r") && !l.knows_run("other"));
        assert!(l.cancel(Some("other")).is_empty());
        assert_eq!(l.cause(), None);
        assert!(l.cancel(None).is_empty(), "ends with its step");
        assert_eq!(l.cause(), Some(CancelCause::Cancel));
        l.close(CancelCause::Shutdown);
        assert_eq!(l.cause(), Some(CancelCause::Cancel), "never lowered");
        let events = l.finish(Outcome::Failed("exit status 1".into()));
        assert_eq!(
            events[1],
            Event::RunTerminal {
                run: "r".into(),
                outcome: Outcome::Cancelled
            }
        );
        assert!(!l.knows_run("r"), "over once terminal");
    }

    #[test]
    fn mail_is_refused_then_declined_after_a_drain_and_acks_are_repeated() {
        let mut l = Ledger::new("r".into(), DrainBehavior::Wait);
        l.start();
        assert_eq!(l.mail(1), MailDecision::Ack { again: false });
        assert_eq!(l.mail(1), MailDecision::Ack { again: true });
        l.drain(CancelCause::Drain);
        assert_eq!(l.mail(2), MailDecision::Declined);
        assert_eq!(l.mail(1), MailDecision::Ack { again: true });
    }

    #[test]
    fn a_close_stops_the_step_and_mail() {
        let mut l = Ledger::new("r".into(), DrainBehavior::Wait);
        l.start();
        l.close(CancelCause::Disconnected);
        assert_eq!(l.cause(), Some(CancelCause::Disconnected));
        assert_eq!(l.mail(5), MailDecision::Declined);
    }
}
