//! Whether the store takes writes, for the whole supervisor: each kind of
//! write (journal records, events, one deployment's mail) notes its
//! refusals and its first success after them, so `wfhost status` and the
//! metrics can say at the top since when the store refuses, why, and what
//! waits, without an operator reading every deployment.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::Serialize;

use crate::clock::unix_ms;

/// One kind of write the store refuses, while it refuses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Refusal {
    /// What was refused: `journal records`, `events`, `mail of DEP`.
    pub what: String,
    /// The store's last word on it.
    pub error: String,
    /// Unix time in milliseconds of the first refusal of this streak.
    pub since_ms: u64,
    /// Unix time in milliseconds of the last refusal.
    pub last_ms: u64,
    /// Refused attempts in this streak.
    pub attempts: u64,
}

/// The refusals in force, by what was refused.
#[derive(Debug, Default)]
pub struct StoreHealth {
    refusing: Mutex<BTreeMap<String, Refusal>>,
}

impl StoreHealth {
    /// Notes that a write of `what` was refused; true for the first of a
    /// streak (the caller logs it loudly then).
    pub fn refused(&self, what: &str, error: &str) -> bool {
        let now = unix_ms();
        let mut refusing = self.refusing.lock().unwrap_or_else(|p| p.into_inner());
        match refusing.get_mut(what) {
            Some(r) => {
                r.error = error.to_owned();
                r.last_ms = now;
                r.attempts = r.attempts.saturating_add(1);
                false
            }
            None => {
                refusing.insert(
                    what.to_owned(),
                    Refusal {
                        what: what.to_owned(),
                        error: error.to_owned(),
                        since_ms: now,
                        last_ms: now,
                        attempts: 1,
                    },
                );
                true
            }
        }
    }

    /// Notes that a write of `what` went through; true if it had been
    /// refused (the caller says the store took it again).
    pub fn accepted(&self, what: &str) -> bool {
        self.refusing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(what)
            .is_some()
    }

    /// Every refusal in force, the oldest streak first.
    pub fn refusals(&self) -> Vec<Refusal> {
        let mut all: Vec<Refusal> = self
            .refusing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        all.sort_by_key(|r| r.since_ms);
        all
    }
}

/// What status and metrics show of the store at the top.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StoreView {
    /// No kind of write is being refused.
    pub takes_writes: bool,
    /// Unix time in milliseconds since which some write is refused.
    pub refusing_since_ms: Option<u64>,
    /// The most recent refusal's error.
    pub last_error: Option<String>,
    /// Each kind refused, the oldest streak first.
    pub refused: Vec<Refusal>,
    /// What waits for the store to take it.
    pub waiting: Waiting,
}

/// Writes that wait for the store, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Waiting {
    /// Mail acknowledgements, of every deployment.
    pub acks: usize,
    /// Signed journal records (decisions: recycles, cancels, exits).
    pub journal_records: usize,
    /// Events of the durable event log.
    pub events: usize,
}

impl StoreView {
    /// The view from the refusals in force and what waits.
    pub fn new(refused: Vec<Refusal>, waiting: Waiting) -> Self {
        let last_error = refused
            .iter()
            .max_by_key(|r| r.last_ms)
            .map(|r| r.error.clone());
        Self {
            takes_writes: refused.is_empty(),
            refusing_since_ms: refused.iter().map(|r| r.since_ms).min(),
            last_error,
            refused,
            waiting,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streak_is_noted_once_and_ends_with_the_first_success() {
        let h = StoreHealth::default();
        assert!(h.refused("events", "database or disk is full"));
        assert!(!h.refused("events", "database or disk is full (again)"));
        assert!(h.refused("mail of orders", "read-only"));
        let all = h.refusals();
        assert_eq!(all.len(), 2);
        let events = all.iter().find(|r| r.what == "events").expect("events");
        assert_eq!(events.attempts, 2);
        assert_eq!(events.error, "database or disk is full (again)");
        let view = StoreView::new(all.clone(), Waiting::default());
        assert!(!view.takes_writes);
        assert_eq!(view.refusing_since_ms, all.iter().map(|r| r.since_ms).min());
        assert!(h.accepted("events"));
        assert!(!h.accepted("events"), "said once");
        assert!(h.accepted("mail of orders"));
        let view = StoreView::new(h.refusals(), Waiting::default());
        assert!(view.takes_writes && view.refusing_since_ms.is_none() && view.last_error.is_none());
    }
}
