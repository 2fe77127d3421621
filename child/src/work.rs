//! The in-flight work of a child: which steps run, for which run, with which
//! drain behaviour, and how many mail items the application holds. Pure
//! bookkeeping: every change returns the events it implies (in wire order)
//! and fires tokens, so drain and cancel accounting is tested without a
//! socket.
//!
//! `Drained` means nothing is left that the drain must wait for. It is sent
//! once, as soon as all three hold: a drain has started, no cancel-behaviour
//! step is in flight, and no mail item is held by the application (handed
//! out by `MailStream::next` and neither acknowledged nor dropped). Every
//! change that can make it due (a drain starting, a step finishing, held mail
//! settled) is made under the one lock that guards this ledger, so the check
//! never races and the event follows the events that made it due. Once a
//! drain starts no more mail is handed out, so the held count only falls.
//! The rules themselves (whom a drain, a close and a cancel reach, when
//! `Drained` is due) are `drain.rs`'s, which the exec shim follows too.

use std::collections::HashMap;

use wfhost_ipc::{DrainBehavior, Event, Outcome};

use crate::cause::CancelCause;
use crate::drain::{self, DrainState};
use crate::remembered::Remembered;
use crate::token::CancelToken;

/// How many cancelled runs are remembered, so late steps of a cancelled run
/// start cancelled and a late `run_terminal` is not reported twice.
const REMEMBERED_CANCELLED_RUNS: usize = 4096;

/// Identifies one step while it runs.
pub(crate) type StepId = u64;

#[derive(Debug)]
struct ActiveStep {
    run: String,
    name: String,
    drain: DrainBehavior,
    token: CancelToken,
}

#[derive(Debug, Default)]
struct RunState {
    active: usize,
    cancelled: bool,
}

/// Steps and runs in flight, and the drain state.
#[derive(Debug, Default)]
pub(crate) struct Work {
    steps: HashMap<StepId, ActiveStep>,
    next_id: StepId,
    runs: HashMap<String, RunState>,
    cancelled_runs: Remembered<String, (), REMEMBERED_CANCELLED_RUNS>,
    mail_held: usize,
    drain: DrainState,
}

impl Work {
    /// Registers a step. Its token starts fired when the step is new work
    /// that must not begin: a cancel-behaviour step during a drain, a step of
    /// a cancelled run, any step after the channel closed.
    pub(crate) fn start(
        &mut self,
        run: &str,
        name: &str,
        drain: DrainBehavior,
    ) -> (StepId, CancelToken, Vec<Event>) {
        let token = CancelToken::new();
        if let Some(cause) = self.drain.start_cause(drain) {
            token.cancel(cause);
        }
        let run_state = self.runs.entry(run.to_owned()).or_default();
        run_state.active += 1;
        if run_state.cancelled || self.cancelled_runs.contains(run) {
            run_state.cancelled = true;
            token.cancel(CancelCause::Cancel);
        }
        self.next_id += 1;
        let id = self.next_id;
        self.steps.insert(
            id,
            ActiveStep {
                run: run.to_owned(),
                name: name.to_owned(),
                drain,
                token: token.clone(),
            },
        );
        let started = Event::StepStarted {
            run: run.to_owned(),
            step: name.to_owned(),
            drain,
        };
        (id, token, vec![started])
    }

    /// Ends a step; with `run_outcome` also ends its run. Emits
    /// `StepFinished`, then `RunTerminal` when the run is over (a cancelled
    /// run ends with its last step), then `Drained` when it is now due.
    pub(crate) fn finish(
        &mut self,
        id: StepId,
        outcome: Outcome,
        run_outcome: Option<Outcome>,
    ) -> Vec<Event> {
        let Some(step) = self.steps.remove(&id) else {
            return Vec::new();
        };
        let mut events = vec![Event::StepFinished {
            run: step.run.clone(),
            step: step.name,
            outcome,
        }];
        let mut cancelled_run_over = false;
        if let Some(run) = self.runs.get_mut(&step.run) {
            run.active = run.active.saturating_sub(1);
            cancelled_run_over = run.cancelled && run.active == 0;
        }
        if let Some(outcome) = run_outcome {
            events.extend(self.run_terminal(&step.run, outcome));
        } else if cancelled_run_over {
            events.extend(self.end_cancelled_run(&step.run));
        }
        events.extend(self.drained_if_done());
        events
    }

    /// Starts a drain (`cause` is [`CancelCause::Drain`] for the
    /// supervisor's `Drain`, [`CancelCause::LeaseExpired`] when the lease
    /// ran out): fires the tokens of cancel-behaviour steps with `cause`,
    /// stops mail being handed out, and emits `Drained` at once when no
    /// cancel-behaviour step is in flight and no mail is held. A second
    /// drain, for whatever cause, is a no-op.
    pub(crate) fn drain(&mut self, cause: CancelCause) -> Vec<Event> {
        let Some(cause) = self.drain.drain(cause) else {
            return Vec::new();
        };
        for step in self.steps.values().filter(|s| drain::reaches(s.drain)) {
            step.token.cancel(cause);
        }
        self.drained_if_done().into_iter().collect()
    }

    /// Whether a drain has started.
    pub(crate) fn is_draining(&self) -> bool {
        self.drain.is_draining()
    }

    /// Why this child drains (`Drain`, or its lease ran out), once it does.
    pub(crate) fn drain_cause(&self) -> Option<CancelCause> {
        self.drain.cause()
    }

    /// Whether mail may still be handed to the application: not once a
    /// drain has started or the channel closed.
    pub(crate) fn takes_mail(&self) -> bool {
        self.drain.takes_mail()
    }

    /// Hands one mail item to the application if [`Self::takes_mail`];
    /// `true` when it is now held (and must be settled with
    /// [`Self::settle_mail`]).
    pub(crate) fn take_mail(&mut self) -> bool {
        let taking = self.takes_mail();
        if taking {
            self.mail_held += 1;
        }
        taking
    }

    /// A held mail item was acknowledged or dropped; emits `Drained` when
    /// that was the last thing the drain waited for.
    pub(crate) fn settle_mail(&mut self) -> Option<Event> {
        self.mail_held = self.mail_held.saturating_sub(1);
        self.drained_if_done()
    }

    /// Whether `run` is a run this child has in flight (a verified cancel
    /// may only name such a run).
    pub(crate) fn knows_run(&self, run: &str) -> bool {
        self.runs.contains_key(run)
    }

    /// The cancellation cascade for a verified cancel: fires the token of
    /// every step of `run` (every run when `None`), whatever its drain
    /// behaviour; a run with no step left ends at once with `RunTerminal`.
    pub(crate) fn cancel(&mut self, run: Option<&str>) -> Vec<Event> {
        let targets: Vec<String> = match run {
            Some(run) => self
                .runs
                .contains_key(run)
                .then(|| run.to_owned())
                .into_iter()
                .collect(),
            None => {
                let mut all: Vec<String> = self.runs.keys().cloned().collect();
                all.sort();
                all
            }
        };
        let mut events = Vec::new();
        for run in targets {
            let Some(state) = self.runs.get_mut(&run) else {
                continue;
            };
            state.cancelled = true;
            let idle = state.active == 0;
            for step in self
                .steps
                .values()
                .filter(|s| drain::cancel_reaches(Some(&run), &s.run))
            {
                step.token.cancel(CancelCause::Cancel);
            }
            if idle {
                events.extend(self.end_cancelled_run(&run));
            }
        }
        events
    }

    /// A verified cancel of a mail item whose steps belong to `run`: the
    /// cascade of [`Self::cancel`] when the run is in flight; a run not
    /// started yet is marked cancelled, so its steps start cancelled and
    /// it ends `Cancelled` with its last step or the application's
    /// `run_terminal`. A run already ended cancelled changes nothing.
    pub(crate) fn cancel_item_run(&mut self, run: &str) -> Vec<Event> {
        if self.runs.contains_key(run) {
            return self.cancel(Some(run));
        }
        if !self.cancelled_runs.contains(run) {
            self.runs.insert(
                run.to_owned(),
                RunState {
                    active: 0,
                    cancelled: true,
                },
            );
        }
        Vec::new()
    }

    /// The application declares `run` over. A run already reported as
    /// cancelled is not reported again; a run being cancelled ends as
    /// cancelled whatever the application says.
    pub(crate) fn run_terminal(&mut self, run: &str, outcome: Outcome) -> Vec<Event> {
        if self.cancelled_runs.contains(run) {
            return Vec::new();
        }
        match self.runs.remove(run) {
            Some(state) if state.cancelled => {
                self.remember_cancelled(run);
                vec![Event::RunTerminal {
                    run: run.to_owned(),
                    outcome: Outcome::Cancelled,
                }]
            }
            _ => vec![Event::RunTerminal {
                run: run.to_owned(),
                outcome,
            }],
        }
    }

    /// The channel ended: fires every token with `cause` (and every later
    /// step's token too).
    pub(crate) fn close(&mut self, cause: CancelCause) {
        self.drain.close(cause);
        for step in self.steps.values() {
            step.token.cancel(cause);
        }
    }

    fn end_cancelled_run(&mut self, run: &str) -> Vec<Event> {
        self.runs.remove(run);
        self.remember_cancelled(run);
        vec![Event::RunTerminal {
            run: run.to_owned(),
            outcome: Outcome::Cancelled,
        }]
    }

    fn remember_cancelled(&mut self, run: &str) {
        self.cancelled_runs.insert(run.to_owned(), ());
    }

    /// `Drained`, once, when a drain has started, no cancel-behaviour step
    /// is in flight and no mail is held.
    fn drained_if_done(&mut self) -> Option<Event> {
        let in_flight = self.steps.values().map(|s| s.drain);
        self.drain.drained(in_flight, self.mail_held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(events: &[Event]) -> Vec<&'static str> {
        events.iter().map(Event::name).collect()
    }

    #[test]
    fn drain_cancels_cancel_steps_and_waits_for_them() {
        let mut w = Work::default();
        let (c, ct, ev) = w.start("r1", "fetch", DrainBehavior::Cancel);
        assert_eq!(names(&ev), ["StepStarted"]);
        let (a, at, _) = w.start("r1", "approve", DrainBehavior::Wait);
        assert!(
            w.drain(CancelCause::Drain).is_empty(),
            "a cancel step is still in flight"
        );
        assert_eq!(ct.cause(), Some(CancelCause::Drain));
        assert!(!at.is_cancelled(), "wait steps go on");
        assert_eq!(
            names(&w.finish(c, Outcome::Cancelled, None)),
            ["StepFinished", "Drained"]
        );
        assert_eq!(
            names(&w.finish(a, Outcome::Succeeded, None)),
            ["StepFinished"]
        );
        assert!(
            w.drain(CancelCause::Drain).is_empty(),
            "Drained is sent once"
        );
    }

    #[test]
    fn a_lease_expiry_drains_like_a_drain_with_its_own_cause() {
        let mut w = Work::default();
        let (c, ct, _) = w.start("r1", "fetch", DrainBehavior::Cancel);
        let (_, at, _) = w.start("r1", "approve", DrainBehavior::Wait);
        assert!(w.drain(CancelCause::LeaseExpired).is_empty());
        assert_eq!(ct.cause(), Some(CancelCause::LeaseExpired));
        assert!(!at.is_cancelled(), "wait steps go on");
        assert!(!w.takes_mail());
        let (_, late, _) = w.start("r2", "fetch", DrainBehavior::Cancel);
        assert_eq!(late.cause(), Some(CancelCause::LeaseExpired));
        assert!(w.drain(CancelCause::Drain).is_empty(), "one drain");
        assert_eq!(ct.cause(), Some(CancelCause::LeaseExpired));
        assert_eq!(
            names(&w.finish(c, Outcome::Cancelled, None)),
            ["StepFinished"],
            "the late cancel step is still in flight"
        );
    }

    #[test]
    fn drain_with_only_wait_steps_is_drained_at_once() {
        let mut w = Work::default();
        let (_, t, _) = w.start("r1", "approve", DrainBehavior::Wait);
        assert_eq!(names(&w.drain(CancelCause::Drain)), ["Drained"]);
        assert!(!t.is_cancelled());
    }

    #[test]
    fn new_cancel_steps_start_cancelled_during_a_drain() {
        let mut w = Work::default();
        w.drain(CancelCause::Drain);
        let (_, t, _) = w.start("r1", "fetch", DrainBehavior::Cancel);
        assert_eq!(t.cause(), Some(CancelCause::Drain));
        let (_, t, _) = w.start("r1", "approve", DrainBehavior::Wait);
        assert!(!t.is_cancelled());
    }

    #[test]
    fn cancel_cascades_over_the_run_and_ends_it_after_its_last_step() {
        let mut w = Work::default();
        let (a, at, _) = w.start("r1", "approve", DrainBehavior::Wait);
        let (b, bt, _) = w.start("r1", "fetch", DrainBehavior::Cancel);
        let (_, other, _) = w.start("r2", "fetch", DrainBehavior::Cancel);
        assert!(w.cancel(Some("r1")).is_empty());
        assert_eq!(at.cause(), Some(CancelCause::Cancel));
        assert_eq!(bt.cause(), Some(CancelCause::Cancel));
        assert!(!other.is_cancelled());
        assert_eq!(
            names(&w.finish(a, Outcome::Cancelled, None)),
            ["StepFinished"]
        );
        let ev = w.finish(b, Outcome::Cancelled, None);
        assert_eq!(names(&ev), ["StepFinished", "RunTerminal"]);
        assert_eq!(
            ev[1],
            Event::RunTerminal {
                run: "r1".into(),
                outcome: Outcome::Cancelled
            }
        );
        assert!(!w.knows_run("r1"));
        assert!(
            w.run_terminal("r1", Outcome::Succeeded).is_empty(),
            "not twice"
        );
        let (_, late, _) = w.start("r1", "late", DrainBehavior::Wait);
        assert_eq!(late.cause(), Some(CancelCause::Cancel));
    }

    #[test]
    fn an_item_cancel_cascades_a_run_in_flight_and_marks_one_not_started() {
        let mut w = Work::default();
        let (a, at, _) = w.start("r1", "approve", DrainBehavior::Wait);
        assert!(w.cancel_item_run("r1").is_empty());
        assert_eq!(at.cause(), Some(CancelCause::Cancel), "whatever its drain");
        assert_eq!(
            names(&w.finish(a, Outcome::Cancelled, None)),
            ["StepFinished", "RunTerminal"]
        );
        assert!(w.cancel_item_run("r1").is_empty(), "over already");

        assert!(w.cancel_item_run("later").is_empty());
        let (b, bt, _) = w.start("later", "fetch", DrainBehavior::Cancel);
        assert_eq!(bt.cause(), Some(CancelCause::Cancel), "starts cancelled");
        let ev = w.finish(b, Outcome::Cancelled, None);
        assert_eq!(names(&ev), ["StepFinished", "RunTerminal"]);

        assert!(w.cancel_item_run("stepless").is_empty());
        assert_eq!(
            w.run_terminal("stepless", Outcome::Succeeded),
            [Event::RunTerminal {
                run: "stepless".into(),
                outcome: Outcome::Cancelled
            }]
        );
    }

    #[test]
    fn cancel_of_an_idle_run_ends_it_at_once_and_none_means_all() {
        let mut w = Work::default();
        let (a, _, _) = w.start("r1", "s", DrainBehavior::Wait);
        w.finish(a, Outcome::Succeeded, None);
        let (_, t2, _) = w.start("r2", "s", DrainBehavior::Wait);
        let ev = w.cancel(None);
        assert_eq!(
            names(&ev),
            ["RunTerminal"],
            "r1 idle, r2 waits for its step"
        );
        assert_eq!(t2.cause(), Some(CancelCause::Cancel));
        assert!(w.cancel(Some("nope")).is_empty());
    }

    #[test]
    fn finish_with_run_outcome_orders_step_run_drained() {
        let mut w = Work::default();
        let (c, _, _) = w.start("r1", "command", DrainBehavior::Cancel);
        w.drain(CancelCause::Drain);
        let ev = w.finish(c, Outcome::Cancelled, Some(Outcome::Cancelled));
        assert_eq!(names(&ev), ["StepFinished", "RunTerminal", "Drained"]);
    }

    #[test]
    fn held_mail_delays_drained_until_it_is_settled() {
        let mut w = Work::default();
        assert!(w.take_mail());
        let (a, _, _) = w.start("mail-1", "approve", DrainBehavior::Wait);
        assert!(
            w.drain(CancelCause::Drain).is_empty(),
            "the application holds mail"
        );
        assert!(!w.take_mail(), "no mail is handed out during a drain");
        assert_eq!(
            names(&w.finish(a, Outcome::Succeeded, Some(Outcome::Cancelled))),
            ["StepFinished", "RunTerminal"],
            "the run is over but its mail is not settled yet"
        );
        assert_eq!(w.settle_mail(), Some(Event::Drained));
        assert_eq!(w.settle_mail(), None, "Drained is sent once");
    }

    #[test]
    fn drained_waits_for_both_cancel_steps_and_held_mail_in_either_order() {
        // The step finishes first, then the mail is acknowledged.
        let mut w = Work::default();
        assert!(w.take_mail());
        let (c, _, _) = w.start("mail-1", "fetch", DrainBehavior::Cancel);
        assert!(w.drain(CancelCause::Drain).is_empty());
        assert_eq!(
            names(&w.finish(c, Outcome::Cancelled, None)),
            ["StepFinished"]
        );
        assert_eq!(w.settle_mail(), Some(Event::Drained));

        // The mail is dropped first, then the step finishes.
        let mut w = Work::default();
        assert!(w.take_mail());
        let (c, _, _) = w.start("mail-1", "fetch", DrainBehavior::Cancel);
        assert!(w.drain(CancelCause::Drain).is_empty());
        assert_eq!(w.settle_mail(), None, "a cancel step is still in flight");
        assert_eq!(
            names(&w.finish(c, Outcome::Cancelled, None)),
            ["StepFinished", "Drained"]
        );
    }

    #[test]
    fn mail_settled_before_a_drain_does_not_hold_it_up() {
        let mut w = Work::default();
        assert!(w.take_mail());
        assert!(w.take_mail());
        assert_eq!(w.settle_mail(), None, "no drain yet");
        assert_eq!(w.settle_mail(), None, "no drain yet");
        assert_eq!(names(&w.drain(CancelCause::Drain)), ["Drained"]);
    }

    #[test]
    fn no_mail_is_handed_out_after_close() {
        let mut w = Work::default();
        assert!(w.takes_mail());
        w.close(CancelCause::Shutdown);
        assert!(!w.takes_mail());
        assert!(!w.take_mail());
    }

    #[test]
    fn close_fires_every_token_and_later_ones() {
        let mut w = Work::default();
        let (_, t, _) = w.start("r1", "approve", DrainBehavior::Wait);
        w.close(CancelCause::Shutdown);
        assert_eq!(t.cause(), Some(CancelCause::Shutdown));
        w.close(CancelCause::Disconnected);
        assert_eq!(t.cause(), Some(CancelCause::Disconnected));
        let (_, late, _) = w.start("r2", "s", DrainBehavior::Wait);
        assert_eq!(late.cause(), Some(CancelCause::Disconnected));
    }

    #[test]
    fn remembers_a_bounded_number_of_cancelled_runs() {
        let mut w = Work::default();
        for i in 0..REMEMBERED_CANCELLED_RUNS + 10 {
            let run = format!("r{i}");
            let (id, _, _) = w.start(&run, "s", DrainBehavior::Wait);
            w.finish(id, Outcome::Succeeded, None);
            w.cancel(Some(&run));
        }
        assert_eq!(w.cancelled_runs.len(), REMEMBERED_CANCELLED_RUNS);
    }
}
