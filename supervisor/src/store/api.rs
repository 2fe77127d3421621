//! The store's interface: one trait per kind of thing stored, and
//! [`Store`], all of them, which is what the supervisor holds. A backend
//! implements each noun's trait in its file of that noun
//! (`sqlite/mail.rs`: `impl MailStore for SqliteStore`), so an operation
//! is written once here and once per backend. The methods are storage
//! operations, each one transaction; the rules they follow (how journal
//! records are numbered, chained and sealed, how mail is admitted, which
//! states it moves between and when it is quarantined) are in
//! `crate::journal`, [`super::mail`], [`super::held`] and
//! [`super::mail_admin`], so a second backend does not re-implement them.

use ed25519_dalek::SigningKey;

use super::held::{AckOf, CancelFound, Ending, Holder, Landed, Replayed, Settle};
use super::mail_admin::{MailQuery, MailView, Retried};
use super::questions::{Answering, Question};
use super::{
    Accepted, ChildRecord, EventRecord, MailCounts, MailItem, MailPage, NewEvent, Offer, StoreError,
};
use crate::journal::{JournalHead, JournalHeads, JournalRecord, NewJournalEntry};

/// Durable state of one supervisor: every store operation, grouped by
/// what it holds. Every write is durable when it returns. A backend
/// implements the five traits and gets this one.
pub trait Store:
    ChildrenStore + JournalStore + MailStore + MailAdmin + EventStore + QuestionStore + Grouping + Send
{
}

impl<T> Store for T where
    T: ChildrenStore
        + JournalStore
        + MailStore
        + MailAdmin
        + EventStore
        + QuestionStore
        + Grouping
        + Send
{
}

/// Several writes in one commit (group commit, `handle.rs`): between
/// [`Grouping::begin_group`] and [`Grouping::end_group`] each write runs
/// inside the group's transaction (a savepoint of it, so one refused
/// write rolls back only its own part), and none of them is durable
/// before the group commits.
pub trait Grouping {
    /// Opens a group: `Ok(false)` when this backend writes each call in a
    /// transaction of its own (then nothing is grouped).
    fn begin_group(&mut self) -> Result<bool, StoreError>;

    /// Why the open group's transaction is gone, if it is: the database
    /// may roll all of it back after an error (a full disk, an I/O error,
    /// a lost connection), and then none of the writes before is kept.
    fn group_lost(&mut self) -> Option<StoreError>;

    /// Commits the group; an error leaves it unknown whether it landed.
    fn end_group(&mut self) -> Result<(), StoreError>;
}

/// The children table: what is running, for orphan clean-up after a crash.
pub trait ChildrenStore {
    /// Remembers a spawned child (replacing any record of the same pid).
    fn record_child(&mut self, child: &ChildRecord) -> Result<(), StoreError>;

    /// Forgets a child once it has been reaped.
    fn forget_child(&mut self, deployment: &str, pid: u32) -> Result<(), StoreError>;

    /// Every remembered child, by deployment then pid.
    fn children(&mut self) -> Result<Vec<ChildRecord>, StoreError>;
}

/// The journal: append-only, signed and chained records of decisions
/// (sealed by `crate::journal`; a backend only stores them).
pub trait JournalStore {
    /// In one write transaction that excludes every other append (from
    /// any connection or process): reads the journal's head (the highest
    /// seq ever assigned and its hash), asks `seal` for the record that
    /// follows it, inserts that record and makes it the head.
    fn append_sealed(
        &mut self,
        seal: &dyn Fn(JournalHead) -> JournalRecord,
    ) -> Result<JournalRecord, StoreError>;

    /// Numbers, chains, signs and durably appends one journal record, in
    /// one transaction with reading the head it follows.
    fn append_journal(
        &mut self,
        key: &SigningKey,
        entry: NewJournalEntry,
    ) -> Result<JournalRecord, StoreError> {
        self.append_sealed(&|head| JournalRecord::next(head, entry.clone(), key))
    }

    /// At most `limit` journal records with seq greater than `after`, in
    /// seq order: all of them, or one deployment's.
    fn read_journal(
        &mut self,
        deployment: Option<&str>,
        after: u64,
        limit: usize,
    ) -> Result<Vec<JournalRecord>, StoreError>;

    /// Journal records in seq order: all of them, or one deployment's.
    fn journal(&mut self, deployment: Option<&str>) -> Result<Vec<JournalRecord>, StoreError> {
        self.read_journal(deployment, 0, usize::MAX)
    }

    /// At most `limit` journal records with seq greater than `after`,
    /// ascending: for checking a long journal page by page.
    fn journal_after(
        &mut self,
        after: u64,
        limit: usize,
    ) -> Result<Vec<JournalRecord>, StoreError> {
        self.read_journal(None, after, limit)
    }

    /// The journal's head and the last head the start-up check verified.
    fn journal_heads(&mut self) -> Result<JournalHeads, StoreError>;

    /// Records `head` as verified: the next start-up check starts there.
    fn set_verified_head(&mut self, head: JournalHead) -> Result<(), StoreError>;
}

/// Mail as the supervisor moves it: accepted, taken by a holder,
/// acknowledged, replayed when its holder ends, pruned when done.
pub trait MailStore {
    /// Durably accepts one mail item into `deployment`'s inbox and returns
    /// its id, or refuses with [`StoreError::InboxFull`] (writing nothing)
    /// when `max_inbox` items already wait in its inbox and processing. The
    /// `mail_accepted` event is written in the same transaction. With an
    /// idempotency `key` already used for this deployment, the earlier
    /// item's id comes back and nothing is written (or
    /// [`StoreError::KeyReused`] if its payload differs), so a sender can
    /// retry after losing the answer without enqueuing twice. The rules
    /// are [`super::mail::admit`]'s. (The supervisor offers through
    /// [`MailStore::enqueue_mail_many`]; tests offer one at a time.)
    #[cfg(test)]
    fn enqueue_mail(
        &mut self,
        deployment: &str,
        key: Option<&str>,
        payload: &[u8],
        max_inbox: u64,
        at_ms: u64,
    ) -> Result<Accepted, StoreError> {
        let offer = Offer {
            deployment: deployment.to_owned(),
            key: key.map(str::to_owned),
            payload: payload.to_vec(),
            max_inbox,
            deadline_ms: None,
            at_ms,
        };
        let mut answers = self.enqueue_mail_many(std::slice::from_ref(&offer))?;
        answers.pop().expect("one answer per offer")
    }

    /// [`MailStore::enqueue_mail`] for several offers (of any deployments) in
    /// one transaction, so concurrent senders share one durable commit:
    /// each answer as `enqueue_mail`'s, in order; the outer error when the
    /// transaction itself failed (nothing of it was written).
    fn enqueue_mail_many(
        &mut self,
        offers: &[Offer],
    ) -> Result<Vec<Result<Accepted, StoreError>>, StoreError>;

    /// Moves items from the head of `deployment`'s inbox (FIFO, by id) to
    /// processing, held by `holder`, and returns them in that order for
    /// sending to it: at most `limit`, stopping where
    /// [`wfhost_policy::item::takeable`] says (a suspect goes alone). Each take is
    /// a delivery: counted, and begun in the item's history at `at_ms`.
    #[cfg(test)]
    fn take_mail(
        &mut self,
        deployment: &str,
        holder: &Holder,
        limit: usize,
        at_ms: u64,
    ) -> Result<Vec<MailItem>, StoreError> {
        self.take_mail_for(deployment, holder, limit, at_ms, true)
    }

    /// [`MailStore::take_mail`] for a holder whose takes are starts
    /// (`starts_on_take`: a protocol-2 child, whose handler takes what it
    /// is sent) or whose handler says when it starts an item (protocol 3:
    /// [`Settle::Started`]). Each item's `attempt` is its starts so far
    /// plus one.
    fn take_mail_for(
        &mut self,
        deployment: &str,
        holder: &Holder,
        limit: usize,
        at_ms: u64,
        starts_on_take: bool,
    ) -> Result<Vec<MailItem>, StoreError>;

    /// Marks an item `holder` holds done with the child's outcome (and an
    /// empty result: `ack_mail_many` stores results), ending
    /// its delivery in the history and writing the `mail_done` event in
    /// the same transaction; `false` (and no change) when `holder` does not
    /// hold it in `deployment`: a duplicate, stray or late ack.
    #[cfg(test)]
    fn ack_mail(
        &mut self,
        deployment: &str,
        holder: &Holder,
        id: u64,
        outcome: &str,
        at_ms: u64,
    ) -> Result<bool, StoreError> {
        let one = AckOf {
            holder: holder.clone(),
            id,
            outcome: outcome.to_owned(),
            result: Vec::new(),
        };
        let landed = self.ack_mail_many(deployment, std::slice::from_ref(&one), at_ms)?;
        Ok(landed.first().copied().unwrap_or(false))
    }

    /// [`MailStore::ack_mail`] for several acknowledgements in one transaction,
    /// so they cost one durable commit: each answer as `ack_mail`'s, in
    /// order.
    fn ack_mail_many(
        &mut self,
        deployment: &str,
        acks: &[AckOf],
        at_ms: u64,
    ) -> Result<Vec<bool>, StoreError> {
        let writes: Vec<Settle> = acks.iter().cloned().map(Settle::Done).collect();
        let landed = self.settle_mail(deployment, &writes, at_ms)?;
        Ok(landed.iter().map(Landed::held).collect())
    }

    /// Starts, acknowledgements, questions and give-backs in one
    /// transaction, in order, each as its holder's: ignored unless its
    /// holder holds the item (a start: held and not yet started), as
    /// [`MailStore::ack_mail`] answers. A done item that was never
    /// reported started counts its delivery as a start. A question is
    /// stored once per (item, key); asked again, its stored answer comes
    /// back. A given-back item goes back to the inbox uncounted, awaiting
    /// its answers.
    fn settle_mail(
        &mut self,
        deployment: &str,
        writes: &[Settle],
        at_ms: u64,
    ) -> Result<Vec<Landed>, StoreError>;

    /// Item `id`, still held by `holder`, ends `failed` with `reason` (its
    /// deadline passed and its child did not stop it): taken from the
    /// holder, whose later ack is then ignored; false when `holder` no
    /// longer holds it.
    fn fail_held_mail(
        &mut self,
        deployment: &str,
        holder: &Holder,
        id: u64,
        reason: &str,
        at_ms: u64,
    ) -> Result<bool, StoreError>;

    /// A cancel of item `id` (`by` whom, why), decided in one transaction:
    /// in the inbox it ends `cancelled` at once (with its `mail_done`
    /// event and a history entry) and is never delivered; held by a child,
    /// the cancel is recorded so that its holder's end cancels it instead
    /// of returning it; ended, nothing changes. `None`: no such item.
    fn cancel_mail(
        &mut self,
        id: u64,
        reason: &str,
        by: &str,
        at_ms: u64,
    ) -> Result<Option<CancelFound>, StoreError>;

    /// `holder`'s wiring ended: every item it holds in `deployment` goes
    /// back to the head of the inbox in original order, or (a counted
    /// ending that brings its failures to `max_deliveries`) to the dead
    /// state, as [`wfhost_policy::item::after_ending`] rules; the deliveries end in
    /// the history with the ending's cause. Other holders' items stay.
    fn replay_mail(
        &mut self,
        deployment: &str,
        holder: &Holder,
        ending: &Ending,
        max_deliveries: u32,
    ) -> Result<Replayed, StoreError>;

    /// Every processing item of every deployment back to the head of its
    /// inbox, not counted (at start-up, after a supervisor stopped or died
    /// with mail in flight: its children are gone); returns how many.
    #[cfg(test)]
    fn replay_all_mail(&mut self, at_ms: u64) -> Result<u64, StoreError> {
        self.replay_all_mail_holding(at_ms, &[])
    }

    /// [`MailStore::replay_all_mail`], where the deployments named in
    /// `hold` (`redeliver = "hold"`) hold each started item for an
    /// operator (`interrupted`) instead; returns how many went back or
    /// were held.
    fn replay_all_mail_holding(&mut self, at_ms: u64, hold: &[String]) -> Result<u64, StoreError>;

    /// Deletes done items acknowledged before `done_before_ms` (Unix ms),
    /// and with them their idempotency keys and histories
    /// (`mail_retention`); returns how many went. Inbox, processing and
    /// dead items are never pruned.
    fn prune_done_mail(&mut self, done_before_ms: u64) -> Result<u64, StoreError>;

    /// How many of `deployment`'s items are in each state.
    fn mail_counts(&mut self, deployment: &str) -> Result<MailCounts, StoreError>;

    #[cfg(test)]
    /// Ids of `deployment`'s done items, ascending (for tests and audits).
    fn mail_done_ids(&mut self, deployment: &str) -> Result<Vec<u64>, StoreError>;
}

/// Mail as operators see it: listed, read, retried and purged.
pub trait MailAdmin {
    /// A page of stored items with their histories, ascending by id, and
    /// how many more match.
    fn list_mail(&mut self, query: &MailQuery) -> Result<MailPage, StoreError>;

    /// One item with its history, if it is stored.
    fn mail_item(&mut self, id: u64) -> Result<Option<MailView>, StoreError>;

    /// Item `id`'s result as its child gave it: empty until it is done
    /// (and for a protocol-2 child's items); `None` when no such item is
    /// stored.
    fn mail_result(&mut self, id: u64) -> Result<Option<Vec<u8>>, StoreError>;

    /// At most `len` bytes of item `id`'s payload from `offset` (empty past
    /// its end); `None` when no such item is stored.
    fn mail_payload(
        &mut self,
        id: u64,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>, StoreError>;

    /// An operator's retry in `deployment`: item `id` (refused with
    /// [`StoreError::UnknownMail`] or [`StoreError::NotDead`], changing
    /// nothing, unless it is dead there), or its oldest dead items (at most
    /// [`super::mail_admin::RETRY_BATCH`]), back to the inbox with failures
    /// and attempts reset; the history notes who (`by`).
    fn retry_dead_mail(
        &mut self,
        deployment: &str,
        id: Option<u64>,
        by: &str,
        at_ms: u64,
    ) -> Result<Retried, StoreError>;

    /// Deletes dead items (one deployment's, or all) quarantined before
    /// `dead_before_ms`, with their histories and keys; returns how many
    /// went per deployment.
    fn purge_dead_mail(
        &mut self,
        deployment: Option<&str>,
        dead_before_ms: u64,
    ) -> Result<Vec<(String, u64)>, StoreError>;
}

/// Questions a handler asked a person, and their answers
/// ([`super::questions`]); asking is a [`Settle::Asked`].
pub trait QuestionStore {
    /// Answers question `key` of item `id` with `value` (JSON) given `by`
    /// (JSON), in one transaction with the item's release (an awaiting
    /// item with no other question open becomes takeable) and its
    /// `question_answered` event; the same value again changes nothing; a
    /// different one is refused. `None`: no such item.
    fn answer_question(
        &mut self,
        id: u64,
        key: &str,
        value: &[u8],
        by: &str,
        at_ms: u64,
    ) -> Result<Option<Answering>, StoreError>;

    /// Open questions (of `deployment`, or every one), oldest first, at
    /// most `limit`.
    fn open_questions(
        &mut self,
        deployment: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Question>, StoreError>;

    /// Every question of item `id`, answered or not, by when asked.
    fn questions_of(&mut self, id: u64) -> Result<Vec<Question>, StoreError>;
}

/// The durable, sequenced event log.
pub trait EventStore {
    /// Durably appends events in one transaction (events come in bursts;
    /// one commit for many keeps the log cheap) and returns their seqs
    /// (strictly increasing, never reused, even after pruning).
    fn append_events(&mut self, events: &[NewEvent]) -> Result<Vec<u64>, StoreError>;

    /// Durably appends one event and returns its seq.
    #[cfg(test)]
    fn append_event(
        &mut self,
        at_ms: u64,
        deployment: Option<&str>,
        kind: &str,
        body: &serde_json::Value,
    ) -> Result<u64, StoreError> {
        let event = NewEvent {
            at_ms,
            deployment: deployment.map(str::to_owned),
            kind: kind.to_owned(),
            body: body.clone(),
        };
        let seqs = self.append_events(std::slice::from_ref(&event))?;
        Ok(seqs.first().copied().unwrap_or(0))
    }

    /// At most `limit` events with seq greater than `after`, ascending: a
    /// follower's catch-up from its cursor.
    fn events_after(&mut self, after: u64, limit: usize) -> Result<Vec<EventRecord>, StoreError>;

    /// Deletes all but the newest `keep` events (retention); returns how
    /// many were deleted.
    fn prune_events(&mut self, keep: u64) -> Result<u64, StoreError>;

    /// The highest seq ever assigned (0 when none), even if pruned since:
    /// the cursor for following from now on (the console's pages).
    fn last_event_seq(&mut self) -> Result<u64, StoreError>;
}
