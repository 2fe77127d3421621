//! The one trait every backend implements. Its methods are storage
//! operations, each one transaction; the rules they follow (how journal
//! records are numbered, chained and sealed, how mail is admitted and
//! which states it moves between) are in `crate::journal` and
//! [`super::mail`], so a second backend does not re-implement them.

use ed25519_dalek::SigningKey;

use super::{Accepted, ChildRecord, EventRecord, MailCounts, MailItem, NewEvent, StoreError};
use crate::journal::{JournalHead, JournalHeads, JournalRecord, NewJournalEntry};

/// Durable state of one supervisor. Every write is durable when it returns.
pub trait Store: Send {
    /// Remembers a spawned child (replacing any record of the same pid).
    fn record_child(&mut self, child: &ChildRecord) -> Result<(), StoreError>;

    /// Forgets a child once it has been reaped.
    fn forget_child(&mut self, deployment: &str, pid: u32) -> Result<(), StoreError>;

    /// Every remembered child, by deployment then pid.
    fn children(&mut self) -> Result<Vec<ChildRecord>, StoreError>;

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

    /// Journal records in seq order: all of them, or one deployment's.
    fn journal(&mut self, deployment: Option<&str>) -> Result<Vec<JournalRecord>, StoreError>;

    /// At most `limit` journal records with seq greater than `after`,
    /// ascending: for checking a long journal page by page.
    fn journal_after(&mut self, after: u64, limit: usize)
    -> Result<Vec<JournalRecord>, StoreError>;

    /// The journal's head and the last head the start-up check verified.
    fn journal_heads(&mut self) -> Result<JournalHeads, StoreError>;

    /// Records `head` as verified: the next start-up check starts there.
    fn set_verified_head(&mut self, head: JournalHead) -> Result<(), StoreError>;

    /// Durably accepts one mail item into `deployment`'s inbox and returns
    /// its id, or refuses with [`StoreError::InboxFull`] (writing nothing)
    /// when `max_inbox` items already wait in its inbox and processing. The
    /// `mail_accepted` event is written in the same transaction. With an
    /// idempotency `key` already used for this deployment, the earlier
    /// item's id comes back and nothing is written (or
    /// [`StoreError::KeyReused`] if its payload differs), so a sender can
    /// retry after losing the answer without enqueuing twice. The rules
    /// are [`super::mail::admit`]'s.
    fn enqueue_mail(
        &mut self,
        deployment: &str,
        key: Option<&str>,
        payload: &[u8],
        max_inbox: u64,
        at_ms: u64,
    ) -> Result<Accepted, StoreError>;

    /// Moves the first `limit` inbox items (FIFO, by id) to processing and
    /// returns them in that order, for sending to the child.
    fn take_mail(&mut self, deployment: &str, limit: usize) -> Result<Vec<MailItem>, StoreError>;

    /// Marks a processing item done with the child's outcome, writing the
    /// `mail_done` event in the same transaction; `false` (and no change)
    /// when it is not in processing for `deployment`, i.e. a duplicate or
    /// unknown ack.
    fn ack_mail(
        &mut self,
        deployment: &str,
        id: u64,
        outcome: &str,
        at_ms: u64,
    ) -> Result<bool, StoreError>;

    /// Puts every unacknowledged item of `deployment` back at the head of
    /// its inbox in original order (its child is gone); returns how many.
    fn replay_mail(&mut self, deployment: &str) -> Result<u64, StoreError>;

    /// [`Store::replay_mail`] for every deployment: at start-up, after a
    /// supervisor died with mail in flight.
    fn replay_all_mail(&mut self) -> Result<u64, StoreError>;

    /// Deletes done items acknowledged before `done_before_ms` (Unix ms),
    /// and with them their idempotency keys (`mail_retention`); returns
    /// how many went. Inbox and processing items are never pruned.
    fn prune_done_mail(&mut self, done_before_ms: u64) -> Result<u64, StoreError>;

    /// How many of `deployment`'s items are in each state.
    fn mail_counts(&mut self, deployment: &str) -> Result<MailCounts, StoreError>;

    #[cfg(test)]
    /// Ids of `deployment`'s done items, ascending (for tests and audits).
    fn mail_done_ids(&mut self, deployment: &str) -> Result<Vec<u64>, StoreError>;

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

    #[cfg(test)]
    /// The highest seq ever assigned (0 when none), even if pruned since:
    /// the cursor for following from now on.
    fn last_event_seq(&mut self) -> Result<u64, StoreError>;
}
