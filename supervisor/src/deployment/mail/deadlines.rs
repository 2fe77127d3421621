//! The deadlines of the mail items one live child holds (docs/design.md
//! §6): each counted from its item's first delivery; past it the item is
//! cancelled, and a drain budget later failed and its child recycled
//! (`wfhost_policy::deadline` decides when).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use wfhost_policy::deadline::{Deadline, DeadlineStep};

use crate::clock::unix_ms;
use crate::store::MailItem;

/// A deadline step due for one item, with its words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// The item.
    pub id: u64,
    /// What is due.
    pub step: DeadlineStep,
    /// "deadline of D passed".
    pub reason: String,
}

/// Every deadline of one child's items.
#[derive(Debug, Default)]
pub struct Deadlines {
    by_id: HashMap<u64, Deadline>,
}

impl Deadlines {
    /// Tracks `item`, sent to the child, if it has a deadline: its own,
    /// else the deployment's `default`.
    pub fn track(&mut self, item: &MailItem, default: Option<Duration>) {
        let Some(limit) = item.deadline_ms.map(Duration::from_millis).or(default) else {
            return;
        };
        let limit_ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
        let due_ms = item.first_taken_at_ms.saturating_add(limit_ms);
        let left = Duration::from_millis(due_ms.saturating_sub(unix_ms()));
        self.by_id
            .insert(item.id, Deadline::new(limit, Instant::now() + left));
    }

    /// Item `id` ended (or left this child): its deadline with it.
    pub fn ended(&mut self, id: u64) {
        self.by_id.remove(&id);
    }

    /// The steps due at `now`; a failure also ends the deadline.
    pub fn due(&mut self, now: Instant, grace: Duration) -> Vec<Due> {
        let mut due = Vec::new();
        for (&id, d) in &mut self.by_id {
            if let Some(step) = d.poll(now, grace) {
                due.push(Due {
                    id,
                    step,
                    reason: d.reason(),
                });
            }
        }
        for d in due.iter().filter(|d| d.step == DeadlineStep::Fail) {
            self.by_id.remove(&d.id);
        }
        due.sort_by_key(|d| d.id);
        due
    }

    /// The earliest step still to come.
    pub fn wake(&self) -> Option<Instant> {
        self.by_id.values().map(Deadline::due).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: u64, deadline_ms: Option<u64>, first_taken_at_ms: u64) -> MailItem {
        MailItem {
            id,
            payload: Vec::new(),
            attempt: 1,
            deadline_ms,
            first_taken_at_ms,
        }
    }

    #[test]
    fn an_items_own_deadline_wins_and_counts_from_its_first_delivery() {
        let mut d = Deadlines::default();
        let now_ms = unix_ms();
        d.track(&item(1, None, now_ms), None);
        assert_eq!(d.wake(), None, "no deadline at all");
        // Delivered first 10 s ago with a deadline of 10 s: due now.
        d.track(
            &item(2, Some(10_000), now_ms - 10_000),
            Some(Duration::from_secs(60)),
        );
        d.track(&item(3, None, now_ms), Some(Duration::from_secs(60)));
        let now = Instant::now();
        let grace = Duration::from_secs(1);
        let due = d.due(now, grace);
        assert_eq!(
            due,
            [Due {
                id: 2,
                step: DeadlineStep::Cancel,
                reason: "deadline of 10s passed".into()
            }]
        );
        assert_eq!(d.due(now + grace, grace)[0].step, DeadlineStep::Fail);
        // Failed: gone; item 3 is due in a minute.
        assert!(d.wake().is_some_and(|w| w > now + Duration::from_secs(50)));
        d.ended(3);
        assert_eq!(d.wake(), None);
    }
}
