//! Mail as the store sees it (DESIGN §6): each item is in the inbox, in
//! processing (sent to a child, not yet acknowledged), done, or dead
//! (quarantined). The rules every backend follows live here and in
//! [`super::held`]: an item moves inbox → processing (a take, by one
//! holder), processing → done (that holder's ack), processing → inbox or
//! dead (its holder's ending: [`wfhost_policy::item::after_ending`]), and dead →
//! inbox (an operator's retry), nothing else; the inbox is ordered by id
//! and a take always removes a prefix of it, so a replay or a retry puts
//! items back at the head in their original order; how an offered item is
//! admitted (idempotency keys, the inbox limit), how deliveries are
//! counted, and the events written with the mail. Backends keep only the
//! storage: one transaction per operation.

use serde::Serialize;
use sha2::{Digest, Sha256};
use wfhost_policy::Fact;

use super::{NewEvent, StoreError};

/// One mail item handed out by [`MailStore::take_mail`](super::MailStore::take_mail)
/// for delivery to a child.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailItem {
    /// Store-wide id, strictly increasing in acceptance order; the child
    /// uses it to skip a redelivered duplicate.
    pub id: u64,
    /// The bytes the sender gave.
    pub payload: Vec<u8>,
    /// Which start this delivery is, or may become: 1 until a handler
    /// started it (and after an operator's retry), counting every earlier
    /// start that did not finish it.
    pub attempt: u32,
    /// Its own deadline (ms from its first delivery), if its sender gave one.
    pub deadline_ms: Option<u64>,
    /// When it was first delivered (Unix ms): deadlines count from here,
    /// and redeliveries do not reset it.
    pub first_taken_at_ms: u64,
}

/// How much of one deployment's mail is in each state, for status output
/// and for tests that count what was never lost.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MailCounts {
    /// Accepted, waiting to be sent to a child.
    pub inbox: u64,
    /// Sent to a child, not yet acknowledged.
    pub processing: u64,
    /// Of those, the ones its handler started (protocol 3; a protocol-2
    /// child's are all started): being worked on, not waiting in it.
    pub working: u64,
    /// Acknowledged (kept until a retention job prunes them).
    pub done: u64,
    /// Quarantined after `max_deliveries` failed deliveries (kept until an
    /// operator retries or purges them).
    pub dead: u64,
    /// Held for an operator after their holder ended mid-item (`redeliver
    /// = "hold"`), until `mail retry` or `mail cancel`.
    pub interrupted: u64,
    /// Of `inbox`, the items waiting for a person's answer (given back, or
    /// returned, with a question open): not taken until answered.
    pub awaiting: u64,
    /// Questions of its items open (asked, not answered).
    pub questions_open: u64,
    /// When the oldest open question was asked (Unix ms).
    pub oldest_question_at_ms: Option<u64>,
}

/// One item offered by a sender, for
/// [`MailStore::enqueue_mail_many`](super::MailStore::enqueue_mail_many).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// Whose inbox.
    pub deployment: String,
    /// The sender's idempotency key.
    pub key: Option<String>,
    /// The bytes.
    pub payload: Vec<u8>,
    /// The deployment's `max_inbox`.
    pub max_inbox: u64,
    /// Its own deadline, in ms from its first delivery.
    pub deadline_ms: Option<u64>,
    /// When it was offered (Unix ms).
    pub at_ms: u64,
}

/// What [`MailStore::enqueue_mail`](super::MailStore::enqueue_mail) did with an
/// offered item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// The item's id.
    pub id: u64,
    /// False when its idempotency key named an item accepted earlier: that
    /// item's id is returned and nothing was written.
    pub new: bool,
}

/// An earlier item found under the offered idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Earlier {
    /// Its id.
    pub id: u64,
    /// The SHA-256 of the payload it was accepted with.
    pub payload_sha256: Option<Vec<u8>>,
}

/// What to do with an offered item, decided by [`admit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Insert it into the inbox (and write its `mail_accepted` event).
    Insert,
    /// A retry of item `id`: answer with it, write nothing.
    Existing(u64),
}

/// The SHA-256 a keyed item is stored with, so a retry can be told from a
/// different payload under the same key (a done item's payload is cleared).
pub fn payload_digest(key: Option<&str>, payload: &[u8]) -> Option<[u8; 32]> {
    key.map(|_| Sha256::digest(payload).into())
}

/// Admits an offered item or refuses it, given what the backend read in
/// its write transaction: the item already under the key, and how many of
/// the deployment's items wait in inbox or processing. A key already used
/// answers with the earlier item (whatever its state) before the limit is
/// looked at, so a retry of accepted mail is never refused as busy.
pub fn admit(
    deployment: &str,
    key: Option<&str>,
    digest: Option<&[u8; 32]>,
    earlier: Option<Earlier>,
    pending: u64,
    max_inbox: u64,
) -> Result<Admission, StoreError> {
    if let Some(earlier) = earlier {
        return if earlier.payload_sha256.as_deref() == digest.map(|d| &d[..]) {
            Ok(Admission::Existing(earlier.id))
        } else {
            Err(StoreError::KeyReused {
                deployment: deployment.to_owned(),
                key: key.unwrap_or_default().to_owned(),
                id: earlier.id,
            })
        };
    }
    if pending >= max_inbox {
        return Err(StoreError::InboxFull {
            deployment: deployment.to_owned(),
            limit: max_inbox,
        });
    }
    Ok(Admission::Insert)
}

/// The delivery number of a take, from how many takes came before it.
pub fn attempt(earlier_deliveries: i64) -> u32 {
    u32::try_from(earlier_deliveries.saturating_add(1)).unwrap_or(u32::MAX)
}

/// The event written in the same transaction as an accepted item, so the
/// event log can never miss or invent one, whatever kills the supervisor.
pub fn accepted_event(deployment: &str, id: u64, at_ms: u64) -> NewEvent {
    fact_event(deployment, Fact::MailAccepted { id }, at_ms)
}

/// The event written in the same transaction as an acknowledgement.
pub fn done_event(deployment: &str, id: u64, outcome: &str, at_ms: u64) -> NewEvent {
    let outcome = outcome.to_owned();
    fact_event(deployment, Fact::MailDone { id, outcome }, at_ms)
}

/// One of the fact vocabulary's mail facts as an event row.
fn fact_event(deployment: &str, fact: Fact, at_ms: u64) -> NewEvent {
    NewEvent {
        at_ms,
        deployment: Some(deployment.to_owned()),
        kind: fact.kind().into(),
        body: fact.body(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_answers_before_the_limit_and_a_new_payload_under_it_is_refused() {
        let digest = payload_digest(Some("k"), b"a");
        let earlier = || Earlier {
            id: 7,
            payload_sha256: digest.map(|d| d.to_vec()),
        };
        assert_eq!(
            admit("d", Some("k"), digest.as_ref(), Some(earlier()), 9, 1).unwrap(),
            Admission::Existing(7)
        );
        let other = payload_digest(Some("k"), b"b");
        let err = admit("d", Some("k"), other.as_ref(), Some(earlier()), 0, 9).unwrap_err();
        assert!(matches!(err, StoreError::KeyReused { id: 7, .. }), "{err}");
        assert!(matches!(
            admit("d", None, None, None, 2, 2),
            Err(StoreError::InboxFull { limit: 2, .. })
        ));
        assert_eq!(
            admit("d", None, None, None, 1, 2).unwrap(),
            Admission::Insert
        );
    }

    #[test]
    fn attempts_count_from_one_and_saturate() {
        assert_eq!(attempt(0), 1);
        assert_eq!(attempt(2), 3);
        assert_eq!(attempt(i64::MAX), u32::MAX);
        assert_eq!(payload_digest(None, b"x"), None);
    }
}
