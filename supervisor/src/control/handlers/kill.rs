//! `kill`: SIGKILL a deployment's child now, even one stuck stopping.

use serde_json::json;
use wfhost_policy::life::Request;

use super::{Context, lookup};
use crate::control::protocol::Response;
use crate::deployment::Ask;
use crate::exit;

/// Tells the deployment to kill its child; answered at once.
pub async fn answer(ctx: &Context, deployment: &str) -> Result<Response, Response> {
    let handle = lookup(&ctx.registry, deployment)?;
    if !handle.tell(Ask::Life(Request::Kill)).await {
        return Err(Response::failed(
            exit::FAILED,
            format!("deployment {deployment:?} is shutting down"),
        ));
    }
    Ok(Response::ok(json!({ "deployment": deployment })))
}
