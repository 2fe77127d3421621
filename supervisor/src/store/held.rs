//! Mail held by one child (DESIGN §6): every processing item records its
//! holder (the spawn's channel id and pid), and when that child's wiring
//! ends only its items are returned. An ending that counts (a crash, a
//! kill, a hang, a recycle: anything but the supervisor's own stop) adds
//! one failure to each item it held; an item whose failures reach the
//! deployment's `max_deliveries` is quarantined in the dead state instead
//! of going back to the inbox.
//!
//! Isolation keeps innocent mail from being quarantined with poison: an
//! item that has failed before is a suspect, taken only alone (when its
//! holder holds nothing else) and nothing is taken after it until it is
//! acknowledged or returned, so the next crash is attributed to it alone.
//!
//! The rules are here, pure; the backends read what they need in the
//! operation's transaction, ask these functions, and write the answer.

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
}

/// What one holder holds when it asks for more.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Holding {
    /// How many processing items it holds.
    pub items: u64,
    /// Whether one of them has failed before (is being tried alone).
    pub suspect: bool,
}

/// How many items from the head of the inbox a take moves to `holding`'s
/// holder, given the failures of the head items in id order: at most
/// `limit`, in order, stopping before a suspect unless it can go alone
/// (nothing held, nothing taken before it), and taking nothing after one.
/// A holder trying a suspect takes nothing more until it is settled.
pub fn takeable(
    holding: Holding,
    head_failures: impl IntoIterator<Item = u32>,
    limit: usize,
) -> usize {
    if holding.suspect {
        return 0;
    }
    let mut n = 0;
    for failures in head_failures.into_iter().take(limit) {
        if failures > 0 {
            let alone = holding.items == 0 && n == 0;
            return if alone { 1 } else { n };
        }
        n += 1;
    }
    n
}

/// Where a returned item goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Back to the head of the inbox, for the next child.
    Inbox,
    /// Quarantined: not delivered again until an operator retries it.
    Dead,
}

/// What a cancel of one item found, and did, in one transaction
/// ([`MailStore::cancel_mail`](super::MailStore::cancel_mail)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelFound {
    /// It waited in the inbox: now done, cancelled, never delivered.
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

/// The outcome stored for an item a cancel ended.
pub const CANCELLED: &str = "cancelled";

/// The history's words for an item cancelled in the inbox.
pub fn cancelled_queued_how(by: &str, reason: &str) -> String {
    format!("cancelled in the inbox by {by} ({reason}): never delivered")
}

/// What a cancel found of an item that had ended, from its stored state
/// and outcome.
pub fn ended_as(state: &str, outcome: Option<&str>) -> String {
    match outcome {
        Some(o) if state == "done" => format!("done: {o}"),
        _ => state.to_owned(),
    }
}

/// An item's failures after its holder's `ending`, and where it goes: a
/// counted ending of a delivery its handler `started` adds one, and
/// `max_deliveries` failures (at least one) quarantine it; an item never
/// started is no item's fault.
pub fn after_ending(
    failures: u32,
    started: bool,
    ending: &Ending,
    max_deliveries: u32,
) -> (u32, Fate) {
    if !ending.counts || !started {
        return (failures, Fate::Inbox);
    }
    let failures = failures.saturating_add(1);
    if failures >= max_deliveries.max(1) {
        (failures, Fate::Dead)
    } else {
        (failures, Fate::Inbox)
    }
}

/// The history's words for a delivery that ended with an acknowledgement.
pub fn done_how(outcome: &str) -> String {
    format!("done: {outcome}")
}

/// The history's words for a delivery whose holder ended after a cancel
/// of the item was committed.
pub fn cancelled_how(ending: &Ending) -> String {
    format!(
        "cancelled: its holder ended after the cancel was committed ({})",
        ending.cause
    )
}

/// The history's words for a delivery its holder's ending took back.
pub fn ended_how(ending: &Ending, started: bool) -> String {
    if !started {
        format!("returned unstarted, not counted: {}", ending.cause)
    } else if ending.counts {
        ending.cause.clone()
    } else {
        format!("returned, not counted: {}", ending.cause)
    }
}

/// The ending of every holder at start-up: the supervisor that sent them
/// mail stopped or died (counts nothing).
pub fn supervisor_gone(at_ms: u64) -> Ending {
    Ending {
        cause: "the supervisor that sent it stopped or died".into(),
        counts: false,
        at_ms,
    }
}

/// The history's words for a delivery returned at start-up: the
/// supervisor that sent it stopped or died with it in flight.
pub const RETURNED_AT_START: &str =
    "returned, not counted: the supervisor that sent it stopped or died before it was acknowledged";

#[cfg(test)]
mod tests {
    use super::*;

    fn ending(counts: bool) -> Ending {
        Ending {
            cause: "exited unexpectedly: exit status 3".into(),
            counts,
            at_ms: 9,
        }
    }

    const EMPTY: Holding = Holding {
        items: 0,
        suspect: false,
    };

    #[test]
    fn fresh_mail_is_taken_up_to_the_limit_in_order() {
        assert_eq!(takeable(EMPTY, [0, 0, 0], 2), 2);
        assert_eq!(takeable(EMPTY, [0, 0], 5), 2);
        assert_eq!(takeable(EMPTY, [0], 0), 0);
        let busy = Holding {
            items: 31,
            suspect: false,
        };
        assert_eq!(takeable(busy, [0], 1), 1);
    }

    #[test]
    fn a_suspect_goes_alone_and_nothing_follows_it() {
        // At the head, with nothing held: alone.
        assert_eq!(takeable(EMPTY, [1, 0, 0], 32), 1);
        // Behind fresh mail: the take stops before it.
        assert_eq!(takeable(EMPTY, [0, 0, 2, 0], 32), 2);
        // At the head while the holder holds something: nothing.
        let busy = Holding {
            items: 3,
            suspect: false,
        };
        assert_eq!(takeable(busy, [1, 0], 32), 0);
        // While the holder tries a suspect: nothing at all.
        let trying = Holding {
            items: 1,
            suspect: true,
        };
        assert_eq!(takeable(trying, [0, 0], 32), 0);
        // A suspect beyond the limit does not matter.
        assert_eq!(takeable(EMPTY, [0, 0, 1], 2), 2);
    }

    #[test]
    fn counted_endings_add_a_failure_and_the_limit_quarantines() {
        assert_eq!(after_ending(0, true, &ending(true), 5), (1, Fate::Inbox));
        assert_eq!(after_ending(3, true, &ending(true), 5), (4, Fate::Inbox));
        assert_eq!(after_ending(4, true, &ending(true), 5), (5, Fate::Dead));
        // A limit lowered below what an item already has: dead at once.
        assert_eq!(after_ending(7, true, &ending(true), 5), (8, Fate::Dead));
        assert_eq!(after_ending(0, true, &ending(true), 1), (1, Fate::Dead));
        assert_eq!(after_ending(0, true, &ending(true), 0), (1, Fate::Dead));
        assert_eq!(after_ending(u32::MAX, true, &ending(true), 5).0, u32::MAX);
    }

    #[test]
    fn an_item_never_started_is_returned_uncounted() {
        assert_eq!(after_ending(4, false, &ending(true), 5), (4, Fate::Inbox));
        assert_eq!(
            ended_how(&ending(true), false),
            "returned unstarted, not counted: exited unexpectedly: exit status 3"
        );
    }

    #[test]
    fn the_supervisors_own_stop_counts_nothing() {
        assert_eq!(after_ending(4, true, &ending(false), 5), (4, Fate::Inbox));
        assert_eq!(
            ended_how(&ending(false), true),
            "returned, not counted: exited unexpectedly: exit status 3"
        );
        assert_eq!(
            ended_how(&ending(true), true),
            "exited unexpectedly: exit status 3"
        );
        assert_eq!(done_how("succeeded"), "done: succeeded");
    }
}
