//! One handler per control request, each answering for one deployment (or
//! all) from the supervisor's registry.

pub mod answer;
pub mod cancel;
pub mod console_token;
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

use serde_json::{Value, json};

use super::host::HostAsks;
use super::protocol::{Request, Response};
use crate::deployment::Registry;
use crate::deployment::{Asked, DeploymentHandle};
use crate::exit;
use crate::login::Who;
use crate::shared::Shared;

/// Who made a request: what the journal says of a mail change or an
/// answer, and where a `send`'s payload comes from.
pub enum Caller<'a> {
    /// A control-socket client: its peer credentials say who, and a
    /// `send`'s payload follows its request on the socket.
    Client(&'a mut UnixStream),
    /// A console session: the user who minted its login link, through
    /// the control socket (`wfhost console token`).
    Console(&'a Who),
}

impl Caller<'_> {
    /// Who, as the control socket's peer credentials say it, or the
    /// console session's minter.
    fn who(&self) -> Option<Who> {
        match self {
            Self::Client(stream) => stream.peer_cred().ok().map(|cred| who_of(cred.uid())),
            Self::Console(who) => Some((*who).clone()),
        }
    }

    /// "ana (uid 1000)", or "ana (uid 1000) in the console": the words of
    /// a mail change's journal record.
    pub fn name(&self) -> String {
        let name = self
            .who()
            .map_or_else(|| "an operator".into(), |w| w.name());
        match self {
            Self::Client(_) => name,
            Self::Console(_) => format!("{name} in the console"),
        }
    }

    /// `{"uid", "user"}` (and `"via": "console"`): who answered a question.
    pub fn json(&self) -> Value {
        let mut by = match self.who() {
            Some(w) => json!({"uid": w.uid, "user": w.user}),
            None => json!({"uid": null, "user": null}),
        };
        if let (Self::Console(_), Some(map)) = (self, by.as_object_mut()) {
            map.insert("via".into(), "console".into());
        }
        by
    }
}

/// A uid and its user name, if the system has one.
pub fn who_of(uid: u32) -> Who {
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map(|u| u.name);
    Who {
        uid: Some(uid),
        user,
    }
}

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
    match fleet::route(request, Some(&mut *stream), ctx).await {
        Ok(response) => response,
        Err(request) => dispatch(request, Some(Caller::Client(stream)), ctx).await,
    }
}

/// Answers a request a console session made, as a client's is answered
/// (a fleet host carries it to the owner), journaled as that session's.
pub async fn answer_console(request: Request, who: &Who, ctx: &Context) -> Response {
    if matches!(request, Request::Send { .. }) {
        return Response::failed(exit::USAGE, "the console sends no mail");
    }
    match fleet::route(request, None, ctx).await {
        Ok(response) => response,
        Err(request) => dispatch(request, Some(Caller::Console(who)), ctx).await,
    }
}

/// The table: each request to its handler, on this host. `caller` is who
/// made it (a client's `send` reads its payload from its stream; a mail
/// change names who made it); a request another host forwarded has none.
pub async fn dispatch(request: Request, caller: Option<Caller<'_>>, ctx: &Context) -> Response {
    let name = request.name();
    let by = caller.as_ref().map(Caller::name);
    let by_json = caller.as_ref().map(Caller::json);
    let unforwarded = format!("{name} cannot be forwarded to a deployment's owner");
    let forwarded = move || Response::failed(exit::USAGE, unforwarded.clone());
    let client = move || match caller {
        Some(Caller::Client(stream)) => Ok(stream),
        Some(Caller::Console(_)) => Err(Response::failed(
            exit::USAGE,
            "the console cannot make this request",
        )),
        None => Err(Response::failed(
            exit::USAGE,
            format!("{name} cannot be forwarded to a deployment's owner"),
        )),
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
        Request::MailCancel { id, reason } => mail_cancel::answer(ctx, by, id, reason).await,
        Request::Questions { deployment } => questions::answer(ctx, deployment).await,
        Request::Answer {
            id,
            key,
            value,
            by,
            peer,
        } => {
            // Only a forwarding host says who asked it; a client is who
            // its credentials say.
            let peer = peer.filter(|_| by_json.is_none());
            let given = answer::Given {
                id,
                key,
                value,
                by,
                peer,
            };
            answer::answer(ctx, by_json, given).await
        }
        Request::MailPayload { id, offset, length } => mail::payload(ctx, id, offset, length).await,
        Request::MailRetry {
            id,
            dead,
            deployment,
        } => match by {
            Some(by) => mail::retry(ctx, by, id, dead, deployment).await,
            None => Err(forwarded()),
        },
        Request::MailPurge {
            deployment,
            older_than_ms,
        } => match by {
            Some(by) => mail::purge(ctx, by, deployment, older_than_ms).await,
            None => Err(forwarded()),
        },
        Request::ConsoleToken { ttl_ms } => match client() {
            Ok(stream) => console_token::answer(ctx, stream, ttl_ms),
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
