//! One mail item's deadline (docs/design.md §6): counted from its first
//! delivery, it first cancels the item; an item still not ended a drain
//! budget later is failed, and its child recycled, so a hung item never
//! holds a child forever. Pure: told the time.

use std::time::{Duration, Instant};

use crate::format::format_duration;

/// What a passed deadline calls for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadlineStep {
    /// Cancel the item (a signed cancel of it, origin `deadline`).
    Cancel,
    /// The cancel did not end it: fail it, and recycle its child.
    Fail,
}

/// One item's deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deadline {
    limit: Duration,
    due: Instant,
    cancelled: bool,
}

impl Deadline {
    /// A deadline of `limit`, which falls due at `due`.
    pub fn new(limit: Duration, due: Instant) -> Self {
        Self {
            limit,
            due,
            cancelled: false,
        }
    }

    /// When its next step falls due.
    pub fn due(&self) -> Instant {
        self.due
    }

    /// The step due at `now`, if one is: the cancel first, then (`grace`,
    /// the drain budget, after the cancel) the failure.
    pub fn poll(&mut self, now: Instant, grace: Duration) -> Option<DeadlineStep> {
        if now < self.due {
            return None;
        }
        if self.cancelled {
            return Some(DeadlineStep::Fail);
        }
        self.cancelled = true;
        self.due = now.checked_add(grace).unwrap_or(now);
        Some(DeadlineStep::Cancel)
    }

    /// The words of the cancel and of the failure.
    pub fn reason(&self) -> String {
        format!("deadline of {} passed", format_duration(self.limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_cancels_then_fails_a_grace_later() {
        let t0 = Instant::now();
        let limit = Duration::from_secs(2);
        let grace = Duration::from_secs(1);
        let mut d = Deadline::new(limit, t0 + limit);
        assert_eq!(d.poll(t0, grace), None);
        let at = t0 + limit + Duration::from_millis(5);
        assert_eq!(d.poll(at, grace), Some(DeadlineStep::Cancel));
        assert_eq!(d.due(), at + grace);
        assert_eq!(d.poll(at, grace), None, "the cancel is asked once");
        assert_eq!(d.poll(at + grace, grace), Some(DeadlineStep::Fail));
        assert_eq!(d.reason(), "deadline of 2s passed");
    }
}
