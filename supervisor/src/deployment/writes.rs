//! The mail writes a deployment owes the store, in order, retried until
//! they land: acknowledgements first (so nothing acknowledged is run
//! again), then the replay of each gone child's unacknowledged mail (with
//! how it ended, so its failures are counted), and only then new
//! deliveries (so the inbox stays in order). A store that refuses (a full
//! disk, a read-only filesystem, a lock) delays them, visibly in status,
//! and never drops one.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use wfhost_ipc::Outcome;

use crate::store::{Ending, Holder};

/// First retry delay after a refused write.
const RETRY_INITIAL: Duration = Duration::from_millis(100);
/// Longest retry delay.
const RETRY_MAX: Duration = Duration::from_secs(2);

/// One acknowledgement owed to the store.
#[derive(Debug, Clone)]
pub struct Ack {
    /// The child that acknowledged: only mail it holds is acknowledged,
    /// and its window frees once the ack lands.
    pub holder: Holder,
    /// The mail.
    pub id: u64,
    /// How processing ended.
    pub outcome: Outcome,
}

/// One gone child's mail owed back to the inbox (or to the dead state).
#[derive(Debug, Clone)]
pub struct Replay {
    /// The child whose wiring ended.
    pub holder: Holder,
    /// How it ended, and whether that counts against what it held.
    pub ending: Ending,
}

/// What is owed, and when to try again.
#[derive(Debug, Default)]
pub struct Writes {
    acks: VecDeque<Ack>,
    replays: VecDeque<Replay>,
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
    pub fn replay(&mut self, replay: Replay) {
        self.replays.push_back(replay);
    }

    /// The next write to try at `now`, if one is owed and not waiting for
    /// a retry.
    pub fn next(&self, now: Instant) -> Option<Next<'_>> {
        if self.retry_at.is_some_and(|at| now < at) {
            return None;
        }
        match self.acks.front() {
            Some(ack) => Some(Next::Ack(ack)),
            None => self.replays.front().map(Next::Replay),
        }
    }

    /// The write just tried landed.
    pub fn landed(&mut self) {
        if self.acks.pop_front().is_none() {
            self.replays.pop_front();
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
        if self.acks.is_empty() && self.replays.is_empty() {
            self.failures = 0;
            self.retry_at = None;
            self.error = None;
        }
    }

    /// Whether new mail may be taken now: nothing owed, no retry pending.
    pub fn clear(&self, now: Instant) -> bool {
        self.acks.is_empty() && self.replays.is_empty() && self.retry_at.is_none_or(|at| now >= at)
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
    /// A replay.
    Replay(&'a Replay),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(pid: u32) -> Holder {
        Holder {
            channel_id: format!("{pid:032x}"),
            pid,
        }
    }

    fn ack(id: u64) -> Ack {
        Ack {
            holder: holder(1),
            id,
            outcome: Outcome::Succeeded,
        }
    }

    fn replay(pid: u32) -> Replay {
        Replay {
            holder: holder(pid),
            ending: Ending {
                cause: "exited unexpectedly: exit status 3".into(),
                counts: true,
                at_ms: 1,
            },
        }
    }

    #[test]
    fn acks_then_the_replays_land_in_order_and_a_refusal_waits() {
        let t0 = Instant::now();
        let mut w = Writes::default();
        assert!(w.clear(t0));
        w.ack(ack(1));
        w.replay(replay(7));
        w.ack(ack(2));
        w.replay(replay(8));
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
        // Each gone child's replay, in the order they ended.
        assert!(matches!(w.next(t1), Some(Next::Replay(r)) if r.holder.pid == 7));
        assert!(!w.clear(t1));
        w.landed();
        assert!(matches!(w.next(t1), Some(Next::Replay(r)) if r.holder.pid == 8));
        w.landed();
        assert!(w.next(t1).is_none());
        assert!(w.clear(t1));
        assert_eq!(w.error, None);
    }
}
