//! `send`: accept mail for a deployment, durable before the answer.

use serde_json::json;
use tokio::net::UnixStream;

use super::{Context, lookup};
use crate::clock::unix_ms;
use crate::config::DeploymentConfig;
use crate::control::budget;
use crate::control::protocol::{MAX_KEY_BYTES, Response};
use crate::control::server::REQUEST_TIMEOUT;
use crate::deployment::Ask;
use crate::exit;
use crate::status::Status;
use crate::store::offers::Refused;
use crate::store::{Accepted, Offer};

/// What a `send` asks, besides its deployment.
#[derive(Debug, Clone)]
pub struct Sending {
    /// How many payload bytes follow the request.
    pub payload_bytes: u64,
    /// Its idempotency key.
    pub key: Option<String>,
    /// Its own deadline, in ms from its first delivery.
    pub deadline_ms: Option<u64>,
}

/// Checks the request, reads its payload, and answers once the store has
/// it (or refuses, having written nothing).
pub async fn answer(
    ctx: &Context,
    stream: &mut UnixStream,
    deployment: &str,
    sending: Sending,
) -> Result<Response, Response> {
    let handle = lookup(&ctx.registry, deployment)?;
    let cfg = handle.config();
    handle.with_status(|status| admit(&cfg, status, &sending))?;
    let accepted = accept(ctx, stream, &cfg, sending).await?;
    if accepted.new {
        handle.tell(Ask::MailArrived).await;
    }
    Ok(Response::ok(
        json!({ "deployment": deployment, "id": accepted.id, "new": accepted.new }),
    ))
}

/// Reads the payload of an admitted `send` for `cfg`'s deployment and
/// offers it to the store (a fleet host's for a deployment owned
/// elsewhere too); the answer once it is durable, or a refusal having
/// written nothing.
pub(super) async fn accept(
    ctx: &Context,
    stream: &mut UnixStream,
    cfg: &DeploymentConfig,
    sending: Sending,
) -> Result<Accepted, Response> {
    let Sending {
        payload_bytes,
        key,
        deadline_ms,
    } = sending;
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
        deployment: cfg.id.clone(),
        key,
        payload,
        max_inbox: cfg.max_inbox,
        deadline_ms,
        at_ms: unix_ms(),
    };
    // Written with whatever other senders offer meanwhile: one commit.
    let accepted = ctx
        .shared
        .sends
        .offer(&ctx.shared.store, offer)
        .await
        .map_err(|refused| refusal(&cfg.id, refused))?;
    if accepted.new {
        // The store wrote the `mail_accepted` event with the mail.
        ctx.shared.events_written();
    }
    Ok(accepted)
}

/// The answer to an offer the store did not take: a refusal (nothing
/// written), or, when its commit failed in a way that leaves it open, an
/// unknown outcome that a client settles by sending again under the same
/// key (it enqueues at most once).
fn refusal(deployment: &str, refused: Refused) -> Response {
    if !refused.unknown {
        return Response::failed(exit::FAILED, refused.message);
    }
    Response::unknown(
        exit::FAILED,
        format!(
            "the mail for {deployment} may or may not have been accepted: the store failed while committing \
             it: {}\n  help: send it again with the same --key: a retry under the key returns the item if it \
             was accepted and enqueues it once if it was not (the wfhost CLI and the SDK clients do this \
             themselves)",
            refused.message
        ),
    )
}

/// Whether a deployment takes this mail, decided before its payload is
/// read (the inbox limit is the store's, checked with the write): a valid
/// key, a child that takes mail, a payload within `max_mail_bytes`.
pub(super) fn admit(
    cfg: &DeploymentConfig,
    status: &Status,
    sending: &Sending,
) -> Result<(), Response> {
    let id = &cfg.id;
    let payload_bytes = sending.payload_bytes;
    if sending.deadline_ms == Some(0) {
        return Err(Response::failed(
            exit::USAGE,
            "a deadline of 0 would cancel the item as it starts; give a positive duration (e.g. 30s); nothing was accepted",
        ));
    }
    if let Some(key) = sending.key.as_deref()
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
                "payload of {payload_bytes} bytes exceeds max_mail_bytes ({} bytes) of {id}; nothing was accepted\n  \
                 help: raise max_mail_bytes for {id} in the config, and max_frame_bytes with it (at least \
                 max_mail_bytes + 4KiB: an item travels to the child in one frame), then `wfhost reload`; \
                 or send a smaller payload (a path or a URL to the data instead of the data)",
                cfg.max_mail_bytes
            ),
        ));
    }
    Ok(())
}
