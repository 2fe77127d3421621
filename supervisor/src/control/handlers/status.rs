//! `status`: every deployment's status with its mail counts, and the
//! host's facts (cores, memory, load, the supervisor's own RSS), and
//! whether the store takes writes.

use std::time::Instant;

use serde_json::json;

use super::Context;
use crate::control::protocol::Response;
use crate::deployment::DeploymentHandle;
use crate::exit;

/// Every deployment, in id order, with its mail counts read beside a
/// writer (the store's read connection).
pub async fn answer(ctx: &Context) -> Result<Response, Response> {
    let handles: Vec<DeploymentHandle> = ctx
        .registry
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .cloned()
        .collect();
    let ids: Vec<String> = handles.iter().map(|h| h.config().id.clone()).collect();
    let counts = ctx
        .shared
        .reader
        .call(move |s| {
            ids.iter()
                .map(|id| s.mail_counts(id))
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?
        .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?;
    let now = Instant::now();
    let deployments: Vec<_> = handles
        .iter()
        .zip(&counts)
        .map(|(h, mail)| h.with_status(|s| s.to_json(now, mail)))
        .collect();
    let acks = handles
        .iter()
        .map(|h| h.with_status(|s| s.acks_pending))
        .sum();
    Ok(Response::ok(json!({
        "deployments": deployments,
        "host": crate::observe::host::now(),
        "store": ctx.shared.store_view(acks),
    })))
}
