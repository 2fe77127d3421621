//! One mail item's life in the supervisor's hands (DESIGN §6), as rules:
//! the store reads what an operation needs in its transaction, asks here,
//! and writes the answer, so SQLite and PostgreSQL decide alike.
//!
//! | state | what happens | next |
//! |---|---|---|
//! | inbox | a take ([`takeable`]: a suspect goes alone) | held, unstarted (started, for a protocol-2 holder) |
//! | inbox | a cancel ([`on_cancel`]) | done, `cancelled`: never delivered |
//! | held | its handler starts it (`MailStarted`) | held, started: `attempt` counts it |
//! | held | its holder's ack | done, with outcome and result |
//! | held | a cancel | held, cancel recorded (the child is sent a signed cancel) |
//! | held | its deadline, then a drain budget more ([`crate::deadline`]) | done, `failed: deadline of D passed` |
//! | held | its handler asks a question (`Ask`) | held; the question stored with the item, keyed by (item, key) |
//! | held | its child gives it back waiting for an answer (`GiveBack`) | inbox, uncounted, awaiting: not taken until its questions are answered |
//! | held | its holder ends ([`after_ending`]) | a recorded cancel: done, `cancelled`; unstarted: inbox, uncounted; a question open: inbox, uncounted, awaiting; started, with `redeliver = "hold"`: interrupted; an ending that does not count: inbox, uncounted; else one more failure: inbox, or dead at `max_deliveries` |
//! | inbox, awaiting | its last open question answered | inbox (its next delivery is its next attempt; its `ask` gets the stored answer) |
//! | inbox, awaiting | a cancel | done, `cancelled` |
//! | interrupted | an operator's retry | inbox, its starts kept (the next delivery is the next attempt) |
//! | interrupted | a cancel | done, `cancelled` |
//! | done | a cancel | refused, unchanged |
//! | dead | an operator's retry | inbox, failures and starts reset |
//! | dead | a cancel | refused, unchanged |
//!
//! Isolation keeps innocent mail from being quarantined with poison: an
//! item that has failed before is a suspect, taken only alone (when its
//! holder holds nothing else) and nothing is taken after it until it is
//! acknowledged or returned, so the next crash is attributed to it alone.

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
        n = n.saturating_add(1);
    }
    n
}

/// A held item, as its holder's end finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// Deliveries that failed so far.
    pub failures: u32,
    /// Its handler started it (this delivery is an attempt).
    pub started: bool,
    /// A cancel of it was recorded.
    pub cancel_asked: bool,
    /// A question of its handler waits for a person's answer.
    pub awaiting: bool,
}

/// Where an item goes when its holder ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Back to the head of the inbox, for the next child, with these
    /// failures.
    Inbox(u32),
    /// Quarantined with these failures: not delivered again until an
    /// operator retries it.
    Dead(u32),
    /// Done, cancelled: a cancel of it was recorded, so it never runs again.
    Cancelled,
    /// Held for an operator (`redeliver = "hold"`): its handler started it
    /// and may have done part of its work, so it is not run again until
    /// `wfhost mail retry` (or ended by `mail cancel`).
    Interrupted,
    /// Back in the inbox uncounted, not taken until its open questions
    /// are answered: waiting on a person is no child's work and no fault.
    Awaiting,
}

/// Where `held` goes when its holder ends: cancelled if a cancel was
/// recorded; back uncounted if its handler never started it; back
/// uncounted, awaiting, if a question of its handler is open; held for an
/// operator if it was started and the deployment says `hold`; back
/// uncounted if the ending does not `count` (the supervisor's own stop, a
/// drain the child completed); else with one more failure, dead once
/// failures reach `max_deliveries` (at least one).
pub fn after_ending(held: Held, counts: bool, max_deliveries: u32, hold: bool) -> Fate {
    if held.cancel_asked {
        return Fate::Cancelled;
    }
    if !held.started {
        return Fate::Inbox(held.failures);
    }
    if held.awaiting {
        return Fate::Awaiting;
    }
    if hold {
        return Fate::Interrupted;
    }
    if !counts {
        return Fate::Inbox(held.failures);
    }
    let failures = held.failures.saturating_add(1);
    if failures >= max_deliveries.max(1) {
        Fate::Dead(failures)
    } else {
        Fate::Inbox(failures)
    }
}

/// What a cancel of one item does, by where the item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnCancel {
    /// In the inbox: done, `cancelled`, never delivered.
    EndNow,
    /// Held by a child: recorded with the item (its holder's end cancels
    /// it), and the child is to be told.
    Record,
    /// Done or dead: nothing changes.
    Refuse,
}

/// The cancel of an item in stored `state` (`inbox`, `processing`,
/// `interrupted`, `done`, `dead`).
pub fn on_cancel(state: &str) -> OnCancel {
    match state {
        "inbox" | "interrupted" => OnCancel::EndNow,
        "processing" => OnCancel::Record,
        _ => OnCancel::Refuse,
    }
}

/// Longest key of a question a handler asks, in bytes.
pub const MAX_KEY_BYTES: usize = 256;
/// Largest prompt, answer or progress report (encoded JSON), in bytes.
pub const MAX_JSON_BYTES: usize = 64 << 10;
/// Most distinct questions one item may ask in one child.
pub const MAX_QUESTIONS_PER_ITEM: usize = 64;

/// The outcome stored for an item a cancel ended.
pub const CANCELLED: &str = "cancelled";

/// The history's words for a delivery that ended with an acknowledgement.
pub fn done_how(outcome: &str) -> String {
    format!("done: {outcome}")
}

/// The history's words for a delivery its holder's end (`cause`) took
/// back, as [`after_ending`] decided.
pub fn ended_how(cause: &str, fate: Fate, counts: bool, started: bool) -> String {
    match fate {
        Fate::Cancelled => {
            format!("cancelled: its holder ended after the cancel was committed ({cause})")
        }
        Fate::Interrupted => format!(
            "interrupted: held for an operator (redeliver = \"hold\"), not run again: {cause}"
        ),
        Fate::Awaiting => {
            format!(
                "returned, not counted: waiting for an answer, delivered once answered ({cause})"
            )
        }
        _ if !started => format!("returned unstarted, not counted: {cause}"),
        _ if !counts => format!("returned, not counted: {cause}"),
        _ => cause.to_owned(),
    }
}

/// The history's words for an item its child gave back while its handler
/// waited for an answer.
pub const GIVEN_BACK_HOW: &str = "given back, not counted: waiting for an answer";

/// The history's words for an item cancelled while it waited (in the
/// inbox, or interrupted).
pub fn cancelled_queued_how(by: &str, reason: &str) -> String {
    format!("cancelled by {by} ({reason}) while it waited: not delivered again")
}

/// What a cancel found of an item that had ended, from its stored state
/// and outcome.
pub fn ended_as(state: &str, outcome: Option<&str>) -> String {
    match outcome {
        Some(o) if state == "done" => format!("done: {o}"),
        _ => state.to_owned(),
    }
}

/// How every holder ended, as the next start-up finds it.
pub const SUPERVISOR_GONE: &str = "the supervisor that sent it stopped or died";

/// The history's words for a delivery returned at start-up: the
/// supervisor that sent it stopped or died with it in flight.
pub const RETURNED_AT_START: &str =
    "returned, not counted: the supervisor that sent it stopped or died before it was acknowledged";

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY: Holding = Holding {
        items: 0,
        suspect: false,
    };

    fn held(failures: u32, started: bool, cancel_asked: bool) -> Held {
        Held {
            failures,
            started,
            cancel_asked,
            awaiting: false,
        }
    }

    #[test]
    fn an_item_waiting_on_a_person_goes_back_uncounted_whatever_ended_its_holder() {
        let waiting = Held {
            awaiting: true,
            ..held(2, true, false)
        };
        assert_eq!(after_ending(waiting, true, 3, false), Fate::Awaiting);
        assert_eq!(
            after_ending(waiting, true, 3, true),
            Fate::Awaiting,
            "hold too"
        );
        let cancelled = Held {
            cancel_asked: true,
            ..waiting
        };
        assert_eq!(after_ending(cancelled, true, 3, false), Fate::Cancelled);
        assert!(ended_how("killed", Fate::Awaiting, true, true).contains("waiting for an answer"));
    }

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

    /// The holder's-end rows of the table, every combination.
    #[test]
    fn the_table_of_a_holders_end() {
        let rows = [
            // (failures, started, cancel asked, counts, max) -> fate
            ((0, true, false, true, 5), Fate::Inbox(1)),
            ((3, true, false, true, 5), Fate::Inbox(4)),
            ((4, true, false, true, 5), Fate::Dead(5)),
            // A limit lowered below what an item already has: dead at once.
            ((7, true, false, true, 5), Fate::Dead(8)),
            ((0, true, false, true, 1), Fate::Dead(1)),
            ((0, true, false, true, 0), Fate::Dead(1)),
            // Not counted: the supervisor's stop, a completed drain.
            ((4, true, false, false, 5), Fate::Inbox(4)),
            // Never started: no item's fault.
            ((4, false, false, true, 5), Fate::Inbox(4)),
            // A recorded cancel wins over everything.
            ((4, true, true, true, 5), Fate::Cancelled),
            ((0, false, true, false, 5), Fate::Cancelled),
        ];
        for ((failures, started, cancel, counts, max), fate) in rows {
            assert_eq!(
                after_ending(held(failures, started, cancel), counts, max, false),
                fate,
                "{failures} {started} {cancel} {counts} {max}"
            );
        }
        assert_eq!(
            after_ending(held(u32::MAX, true, false), true, 5, false),
            Fate::Dead(u32::MAX)
        );
        // `redeliver = "hold"`: a started item waits for an operator,
        // whatever ended its holder; an unstarted one goes back, a
        // cancelled one ends.
        for counts in [true, false] {
            assert_eq!(
                after_ending(held(0, true, false), counts, 5, true),
                Fate::Interrupted
            );
        }
        assert_eq!(
            after_ending(held(0, false, false), true, 5, true),
            Fate::Inbox(0)
        );
        assert_eq!(
            after_ending(held(0, true, true), true, 5, true),
            Fate::Cancelled
        );
    }

    #[test]
    fn a_cancel_by_where_the_item_is() {
        assert_eq!(on_cancel("inbox"), OnCancel::EndNow);
        assert_eq!(on_cancel("interrupted"), OnCancel::EndNow);
        assert_eq!(on_cancel("processing"), OnCancel::Record);
        assert_eq!(on_cancel("done"), OnCancel::Refuse);
        assert_eq!(on_cancel("dead"), OnCancel::Refuse);
        assert_eq!(ended_as("done", Some("succeeded")), "done: succeeded");
        assert_eq!(ended_as("dead", None), "dead");
    }

    #[test]
    fn the_historys_words() {
        let cause = "exited unexpectedly: exit status 3";
        assert_eq!(ended_how(cause, Fate::Inbox(1), true, true), cause);
        assert_eq!(
            ended_how(cause, Fate::Inbox(0), false, true),
            "returned, not counted: exited unexpectedly: exit status 3"
        );
        assert_eq!(
            ended_how(cause, Fate::Inbox(0), true, false),
            "returned unstarted, not counted: exited unexpectedly: exit status 3"
        );
        assert!(ended_how(cause, Fate::Cancelled, true, true).starts_with("cancelled: "));
        assert_eq!(done_how("succeeded"), "done: succeeded");
    }
}
