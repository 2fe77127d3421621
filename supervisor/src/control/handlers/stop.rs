//! `stop`: what SIGTERM does (drain every deployment under its budget,
//! stop, exit 0), answered once the stop has begun; the socket keeps
//! answering `status` while the drains run, so a client can follow them.

use serde_json::json;
use tokio::sync::oneshot;

use super::Context;
use crate::control::host::HostAsk;
use crate::control::protocol::Response;
use crate::exit;

/// Asks the control loop to stop and waits until it has begun.
pub async fn answer(ctx: &Context) -> Result<Response, Response> {
    let (tx, rx) = oneshot::channel();
    let gone = || Response::failed(exit::FAILED, "the supervisor is already stopping");
    ctx.host.send(HostAsk::Stop(tx)).await.map_err(|_| gone())?;
    let stopping = rx
        .await
        .map_err(|_| gone())?
        .map_err(|e| Response::failed(exit::FAILED, e))?;
    Ok(Response::ok(
        json!({ "pid": stopping.pid, "deployments": stopping.deployments }),
    ))
}
