//! `cancel`: a signed, journaled operator cancel of one run or of all.

use serde_json::json;
use wfhost_policy::life::Request;

use super::{Context, lookup, refused};
use crate::control::protocol::Response;
use crate::deployment::Waiter;

/// Answered with the journal record once the cancel is committed and sent.
pub async fn answer(
    ctx: &Context,
    deployment: &str,
    run: Option<String>,
) -> Result<Response, Response> {
    let handle = lookup(&ctx.registry, deployment)?;
    let which = run.clone();
    let seq = handle
        .ask(|tx| Request::Cancel {
            run: which,
            waiter: Waiter::Journaled(tx),
        })
        .await
        .map_err(refused)?;
    Ok(Response::ok(
        json!({ "deployment": deployment, "run": run, "journal_seq": seq }),
    ))
}
