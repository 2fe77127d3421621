//! The fleet's hosts for maintenance (DESIGN §10b): `host drain HOST`
//! marks the host drained in the database, so its lease loop hands every
//! deployment to the others (each drained under its budget, released,
//! taken at once) and takes none until `host resume HOST`; `hosts` lists
//! them. Any host answers: all of it is in the database. Both changes
//! are journaled with who asked.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::UnixStream;
use wfhost_policy::Fact;

use super::Context;
use crate::control::protocol::Response;
use crate::exit;
use crate::fleet::{Fleet, view};
use crate::store::postgres::maintenance::HostEntry;

/// The fleet, or the refusal of a host outside one.
fn fleet(ctx: &Context) -> Result<&Fleet, Response> {
    ctx.shared.fleet.as_deref().ok_or_else(|| {
        Response::failed(
            exit::USAGE,
            "host maintenance is for the hosts of a fleet, and this supervisor is not in one\n  help: give every host the same [store] url and a [fleet] table (see README, Running a fleet)",
        )
    })
}

/// Every host the database knows.
async fn entries(fleet: &Fleet) -> Result<Vec<HostEntry>, Response> {
    fleet
        .query
        .call(|s| s.fleet_host_list())
        .await
        .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?
        .map_err(|e| Response::failed(exit::FAILED, e.to_string()))
}

/// Who asked, for the journal: the client's uid and user (by its peer
/// credentials) and the host it asked.
fn asked_by(stream: Option<&UnixStream>, fleet: &Fleet) -> String {
    let user = match stream.map(UnixStream::peer_cred) {
        Some(Ok(cred)) => {
            let uid = cred.uid();
            let name = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
                .ok()
                .flatten()
                .map_or_else(|| "?".to_owned(), |u| u.name);
            format!("uid {uid} ({name})")
        }
        _ => "an unknown client".to_owned(),
    };
    format!("{user} on {}", fleet.host())
}

/// `host drain HOST [--wait]`.
pub async fn drain(
    ctx: &Context,
    stream: Option<&UnixStream>,
    host: &str,
    wait: bool,
) -> Result<Response, Response> {
    let fleet = fleet(ctx)?;
    let known = entries(fleet).await?;
    if !known.iter().any(|e| e.host == host) {
        return Err(unknown_host(host, &known));
    }
    let before = held_by(fleet, host).await?;
    let by = asked_by(stream, fleet);
    let (name, who) = (host.to_owned(), by.clone());
    let new = fleet
        .query
        .call(move |s| s.fleet_drain_host(&name, &who))
        .await
        .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?
        .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?;
    if new {
        let fact = Fact::HostMaintenance {
            host: host.to_owned(),
            action: "drain",
            by,
        };
        crate::record::log("-", &fact);
        ctx.shared.record(None, &fact);
    }
    let started = Instant::now();
    let mut left = before.clone();
    if wait {
        let deadline = started + drain_time(fleet, &before);
        loop {
            left = not_yet_elsewhere(fleet, host, &before).await?;
            if left.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                return Err(Response::failed(
                    exit::FAILED,
                    format!(
                        "{host} is drained, but {} did not reach another host within {} ms (a drain longer than its budget, or no other live host to take it); each is handed off as its drain ends\n  help: `wfhost hosts` and `wfhost status` show where each is",
                        left.join(", "),
                        started.elapsed().as_millis()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let owners = view::owners(fleet).await.unwrap_or_default();
    let moved: Vec<Value> = before
        .iter()
        .map(|d| {
            let now = owners
                .iter()
                .find(|o| &o.deployment == d)
                .and_then(view::holder)
                .filter(|h| *h != host);
            json!({ "deployment": d, "to": now })
        })
        .collect();
    Ok(Response::ok(json!({
        "host": host,
        "newly_drained": new,
        "waited": wait,
        "held": if wait { json!([]) } else { json!(left) },
        "moved": moved,
        "took_ms": u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    })))
}

/// How long a drain of `deployments` may take: the longest drain and kill
/// among them, then a hand-off (a renewal or two) and a lease's worth.
fn drain_time(fleet: &Fleet, deployments: &[String]) -> Duration {
    let longest = deployments
        .iter()
        .filter_map(|d| fleet.config(d))
        .map(|c| c.drain_deadline + c.kill_timeout)
        .max()
        .unwrap_or_default();
    longest + fleet.timing.ttl + fleet.timing.renew * 2
}

/// The deployments `host` still holds, and those of `handed` no other
/// host has taken yet.
async fn not_yet_elsewhere(
    fleet: &Fleet,
    host: &str,
    handed: &[String],
) -> Result<Vec<String>, Response> {
    let owners = view::owners(fleet)
        .await
        .map_err(|e| Response::failed(exit::FAILED, e))?;
    Ok(owners
        .iter()
        .filter(|o| match view::holder(o) {
            Some(h) => h == host,
            None => handed.contains(&o.deployment),
        })
        .map(|o| o.deployment.clone())
        .collect())
}

/// The deployments `host` holds now.
async fn held_by(fleet: &Fleet, host: &str) -> Result<Vec<String>, Response> {
    let owners = view::owners(fleet)
        .await
        .map_err(|e| Response::failed(exit::FAILED, e))?;
    Ok(owners
        .iter()
        .filter(|o| view::holder(o) == Some(host))
        .map(|o| o.deployment.clone())
        .collect())
}

/// `host resume HOST`.
pub async fn resume(
    ctx: &Context,
    stream: Option<&UnixStream>,
    host: &str,
) -> Result<Response, Response> {
    let fleet = fleet(ctx)?;
    let by = asked_by(stream, fleet);
    let name = host.to_owned();
    let resumed = fleet
        .query
        .call(move |s| s.fleet_resume_host(&name))
        .await
        .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?
        .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?;
    if !resumed {
        let known = entries(fleet).await?;
        if !known.iter().any(|e| e.host == host) {
            return Err(unknown_host(host, &known));
        }
    } else {
        let fact = Fact::HostMaintenance {
            host: host.to_owned(),
            action: "resume",
            by,
        };
        crate::record::log("-", &fact);
        ctx.shared.record(None, &fact);
    }
    Ok(Response::ok(json!({ "host": host, "resumed": resumed })))
}

/// `hosts`: each host with its heartbeat age, state, leases and
/// connection; `live` false for one whose heartbeat is older than the
/// lease TTL (gone, or drained and not running).
pub async fn list(ctx: &Context) -> Result<Response, Response> {
    let fleet = fleet(ctx)?;
    let ttl = crate::fleet::ms(fleet.timing.ttl);
    let hosts: Vec<Value> = entries(fleet)
        .await?
        .into_iter()
        .map(|e| {
            let live = e.heartbeat_age_ms.is_some_and(|age| age < ttl);
            let state = match (&e.drained, e.stopping) {
                (Some(_), _) if e.leases > 0 => "draining",
                (Some(_), _) => "drained",
                (None, true) => "stopping",
                (None, false) => "serving",
            };
            json!({
                "host": e.host,
                "live": live,
                "heartbeat_age_ms": e.heartbeat_age_ms,
                "state": state,
                "leases": e.leases,
                "connection": e.connection,
                "encrypted": e.connection.as_deref().map(|c| c.starts_with("TLS")),
                "drained_since_ms": e.drained.as_ref().map(|d| d.0),
                "drained_by": e.drained.as_ref().map(|d| d.1.clone()),
            })
        })
        .filter(|h| h["live"] == true || !h["drained_since_ms"].is_null())
        .collect();
    Ok(Response::ok(
        json!({ "host": fleet.host(), "hosts": hosts }),
    ))
}

/// The refusal for a host the fleet does not know.
fn unknown_host(host: &str, known: &[HostEntry]) -> Response {
    let names: Vec<&str> = known.iter().map(|e| e.host.as_str()).collect();
    Response::failed(
        exit::FAILED,
        format!(
            "host {host:?} is not in the fleet; its hosts: {}",
            if names.is_empty() {
                "none".to_owned()
            } else {
                names.join(", ")
            }
        ),
    )
}
