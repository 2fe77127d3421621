//! `answer`: a person's answer to a question an item's handler asked.
//! Stored (once: the same value again changes nothing, another is
//! refused) with the item's release, journaled with who answered, then
//! sent to the child holding the item — on a fleet, through the item's
//! owner.

use serde_json::{Value, json};

use super::{Context, lookup};
use crate::clock::unix_ms;
use crate::control::forward;
use crate::control::protocol::{Request, Response};
use crate::deployment::Ask;
use crate::exit;
use crate::store::{Answer, Answering, Holder};
use wfhost_policy::Fact;
use wfhost_policy::item::{MAX_JSON_BYTES, MAX_KEY_BYTES};

/// Longest `by` label, in characters.
const MAX_LABEL_CHARS: usize = 128;

/// What an answer says.
pub struct Given {
    /// The item.
    pub id: u64,
    /// The question's key.
    pub key: String,
    /// The value (any JSON).
    pub value: Value,
    /// The answerer's label.
    pub by: Option<String>,
    /// Who asked the host that forwarded it (a forwarded answer only).
    pub peer: Option<Value>,
}

/// Stores the answer and delivers it, or says why not.
pub async fn answer(ctx: &Context, caller: Option<Value>, a: Given) -> Result<Response, Response> {
    let usage = |e: String| Response::failed(exit::USAGE, e);
    if a.key.is_empty() || a.key.len() > MAX_KEY_BYTES {
        return Err(usage(format!(
            "a question's key is 1 to {MAX_KEY_BYTES} bytes; {:?} has {}",
            a.key,
            a.key.len()
        )));
    }
    let value = serde_json::to_vec(&a.value).map_err(|e| usage(e.to_string()))?;
    if value.len() > MAX_JSON_BYTES {
        return Err(usage(format!(
            "the answer is {} bytes of JSON; at most {MAX_JSON_BYTES} are kept",
            value.len()
        )));
    }
    if a.by
        .as_ref()
        .is_some_and(|b| b.chars().count() > MAX_LABEL_CHARS)
    {
        return Err(usage(format!(
            "--by is a label of at most {MAX_LABEL_CHARS} characters"
        )));
    }
    let by = who(caller, a.peer.clone(), a.by.clone());
    let (id, key) = (a.id, a.key.clone());
    let (stored_value, stored_by) = (value.clone(), by.to_string());
    let found = ctx
        .shared
        .store
        .call(move |s| s.answer_question(id, &key, &stored_value, &stored_by, unix_ms()))
        .await
        .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?
        .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?;
    let refused = |e: String| Err(Response::failed(exit::FAILED, e));
    let key = a.key.as_str();
    match found {
        None => refused(format!(
            "no mail item {id} is stored; nothing was answered\n  help: `wfhost questions` lists the open questions"
        )),
        Some(Answering::Ended { deployment, how }) => refused(format!(
            "mail {id} of {deployment} has already ended ({how}); nothing was answered"
        )),
        Some(Answering::UnknownKey { deployment, keys }) => refused(format!(
            "mail {id} of {deployment} has no question {key:?}{}; nothing was answered\n  help: `wfhost questions {deployment}` lists the open ones",
            if keys.is_empty() {
                " (its handler asked none)".to_owned()
            } else {
                format!(" (its questions: {})", keys.join(", "))
            }
        )),
        Some(Answering::Different { deployment, first }) => refused(format!(
            "question {key:?} of mail {id} ({deployment}) was already answered {} {}; a different answer is refused and nothing changed",
            text(&first.value),
            when_by(&first)
        )),
        Some(Answering::Same {
            deployment,
            holder,
            first,
        }) => {
            let delivered = deliver(ctx, &a, &deployment, holder, &value, &by).await;
            Ok(answered(
                &a,
                &deployment,
                false,
                first.at_ms,
                by_json(&first),
                None,
                delivered,
            ))
        }
        Some(Answering::New { deployment, holder }) => {
            let fact = Fact::QuestionAnswered {
                id,
                key: a.key.clone(),
                value: a.value.clone(),
                by: by.clone(),
            };
            crate::record::log(&deployment, &fact);
            let seq = match ctx.shared.record_durably(&deployment, &fact).await {
                Ok(seq) => {
                    ctx.shared.publish(Some(&deployment), &fact);
                    Some(seq)
                }
                // Stored, and journaled as soon as the journal takes it.
                Err(_) => {
                    ctx.shared.record(Some(&deployment), &fact);
                    None
                }
            };
            let delivered = deliver(ctx, &a, &deployment, holder, &value, &by).await;
            Ok(answered(
                &a,
                &deployment,
                true,
                unix_ms(),
                by,
                seq,
                delivered,
            ))
        }
    }
}

/// The answer's data.
fn answered(
    a: &Given,
    deployment: &str,
    new: bool,
    at_ms: u64,
    by: Value,
    journal_seq: Option<u64>,
    delivered: bool,
) -> Response {
    Response::ok(json!({
        "id": a.id,
        "deployment": deployment,
        "key": a.key,
        "new": new,
        "answered_at_ms": at_ms,
        "by": by,
        "journal_seq": journal_seq,
        "delivered": delivered,
    }))
}

/// Sends the stored answer on: to the local driver (which sends it to
/// the holder, or lets the item be taken), or, on a fleet, to the item's
/// owner. True when it was handed on.
async fn deliver(
    ctx: &Context,
    a: &Given,
    deployment: &str,
    holder: Option<Holder>,
    value: &[u8],
    by: &Value,
) -> bool {
    if let Ok(handle) = lookup(&ctx.registry, deployment) {
        let ask = Ask::Answer {
            holder,
            id: a.id,
            key: a.key.clone(),
            value: value.to_vec(),
        };
        return handle.tell(ask).await;
    }
    let Some(fleet) = &ctx.shared.fleet else {
        return false;
    };
    // Forwarded answers are not forwarded again.
    if a.peer.is_some() {
        return false;
    }
    let request = Request::Answer {
        id: a.id,
        key: a.key.clone(),
        value: a.value.clone(),
        by: a.by.clone(),
        peer: Some(by.clone()),
    };
    forward::to_owner(fleet, deployment, &request).await.ok
}

/// Who answered: the caller's uid and user name (a client's peer
/// credentials, a console session's minter, or, forwarded, what the
/// forwarding host saw), and the label it gave.
fn who(caller: Option<Value>, forwarded: Option<Value>, label: Option<String>) -> Value {
    let mut by = caller
        .or(forwarded)
        .unwrap_or_else(|| json!({"uid": null, "user": null}));
    if let (Some(label), Some(map)) = (label, by.as_object_mut()) {
        map.insert("label".into(), Value::String(label));
    }
    by
}

/// The stored `by`, as JSON.
fn by_json(a: &Answer) -> Value {
    serde_json::from_str(&a.by).unwrap_or(Value::Null)
}

/// An answer's value, short enough for a message.
fn text(value: &[u8]) -> String {
    let s = String::from_utf8_lossy(value);
    if s.chars().count() > 200 {
        format!("{}…", s.chars().take(200).collect::<String>())
    } else {
        s.into_owned()
    }
}

/// "at TIME by WHO" of an answer.
fn when_by(a: &Answer) -> String {
    let at = crate::clock::rfc3339_ms(a.at_ms);
    let by = by_json(a);
    let who = match (&by["label"], &by["user"], &by["uid"]) {
        (Value::String(l), Value::String(u), _) => format!("{l} ({u})"),
        (Value::String(l), _, _) => l.clone(),
        (_, Value::String(u), _) => u.clone(),
        (_, _, Value::Number(n)) => format!("uid {n}"),
        _ => "an operator".to_owned(),
    };
    format!("at {at} by {who}")
}
