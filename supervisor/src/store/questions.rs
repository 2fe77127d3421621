//! Questions a mail item's handler asked a person (docs/design.md §6),
//! stored with the item and keyed by (item, key), not by child or
//! attempt: a redelivered item asking again finds its question, answered
//! or still open. An item in the inbox with an open question is
//! `awaiting`: not taken until a person answers.

use serde::Serialize;

use super::held::Holder;

/// The SQL (both backends) that says whether the `mail` row in scope has
/// an open question, as a literal for `concat!`.
macro_rules! open_question {
    () => {
        "EXISTS (SELECT 1 FROM questions q WHERE q.mail_id = mail.id AND q.answer IS NULL)"
    };
}
pub(crate) use open_question;

/// [`open_question!`]: what an item going back to the inbox sets
/// `awaiting` to.
pub const OPEN_QUESTION: &str = open_question!();

/// One question, as `wfhost questions` and `mail show` list it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Question {
    /// The item's deployment.
    pub deployment: String,
    /// The item.
    pub id: u64,
    /// The question's key within the item.
    pub key: String,
    /// What the handler asked (JSON).
    #[serde(skip)]
    pub prompt: Vec<u8>,
    /// The attempt that first asked it.
    pub attempt: u32,
    /// When it was first asked (Unix ms).
    pub asked_at_ms: u64,
    /// Its answer, once given.
    #[serde(skip)]
    pub answer: Option<Answer>,
}

/// A stored answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The value (JSON).
    pub value: Vec<u8>,
    /// When it was given (Unix ms).
    pub at_ms: u64,
    /// Who gave it (JSON: `uid`, `user`, `label`).
    pub by: String,
}

/// A handler's question, for [`super::Settle::Asked`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asking {
    /// The child that holds the item and asks.
    pub holder: Holder,
    /// The item.
    pub id: u64,
    /// The question's key.
    pub key: String,
    /// The prompt (JSON).
    pub prompt: Vec<u8>,
}

/// What an answer found, and did, in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answering {
    /// Stored: the question was open. `holder` holds the item now (the
    /// answer is to be sent to it); `None`: it waits in the inbox, now
    /// takeable if no other question of it is open.
    New {
        /// The item's deployment.
        deployment: String,
        /// Its holder, if a child holds it.
        holder: Option<Holder>,
    },
    /// The same value was given before: nothing changed.
    Same {
        /// The item's deployment.
        deployment: String,
        /// Its holder, if a child holds it.
        holder: Option<Holder>,
        /// The first answer.
        first: Answer,
    },
    /// Another value was given before: refused, nothing changed.
    Different {
        /// The item's deployment.
        deployment: String,
        /// The first answer.
        first: Answer,
    },
    /// No question of that key for the item.
    UnknownKey {
        /// The item's deployment.
        deployment: String,
        /// The keys it has.
        keys: Vec<String>,
    },
    /// The item has ended (`how`: `done: succeeded`, `dead`, …).
    Ended {
        /// The item's deployment.
        deployment: String,
        /// How it ended.
        how: String,
    },
}

/// A question answered before, answered again with `value`: the same
/// value changes nothing, another is refused (both backends ask here).
pub fn again(deployment: String, holder: Option<Holder>, first: Answer, value: &[u8]) -> Answering {
    if first.value == value {
        Answering::Same {
            deployment,
            holder,
            first,
        }
    } else {
        Answering::Different { deployment, first }
    }
}
