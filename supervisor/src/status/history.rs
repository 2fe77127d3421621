//! What a deployment went through, counted from the facts recorded
//! about it: restarts, recycles, violations, escalations, the last exit.

use serde::Serialize;
use wfhost_policy::fact::Fact;
use wfhost_policy::life::ExitCause;

use super::Status;

/// The last recycle, for operators asking "why was it replaced?".
#[derive(Debug, Clone, Serialize)]
pub struct LastRecycle {
    /// Who asked.
    pub origin: &'static str,
    /// Why.
    pub reason: String,
    /// Unix time in milliseconds when it completed.
    pub at_ms: u64,
    /// The replaced child's pid.
    pub old_pid: Option<u32>,
    /// The new child's pid.
    pub new_pid: u32,
}

/// Recycles by origin.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct RecycleCounts {
    /// Bounds passed.
    pub policy: u64,
    /// Operator, signal or reload.
    pub operator: u64,
    /// The child asked.
    #[serde(rename = "self")]
    pub self_: u64,
}

impl Status {
    /// Counts what a recorded fact adds to the deployment's history
    /// (restarts, recycles, violations, the last exit): status is a
    /// projection of the facts, so nothing is counted twice or missed.
    pub fn count(&mut self, fact: &Fact, at_ms: u64) {
        match fact {
            // A child that never started has no `exited` fact: its
            // restart or failure says how it ended.
            Fact::Restarting { after, .. } => {
                self.restarts += 1;
                if after.starts_with("spawn failed") {
                    self.last_exit_brief = Some("spawn failed".into());
                    self.last_exit_at_ms = Some(at_ms);
                    self.last_exit_pid = None;
                }
                self.ended_as(after);
            }
            Fact::Failed { last, .. } => self.ended_as(last),
            Fact::Exited { cause, pid, .. } => {
                if cause.is_violation() {
                    self.violations += 1;
                }
                match (cause, &self.missing_program) {
                    // Not a plain program: one whose script is missing.
                    (ExitCause::Silent(inner), Some(missing)) => {
                        self.last_exit = Some(format!(
                            "{}; it never wrote on its channel (fd 3), most likely because {missing}",
                            inner.describe()
                        ));
                        self.last_exit_brief = Some("program missing".into());
                    }
                    _ => {
                        self.last_exit = Some(cause.describe());
                        self.last_exit_brief = Some(cause.brief());
                    }
                }
                self.last_exit_at_ms = Some(at_ms);
                // A child asked to stop said nothing worth showing as
                // its last words.
                let asked = matches!(cause, ExitCause::Drained(_) | ExitCause::Stopped(_));
                self.last_exit_pid = (!asked).then_some(*pid);
                self.exit_described = Some(cause.describe());
            }
            Fact::Recycled {
                cause,
                reason,
                old_pid,
                new_pid,
                ..
            } => {
                match cause.origin() {
                    "policy" => self.recycles.policy += 1,
                    "operator" => self.recycles.operator += 1,
                    _ => self.recycles.self_ += 1,
                }
                *self
                    .recycle_reasons
                    .entry(cause.key().to_owned())
                    .or_default() += 1;
                self.last_recycle = Some(LastRecycle {
                    origin: cause.origin(),
                    reason: reason.clone(),
                    at_ms,
                    old_pid: *old_pid,
                    new_pid: *new_pid,
                });
            }
            Fact::DrainEscalated { .. } => self.escalations += 1,
            _ => {}
        }
    }

    /// The last exit as a restart or a failure words it: the `exited`
    /// fact before it said the same in its own (fuller) words, unless the
    /// child never ran or the failure says more (a loop of self-recycles).
    fn ended_as(&mut self, text: &str) {
        if self.exit_described.as_deref() != Some(text) {
            self.last_exit = Some(text.to_owned());
        }
    }
}
