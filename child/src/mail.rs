//! Mail: work the supervisor delivers at least once. The stream hands each
//! id to the application once; an id already done is answered again from
//! memory when the supervisor redelivers it, never processed twice.
//!
//! A mail item is *held* from the moment [`MailStream::next`] hands it out
//! until it is done ([`Mail::done`], [`Mail::ack`]) or dropped; a drain is
//! not over (`Drained` is not sent) while any is held, so the end of an
//! item is never cut off by a stop. Once a drain starts (or the runtime
//! closes) no more mail is handed out: [`MailStream::next`] returns `None`,
//! mail already queued is dropped and mail arriving later is not taken, all
//! left unacknowledged for the supervisor to deliver to the next child.
//! Redeliveries of done mail are still answered again.
//!
//! In protocol 3 (docs/protocol.md §4.12) an item handed out is *started*:
//! `MailStarted { id, cancellable }` goes up before anything the
//! application sends about it, and the item ends with `MailDone` carrying
//! the handler's result (`MailAck` in protocol 2, where the result is
//! dropped). An item received but never handed out is never started: it
//! stays unacknowledged and the supervisor delivers it again with the same
//! attempt. A verified `CancelMail` of an item answers with one verdict:
//! an item not started yet ends `Cancelled` at once and is never handed
//! out; a started, cancellable item's [`Mail::token`] fires and its run's
//! steps are cancelled (the item ends when the application says how); an
//! item started with [`Start::not_cancellable`] answers `NotSupported`.
//!
//! Also in protocol 3 a handler may ask a person a question about its item
//! ([`Mail::ask`]) and report progress ([`Mail::progress`]). An item whose
//! handler waits in `ask` when a drain begins (or the lease runs out) is
//! *given back*: `GiveBack { id, awaiting_answer: true }` goes up, the
//! item is forgotten (no `MailDone` is ever sent for it), the waiting `ask`
//! fails with [`AskError::GivenBack`], and the item no longer holds the
//! drain. The supervisor delivers it again once the question is answered.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};
use wfhost_ipc::{Event, Outcome};

use crate::cause::CancelCause;
use crate::error::{AskError, RuntimeError};
use crate::outbox::Outbox;
use crate::question::{self, Found, Questions, Reply};
use crate::remembered::Remembered;
use crate::token::CancelToken;
use crate::work::Work;

/// How many done ids (and their outcomes) are remembered for answering
/// redeliveries.
const REMEMBERED_ACKS: usize = 4096;

/// The first protocol version with `MailStarted`, `MailDone` and the
/// cancel of one item.
pub(crate) const ITEMS_PROTOCOL: u32 = 3;

/// How the application takes an item it is handed ([`MailStream::next_with`]):
/// whether its handler can be cancelled, and which run its steps belong to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    cancellable: bool,
    run: Option<String>,
}

impl Default for Start {
    fn default() -> Self {
        Self::new()
    }
}

impl Start {
    /// A cancellable handler whose run is `mail-<id>`.
    pub fn new() -> Self {
        Self {
            cancellable: true,
            run: None,
        }
    }

    /// A handler that cannot be cancelled: a cancel of its item (protocol
    /// 3) is answered `NotSupported` and the item runs to its end. A drain
    /// still cancels its cancel-behaviour steps.
    pub fn not_cancellable(self) -> Self {
        self.cancellable(false)
    }

    /// Whether the handler can be cancelled (see [`Self::not_cancellable`]).
    pub fn cancellable(mut self, cancellable: bool) -> Self {
        self.cancellable = cancellable;
        self
    }

    /// The run the item's steps belong to (default `mail-<id>`): a cancel
    /// of the item cancels this run's steps.
    pub fn run(mut self, run: impl Into<String>) -> Self {
        self.run = Some(run.into());
        self
    }
}

/// What to do with a delivery, decided by the ledger.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// New mail: hand it to the application.
    Deliver,
    /// Already done: send the remembered outcome again.
    Reack(Outcome),
    /// Already with the application: ignore the duplicate.
    Duplicate,
    /// New mail while this child takes none (draining or closed): leave it
    /// unacknowledged, for the next child.
    Declined,
}

/// What a verified cancel of one item does to it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ItemCancel {
    /// It was not started: it is done, `Cancelled`, and never handed out.
    Unstarted,
    /// Its handler declared it cannot be cancelled: nothing changes.
    NotSupported,
    /// Its token fired; the steps of `run` are to be cancelled.
    Started {
        /// The item's run.
        run: String,
    },
    /// This child does not hold it.
    NotHeld,
}

/// One item in flight: its token, how it was started, once it was, and
/// its questions.
#[derive(Debug)]
struct InFlight {
    token: CancelToken,
    /// `(cancellable, run)` once the application took it.
    started: Option<(bool, String)>,
    questions: Questions,
}

/// Which mail ids are with this child and which are done.
#[derive(Debug, Default)]
pub(crate) struct MailLedger {
    in_flight: HashMap<u64, InFlight>,
    acked: Remembered<u64, Outcome, REMEMBERED_ACKS>,
    /// Items given back whose [`Mail`] the application still holds: its
    /// end is discarded, since the item is no longer this child's.
    given_back: HashSet<u64>,
}

impl MailLedger {
    /// Classifies a delivery of `id`, marking new mail as in flight when
    /// this child is `taking` mail.
    pub(crate) fn receive(&mut self, id: u64, taking: bool) -> Delivery {
        use std::collections::hash_map::Entry;
        if let Some(outcome) = self.acked.get(&id) {
            return Delivery::Reack(outcome.clone());
        }
        match self.in_flight.entry(id) {
            Entry::Occupied(_) => Delivery::Duplicate,
            Entry::Vacant(_) if !taking => Delivery::Declined,
            Entry::Vacant(slot) => {
                slot.insert(InFlight {
                    token: CancelToken::new(),
                    started: None,
                    questions: Questions::default(),
                });
                Delivery::Deliver
            }
        }
    }

    /// The cancellation token of `id`, while it is in flight.
    fn token(&self, id: u64) -> Option<CancelToken> {
        self.in_flight.get(&id).map(|item| item.token.clone())
    }

    /// Whether `id` is held: delivered, not yet done.
    pub(crate) fn holds(&self, id: u64) -> bool {
        self.in_flight.contains_key(&id)
    }

    /// Marks `id` started; `false` when it is no longer in flight (a cancel
    /// ended it before it was handed out).
    fn start(&mut self, id: u64, cancellable: bool, run: &str) -> bool {
        match self.in_flight.get_mut(&id) {
            Some(item) if item.started.is_none() => {
                item.started = Some((cancellable, run.to_owned()));
                true
            }
            _ => false,
        }
    }

    /// Records that `id` is done with `outcome`; `false` when it was not in
    /// flight (it is done already).
    pub(crate) fn ack(&mut self, id: u64, outcome: &Outcome) -> bool {
        let was = self.in_flight.remove(&id).is_some();
        if was || !self.acked.contains(&id) {
            self.acked.insert(id, outcome.clone());
        }
        was
    }

    /// Forgets mail the application dropped unacknowledged, so a
    /// redelivery reaches it again.
    pub(crate) fn abandon(&mut self, id: u64) {
        self.in_flight.remove(&id);
    }

    /// A verified cancel of `id`: an item not started is done `Cancelled`
    /// now; a started, cancellable one has its token fired.
    pub(crate) fn cancel(&mut self, id: u64) -> ItemCancel {
        let Some(item) = self.in_flight.get(&id) else {
            return ItemCancel::NotHeld;
        };
        match &item.started {
            None => {
                self.ack(id, &Outcome::Cancelled);
                ItemCancel::Unstarted
            }
            Some((false, _)) => ItemCancel::NotSupported,
            Some((true, run)) => {
                item.token.cancel(CancelCause::Cancel);
                ItemCancel::Started { run: run.clone() }
            }
        }
    }

    /// The channel closed: fires every item's token with `cause`.
    pub(crate) fn close(&self, cause: CancelCause) {
        for item in self.in_flight.values() {
            item.token.cancel(cause);
        }
    }

    /// The answer to question `key` of item `id`: resolves every `ask` of
    /// it and is remembered; `false` (ignored) when this child holds no
    /// such item, or the item never asked it, or it is answered already.
    pub(crate) fn answer(&mut self, id: u64, key: &str, value: Vec<u8>) -> bool {
        self.in_flight
            .get(&id)
            .is_some_and(|item| item.questions.answer(key, value))
    }

    /// The items a drain gives back: started, their handler waiting in
    /// `ask`, and not being cancelled (those end `Cancelled` as promised
    /// by their verdict). In id order.
    fn waiting_for_answers(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .in_flight
            .iter()
            .filter(|(_, item)| {
                item.started.is_some() && item.questions.waiting > 0 && !item.token.is_cancelled()
            })
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Forgets item `id` as given back: its waiting `ask` calls fail with
    /// [`AskError::GivenBack`], its token fires with the drain's `cause`
    /// (work outside steps should stop: the item is no longer this
    /// child's), and its end is discarded. `false` when it is not held.
    fn give_back(&mut self, id: u64, cause: CancelCause) -> bool {
        let Some(item) = self.in_flight.remove(&id) else {
            return false;
        };
        item.questions.give_back();
        item.token.cancel(cause);
        self.given_back.insert(id);
        true
    }

    /// Whether `id` was given back (and still is held by the application),
    /// forgetting it: called as its [`Mail`] is done or dropped.
    fn take_given_back(&mut self, id: u64) -> bool {
        self.given_back.remove(&id)
    }
}

/// The ledger, the work ledger (which counts held mail and decides
/// `Drained`) and the outbox, shared by the reader task and every [`Mail`].
#[derive(Debug, Clone)]
pub(crate) struct MailShared {
    pub(crate) ledger: Arc<Mutex<MailLedger>>,
    pub(crate) work: Arc<Mutex<Work>>,
    pub(crate) outbox: Outbox,
    /// The protocol version spoken with the supervisor.
    pub(crate) protocol: u32,
    /// The Welcome's `max_frame_bytes`: a result must fit one frame.
    pub(crate) max_frame_bytes: u32,
}

impl MailShared {
    pub(crate) fn ledger(&self) -> MutexGuard<'_, MailLedger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn work(&self) -> MutexGuard<'_, Work> {
        self.work.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether items start and end as in protocol 3.
    pub(crate) fn items(&self) -> bool {
        self.protocol >= ITEMS_PROTOCOL
    }

    /// The event that ends item `id`: `MailDone` in protocol 3, `MailAck`
    /// (without the result) in protocol 2.
    pub(crate) fn end_event(&self, id: u64, outcome: Outcome, result: Vec<u8>) -> Event {
        if self.items() {
            Event::MailDone {
                id,
                outcome,
                result,
            }
        } else {
            Event::MailAck { id, outcome }
        }
    }

    /// Handles one delivery from the supervisor: new mail goes to `queue`
    /// (`None`: this child takes no more mail), a redelivery of done mail
    /// is answered again.
    pub(crate) fn deliver(
        &self,
        id: u64,
        attempt: u32,
        payload: Vec<u8>,
        queue: Option<&mpsc::UnboundedSender<Mail>>,
    ) {
        let (decision, token) = {
            let mut ledger = self.ledger();
            let decision = ledger.receive(id, queue.is_some());
            (decision, ledger.token(id))
        };
        match (decision, queue, token) {
            (Delivery::Deliver, Some(queue), Some(token)) => {
                let mail = Mail {
                    id,
                    attempt,
                    payload,
                    shared: self.clone(),
                    token,
                    run: format!("mail-{id}"),
                    cancellable: true,
                    acked: false,
                    held: false,
                };
                // A closed queue drops the mail, whose Drop abandons it.
                let _ = queue.send(mail);
            }
            (Delivery::Reack(outcome), _, _) => {
                info!("mail {id} redelivered after it was done; reporting it done again");
                self.outbox.post(self.end_event(id, outcome, Vec::new()));
            }
            (Delivery::Duplicate, _, _) => {
                warn!("mail {id} delivered again while still in progress; ignored");
            }
            (Delivery::Deliver | Delivery::Declined, _, _) => {
                self.ledger().abandon(id);
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

    /// Starts `mail` as `start` says: `MailStarted` in protocol 3, sent
    /// under the ledger's lock so a cancel's verdict is ordered with it;
    /// `false` when a cancel ended the item before it started.
    fn start(&self, mail: &mut Mail, start: Start) -> bool {
        let run = start.run.unwrap_or_else(|| format!("mail-{}", mail.id));
        let mut ledger = self.ledger();
        if !ledger.start(mail.id, start.cancellable, &run) {
            return false;
        }
        mail.run = run;
        mail.cancellable = start.cancellable;
        if self.items() {
            self.outbox.post(Event::MailStarted {
                id: mail.id,
                cancellable: start.cancellable,
            });
        }
        true
    }

    /// A held item was done or dropped: sends `Drained` if that was the
    /// last thing a drain waited for. Posted under the work lock, so it is
    /// ordered after the events of steps that finished before it.
    fn settle(&self) {
        let mut work = self.work();
        if let Some(event) = work.settle_mail() {
            self.outbox.post(event);
        }
    }

    /// Starts a drain (for `Drain`, or a lease that ran out): first every
    /// item whose handler waits in `ask` is given back, then the work
    /// ledger drains (`Drained` now if nothing else is held). Both under
    /// the ledger's lock, so an `ask` either waits already (and is given
    /// back here) or sees the drain (and gives its item back itself).
    pub(crate) fn drain(&self, cause: CancelCause) {
        let mut ledger = self.ledger();
        let mut work = self.work();
        if !work.is_draining() {
            for id in ledger.waiting_for_answers() {
                self.give_back(&mut ledger, &mut work, id, cause);
            }
        }
        for event in work.drain(cause) {
            self.outbox.post(event);
        }
    }

    /// Gives item `id` back (`GiveBack { id, awaiting_answer: true }`) and
    /// settles it, so it no longer holds a drain (`Drained` follows if it
    /// was the last thing held). The caller holds both locks, ledger first.
    fn give_back(&self, ledger: &mut MailLedger, work: &mut Work, id: u64, cause: CancelCause) {
        if !ledger.give_back(id, cause) {
            return;
        }
        info!(
            "mail {id} given back to the supervisor: its handler waits for an answer and this child is draining ({})",
            cause.as_str()
        );
        self.outbox.post(Event::GiveBack {
            id,
            awaiting_answer: true,
        });
        if let Some(event) = work.settle_mail() {
            self.outbox.post(event);
        }
    }

    /// An `Answer` from the supervisor: resolves the item's `ask` calls of
    /// that key, or is ignored.
    pub(crate) fn answer(&self, id: u64, key: &str, value: Vec<u8>) {
        if !self.ledger().answer(id, key, value) {
            info!(
                "answer to question {key:?} of mail {id} ignored: no handler of this child asked it, or it was answered already"
            );
        }
    }

    /// Fails unless the supervisor speaks protocol 3 (`what` is asked).
    fn require_items(&self, what: &'static str) -> Result<(), AskError> {
        if self.items() {
            Ok(())
        } else {
            Err(AskError::Unsupported {
                what,
                protocol: self.protocol,
            })
        }
    }

    /// Fails when an event of `bytes` would not fit in a frame.
    fn check_frame(&self, event: &'static str, bytes: usize) -> Result<(), AskError> {
        if bytes > self.max_frame_bytes as usize {
            return Err(AskError::FrameTooLarge {
                event,
                bytes,
                max_frame_bytes: self.max_frame_bytes,
            });
        }
        Ok(())
    }
}

/// An `ask` waiting for its answer, counted on its item while it waits (a
/// drain gives back only items whose handler waits), however the wait ends.
struct Waiting<'a> {
    shared: &'a MailShared,
    id: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(item) = self.shared.ledger().in_flight.get_mut(&self.id) {
            item.questions.waiting = item.questions.waiting.saturating_sub(1);
        }
    }
}

/// The bytes of a `MailDone` frame body with this id, outcome and result
/// size, counting the sequence number at its largest: what must fit in
/// `max_frame_bytes`.
pub(crate) fn mail_done_frame_bytes(id: u64, outcome: &Outcome, result_len: usize) -> usize {
    use question::varint_len as varint;
    const SEQ: usize = 9;
    const VARIANT: usize = 1;
    let outcome_bytes = 1 + match outcome {
        Outcome::Failed(reason) => varint(reason.len() as u64) + reason.len(),
        Outcome::Succeeded | Outcome::Cancelled => 0,
    };
    SEQ + VARIANT + varint(id) + outcome_bytes + varint(result_len as u64) + result_len
}

/// One piece of mail: end it with [`Mail::done`] (with the handler's
/// result) or [`Mail::ack`] once processed. Dropping it unfinished leaves
/// it to be delivered again. While held, it keeps a drain from reporting
/// `Drained`.
#[derive(Debug)]
pub struct Mail {
    id: u64,
    attempt: u32,
    payload: Vec<u8>,
    shared: MailShared,
    token: CancelToken,
    run: String,
    cancellable: bool,
    acked: bool,
    held: bool,
}

impl Mail {
    /// The store-assigned id (stable across redeliveries).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// 1 on the first delivery; more when the child that held it before
    /// died or was recycled without finishing it, so work it may have
    /// done already can be finalized instead of re-run. In protocol 3 it
    /// counts starts: an item delivered but never started comes again
    /// with the same attempt.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The payload as sent.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The run the item's steps belong to ([`Start::run`], else
    /// `mail-<id>`): a cancel of the item cancels this run's steps.
    pub fn run(&self) -> &str {
        &self.run
    }

    /// Whether its handler declared it can be cancelled ([`Start`]).
    pub fn is_cancellable(&self) -> bool {
        self.cancellable
    }

    /// Fires when this item must stop: a verified cancel of this item
    /// (protocol 3, [`CancelCause::Cancel`]; only if it is cancellable),
    /// the item given back while its handler waited in [`Self::ask`] (with
    /// the drain's cause), or the runtime closing. Its run's steps are
    /// cancelled with a cancel of the item; work outside steps should
    /// watch this token and end the item `Cancelled`.
    pub fn token(&self) -> &CancelToken {
        &self.token
    }

    /// Asks a person a question about this item and waits for the answer,
    /// however long it takes (protocol 3): `Ask { id, key, prompt }` goes
    /// up, and the supervisor's `Answer` of the same key is returned as the
    /// JSON value it holds. `key` names the question within the item (1 to
    /// 256 bytes); `prompt` is any value serde writes as JSON of at most
    /// 64 KiB. Both are checked before anything is sent.
    ///
    /// Answers are remembered for the item: asking an answered key again
    /// returns at once, without a frame, and asks of one key waiting
    /// together all get its one answer (only the first sends `Ask`). A
    /// redelivered item asking again gets the stored answer at once from
    /// the supervisor, so the work before an `ask` runs again on each
    /// attempt: make it idempotent, or ask first.
    ///
    /// Fails with [`AskError::GivenBack`] when a drain begins (or the lease
    /// runs out) while it waits, or began before it asked: the item went
    /// back to the supervisor, which delivers it again once the question
    /// is answered. Let that error pass; ending the item afterwards
    /// ([`Self::done`]) sends nothing. Fails with
    /// [`AskError::Cancelled`] when the item is cancelled (end it
    /// `Cancelled`) or the runtime closes, and with
    /// [`AskError::Unsupported`] under a supervisor of protocol 2.
    ///
    /// ```no_run
    /// use serde_json::json;
    /// use wfhost_child::{AskError, Mail, Outcome};
    ///
    /// # async fn handle(mail: Mail) -> Result<(), Box<dyn std::error::Error>> {
    /// let (outcome, result) = match mail.ask("approve", &json!({"amount": 12})).await {
    ///     Ok(answer) => (Outcome::Succeeded, serde_json::to_vec(&answer)?),
    ///     // Back with the supervisor: the next attempt gets the answer.
    ///     Err(AskError::GivenBack(_)) => return Ok(()),
    ///     Err(AskError::Cancelled { .. }) => (Outcome::Cancelled, Vec::new()),
    ///     Err(e) => (Outcome::Failed(e.to_string()), Vec::new()),
    /// };
    /// mail.done(outcome, result).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn ask<T: Serialize + ?Sized>(
        &self,
        key: &str,
        prompt: &T,
    ) -> Result<Value, AskError> {
        let id = self.id;
        self.shared.require_items("ask")?;
        question::check_key(key)?;
        let prompt = question::json_of("prompt", prompt)?;
        self.shared.check_frame(
            "Ask",
            question::ask_frame_bytes(id, key.len(), prompt.len()),
        )?;
        let mut reply = {
            let mut ledger = self.shared.ledger();
            let Some(item) = ledger.in_flight.get(&id) else {
                // Held by the application, yet not in flight: given back.
                return Err(AskError::GivenBack(id));
            };
            if let Some(cause) = self.token.cause() {
                return Err(AskError::Cancelled { id, cause });
            }
            let found = item.questions.find(key);
            if let Found::Answered(value) = &found {
                return question::parse_answer(key, value);
            }
            // An answer must be waited for: not once a drain began.
            let mut work = self.shared.work();
            if let Some(cause) = work.drain_cause() {
                self.shared.give_back(&mut ledger, &mut work, id, cause);
                return Err(AskError::GivenBack(id));
            }
            drop(work);
            let Some(item) = ledger.in_flight.get_mut(&id) else {
                return Err(AskError::GivenBack(id));
            };
            let reply = match found {
                Found::Waiting(reply) => reply,
                Found::Answered(_) | Found::New => {
                    let reply = item.questions.open(id, key)?;
                    // Under the lock: ordered before a GiveBack of the item.
                    self.shared.outbox.post(Event::Ask {
                        id,
                        key: key.to_owned(),
                        prompt,
                    });
                    reply
                }
            };
            item.questions.waiting += 1;
            reply
        };
        let _waiting = Waiting {
            shared: &self.shared,
            id,
        };
        // The reply first: a give-back fires the token too, and is the
        // reason that counts.
        let cancelled = tokio::select! {
            biased;
            replied = reply.wait_for(|r| *r != Reply::Pending) => replied.is_err().then_some(None),
            cause = self.token.cancelled() => Some(Some(cause)),
        };
        match cancelled {
            Some(Some(cause)) => return Err(AskError::Cancelled { id, cause }),
            // The question was dropped with its item: given back.
            Some(None) => return Err(AskError::GivenBack(id)),
            None => {}
        }
        let reply = reply.borrow().clone();
        match reply {
            Reply::Answered(value) => question::parse_answer(key, &value),
            Reply::GivenBack | Reply::Pending => Err(AskError::GivenBack(id)),
        }
    }

    /// Reports how far the handler got (protocol 3): `Progress { id, data }`
    /// with `data` as JSON of at most 64 KiB (checked before anything is
    /// sent), kept with the item in the supervisor's event log. Queued at
    /// once, not waited for. Fails with [`AskError::GivenBack`] once the
    /// item was given back, and with [`AskError::Unsupported`] under a
    /// supervisor of protocol 2.
    pub fn progress<T: Serialize + ?Sized>(&self, data: &T) -> Result<(), AskError> {
        let id = self.id;
        self.shared.require_items("progress")?;
        let data = question::json_of("progress data", data)?;
        self.shared
            .check_frame("Progress", question::progress_frame_bytes(id, data.len()))?;
        let ledger = self.shared.ledger();
        if !ledger.holds(id) {
            return Err(AskError::GivenBack(id));
        }
        // Under the lock: never after a GiveBack of the item.
        self.shared.outbox.post(Event::Progress { id, data });
        Ok(())
    }

    /// Reports how processing ended, with no result (`MailDone` with an
    /// empty result in protocol 3, `MailAck` in protocol 2); see
    /// [`Self::done`].
    pub async fn ack(self, outcome: Outcome) -> Result<(), RuntimeError> {
        self.done(outcome, Vec::new()).await
    }

    /// Reports how processing ended and what the handler returned:
    /// `MailDone { id, outcome, result }` in protocol 3 (`MailAck`, without
    /// the result, in protocol 2), followed by `Drained` if a drain was
    /// waiting only for this, and waits until it is written.
    ///
    /// A result whose `MailDone` would not fit in the Welcome's
    /// `max_frame_bytes` is not sent: the item ends `Failed("result of N
    /// bytes does not fit in a frame of max_frame_bytes M")` with an empty
    /// result, and this returns [`RuntimeError::ResultTooLarge`].
    ///
    /// An item given back ([`AskError::GivenBack`]) is no longer this
    /// child's: nothing is sent, and this returns `Ok`.
    pub async fn done(mut self, outcome: Outcome, result: Vec<u8>) -> Result<(), RuntimeError> {
        self.acked = true;
        if self.shared.ledger().take_given_back(self.id) {
            // Settled when it was given back.
            self.held = false;
            debug!("mail {}: given back, so its end is discarded", self.id);
            return Ok(());
        }
        let mut too_large = None;
        let (outcome, result) = if self.shared.items()
            && mail_done_frame_bytes(self.id, &outcome, result.len())
                > self.shared.max_frame_bytes as usize
        {
            let error = RuntimeError::ResultTooLarge {
                bytes: result.len(),
                max_frame_bytes: self.shared.max_frame_bytes,
            };
            let reason = format!(
                "result of {} bytes does not fit in a frame of max_frame_bytes {}",
                result.len(),
                self.shared.max_frame_bytes
            );
            warn!("mail {}: {reason}; reported Failed", self.id);
            too_large = Some(error);
            (Outcome::Failed(reason), Vec::new())
        } else {
            (outcome, result)
        };
        let pending = {
            let mut ledger = self.shared.ledger();
            // Posted under the lock so a racing redelivery sees it done.
            ledger.ack(self.id, &outcome).then(|| {
                self.shared
                    .outbox
                    .post_tracked(self.shared.end_event(self.id, outcome, result))
            })
        };
        // After the end is queued, so a Drained it makes due follows it.
        self.release();
        if let Some(pending) = pending {
            pending.wait().await?;
        }
        too_large.map_or(Ok(()), Err)
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
            let mut ledger = self.shared.ledger();
            if ledger.take_given_back(self.id) {
                // Settled when it was given back.
                self.held = false;
            } else {
                ledger.abandon(self.id);
            }
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

    /// The next piece of mail, started with a cancellable handler of run
    /// `mail-<id>` ([`Start::new`]) and held until done or dropped; `None`
    /// once a drain has started or the runtime has closed (mail still
    /// queued then is dropped, left for redelivery to the next child).
    pub async fn next(&mut self) -> Option<Mail> {
        self.next_with(|_| Start::new()).await
    }

    /// [`Self::next`], started as `start` decides from the item (its id,
    /// attempt and payload; its handler not yet called): whether it can be
    /// cancelled, and its run. In protocol 3 `MailStarted` goes up before
    /// the item is returned. An item a cancel ended before it started is
    /// skipped (`start` may be asked about it and not see it returned).
    pub async fn next_with(&mut self, mut start: impl FnMut(&Mail) -> Start) -> Option<Mail> {
        let mut rx = self.rx.lock().await;
        loop {
            let taking = self.shared.work().takes_mail();
            if !taking {
                discard(&mut rx);
                return None;
            }
            let mut mail = rx.recv().await?;
            if !self.shared.ledger().holds(mail.id) {
                // Cancelled while queued: done already, never handed out.
                mail.acked = true;
                continue;
            }
            let how = start(&mail);
            if !self.shared.hand_out(&mut mail) {
                // A drain or close came first: `mail` is dropped (abandoned)
                // and the next turn discards the rest.
                continue;
            }
            if self.shared.start(&mut mail, how) {
                return Some(mail);
            }
            // Cancelled before it started: dropping it settles it.
            mail.acked = true;
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
        wired_as(2, DEFAULT_MAX_FRAME_BYTES)
    }

    /// A mail stream speaking `protocol` under a `max_frame_bytes` limit.
    fn wired_as(protocol: u32, max_frame_bytes: u32) -> Wired {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (child_reader, writer) =
            wfhost_ipc::split::<Control, Event>(theirs, DEFAULT_MAX_FRAME_BYTES);
        let (peer, peer_writer) =
            wfhost_ipc::split::<Event, Control>(ours, DEFAULT_MAX_FRAME_BYTES);
        let shared = MailShared {
            ledger: Arc::new(Mutex::new(MailLedger::default())),
            work: Arc::new(Mutex::new(Work::default())),
            outbox: Outbox::spawn(writer, max_frame_bytes),
            protocol,
            max_frame_bytes,
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
            let mut ids: Vec<u64> = self.shared.ledger().in_flight.keys().copied().collect();
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

    #[tokio::test]
    async fn in_protocol_3_an_item_starts_when_handed_out_and_ends_with_its_result() {
        let mut w = wired_as(3, DEFAULT_MAX_FRAME_BYTES);
        w.deliver(1);
        w.deliver(2);
        let first = w.stream.next().await.unwrap();
        assert_eq!(
            w.next_event().await,
            Event::MailStarted {
                id: 1,
                cancellable: true
            }
        );
        assert_eq!(first.run(), "mail-1");
        let second = w
            .stream
            .next_with(|m| {
                assert_eq!(m.payload(), [1]);
                Start::new().not_cancellable().run("r2")
            })
            .await
            .unwrap();
        assert_eq!(
            w.next_event().await,
            Event::MailStarted {
                id: 2,
                cancellable: false
            }
        );
        assert_eq!((second.run(), second.is_cancellable()), ("r2", false));
        first.done(Outcome::Succeeded, vec![0, 0xff]).await.unwrap();
        assert_eq!(
            w.next_event().await,
            Event::MailDone {
                id: 1,
                outcome: Outcome::Succeeded,
                result: vec![0, 0xff]
            }
        );
        second.ack(Outcome::Failed("no".into())).await.unwrap();
        assert_eq!(
            w.next_event().await,
            Event::MailDone {
                id: 2,
                outcome: Outcome::Failed("no".into()),
                result: Vec::new()
            }
        );
        w.deliver(1);
        assert_eq!(
            w.next_event().await,
            Event::MailDone {
                id: 1,
                outcome: Outcome::Succeeded,
                result: Vec::new()
            },
            "a redelivery is done again, its result left to the supervisor's memory"
        );
    }

    #[tokio::test]
    async fn in_protocol_2_the_result_is_dropped_and_nothing_of_protocol_3_is_sent() {
        let mut w = wired();
        w.deliver(1);
        let mail = w.stream.next().await.unwrap();
        mail.done(Outcome::Succeeded, vec![1, 2, 3]).await.unwrap();
        assert_eq!(
            w.next_event().await,
            Event::MailAck {
                id: 1,
                outcome: Outcome::Succeeded
            }
        );
    }

    #[tokio::test]
    async fn a_result_too_large_for_a_frame_ends_the_item_failed_and_says_so() {
        const MAX: u32 = 1024;
        let mut w = wired_as(3, MAX);
        w.deliver(1);
        let mail = w.stream.next().await.unwrap();
        w.next_event().await;
        let err = mail
            .done(Outcome::Succeeded, vec![b'r'; 2000])
            .await
            .unwrap_err();
        assert_eq!(
            err,
            RuntimeError::ResultTooLarge {
                bytes: 2000,
                max_frame_bytes: MAX
            }
        );
        assert_eq!(
            w.next_event().await,
            Event::MailDone {
                id: 1,
                outcome: Outcome::Failed(
                    "result of 2000 bytes does not fit in a frame of max_frame_bytes 1024".into()
                ),
                result: Vec::new()
            }
        );
        w.deliver(1);
        assert!(
            matches!(
                w.next_event().await,
                Event::MailDone {
                    outcome: Outcome::Failed(_),
                    ..
                }
            ),
            "the redelivery repeats the Failed outcome"
        );
    }

    #[test]
    fn the_frame_size_of_a_mail_done_is_counted_exactly_for_the_largest_seq() {
        use wfhost_ipc::{Frame, encode_frame};
        for id in [0, 250, 251, 65_535, 65_536, u64::MAX] {
            for outcome in [
                Outcome::Succeeded,
                Outcome::Cancelled,
                Outcome::Failed("x".repeat(300)),
            ] {
                for len in [0, 250, 251, 70_000] {
                    let frame = Frame {
                        seq: u64::MAX,
                        body: Event::MailDone {
                            id,
                            outcome: outcome.clone(),
                            result: vec![7; len],
                        },
                    };
                    let mut out = Vec::new();
                    encode_frame(&frame, u32::MAX, &mut out).unwrap();
                    assert_eq!(
                        mail_done_frame_bytes(id, &outcome, len),
                        out.len() - wfhost_ipc::frame::HEADER_BYTES,
                        "{id} {outcome:?} {len}"
                    );
                }
            }
        }
    }

    #[tokio::test]
    async fn a_cancel_of_an_item_not_started_ends_it_and_it_is_never_handed_out() {
        let mut w = wired_as(3, DEFAULT_MAX_FRAME_BYTES);
        w.deliver(1);
        w.deliver(2);
        assert_eq!(w.shared.ledger().cancel(1), ItemCancel::Unstarted);
        let mail = w.stream.next().await.unwrap();
        assert_eq!(mail.id(), 2, "item 1 is skipped");
        assert_eq!(
            w.next_event().await,
            Event::MailStarted {
                id: 2,
                cancellable: true
            }
        );
        assert_eq!(
            w.shared.ledger().cancel(2),
            ItemCancel::Started {
                run: "mail-2".into()
            }
        );
        assert_eq!(mail.token().cause(), Some(CancelCause::Cancel));
        assert_eq!(w.shared.ledger().cancel(9), ItemCancel::NotHeld);
        w.deliver(1);
        assert_eq!(
            w.next_event().await,
            Event::MailDone {
                id: 1,
                outcome: Outcome::Cancelled,
                result: Vec::new()
            },
            "done, Cancelled, for a redelivery"
        );
    }

    #[tokio::test]
    async fn an_item_declared_not_cancellable_is_not_cancelled() {
        let w = wired_as(3, DEFAULT_MAX_FRAME_BYTES);
        w.deliver(1);
        let mut stream = w.stream.clone();
        let mail = stream
            .next_with(|_| Start::new().not_cancellable())
            .await
            .unwrap();
        assert_eq!(w.shared.ledger().cancel(1), ItemCancel::NotSupported);
        assert!(!mail.token().is_cancelled());
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
        assert!(!l.holds(3), "declined mail is not in flight");
        assert_eq!(l.receive(3, true), Delivery::Deliver);
    }
}
