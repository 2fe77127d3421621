//! `recycle`: replace a deployment's children (rolling, one at a time) or
//! one replica's (`DEP/N`) without losing mail.

use serde_json::json;
use wfhost_policy::crew::Which;
use wfhost_policy::life::RecycleCause;

use super::{Context, lookup, refused};
use crate::control::protocol::Response;
use crate::deployment::{Ask, Waiter};

/// Answered with the new pids once every new child is ready.
pub async fn answer(
    ctx: &Context,
    deployment: &str,
    reason: Option<String>,
) -> Result<Response, Response> {
    let (id, which) = target(ctx, deployment)?;
    let handle = lookup(&ctx.registry, id)?;
    let old: Vec<u32> = handle.with_status(|s| match which {
        Which::All => s.replicas.iter().filter_map(|r| r.pid).collect(),
        Which::One(n) => s
            .replicas
            .iter()
            .filter(|r| r.index == n)
            .filter_map(|r| r.pid)
            .collect(),
    });
    let reason = reason.unwrap_or_else(|| "operator request".into());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let ask = Ask::Recycle {
        which,
        cause: RecycleCause::Operator,
        reason,
        waiter: Some(Waiter::Pids(tx)),
    };
    let asked = if handle.tell(ask).await {
        rx.await.map_err(|_| crate::deployment::Asked::Gone)
    } else {
        Err(crate::deployment::Asked::Gone)
    };
    let pids = asked
        .and_then(|r| r.map_err(crate::deployment::Asked::Refused))
        .map_err(refused)?;
    Ok(Response::ok(json!({
        "deployment": deployment,
        "old_pid": old.first(),
        "pid": pids.last(),
        "old_pids": old,
        "pids": pids,
    })))
}

/// `DEP` (every replica) or `DEP/N` (replica N): the deployment and which.
fn target<'a>(ctx: &Context, name: &'a str) -> Result<(&'a str, Which), Response> {
    if lookup(&ctx.registry, name).is_ok() {
        return Ok((name, Which::All));
    }
    match name.rsplit_once('/') {
        Some((id, n)) => match n.parse::<u32>() {
            Ok(n) => Ok((id, Which::One(n))),
            Err(_) => lookup(&ctx.registry, name).map(|_| (name, Which::All)),
        },
        None => lookup(&ctx.registry, name).map(|_| (name, Which::All)),
    }
}
