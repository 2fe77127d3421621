//! The drain as status shows it: the budget, read as of each reader's
//! own `now`, and the steps it waits for.

use std::time::{Duration, Instant};

use serde::Serialize;
use wfhost_ipc::DrainBehavior;
use wfhost_policy::DrainBudget;
use wfhost_policy::drain::BudgetState;

use super::ms;

/// The drain budget as last reported by the deployment's task: a copy of
/// the budget itself, so readers get the time used as of their own `now`
/// without waking the task.
#[derive(Debug, Clone, Default)]
pub struct DrainView {
    /// A drain is under way.
    pub active: bool,
    /// The current or last drain's budget, if the child was drained.
    pub budget: Option<DrainBudget>,
    /// The configured budget, shown while the child was never drained.
    pub configured: Duration,
    /// The budget ran out and a cancel was issued.
    pub escalated: bool,
}

impl DrainView {
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
            .map_or(self.configured, DrainBudget::budget)
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
