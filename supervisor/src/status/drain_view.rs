//! The drain as status shows it: the budget, read as of each reader's
//! own `now`, and the steps it waits for (at most [`LISTED_STEPS`], so an
//! answer is bounded whatever the child reports).

use std::time::{Duration, Instant};

use serde::Serialize;
use wfhost_ipc::DrainBehavior;
use wfhost_policy::drain::{BudgetMeter, BudgetState, DrainBudget};

use super::ms;

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

/// The drain budget as last reported by the deployment's task: a copy of
/// the budget itself, so readers get the time used as of their own `now`
/// without waking the task.
#[derive(Debug, Clone, Default)]
pub struct DrainView {
    /// A drain is under way.
    pub active: bool,
    /// The current or last drain's budget, if the child was drained.
    pub budget: Option<BudgetMeter>,
    /// The configured budget, shown while the child was never drained.
    pub configured: Duration,
    /// The budget ran out and a cancel was issued.
    pub escalated: bool,
}

impl DrainView {
    /// A child's drain budget as status shows it, with at most
    /// [`LISTED_STEPS`] of its steps and how many it has in all.
    pub fn of(
        budget: &DrainBudget,
        now: Instant,
        configured: Duration,
    ) -> (Self, Vec<StepView>, usize) {
        let d = budget.status(now);
        let view = Self {
            active: d.active,
            budget: budget.budget().cloned(),
            configured,
            escalated: d.escalated,
        };
        let steps = budget
            .steps()
            .iter()
            .take(LISTED_STEPS)
            .map(|(run, step, b)| StepView::new(&shown(run), &shown(step), b))
            .collect();
        (view, steps, budget.steps().len())
    }

    /// The budget in force, in milliseconds.
    pub fn budget_ms(&self) -> u64 {
        ms(self.budget())
    }

    /// The budget used as of `now`, in milliseconds.
    pub fn used_ms(&self, now: Instant) -> u64 {
        self.budget.as_ref().map_or(0, |b| ms(b.accumulated(now)))
    }
}

impl DrainView {
    /// The budget in force.
    pub fn budget(&self) -> Duration {
        self.budget
            .as_ref()
            .map_or(self.configured, BudgetMeter::budget)
    }

    /// Where the budget is as of `now`.
    pub fn budget_state(&self, now: Instant) -> BudgetState {
        self.budget
            .as_ref()
            .map_or(BudgetState::Idle, |b| b.state_at(now))
    }
}

/// One step in flight, as shown in status.
#[derive(Debug, Clone, Serialize)]
pub struct StepView {
    /// The run.
    pub run: String,
    /// The step.
    pub step: String,
    /// `cancel` or `wait`.
    pub drain: &'static str,
}

impl StepView {
    /// A step of `run` with its behaviour.
    pub fn new(run: &str, step: &str, drain: DrainBehavior) -> Self {
        Self {
            run: run.to_owned(),
            step: step.to_owned(),
            drain: drain.as_str(),
        }
    }
}
