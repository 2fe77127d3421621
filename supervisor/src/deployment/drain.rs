//! One child's steps and drain budget (DESIGN §4), around the pure
//! [`DrainTracker`]: the steps the child reports, the budget that ticks
//! only while a cancel-behaviour step is in flight, the facts of its
//! pausing and resuming, and the signed cancels an escalation issues.

use std::time::{Duration, Instant};

use wfhost_ipc::{CancelOrigin, DrainBehavior, SignedCancel};
use wfhost_policy::drain::BudgetState;
use wfhost_policy::steps::{DrainTracker, Escalation};
use wfhost_policy::{Fact, format_duration};

use super::cancel;
use crate::status::{DrainView, StepView};

/// Most steps a child may have in flight; more is a protocol violation
/// (every size is bounded, DESIGN §9).
pub const MAX_STEPS_IN_FLIGHT: usize = 10_000;

/// Most steps listed in status; the rest are counted.
pub const LISTED_STEPS: usize = 64;

/// Longest run or step name shown in status (a frame may carry a name of
/// up to `max_frame_bytes`; 64 of those must not outgrow an answer).
pub const SHOWN_NAME_CHARS: usize = 256;

/// `name` cut to [`SHOWN_NAME_CHARS`], marked with `…` when cut.
fn shown(name: &str) -> std::borrow::Cow<'_, str> {
    match name.char_indices().nth(SHOWN_NAME_CHARS) {
        Some((at, _)) => format!("{}…", &name[..at]).into(),
        None => name.into(),
    }
}

/// The steps and budget of one child.
#[derive(Debug, Default)]
pub struct Budget {
    tracker: DrainTracker,
    /// The budget's state as last reported, to record its pausing and
    /// resuming once per change.
    reported: BudgetState,
}

impl Budget {
    /// A `StepStarted`; refused past [`MAX_STEPS_IN_FLIGHT`].
    pub fn step_started(
        &mut self,
        run: &str,
        step: &str,
        drain: DrainBehavior,
        now: Instant,
    ) -> Result<(), String> {
        if self.tracker.steps().len() >= MAX_STEPS_IN_FLIGHT {
            return Err(format!("more than {MAX_STEPS_IN_FLIGHT} steps in flight"));
        }
        self.tracker.on_step_started(run, step, drain, now);
        Ok(())
    }

    /// A `StepFinished`.
    pub fn step_finished(&mut self, run: &str, step: &str, now: Instant) {
        self.tracker.on_step_finished(run, step, now);
    }

    /// A `RunTerminal`.
    pub fn run_terminal(&mut self, run: &str, now: Instant) {
        self.tracker.on_run_terminal(run, now);
    }

    /// Whether any step is in flight.
    pub fn steps_in_flight(&self) -> bool {
        !self.tracker.steps().is_empty()
    }

    /// Whether `run` has a step in flight, or the runs that do.
    pub fn run_in_flight(&self, run: &str) -> Result<(), Vec<String>> {
        let steps = self.tracker.steps();
        if steps.runs().any(|r| r == run) {
            Ok(())
        } else {
            Err(steps.runs().map(str::to_owned).collect())
        }
    }

    /// Starts the budget of a drain.
    pub fn begin(&mut self, now: Instant, budget: Duration) {
        self.tracker.begin_drain(now, budget);
    }

    /// Ends the budget of a drain; returns what it used.
    pub fn end(&mut self, now: Instant) -> Duration {
        let used = self.tracker.used(now);
        self.tracker.end_drain(now);
        used
    }

    /// The budget paused or resumed since the last call: the fact to
    /// record, once per change.
    pub fn transition(&mut self, now: Instant) -> Option<Fact> {
        let d = self.tracker.status(now);
        let was = std::mem::replace(&mut self.reported, d.state);
        if !d.active || d.state == was {
            return None;
        }
        match d.state {
            BudgetState::Paused => Some(Fact::DrainPaused { used: d.used }),
            BudgetState::Running if was == BudgetState::Paused => {
                Some(Fact::DrainResumed { used: d.used })
            }
            _ => None,
        }
    }

    /// When the budget runs out if nothing changes.
    pub fn deadline(&self) -> Option<Instant> {
        self.tracker.deadline()
    }

    /// The budget ran out: the escalation, once.
    pub fn poll(&mut self, now: Instant) -> Option<Escalation> {
        self.tracker.poll(now)
    }

    /// The drain as status shows it, with at most [`LISTED_STEPS`] steps
    /// (so a status answer is bounded whatever the child reports).
    pub fn view(&self, now: Instant, configured: Duration) -> (DrainView, Vec<StepView>, usize) {
        let d = self.tracker.status(now);
        let view = DrainView {
            active: d.active,
            budget: self.tracker.budget().cloned(),
            configured,
            escalated: d.escalated,
        };
        let steps = self
            .tracker
            .steps()
            .iter()
            .take(LISTED_STEPS)
            .map(|(run, step, b)| StepView::new(&shown(run), &shown(step), b))
            .collect();
        (view, steps, self.tracker.steps().len())
    }
}

/// The signed cancels an escalation issues: one per run that still had
/// cancel-behaviour work when the budget ran out.
pub fn escalation_cancels(
    escalation: &Escalation,
    key: &ed25519_dalek::SigningKey,
    deployment: &str,
) -> (String, Vec<SignedCancel>) {
    let reason = format!(
        "drain budget of {} spent",
        format_duration(escalation.budget)
    );
    let signed = escalation
        .runs
        .iter()
        .map(|run| {
            cancel::sign(
                key,
                CancelOrigin::SupervisorDrain,
                deployment,
                Some(run.clone()),
                reason.clone(),
            )
        })
        .collect();
    (reason, signed)
}
