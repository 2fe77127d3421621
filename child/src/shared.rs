//! The state every handle of one connection shares: the runtime's clones,
//! each [`Step`](crate::Step) and the reader task. It sits below all three,
//! so none of them reaches up into another for it.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ed25519_dalek::VerifyingKey;
use tokio::sync::watch;
use wfhost_ipc::{Event, Welcome};

use crate::cause::CloseReason;
use crate::error::RuntimeError;
use crate::mail::MailShared;
use crate::outbox::Outbox;
use crate::work::Work;

/// State shared by the runtime handles, steps and the reader task.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) deployment: String,
    pub(crate) channel_id: String,
    pub(crate) supervisor_key: VerifyingKey,
    pub(crate) welcome: Welcome,
    /// The protocol version spoken with the supervisor.
    pub(crate) protocol: u32,
    pub(crate) outbox: Outbox,
    pub(crate) work: Arc<Mutex<Work>>,
    pub(crate) mail: MailShared,
    pub(crate) draining: watch::Sender<bool>,
    pub(crate) closed: watch::Sender<Option<CloseReason>>,
}

impl Shared {
    /// The work ledger; a poisoned lock is still consistent (every change
    /// is made before any event is queued), so it is used as is.
    pub(crate) fn work(&self) -> MutexGuard<'_, Work> {
        self.work.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues events in order (callers hold the work lock, so ordering
    /// between tasks is the ledger's order).
    pub(crate) fn post_all(&self, events: Vec<Event>) {
        for event in events {
            self.outbox.post(event);
        }
    }

    /// Queues events in order, like [`Self::post_all`], and waits until
    /// each is written. `events` takes the work lock and returns what the
    /// ledger decided; the lock is released before waiting.
    pub(crate) async fn send_all(
        &self,
        events: impl FnOnce(&mut Work) -> Vec<Event>,
    ) -> Result<(), RuntimeError> {
        let pending: Vec<_> = {
            let mut work = self.work();
            events(&mut work)
                .into_iter()
                .map(|e| self.outbox.post_tracked(e))
                .collect()
        };
        for p in pending {
            p.wait().await?;
        }
        Ok(())
    }

    /// Marks the runtime closed (the first reason wins) and fires every
    /// step's and every mail item's token with the reason's cause.
    pub(crate) fn close(&self, reason: CloseReason) {
        self.work().close(reason.cancel_cause());
        self.mail.ledger().close(reason.cancel_cause());
        self.closed.send_if_modified(|current| {
            if current.is_none() {
                *current = Some(reason);
                true
            } else {
                false
            }
        });
    }
}
