//! `drain`: drain a deployment under its budget; it stays drained.

use serde_json::json;
use wfhost_policy::life::Request;

use super::{Context, lookup, refused};
use crate::control::protocol::Response;
use crate::deployment::Waiter;

/// Answered once the drain has started.
pub async fn answer(ctx: &Context, deployment: &str) -> Result<Response, Response> {
    let handle = lookup(&ctx.registry, deployment)?;
    let message = handle
        .ask(|tx| Request::Drain(Waiter::Said(tx)))
        .await
        .map_err(refused)?;
    Ok(Response::ok(
        json!({ "deployment": deployment, "message": message }),
    ))
}
