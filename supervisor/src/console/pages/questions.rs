//! `/questions`: every open question a handler asked a person, each with
//! a form to answer it (confirmed, then given through exactly the path
//! `wfhost answer` takes, its refusals shown).

use serde_json::Value;

use super::super::html::{self, esc};
use super::{Seen, at, ms};
use crate::console::http::Response;
use crate::control::protocol::Request;

/// The page.
pub async fn page(seen: &Seen<'_>) -> Response {
    let deployment = seen.query("deployment").map(str::to_owned);
    let mut main = String::new();
    match seen.ask(Request::Questions { deployment }).await {
        Ok(data) => {
            let empty = Vec::new();
            let list = data["questions"].as_array().unwrap_or(&empty);
            if list.is_empty() {
                main.push_str(&html::note("no question waits for an answer"));
            }
            for q in list {
                main.push_str(&question(q));
            }
        }
        Err(e) => main.push_str(&html::refusal(&e)),
    }
    main.push_str(&html::cli("wfhost questions"));
    seen.page("Questions", &main).await
}

/// One question: its item, key, prompt, and its answer or a form to
/// give one.
pub fn question(q: &Value) -> String {
    let id = q["id"].as_u64().unwrap_or(0);
    let key = q["key"].as_str().unwrap_or("");
    let mut out = format!(
        "<section class=\"question\"><h3>Mail {} of {} · key <code class=\"key\">{}</code></h3>\
         <p>asked {} ({} ago), attempt {}</p><pre class=\"prompt\">{}</pre>",
        html::mail_link(id),
        html::deployment_link(q["deployment"].as_str().unwrap_or("?")),
        esc(key),
        at(&q["asked_at_ms"]),
        ms(&q["age_ms"]),
        html::value(&q["attempt"], 10),
        esc(&serde_json::to_string_pretty(&q["prompt"]).unwrap_or_default()),
    );
    if q["answer"].is_object() {
        out.push_str(&format!(
            "<p>answered {} at {} by {}</p>",
            html::value(&q["answer"]["value"], 400),
            at(&q["answer"]["at_ms"]),
            html::value(&q["answer"]["by"], 200),
        ));
    } else {
        out.push_str(&format!(
            "<form class=\"answer\" method=\"get\" action=\"/confirm\">\
             <input type=\"hidden\" name=\"do\" value=\"answer\">\
             <input type=\"hidden\" name=\"id\" value=\"{id}\">\
             <input type=\"hidden\" name=\"key\" value=\"{}\">\
             <label>Answer (JSON) <textarea name=\"value\" rows=\"2\" cols=\"40\" required>true</textarea></label> \
             <label>Your name (optional) <input name=\"by\" maxlength=\"128\"></label> \
             <button type=\"submit\">Answer…</button></form>",
            esc(key)
        ));
    }
    out.push_str("</section>");
    out
}
