//! One handler per control request, each answering for one deployment (or
//! all) from the supervisor's registry.

pub mod answer;
pub mod cancel;
pub mod drain;
pub mod events;
pub mod fleet;
pub mod hosts;
pub mod kill;
pub mod logs;
pub mod mail;
pub mod mail_cancel;
pub mod mail_result;
pub mod questions;
pub mod recycle;
pub mod reload;
pub mod resume;
pub mod send;
pub mod status;
pub mod stop;

use std::sync::Arc;

use tokio::net::UnixStream;

use super::host::HostAsks;
use super::protocol::{Request, Response};
use crate::deployment::Registry;
use crate::deployment::{Asked, DeploymentHandle};
use crate::exit;
use crate::shared::Shared;

/// What a handler needs.
#[derive(Clone)]
pub struct Context {
    /// The live deployments.
    pub registry: Registry,
    /// The store and the rest.
    pub shared: Arc<Shared>,
    /// The control loop, for reload and stop.
    pub host: HostAsks,
    /// What every client's requests may hold together.
    pub budget: Arc<crate::control::budget::Budget>,
}

/// Answers one (non-streaming) request from a client.
pub async fn answer(request: Request, stream: &mut UnixStream, ctx: &Context) -> Response {
    // A fleet host answers for the whole fleet (owners elsewhere included).
    match fleet::route(request, stream, ctx).await {
        Ok(response) => response,
        Err(request) => dispatch(request, Some(stream), ctx).await,
    }
}

/// The table: each request to its handler, on this host. `stream` is the
/// client's (a `send` reads its payload from it; a mail change names who
/// made it); a request another host forwarded has none.
pub async fn dispatch(
    request: Request,
    stream: Option<&mut UnixStream>,
    ctx: &Context,
) -> Response {
    let name = request.name();
    let client = move || {
        stream.ok_or_else(|| {
            Response::failed(
                exit::USAGE,
                format!("{name} cannot be forwarded to a deployment's owner"),
            )
        })
    };
    let answered = match request {
        Request::Status => status::answer(ctx).await,
        Request::Reload => reload::answer(ctx).await,
        Request::Stop => stop::answer(ctx).await,
        Request::Kill { deployment } => kill::answer(ctx, &deployment).await,
        Request::Drain { deployment } => drain::answer(ctx, &deployment).await,
        Request::Resume { deployment } => resume::answer(ctx, &deployment).await,
        Request::Recycle { deployment, reason } => recycle::answer(ctx, &deployment, reason).await,
        Request::Cancel { deployment, run } => cancel::answer(ctx, &deployment, run).await,
        Request::Send {
            deployment,
            payload_bytes,
            key,
            deadline_ms,
        } => match client() {
            Ok(stream) => {
                let sending = send::Sending {
                    payload_bytes,
                    key,
                    deadline_ms,
                };
                send::answer(ctx, stream, &deployment, sending).await
            }
            Err(refusal) => Err(refusal),
        },
        Request::Events { .. } | Request::Logs { .. } => Err(Response::failed(
            exit::USAGE,
            "events and logs are streaming requests",
        )),
        Request::Move { deployment, to } => fleet::moved(ctx, &deployment, &to).await,
        Request::HostDrain { host, wait } => {
            hosts::drain(ctx, client().ok().map(|s| &*s), &host, wait).await
        }
        Request::HostResume { host } => hosts::resume(ctx, client().ok().map(|s| &*s), &host).await,
        Request::Hosts => hosts::list(ctx).await,
        Request::MailList {
            deployment,
            state,
            after,
            limit,
        } => mail::list(ctx, deployment, state, after, limit).await,
        Request::MailShow { id } => mail::show(ctx, id).await,
        Request::MailResult { id, wait_ms } => mail_result::answer(ctx, id, wait_ms).await,
        Request::MailCancel { id, reason } => {
            mail_cancel::answer(ctx, client().ok().map(|s| &*s), id, reason).await
        }
        Request::Questions { deployment } => questions::answer(ctx, deployment).await,
        Request::Answer {
            id,
            key,
            value,
            by,
            peer,
        } => {
            let stream = client().ok().map(|s| &*s);
            // Only a forwarding host says who asked it; a client is who
            // its credentials say.
            let peer = peer.filter(|_| stream.is_none());
            let given = answer::Given {
                id,
                key,
                value,
                by,
                peer,
            };
            answer::answer(ctx, stream, given).await
        }
        Request::MailPayload { id, offset, length } => mail::payload(ctx, id, offset, length).await,
        Request::MailRetry {
            id,
            dead,
            deployment,
        } => match client() {
            Ok(stream) => mail::retry(ctx, stream, id, dead, deployment).await,
            Err(refusal) => Err(refusal),
        },
        Request::MailPurge {
            deployment,
            older_than_ms,
        } => match client() {
            Ok(stream) => mail::purge(ctx, stream, deployment, older_than_ms).await,
            Err(refusal) => Err(refusal),
        },
    };
    match answered {
        Ok(r) | Err(r) => r,
    }
}

/// The handle of deployment `id`, or a refusal listing the known ones.
pub fn lookup(registry: &Registry, id: &str) -> Result<DeploymentHandle, Response> {
    let map = registry.read().unwrap_or_else(|p| p.into_inner());
    map.get(id).cloned().ok_or_else(|| {
        let known: Vec<&str> = map.keys().map(String::as_str).collect();
        Response::failed(
            exit::FAILED,
            format!(
                "unknown deployment {id:?}; known deployments: {}",
                known.join(", ")
            ),
        )
    })
}

/// The refusal for a request a deployment did not carry out.
pub fn refused(asked: Asked) -> Response {
    match asked {
        Asked::Refused(e) => Response::failed(exit::FAILED, e),
        Asked::Gone => Response::failed(
            exit::FAILED,
            "the deployment is shutting down; nothing was done",
        ),
    }
}
