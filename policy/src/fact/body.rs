//! The bodies of the facts that take more than one `json!` to build, and
//! the units bodies use; the names and values are the stable vocabulary.

use std::time::Duration;

use serde_json::{Value, json};

use crate::drain::DrainPurpose;
use crate::exit::ExitCause;
use crate::recycle::RecycleCause;

/// Sets `key` of an object body.
fn put(body: &mut Value, key: &str, value: impl Into<Value>) {
    if let Some(map) = body.as_object_mut() {
        map.insert(key.to_owned(), value.into());
    }
}

/// Milliseconds of a duration, for bodies.
pub(super) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A child's wiring ended: why, in words and as a kind.
pub(super) fn exited(pid: u32, channel_id: &str, cause: &ExitCause) -> Value {
    json!({
        "pid": pid, "channel_id": channel_id, "reason": cause.describe(), "cause": cause.kind(),
    })
}

/// A drain began; for a recycle, with who asked and why.
pub(super) fn drain_started(
    pid: u32,
    purpose: DrainPurpose,
    budget: Duration,
    recycle: Option<&(RecycleCause, String)>,
) -> Value {
    let mut body = json!({"pid": pid, "purpose": purpose.as_str(), "budget_ms": ms(budget)});
    if let Some((cause, reason)) = recycle {
        put(&mut body, "origin", cause.origin());
        put(&mut body, "reason", reason.clone());
    }
    body
}

/// The signed cancel as committed, with its journal record once it has one.
pub(super) fn cancel_committed(cancel: &Value, journal_seq: Option<u64>) -> Value {
    let mut body = cancel.clone();
    if let Some(seq) = journal_seq {
        put(&mut body, "journal_seq", seq);
    }
    body
}

/// A recycle completed: who asked, why, and the old and new child.
pub(super) fn recycled(
    cause: &RecycleCause,
    reason: &str,
    old_pid: Option<u32>,
    new_pid: u32,
    old_channel_id: Option<&str>,
    new_channel_id: &str,
) -> Value {
    json!({
        "origin": cause.origin(), "trigger": cause.key(), "reason": reason,
        "old_pid": old_pid, "new_pid": new_pid,
        "old_channel_id": old_channel_id, "new_channel_id": new_channel_id,
    })
}

/// A reload: whether it was taken and, if so, the deployments added,
/// removed and changed and the settings changed; the error if any.
pub(super) fn config_reloaded(
    accepted: bool,
    added: &[String],
    removed: &[String],
    changed: &[String],
    settings: &[String],
    error: Option<&str>,
) -> Value {
    let mut body = json!({"accepted": accepted});
    if accepted {
        put(&mut body, "added", json!(added));
        put(&mut body, "removed", json!(removed));
        put(&mut body, "changed", json!(changed));
        put(&mut body, "settings", json!(settings));
    }
    if let Some(e) = error {
        put(&mut body, "error", e);
    }
    body
}
