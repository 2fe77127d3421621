//! A drain in progress on one live child: why it started, how long a stop
//! or recycle may wait for it, and when it is complete (DESIGN §4).
//!
//! The drain-timeout budget itself is the pure `wfhost_policy::DrainTracker`;
//! this module holds what the supervisor adds around it. Purposes rank
//! stop > operator drain > recycle: a stronger purpose takes over a weaker
//! drain already under way (keeping its budget), a weaker one is absorbed.

use std::time::{Duration, Instant};

use crate::recycle::Trigger;

/// Why a child is being drained.
#[derive(Debug)]
pub enum Purpose {
    /// The supervisor is stopping: drain, then stop; nothing is respawned.
    Stop,
    /// `wfhost drain`: drain, then stop; the deployment stays drained.
    Operator,
    /// A recycle: drain, then stop and respawn.
    Recycle(Trigger),
}

impl Purpose {
    /// The name shown in status and the journal.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Operator => "operator",
            Self::Recycle(_) => "recycle",
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Self::Stop => 3,
            Self::Operator => 2,
            Self::Recycle(_) => 1,
        }
    }
}

/// One drain of one child.
#[derive(Debug)]
pub struct Session {
    /// Why it is under way.
    pub purpose: Purpose,
    /// When the child is stopped even if not drained (stop and recycle wait
    /// at most `drain_deadline`; an operator drain waits for the work).
    pub deadline: Option<Instant>,
    /// The child reported `Drained`.
    pub drained: bool,
}

impl Session {
    /// A drain for `purpose` starting at `now`.
    pub fn new(purpose: Purpose, now: Instant, drain_deadline: Duration) -> Self {
        let deadline = deadline_for(&purpose, now, drain_deadline);
        Self {
            purpose,
            deadline,
            drained: false,
        }
    }

    /// Merges a new reason to drain into this one. Returns the purpose that
    /// lost (a recycle whose waiters must be told), if any.
    pub fn merge(
        &mut self,
        purpose: Purpose,
        now: Instant,
        drain_deadline: Duration,
    ) -> Option<Purpose> {
        match (&mut self.purpose, purpose) {
            (Purpose::Recycle(current), Purpose::Recycle(new)) => {
                current.replies.extend(new.replies);
                None
            }
            (current, new) if new.rank() > current.rank() => {
                self.deadline = match (deadline_for(&new, now, drain_deadline), self.deadline) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (new_deadline, _) => new_deadline,
                };
                Some(std::mem::replace(current, new))
            }
            (_, new) => Some(new),
        }
    }

    /// Whether the drain is over: the child said `Drained` and no step of
    /// any behaviour is left in flight (wait steps are allowed to finish).
    pub fn complete(&self, no_steps: bool) -> bool {
        self.drained && no_steps
    }
}

fn deadline_for(purpose: &Purpose, now: Instant, drain_deadline: Duration) -> Option<Instant> {
    match purpose {
        Purpose::Operator => None,
        Purpose::Stop | Purpose::Recycle(_) => now.checked_add(drain_deadline),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recycle::Origin;

    fn recycle(reason: &str) -> Purpose {
        Purpose::Recycle(Trigger::new(Origin::Operator, reason.into(), None))
    }

    #[test]
    fn stronger_purposes_take_over_and_weaker_ones_are_absorbed_or_refused() {
        let t0 = Instant::now();
        let d = Duration::from_secs(90);
        let mut s = Session::new(recycle("first"), t0, d);
        assert_eq!(s.deadline, Some(t0 + d));
        assert!(
            s.merge(recycle("second"), t0, d).is_none(),
            "a second recycle is absorbed"
        );
        let lost = s
            .merge(Purpose::Operator, t0, d)
            .expect("the recycle loses");
        assert_eq!(lost.as_str(), "recycle");
        assert_eq!(s.deadline, None, "an operator drain waits for the work");
        let lost = s
            .merge(Purpose::Stop, t0 + Duration::from_secs(1), d)
            .expect("operator loses");
        assert_eq!(lost.as_str(), "operator");
        assert_eq!(s.deadline, Some(t0 + Duration::from_secs(91)));
        let refused = s.merge(recycle("late"), t0, d).expect("refused");
        assert_eq!(refused.as_str(), "recycle");
        assert_eq!(s.purpose.as_str(), "stop");
    }

    #[test]
    fn complete_needs_drained_and_no_steps() {
        let mut s = Session::new(Purpose::Operator, Instant::now(), Duration::from_secs(1));
        assert!(!s.complete(true));
        s.drained = true;
        assert!(!s.complete(false), "a wait step is still finishing");
        assert!(s.complete(true));
    }
}
