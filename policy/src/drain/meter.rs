//! The meter of a drain budget (design §4): how much of a drain's budget
//! has been spent on cancel-behaviour work.
//!
//! A [`BudgetMeter`] is a state machine driven by events and a `now` passed
//! in by the caller:
//!
//! ```text
//!            start(cancel in flight)        pause
//!   Idle ───────────────────────────▶ Running ⇄ Paused
//!     │      start(none in flight)      resume   │
//!     └────────────────────────────────▶─────────┘
//!   Running | Paused | Idle ──stop──▶ Stopped        (frozen, final)
//!   Running ──accumulated reaches budget──▶ Escalated (frozen at budget, final)
//! ```
//!
//! Settings and edge cases:
//!
//! - **budget** (`drain_timeout`, default [`DEFAULT_DRAIN_TIMEOUT`] = 60 s):
//!   the cancel-behaviour time a drain may use before it escalates. A zero
//!   budget escalates the instant any cancel-behaviour step is in flight
//!   (never while only wait-behaviour steps run). `Duration::MAX` never
//!   escalates in practice; its deadline saturates instead of overflowing.
//! - **Ticking**: time accrues only while `Running`, i.e. while at least one
//!   cancel-behaviour step is in flight. The caller reports that with
//!   [`start`](BudgetMeter::start), [`pause`](BudgetMeter::pause) and
//!   [`resume`](BudgetMeter::resume); [`super::DrainBudget`] does it for you.
//! - **Escalation is a fact of time, latched once.** The budget runs out at
//!   the exact instant the accumulated time reaches it, whether or not anyone
//!   is looking. Every call that takes `now` first settles that: if the budget
//!   ran out before `now`, the state becomes `Escalated` (frozen at exactly
//!   the budget, [`escalated_at`](BudgetMeter::escalated_at) = that instant)
//!   and a later `pause`/`stop` cannot undo it. [`poll`](BudgetMeter::poll)
//!   reports it: `true` exactly once, ever. So an event processed just after
//!   the deadline, before the timer fired, never hides an escalation.
//! - **Deadline**: [`deadline`](BudgetMeter::deadline) is the supervisor's
//!   next wake-up: while `Running`, the instant the budget runs out if nothing
//!   changes; while an escalation awaits `poll`, the (past) instant it ran
//!   out, so a timer armed on it fires at once; otherwise `None`.
//! - **Nonsense is a no-op**: pause while idle, resume after stop, start twice,
//!   stop twice: nothing happens, nothing panics.
//! - **Clock steps backwards**: an earlier `now` than the last event counts as
//!   no time passed.
//! - **State staleness**: [`state`](BudgetMeter::state) is the state as of the
//!   last call that took `now`; [`state_at`](BudgetMeter::state_at) settles it
//!   for a given instant without changing anything.

use std::time::{Duration, Instant};

use crate::clock::saturating_add;

/// The default drain-timeout budget (`drain_timeout`), 60 s.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a drain budget is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BudgetState {
    /// Not started: no drain yet.
    #[default]
    Idle,
    /// Ticking: at least one cancel-behaviour step is in flight.
    Running,
    /// Not ticking: only wait-behaviour steps (or none) are in flight.
    Paused,
    /// The drain is over (run terminal or drained); the time is frozen.
    Stopped,
    /// The budget ran out; the time is frozen at the budget. Final.
    Escalated,
}

impl BudgetState {
    /// The lower-case name used in logs and status.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Stopped => "stopped",
            Self::Escalated => "escalated",
        }
    }

    /// Whether no further transition can happen (`Stopped` or `Escalated`).
    pub fn is_final(self) -> bool {
        matches!(self, Self::Stopped | Self::Escalated)
    }
}

impl std::fmt::Display for BudgetState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A drain-timeout accumulator: ticks only while cancel-behaviour work runs, escalates once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetMeter {
    budget: Duration,
    state: BudgetState,
    /// Time banked before `running_since` (or the frozen total when not running).
    banked: Duration,
    /// When the current running stretch began; `Some` iff `state == Running`.
    running_since: Option<Instant>,
    /// The exact instant the budget ran out, once it has.
    escalated_at: Option<Instant>,
    /// Whether `poll` has reported the escalation.
    reported: bool,
}

impl BudgetMeter {
    /// A fresh, idle budget of `budget` cancel-behaviour time.
    pub fn new(budget: Duration) -> Self {
        Self {
            budget,
            state: BudgetState::Idle,
            banked: Duration::ZERO,
            running_since: None,
            escalated_at: None,
            reported: false,
        }
    }

    /// The budget this accumulator was made with.
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// The state as of the last call that took `now` (see [`Self::state_at`]).
    pub fn state(&self) -> BudgetState {
        self.state
    }

    /// The state at `now`, counting a budget that ran out since the last event.
    pub fn state_at(&self, now: Instant) -> BudgetState {
        match self.exhaustion_at(now) {
            Some(_) => BudgetState::Escalated,
            None => self.state,
        }
    }

    /// Begins the drain: running if a cancel-behaviour step is in flight, else paused.
    ///
    /// A no-op unless idle.
    pub fn start(&mut self, now: Instant, cancel_in_flight: bool) {
        if self.state != BudgetState::Idle {
            return;
        }
        if cancel_in_flight {
            self.state = BudgetState::Running;
            self.running_since = Some(now);
        } else {
            self.state = BudgetState::Paused;
        }
    }

    /// Stops the ticking: the last cancel-behaviour step left. A no-op unless running.
    pub fn pause(&mut self, now: Instant) {
        self.settle(now);
        if self.state == BudgetState::Running {
            self.bank(now);
            self.state = BudgetState::Paused;
        }
    }

    /// Restarts the ticking: a cancel-behaviour step is in flight again. A no-op unless paused.
    pub fn resume(&mut self, now: Instant) {
        self.settle(now);
        if self.state == BudgetState::Paused {
            self.state = BudgetState::Running;
            self.running_since = Some(now);
        }
    }

    /// Ends the drain (run terminal, drained): freezes the time spent.
    ///
    /// A no-op once final. If the budget ran out before `now`, the result is
    /// `Escalated`, not `Stopped`: the escalation already happened.
    pub fn stop(&mut self, now: Instant) {
        self.settle(now);
        match self.state {
            BudgetState::Running => {
                self.bank(now);
                self.state = BudgetState::Stopped;
            }
            BudgetState::Idle | BudgetState::Paused => self.state = BudgetState::Stopped,
            BudgetState::Stopped | BudgetState::Escalated => {}
        }
    }

    /// Cancel-behaviour time spent so far, never more than the budget.
    pub fn accumulated(&self, now: Instant) -> Duration {
        match (self.state, self.running_since) {
            (BudgetState::Running, Some(since)) => self
                .banked
                .saturating_add(now.saturating_duration_since(since))
                .min(self.budget),
            _ => self.banked,
        }
    }

    /// Cancel-behaviour time left before escalation.
    pub fn remaining(&self, now: Instant) -> Duration {
        self.budget.saturating_sub(self.accumulated(now))
    }

    /// When to [`poll`](Self::poll) next: when the budget runs out if it keeps running.
    ///
    /// `Some` while running, and while an escalation awaits `poll` (then it
    /// is the instant the budget ran out, already past); `None` otherwise.
    pub fn deadline(&self) -> Option<Instant> {
        match (self.state, self.running_since) {
            (BudgetState::Running, Some(since)) => Some(saturating_add(
                since,
                self.budget.saturating_sub(self.banked),
            )),
            (BudgetState::Escalated, _) if !self.reported => self.escalated_at,
            _ => None,
        }
    }

    /// Whether the budget ran out and [`poll`](Self::poll) has not reported it yet.
    pub fn escalation_pending(&self) -> bool {
        self.state == BudgetState::Escalated && !self.reported
    }

    /// Reports the escalation: `true` exactly once, the first call at or after the budget ran out.
    pub fn poll(&mut self, now: Instant) -> bool {
        self.settle(now);
        if self.state == BudgetState::Escalated && !self.reported {
            self.reported = true;
            return true;
        }
        false
    }

    /// Whether the budget has run out (as of the last call that took `now`).
    pub fn is_escalated(&self) -> bool {
        self.state == BudgetState::Escalated
    }

    /// The exact instant the budget ran out, once it has (as of the last call that took `now`).
    pub fn escalated_at(&self) -> Option<Instant> {
        self.escalated_at
    }

    /// If running and the budget runs out at or before `now`, the instant it does.
    fn exhaustion_at(&self, now: Instant) -> Option<Instant> {
        if self.state != BudgetState::Running {
            return None;
        }
        let deadline = self.deadline()?;
        (deadline <= now).then_some(deadline)
    }

    /// Moves a running budget that ran out at or before `now` to `Escalated`.
    fn settle(&mut self, now: Instant) {
        if let Some(at) = self.exhaustion_at(now) {
            self.state = BudgetState::Escalated;
            self.banked = self.budget;
            self.running_since = None;
            self.escalated_at = Some(at);
        }
    }

    /// Adds the current running stretch to the bank and ends it.
    fn bank(&mut self, now: Instant) {
        self.banked = self.accumulated(now);
        self.running_since = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn new_budget_is_idle_and_empty() {
        let t0 = Instant::now();
        let b = BudgetMeter::new(ms(100));
        assert_eq!(b.state(), BudgetState::Idle);
        assert_eq!(b.budget(), ms(100));
        assert_eq!(b.accumulated(t0), Duration::ZERO);
        assert_eq!(b.remaining(t0), ms(100));
        assert_eq!(b.deadline(), None);
        assert_eq!(b.escalated_at(), None);
        assert!(!b.is_escalated());
    }

    #[test]
    fn idle_budget_does_not_tick_or_escalate() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(Duration::ZERO);
        assert!(!b.poll(t0 + ms(1000)));
        assert_eq!(b.state(), BudgetState::Idle);
    }

    #[test]
    fn start_with_cancel_in_flight_runs() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(ms(100));
        b.start(t0, true);
        assert_eq!(b.state(), BudgetState::Running);
        assert_eq!(b.accumulated(t0 + ms(30)), ms(30));
        assert_eq!(b.remaining(t0 + ms(30)), ms(70));
        assert_eq!(b.deadline(), Some(t0 + ms(100)));
    }

    #[test]
    fn start_without_cancel_in_flight_pauses() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(ms(100));
        b.start(t0, false);
        assert_eq!(b.state(), BudgetState::Paused);
        assert_eq!(b.accumulated(t0 + ms(500)), Duration::ZERO);
        assert_eq!(b.deadline(), None);
        assert!(!b.poll(t0 + ms(500)));
    }

    #[test]
    fn start_twice_is_a_noop() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(ms(100));
        b.start(t0, true);
        b.start(t0 + ms(50), false);
        assert_eq!(b.state(), BudgetState::Running);
        assert_eq!(b.accumulated(t0 + ms(60)), ms(60));
    }

    #[test]
    fn pause_and_resume_accumulate_only_running_time() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(ms(100));
        b.start(t0, true);
        b.pause(t0 + ms(20));
        assert_eq!(b.state(), BudgetState::Paused);
        assert_eq!(b.accumulated(t0 + ms(1000)), ms(20));
        b.resume(t0 + ms(1000));
        assert_eq!(b.state(), BudgetState::Running);
        assert_eq!(b.accumulated(t0 + ms(1010)), ms(30));
        assert_eq!(b.deadline(), Some(t0 + ms(1080)));
    }

    #[test]
    fn pause_while_idle_or_paused_is_a_noop() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(ms(100));
        b.pause(t0);
        assert_eq!(b.state(), BudgetState::Idle);
        b.start(t0, false);
        b.pause(t0 + ms(5));
        assert_eq!(b.state(), BudgetState::Paused);
        assert_eq!(b.accumulated(t0 + ms(5)), Duration::ZERO);
    }

    #[test]
    fn resume_while_idle_or_running_is_a_noop() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(ms(100));
        b.resume(t0);
        assert_eq!(b.state(), BudgetState::Idle);
        b.start(t0, true);
        b.resume(t0 + ms(10)); // must not restart the stretch
        assert_eq!(b.accumulated(t0 + ms(10)), ms(10));
    }

    #[test]
    fn stop_freezes_the_time() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(ms(100));
        b.start(t0, true);
        b.stop(t0 + ms(40));
        assert_eq!(b.state(), BudgetState::Stopped);
        assert_eq!(b.accumulated(t0 + ms(10_000)), ms(40));
        assert_eq!(b.deadline(), None);
        assert!(!b.poll(t0 + ms(10_000)));
    }

    #[test]
    fn resume_or_pause_after_stop_is_a_noop() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(ms(100));
        b.start(t0, false);
        b.stop(t0 + ms(1));
        b.resume(t0 + ms(2));
        assert_eq!(b.state(), BudgetState::Stopped);
        b.pause(t0 + ms(3));
        b.start(t0 + ms(4), true);
        b.stop(t0 + ms(5));
        assert_eq!(b.state(), BudgetState::Stopped);
        assert_eq!(b.accumulated(t0 + ms(1000)), Duration::ZERO);
    }

    #[test]
    fn stop_from_idle_is_final() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(ms(100));
        b.stop(t0);
        assert_eq!(b.state(), BudgetState::Stopped);
        assert!(b.state().is_final());
        b.start(t0, true);
        assert_eq!(b.state(), BudgetState::Stopped);
    }

    #[test]
    fn poll_escalates_exactly_once_at_the_deadline() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(ms(100));
        b.start(t0, true);
        assert!(!b.poll(t0 + ms(99)));
        assert_eq!(b.state(), BudgetState::Running);
        assert!(b.poll(t0 + ms(100)));
        assert_eq!(b.state(), BudgetState::Escalated);
        assert_eq!(b.escalated_at(), Some(t0 + ms(100)));
        assert!(!b.poll(t0 + ms(100)));
        assert!(!b.poll(t0 + ms(5000)));
        assert_eq!(b.accumulated(t0 + ms(5000)), ms(100));
        assert_eq!(b.remaining(t0 + ms(5000)), Duration::ZERO);
        assert_eq!(b.deadline(), None);
    }

    #[test]
    fn late_poll_reports_the_true_escalation_instant() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(ms(100));
        b.start(t0, true);
        b.pause(t0 + ms(60));
        b.resume(t0 + ms(200));
        assert!(b.poll(t0 + ms(900)));
        assert_eq!(b.escalated_at(), Some(t0 + ms(240)));
    }

    #[test]
    fn pause_after_unpolled_exhaustion_still_escalates() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(ms(100));
        b.start(t0, true);
        b.pause(t0 + ms(150)); // budget ran out at 100, nobody polled
        assert_eq!(b.state(), BudgetState::Escalated);
        assert_eq!(b.accumulated(t0 + ms(150)), ms(100));
        b.resume(t0 + ms(160));
        assert_eq!(b.state(), BudgetState::Escalated);
        assert!(b.escalation_pending());
        assert_eq!(b.deadline(), Some(t0 + ms(100)), "poll is overdue");
        assert!(b.poll(t0 + ms(170)));
        assert!(!b.escalation_pending());
        assert_eq!(b.deadline(), None);
        assert_eq!(b.escalated_at(), Some(t0 + ms(100)));
        assert!(!b.poll(t0 + ms(180)));
    }

    #[test]
    fn stop_after_unpolled_exhaustion_is_escalated_not_stopped() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(ms(100));
        b.start(t0, true);
        b.stop(t0 + ms(101));
        assert_eq!(b.state(), BudgetState::Escalated);
        assert!(b.poll(t0 + ms(101)));
    }

    #[test]
    fn stop_exactly_at_the_deadline_escalates() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(ms(100));
        b.start(t0, true);
        b.stop(t0 + ms(100));
        assert_eq!(b.state(), BudgetState::Escalated);
    }

    #[test]
    fn stop_just_before_the_deadline_does_not_escalate() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(ms(100));
        b.start(t0, true);
        b.stop(t0 + ms(99));
        assert_eq!(b.state(), BudgetState::Stopped);
        assert!(!b.poll(t0 + ms(1000)));
    }

    #[test]
    fn state_at_sees_exhaustion_without_changing_anything() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(ms(100));
        b.start(t0, true);
        assert_eq!(b.state_at(t0 + ms(99)), BudgetState::Running);
        assert_eq!(b.state_at(t0 + ms(100)), BudgetState::Escalated);
        assert_eq!(b.state(), BudgetState::Running);
    }

    #[test]
    fn zero_budget_escalates_when_cancel_work_starts() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(Duration::ZERO);
        b.start(t0, false);
        assert!(!b.poll(t0 + ms(500)));
        b.resume(t0 + ms(500));
        assert_eq!(b.deadline(), Some(t0 + ms(500)));
        assert!(b.poll(t0 + ms(500)));
        assert_eq!(b.escalated_at(), Some(t0 + ms(500)));
    }

    #[test]
    fn zero_budget_started_running_escalates_at_once() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(Duration::ZERO);
        b.start(t0, true);
        assert!(b.poll(t0));
        assert!(!b.poll(t0));
    }

    #[test]
    fn huge_budget_saturates_the_deadline() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(Duration::MAX);
        b.start(t0, true);
        let deadline = b.deadline();
        assert!(deadline.is_some_and(|d| d > t0 + Duration::from_secs(1_000_000)));
        assert!(!b.poll(t0 + Duration::from_secs(1_000_000)));
        assert_eq!(
            b.accumulated(t0 + Duration::from_secs(7)),
            Duration::from_secs(7)
        );
    }

    #[test]
    fn clock_stepping_backwards_counts_as_no_time() {
        let t0 = Instant::now();
        let mut b = BudgetMeter::new(ms(100));
        b.start(t0 + ms(50), true);
        assert_eq!(b.accumulated(t0), Duration::ZERO);
        b.pause(t0);
        assert_eq!(b.state(), BudgetState::Paused);
        assert_eq!(b.accumulated(t0 + ms(1000)), Duration::ZERO);
    }

    #[test]
    fn state_names() {
        assert_eq!(BudgetState::Idle.as_str(), "idle");
        assert_eq!(BudgetState::Running.to_string(), "running");
        assert_eq!(BudgetState::Paused.as_str(), "paused");
        assert_eq!(BudgetState::Stopped.as_str(), "stopped");
        assert_eq!(BudgetState::Escalated.as_str(), "escalated");
        assert!(!BudgetState::Paused.is_final());
        assert!(BudgetState::Escalated.is_final());
    }
}
