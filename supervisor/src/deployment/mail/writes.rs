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

use crate::clock::unix_ms;
use crate::store::unwritten::AckRecord;
use crate::store::{Asking, Ending, Holder};

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
    /// What its handler returned (empty from a protocol-2 child).
    pub result: Vec<u8>,
}

/// What a child reported of an item it holds, owed to the store in the
/// order it was reported.
#[derive(Debug, Clone)]
pub enum Report {
    /// Its handler took the item (protocol 3): the delivery is a start.
    Started {
        /// The child.
        holder: Holder,
        /// The item.
        id: u64,
    },
    /// It is done with the item.
    Done(Ack),
    /// Its handler asks a person a question.
    Asked(Asking),
    /// It gave the item back, its handler waiting for an answer.
    GivenBack {
        /// The child.
        holder: Holder,
        /// The item.
        id: u64,
    },
    /// Taken for it by a senders' write, but it stopped taking mail before
    /// the item could be sent: back to the inbox for the next child.
    Unsent {
        /// The child.
        holder: Holder,
        /// The item.
        id: u64,
    },
}

/// `deployment`'s acknowledgements as kept for the next start when the
/// store would not take them before the supervisor stopped.
pub fn unwritten(deployment: &str, acks: Vec<Ack>) -> impl Iterator<Item = AckRecord> + '_ {
    let at_ms = unix_ms();
    acks.into_iter().map(move |a| AckRecord {
        deployment: deployment.to_owned(),
        channel_id: a.holder.channel_id,
        pid: a.holder.pid,
        id: a.id,
        outcome: wfhost_policy::fact::outcome_text(&a.outcome),
        result_hex: hex::encode(&a.result),
        at_ms,
    })
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
    acks: VecDeque<Report>,
    replays: VecDeque<Replay>,
    retry_at: Option<Instant>,
    failures: u32,
    /// Why the store refused the last write, while it refuses.
    pub error: Option<String>,
}

impl Writes {
    /// Owes what a child reported: a start or an acknowledgement.
    pub fn report(&mut self, report: Report) {
        self.acks.push_back(report);
    }

    /// Owes the replay of a gone child's mail.
    pub fn replay(&mut self, replay: Replay) {
        self.replays.push_back(replay);
    }

    /// The next write to try at `now`, if one is owed and not waiting for
    /// a retry: every acknowledgement owed (up to [`ACKS_PER_WRITE`], one
    /// commit for all), else the first replay.
    pub fn next(&mut self, now: Instant) -> Option<Next<'_>> {
        if self.retry_at.is_some_and(|at| now < at) {
            return None;
        }
        if self.acks.is_empty() {
            return self.replays.front().map(Next::Replay);
        }
        let n = self.acks.len().min(ACKS_PER_WRITE);
        let acks = self.acks.make_contiguous();
        acks.get(..n).map(Next::Acks)
    }

    /// The write just tried landed: `acks` acknowledgements, or (with 0)
    /// the first replay.
    pub fn landed(&mut self, acks: usize) {
        if acks > 0 {
            self.acks.drain(..acks.min(self.acks.len()));
        } else {
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

    /// Every acknowledgement still owed (the supervisor is stopping; a
    /// start, question or give-back not written is lost: the next
    /// supervisor returns the item uncounted, as it returns everything in
    /// flight, and its next attempt asks again).
    pub fn take_acks(&mut self) -> Vec<Ack> {
        self.acks
            .drain(..)
            .filter_map(|r| match r {
                Report::Done(a) => Some(a),
                Report::Started { .. }
                | Report::Asked(_)
                | Report::GivenBack { .. }
                | Report::Unsent { .. } => None,
            })
            .collect()
    }
}

/// Most acknowledgements written in one transaction.
pub const ACKS_PER_WRITE: usize = 256;

/// A write to try.
#[derive(Debug)]
pub enum Next<'a> {
    /// Starts and acknowledgements, oldest first, in one transaction.
    Acks(&'a [Report]),
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

    fn ack(id: u64) -> Report {
        Report::Done(Ack {
            holder: holder(1),
            id,
            outcome: Outcome::Succeeded,
            result: Vec::new(),
        })
    }

    fn id_of(r: &Report) -> u64 {
        match r {
            Report::Done(a) => a.id,
            Report::Asked(q) => q.id,
            Report::Started { id, .. }
            | Report::GivenBack { id, .. }
            | Report::Unsent { id, .. } => *id,
        }
    }

    fn replay(pid: u32) -> Replay {
        Replay {
            holder: holder(pid),
            ending: Ending {
                cause: "exited unexpectedly: exit status 3".into(),
                counts: true,
                at_ms: 1,
                hold: false,
            },
        }
    }

    #[test]
    fn acks_then_the_replays_land_in_order_and_a_refusal_waits() {
        let t0 = Instant::now();
        let mut w = Writes::default();
        assert!(w.clear(t0));
        w.report(ack(1));
        w.replay(replay(7));
        w.report(ack(2));
        w.replay(replay(8));
        assert!(!w.clear(t0), "nothing new is taken while writes are owed");
        let ids = |w: &mut Writes, t| match w.next(t) {
            Some(Next::Acks(a)) => a.iter().map(id_of).collect::<Vec<_>>(),
            _ => Vec::new(),
        };
        // Every ack owed goes in one write, before any replay.
        assert_eq!(ids(&mut w, t0), [1, 2]);
        assert_eq!(w.refused("disk full".into(), t0), (1, RETRY_INITIAL));
        assert!(w.next(t0).is_none(), "waits for the retry");
        assert_eq!(w.error.as_deref(), Some("disk full"));
        let t1 = t0 + RETRY_INITIAL;
        assert_eq!(ids(&mut w, t1), [1, 2]);
        w.landed(2);
        // Each gone child's replay, in the order they ended.
        assert!(matches!(w.next(t1), Some(Next::Replay(r)) if r.holder.pid == 7));
        assert!(!w.clear(t1));
        w.landed(0);
        assert!(matches!(w.next(t1), Some(Next::Replay(r)) if r.holder.pid == 8));
        w.landed(0);
        assert!(w.next(t1).is_none());
        assert!(w.clear(t1));
        assert_eq!(w.error, None);
    }

    #[test]
    fn a_write_carries_at_most_its_share_of_acks() {
        let t0 = Instant::now();
        let mut w = Writes::default();
        for id in 0..(ACKS_PER_WRITE as u64 + 10) {
            w.report(ack(id));
        }
        let first = match w.next(t0) {
            Some(Next::Acks(a)) => a.len(),
            _ => 0,
        };
        assert_eq!(first, ACKS_PER_WRITE);
        w.landed(first);
        assert_eq!(w.acks_owed(), 10);
    }
}
