//! Property tests for the drain-timeout accumulator, checked against a
//! reference computed the simple way: walk the clock, and whenever at least
//! one cancel-behaviour step is in flight during a drain, add the elapsed
//! milliseconds.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use wfhost_policy::{BudgetMeter, BudgetState, DrainBehavior, DrainBudget};

/// Cases for the main accumulator property (reported in the crate's notes).
const TRACKER_CASES: u32 = 2_000;

#[derive(Debug, Clone)]
enum Op {
    Start {
        run: u8,
        step: u8,
        cancel: bool,
    },
    Finish {
        run: u8,
        step: u8,
    },
    Terminal {
        run: u8,
    },
    /// Move the clock; `on_time`: poll at the exact instant the reference says the budget runs out.
    Advance {
        ms: u64,
        on_time: bool,
    },
    Poll,
    BeginDrain,
    EndDrain,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..3, 0u8..3, any::<bool>()).prop_map(|(run, step, cancel)| Op::Start { run, step, cancel }),
        4 => (0u8..3, 0u8..3).prop_map(|(run, step)| Op::Finish { run, step }),
        1 => (0u8..3).prop_map(|run| Op::Terminal { run }),
        8 => (0u64..=50, any::<bool>()).prop_map(|(ms, on_time)| Op::Advance { ms, on_time }),
        2 => Just(Op::Poll),
        1 => Just(Op::BeginDrain),
        1 => Just(Op::EndDrain),
    ]
}

fn budget_ms() -> impl Strategy<Value = u64> {
    prop_oneof![1 => Just(0u64), 1 => 1u64..=20, 4 => 20u64..=1500]
}

fn run_name(run: u8) -> String {
    format!("run-{run}")
}

fn step_name(step: u8) -> String {
    format!("step-{step}")
}

/// The reference model: plain maps and counters, no state machine.
#[derive(Default)]
struct Reference {
    steps: BTreeMap<(u8, u8), bool>,
    draining: bool,
    /// Milliseconds with a cancel step in flight during the current (or last) drain.
    acc_ms: u64,
    budget_ms: u64,
    /// Whether the current (or last) drain's budget ran out.
    exhausted: bool,
    /// Escalations not yet reported: when each budget ran out and the runs to cancel then.
    pending: VecDeque<(Instant, Vec<String>)>,
    drains_exhausted: u32,
}

impl Reference {
    fn cancel_in_flight(&self) -> bool {
        self.steps.values().any(|cancel| *cancel)
    }

    fn cancel_runs(&self) -> Vec<String> {
        let runs: BTreeSet<u8> = self
            .steps
            .iter()
            .filter(|(_, cancel)| **cancel)
            .map(|((run, _), _)| *run)
            .collect();
        runs.into_iter().map(run_name).collect()
    }

    /// Whether the budget is ticking right now.
    fn ticking(&self) -> bool {
        self.draining && !self.exhausted && self.cancel_in_flight()
    }

    /// Budget runs out at `now` if it is ticking and already spent (zero budget).
    fn check_now(&mut self, now: Instant) {
        if self.ticking() && self.acc_ms >= self.budget_ms {
            self.exhaust(now);
        }
    }

    fn exhaust(&mut self, at: Instant) {
        self.exhausted = true;
        self.pending.push_back((at, self.cancel_runs()));
        self.drains_exhausted += 1;
    }

    /// When to poll: the instant the budget runs out if it keeps ticking, or
    /// the instant it ran out while that is unreported.
    fn deadline(&self, now: Instant) -> Option<Instant> {
        if let Some((at, _)) = self.pending.front() {
            return Some(*at);
        }
        self.ticking()
            .then(|| now + Duration::from_millis(self.budget_ms - self.acc_ms))
    }

    fn advance(&mut self, now: Instant, ms: u64) {
        if self.draining && self.cancel_in_flight() {
            if !self.exhausted && self.acc_ms + ms >= self.budget_ms {
                let at = now + Duration::from_millis(self.budget_ms - self.acc_ms);
                self.exhaust(at);
            }
            self.acc_ms += ms;
        }
    }
}

fn run_tracker_case(budget_ms: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    let t0 = Instant::now();
    let mut now = t0;
    let mut tracker = DrainBudget::new();
    let mut reference = Reference::default();
    let mut polled_true = 0u32;

    for op in ops {
        match op.clone() {
            Op::Start { run, step, cancel } => {
                let behavior = if cancel {
                    DrainBehavior::Cancel
                } else {
                    DrainBehavior::Wait
                };
                tracker.on_step_started(run_name(run), step_name(step), behavior, now);
                reference.steps.insert((run, step), cancel);
            }
            Op::Finish { run, step } => {
                tracker.on_step_finished(&run_name(run), &step_name(step), now);
                reference.steps.remove(&(run, step));
            }
            Op::Terminal { run } => {
                tracker.on_run_terminal(&run_name(run), now);
                reference.steps.retain(|(r, _), _| *r != run);
            }
            Op::BeginDrain => {
                let began = tracker.begin_drain(now, Duration::from_millis(budget_ms));
                prop_assert_eq!(
                    began,
                    !reference.draining,
                    "begin_drain is a no-op during a drain"
                );
                if !reference.draining {
                    reference.draining = true;
                    reference.acc_ms = 0;
                    reference.budget_ms = budget_ms;
                    reference.exhausted = false;
                }
            }
            Op::EndDrain => {
                tracker.end_drain(now);
                reference.draining = false;
            }
            Op::Poll => {
                let got = tracker.poll(now);
                let due = reference.pending.pop_front();
                match (got, due) {
                    (Some(esc), Some((at, runs))) => {
                        prop_assert_eq!(esc.at, at, "escalation instant");
                        prop_assert_eq!(esc.runs, runs, "runs to cancel");
                        prop_assert_eq!(esc.budget, Duration::from_millis(reference.budget_ms));
                        polled_true += 1;
                    }
                    (None, None) => {}
                    (got, due) => {
                        return Err(TestCaseError::fail(format!(
                            "poll at +{:?}: got {got:?}, reference {due:?}",
                            now - t0
                        )));
                    }
                }
            }
            Op::Advance { ms, on_time } => {
                // The deadline the supervisor would sleep until must be the reference's.
                prop_assert_eq!(tracker.deadline(), reference.deadline(now), "deadline");
                let end = now + Duration::from_millis(ms);
                if on_time
                    && reference.pending.is_empty()
                    && reference.ticking()
                    && let Some(deadline) = reference.deadline(now)
                    && deadline <= end
                {
                    if deadline > now {
                        let just_before = deadline - Duration::from_nanos(1);
                        prop_assert!(
                            tracker.poll(just_before).is_none(),
                            "no escalation before the budget is spent"
                        );
                    }
                    let esc = tracker.poll(deadline);
                    prop_assert_eq!(
                        esc.as_ref().map(|e| e.at),
                        Some(deadline),
                        "escalates exactly at the deadline"
                    );
                    prop_assert_eq!(esc.map(|e| e.runs), Some(reference.cancel_runs()));
                    polled_true += 1;
                    reference.advance(now, ms);
                    prop_assert!(reference.pending.pop_front().is_some());
                } else {
                    reference.advance(now, ms);
                }
                now = end;
            }
        }
        reference.check_now(now);

        // The accumulated time equals the reference, to the millisecond (frozen at the budget once spent).
        let used = tracker.used(now);
        let expected = if tracker.budget().is_some() {
            Duration::from_millis(reference.acc_ms.min(reference.budget_ms))
        } else {
            Duration::ZERO
        };
        prop_assert_eq!(used, expected, "used after {:?} at +{:?}", op, now - t0);
        prop_assert_eq!(tracker.is_draining(), reference.draining);
        let status = tracker.status(now);
        prop_assert_eq!(
            status.escalated,
            reference.exhausted && tracker.budget().is_some()
        );
        prop_assert_eq!(
            tracker.steps().cancel_in_flight(),
            reference.cancel_in_flight()
        );
        prop_assert_eq!(tracker.steps().len(), reference.steps.len());
    }

    // Collect anything still unreported: every exhausted drain escalates exactly once.
    while let Some(esc) = tracker.poll(now) {
        let want = reference.pending.pop_front();
        prop_assert_eq!(Some((esc.at, esc.runs)), want, "late escalation");
        polled_true += 1;
    }
    prop_assert!(reference.pending.is_empty());
    prop_assert!(tracker.poll(now).is_none(), "never twice");
    prop_assert_eq!(
        polled_true,
        reference.drains_exhausted,
        "one escalation per exhausted drain"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: TRACKER_CASES, ..ProptestConfig::default() })]

    /// The main accumulator property: used time equals the time a cancel
    /// step was in flight during the drain, and escalation happens once,
    /// exactly when that sum reaches the budget.
    #[test]
    fn tracker_accumulates_exactly_cancel_in_flight_time(
        budget in budget_ms(),
        prefix in prop::collection::vec(op(), 0..10),
        ops in prop::collection::vec(op(), 0..250),
    ) {
        // Make most cases drain: begin right after a random prefix of step events.
        let mut all = prefix;
        all.push(Op::BeginDrain);
        all.extend(ops);
        run_tracker_case(budget, &all)?;
    }
}

#[derive(Debug, Clone)]
enum BudgetOp {
    Start(bool),
    Pause,
    Resume,
    Stop,
    Advance(u64),
    Poll,
}

fn budget_op() -> impl Strategy<Value = BudgetOp> {
    prop_oneof![
        1 => any::<bool>().prop_map(BudgetOp::Start),
        3 => Just(BudgetOp::Pause),
        3 => Just(BudgetOp::Resume),
        1 => Just(BudgetOp::Stop),
        6 => (0u64..=40).prop_map(BudgetOp::Advance),
        2 => Just(BudgetOp::Poll),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    /// Any sequence of raw transitions, sensible or not: no panic, time only
    /// grows while running, never past the budget, escalation at most once
    /// and only from a running stretch, final states stay final.
    #[test]
    fn raw_budget_transitions_are_safe_and_exact(
        budget in 0u64..=500,
        ops in prop::collection::vec(budget_op(), 0..200),
    ) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut b = BudgetMeter::new(Duration::from_millis(budget));
        let mut polled = 0;
        let mut acc = 0u64; // reference, ms
        for op in ops {
            let before = b.state();
            match op {
                BudgetOp::Start(cancel) => b.start(now, cancel),
                BudgetOp::Pause => b.pause(now),
                BudgetOp::Resume => b.resume(now),
                BudgetOp::Stop => b.stop(now),
                BudgetOp::Poll => {
                    if b.poll(now) {
                        polled += 1;
                        prop_assert_eq!(b.state(), BudgetState::Escalated);
                    }
                }
                BudgetOp::Advance(ms) => {
                    if b.state() == BudgetState::Running {
                        acc += ms;
                    }
                    now += Duration::from_millis(ms);
                }
            }
            if before.is_final() {
                prop_assert_eq!(b.state(), before, "final states stay final");
            }
            let expected = Duration::from_millis(acc.min(budget));
            prop_assert_eq!(b.accumulated(now), expected);
            prop_assert!(b.accumulated(now) <= b.budget());
            prop_assert_eq!(b.remaining(now), b.budget() - expected);
            prop_assert_eq!(
                b.deadline().is_some(),
                b.state() == BudgetState::Running || b.escalation_pending()
            );
        }
        prop_assert!(polled <= 1);
        if b.poll(now) {
            polled += 1;
        }
        let ran_out = b.state() == BudgetState::Escalated;
        prop_assert_eq!(polled == 1, ran_out);
        if let Some(at) = b.escalated_at() {
            prop_assert!(at <= now);
        }
    }
}
