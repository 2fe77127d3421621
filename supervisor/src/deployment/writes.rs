//! The mail writes a deployment owes the store, in order, retried until
//! they land: acknowledgements first (so nothing acknowledged is run
//! again), then the replay of a gone child's unacknowledged mail, and only
//! then new deliveries (so the inbox stays in order). A store that refuses
//! (a full disk, a read-only filesystem, a lock) delays them, visibly in
//! status, and never drops one.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use wfhost_ipc::Outcome;

/// First retry delay after a refused write.
const RETRY_INITIAL: Duration = Duration::from_millis(100);
/// Longest retry delay.
const RETRY_MAX: Duration = Duration::from_secs(2);

/// One acknowledgement owed to the store.
#[derive(Debug, Clone)]
pub struct Ack {
    /// The child that acknowledged (its window frees once the ack lands).
    pub pid: u32,
    /// The mail.
    pub id: u64,
    /// How processing ended.
    pub outcome: Outcome,
}

/// What is owed, and when to try again.
#[derive(Debug, Default)]
pub struct Writes {
    acks: VecDeque<Ack>,
    replay: bool,
    retry_at: Option<Instant>,
    failures: u32,
    /// Why the store refused the last write, while it refuses.
    pub error: Option<String>,
}

impl Writes {
    /// Owes an acknowledgement.
    pub fn ack(&mut self, ack: Ack) {
        self.acks.push_back(ack);
    }

    /// Owes the replay of a gone child's mail.
    pub fn replay(&mut self) {
        self.replay = true;
    }

    /// The next write to try at `now`, if one is owed and not waiting for
    /// a retry.
    pub fn next(&self, now: Instant) -> Option<Next<'_>> {
        if self.retry_at.is_some_and(|at| now < at) {
            return None;
        }
        match self.acks.front() {
            Some(ack) => Some(Next::Ack(ack)),
            None if self.replay => Some(Next::Replay),
            None => None,
        }
    }

    /// The write just tried landed.
    pub fn landed(&mut self) {
        if self.acks.pop_front().is_none() {
            self.replay = false;
        }
        self.failures = 0;
        self.retry_at = None;
        self.error = None;
    }

    /// The store refused the write just tried (or a take): everything
    /// waits for the retry; returns the attempt and the delay.
    pub fn refused(&mut self, error: String, now: Instant) -> (u32, Duration) {
        self.failures = self.failures.saturating_add(1);
        let delay = wfhost_policy::backoff::doubling(RETRY_INITIAL, RETRY_MAX, self.failures);
        self.retry_at = Some(now + delay);
        self.error = Some(error);
        (self.failures, delay)
    }

    /// A take landed: the store accepts writes again.
    pub fn took(&mut self) {
        if self.acks.is_empty() && !self.replay {
            self.failures = 0;
            self.retry_at = None;
            self.error = None;
        }
    }

    /// Whether new mail may be taken now: nothing owed, no retry pending.
    pub fn clear(&self, now: Instant) -> bool {
        self.acks.is_empty() && !self.replay && self.retry_at.is_none_or(|at| now >= at)
    }

    /// When to try again, if something waits.
    pub fn wake(&self) -> Option<Instant> {
        self.retry_at
    }

    /// Acknowledgements owed.
    pub fn acks_owed(&self) -> usize {
        self.acks.len()
    }

    /// Every acknowledgement still owed (the supervisor is stopping).
    pub fn take_acks(&mut self) -> Vec<Ack> {
        self.acks.drain(..).collect()
    }
}

/// A write to try.
#[derive(Debug)]
pub enum Next<'a> {
    /// An acknowledgement.
    Ack(&'a Ack),
    /// The replay.
    Replay,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(id: u64) -> Ack {
        Ack {
            pid: 1,
            id,
            outcome: Outcome::Succeeded,
        }
    }

    #[test]
    fn acks_then_the_replay_land_in_order_and_a_refusal_waits() {
        let t0 = Instant::now();
        let mut w = Writes::default();
        assert!(w.clear(t0));
        w.ack(ack(1));
        w.ack(ack(2));
        w.replay();
        assert!(!w.clear(t0), "nothing new is taken while writes are owed");
        assert!(matches!(w.next(t0), Some(Next::Ack(a)) if a.id == 1));
        assert_eq!(w.refused("disk full".into(), t0), (1, RETRY_INITIAL));
        assert!(w.next(t0).is_none(), "waits for the retry");
        assert_eq!(w.error.as_deref(), Some("disk full"));
        let t1 = t0 + RETRY_INITIAL;
        assert!(matches!(w.next(t1), Some(Next::Ack(a)) if a.id == 1));
        w.landed();
        assert!(matches!(w.next(t1), Some(Next::Ack(a)) if a.id == 2));
        w.landed();
        assert!(matches!(w.next(t1), Some(Next::Replay)));
        w.landed();
        assert!(w.next(t1).is_none());
        assert!(w.clear(t1));
        assert_eq!(w.error, None);
    }
}
