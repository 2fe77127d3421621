//! `reload`: what SIGHUP does (start added deployments, stop removed ones,
//! recycle changed ones), answered with what became of each, or with why
//! the file was refused (the running configuration is kept).

use serde_json::json;
use tokio::sync::oneshot;

use super::Context;
use crate::control::host::HostAsk;
use crate::control::protocol::Response;
use crate::exit;

/// Asks the control loop to reload and waits for the outcome.
pub async fn answer(ctx: &Context) -> Result<Response, Response> {
    let (tx, rx) = oneshot::channel();
    let gone = || {
        Response::failed(
            exit::FAILED,
            "the supervisor is stopping; nothing was reloaded",
        )
    };
    ctx.host
        .send(HostAsk::Reload(tx))
        .await
        .map_err(|_| gone())?;
    let reloaded = rx.await.map_err(|_| gone())?.map_err(|e| {
        Response::failed(
            exit::USAGE,
            format!("the new config is refused and the running one kept: {e}"),
        )
    })?;
    Ok(Response::ok(json!({
        "path": reloaded.path,
        "added": reloaded.added,
        "removed": reloaded.removed,
        "changed": reloaded.changed,
        "unchanged": reloaded.unchanged,
        "settings": reloaded.settings,
    })))
}
