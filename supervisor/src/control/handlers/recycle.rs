//! `recycle`: replace a deployment's child without losing mail.

use serde_json::json;
use wfhost_policy::life::{RecycleCause, Request};

use super::{Context, lookup, refused};
use crate::control::protocol::Response;
use crate::deployment::Waiter;

/// Answered with the new pid once the new child is ready.
pub async fn answer(
    ctx: &Context,
    deployment: &str,
    reason: Option<String>,
) -> Result<Response, Response> {
    let handle = lookup(&ctx.registry, deployment)?;
    let old = handle.with_status(|s| s.pid);
    let reason = reason.unwrap_or_else(|| "operator request".into());
    let pid = handle
        .ask(|tx| Request::Recycle {
            cause: RecycleCause::Operator,
            reason,
            waiter: Some(Waiter::Pid(tx)),
        })
        .await
        .map_err(refused)?;
    Ok(Response::ok(
        json!({ "deployment": deployment, "old_pid": old, "pid": pid }),
    ))
}
