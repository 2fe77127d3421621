//! Mail held by one child (DESIGN §6): every processing item records its
//! holder (the spawn's channel id and pid), and when that child's wiring
//! ends only its items are returned. What happens to each item, and when
//! a take stops, is `wfhost_policy::item`'s to decide; these are the
//! records the store's operations take and give.

use serde::Serialize;

/// Who holds a processing item: one spawn of a child. The channel id is
/// unique per spawn (the pid may be reused), so it is what must match.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Holder {
    /// The spawn's channel id (32 hex digits).
    pub channel_id: String,
    /// The child's pid, for operators and the dead mail's last failure.
    pub pid: u32,
}

/// One acknowledgement for [`MailStore::ack_mail_many`](super::MailStore::ack_mail_many).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckOf {
    /// The child that acknowledged.
    pub holder: Holder,
    /// The item.
    pub id: u64,
    /// How processing ended.
    pub outcome: String,
    /// What the child's handler returned (empty from a protocol-2 child).
    pub result: Vec<u8>,
}

/// A write a holder owes an item it holds, in the order it reported them:
/// its handler took it (protocol 3's `MailStarted`), or it is done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// The holder's handler started the item: this delivery is a start.
    Started {
        /// The child that started it.
        holder: Holder,
        /// The item.
        id: u64,
    },
    /// The item is done.
    Done(AckOf),
    /// The holder's handler asks a person a question (stored once per
    /// item and key; an answer already stored comes back).
    Asked(super::questions::Asking),
    /// The holder gave the item back, its handler waiting for an answer:
    /// back in the inbox, uncounted, not taken until answered.
    GivenBack {
        /// The child that gave it back.
        holder: Holder,
        /// The item.
        id: u64,
    },
    /// The item was taken for the holder but never sent (it stopped taking
    /// mail first): back at the head of the inbox, its take undone, so
    /// the next child gets it now, not when the holder ends.
    Unsent {
        /// The child it was taken for.
        holder: Holder,
        /// The item.
        id: u64,
    },
}

/// How the history ends a delivery that was never sent.
pub const UNSENT: &str = "never sent: its child stopped taking mail first; not counted";

/// What one [`Settle`] came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Landed {
    /// Nothing: the holder does not hold the item (a duplicate, stray or
    /// late report).
    Ignored,
    /// Written.
    Written,
    /// A question stored for the first time.
    Opened,
    /// A question answered before: its answer (JSON), for the holder.
    Answered(Vec<u8>),
}

impl Landed {
    /// Whether it changed or found anything (not [`Landed::Ignored`]).
    pub fn held(&self) -> bool {
        !matches!(self, Self::Ignored)
    }
}

/// How a holder's wiring ended, for [`MailStore::replay_mail`](super::MailStore::replay_mail).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    /// How it ended, in the words of its `exited` fact (e.g. "exited
    /// unexpectedly: exit status 3").
    pub cause: String,
    /// Whether the ending counts against the items held: false only when
    /// the supervisor itself is stopping (its stop, SIGTERM, SIGQUIT, a
    /// deployment removed by a reload), which is no item's fault.
    pub counts: bool,
    /// When it ended (Unix ms).
    pub at_ms: u64,
    /// The deployment holds a started item for an operator instead of
    /// running it again (`redeliver = "hold"`).
    pub hold: bool,
}

/// An item quarantined by a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadMail {
    /// The mail's id.
    pub id: u64,
    /// Deliveries that failed (at least `max_deliveries`).
    pub failures: u32,
    /// How the last holder ended.
    pub cause: String,
    /// The last holder's pid.
    pub pid: u32,
}

/// What [`MailStore::replay_mail`](super::MailStore::replay_mail) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Items back at the head of the inbox.
    pub returned: u64,
    /// Items quarantined, in id order.
    pub dead: Vec<DeadMail>,
    /// Items done, cancelled: a cancel of them had been committed.
    pub cancelled: u64,
    /// Items held for an operator (`redeliver = "hold"`), in id order.
    pub interrupted: Vec<u64>,
}

/// What a cancel of one item found, and did, in one transaction
/// ([`MailStore::cancel_mail`](super::MailStore::cancel_mail)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelFound {
    /// It waited (in the inbox, or interrupted): now done, cancelled, not
    /// delivered again.
    Queued {
        /// Its deployment.
        deployment: String,
    },
    /// A child holds it: the cancel is recorded (its holder's end cancels
    /// it), and the child is to be told.
    Held {
        /// Its deployment.
        deployment: String,
        /// The child that holds it.
        holder: Holder,
    },
    /// It had ended already: nothing changed.
    Ended {
        /// Its deployment.
        deployment: String,
        /// `done: <outcome>` or `dead`.
        how: String,
    },
}
