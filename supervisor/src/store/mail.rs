//! Mail as the store sees it (DESIGN §6): each item is in the inbox, in
//! processing (sent to a child, not yet acknowledged) or done.

use serde::Serialize;

/// One mail item handed out by [`Store::take_mail`](super::Store::take_mail)
/// for delivery to a child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailItem {
    /// Store-wide id, strictly increasing in acceptance order; the child
    /// uses it to skip a redelivered duplicate.
    pub id: u64,
    /// The bytes the sender gave.
    pub payload: Vec<u8>,
    /// Which delivery this is: 1 the first time, counting every earlier
    /// child that took it without acknowledging it.
    pub attempt: u32,
}

/// How much of one deployment's mail is in each state, for status output
/// and for tests that count what was never lost.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MailCounts {
    /// Accepted, waiting to be sent to a child.
    pub inbox: u64,
    /// Sent to a child, not yet acknowledged.
    pub processing: u64,
    /// Acknowledged (kept until a retention job prunes them).
    pub done: u64,
}

/// What [`Store::enqueue_mail`](super::Store::enqueue_mail) did with an
/// offered item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// The item's id.
    pub id: u64,
    /// False when its idempotency key named an item accepted earlier: that
    /// item's id is returned and nothing was written.
    pub new: bool,
}
