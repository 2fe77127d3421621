//! `send`: accept mail for a deployment, durable before the answer.

use serde_json::json;
use tokio::net::UnixStream;

use super::{Context, lookup};
use crate::config::DeploymentConfig;
use crate::control::budget;
use crate::control::protocol::{MAX_KEY_BYTES, Response};
use crate::control::server::REQUEST_TIMEOUT;
use crate::deployment::Ask;
use crate::exit;
use crate::observe::status::Status;
use crate::shared::unix_ms;
use crate::store::Offer;

/// Checks the request, reads its payload, and answers once the store has
/// it (or refuses, having written nothing).
pub async fn answer(
    ctx: &Context,
    stream: &mut UnixStream,
    deployment: &str,
    payload_bytes: u64,
    key: Option<String>,
) -> Result<Response, Response> {
    let handle = lookup(&ctx.registry, deployment)?;
    let cfg = handle.config();
    handle.with_status(|status| admit(&cfg, status, payload_bytes, key.as_deref()))?;
    let payload = tokio::time::timeout(
        REQUEST_TIMEOUT,
        budget::read_payload(stream, payload_bytes, &ctx.budget),
    )
    .await
    .map_err(|_| {
        Response::failed(
            exit::USAGE,
            format!("the payload did not arrive within {REQUEST_TIMEOUT:?}; nothing was accepted"),
        )
    })?
    .map_err(|e| match e {
        budget::ReadError::Full(why) => Response::failed(exit::FAILED, why),
        e => Response::failed(
            exit::USAGE,
            format!("unreadable payload: {e}; nothing was accepted"),
        ),
    })?;
    let offer = Offer {
        deployment: deployment.to_owned(),
        key,
        payload,
        max_inbox: cfg.max_inbox,
        at_ms: unix_ms(),
    };
    // Written with whatever other senders offer meanwhile: one commit.
    let accepted = ctx
        .shared
        .sends
        .offer(&ctx.shared.store, offer)
        .await
        .map_err(|e| Response::failed(exit::FAILED, e))?;
    if accepted.new {
        // The store wrote the `mail_accepted` event with the mail.
        ctx.shared.events_written();
        handle.tell(Ask::MailArrived).await;
    }
    Ok(Response::ok(
        json!({ "deployment": deployment, "id": accepted.id, "new": accepted.new }),
    ))
}

/// Whether a deployment takes this mail, decided before its payload is
/// read (the inbox limit is the store's, checked with the write): a valid
/// key, a child that takes mail, a payload within `max_mail_bytes`.
fn admit(
    cfg: &DeploymentConfig,
    status: &Status,
    payload_bytes: u64,
    key: Option<&str>,
) -> Result<(), Response> {
    let id = &cfg.id;
    if let Some(key) = key
        && (key.is_empty() || key.len() > MAX_KEY_BYTES)
    {
        return Err(Response::failed(
            exit::USAGE,
            format!(
                "idempotency key must be 1 to {MAX_KEY_BYTES} bytes, not {}; nothing was accepted",
                key.len()
            ),
        ));
    }
    if status.takes_mail == Some(false) {
        let who = status.implementation.as_deref().unwrap_or("its child");
        return Err(Response::failed(
            exit::FAILED,
            format!(
                "deployment {id} takes no mail: its child ({who}) said so in its handshake, as a plain command \
                 under `wfhost-child exec` does; nothing was accepted\n  help: make {id}'s command a workflow \
                 that takes mail (the Rust, TypeScript or Python SDK), or send to another deployment"
            ),
        ));
    }
    if payload_bytes > u64::from(cfg.max_mail_bytes) {
        return Err(Response::failed(
            exit::FAILED,
            format!(
                "payload of {payload_bytes} bytes exceeds max_mail_bytes ({} bytes) of {id}; nothing was accepted",
                cfg.max_mail_bytes
            ),
        ));
    }
    Ok(())
}
