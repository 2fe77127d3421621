//! Why a deployment is in its state and what happens next, in words
//! (`wfhost status DEP`).

use std::time::Instant;

use wfhost_policy::drain::BudgetState;
use wfhost_policy::format_duration;
use wfhost_policy::life::DrainPurpose;

use super::{State, Status, ms};
use crate::human;

impl Status {
    /// Why the deployment is in its state and what happens next, in one
    /// or two sentences (`wfhost status DEP`).
    pub fn why(&self, now: Instant) -> String {
        let id = &self.id;
        let pid = self.pid.map_or_else(|| "?".to_owned(), |p| p.to_string());
        let next = self
            .deadline
            .map(|t| human::ms(ms(t.saturating_duration_since(now))));
        let last = self
            .last_exit
            .as_deref()
            .unwrap_or("no child has ended yet");
        match self.state {
            State::Starting if self.pid.is_none() => "a child is being spawned".to_owned(),
            State::Starting => format!(
                "its child (pid {pid}) was spawned and has not sent Ready yet{}",
                next.map_or_else(String::new, |n| format!(
                    "; it is killed if not ready within {n}"
                ))
            ),
            State::Ready => match self.takes_mail {
                Some(false) => {
                    format!("its child (pid {pid}) is running; it takes no mail (a plain command)")
                }
                _ => format!("its child (pid {pid}) is ready and takes mail"),
            },
            State::Draining => self.why_draining(now, next),
            State::Stopping => match next {
                Some(n) => {
                    format!("SIGTERM was sent to its child (pid {pid}); SIGKILL follows in {n}")
                }
                None => {
                    format!("its child (pid {pid}) is being killed; waiting for it to be reaped")
                }
            },
            State::Backoff => format!(
                "its child ended ({last}); it is restarted in {}",
                next.unwrap_or_else(|| "a moment".into())
            ),
            State::Failed => format!(
                "too many restarts within the period; last: {last}; `wfhost resume {id}` starts a fresh child"
            ),
            State::Drained => format!(
                "drained by an operator: no child runs and mail waits in the inbox until `wfhost resume {id}`"
            ),
            State::Exited => "stopped with the supervisor".to_owned(),
        }
    }

    /// Why a draining deployment waits: for what purpose, on what, how
    /// much of its budget is used, and when it is stopped anyway.
    fn why_draining(&self, now: Instant, next: Option<String>) -> String {
        let purpose = match self.drain_purpose {
            Some(DrainPurpose::Recycle) => "for a recycle",
            Some(DrainPurpose::Operator) => "by an operator",
            Some(DrainPurpose::Stop) => "because the supervisor is stopping",
            None => "",
        };
        let budget = match self.drain.budget_state(now) {
            BudgetState::Escalated => "the budget ran out and a signed cancel was sent".to_owned(),
            BudgetState::Paused => format!(
                "the budget is paused at {} of {}: only wait steps are in flight",
                human::ms(self.drain.used_ms(now)),
                format_duration(self.drain.budget())
            ),
            _ => format!(
                "{} of its {} budget used",
                human::ms(self.drain.used_ms(now)),
                format_duration(self.drain.budget())
            ),
        };
        let waits = match self.steps_in_flight {
            0 => "for the child to report Drained".to_owned(),
            1 => "for 1 step in flight".to_owned(),
            n => format!("for {n} steps in flight"),
        };
        let deadline = next.map_or_else(String::new, |n| {
            format!("; stopped anyway in {n} (drain_deadline)")
        });
        format!("draining {purpose}: waiting {waits}; {budget}{deadline}")
    }
}
