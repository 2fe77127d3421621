//! `mail-list`, `mail-show`, `mail-payload`, `mail-retry`, `mail-purge`:
//! what operators see of stored mail, and their two decisions about dead
//! mail. Reads go to the store's read connection; a retry or a purge is
//! journaled with who asked (the peer's user, or the console session's), and a retry wakes the
//! deployment's dispatcher so the mail is delivered at once.

use std::time::Duration;

use serde_json::{Value, json};
use wfhost_policy::Fact;

use super::{Context, lookup};
use crate::clock::unix_ms;
use crate::control::protocol::Response;
use crate::deployment::Ask;
use crate::exit;
use crate::record;
use crate::store::mail_admin::{MAX_PAGE, PAYLOAD_CHUNK};
use crate::store::{MailQuery, MailState, MailView, Retried, StoreError};

/// Items a list returns when the request names no limit.
pub const DEFAULT_LIMIT: usize = 100;

/// A store call's failure as the answer (code 1, the store's words).
fn failed(e: impl std::fmt::Display) -> Response {
    Response::failed(exit::FAILED, e.to_string())
}

/// A request the client got wrong (code 2).
fn usage(e: impl Into<String>) -> Response {
    Response::failed(exit::USAGE, e)
}

/// An item as the answer shows it: the stored view and its age now.
fn shown(view: &MailView, now_ms: u64) -> Value {
    let mut v = serde_json::to_value(view).unwrap_or(Value::Null);
    if let Some(map) = v.as_object_mut() {
        // An ended item's unanswered question waits for nobody.
        if matches!(view.state, MailState::Done | MailState::Dead) {
            map.insert("waiting_for_answer".into(), false.into());
        }
        map.insert(
            "age_ms".into(),
            now_ms.saturating_sub(view.enqueued_at_ms).into(),
        );
    }
    v
}

/// The ids of the running deployments, sorted.
fn configured(ctx: &Context) -> Vec<String> {
    ctx.registry
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .keys()
        .cloned()
        .collect()
}

/// Refuses a deployment that is neither configured nor in the store (a
/// deployment removed from the config may still have mail stored).
async fn known(ctx: &Context, deployment: &str) -> Result<(), Response> {
    let Err(unknown) = lookup(&ctx.registry, deployment) else {
        return Ok(());
    };
    let id = deployment.to_owned();
    let counts = ctx
        .shared
        .reader
        .call(move |s| s.mail_counts(&id))
        .await
        .map_err(failed)?
        .map_err(failed)?;
    if counts.inbox + counts.processing + counts.done + counts.dead > 0 {
        return Ok(());
    }
    Err(unknown)
}

/// Item `id` as stored, or the refusal naming it.
async fn stored(ctx: &Context, id: u64) -> Result<MailView, Response> {
    ctx.shared
        .reader
        .call(move |s| s.mail_item(id))
        .await
        .map_err(failed)?
        .map_err(failed)?
        .ok_or_else(|| failed(StoreError::UnknownMail { id }))
}

/// A page of stored mail, ascending by id, each with its history.
pub async fn list(
    ctx: &Context,
    deployment: Option<String>,
    state: Option<String>,
    after: u64,
    limit: Option<usize>,
) -> Result<Response, Response> {
    let state = match state.as_deref() {
        None => None,
        Some(text) => Some(MailState::parse(text).ok_or_else(|| {
            usage(format!(
                "unknown mail state {text:?}; use one of inbox, processing, done, dead"
            ))
        })?),
    };
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(usage(format!(
            "limit {limit} is out of range: list 1 to {MAX_PAGE} items at a time, and page on with --after ID"
        )));
    }
    if let Some(d) = &deployment {
        known(ctx, d).await?;
    }
    let query = MailQuery {
        deployment,
        state,
        after,
        limit,
    };
    let page = ctx
        .shared
        .reader
        .call(move |s| s.list_mail(&query))
        .await
        .map_err(failed)?
        .map_err(failed)?;
    let now = unix_ms();
    let items: Vec<Value> = page.items.iter().map(|v| shown(v, now)).collect();
    Ok(Response::ok(json!({
        "items": items,
        "more": page.more,
        "limit": limit,
        "after": after,
    })))
}

/// One item with its history.
pub async fn show(ctx: &Context, id: u64) -> Result<Response, Response> {
    let view = stored(ctx, id).await?;
    let questions = ctx
        .shared
        .reader
        .call(move |s| s.questions_of(id))
        .await
        .map_err(failed)?
        .map_err(failed)?;
    let now = unix_ms();
    let mut shown = shown(&view, now);
    let questions: Vec<Value> = questions
        .iter()
        .map(|q| super::questions::view(q, now))
        .collect();
    if let Some(map) = shown.as_object_mut() {
        map.insert("questions".into(), questions.into());
    }
    Ok(Response::ok(shown))
}

/// A piece of one item's payload, as hex.
pub async fn payload(
    ctx: &Context,
    id: u64,
    offset: u64,
    length: usize,
) -> Result<Response, Response> {
    if length == 0 || length > PAYLOAD_CHUNK {
        return Err(usage(format!(
            "length {length} is out of range: read 1 to {PAYLOAD_CHUNK} bytes at a time"
        )));
    }
    let piece = ctx
        .shared
        .reader
        .call(move |s| s.mail_payload(id, offset, length))
        .await
        .map_err(failed)?
        .map_err(failed)?
        .ok_or_else(|| failed(StoreError::UnknownMail { id }))?;
    Ok(Response::ok(
        json!({ "id": id, "offset": offset, "hex": hex::encode(piece) }),
    ))
}

/// Dead mail back to the inbox: item `id`, or (`dead`) every dead item of
/// `deployment` or of every running deployment.
pub async fn retry(
    ctx: &Context,
    by: String,
    id: Option<u64>,
    dead: bool,
    deployment: Option<String>,
) -> Result<Response, Response> {
    let targets: Vec<(String, Option<u64>)> = match (id, dead, deployment) {
        (Some(_), true, _) | (Some(_), _, Some(_)) => {
            return Err(usage(
                "say which mail to retry: one ID, or --dead [DEPLOYMENT], not both",
            ));
        }
        (None, false, _) => {
            return Err(usage(
                "say which mail to retry: an ID (see `wfhost mail list --state dead`), or --dead [DEPLOYMENT]",
            ));
        }
        (Some(id), false, None) => {
            let view = stored(ctx, id).await?;
            if lookup(&ctx.registry, &view.deployment).is_err() {
                return Err(failed(format!(
                    "mail {id} belongs to deployment {:?}, which is not in the running config, so nothing could deliver it; nothing was retried\n  help: add {} back to the config and reload, or delete its dead mail with `wfhost mail purge --dead {}`",
                    view.deployment, view.deployment, view.deployment
                )));
            }
            vec![(view.deployment, Some(id))]
        }
        (None, true, Some(d)) => {
            lookup(&ctx.registry, &d)?;
            vec![(d, None)]
        }
        (None, true, None) => configured(ctx).into_iter().map(|d| (d, None)).collect(),
    };
    let (who, at) = (by.clone(), unix_ms());
    let work = targets.clone();
    let retried = ctx
        .shared
        .store
        .call(move |s| {
            work.iter()
                .map(|(d, id)| s.retry_dead_mail(d, *id, &who, at))
                .collect::<Result<Vec<Retried>, _>>()
        })
        .await
        .map_err(failed)?
        .map_err(failed)?;
    let mut out = Vec::new();
    let mut total = 0;
    for ((deployment, _), r) in targets.iter().zip(retried) {
        if !r.ids.is_empty() {
            total += r.ids.len();
            let fact = Fact::MailRetried {
                ids: r.ids.clone(),
                by: by.clone(),
            };
            record::log(deployment, &fact);
            ctx.shared.record(Some(deployment), &fact);
            if let Ok(handle) = lookup(&ctx.registry, deployment) {
                handle.tell(Ask::MailArrived).await;
            }
        }
        out.push(json!({ "deployment": deployment, "ids": r.ids, "left": r.left }));
    }
    Ok(Response::ok(json!({ "retried": out, "count": total })))
}

/// Deletes dead mail (of `deployment`, or all), only what has been dead
/// longer than `older_than_ms` if given.
pub async fn purge(
    ctx: &Context,
    by: String,
    deployment: Option<String>,
    older_than_ms: Option<u64>,
) -> Result<Response, Response> {
    if let Some(d) = &deployment {
        known(ctx, d).await?;
    }
    let cut = match older_than_ms {
        Some(ms) => unix_ms().saturating_sub(ms),
        None => u64::MAX,
    };
    let purged = ctx
        .shared
        .store
        .call(move |s| s.purge_dead_mail(deployment.as_deref(), cut))
        .await
        .map_err(failed)?
        .map_err(failed)?;
    let mut total = 0;
    let mut out = Vec::new();
    for (deployment, count) in purged {
        total += count;
        let fact = Fact::MailPurged {
            count,
            older_than: older_than_ms.map(Duration::from_millis),
            by: by.clone(),
        };
        record::log(&deployment, &fact);
        ctx.shared.record(Some(&deployment), &fact);
        out.push(json!({ "deployment": deployment, "count": count }));
    }
    Ok(Response::ok(json!({ "purged": out, "count": total })))
}
