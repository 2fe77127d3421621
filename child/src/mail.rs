//! Mail: work the supervisor delivers at least once. The stream hands each
//! id to the application once; an id already acknowledged is answered again
//! from memory when the supervisor redelivers it, never processed twice.
//!
//! A mail item is *held* from the moment [`MailStream::next`] hands it out
//! until it is acknowledged or dropped; a drain is not over (`Drained` is
//! not sent) while any is held, so an acknowledgement is never cut off by a
//! stop. Once a drain starts (or the runtime closes) no more mail is handed
//! out: [`MailStream::next`] returns `None`, mail already queued is dropped
//! and mail arriving later is not taken, all left unacknowledged for the
//! supervisor to deliver to the next child. Redeliveries of acknowledged
//! mail are still acknowledged again.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::mpsc;
use tracing::{info, warn};
use wfhost_ipc::{Event, Outcome};

use crate::error::RuntimeError;
use crate::outbox::Outbox;
use crate::remembered::Remembered;
use crate::work::Work;

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
    /// New mail while this child takes none (draining or closed): leave it
    /// unacknowledged, for the next child.
    Declined,
}

/// Which mail ids are with the application and which are acknowledged.
#[derive(Debug, Default)]
pub(crate) struct MailLedger {
    in_flight: HashSet<u64>,
    acked: Remembered<u64, Outcome, REMEMBERED_ACKS>,
}

impl MailLedger {
    /// Classifies a delivery of `id`, marking new mail as in flight when
    /// this child is `taking` mail.
    pub(crate) fn receive(&mut self, id: u64, taking: bool) -> Delivery {
        if let Some(outcome) = self.acked.get(&id) {
            Delivery::Reack(outcome.clone())
        } else if self.in_flight.contains(&id) {
            Delivery::Duplicate
        } else if !taking {
            Delivery::Declined
        } else {
            self.in_flight.insert(id);
            Delivery::Deliver
        }
    }

    /// Records the acknowledgement of `id`.
    pub(crate) fn ack(&mut self, id: u64, outcome: &Outcome) {
        self.in_flight.remove(&id);
        self.acked.insert(id, outcome.clone());
    }

    /// Forgets mail the application dropped unacknowledged, so a
    /// redelivery reaches it again.
    pub(crate) fn abandon(&mut self, id: u64) {
        self.in_flight.remove(&id);
    }
}

/// The ledger, the work ledger (which counts held mail and decides
/// `Drained`) and the outbox, shared by the reader task and every [`Mail`].
#[derive(Debug, Clone)]
pub(crate) struct MailShared {
    pub(crate) ledger: Arc<Mutex<MailLedger>>,
    pub(crate) work: Arc<Mutex<Work>>,
    pub(crate) outbox: Outbox,
}

impl MailShared {
    fn ledger(&self) -> MutexGuard<'_, MailLedger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn work(&self) -> MutexGuard<'_, Work> {
        self.work.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Handles one delivery from the supervisor: new mail goes to `queue`
    /// (`None`: this child takes no more mail), a redelivery of acknowledged
    /// mail is acknowledged again.
    pub(crate) fn deliver(
        &self,
        id: u64,
        attempt: u32,
        payload: Vec<u8>,
        queue: Option<&mpsc::UnboundedSender<Mail>>,
    ) {
        let decision = self.ledger().receive(id, queue.is_some());
        match (decision, queue) {
            (Delivery::Deliver, Some(queue)) => {
                let mail = Mail {
                    id,
                    attempt,
                    payload,
                    shared: self.clone(),
                    acked: false,
                    held: false,
                };
                // A closed queue drops the mail, whose Drop abandons it.
                let _ = queue.send(mail);
            }
            (Delivery::Reack(outcome), _) => {
                info!("mail {id} redelivered after its ack; acknowledging again");
                self.outbox.post(Event::MailAck { id, outcome });
            }
            (Delivery::Duplicate, _) => {
                warn!("mail {id} delivered again while still in progress; ignored");
            }
            (Delivery::Deliver | Delivery::Declined, _) => {
                info!(
                    "mail {id} arrived after Drain, a lease expiry or Shutdown; not taken, left for redelivery to the next child"
                );
            }
        }
    }

    /// Marks `mail` held if mail is still handed out; `false` when it is not
    /// (draining or closed).
    fn hand_out(&self, mail: &mut Mail) -> bool {
        mail.held = self.work().take_mail();
        mail.held
    }

    /// A held item was acknowledged or dropped: sends `Drained` if that was
    /// the last thing a drain waited for. Posted under the work lock, so it
    /// is ordered after the events of steps that finished before it.
    fn settle(&self) {
        let mut work = self.work();
        if let Some(event) = work.settle_mail() {
            self.outbox.post(event);
        }
    }
}

/// One piece of mail; acknowledge it with [`Mail::ack`] once processed.
/// Dropping it unacknowledged leaves it to be delivered again. While held,
/// it keeps a drain from reporting `Drained`.
#[derive(Debug)]
pub struct Mail {
    id: u64,
    attempt: u32,
    payload: Vec<u8>,
    shared: MailShared,
    acked: bool,
    held: bool,
}

impl Mail {
    /// The store-assigned id (stable across redeliveries).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// 1 on the first delivery; more when the child that held it before
    /// died or was recycled without acknowledging it, so work it may have
    /// done already can be finalized instead of re-run.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The payload as sent.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Reports how processing ended (`MailAck`, followed by `Drained` if a
    /// drain was waiting only for this) and waits until the acknowledgement
    /// is written.
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
        // After the MailAck is queued, so a Drained it makes due follows it.
        self.release();
        pending.wait().await
    }

    /// Settles the item if it is held (once).
    fn release(&mut self) {
        if std::mem::take(&mut self.held) {
            self.shared.settle();
        }
    }
}

impl Drop for Mail {
    fn drop(&mut self) {
        if !self.acked {
            self.shared.ledger().abandon(self.id);
        }
        self.release();
    }
}

/// The stream of mail for the application; ends when a drain starts or the
/// runtime closes (`Shutdown`, or the supervisor gone).
#[derive(Debug, Clone)]
pub struct MailStream {
    rx: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<Mail>>>,
    shared: MailShared,
}

impl MailStream {
    pub(crate) fn new(rx: mpsc::UnboundedReceiver<Mail>, shared: MailShared) -> Self {
        Self {
            rx: Arc::new(tokio::sync::Mutex::new(rx)),
            shared,
        }
    }

    /// The next piece of mail, held until acknowledged or dropped; `None`
    /// once a drain has started or the runtime has closed (mail still queued
    /// then is dropped, left for redelivery to the next child).
    pub async fn next(&mut self) -> Option<Mail> {
        let mut rx = self.rx.lock().await;
        loop {
            let taking = self.shared.work().takes_mail();
            if !taking {
                discard(&mut rx);
                return None;
            }
            let mut mail = rx.recv().await?;
            if self.shared.hand_out(&mut mail) {
                return Some(mail);
            }
            // A drain or close came first: `mail` is dropped (abandoned)
            // and the next turn discards the rest.
        }
    }

    /// Drops the mail queued for the application, unless a `next` call is
    /// under way (which then discards it itself): called when mail stops
    /// being handed out.
    pub(crate) fn discard_queued(&self) {
        if let Ok(mut rx) = self.rx.try_lock() {
            discard(&mut rx);
        }
    }
}

/// Drops every queued item (each is abandoned in the ledger), saying how
/// many go back to the supervisor.
fn discard(rx: &mut mpsc::UnboundedReceiver<Mail>) {
    let mut ids = Vec::new();
    while let Ok(mail) = rx.try_recv() {
        ids.push(mail.id());
    }
    if !ids.is_empty() {
        info!(
            "not taking queued mail {ids:?} (draining or closed); left for redelivery to the next child"
        );
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::net::UnixStream;
    use wfhost_ipc::{Control, DEFAULT_MAX_FRAME_BYTES, FrameReader, FrameWriter};

    use super::*;

    /// A mail stream whose events are read on `peer`.
    struct Wired {
        shared: MailShared,
        stream: MailStream,
        tx: mpsc::UnboundedSender<Mail>,
        peer: FrameReader<Event>,
        _ends: (FrameReader<Control>, FrameWriter<Control>),
    }

    fn wired() -> Wired {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (child_reader, writer) =
            wfhost_ipc::split::<Control, Event>(theirs, DEFAULT_MAX_FRAME_BYTES);
        let (peer, peer_writer) =
            wfhost_ipc::split::<Event, Control>(ours, DEFAULT_MAX_FRAME_BYTES);
        let shared = MailShared {
            ledger: Arc::new(Mutex::new(MailLedger::default())),
            work: Arc::new(Mutex::new(Work::default())),
            outbox: Outbox::spawn(writer, DEFAULT_MAX_FRAME_BYTES),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let stream = MailStream::new(rx, shared.clone());
        Wired {
            shared,
            stream,
            tx,
            peer,
            _ends: (child_reader, peer_writer),
        }
    }

    impl Wired {
        fn deliver(&self, id: u64) {
            self.shared.deliver(id, 1, vec![1], Some(&self.tx));
        }

        fn drain(&self) -> Vec<Event> {
            self.shared.work().drain(crate::token::CancelCause::Drain)
        }

        fn in_flight(&self) -> Vec<u64> {
            let mut ids: Vec<u64> = self.shared.ledger().in_flight.iter().copied().collect();
            ids.sort_unstable();
            ids
        }

        async fn next_event(&mut self) -> Event {
            let next = tokio::time::timeout(Duration::from_secs(10), self.peer.next()).await;
            next.unwrap().unwrap().unwrap()
        }

        /// Asserts nothing more was sent, by sending a marker after it.
        async fn expect_quiet(&mut self) {
            self.shared.outbox.post(Event::Ready);
            assert_eq!(self.next_event().await, Event::Ready);
        }
    }

    #[tokio::test]
    async fn held_mail_delays_drained_until_acked_and_the_ack_comes_first() {
        let mut w = wired();
        w.deliver(1);
        let mail = w.stream.next().await.unwrap();
        assert!(w.drain().is_empty(), "mail 1 is held");
        w.expect_quiet().await;
        mail.ack(Outcome::Cancelled).await.unwrap();
        assert_eq!(
            w.next_event().await,
            Event::MailAck {
                id: 1,
                outcome: Outcome::Cancelled
            }
        );
        assert_eq!(w.next_event().await, Event::Drained);
    }

    #[tokio::test]
    async fn draining_hands_out_nothing_drops_the_queue_and_a_dropped_held_item_drains() {
        let mut w = wired();
        for id in [1, 2, 3] {
            w.deliver(id);
        }
        let held = w.stream.next().await.unwrap();
        assert_eq!(held.id(), 1);
        assert!(w.drain().is_empty(), "mail 1 is held");
        assert!(w.stream.next().await.is_none(), "no mail during a drain");
        assert_eq!(w.in_flight(), [1], "queued mail 2 and 3 were abandoned");
        w.deliver(4);
        assert!(w.stream.next().await.is_none());
        assert_eq!(w.in_flight(), [1]);
        w.expect_quiet().await;
        drop(held);
        assert_eq!(w.next_event().await, Event::Drained);
        assert!(w.in_flight().is_empty(), "dropped mail comes again");
    }

    #[tokio::test]
    async fn discarding_the_queue_abandons_mail_never_handed_out() {
        let mut w = wired();
        w.deliver(1);
        w.deliver(2);
        assert_eq!(names(&w.drain()), ["Drained"], "queued mail is not held");
        w.stream.discard_queued();
        assert!(w.in_flight().is_empty());
        assert!(w.stream.next().await.is_none());
        w.expect_quiet().await;
    }

    fn names(events: &[Event]) -> Vec<&'static str> {
        events.iter().map(Event::name).collect()
    }

    #[test]
    fn ledger_delivers_once_and_reacks_redeliveries() {
        let mut l = MailLedger::default();
        assert_eq!(l.receive(7, true), Delivery::Deliver);
        assert_eq!(l.receive(7, true), Delivery::Duplicate);
        l.ack(7, &Outcome::Succeeded);
        assert_eq!(l.receive(7, true), Delivery::Reack(Outcome::Succeeded));
        assert_eq!(l.receive(8, true), Delivery::Deliver);
        l.abandon(8);
        assert_eq!(
            l.receive(8, true),
            Delivery::Deliver,
            "dropped mail comes again"
        );
    }

    #[test]
    fn ledger_remembers_a_bounded_number_of_acks() {
        let mut l = MailLedger::default();
        for id in 0..(REMEMBERED_ACKS as u64 + 5) {
            l.receive(id, true);
            l.ack(id, &Outcome::Succeeded);
        }
        assert_eq!(l.acked.len(), REMEMBERED_ACKS);
        assert_eq!(
            l.receive(0, true),
            Delivery::Deliver,
            "the oldest is forgotten"
        );
    }

    #[test]
    fn ledger_declines_new_mail_when_not_taking_but_still_reacks() {
        let mut l = MailLedger::default();
        assert_eq!(l.receive(1, true), Delivery::Deliver);
        l.ack(1, &Outcome::Cancelled);
        assert_eq!(l.receive(2, true), Delivery::Deliver);
        assert_eq!(
            l.receive(1, false),
            Delivery::Reack(Outcome::Cancelled),
            "settled mail is acknowledged again during a drain"
        );
        assert_eq!(l.receive(2, false), Delivery::Duplicate);
        assert_eq!(l.receive(3, false), Delivery::Declined);
        assert!(!l.in_flight.contains(&3), "declined mail is not in flight");
        assert_eq!(l.receive(3, true), Delivery::Deliver);
    }
}
