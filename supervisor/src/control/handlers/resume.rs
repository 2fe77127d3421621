//! `resume`: start a drained or failed deployment again.

use serde_json::json;
use wfhost_policy::life::Request;

use super::{Context, lookup, refused};
use crate::control::protocol::Response;
use crate::deployment::Waiter;

/// Answered once a fresh child is on its way.
pub async fn answer(ctx: &Context, deployment: &str) -> Result<Response, Response> {
    let handle = lookup(&ctx.registry, deployment)?;
    let message = handle
        .ask(|tx| Request::Resume(Waiter::Said(tx)))
        .await
        .map_err(refused)?;
    Ok(Response::ok(
        json!({ "deployment": deployment, "message": message }),
    ))
}
