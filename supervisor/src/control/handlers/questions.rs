//! `questions`: the open questions of items' handlers, oldest first.

use serde_json::{Value, json};

use super::Context;
use crate::clock::unix_ms;
use crate::control::protocol::Response;
use crate::exit;
use crate::store::Question;

/// Most questions one answer lists.
const LIMIT: usize = 10_000;

/// Every open question (of `deployment`, if given).
pub async fn answer(ctx: &Context, deployment: Option<String>) -> Result<Response, Response> {
    let open = ctx
        .shared
        .reader
        .call(move |s| s.open_questions(deployment.as_deref(), LIMIT))
        .await
        .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?
        .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?;
    let now = unix_ms();
    let questions: Vec<Value> = open.iter().map(|q| view(q, now)).collect();
    Ok(Response::ok(json!({ "questions": questions })))
}

/// One question as the control protocol shows it: its prompt as the JSON
/// the handler asked with.
pub fn view(q: &Question, now_ms: u64) -> Value {
    let prompt: Value = serde_json::from_slice(&q.prompt)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&q.prompt).into_owned()));
    let answer = q.answer.as_ref().map(|a| {
        json!({
            "value": serde_json::from_slice::<Value>(&a.value).unwrap_or(Value::Null),
            "at_ms": a.at_ms,
            "by": serde_json::from_str::<Value>(&a.by).unwrap_or(Value::Null),
        })
    });
    json!({
        "deployment": q.deployment,
        "id": q.id,
        "key": q.key,
        "prompt": prompt,
        "attempt": q.attempt,
        "asked_at_ms": q.asked_at_ms,
        "age_ms": now_ms.saturating_sub(q.asked_at_ms),
        "answer": answer,
    })
}
