//! What one live child holds, as far as its questions go (docs/protocol.md
//! §4.12): which items it was handed and started, and the keys their
//! handlers asked, so a question about an item it does not hold, a bad
//! key or prompt, or a flood of questions is a violation named at once,
//! and a question asked again in the same child costs no store write.

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use wfhost_policy::item::{MAX_JSON_BYTES, MAX_KEY_BYTES, MAX_QUESTIONS_PER_ITEM};

/// One held item.
#[derive(Debug, Default)]
struct Item {
    started: bool,
    keys: HashSet<String>,
}

/// The items one child holds, and their questions.
#[derive(Debug, Default)]
pub struct Held {
    items: HashMap<u64, Item>,
}

/// JSON of at most [`MAX_JSON_BYTES`], parsed, or what is wrong with it
/// (`what`: "prompt", "progress").
pub fn json(what: &str, bytes: &[u8]) -> Result<Value, String> {
    if bytes.len() > MAX_JSON_BYTES {
        return Err(format!(
            "{what} of {} bytes is over the {MAX_JSON_BYTES}-byte bound",
            bytes.len()
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| format!("{what} is not JSON: {e}"))
}

impl Held {
    /// The item was handed to the child.
    pub fn delivered(&mut self, id: u64) {
        self.items.entry(id).or_default();
    }

    /// Its handler started it.
    pub fn started(&mut self, id: u64) {
        if let Some(item) = self.items.get_mut(&id) {
            item.started = true;
        }
    }

    /// It left the child (done, or given back).
    pub fn ended(&mut self, id: u64) {
        self.items.remove(&id);
    }

    /// Whether the child holds `id` and its handler started it, or why
    /// an event about it is a violation.
    pub fn check_started(&self, id: u64, event: &str) -> Result<(), String> {
        match self.items.get(&id) {
            Some(item) if item.started => Ok(()),
            Some(_) => Err(format!(
                "{event} for mail {id}, which its handler has not started"
            )),
            None => Err(format!(
                "{event} for mail {id}, which this child does not hold"
            )),
        }
    }

    /// A question of item `id`: its prompt parsed, and whether it is new
    /// in this child (asked again, it is already on its way to the store
    /// or answered), or the violation it is.
    pub fn ask(&mut self, id: u64, key: &str, prompt: &[u8]) -> Result<(Value, bool), String> {
        self.check_started(id, "Ask")?;
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(format!(
                "Ask for mail {id} has a key of {} bytes (1 to {MAX_KEY_BYTES})",
                key.len()
            ));
        }
        let prompt = json("prompt", prompt).map_err(|e| format!("Ask for mail {id}: {e}"))?;
        let item = self.items.entry(id).or_default();
        if item.keys.contains(key) {
            return Ok((prompt, false));
        }
        if item.keys.len() >= MAX_QUESTIONS_PER_ITEM {
            return Err(format!(
                "more than {MAX_QUESTIONS_PER_ITEM} questions for mail {id}"
            ));
        }
        item.keys.insert(key.to_owned());
        Ok((prompt, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_started_items_handler_asks_within_the_bounds() {
        let mut held = Held::default();
        assert!(
            held.ask(1, "k", b"{}")
                .unwrap_err()
                .contains("does not hold")
        );
        held.delivered(1);
        assert!(held.ask(1, "k", b"{}").unwrap_err().contains("not started"));
        held.started(1);
        assert!(held.ask(1, "k", br#"{"a":1}"#).unwrap().1);
        assert!(!held.ask(1, "k", b"{}").unwrap().1, "asked again");
        assert!(
            held.ask(1, "", b"{}")
                .unwrap_err()
                .contains("key of 0 bytes")
        );
        let long = "k".repeat(257);
        assert!(held.ask(1, &long, b"{}").unwrap_err().contains("257 bytes"));
        assert!(held.ask(1, "j", b"{nope").unwrap_err().contains("not JSON"));
        let big = format!("\"{}\"", "p".repeat(MAX_JSON_BYTES));
        assert!(
            held.ask(1, "j", big.as_bytes())
                .unwrap_err()
                .contains("bound")
        );
        for n in 1..MAX_QUESTIONS_PER_ITEM {
            held.ask(1, &format!("q{n}"), b"1").unwrap();
        }
        assert!(
            held.ask(1, "one-more", b"1")
                .unwrap_err()
                .contains("more than 64")
        );
        held.ended(1);
        assert!(held.check_started(1, "Progress").is_err());
    }
}
