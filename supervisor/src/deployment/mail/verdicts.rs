//! Cancels of one mail item sent to a child (protocol 3), waiting for its
//! verdict: answered when the verdict comes, as `not-acknowledged` once
//! [`VERDICT_WAIT`] has passed without one, or when the child ends (its
//! item then ends cancelled, the cancel being committed).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use wfhost_ipc::CancelVerdict;

use crate::deployment::{MailCancelAnswer, Waiter};

/// How long a child has to answer a cancel of one of its items
/// (docs/protocol.md §4.12 asks it to answer within 1 s).
pub const VERDICT_WAIT: Duration = Duration::from_secs(5);

/// One operator waiting for a child's verdict.
#[derive(Debug)]
struct Awaiting {
    waiter: Waiter,
    journal_seq: u64,
    until: Instant,
}

/// Every cancel of one live child's items awaiting its verdict.
#[derive(Debug, Default)]
pub struct Verdicts {
    by_id: HashMap<u64, Vec<Awaiting>>,
}

impl Verdicts {
    /// A cancel of item `id`, committed as journal record `journal_seq`,
    /// was sent at `now`.
    pub fn wait(&mut self, id: u64, waiter: Waiter, journal_seq: u64, now: Instant) {
        let until = now + VERDICT_WAIT;
        self.by_id.entry(id).or_default().push(Awaiting {
            waiter,
            journal_seq,
            until,
        });
    }

    /// The child's verdict on item `id`: every cancel of it waiting hears
    /// it (an unasked verdict is ignored).
    pub fn heard(&mut self, id: u64, verdict: &CancelVerdict) {
        let (word, detail) = match verdict {
            CancelVerdict::Acknowledged => (
                "acknowledged",
                "the child stopped the item; it ends cancelled unless it had finished".to_owned(),
            ),
            CancelVerdict::NotSupported => (
                "not-supported",
                "the item's handler cannot be cancelled: it runs to its end".to_owned(),
            ),
            CancelVerdict::Refused(why) => ("refused", format!("the child refused it: {why}")),
        };
        for a in self.by_id.remove(&id).unwrap_or_default() {
            a.waiter
                .verdict(answer(word, detail.clone(), a.journal_seq));
        }
    }

    /// Answers every cancel whose child said nothing by its bound.
    pub fn overdue(&mut self, now: Instant) {
        self.by_id.retain(|_, waiting| {
            let (late, on_time): (Vec<_>, Vec<_>) =
                std::mem::take(waiting).into_iter().partition(|a| now >= a.until);
            for a in late {
                let detail = format!(
                    "the child gave no verdict within {}s; the cancel is committed: if the child ends before the item, it ends cancelled",
                    VERDICT_WAIT.as_secs()
                );
                a.waiter
                    .verdict(answer("not-acknowledged", detail, a.journal_seq));
            }
            *waiting = on_time;
            !waiting.is_empty()
        });
    }

    /// The child ended: every cancel still waiting is answered (the store
    /// ends their items cancelled).
    pub fn child_ended(&mut self) {
        for (_, waiting) in self.by_id.drain() {
            for a in waiting {
                let detail =
                    "the child ended before its verdict; the item ends cancelled".to_owned();
                a.waiter.verdict(answer("ended", detail, a.journal_seq));
            }
        }
    }

    /// The earliest bound still running.
    pub fn wake(&self) -> Option<Instant> {
        self.by_id.values().flatten().map(|a| a.until).min()
    }
}

fn answer(verdict: &str, detail: String, journal_seq: u64) -> MailCancelAnswer {
    MailCancelAnswer {
        verdict: verdict.to_owned(),
        detail,
        journal_seq: Some(journal_seq),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter() -> (
        Waiter,
        tokio::sync::oneshot::Receiver<Result<MailCancelAnswer, String>>,
    ) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (Waiter::Verdict(tx), rx)
    }

    #[test]
    fn a_verdict_answers_its_item_and_silence_answers_after_the_bound() {
        let t0 = Instant::now();
        let mut v = Verdicts::default();
        let (w1, mut r1) = waiter();
        let (w2, mut r2) = waiter();
        v.wait(1, w1, 10, t0);
        v.wait(2, w2, 11, t0);
        assert_eq!(v.wake(), Some(t0 + VERDICT_WAIT));
        v.heard(1, &CancelVerdict::NotSupported);
        let got = r1.try_recv().unwrap().unwrap();
        assert_eq!(
            (got.verdict.as_str(), got.journal_seq),
            ("not-supported", Some(10))
        );
        // An unasked verdict changes nothing.
        v.heard(7, &CancelVerdict::Acknowledged);
        v.overdue(t0 + Duration::from_secs(1));
        assert!(r2.try_recv().is_err(), "not yet overdue");
        v.overdue(t0 + VERDICT_WAIT);
        assert_eq!(r2.try_recv().unwrap().unwrap().verdict, "not-acknowledged");
        assert_eq!(v.wake(), None);
        let (w3, mut r3) = waiter();
        v.wait(3, w3, 12, t0);
        v.child_ended();
        assert_eq!(r3.try_recv().unwrap().unwrap().verdict, "ended");
    }
}
