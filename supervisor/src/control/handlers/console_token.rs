//! `console-token`: a one-time login link to this supervisor's console,
//! for the client whose peer credentials asked (only those the control
//! socket admits can ask, so only they can log in). Its sessions act as
//! that client: the journal names the client's user for each action.

use std::time::Duration;

use serde_json::json;
use tokio::net::UnixStream;
use wfhost_policy::login::{MAX_TOKEN_TTL, MIN_TOKEN_TTL, TOKEN_TTL};

use super::{Context, who_of};
use crate::control::protocol::Response;
use crate::exit;
use crate::human;

/// Mints the link, or says why not (the console is off, a TTL out of
/// bounds).
pub fn answer(
    ctx: &Context,
    stream: &UnixStream,
    ttl_ms: Option<u64>,
) -> Result<Response, Response> {
    let ttl = ttl_ms.map_or(TOKEN_TTL, Duration::from_millis);
    if !(MIN_TOKEN_TTL..=MAX_TOKEN_TTL).contains(&ttl) {
        return Err(Response::failed(
            exit::USAGE,
            format!(
                "a login link lasts {} to {}; {} is out of range",
                human::ms(MIN_TOKEN_TTL.as_millis() as u64),
                human::ms(MAX_TOKEN_TTL.as_millis() as u64),
                human::ms(ttl.as_millis() as u64)
            ),
        ));
    }
    let cred = stream.peer_cred().map_err(|e| {
        Response::failed(exit::FAILED, format!("cannot read peer credentials: {e}"))
    })?;
    let who = who_of(cred.uid());
    let minted = ctx
        .shared
        .door
        .mint(who.clone(), ttl)
        .map_err(|e| Response::failed(exit::FAILED, e))?;
    tracing::info!(by = %who.name(), ttl_ms = minted.ttl_ms, "minted a console login link");
    Ok(Response::ok(json!({
        "url": minted.url,
        "ttl_ms": minted.ttl_ms,
        "by": who,
    })))
}
