//! `/d/ID`: one deployment: its state and why, its children (replicas),
//! the steps in flight, the drain budget, recycles and restarts, the last
//! exit, its recent output, and the actions on it.

use serde_json::Value;

use super::super::html::{self, esc};
use super::{Seen, at, ms};
use crate::console::http::{Response, encode};
use crate::control::protocol::Request;
use crate::deployment::output;

/// Recent output lines shown.
const LOG_LINES: usize = 40;

/// The page.
pub async fn page(seen: &Seen<'_>, id: &str) -> Response {
    let data = match seen.ask(Request::Status).await {
        Ok(d) => d,
        Err(e) => return seen.page(id, &html::refusal(&e)).await,
    };
    let empty = Vec::new();
    let found = data["deployments"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .find(|d| d["id"].as_str() == Some(id));
    let Some(d) = found else {
        return super::not_found(seen.opened);
    };
    let mut main = format!("<p class=\"why\">{}</p>", html::value(&d["why"], 600));
    main.push_str(&html::table(
        &[
            "State",
            "PID",
            "Uptime",
            "RSS",
            "Restarts",
            "Recycles (policy/operator/self)",
            "Last recycle",
            "Last exit",
        ],
        &[vec![
            format!(
                "<span class=\"state\">{}</span>",
                html::value(&d["state"], 20)
            ),
            format!(
                "<span class=\"pid\" id=\"pid\">{}</span>",
                html::value(&d["pid"], 12)
            ),
            ms(&d["uptime_ms"]),
            d["rss_bytes"]
                .as_u64()
                .map_or("–".into(), crate::human::bytes),
            html::value(&d["restarts"], 12),
            format!(
                "{}/{}/{}",
                d["recycles"]["policy"], d["recycles"]["operator"], d["recycles"]["self"]
            ),
            html::value(&d["last_recycle"], 200),
            html::value(&d["last_exit"], 300),
        ]],
    ));
    main.push_str("<h2>Children</h2>");
    let replicas: Vec<Vec<String>> = d["replicas"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|r| {
            vec![
                format!("{}/{}", esc(id), html::value(&r["index"], 6)),
                html::value(&r["role"], 20),
                html::value(&r["state"], 20),
                format!("<span class=\"pid\">{}</span>", html::value(&r["pid"], 12)),
                ms(&r["uptime_ms"]),
                r["rss_bytes"]
                    .as_u64()
                    .map_or("–".into(), crate::human::bytes),
                html::value(&r["in_hand"], 12),
                html::value(&r["mail_done"], 12),
                html::value(&r["steps_in_flight"], 12),
            ]
        })
        .collect();
    main.push_str(&html::table(
        &[
            "Child",
            "Role",
            "State",
            "PID",
            "Uptime",
            "RSS",
            "Mail in hand",
            "Mail done",
            "Steps",
        ],
        &replicas,
    ));
    main.push_str("<h2>Steps in flight</h2>");
    let steps: Vec<Vec<String>> = d["steps"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|s| {
            vec![
                html::value(&s["run"], 200),
                format!(
                    "<span class=\"step\">{}</span>",
                    html::value(&s["step"], 200)
                ),
                html::value(&s["drain"], 10),
            ]
        })
        .collect();
    if steps.is_empty() {
        main.push_str(&html::note("none"));
    } else {
        main.push_str(&html::table(&["Run", "Step", "On drain"], &steps));
    }
    let drain = &d["drain"];
    main.push_str(&format!(
        "<h2>Drain budget</h2><p>{} · used {} of {} · purpose {} · escalated {}</p>",
        html::value(&drain["budget"], 20),
        ms(&drain["used_ms"]),
        ms(&drain["budget_ms"]),
        html::value(&drain["purpose"], 40),
        html::value(&drain["escalated"], 10),
    ));
    let m = &d["mail"];
    main.push_str(&format!(
        "<h2>Mail</h2><p>inbox {} · processing {} · done {} · dead {} · questions open {} · {}</p>",
        m["inbox"],
        m["processing"],
        m["done"],
        m["dead"],
        m["questions_open"],
        html::link(&format!("/mail?deployment={}", encode(id)), "list its mail"),
    ));
    main.push_str("<h2>Actions</h2><p>");
    for action in ["drain", "resume", "recycle", "cancel"] {
        main.push_str(&html::confirm_button(
            action,
            &[("do", action), ("deployment", id)],
        ));
    }
    main.push_str("</p>");
    if let Some(lines) = d["last_stderr"].as_array().filter(|l| !l.is_empty()) {
        main.push_str("<h2>The last child's last stderr lines</h2><pre class=\"log\">");
        for l in lines {
            main.push_str(&html::value(l, 400));
            main.push('\n');
        }
        main.push_str("</pre>");
    }
    main.push_str(&format!(
        "<h2>Recent output (last {LOG_LINES} lines)</h2><pre class=\"log\">"
    ));
    if seen.ctx.shared.fleet.is_none()
        || crate::control::handlers::lookup(&seen.ctx.registry, id).is_ok()
    {
        for line in output::recent(id).last(LOG_LINES) {
            main.push_str(&format!(
                "{} {} {} {}\n",
                esc(&at(&Value::from(line.at_ms))),
                line.pid,
                line.stream,
                esc(&line.text)
            ));
        }
    }
    main.push_str("</pre>");
    main.push_str(&html::cli(&format!("wfhost status {id}; wfhost logs {id}")));
    seen.page(id, &main).await
}
