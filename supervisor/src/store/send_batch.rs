//! Mail offered by concurrent senders, written to the store together: the
//! first sender to find no write under way starts a writer, which writes
//! every offer waiting at that moment in one transaction (one durable
//! commit), then whatever arrived meanwhile, until nothing waits. One
//! sender alone pays one commit, as before; eight at once pay about one
//! between them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::clock::unix_ms;
use crate::store::handle::{StoreGone, StoreHandle};
use crate::store::rooms::{Room, Rooms};
use crate::store::{Accepted, Offer, StoreError};

/// Most offers written in one transaction.
const MAX_BATCH: usize = 256;

type Answer = Result<Accepted, Refused>;

/// Why an offer has no id: a refusal that wrote nothing, or a commit that
/// failed in a way that leaves open whether the offer landed.
#[derive(Debug, Clone)]
pub struct Refused {
    /// What went wrong and what to do.
    pub message: String,
    /// Whether the offer may have been written all the same.
    pub unknown: bool,
}

impl Refused {
    fn of(e: &crate::store::StoreError) -> Self {
        Self {
            message: e.to_string(),
            unknown: e.is_unknown(),
        }
    }

    fn gone(message: String) -> Self {
        Self {
            message,
            unknown: false,
        }
    }
}
type Waiting = Vec<(Offer, oneshot::Sender<Answer>)>;

/// The offers waiting for the next write.
#[derive(Default)]
pub struct SendBatch {
    waiting: Mutex<Waiting>,
    writing: AtomicBool,
    /// Room in the children's windows these writes may fill.
    pub rooms: Rooms,
}

impl SendBatch {
    /// Writes `offer` (with whatever else waits) and answers once it is
    /// durable, or refused (writing nothing of it).
    pub async fn offer(self: &Arc<Self>, store: &StoreHandle, offer: Offer) -> Answer {
        let (tx, rx) = oneshot::channel();
        self.lock().push((offer, tx));
        if !self.writing.swap(true, Ordering::AcqRel) {
            // A task of its own: a sender that goes away mid-write cannot
            // leave the others unanswered or the writer flag set.
            tokio::spawn(Arc::clone(self).write_all(store.clone()));
        }
        rx.await.unwrap_or_else(|_| {
            Err(Refused::gone(
                "the store thread is gone; nothing was accepted".into(),
            ))
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self) -> Waiting {
        let mut waiting = self.lock();
        let n = waiting.len().min(MAX_BATCH);
        waiting.drain(..n).collect()
    }

    /// Writes batches until nothing waits, then lets the next sender start
    /// a writer.
    async fn write_all(self: Arc<Self>, store: StoreHandle) {
        loop {
            let batch = self.take();
            if batch.is_empty() {
                self.writing.store(false, Ordering::Release);
                // An offer queued after `take` by a sender that still saw
                // `writing` set is ours to write.
                if self.lock().is_empty() || self.writing.swap(true, Ordering::AcqRel) {
                    return;
                }
                continue;
            }
            write(&store, &self.rooms, batch).await;
        }
    }
}

/// One transaction for `batch`, each sender answered once it is durable.
/// The same write takes the new mail for children with room in their
/// windows ([`Rooms`]), so it reaches them without a commit of its own.
async fn write(store: &StoreHandle, rooms: &Rooms, batch: Waiting) {
    let (offers, answers): (Vec<Offer>, Vec<oneshot::Sender<Answer>>) = batch.into_iter().unzip();
    let mut filling: Vec<(String, Arc<Room>)> = Vec::new();
    for offer in &offers {
        if !filling.iter().any(|(d, _)| *d == offer.deployment)
            && let Some(room) = rooms.of(&offer.deployment)
        {
            filling.push((offer.deployment.clone(), room));
        }
    }
    let (tx, rx) = oneshot::channel();
    // In the next group commit: with the takes and acknowledgements that
    // wait beside it, one commit for all.
    store.submit_grouped(move |s| {
        let accepted = s.enqueue_mail_many(&offers);
        let mut taken = Vec::new();
        if let Ok(results) = &accepted {
            let at_ms = unix_ms();
            for (deployment, room) in filling {
                let new = offers.iter().zip(results).any(|(o, r)| {
                    o.deployment == deployment && r.as_ref().is_ok_and(|a| a.new)
                });
                if !new {
                    continue;
                }
                // A take that fails leaves the mail in the inbox for the
                // driver; the accept stands.
                match room.take_in(s, &deployment, at_ms) {
                    Ok(t) => taken.push((room, t)),
                    Err(e) => {
                        tracing::debug!(deployment, error = %e, "new mail left for the driver to take")
                    }
                }
            }
        }
        Box::new(move |commit: Result<(), &StoreError>| {
            for (room, t) in taken {
                room.settle(t, commit.is_ok());
            }
            let _ = tx.send(match commit {
                Ok(()) => accepted,
                Err(e) => Err(e.for_group()),
            });
        })
    });
    let results = rx.await;
    match results {
        Ok(Ok(results)) => {
            for (tx, result) in answers.into_iter().zip(results) {
                let _ = tx.send(result.map_err(|e| Refused::of(&e)));
            }
        }
        Ok(Err(e)) => {
            let refused = Refused::of(&e);
            for tx in answers {
                let _ = tx.send(Err(refused.clone()));
            }
        }
        Err(_) => {
            for tx in answers {
                let _ = tx.send(Err(Refused::gone(StoreGone.to_string())));
            }
        }
    }
}
