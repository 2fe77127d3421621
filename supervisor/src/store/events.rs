//! The durable event log as the store sees it (DESIGN §7): what
//! `wfhost events --follow --after N` reads back from a cursor.

use serde::Serialize;

/// One event of the log, numbered by `seq`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRecord {
    /// Position in the log: strictly increasing, never reused, so it is a
    /// cursor a follower can resume after.
    pub seq: u64,
    /// Unix time in milliseconds when it happened.
    pub at_ms: u64,
    /// The deployment it concerns; `None` for the supervisor as a whole.
    pub deployment: Option<String>,
    /// What happened (`spawned`, `recycled`, ...).
    pub kind: String,
    /// The details, as given to [`EventStore::append_events`](super::EventStore::append_events).
    pub body: serde_json::Value,
}

impl EventRecord {
    /// The mail item this event is about, if one: a mail or question
    /// event's `id`, a cancel's `mail`, or a step of the run `mail-<id>`
    /// (the run an item's handler runs in unless it names its own).
    pub fn mail_id(&self) -> Option<u64> {
        let b = &self.body;
        match self.kind.as_str() {
            k if k.starts_with("mail_") || k.starts_with("question_") => b["id"].as_u64(),
            "cancel_committed" => b["mail"].as_u64(),
            "step_started" | "step_finished" | "run_terminal" => b["run"]
                .as_str()
                .and_then(|r| r.strip_prefix("mail-"))
                .and_then(|id| id.parse().ok()),
            _ => None,
        }
    }

    /// Whether this event ends its item (`mail_done`, `mail_dead`).
    pub fn ends_item(&self) -> bool {
        matches!(self.kind.as_str(), "mail_done" | "mail_dead")
    }
}

/// An event to append, before the store numbers it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    /// Unix time in milliseconds when it happened.
    pub at_ms: u64,
    /// The deployment it concerns; `None` for the supervisor as a whole.
    pub deployment: Option<String>,
    /// What happened.
    pub kind: String,
    /// The details.
    pub body: serde_json::Value,
}

/// An event body as stored (JSON text), or what is wrong with it.
pub fn parse_body(seq: u64, text: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(text).map_err(|e| format!("event {seq}: body is not JSON: {e}"))
}
