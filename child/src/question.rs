//! An item's questions to a person (protocol 3, docs/protocol.md §4.12 "A
//! person in the loop"): the checks made before anything is sent, the
//! frame sizes they imply, and each item's answer memory. Bookkeeping
//! only: the mail ledger owns one [`Questions`] per item and decides when
//! to send, answer or give back.
//!
//! Each question is a `watch` channel keyed by its key: every `ask` of the
//! same key waits on the same channel, so one `Answer` resolves them all,
//! and the value stays there as the answer memory of the item, so a later
//! `ask` of that key returns without a frame.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use tokio::sync::watch;

use crate::error::AskError;

/// The longest key, in bytes.
pub(crate) const MAX_KEY_BYTES: usize = 256;
/// The largest prompt or progress data, in bytes of JSON.
pub(crate) const MAX_JSON_BYTES: usize = 64 * 1024;
/// The most distinct questions one item may ask; one more is a protocol
/// violation the supervisor stops the child for, so it is refused here.
pub(crate) const MAX_QUESTIONS: usize = 64;

/// Where a question stands, as every waiting `ask` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Asked; no answer yet.
    Pending,
    /// The supervisor's answer (JSON bytes, parsed by each `ask`).
    Answered(Arc<[u8]>),
    /// The item went back to the supervisor before the answer came.
    GivenBack,
}

/// One item's questions: asked and waiting, or answered (its answer
/// memory), and how many `ask` calls wait right now.
#[derive(Debug, Default)]
pub(crate) struct Questions {
    by_key: HashMap<String, watch::Sender<Reply>>,
    /// `ask` calls waiting for an answer: an item with any is given back
    /// when a drain begins.
    pub(crate) waiting: usize,
}

/// What an `ask` of a key finds.
#[derive(Debug)]
pub(crate) enum Found {
    /// The key is answered already: no frame, no wait.
    Answered(Arc<[u8]>),
    /// The key is asked and waits for its answer: wait with the others.
    Waiting(watch::Receiver<Reply>),
    /// Not asked yet.
    New,
}

impl Questions {
    /// What an `ask` of `key` finds.
    pub(crate) fn find(&self, key: &str) -> Found {
        let Some(question) = self.by_key.get(key) else {
            return Found::New;
        };
        match &*question.borrow() {
            Reply::Answered(value) => Found::Answered(value.clone()),
            Reply::Pending | Reply::GivenBack => Found::Waiting(question.subscribe()),
        }
    }

    /// Opens question `key` (not asked yet) and returns what its waiters
    /// watch; fails when the item has asked as many as it may.
    pub(crate) fn open(&mut self, id: u64, key: &str) -> Result<watch::Receiver<Reply>, AskError> {
        if self.by_key.len() >= MAX_QUESTIONS {
            return Err(AskError::TooManyQuestions(id));
        }
        let (tx, rx) = watch::channel(Reply::Pending);
        self.by_key.insert(key.to_owned(), tx);
        Ok(rx)
    }

    /// Resolves every `ask` of `key` with `value` and remembers it;
    /// `false` when `key` was not asked or is answered already (the
    /// first answer stands).
    pub(crate) fn answer(&self, key: &str, value: Vec<u8>) -> bool {
        let Some(question) = self.by_key.get(key) else {
            return false;
        };
        question.send_if_modified(|reply| {
            if *reply == Reply::Pending {
                *reply = Reply::Answered(value.into());
                true
            } else {
                false
            }
        })
    }

    /// The item went back to the supervisor: every `ask` still waiting
    /// fails with [`AskError::GivenBack`].
    pub(crate) fn give_back(&self) {
        for question in self.by_key.values() {
            question.send_if_modified(|reply| {
                let pending = *reply == Reply::Pending;
                if pending {
                    *reply = Reply::GivenBack;
                }
                pending
            });
        }
    }
}

/// Checks a question's key: 1 to [`MAX_KEY_BYTES`] bytes (a `&str` is
/// UTF-8 already).
pub(crate) fn check_key(key: &str) -> Result<(), AskError> {
    if key.is_empty() || key.len() > MAX_KEY_BYTES {
        return Err(AskError::BadKey(key.len()));
    }
    Ok(())
}

/// `value` as compact JSON of at most [`MAX_JSON_BYTES`]; `what` names it
/// in the error.
pub(crate) fn json_of<T: Serialize + ?Sized>(
    what: &'static str,
    value: &T,
) -> Result<Vec<u8>, AskError> {
    let bytes = serde_json::to_vec(value).map_err(|e| AskError::NotJson {
        what,
        reason: e.to_string(),
    })?;
    if bytes.len() > MAX_JSON_BYTES {
        return Err(AskError::TooLarge {
            what,
            bytes: bytes.len(),
        });
    }
    Ok(bytes)
}

/// An answer's bytes as the JSON value they hold.
pub(crate) fn parse_answer(key: &str, value: &[u8]) -> Result<Value, AskError> {
    serde_json::from_slice(value).map_err(|e| AskError::BadAnswer {
        key: key.to_owned(),
        reason: e.to_string(),
    })
}

/// bincode's varint of `v`: one byte below 251, else a tag and 2, 4 or 8.
pub(crate) fn varint_len(v: u64) -> usize {
    match v {
        0..=250 => 1,
        251..=0xffff => 3,
        0x1_0000..=0xffff_ffff => 5,
        _ => 9,
    }
}

/// A frame body's sequence number at its largest, and its variant tag.
const SEQ_AND_VARIANT: usize = 9 + 1;

/// The bytes of an `Ask` frame body (sequence number at its largest):
/// what must fit in `max_frame_bytes`.
pub(crate) fn ask_frame_bytes(id: u64, key_len: usize, prompt_len: usize) -> usize {
    SEQ_AND_VARIANT
        + varint_len(id)
        + varint_len(key_len as u64)
        + key_len
        + varint_len(prompt_len as u64)
        + prompt_len
}

/// The bytes of a `Progress` frame body (sequence number at its largest).
pub(crate) fn progress_frame_bytes(id: u64, data_len: usize) -> usize {
    SEQ_AND_VARIANT + varint_len(id) + varint_len(data_len as u64) + data_len
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use wfhost_ipc::{Event, Frame, encode_frame};

    use super::*;

    fn body_len(event: Event) -> usize {
        let mut out = Vec::new();
        encode_frame(
            &Frame {
                seq: u64::MAX,
                body: event,
            },
            u32::MAX,
            &mut out,
        )
        .unwrap();
        out.len() - wfhost_ipc::frame::HEADER_BYTES
    }

    #[test]
    fn frame_sizes_are_counted_exactly_for_the_largest_seq() {
        for id in [0, 250, 251, 65_536, u64::MAX] {
            for len in [0, 250, 251, 65_536, 70_000] {
                let key = "k".repeat(len.min(300));
                assert_eq!(
                    ask_frame_bytes(id, key.len(), len),
                    body_len(Event::Ask {
                        id,
                        key: key.clone(),
                        prompt: vec![b'1'; len]
                    }),
                    "Ask {id} {len}"
                );
                assert_eq!(
                    progress_frame_bytes(id, len),
                    body_len(Event::Progress {
                        id,
                        data: vec![b'1'; len]
                    }),
                    "Progress {id} {len}"
                );
            }
        }
    }

    #[test]
    fn keys_are_1_to_256_bytes() {
        assert_eq!(check_key(""), Err(AskError::BadKey(0)));
        assert_eq!(check_key("k"), Ok(()));
        assert_eq!(check_key(&"k".repeat(256)), Ok(()));
        assert_eq!(check_key(&"k".repeat(257)), Err(AskError::BadKey(257)));
        // 128 two-byte characters are 256 bytes; one more is 258.
        assert_eq!(check_key(&"é".repeat(128)), Ok(()));
        assert_eq!(check_key(&"é".repeat(129)), Err(AskError::BadKey(258)));
    }

    #[test]
    fn json_is_compact_and_at_most_64_kib() {
        assert_eq!(
            json_of("prompt", &json!({"approved": true, "n": [1, 2]})).unwrap(),
            br#"{"approved":true,"n":[1,2]}"#
        );
        let fits = "p".repeat(MAX_JSON_BYTES - 2);
        assert_eq!(json_of("prompt", &fits).unwrap().len(), MAX_JSON_BYTES);
        let over = "p".repeat(MAX_JSON_BYTES - 1);
        assert_eq!(
            json_of("progress data", &over),
            Err(AskError::TooLarge {
                what: "progress data",
                bytes: MAX_JSON_BYTES + 1
            })
        );
        let mut bad = std::collections::HashMap::new();
        bad.insert((1, 2), 3);
        assert!(matches!(
            json_of("prompt", &bad),
            Err(AskError::NotJson { what: "prompt", .. })
        ));
    }

    #[test]
    fn one_answer_resolves_every_waiter_and_is_remembered_the_first_standing() {
        let mut q = Questions::default();
        assert!(matches!(q.find("k"), Found::New));
        assert!(!q.answer("k", b"1".to_vec()), "not asked: ignored");
        let first = q.open(1, "k").unwrap();
        let Found::Waiting(second) = q.find("k") else {
            panic!("a second ask waits with the first");
        };
        assert!(q.answer("k", b"true".to_vec()));
        assert!(!q.answer("k", b"false".to_vec()), "the first answer stands");
        for rx in [first, second] {
            assert_eq!(*rx.borrow(), Reply::Answered(b"true".to_vec().into()));
        }
        assert!(matches!(q.find("k"), Found::Answered(v) if &*v == b"true"));
        assert_eq!(parse_answer("k", b"true"), Ok(json!(true)));
        assert!(matches!(
            parse_answer("k", b"{"),
            Err(AskError::BadAnswer { .. })
        ));
    }

    #[test]
    fn give_back_fails_the_waiters_and_leaves_answers_alone() {
        let mut q = Questions::default();
        let answered = q.open(1, "a").unwrap();
        q.answer("a", b"1".to_vec());
        let waiting = q.open(1, "b").unwrap();
        q.give_back();
        assert_eq!(*waiting.borrow(), Reply::GivenBack);
        assert_eq!(*answered.borrow(), Reply::Answered(b"1".to_vec().into()));
    }

    #[test]
    fn an_item_asks_at_most_64_distinct_questions() {
        let mut q = Questions::default();
        for i in 0..MAX_QUESTIONS {
            q.open(7, &format!("k{i}")).unwrap();
        }
        assert_eq!(
            q.open(7, "one more").unwrap_err(),
            AskError::TooManyQuestions(7)
        );
    }
}
