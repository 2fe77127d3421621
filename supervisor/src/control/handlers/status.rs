//! `status`: every deployment's status with its mail counts, and the
//! host's facts (cores, memory, load, the supervisor's own RSS), and
//! whether the store takes writes.

use std::time::Instant;

use serde_json::json;

use super::Context;
use crate::control::protocol::Response;
use crate::deployment::{DeploymentHandle, output};
use crate::exit;

/// How many of the last child's stderr lines status shows.
const LAST_STDERR_LINES: usize = 5;

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
        .map(|(h, mail)| {
            let (mut json, id, pid) =
                h.with_status(|s| (s.to_json(now, mail), s.id.clone(), s.last_exit_pid));
            // What the last child wrote to stderr before it ended: the
            // exception or the missing file that ended it.
            json["last_stderr"] = json!(pid.map_or_else(Vec::new, |pid| {
                output::recent(&id).stderr_tail(pid, LAST_STDERR_LINES)
            }));
            json
        })
        .collect();
    let acks = handles
        .iter()
        .map(|h| h.with_status(|s| s.acks_pending))
        .sum();
    let mut store = json!(ctx.shared.store_view(acks));
    // PostgreSQL only: whether its connections are encrypted (TLS).
    if let Some(e) = crate::store::postgres::tls::current() {
        store["encrypted"] = json!(e.encrypted());
        store["encryption"] = json!(e.to_string());
    }
    Ok(Response::ok(json!({
        "deployments": deployments,
        "host": crate::observe::host::now(),
        "store": store,
    })))
}
