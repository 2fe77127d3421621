//! `/mail`, `/mail/ID` and `/dead`: stored mail filtered by state and
//! deployment; one item with its deliveries, result, events and
//! questions; dead mail with retry and purge.

use base64::Engine as _;
use serde_json::Value;

use super::super::html::{self, esc};
use super::{Seen, at, ms};
use crate::console::http::{Response, encode};
use crate::control::protocol::Request;
use crate::store::EventRecord;

/// Items on a page.
const PAGE: usize = 100;

/// The states a list can be filtered by.
const STATES: [&str; 5] = ["inbox", "processing", "done", "dead", "interrupted"];

/// Most events read looking for one item's.
const MAX_SCAN: usize = 20_000;

/// `/mail?state=&deployment=&after=`.
pub async fn list(seen: &Seen<'_>) -> Response {
    let state = seen.query("state").map(str::to_owned);
    let deployment = seen.query("deployment").map(str::to_owned);
    let after = seen
        .query("after")
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    let mut main = filter_form(state.as_deref(), deployment.as_deref());
    let request = Request::MailList {
        deployment: deployment.clone(),
        state: state.clone(),
        after,
        limit: Some(PAGE),
    };
    match seen.ask(request).await {
        Ok(data) => {
            main.push_str(&items(&data, false));
            if let (Some(more), Some(last)) = (
                data["more"].as_u64().filter(|m| *m > 0),
                data["items"]
                    .as_array()
                    .and_then(|i| i.last())
                    .and_then(|i| i["id"].as_u64()),
            ) {
                let mut href = format!("/mail?after={last}");
                if let Some(s) = &state {
                    href.push_str(&format!("&state={}", encode(s)));
                }
                if let Some(d) = &deployment {
                    href.push_str(&format!("&deployment={}", encode(d)));
                }
                main.push_str(&format!(
                    "<p>{}</p>",
                    html::link(&href, &format!("next page ({more} more)"))
                ));
            }
        }
        Err(e) => main.push_str(&html::refusal(&e)),
    }
    // The filter's words came in the query: quoted, so the command shown
    // to be pasted into a shell runs nothing else.
    let quoted = crate::console::actions::quoted;
    let mut cli = "wfhost mail list".to_owned();
    if let Some(d) = &deployment {
        cli.push_str(&format!(" {}", quoted(d)));
    }
    if let Some(s) = &state {
        cli.push_str(&format!(" --state {}", quoted(s)));
    }
    main.push_str(&html::cli(&cli));
    seen.page("Mail", &main).await
}

/// The filter, a GET form.
fn filter_form(state: Option<&str>, deployment: Option<&str>) -> String {
    let mut out = String::from(
        "<form class=\"filter\" method=\"get\" action=\"/mail\"><label>State <select name=\"state\"><option value=\"\">any</option>",
    );
    for s in STATES {
        let selected = if state == Some(s) { " selected" } else { "" };
        out.push_str(&format!("<option value=\"{s}\"{selected}>{s}</option>"));
    }
    out.push_str(&format!(
        "</select></label> <label>Deployment <input name=\"deployment\" value=\"{}\"></label> <button type=\"submit\">Filter</button></form>",
        esc(deployment.unwrap_or(""))
    ));
    out
}

/// A table of items (with a retry button each, for dead mail).
fn items(data: &Value, retry: bool) -> String {
    let empty = Vec::new();
    let list = data["items"].as_array().unwrap_or(&empty);
    if list.is_empty() {
        return html::note("no mail matches");
    }
    let mut header = vec![
        "ID",
        "Deployment",
        "State",
        "Age",
        "Attempts",
        "Failures",
        "Outcome / last failure",
    ];
    if retry {
        header.push("Action");
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|i| {
            let id = i["id"].as_u64().unwrap_or(0);
            let outcome = if i["outcome"].is_null() {
                html::value(&i["last_failure"]["cause"], 200)
            } else {
                html::value(&i["outcome"], 200)
            };
            let mut row = vec![
                html::mail_link(id),
                html::deployment_link(i["deployment"].as_str().unwrap_or("?")),
                format!(
                    "<span class=\"state\">{}</span>",
                    html::value(&i["state"], 20)
                ),
                ms(&i["age_ms"]),
                html::value(&i["attempts"], 10),
                html::value(&i["failures"], 10),
                outcome,
            ];
            if retry {
                row.push(html::confirm_button(
                    "retry",
                    &[("do", "retry"), ("id", &id.to_string())],
                ));
            }
            row
        })
        .collect();
    html::table(&header, &rows)
}

/// `/mail/ID`.
pub async fn item(seen: &Seen<'_>, id: u64) -> Response {
    let title = format!("Mail {id}");
    let item = match seen.ask(Request::MailShow { id }).await {
        Ok(d) => d,
        Err(e) => return seen.page(&title, &html::refusal(&e)).await,
    };
    let state = item["state"].as_str().unwrap_or("?");
    let mut main = html::table(
        &[
            "Deployment",
            "State",
            "Enqueued",
            "Attempts",
            "Failures",
            "Holder",
            "Payload",
        ],
        &[vec![
            html::deployment_link(item["deployment"].as_str().unwrap_or("?")),
            format!(
                "<span class=\"state\" id=\"mail-state\">{}</span>",
                esc(state)
            ),
            at(&item["enqueued_at_ms"]),
            html::value(&item["attempts"], 10),
            html::value(&item["failures"], 10),
            html::value(&item["holder"]["pid"], 12),
            format!("{} bytes", item["payload_bytes"]),
        ]],
    );
    // The result, as `wfhost mail result` gives it.
    if let Ok(r) = seen.ask(Request::MailResult { id, wait_ms: None }).await
        && r["ended"] == Value::Bool(true)
    {
        let result = r["result"]
            .as_str()
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned());
        main.push_str(&format!(
            "<h2>Result</h2><p>outcome <strong id=\"outcome\">{}</strong> {}</p><pre class=\"result\">{}</pre>",
            html::value(&r["outcome"], 40),
            html::value(&r["reason"], 400),
            esc(&result.unwrap_or_default().chars().take(4000).collect::<String>())
        ));
    }
    main.push_str("<h2>Deliveries</h2>");
    let empty = Vec::new();
    let history: Vec<Vec<String>> = item["history"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|h| {
            vec![
                html::value(&h["attempt"], 10),
                html::value(&h["pid"], 12),
                at(&h["taken_at_ms"]),
                at(&h["ended_at_ms"]),
                html::value(&h["how"], 300),
            ]
        })
        .collect();
    main.push_str(&html::table(
        &["Attempt", "PID", "Taken", "Ended", "How"],
        &history,
    ));
    main.push_str("<h2>Questions</h2>");
    let questions = item["questions"].as_array().unwrap_or(&empty);
    if questions.is_empty() {
        main.push_str(&html::note("its handler asked none"));
    }
    for q in questions {
        main.push_str(&super::questions::question(q));
    }
    main.push_str("<h2>Events</h2>");
    let enqueued = item["enqueued_at_ms"].as_u64().unwrap_or(0);
    match events_of(seen, id, enqueued).await {
        Ok(events) => {
            let rows: Vec<Vec<String>> = events
                .iter()
                .map(|e| {
                    vec![
                        e.seq.to_string(),
                        esc(&crate::clock::rfc3339_ms(e.at_ms)),
                        esc(&e.kind),
                        html::value(&e.body, 300),
                    ]
                })
                .collect();
            main.push_str(&html::table(&["Seq", "At", "Kind", "Body"], &rows));
        }
        Err(e) => main.push_str(&html::refusal(&e)),
    }
    if !matches!(state, "done" | "dead") {
        main.push_str(&html::confirm_button(
            "cancel this item",
            &[("do", "cancel-item"), ("id", &id.to_string())],
        ));
    }
    if state == "dead" {
        main.push_str(&html::confirm_button(
            "retry",
            &[("do", "retry"), ("id", &id.to_string())],
        ));
    }
    main.push_str(&html::cli(&format!(
        "wfhost mail show {id}; wfhost events --mail {id}"
    )));
    seen.page(&title, &main).await
}

/// Item `id`'s events: the stream searched (by halves, on its time
/// order) for the first event at or after the item's enqueueing, then
/// read on, at most [`MAX_SCAN`] events.
async fn events_of(seen: &Seen<'_>, id: u64, since_ms: u64) -> Result<Vec<EventRecord>, String> {
    seen.ctx
        .shared
        .reader
        .call(move |s| {
            let (mut lo, mut hi) = (0u64, s.last_event_seq()?);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                match s.events_after(mid, 1)?.first() {
                    Some(e) if e.at_ms < since_ms => lo = e.seq,
                    _ => hi = mid,
                }
            }
            let (mut after, mut found, mut scanned) = (lo, Vec::new(), 0);
            loop {
                let page = s.events_after(after, 1000)?;
                for e in &page {
                    after = e.seq;
                    if e.mail_id() == Some(id) {
                        found.push(e.clone());
                    }
                }
                scanned += page.len();
                if page.len() < 1000
                    || scanned >= MAX_SCAN
                    || found.last().is_some_and(EventRecord::ends_item)
                {
                    return Ok(found);
                }
            }
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e: crate::store::StoreError| e.to_string())
}

/// `/dead`: dead mail, each with retry, and retry-all and purge.
pub async fn dead(seen: &Seen<'_>) -> Response {
    let deployment = seen.query("deployment").map(str::to_owned);
    let request = Request::MailList {
        deployment: deployment.clone(),
        state: Some("dead".into()),
        after: 0,
        limit: Some(PAGE),
    };
    let mut main = String::new();
    match seen.ask(request).await {
        Ok(data) => {
            main.push_str(&items(&data, true));
            let any = data["items"].as_array().is_some_and(|i| !i.is_empty());
            if any {
                let d = deployment.clone().unwrap_or_default();
                main.push_str("<p>");
                main.push_str(&html::confirm_button(
                    "retry all dead mail",
                    &[("do", "retry-dead"), ("deployment", &d)],
                ));
                main.push_str(&html::confirm_button(
                    "purge all dead mail",
                    &[("do", "purge"), ("deployment", &d)],
                ));
                main.push_str("</p>");
            }
        }
        Err(e) => main.push_str(&html::refusal(&e)),
    }
    main.push_str(&html::cli("wfhost mail list --state dead"));
    seen.page("Dead mail", &main).await
}
