//! `/`: the host, and every deployment as `wfhost status` shows it, with
//! the legend.

use serde_json::Value;

use super::super::html::{self, esc};
use super::{Seen, ms};
use crate::console::http::Response;
use crate::control::protocol::Request;

/// The columns, as the status table's.
const HEADER: [&str; 10] = [
    "Deployment",
    "State",
    "PID",
    "Uptime",
    "RSS",
    "Drain",
    "Mail",
    "Recycles",
    "Restarts",
    "Last exit",
];

/// What the columns and states mean.
const LEGEND: &str = "<dl class=\"legend\">\
<dt>State</dt><dd>starting, ready, draining (under its drain budget), stopping, backoff (restarting after a crash), drained (until resumed), failed (too many restarts), exited</dd>\
<dt>Drain</dt><dd>budget used / budget while a drain runs; idle otherwise</dd>\
<dt>Mail</dt><dd>inbox / sent ahead to a child / being worked on / done / dead</dd>\
<dt>Recycles</dt><dd>by policy / by an operator / asked for by the child itself</dd>\
<dt>Restarts</dt><dd>crashes restarted since the supervisor started</dd>\
</dl>";

/// The page.
pub async fn page(seen: &Seen<'_>) -> Response {
    let data = match seen.ask(Request::Status).await {
        Ok(d) => d,
        Err(e) => return seen.page("Host", &html::refusal(&e)).await,
    };
    let mut main = host_line(&data["host"]);
    if data["store"]["takes_writes"] == Value::Bool(false) {
        main.push_str(&html::refusal(&format!(
            "the store refuses writes: {}",
            data["store"]["last_error"].as_str().unwrap_or("?")
        )));
    }
    let empty = Vec::new();
    let deployments = data["deployments"].as_array().unwrap_or(&empty);
    let rows: Vec<Vec<String>> = deployments.iter().map(row).collect();
    if rows.is_empty() {
        main.push_str(&html::note("no deployment is configured"));
    } else {
        main.push_str(&html::table(&HEADER, &rows));
    }
    for d in deployments {
        let state = d["state"].as_str().unwrap_or("");
        if matches!(state, "draining" | "stopping" | "backoff" | "failed") {
            main.push_str(&format!(
                "<p class=\"note\">{}: {}</p>",
                esc(d["id"].as_str().unwrap_or("?")),
                html::value(&d["why"], 400)
            ));
        }
    }
    main.push_str(LEGEND);
    main.push_str(&html::cli("wfhost status"));
    seen.page("Host", &main).await
}

/// The line about the machine and the supervisor.
fn host_line(h: &Value) -> String {
    let mem = |v: &Value| v.as_u64().map_or("–".to_owned(), crate::human::bytes);
    format!(
        "<p class=\"host\">{} cores · memory {} free of {} · load {} · supervisor pid {}, RSS {}</p>",
        html::value(&h["cores"], 10),
        mem(&h["memory_available_bytes"]),
        mem(&h["memory_total_bytes"]),
        html::value(&h["load"], 40),
        html::value(&h["supervisor_pid"], 10),
        mem(&h["supervisor_rss_bytes"]),
    )
}

/// One deployment's row.
pub fn row(d: &Value) -> Vec<String> {
    let id = d["id"].as_str().unwrap_or("?");
    let (m, r, drain) = (&d["mail"], &d["recycles"], &d["drain"]);
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let drain = if drain["active"] == Value::Bool(true) {
        format!("{} / {}", ms(&drain["used_ms"]), ms(&drain["budget_ms"]))
    } else {
        "idle".into()
    };
    let state = d["state"].as_str().unwrap_or("?");
    vec![
        html::deployment_link(id),
        format!("<span class=\"state {0}\">{0}</span>", esc(state)),
        format!("<span class=\"pid\">{}</span>", html::value(&d["pid"], 12)),
        if d["pid"].is_u64() {
            ms(&d["uptime_ms"])
        } else {
            "–".into()
        },
        d["rss_bytes"]
            .as_u64()
            .map_or("–".into(), crate::human::bytes),
        drain,
        format!(
            "{}/{}/{}/{}/{}",
            n(&m["inbox"]),
            n(&m["processing"]).saturating_sub(n(&m["working"])),
            n(&m["working"]),
            n(&m["done"]),
            n(&m["dead"])
        ),
        format!(
            "{}/{}/{}",
            n(&r["policy"]),
            n(&r["operator"]),
            n(&r["self"])
        ),
        n(&d["restarts"]).to_string(),
        html::value(&d["last_exit_brief"], 80),
    ]
}
