//! A request for a deployment owned by another host (DESIGN §10b),
//! carried to its owner through the database: written as a row for the
//! owner (whose notification wakes it), answered by the owner's own
//! handler, and read back here, so the operator gets the owner's answer
//! as if the deployment ran on this host. While waiting, the owner is
//! watched: one that loses the deployment before answering is named.

use std::time::Duration;

use crate::control::protocol::{Request, Response};
use crate::exit;
use crate::fleet::{Fleet, view};

/// How long one wait for the answer's notification lasts before the row
/// and the owner are looked at again.
const LOOK_EVERY: Duration = Duration::from_secs(1);

/// `request` about `deployment`, answered by its owner.
pub async fn to_owner(fleet: &Fleet, deployment: &str, request: &Request) -> Response {
    match ask(fleet, deployment, request).await {
        Ok(r) | Err(r) => r,
    }
}

fn failed(e: impl std::fmt::Display) -> Response {
    Response::failed(exit::FAILED, e.to_string())
}

async fn owner_of(fleet: &Fleet, deployment: &str) -> Result<Option<(String, i64)>, Response> {
    let owners = view::owners(fleet).await.map_err(failed)?;
    Ok(owners
        .iter()
        .find(|o| o.deployment == deployment)
        .and_then(|o| view::holder(o).map(|h| (h.to_owned(), o.epoch))))
}

async fn ask(fleet: &Fleet, deployment: &str, request: &Request) -> Result<Response, Response> {
    let Some((owner, epoch)) = owner_of(fleet, deployment).await? else {
        return Err(failed(format!(
            "no host holds {deployment} right now (its lease is free or ran out: a host just stopped or died); nothing was done\n  help: another host takes it within lease_ttl; retry then (`wfhost status` names its owner)"
        )));
    };
    if owner == fleet.host() {
        return Err(failed(format!(
            "{deployment} is being started or stopped on this host; nothing was done: retry in a moment"
        )));
    }
    let json = serde_json::to_string(request).map_err(failed)?;
    let (me, to, d) = (
        fleet.host().to_owned(),
        owner.clone(),
        deployment.to_owned(),
    );
    let id = fleet
        .query
        .call(move |s| s.fleet_ask(&me, &to, &d, &json))
        .await
        .map_err(failed)?
        .map_err(failed)?;
    loop {
        fleet.answered(id, LOOK_EVERY).await;
        let answer = fleet
            .query
            .call(move |s| s.fleet_answer_of(id))
            .await
            .map_err(failed)?
            .map_err(failed)?;
        if let Some(text) = answer {
            return serde_json::from_str(&text).map_err(|e| {
                failed(format!("{owner} answered in a form this host cannot read ({e}); use the same wfhost version on every host"))
            });
        }
        match owner_of(fleet, deployment).await? {
            Some((h, e)) if h == owner && e == epoch => {}
            _ => {
                return Err(failed(format!(
                    "{owner} lost {deployment} before it answered; the request may not have been carried out: check `wfhost status` and retry (it goes to the new owner)"
                )));
            }
        }
    }
}
