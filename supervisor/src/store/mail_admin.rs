//! Mail as operators look at it and act on it (`wfhost mail list`, `show`,
//! `retry`, `purge`): an item with its state, counts, holder, last failure
//! and the history of its deliveries; bounded pages; and the rules of the
//! two operator decisions: only dead mail is retried (back to the inbox
//! with its failures and attempts reset, so the next delivery is attempt 1
//! again), and purging deletes only dead mail.

use std::fmt;

use serde::Serialize;

use super::StoreError;
use super::held::Holder;

/// Longest page `list_mail` returns.
pub const MAX_PAGE: usize = 10_000;

/// Most items one `retry --dead` moves; the rest stay dead for the next.
pub const RETRY_BATCH: usize = 1_000;

/// Longest payload piece one `mail_payload` call returns (1 MiB: as hex it
/// fits a control message).
pub const PAYLOAD_CHUNK: usize = 1 << 20;

/// Where a mail item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MailState {
    /// Accepted, waiting for a child.
    Inbox,
    /// Sent to a child, not yet acknowledged.
    Processing,
    /// Acknowledged.
    Done,
    /// Quarantined after `max_deliveries` failed deliveries.
    Dead,
    /// Held for an operator: its holder ended mid-item and the deployment
    /// says `redeliver = "hold"`.
    Interrupted,
}

impl MailState {
    /// Every state, in the order mail moves through them.
    pub const ALL: [Self; 5] = [
        Self::Inbox,
        Self::Processing,
        Self::Done,
        Self::Dead,
        Self::Interrupted,
    ];

    /// The state's name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Inbox => "inbox",
            Self::Processing => "processing",
            Self::Done => "done",
            Self::Dead => "dead",
            Self::Interrupted => "interrupted",
        }
    }

    /// The state named `text`, or `None`.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl fmt::Display for MailState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which items `list_mail` returns: ascending ids above `after`, at most
/// `limit` of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailQuery {
    /// One deployment's, or every deployment's.
    pub deployment: Option<String>,
    /// One state's, or every state's.
    pub state: Option<MailState>,
    /// Only ids above this (0: from the oldest).
    pub after: u64,
    /// At most this many (bounded by [`MAX_PAGE`]).
    pub limit: usize,
}

/// The last failed delivery of an item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LastFailure {
    /// How its holder ended.
    pub cause: String,
    /// The holder's pid.
    pub pid: u32,
    /// When (Unix ms).
    pub at_ms: u64,
}

/// One line of an item's history: a delivery (taken, then acknowledged or
/// taken back by its holder's ending) or an operator's retry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HistoryEntry {
    /// The delivery's attempt number; none for a retry.
    pub attempt: Option<u32>,
    /// The holder's pid; none for a retry.
    pub pid: Option<u32>,
    /// The holder's channel id; none for a retry.
    pub channel_id: Option<String>,
    /// When the delivery was taken from the inbox (Unix ms).
    pub taken_at_ms: Option<u64>,
    /// When it ended, if it has.
    pub ended_at_ms: Option<u64>,
    /// How it ended: `done: <outcome>`, the holder's exit cause, or what
    /// the operator did; none while in flight.
    pub how: Option<String>,
}

/// One stored item as an operator sees it (never its payload).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MailView {
    /// Its id.
    pub id: u64,
    /// Its deployment.
    pub deployment: String,
    /// Where it is.
    pub state: MailState,
    /// Deliveries so far (since its last retry).
    pub attempts: u32,
    /// Deliveries that failed (since its last retry).
    pub failures: u32,
    /// When it was accepted (Unix ms).
    pub enqueued_at_ms: u64,
    /// Its payload's length (0 once done: a done item's payload is cleared).
    pub payload_bytes: u64,
    /// Who holds it, while processing.
    pub holder: Option<Holder>,
    /// When its latest delivery was taken (Unix ms).
    pub taken_at_ms: Option<u64>,
    /// Its last failed delivery.
    pub last_failure: Option<LastFailure>,
    /// The child's outcome, once done.
    pub outcome: Option<String>,
    /// Its result's length, once done.
    pub result_bytes: u64,
    /// When it was acknowledged.
    pub done_at_ms: Option<u64>,
    /// When it was quarantined.
    pub dead_at_ms: Option<u64>,
    /// A question of its handler waits for a person's answer (it is held
    /// by a child whose handler waits, or waits in the inbox).
    pub waiting_for_answer: bool,
    /// Its deliveries and retries, oldest first.
    pub history: Vec<HistoryEntry>,
}

/// A page of [`MailView`]s and how many more match after it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MailPage {
    /// The items, ascending by id.
    pub items: Vec<MailView>,
    /// Matching items after the last one returned.
    pub more: u64,
}

/// What a retry did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retried {
    /// The items put back in the inbox, ascending.
    pub ids: Vec<u64>,
    /// Dead items of the deployment still dead (beyond [`RETRY_BATCH`]).
    pub left: u64,
}

/// Whether item `id` of `deployment`, found in `state`, may be retried:
/// only dead mail is (anything else would deliver it twice, or undo an
/// outcome).
pub fn check_retry(id: u64, deployment: &str, state: MailState) -> Result<(), StoreError> {
    if matches!(state, MailState::Dead | MailState::Interrupted) {
        Ok(())
    } else {
        Err(StoreError::NotDead {
            id,
            deployment: deployment.to_owned(),
            state,
        })
    }
}

/// The history's words for a retry by `by` of an item that was `dead`
/// (its failures and attempts reset) or interrupted (its next delivery is
/// its next attempt).
pub fn retried_how(by: &str, dead: bool) -> String {
    if dead {
        format!("retried by {by}: back to the inbox with its failures reset")
    } else {
        format!("retried by {by}: back to the inbox, to run as its next attempt")
    }
}

/// The page size a query asks for, within `1..=MAX_PAGE`.
pub fn page_size(limit: usize) -> usize {
    limit.clamp(1, MAX_PAGE)
}

/// The state named in a stored row, or what is wrong with it.
pub fn stored_state(text: &str) -> Result<MailState, String> {
    MailState::parse(text).ok_or_else(|| format!("mail: unknown state {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_parse_from_their_names_only() {
        for s in MailState::ALL {
            assert_eq!(MailState::parse(s.as_str()), Some(s));
            assert_eq!(stored_state(&s.to_string()), Ok(s));
        }
        assert_eq!(MailState::parse("Dead"), None);
        assert!(stored_state("lost").unwrap_err().contains("\"lost\""));
    }

    #[test]
    fn only_dead_mail_is_retried() {
        assert!(check_retry(1, "d", MailState::Dead).is_ok());
        for s in [MailState::Inbox, MailState::Processing, MailState::Done] {
            let err = check_retry(7, "orders", s).unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("mail 7 of orders is {s}, not dead")),
                "{err}"
            );
            assert!(err.contains("wfhost mail show 7"), "{err}");
        }
    }

    #[test]
    fn pages_are_bounded() {
        assert_eq!(page_size(0), 1);
        assert_eq!(page_size(100), 100);
        assert_eq!(page_size(usize::MAX), MAX_PAGE);
    }
}
