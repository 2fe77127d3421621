//! Who owns what, for `status` and metrics on any host: every lease row
//! with its holder, epoch and expiry (by the database's clock) and the
//! holder's last status snapshot of the deployment.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::Fleet;
use crate::store::MailCounts;
use crate::store::postgres::lease::Owner;

/// Every lease row, read on the fleet's query connection.
pub async fn owners(fleet: &Fleet) -> Result<Vec<Owner>, String> {
    fleet
        .query
        .call(|s| s.fleet_owners())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

/// The holder that runs `owner`'s deployment now: none once released or
/// run out.
pub fn holder(owner: &Owner) -> Option<&str> {
    owner.holder.as_deref().filter(|_| !owner.expired)
}

/// `status --json`'s `owner` of a deployment: its lease's host, epoch and
/// expiry, or null for one never leased.
pub fn owner_json(owner: Option<&Owner>) -> Value {
    match owner {
        None => Value::Null,
        Some(o) => json!({
            "host": o.holder,
            "epoch": o.epoch,
            "expires_ms": o.expires_ms,
            "expired": o.expired,
        }),
    }
}

/// A deployment owned by another host (or by none right now) as `status
/// --json` shows it: its owner's snapshot, or `unowned` while no host
/// holds its lease, with mail counts from the store.
pub fn remote_json(fleet: &Fleet, id: &str, owner: Option<&Owner>, mail: &MailCounts) -> Value {
    let held = owner.and_then(holder).is_some();
    let mut d = match owner.and_then(|o| o.status.clone()) {
        Some(snapshot) if held && snapshot.is_object() => snapshot,
        // Just taken: its owner's first snapshot comes with the next renewal.
        _ if held => json!({ "id": id, "state": "starting", "pid": null }),
        _ => json!({ "id": id, "state": "unowned", "pid": null }),
    };
    let ready = d["state"] == "ready";
    d["id"] = json!(id);
    d["uptime_ms"] = Value::Null;
    d["rss_bytes"] = Value::Null;
    d["mail"] = json!({
        "inbox": mail.inbox,
        "processing": mail.processing,
        "working": mail.working,
        "buffered": if ready { 0 } else { mail.inbox },
        "done": mail.done,
        "dead": mail.dead,
        "interrupted": mail.interrupted,
    });
    d["owner"] = owner_json(owner);
    if fleet.config(id).is_none() {
        d["configured"] = json!(false);
    }
    d
}

/// Whether `deployment`'s child takes mail, as its owner last said.
pub async fn takes_mail(fleet: &Fleet, deployment: &str) -> Option<bool> {
    let owners = owners(fleet).await.ok()?;
    let owner = owners.iter().find(|o| o.deployment == deployment)?;
    holder(owner)?;
    owner.status.as_ref()?.get("takes_mail")?.as_bool()
}

/// Whether `host` heartbeats and is not stopping.
pub async fn is_live(fleet: &Fleet, host: &str) -> Result<bool, String> {
    let view = fleet
        .query
        .call(|s| s.fleet_view())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    let live = wfhost_policy::lease::live_hosts(&view, "", true, &fleet.timing);
    Ok(live.contains(&host))
}

/// Waits until `to` holds `deployment` at an epoch after `released`;
/// returns that epoch, or why not once the hand-off's reservation is over.
pub async fn wait_owner(
    fleet: &Fleet,
    deployment: &str,
    to: &str,
    released: i64,
) -> Result<i64, String> {
    let deadline = Instant::now() + fleet.timing.ttl + fleet.timing.renew * 2;
    loop {
        let owners = owners(fleet).await?;
        if let Some(o) = owners.iter().find(|o| o.deployment == deployment)
            && o.epoch > released
        {
            return match &o.holder {
                Some(h) if h == to => Ok(o.epoch),
                other => Err(format!(
                    "{deployment} was released for {to}, but {} took it (epoch {})",
                    other.as_deref().unwrap_or("nobody"),
                    o.epoch
                )),
            };
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{deployment} was drained and released for {to}, but {to} did not take it within lease_ttl; any host may take it now"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
