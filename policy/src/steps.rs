//! In-flight steps and the drain tracker (design §4): which steps a child is
//! running, with their drain behaviour, and a driver that keeps a
//! [`DrainBudget`] ticking exactly while a cancel-behaviour step is in flight.
//!
//! [`InFlightSteps`] is the bookkeeping: the child reports `StepStarted`,
//! `StepFinished` and `RunTerminal`; steps are keyed by `(run, step)`.
//!
//! - A repeated `started` for a key already in flight replaces its behaviour
//!   (the latest report wins); it is still one step.
//! - `finished` for an unknown key, and `run_terminal` for an unknown run, are
//!   no-ops (late or duplicate reports are harmless).
//! - `run_terminal` drops every step of the run, whatever its behaviour.
//! - Iteration is in sorted `(run, step)` order, so status output is stable.
//! - There is no size cap here: the supervisor bounds what a child may report
//!   (it can read [`InFlightSteps::len`]) as part of the protocol limits.
//!
//! [`DrainTracker`] is what the supervisor holds per child. It tracks steps
//! all the time (a drain can begin while steps are already running) and, while
//! a drain is active, pauses and resumes its budget on every step event:
//!
//! - [`begin_drain`](DrainTracker::begin_drain) starts a fresh budget (the
//!   child's `drain_timeout`, default [`crate::DEFAULT_DRAIN_TIMEOUT`]). While
//!   a drain is already active it is a no-op returning `false`: a recycle
//!   that arrives during an operator drain joins it and keeps its budget.
//!   After [`end_drain`](DrainTracker::end_drain) a new drain starts afresh.
//! - The budget is one per child, not per run: it ticks while *any* run has a
//!   cancel-behaviour step in flight, which is what `status` reports as
//!   `drain.used_ms`.
//! - [`poll`](DrainTracker::poll) returns the [`Escalation`] exactly once per
//!   drain, naming the runs that had a cancel-behaviour step in flight at the
//!   instant the budget ran out (sorted, no duplicates). Runs with only
//!   wait-behaviour steps in flight are not named: a person's approval is not
//!   cancelled by a budget it never spent. The supervisor signs, journals and
//!   sends one `CancelRequested` per named run.
//! - An escalation is never lost: if the budget ran out before an event the
//!   supervisor processed late (or before `end_drain`, or before the next
//!   `begin_drain`), `poll` still reports it, with the exact instant in
//!   [`Escalation::at`]; while one is waiting, `deadline` is that (past)
//!   instant, so a timer armed on it fires at once.
//! - [`deadline`](DrainTracker::deadline) is the next instant to call `poll`
//!   at; `None` while nothing ticks.
//!
//! The intended use, per child event loop iteration:
//!
//! ```
//! # use std::time::{Duration, Instant};
//! # use wfhost_policy::{DrainBehavior, DrainTracker};
//! let t0 = Instant::now();
//! let mut drain = DrainTracker::new();
//! drain.on_step_started("run-1", "charge", DrainBehavior::Cancel, t0);
//! drain.begin_drain(t0, Duration::from_secs(60));
//! // ... the timer set for `drain.deadline()` fires:
//! if let Some(escalation) = drain.poll(t0 + Duration::from_secs(60)) {
//!     assert_eq!(escalation.runs, vec!["run-1".to_string()]);
//! }
//! ```

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use wfhost_ipc::DrainBehavior;

use crate::drain::{BudgetState, DrainBudget};

/// The steps a child has in flight, keyed by `(run, step)`, with their drain behaviour.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InFlightSteps {
    runs: BTreeMap<String, BTreeMap<String, DrainBehavior>>,
    cancel_steps: usize,
    total_steps: usize,
}

impl InFlightSteps {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a `StepStarted`; a step already in flight takes the new behaviour.
    pub fn started(
        &mut self,
        run: impl Into<String>,
        step: impl Into<String>,
        behavior: DrainBehavior,
    ) {
        let previous = self
            .runs
            .entry(run.into())
            .or_default()
            .insert(step.into(), behavior);
        match previous {
            Some(old) => self.uncount(old),
            None => self.total_steps = self.total_steps.saturating_add(1),
        }
        if behavior == DrainBehavior::Cancel {
            self.cancel_steps = self.cancel_steps.saturating_add(1);
        }
    }

    /// Records a `StepFinished`; returns the behaviour the step had, if it was in flight.
    pub fn finished(&mut self, run: &str, step: &str) -> Option<DrainBehavior> {
        let steps = self.runs.get_mut(run)?;
        let behavior = steps.remove(step)?;
        if steps.is_empty() {
            self.runs.remove(run);
        }
        self.uncount(behavior);
        self.total_steps = self.total_steps.saturating_sub(1);
        Some(behavior)
    }

    /// Records a `RunTerminal`: drops every step of `run`; returns how many were dropped.
    pub fn run_terminal(&mut self, run: &str) -> usize {
        let Some(steps) = self.runs.remove(run) else {
            return 0;
        };
        for behavior in steps.values() {
            self.uncount(*behavior);
        }
        self.total_steps = self.total_steps.saturating_sub(steps.len());
        steps.len()
    }

    /// Whether any cancel-behaviour step is in flight: the drain budget ticks exactly then.
    pub fn cancel_in_flight(&self) -> bool {
        self.cancel_steps > 0
    }

    /// Whether no step is in flight.
    pub fn is_empty(&self) -> bool {
        self.total_steps == 0
    }

    /// How many steps are in flight (for status and for bounding what a child may report).
    pub fn len(&self) -> usize {
        self.total_steps
    }

    /// How many cancel-behaviour steps are in flight.
    pub fn cancel_len(&self) -> usize {
        self.cancel_steps
    }

    /// The behaviour of one in-flight step, if it is in flight.
    pub fn behavior(&self, run: &str, step: &str) -> Option<DrainBehavior> {
        self.runs.get(run)?.get(step).copied()
    }

    /// Every in-flight step as `(run, step, behaviour)`, sorted, for status.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, DrainBehavior)> + '_ {
        self.runs.iter().flat_map(|(run, steps)| {
            steps
                .iter()
                .map(move |(step, behavior)| (run.as_str(), step.as_str(), *behavior))
        })
    }

    /// The runs with at least one step in flight, sorted.
    pub fn runs(&self) -> impl Iterator<Item = &str> + '_ {
        self.runs.keys().map(String::as_str)
    }

    /// The runs with at least one cancel-behaviour step in flight, sorted: what an escalation cancels.
    pub fn cancel_runs(&self) -> impl Iterator<Item = &str> + '_ {
        self.runs
            .iter()
            .filter(|(_, steps)| steps.values().any(|b| *b == DrainBehavior::Cancel))
            .map(|(run, _)| run.as_str())
    }

    /// Forgets every step (the child is gone).
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    fn uncount(&mut self, behavior: DrainBehavior) {
        if behavior == DrainBehavior::Cancel {
            self.cancel_steps = self.cancel_steps.saturating_sub(1);
        }
    }
}

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

/// One child's steps plus its drain budget, kept in step automatically.
#[derive(Debug, Clone, Default)]
pub struct DrainTracker {
    steps: InFlightSteps,
    budget: Option<DrainBudget>,
    active: bool,
    /// Runs to cancel, captured at the instant the budget ran out.
    escalation_runs: Option<Vec<String>>,
    /// Escalations of earlier drains that ended before anyone polled, oldest first.
    unreported: VecDeque<Escalation>,
}

impl DrainTracker {
    /// A tracker with no steps and no drain.
    pub fn new() -> Self {
        Self::default()
    }

    /// The steps in flight.
    pub fn steps(&self) -> &InFlightSteps {
        &self.steps
    }

    /// The current or last drain's budget, if the child was ever drained.
    pub fn budget(&self) -> Option<&DrainBudget> {
        self.budget.as_ref()
    }

    /// Whether a drain is under way (begun, not ended; escalated still counts).
    pub fn is_draining(&self) -> bool {
        self.active
    }

    /// A `StepStarted` from the child.
    pub fn on_step_started(
        &mut self,
        run: impl Into<String>,
        step: impl Into<String>,
        behavior: DrainBehavior,
        now: Instant,
    ) {
        self.capture(now);
        self.steps.started(run, step, behavior);
        self.sync(now);
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
        let mut fresh = DrainBudget::new(budget);
        fresh.start(now, self.steps.cancel_in_flight());
        self.budget = Some(fresh);
        self.escalation_runs = None;
        self.active = true;
        true
    }

    /// Ends the drain (`Drained`, child gone, operator cancel): freezes the time spent.
    ///
    /// An escalation that happened before `now` but was not yet polled is still reported.
    pub fn end_drain(&mut self, now: Instant) {
        self.capture(now);
        if let Some(budget) = self.budget.as_mut() {
            budget.stop(now);
        }
        self.active = false;
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
    fn empty_steps() {
        let s = InFlightSteps::new();
        assert!(s.is_empty());
        assert_eq!(s.len(), 0);
        assert!(!s.cancel_in_flight());
        assert_eq!(s.iter().count(), 0);
        assert_eq!(s.runs().count(), 0);
    }

    #[test]
    fn started_and_finished_track_cancel_steps() {
        let mut s = InFlightSteps::new();
        s.started("r1", "a", Wait);
        assert!(!s.cancel_in_flight());
        s.started("r1", "b", Cancel);
        assert!(s.cancel_in_flight());
        assert_eq!(s.len(), 2);
        assert_eq!(s.cancel_len(), 1);
        assert_eq!(s.finished("r1", "b"), Some(Cancel));
        assert!(!s.cancel_in_flight());
        assert_eq!(s.behavior("r1", "a"), Some(Wait));
        assert_eq!(s.finished("r1", "a"), Some(Wait));
        assert!(s.is_empty());
        assert_eq!(s.runs().count(), 0, "an empty run is forgotten");
    }

    #[test]
    fn finished_unknown_is_a_noop() {
        let mut s = InFlightSteps::new();
        s.started("r1", "a", Cancel);
        assert_eq!(s.finished("r1", "zzz"), None);
        assert_eq!(s.finished("r9", "a"), None);
        assert_eq!(s.len(), 1);
        assert!(s.cancel_in_flight());
    }

    #[test]
    fn restarted_step_takes_the_new_behaviour() {
        let mut s = InFlightSteps::new();
        s.started("r1", "a", Cancel);
        s.started("r1", "a", Cancel);
        assert_eq!(s.len(), 1);
        assert_eq!(s.cancel_len(), 1);
        s.started("r1", "a", Wait);
        assert_eq!(s.len(), 1);
        assert!(!s.cancel_in_flight());
        s.started("r1", "a", Cancel);
        assert!(s.cancel_in_flight());
        s.finished("r1", "a");
        assert!(!s.cancel_in_flight());
        assert!(s.is_empty());
    }

    #[test]
    fn run_terminal_drops_every_step_of_that_run_only() {
        let mut s = InFlightSteps::new();
        s.started("r1", "a", Cancel);
        s.started("r1", "b", Wait);
        s.started("r2", "a", Wait);
        assert_eq!(s.run_terminal("r1"), 2);
        assert!(!s.cancel_in_flight());
        assert_eq!(s.len(), 1);
        assert_eq!(s.runs().collect::<Vec<_>>(), vec!["r2"]);
        assert_eq!(s.run_terminal("r1"), 0);
        assert_eq!(s.run_terminal("nope"), 0);
    }

    #[test]
    fn iter_is_sorted_and_complete() {
        let mut s = InFlightSteps::new();
        s.started("r2", "x", Wait);
        s.started("r1", "b", Cancel);
        s.started(String::from("r1"), String::from("a"), Wait);
        let all: Vec<_> = s.iter().collect();
        assert_eq!(
            all,
            vec![("r1", "a", Wait), ("r1", "b", Cancel), ("r2", "x", Wait)]
        );
        assert_eq!(s.runs().collect::<Vec<_>>(), vec!["r1", "r2"]);
        assert_eq!(s.cancel_runs().collect::<Vec<_>>(), vec!["r1"]);
        s.clear();
        assert!(s.is_empty());
        assert!(!s.cancel_in_flight());
    }

    #[test]
    fn tracker_without_drain_never_ticks() {
        let t0 = Instant::now();
        let mut d = DrainTracker::new();
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
        let mut d = DrainTracker::new();
        d.on_step_started("r1", "a", Cancel, t0);
        assert!(d.begin_drain(t0 + ms(10), ms(100)));
        assert!(d.is_draining());
        assert_eq!(d.deadline(), Some(t0 + ms(110)));
        assert_eq!(d.used(t0 + ms(60)), ms(50));
    }

    #[test]
    fn wait_steps_pause_the_budget() {
        let t0 = Instant::now();
        let mut d = DrainTracker::new();
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
        let mut d = DrainTracker::new();
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
        let mut d = DrainTracker::new();
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
        let mut d = DrainTracker::new();
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
        let mut d = DrainTracker::new();
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
        let mut d = DrainTracker::new();
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
        let mut d = DrainTracker::new();
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
        let mut d = DrainTracker::new();
        d.on_step_started("r1", "a", Cancel, t0);
        assert!(d.begin_drain(t0, ms(100)));
        assert!(!d.begin_drain(t0 + ms(50), ms(10_000)));
        assert_eq!(d.budget().map(DrainBudget::budget), Some(ms(100)));
        assert_eq!(d.deadline(), Some(t0 + ms(100)));
    }

    #[test]
    fn a_new_drain_after_the_last_one_ended_starts_afresh() {
        let t0 = Instant::now();
        let mut d = DrainTracker::new();
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
        let mut d = DrainTracker::new();
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
        let mut d = DrainTracker::new();
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
