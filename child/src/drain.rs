//! The drain rules, in one place for the two ledgers that follow them: the
//! runtime's work ledger (`work.rs`, any number of steps and held mail) and
//! the exec shim's one-step ledger (`wfhost-child exec`). Decisions only:
//! no tokens, no I/O, nothing of the async runtime, so the lean shim shares
//! them without linking more than it did (docs/protocol.md §4.3–4.7).
//!
//! - A drain (`Drain`, or the lease running out) reaches cancel-behaviour
//!   steps only, in flight or started later; wait-behaviour steps go on.
//!   The first drain's cause stands; a second drain changes nothing.
//! - A close (`Shutdown`, the channel gone) reaches every step, in flight
//!   or started later, whatever its drain behaviour.
//! - A verified cancel reaches every step of the run it names (every run
//!   when it names none), whatever its drain behaviour.
//! - No new mail is taken once a drain started or the channel closed.
//! - `Drained` is sent once, as soon as a drain started, no
//!   cancel-behaviour step is in flight and no mail is held.

use wfhost_ipc::{DrainBehavior, Event};

use crate::cause::CancelCause;

/// Whether a drain, and a close, have begun, and whether `Drained` went.
#[derive(Debug, Default, Clone)]
pub struct DrainState {
    /// Why this child is draining (`Drain`, or its lease ran out), once it is.
    draining: Option<CancelCause>,
    drained_sent: bool,
    /// The most severe cause the channel closed with, once it has.
    closed: Option<CancelCause>,
}

impl DrainState {
    /// The cause a step starting now begins with: new work that must not
    /// begin (a cancel-behaviour step during a drain, any step after the
    /// channel closed) starts stopped; `None` lets it run.
    pub fn start_cause(&self, drain: DrainBehavior) -> Option<CancelCause> {
        let drained = self.draining.filter(|_| reaches(drain));
        drained.max(self.closed)
    }

    /// Starts a drain for `cause`: the cause to give every step it
    /// [`reaches`], or `None` when a drain already started (for whatever
    /// cause), which changes nothing.
    pub fn drain(&mut self, cause: CancelCause) -> Option<CancelCause> {
        if self.draining.is_some() {
            return None;
        }
        self.draining = Some(cause);
        Some(cause)
    }

    /// Records that the channel closed with `cause` (a more severe cause
    /// than an earlier one wins); every step is to be stopped with it.
    pub fn close(&mut self, cause: CancelCause) {
        self.closed = self.closed.max(Some(cause));
    }

    /// Whether a drain has started.
    pub fn is_draining(&self) -> bool {
        self.draining.is_some()
    }

    /// Why the drain started (`Drain`, or the lease ran out), once it has.
    pub fn cause(&self) -> Option<CancelCause> {
        self.draining
    }

    /// Whether new mail may still be taken: not once a drain has started
    /// or the channel closed.
    pub fn takes_mail(&self) -> bool {
        self.draining.is_none() && self.closed.is_none()
    }

    /// `Drained`, once, when it is due: a drain has started, none of the
    /// steps in flight (their drain behaviours) is cancel-behaviour, and no
    /// mail is held.
    pub fn drained(
        &mut self,
        in_flight: impl IntoIterator<Item = DrainBehavior>,
        mail_held: usize,
    ) -> Option<Event> {
        let cancel_left = in_flight.into_iter().any(reaches);
        let due = self.draining.is_some() && !cancel_left && mail_held == 0;
        if due && !self.drained_sent {
            self.drained_sent = true;
            Some(Event::Drained)
        } else {
            None
        }
    }
}

/// Whether a drain reaches a step of this drain behaviour: cancel steps are
/// stopped (and a drain waits for them), wait steps go on.
pub fn reaches(drain: DrainBehavior) -> bool {
    drain == DrainBehavior::Cancel
}

/// Whether a verified cancel naming `named` (every run when `None`) reaches
/// a step of `run`; its drain behaviour does not matter.
pub fn cancel_reaches(named: Option<&str>, run: &str) -> bool {
    named.is_none_or(|named| named == run)
}

#[cfg(test)]
mod tests {
    use super::*;

    use DrainBehavior::{Cancel, Wait};

    #[test]
    fn a_drain_reaches_cancel_steps_and_its_first_cause_stands() {
        let mut d = DrainState::default();
        assert_eq!(d.start_cause(Cancel), None);
        assert_eq!(d.cause(), None);
        assert_eq!(
            d.drain(CancelCause::LeaseExpired),
            Some(CancelCause::LeaseExpired)
        );
        assert_eq!(d.drain(CancelCause::Drain), None, "one drain");
        assert_eq!(d.cause(), Some(CancelCause::LeaseExpired));
        assert_eq!(d.start_cause(Cancel), Some(CancelCause::LeaseExpired));
        assert_eq!(d.start_cause(Wait), None, "wait steps go on");
        assert!(reaches(Cancel) && !reaches(Wait));
    }

    #[test]
    fn a_close_reaches_every_step_and_only_escalates() {
        let mut d = DrainState::default();
        d.drain(CancelCause::Drain);
        d.close(CancelCause::Disconnected);
        d.close(CancelCause::Shutdown);
        assert_eq!(d.start_cause(Wait), Some(CancelCause::Disconnected));
        assert_eq!(d.start_cause(Cancel), Some(CancelCause::Disconnected));
    }

    #[test]
    fn mail_stops_with_a_drain_or_a_close() {
        let mut d = DrainState::default();
        assert!(d.takes_mail());
        d.close(CancelCause::Shutdown);
        assert!(!d.takes_mail());
        let mut d = DrainState::default();
        d.drain(CancelCause::Drain);
        assert!(!d.takes_mail());
    }

    #[test]
    fn drained_waits_for_cancel_steps_and_held_mail_and_comes_once() {
        let mut d = DrainState::default();
        assert_eq!(d.drained([], 0), None, "no drain yet");
        d.drain(CancelCause::Drain);
        assert_eq!(d.drained([Wait, Cancel], 0), None);
        assert_eq!(d.drained([Wait], 1), None);
        assert_eq!(d.drained([Wait], 0), Some(Event::Drained));
        assert_eq!(d.drained([], 0), None, "once");
    }

    #[test]
    fn a_cancel_reaches_its_run_or_every_run() {
        assert!(cancel_reaches(Some("r1"), "r1"));
        assert!(!cancel_reaches(Some("r1"), "r2"));
        assert!(cancel_reaches(None, "r2"));
    }
}
