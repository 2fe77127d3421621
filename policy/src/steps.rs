//! The steps a child has in flight (design §4), with their drain
//! behaviour: the ledger a `DrainBudget` keeps, so it knows when to
//! tick and which runs an escalation cancels.
//!
//! The child reports `StepStarted`, `StepFinished` and `RunTerminal`;
//! steps are keyed by `(run, step)`.
//!
//! - A repeated `started` for a key already in flight replaces its behaviour
//!   (the latest report wins); it is still one step.
//! - `finished` for an unknown key, and `run_terminal` for an unknown run, are
//!   no-ops (late or duplicate reports are harmless).
//! - `run_terminal` drops every step of the run, whatever its behaviour.
//! - Iteration is in sorted `(run, step)` order, so status output is stable.
//! - There is no size cap here: `DrainBudget` refuses a step past
//!   `MAX_STEPS_IN_FLIGHT`.

use std::collections::BTreeMap;

use wfhost_ipc::DrainBehavior;

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

#[cfg(test)]
mod tests {
    use super::*;
    use DrainBehavior::{Cancel, Wait};

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
}
