//! Mail: work the supervisor delivers at least once. The stream hands each
//! id to the application once; an id already acknowledged is answered again
//! from memory when the supervisor redelivers it, never processed twice.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc;
use wfhost_ipc::{Event, Outcome};

use crate::error::RuntimeError;
use crate::outbox::Outbox;
use crate::runtime::CloseReason;

/// How many acknowledged ids (and their outcomes) are remembered for
/// answering redeliveries.
const REMEMBERED_ACKS: usize = 4096;

/// What to do with a delivery, decided by the ledger.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// New mail: hand it to the application.
    Deliver,
    /// Already acknowledged: send the remembered acknowledgement again.
    Reack(Outcome),
    /// Already with the application: ignore the duplicate.
    Duplicate,
}

/// Which mail ids are with the application and which are acknowledged.
#[derive(Debug, Default)]
pub(crate) struct MailLedger {
    in_flight: HashSet<u64>,
    acked: HashMap<u64, Outcome>,
    acked_order: VecDeque<u64>,
}

impl MailLedger {
    /// Classifies a delivery of `id`, marking new mail as in flight.
    pub(crate) fn receive(&mut self, id: u64) -> Delivery {
        if let Some(outcome) = self.acked.get(&id) {
            Delivery::Reack(outcome.clone())
        } else if !self.in_flight.insert(id) {
            Delivery::Duplicate
        } else {
            Delivery::Deliver
        }
    }

    /// Records the acknowledgement of `id`.
    pub(crate) fn ack(&mut self, id: u64, outcome: &Outcome) {
        self.in_flight.remove(&id);
        if self.acked.insert(id, outcome.clone()).is_none() {
            self.acked_order.push_back(id);
            while self.acked_order.len() > REMEMBERED_ACKS {
                if let Some(old) = self.acked_order.pop_front() {
                    self.acked.remove(&old);
                }
            }
        }
    }

    /// Forgets mail the application dropped unacknowledged, so a
    /// redelivery reaches it again.
    pub(crate) fn abandon(&mut self, id: u64) {
        self.in_flight.remove(&id);
    }
}

/// The ledger and the queue toward the application, shared by the reader
/// task and every [`Mail`].
#[derive(Debug, Clone)]
pub(crate) struct MailShared {
    pub(crate) ledger: Arc<Mutex<MailLedger>>,
    pub(crate) outbox: Outbox,
}

impl MailShared {
    fn ledger(&self) -> std::sync::MutexGuard<'_, MailLedger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Handles one delivery from the supervisor: new mail goes to `queue`,
    /// a redelivery of acknowledged mail is acknowledged again.
    pub(crate) fn deliver(&self, id: u64, payload: Vec<u8>, queue: &mpsc::UnboundedSender<Mail>) {
        let decision = self.ledger().receive(id);
        match decision {
            Delivery::Deliver => {
                let mail = Mail {
                    id,
                    payload,
                    shared: self.clone(),
                    acked: false,
                };
                // A closed queue drops the mail, whose Drop abandons it.
                let _ = queue.send(mail);
            }
            Delivery::Reack(outcome) => {
                eprintln!("wfhost-child: mail {id} redelivered after its ack; acknowledging again");
                self.outbox.post(Event::MailAck { id, outcome });
            }
            Delivery::Duplicate => {
                eprintln!(
                    "wfhost-child: mail {id} delivered again while still in progress; ignored"
                );
            }
        }
    }
}

/// One piece of mail; acknowledge it with [`Mail::ack`] once processed.
/// Dropping it unacknowledged leaves it to be delivered again.
#[derive(Debug)]
pub struct Mail {
    id: u64,
    payload: Vec<u8>,
    shared: MailShared,
    acked: bool,
}

impl Mail {
    /// The store-assigned id (stable across redeliveries).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The payload as sent.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Reports how processing ended (`MailAck`) and waits until the
    /// acknowledgement is written.
    pub async fn ack(mut self, outcome: Outcome) -> Result<(), RuntimeError> {
        self.acked = true;
        let pending = {
            let mut ledger = self.shared.ledger();
            ledger.ack(self.id, &outcome);
            // Posted under the lock so a racing redelivery sees the ack.
            self.shared.outbox.post_tracked(Event::MailAck {
                id: self.id,
                outcome,
            })
        };
        pending.wait().await
    }
}

impl Drop for Mail {
    fn drop(&mut self) {
        if !self.acked {
            self.shared.ledger().abandon(self.id);
        }
    }
}

/// The stream of mail for the application; ends when the runtime closes
/// (`Shutdown`, or the supervisor gone).
#[derive(Debug, Clone)]
pub struct MailStream {
    rx: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Mail>>>,
    closed: tokio::sync::watch::Receiver<Option<CloseReason>>,
}

impl MailStream {
    pub(crate) fn new(
        rx: mpsc::UnboundedReceiver<Mail>,
        closed: tokio::sync::watch::Receiver<Option<CloseReason>>,
    ) -> Self {
        Self {
            rx: Arc::new(tokio::sync::Mutex::new(rx)),
            closed,
        }
    }

    /// The next piece of mail, or `None` once the runtime has closed (mail
    /// still queued then is left for redelivery to the next child).
    pub async fn next(&mut self) -> Option<Mail> {
        let mut rx = self.rx.lock().await;
        if self.closed.borrow().is_some() {
            return None;
        }
        let mail = rx.recv().await?;
        if self.closed.borrow().is_some() {
            return None;
        }
        Some(mail)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_delivers_once_and_reacks_redeliveries() {
        let mut l = MailLedger::default();
        assert_eq!(l.receive(7), Delivery::Deliver);
        assert_eq!(l.receive(7), Delivery::Duplicate);
        l.ack(7, &Outcome::Succeeded);
        assert_eq!(l.receive(7), Delivery::Reack(Outcome::Succeeded));
        assert_eq!(l.receive(8), Delivery::Deliver);
        l.abandon(8);
        assert_eq!(l.receive(8), Delivery::Deliver, "dropped mail comes again");
    }

    #[test]
    fn ledger_remembers_a_bounded_number_of_acks() {
        let mut l = MailLedger::default();
        for id in 0..(REMEMBERED_ACKS as u64 + 5) {
            l.receive(id);
            l.ack(id, &Outcome::Succeeded);
        }
        assert_eq!(l.acked.len(), REMEMBERED_ACKS);
        assert_eq!(l.receive(0), Delivery::Deliver, "the oldest is forgotten");
    }
}
