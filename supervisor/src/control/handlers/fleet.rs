//! The control socket of a fleet host (DESIGN §10b): one fleet from any
//! host. `status` shows every deployment of the fleet with its owner;
//! `send` enqueues for any deployment (its owner is woken by the
//! database's notification); `recycle`, `drain`, `resume`, `cancel`,
//! `kill` and `move` for a deployment owned elsewhere are carried to its
//! owner through the database and answered with the owner's own answer.
//! Requests for deployments held here go to their local handlers.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use tokio::net::UnixStream;

use super::{Context, send, status};
use crate::control::forward;
use crate::control::protocol::{Request, Response, Route};
use crate::exit;
use crate::fleet::{Command, Fleet, view};
use crate::status::Status;

/// Answers `request` here if it is the fleet's to answer (`Ok`), or hands
/// it back for this host's handlers (`Err`): always so on a single host.
pub async fn route(
    request: Request,
    stream: Option<&mut UnixStream>,
    ctx: &Context,
) -> Result<Response, Request> {
    let Some(fleet) = ctx.shared.fleet.clone() else {
        return Err(request);
    };
    let target = match request.route() {
        Route::Anywhere => return Err(request),
        Route::Kept { deployment, what } => match elsewhere(ctx, deployment, what).await {
            Some(refusal) => return Ok(refusal),
            None => return Err(request),
        },
        Route::Fleet => match request {
            Request::Status => return Ok(whole(status(ctx, &fleet).await)),
            Request::Send {
                deployment,
                payload_bytes,
                key,
                deadline_ms,
            } if !here(ctx, &deployment)
                && let Some(stream) = stream =>
            {
                let sending = send::Sending {
                    payload_bytes,
                    key,
                    deadline_ms,
                };
                let sent = remote_send(ctx, &fleet, stream, &deployment, sending);
                return Ok(whole(sent.await));
            }
            // A move is the fleet's wherever it is asked (`moved`), and a
            // send for a deployment held here is this host's.
            request => return Err(request),
        },
        Route::Owner(deployment) => deployment.to_owned(),
    };
    // `DEP/N` names replica N of DEP.
    let base = match target.rsplit_once('/') {
        Some((d, n)) if n.parse::<u32>().is_ok() && fleet.config(&target).is_none() => d.to_owned(),
        _ => target,
    };
    if here(ctx, &base) {
        return Err(request);
    }
    if fleet.config(&base).is_none() {
        return Ok(unknown(&fleet, &base));
    }
    Ok(forward::to_owner(&fleet, &base, &request).await)
}

/// Answers a request another host forwarded: only for a deployment held
/// here (never forwarded again), else the sender is told to look again.
pub async fn local(request: Request, deployment: &str, ctx: &Context) -> Response {
    if !here(ctx, deployment) {
        let host = ctx.shared.fleet.as_ref().map_or("this host", |f| f.host());
        return Response::failed(
            exit::FAILED,
            format!(
                "{deployment} no longer runs on {host} (its lease moved on); nothing was done: retry, and the request goes to its new owner"
            ),
        );
    }
    // What an owner answers, a move (its owner hands it on), and a
    // cancel of, or an answer for, an item its owner's child holds.
    let owners = matches!(request.route(), Route::Owner(_))
        || matches!(
            request,
            Request::Move { .. } | Request::MailCancel { .. } | Request::Answer { .. }
        );
    if !owners {
        let name = request.name();
        return Response::failed(
            exit::USAGE,
            format!("{name} cannot be forwarded to a deployment's owner"),
        );
    }
    super::dispatch(request, None, ctx).await
}

fn whole(answered: Result<Response, Response>) -> Response {
    match answered {
        Ok(r) | Err(r) => r,
    }
}

/// The refusal for a request only the host running `deployment` can
/// answer (its output, its dead mail), asked on a fleet host that does
/// not run it; none when it runs here, or this is no fleet host, or the
/// fleet has no such deployment (the local handler answers then).
pub async fn elsewhere(ctx: &Context, deployment: &str, what: &str) -> Option<Response> {
    let fleet = ctx.shared.fleet.as_ref()?;
    if here(ctx, deployment) || fleet.config(deployment).is_none() {
        return None;
    }
    let owners = view::owners(fleet).await.unwrap_or_default();
    let owner = owners
        .iter()
        .find(|o| o.deployment == deployment)
        .and_then(view::holder);
    let host = fleet.host();
    Some(Response::failed(
        exit::FAILED,
        match owner {
            Some(owner) => format!(
                "{deployment} runs on {owner}, not on this host ({host}), and {what} is kept where it runs; nothing was done\n  help: run the same command on {owner}"
            ),
            None => format!(
                "{deployment} runs on no host right now (its lease is free), and {what} is kept where it runs; nothing was done\n  help: retry once `wfhost status` names its owner, on that host"
            ),
        },
    ))
}

/// Whether deployment `id` runs on this host now.
fn here(ctx: &Context, id: &str) -> bool {
    ctx.registry
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .contains_key(id)
}

/// The refusal for a deployment the fleet does not have.
fn unknown(fleet: &Fleet, id: &str) -> Response {
    Response::failed(
        exit::FAILED,
        format!(
            "unknown deployment {id:?}; the fleet's deployments: {}",
            fleet.deployments().join(", ")
        ),
    )
}

/// Every deployment of the fleet, each with its owner: those held here
/// from their tasks, the others from their owners' last snapshots, with
/// mail counts read from the store.
async fn status(ctx: &Context, fleet: &Arc<Fleet>) -> Result<Response, Response> {
    let local = status::answer(ctx).await?;
    let store = local.data.as_ref().and_then(|d| d.get("store").cloned());
    let mut mine: Vec<Value> = local
        .data
        .and_then(|d| d.get("deployments").cloned())
        .and_then(|d| d.as_array().cloned())
        .unwrap_or_default();
    let owners = view::owners(fleet)
        .await
        .map_err(|e| Response::failed(exit::FAILED, e))?;
    let ids = fleet.deployments();
    let remote: Vec<String> = ids
        .iter()
        .filter(|id| !mine.iter().any(|d| d["id"] == id.as_str()))
        .cloned()
        .collect();
    let wanted = remote.clone();
    let counts = ctx
        .shared
        .reader
        .call(move |s| {
            wanted
                .iter()
                .map(|id| s.mail_counts(id))
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?
        .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?;
    for d in &mut mine {
        let id = d["id"].as_str().unwrap_or_default().to_owned();
        d["owner"] = view::owner_json(owners.iter().find(|o| o.deployment == id));
    }
    for (id, mail) in remote.iter().zip(&counts) {
        let owner = owners.iter().find(|o| &o.deployment == id);
        mine.push(view::remote_json(fleet, id, owner, mail));
    }
    mine.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    // Why each runs where it does, or nowhere (`hosts`, live hosts).
    if let Ok(Ok(fleet_view)) = fleet.query.call(|s| s.fleet_view()).await {
        for d in &mut mine {
            let id = d["id"].as_str().unwrap_or_default().to_owned();
            let hosts = fleet
                .config(&id)
                .map(|c| c.hosts.clone())
                .unwrap_or_default();
            let owner = owners.iter().find(|o| o.deployment == id);
            let holder = owner.and_then(view::holder);
            d["placement"] = json!(wfhost_policy::lease::placement(
                &fleet_view,
                &id,
                &hosts,
                holder,
                &fleet.timing
            ));
            d["hosts"] = if hosts.is_empty() {
                Value::Null
            } else {
                json!(hosts)
            };
        }
    }
    Ok(Response::ok(
        json!({ "host": fleet.host(), "deployments": mine, "store": store }),
    ))
}

/// `send` for a deployment owned elsewhere (or by nobody right now):
/// accepted into its inbox here, durable before the answer, like a local
/// send; the owner is woken by the database.
async fn remote_send(
    ctx: &Context,
    fleet: &Fleet,
    stream: &mut UnixStream,
    deployment: &str,
    sending: send::Sending,
) -> Result<Response, Response> {
    let cfg = fleet
        .config(deployment)
        .ok_or_else(|| unknown(fleet, deployment))?;
    let mut as_known = Status::new(deployment, cfg.drain_timeout);
    as_known.takes_mail = view::takes_mail(fleet, deployment).await;
    send::admit(&cfg, &as_known, &sending)?;
    let accepted = send::accept(ctx, stream, &cfg, sending).await?;
    Ok(Response::ok(
        json!({ "deployment": deployment, "id": accepted.id, "new": accepted.new }),
    ))
}

/// `move DEP --to HOST`: drained where it runs, its lease released for
/// HOST only, answered once HOST holds it.
pub async fn moved(ctx: &Context, deployment: &str, to: &str) -> Result<Response, Response> {
    let Some(fleet) = &ctx.shared.fleet else {
        return Err(Response::failed(
            exit::USAGE,
            "move hands a deployment to another host of a fleet, and this supervisor is not in one\n  help: give every host the same [store] url and a [fleet] table (see README, Running a fleet)",
        ));
    };
    if fleet.config(deployment).is_none() {
        return Err(unknown(fleet, deployment));
    }
    if !view::is_live(fleet, to)
        .await
        .map_err(|e| Response::failed(exit::FAILED, e))?
    {
        return Err(Response::failed(
            exit::FAILED,
            format!(
                "host {to:?} is not a live host of the fleet; nothing was moved\n  help: `wfhost status` on any host names the live ones (each deployment's owner)"
            ),
        ));
    }
    if !here(ctx, deployment) {
        let request = Request::Move {
            deployment: deployment.to_owned(),
            to: to.to_owned(),
        };
        return Ok(forward::to_owner(fleet, deployment, &request).await);
    }
    let started = Instant::now();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let command = Command::Move {
        deployment: deployment.to_owned(),
        to: to.to_owned(),
        reply: tx,
    };
    if !fleet.tell(command) {
        return Err(Response::failed(
            exit::FAILED,
            "this host is stopping; nothing was moved",
        ));
    }
    let released = rx
        .await
        .map_err(|_| Response::failed(exit::FAILED, "this host stopped before the move ended"))?
        .map_err(|e| Response::failed(exit::FAILED, e))?;
    let taken = view::wait_owner(fleet, deployment, to, released).await;
    let epoch = taken.map_err(|e| Response::failed(exit::FAILED, e))?;
    Ok(Response::ok(json!({
        "deployment": deployment,
        "from": fleet.host(),
        "to": to,
        "epoch": epoch,
        "took_ms": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    })))
}
