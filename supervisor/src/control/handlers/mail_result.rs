//! `mail-result`: one item's end (its outcome and its result), at once
//! or once it ends. A waiter wakes on every commit of events (an item's
//! end commits its `mail_done` event with it; in a fleet, the database's
//! notification of another host's commit), so it never polls on a timer.

use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use super::Context;
use crate::control::protocol::Response;
use crate::exit;
use crate::store::{MailState, MailView};

/// The longest one request waits: a client that wants longer asks again,
/// so a caller that went away holds its connection for this at most.
pub const MAX_WAIT_MS: u64 = 300_000;

/// The item's end, or (after `wait_ms` at most) where it is meanwhile.
pub async fn answer(ctx: &Context, id: u64, wait_ms: Option<u64>) -> Result<Response, Response> {
    let wait_ms = wait_ms.map(|w| w.min(MAX_WAIT_MS));
    // Subscribed before the first read: an end committed in between still
    // wakes the wait.
    let mut ticks = ctx.shared.events.subscribe();
    let give_up = tokio::time::Instant::now() + Duration::from_millis(wait_ms.unwrap_or(0));
    loop {
        let item = read(ctx, id).await?;
        if ended(&item) || tokio::time::Instant::now() >= give_up {
            return Ok(Response::ok(view(ctx, item).await?));
        }
        match tokio::time::timeout_at(give_up, ticks.changed()).await {
            Ok(Ok(())) => {}
            // The supervisor is stopping, or the wait is over: say where
            // the item is now.
            Ok(Err(_)) | Err(_) => {
                let item = read(ctx, id).await?;
                return Ok(Response::ok(view(ctx, item).await?));
            }
        }
    }
}

/// Whether an item has ended: done (with an outcome) or dead.
fn ended(item: &MailView) -> bool {
    matches!(item.state, MailState::Done | MailState::Dead)
}

/// Item `id` as stored, or a refusal naming it.
async fn read(ctx: &Context, id: u64) -> Result<MailView, Response> {
    let found = ctx
        .shared
        .reader
        .call(move |s| s.mail_item(id))
        .await
        .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?
        .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?;
    found.ok_or_else(|| {
        Response::failed(
            exit::FAILED,
            format!(
                "no mail item {id} is stored (done mail is kept for mail_retention, then deleted)\n  help: `wfhost mail list` shows the items there are"
            ),
        )
    })
}

/// What the answer says of an item: its outcome and reason split from
/// the stored text, and its result (read only once it has ended).
async fn view(ctx: &Context, item: MailView) -> Result<Value, Response> {
    let (outcome, reason) = match (&item.state, item.outcome.as_deref()) {
        (MailState::Done, Some(text)) => split_outcome(text),
        (MailState::Dead, _) => (
            Some("dead"),
            item.last_failure.as_ref().map(|f| f.cause.clone()),
        ),
        _ => (None, None),
    };
    let result = if item.state == MailState::Done {
        let id = item.id;
        let bytes = ctx
            .shared
            .reader
            .call(move |s| s.mail_result(id))
            .await
            .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?
            .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?
            .unwrap_or_default();
        Some(base64::engine::general_purpose::STANDARD.encode(bytes))
    } else {
        None
    };
    Ok(json!({
        "id": item.id,
        "deployment": item.deployment,
        "ended": ended(&item),
        "state": item.state.as_str(),
        "outcome": outcome,
        "reason": reason,
        "result": result,
        "result_bytes": item.result_bytes,
    }))
}

/// `"failed: why"` as (`failed`, `why`); `"succeeded"` as (`succeeded`, none).
fn split_outcome(text: &str) -> (Option<&str>, Option<String>) {
    match text.split_once(": ") {
        Some((outcome, reason)) => (Some(outcome), Some(reason.to_owned())),
        None => (Some(text), None),
    }
}

#[cfg(test)]
mod tests {
    use super::split_outcome;

    #[test]
    fn a_stored_outcome_splits_into_its_word_and_reason() {
        assert_eq!(split_outcome("succeeded"), (Some("succeeded"), None));
        assert_eq!(
            split_outcome("failed: card declined: twice"),
            (Some("failed"), Some("card declined: twice".to_owned()))
        );
    }
}
