//! One child's drain budget (design §4): the steps it has in flight
//! ([`InFlightSteps`]) and the [`BudgetMeter`] that ticks exactly while a
//! cancel-behaviour step is in flight, one per drain.
//!
//! The driver holds one [`DrainBudget`] per live child. It tracks steps all
//! the time (a drain can begin while steps are already running) and, while
//! a drain is active, pauses and resumes its meter on every step event:
//!
//! - [`begin_drain`](DrainBudget::begin_drain) starts a fresh meter of the
//!   budget the machine decided (the life's `Action::SendDrain`). While a
//!   drain is already active it is a no-op returning `false`: a recycle that
//!   arrives during an operator drain joins it and keeps its budget. After
//!   [`end_drain`](DrainBudget::end_drain) a new drain starts afresh.
//! - The budget is one per child, not per run: it ticks while *any* run has a
//!   cancel-behaviour step in flight, which is what `status` reports as
//!   `drain.used_ms`.
//! - [`poll`](DrainBudget::poll) returns the [`Escalation`] exactly once per
//!   drain, naming the runs that had a cancel-behaviour step in flight at the
//!   instant the budget ran out (sorted, no duplicates). Runs with only
//!   wait-behaviour steps in flight are not named: a person's approval is not
//!   cancelled by a budget it never spent. The driver hands it to the
//!   machine (`Input::BudgetSpent`), which has one signed
//!   cancel per named run sent (`Action::Escalate`).
//! - An escalation is never lost: if the budget ran out before an event the
//!   supervisor processed late (or before `end_drain`, or before the next
//!   `begin_drain`), `poll` still reports it, with the exact instant in
//!   [`Escalation::at`]; while one is waiting, `deadline` is that (past)
//!   instant, so a timer armed on it fires at once.
//! - [`deadline`](DrainBudget::deadline) is the next instant to call `poll`
//!   at; `None` while nothing ticks.
//! - [`transition`](DrainBudget::transition) says when the meter paused or
//!   resumed during a drain, once per change.
//!
//! The intended use, per child event loop iteration:
//!
//! ```
//! # use std::time::{Duration, Instant};
//! # use wfhost_policy::{DrainBehavior, DrainBudget};
//! let t0 = Instant::now();
//! let mut drain = DrainBudget::new();
//! drain.on_step_started("run-1", "charge", DrainBehavior::Cancel, t0);
//! drain.begin_drain(t0, Duration::from_secs(60));
//! // ... the timer set for `drain.deadline()` fires:
//! if let Some(escalation) = drain.poll(t0 + Duration::from_secs(60)) {
//!     assert_eq!(escalation.runs, vec!["run-1".to_string()]);
//! }
//! ```

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use wfhost_ipc::DrainBehavior;

use super::meter::{BudgetMeter, BudgetState};
use crate::steps::InFlightSteps;

/// Most steps a child may have in flight; more is a protocol violation
/// (every size is bounded, DESIGN §9).
pub const MAX_STEPS_IN_FLIGHT: usize = 10_000;

/// A drain budget ran out: cancel these runs (signed, journaled, sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Escalation {
    /// Runs with a cancel-behaviour step in flight when the budget ran out, sorted.
    pub runs: Vec<String>,
    /// The exact instant the budget ran out (may precede the `poll` that reported it).
    pub at: Instant,
    /// The budget that was spent.
    pub budget: Duration,
}

/// The meter stopped or started ticking while a drain is under way (the
/// `drain_paused` and `drain_resumed` facts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetTurn {
    /// Only wait steps (or none) are in flight: it stopped ticking.
    Paused {
        /// Cancel-behaviour time spent so far.
        used: Duration,
    },
    /// A cancel step is in flight again: it ticks.
    Resumed {
        /// Cancel-behaviour time spent so far.
        used: Duration,
    },
}

/// The drain figures `wfhost status` shows (`drain.active`, `budget_ms`, `used_ms`, `escalated`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainStatus {
    /// Whether a drain is under way (begun and not ended; an escalated drain is still under way).
    pub active: bool,
    /// The budget of the current or last drain; `None` if the child was never drained.
    pub budget: Option<Duration>,
    /// Cancel-behaviour time spent by the current or last drain.
    pub used: Duration,
    /// Whether the current or last drain escalated.
    pub escalated: bool,
    /// The budget's state at the instant asked about (`Idle` if never drained).
    pub state: BudgetState,
}

/// One child's drain budget: its steps in flight and the meter that ticks
/// exactly while one of cancel behaviour is, escalating once per drain.
#[derive(Debug, Clone, Default)]
pub struct DrainBudget {
    steps: InFlightSteps,
    budget: Option<BudgetMeter>,
    active: bool,
    /// Runs to cancel, captured at the instant the budget ran out.
    escalation_runs: Option<Vec<String>>,
    /// Escalations of earlier drains that ended before anyone polled, oldest first.
    unreported: VecDeque<Escalation>,
    /// The meter's state as last reported by [`Self::transition`].
    reported: BudgetState,
}

impl DrainBudget {
    /// A tracker with no steps and no drain.
    pub fn new() -> Self {
        Self::default()
    }

    /// The steps in flight.
    pub fn steps(&self) -> &InFlightSteps {
        &self.steps
    }

    /// The current or last drain's meter, if the child was ever drained.
    pub fn budget(&self) -> Option<&BudgetMeter> {
        self.budget.as_ref()
    }

    /// Whether a drain is under way (begun, not ended; escalated still counts).
    pub fn is_draining(&self) -> bool {
        self.active
    }

    /// A `StepStarted` from the child; false (not taken) past
    /// [`MAX_STEPS_IN_FLIGHT`], which is a protocol violation.
    pub fn on_step_started(
        &mut self,
        run: impl Into<String>,
        step: impl Into<String>,
        behavior: DrainBehavior,
        now: Instant,
    ) -> bool {
        if self.steps.len() >= MAX_STEPS_IN_FLIGHT {
            return false;
        }
        self.capture(now);
        self.steps.started(run, step, behavior);
        self.sync(now);
        true
    }

    /// A `StepFinished` from the child.
    pub fn on_step_finished(&mut self, run: &str, step: &str, now: Instant) {
        self.capture(now);
        self.steps.finished(run, step);
        self.sync(now);
    }

    /// A `RunTerminal` from the child: all of the run's steps are over.
    pub fn on_run_terminal(&mut self, run: &str, now: Instant) {
        self.capture(now);
        self.steps.run_terminal(run);
        self.sync(now);
    }

    /// Starts a drain with a fresh `budget`; returns `false` (no-op) if one is already under way.
    ///
    /// An escalation of the previous drain that was never polled is kept and
    /// reported first.
    pub fn begin_drain(&mut self, now: Instant, budget: Duration) -> bool {
        if self.active {
            return false;
        }
        self.capture(now);
        if let Some(escalation) = self.take_escalation(now) {
            self.unreported.push_back(escalation);
        }
        let mut fresh = BudgetMeter::new(budget);
        fresh.start(now, self.steps.cancel_in_flight());
        self.budget = Some(fresh);
        self.escalation_runs = None;
        self.active = true;
        true
    }

    /// Ends the drain (`Drained`, child gone, operator cancel): freezes the
    /// time spent, and returns it.
    ///
    /// An escalation that happened before `now` but was not yet polled is still reported.
    pub fn end_drain(&mut self, now: Instant) -> Duration {
        let used = self.used(now);
        self.capture(now);
        if let Some(budget) = self.budget.as_mut() {
            budget.stop(now);
        }
        self.active = false;
        used
    }

    /// The escalation, exactly once per drain, at or after the instant the budget ran out.
    ///
    /// If several are waiting (drains that ended unpolled), the oldest comes
    /// first; keep polling until `None`.
    pub fn poll(&mut self, now: Instant) -> Option<Escalation> {
        self.capture(now);
        if let Some(old) = self.unreported.pop_front() {
            return Some(old);
        }
        self.take_escalation(now)
    }

    /// The current budget's escalation, if it ran out and was not yet reported.
    fn take_escalation(&mut self, now: Instant) -> Option<Escalation> {
        let budget = self.budget.as_mut()?;
        if !budget.poll(now) {
            return None;
        }
        let at = budget.escalated_at().unwrap_or(now);
        let runs = self
            .escalation_runs
            .take()
            .unwrap_or_else(|| self.steps.cancel_runs().map(str::to_owned).collect());
        Some(Escalation {
            runs,
            at,
            budget: budget.budget(),
        })
    }

    /// When to call [`Self::poll`] next: the instant the budget runs out if nothing changes.
    ///
    /// `Some` while the budget ticks, and while an escalation awaits `poll`
    /// (then already past, so a timer armed on it fires at once).
    pub fn deadline(&self) -> Option<Instant> {
        if let Some(old) = self.unreported.front() {
            return Some(old.at);
        }
        let budget = self.budget.as_ref()?;
        if self.active || budget.escalation_pending() {
            budget.deadline()
        } else {
            None
        }
    }

    /// Cancel-behaviour time spent by the current or last drain.
    pub fn used(&self, now: Instant) -> Duration {
        self.budget
            .as_ref()
            .map_or(Duration::ZERO, |b| b.accumulated(now))
    }

    /// The drain figures for `status`.
    pub fn status(&self, now: Instant) -> DrainStatus {
        match self.budget.as_ref() {
            None => DrainStatus {
                active: false,
                budget: None,
                used: Duration::ZERO,
                escalated: false,
                state: BudgetState::Idle,
            },
            Some(b) => {
                let state = b.state_at(now);
                DrainStatus {
                    active: self.active,
                    budget: Some(b.budget()),
                    used: b.accumulated(now),
                    escalated: state == BudgetState::Escalated,
                    state,
                }
            }
        }
    }

    /// Whether any step is in flight.
    pub fn steps_in_flight(&self) -> bool {
        !self.steps.is_empty()
    }

    /// Whether `run` has a step in flight, or the runs that do.
    pub fn run_in_flight(&self, run: &str) -> Result<(), Vec<String>> {
        if self.steps.runs().any(|r| r == run) {
            Ok(())
        } else {
            Err(self.steps.runs().map(str::to_owned).collect())
        }
    }

    /// The meter paused or resumed since the last call: what to record,
    /// once per change.
    pub fn transition(&mut self, now: Instant) -> Option<BudgetTurn> {
        let d = self.status(now);
        let was = std::mem::replace(&mut self.reported, d.state);
        if !d.active || d.state == was {
            return None;
        }
        match d.state {
            BudgetState::Paused => Some(BudgetTurn::Paused { used: d.used }),
            BudgetState::Running if was == BudgetState::Paused => {
                Some(BudgetTurn::Resumed { used: d.used })
            }
            _ => None,
        }
    }

    /// Before any step changes: if the budget ran out by `now`, remember which runs to cancel.
    fn capture(&mut self, now: Instant) {
        let Some(budget) = self.budget.as_ref() else {
            return;
        };
        if self.escalation_runs.is_none()
            && budget.state() == BudgetState::Running
            && budget.state_at(now) == BudgetState::Escalated
        {
            self.escalation_runs = Some(self.steps.cancel_runs().map(str::to_owned).collect());
        }
    }

    /// After a step changes: tick exactly while a cancel-behaviour step is in flight.
    fn sync(&mut self, now: Instant) {
        if !self.active {
            return;
        }
        let cancel = self.steps.cancel_in_flight();
        if let Some(budget) = self.budget.as_mut() {
            if cancel {
                budget.resume(now);
            } else {
                budget.pause(now);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DrainBehavior::{Cancel, Wait};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn tracker_without_drain_never_ticks() {
        let t0 = Instant::now();
        let mut d = DrainBudget::new();
        d.on_step_started("r1", "a", Cancel, t0);
        assert!(!d.is_draining());
        assert_eq!(d.deadline(), None);
        assert_eq!(d.poll(t0 + ms(1_000_000)), None);
        assert_eq!(d.used(t0 + ms(1000)), Duration::ZERO);
        let st = d.status(t0);
        assert!(!st.active);
        assert_eq!(st.budget, None);
        assert_eq!(st.state, BudgetState::Idle);
    }

    #[test]
    fn drain_begun_with_cancel_step_in_flight_runs_at_once() {
        let t0 = Instant::now();
        let mut d = DrainBudget::new();
        d.on_step_started("r1", "a", Cancel, t0);
        assert!(d.begin_drain(t0 + ms(10), ms(100)));
        assert!(d.is_draining());
        assert_eq!(d.deadline(), Some(t0 + ms(110)));
        assert_eq!(d.used(t0 + ms(60)), ms(50));
    }

    #[test]
    fn wait_steps_pause_the_budget() {
        let t0 = Instant::now();
        let mut d = DrainBudget::new();
        d.on_step_started("r1", "approve", Wait, t0);
        d.begin_drain(t0, ms(100));
        assert_eq!(d.deadline(), None);
        assert_eq!(d.poll(t0 + ms(10_000)), None);
        d.on_step_started("r1", "charge", Cancel, t0 + ms(10_000));
        assert_eq!(d.deadline(), Some(t0 + ms(10_100)));
        d.on_step_finished("r1", "charge", t0 + ms(10_040));
        assert_eq!(d.deadline(), None);
        assert_eq!(d.used(t0 + ms(50_000)), ms(40));
        let st = d.status(t0 + ms(50_000));
        assert!(st.active);
        assert_eq!(st.used, ms(40));
        assert_eq!(st.state, BudgetState::Paused);
        assert!(!st.escalated);
    }

    #[test]
    fn overlapping_cancel_steps_count_once() {
        let t0 = Instant::now();
        let mut d = DrainBudget::new();
        d.begin_drain(t0, ms(1000));
        d.on_step_started("r1", "a", Cancel, t0 + ms(10));
        d.on_step_started("r2", "b", Cancel, t0 + ms(20));
        d.on_step_finished("r1", "a", t0 + ms(30));
        d.on_run_terminal("r2", t0 + ms(50));
        assert_eq!(d.used(t0 + ms(100)), ms(40));
    }

    #[test]
    fn escalation_names_runs_with_cancel_steps_only() {
        let t0 = Instant::now();
        let mut d = DrainBudget::new();
        d.on_step_started("r-wait", "approve", Wait, t0);
        d.on_step_started("r-b", "x", Cancel, t0);
        d.on_step_started("r-a", "y", Cancel, t0);
        d.on_step_started("r-a", "z", Wait, t0);
        d.begin_drain(t0, ms(100));
        assert_eq!(d.poll(t0 + ms(99)), None);
        let e = d.poll(t0 + ms(100));
        assert_eq!(
            e,
            Some(Escalation {
                runs: vec!["r-a".to_string(), "r-b".to_string()],
                at: t0 + ms(100),
                budget: ms(100),
            })
        );
        assert_eq!(d.poll(t0 + ms(200)), None, "once per drain");
        assert!(d.is_draining(), "escalated drains are still under way");
        assert_eq!(d.deadline(), None);
        let st = d.status(t0 + ms(200));
        assert!(st.escalated);
        assert_eq!(st.used, ms(100));
    }

    #[test]
    fn escalation_runs_are_captured_at_the_instant_the_budget_ran_out() {
        let t0 = Instant::now();
        let mut d = DrainBudget::new();
        d.begin_drain(t0, ms(100));
        d.on_step_started("r1", "a", Cancel, t0);
        // The budget ran out at 100; the step finished at 150 before anyone polled.
        d.on_step_finished("r1", "a", t0 + ms(150));
        d.on_step_started("r2", "b", Cancel, t0 + ms(160));
        assert_eq!(d.deadline(), Some(t0 + ms(100)), "poll is overdue");
        let e = d.poll(t0 + ms(170));
        assert_eq!(
            e.map(|e| (e.runs, e.at)),
            Some((vec!["r1".to_string()], t0 + ms(100)))
        );
    }

    #[test]
    fn end_drain_before_budget_runs_out_never_escalates() {
        let t0 = Instant::now();
        let mut d = DrainBudget::new();
        d.on_step_started("r1", "a", Cancel, t0);
        d.begin_drain(t0, ms(100));
        d.end_drain(t0 + ms(99));
        assert!(!d.is_draining());
        assert_eq!(d.deadline(), None);
        assert_eq!(d.poll(t0 + ms(1000)), None);
        let st = d.status(t0 + ms(1000));
        assert!(!st.active);
        assert_eq!(st.used, ms(99));
        assert_eq!(st.budget, Some(ms(100)));
        assert_eq!(st.state, BudgetState::Stopped);
        // Steps after the drain ended do not tick anything.
        d.on_step_started("r2", "b", Cancel, t0 + ms(1000));
        assert_eq!(d.used(t0 + ms(5000)), ms(99));
    }

    #[test]
    fn end_drain_after_unpolled_exhaustion_still_reports_it() {
        let t0 = Instant::now();
        let mut d = DrainBudget::new();
        d.on_step_started("r1", "a", Cancel, t0);
        d.begin_drain(t0, ms(100));
        d.end_drain(t0 + ms(120));
        assert_eq!(d.deadline(), Some(t0 + ms(100)), "poll is overdue");
        let e = d.poll(t0 + ms(120));
        assert_eq!(e.map(|e| e.at), Some(t0 + ms(100)));
        assert_eq!(d.poll(t0 + ms(130)), None);
        assert_eq!(d.deadline(), None);
    }

    #[test]
    fn an_unpolled_escalation_survives_the_next_drain() {
        let t0 = Instant::now();
        let mut d = DrainBudget::new();
        d.on_step_started("r1", "a", Cancel, t0);
        d.begin_drain(t0, ms(100));
        d.end_drain(t0 + ms(150));
        d.on_step_finished("r1", "a", t0 + ms(160));
        d.on_step_started("r2", "b", Cancel, t0 + ms(170));
        assert!(d.begin_drain(t0 + ms(200), ms(10)));
        assert_eq!(
            d.deadline(),
            Some(t0 + ms(100)),
            "the old escalation is overdue"
        );
        let first = d.poll(t0 + ms(300));
        assert_eq!(
            first.map(|e| (e.runs, e.at)),
            Some((vec!["r1".to_string()], t0 + ms(100)))
        );
        let second = d.poll(t0 + ms(300));
        assert_eq!(
            second.map(|e| (e.runs, e.at)),
            Some((vec!["r2".to_string()], t0 + ms(210)))
        );
        assert_eq!(d.poll(t0 + ms(300)), None);
    }

    #[test]
    fn begin_drain_during_a_drain_is_absorbed() {
        let t0 = Instant::now();
        let mut d = DrainBudget::new();
        d.on_step_started("r1", "a", Cancel, t0);
        assert!(d.begin_drain(t0, ms(100)));
        assert!(!d.begin_drain(t0 + ms(50), ms(10_000)));
        assert_eq!(d.budget().map(BudgetMeter::budget), Some(ms(100)));
        assert_eq!(d.deadline(), Some(t0 + ms(100)));
    }

    #[test]
    fn a_new_drain_after_the_last_one_ended_starts_afresh() {
        let t0 = Instant::now();
        let mut d = DrainBudget::new();
        d.on_step_started("r1", "a", Cancel, t0);
        d.begin_drain(t0, ms(100));
        assert!(d.poll(t0 + ms(100)).is_some());
        d.end_drain(t0 + ms(200));
        assert!(d.begin_drain(t0 + ms(300), ms(50)));
        assert_eq!(d.used(t0 + ms(310)), ms(10));
        assert_eq!(d.deadline(), Some(t0 + ms(350)));
        assert!(d.poll(t0 + ms(350)).is_some(), "each drain escalates once");
    }

    #[test]
    fn zero_budget_escalates_when_cancel_work_appears() {
        let t0 = Instant::now();
        let mut d = DrainBudget::new();
        d.begin_drain(t0, Duration::ZERO);
        assert_eq!(d.poll(t0 + ms(50)), None);
        d.on_step_started("r1", "a", Cancel, t0 + ms(50));
        let e = d.poll(t0 + ms(50));
        assert_eq!(
            e.map(|e| (e.runs, e.at)),
            Some((vec!["r1".to_string()], t0 + ms(50)))
        );
    }

    #[test]
    fn run_terminal_pauses_when_it_removes_the_last_cancel_step() {
        let t0 = Instant::now();
        let mut d = DrainBudget::new();
        d.on_step_started("r1", "a", Cancel, t0);
        d.on_step_started("r1", "b", Cancel, t0);
        d.on_step_started("r2", "c", Wait, t0);
        d.begin_drain(t0, ms(100));
        d.on_run_terminal("r1", t0 + ms(30));
        assert_eq!(d.deadline(), None);
        assert_eq!(d.status(t0 + ms(90)).state, BudgetState::Paused);
        assert_eq!(d.used(t0 + ms(90)), ms(30));
    }
}
