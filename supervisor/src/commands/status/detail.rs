//! One deployment in detail: a labelled line per section, in the order an
//! operator reads them (why it is in its state, its child, drain and
//! steps, mail, recycles, exits, and what was counted against it).

use serde_json::Value;

use super::{ms_of, or_dash};
use crate::clock::rfc3339_ms;
use crate::human;

/// A line of the detail: its label (empty under a line it continues) and
/// its text.
type Line = (&'static str, String);

/// One deployment in detail.
pub(super) fn detail(d: &Value) -> String {
    let mut lines = state(d);
    lines.extend(child(d));
    lines.push(("runs", implementation(d)));
    lines.push(("grants", grants(d)));
    lines.push(("drain", drain(&d["drain"])));
    lines.extend(steps(d));
    lines.extend(mail(d));
    lines.extend(recycles(d));
    lines.push(("restarts", d["restarts"].as_u64().unwrap_or(0).to_string()));
    lines.push(("last exit", last_exit(d)));
    lines.extend(last_stderr(d));
    lines.extend(counted(d));
    lines.extend(journal(d));
    lines
        .iter()
        .map(|(label, value)| format!("{label:<12} {value}\n"))
        .collect()
}

/// Which deployment, its state and for how long, and why.
fn state(d: &Value) -> Vec<Line> {
    let state = d["state"].as_str().unwrap_or("?");
    let since = ms_of(&d["since_ms"]).map_or_else(String::new, |s| format!(" for {s}"));
    vec![
        ("deployment", d["id"].as_str().unwrap_or("?").to_owned()),
        ("state", format!("{state}{since}")),
        ("why", d["why"].as_str().unwrap_or("?").to_owned()),
    ]
}

/// The live child: pid, uptime, memory and channel (nothing without one).
fn child(d: &Value) -> Option<Line> {
    let pid = d["pid"].as_u64()?;
    let mut child = format!("pid {pid}");
    if let Some(up) = ms_of(&d["uptime_ms"]) {
        child.push_str(&format!(", up {up}"));
    }
    if let Some(rss) = d["rss_bytes"].as_u64() {
        child.push_str(&format!(", {} resident", human::bytes(rss)));
    }
    if let Some(c) = d["channel_id"].as_str() {
        child.push_str(&format!(", channel {c}"));
    }
    Some(("child", child))
}

/// The child's implementation (from its Hello), the protocol version it
/// speaks, and whether it takes mail.
fn implementation(d: &Value) -> String {
    d["implementation"].as_str().map_or_else(
        || "not known yet (no Hello)".to_owned(),
        |i| {
            let protocol = d["protocol"]
                .as_u64()
                .map_or_else(String::new, |v| format!(", protocol {v}"));
            match d["takes_mail"].as_bool() {
                Some(false) => format!("{i}{protocol}; takes no mail"),
                _ => format!("{i}{protocol}; takes mail"),
            }
        },
    )
}

/// How old the grants are.
fn grants(d: &Value) -> String {
    ms_of(&d["grants_age_ms"]).map_or_else(
        || "none (no grants_file)".to_owned(),
        |age| format!("read {age} ago"),
    )
}

/// The drain under way (purpose, budget used and left) or the last one's
/// end.
fn drain(drain: &Value) -> String {
    let budget_ms = drain["budget_ms"].as_u64().unwrap_or(0);
    let budget = wfhost_policy::format_duration(std::time::Duration::from_millis(budget_ms));
    let used = human::ms(drain["used_ms"].as_u64().unwrap_or(0));
    if drain["active"] == true {
        let left = drain["budget_ms"]
            .as_u64()
            .unwrap_or(0)
            .saturating_sub(drain["used_ms"].as_u64().unwrap_or(0));
        format!(
            "{} ({}): {used} of {budget} used, {} left; the budget is {}",
            drain["purpose"].as_str().unwrap_or("?"),
            if drain["escalated"] == true {
                "ran out: a signed cancel was sent"
            } else {
                "under way"
            },
            human::ms(left),
            drain["budget"].as_str().unwrap_or("?"),
        )
    } else if drain["escalated"] == true {
        format!("none under way; the last ran out its {budget} budget")
    } else {
        format!("none under way; budget {budget} (drain_timeout)")
    }
}

/// How many steps are in flight, then each one listed (and how many were
/// left out of the list).
fn steps(d: &Value) -> Vec<Line> {
    let steps = d["steps_in_flight"].as_u64().unwrap_or(0);
    let count = match steps {
        0 => "none in flight".to_owned(),
        1 => "1 in flight".to_owned(),
        n => format!("{n} in flight"),
    };
    let mut lines = vec![("steps", count)];
    let empty = Vec::new();
    let listed = d["steps"].as_array().unwrap_or(&empty);
    for step in listed {
        lines.push((
            "",
            format!(
                "run {} step {} ({} on drain)",
                step["run"].as_str().unwrap_or("?"),
                step["step"].as_str().unwrap_or("?"),
                step["drain"].as_str().unwrap_or("?")
            ),
        ));
    }
    if steps > listed.len() as u64 {
        lines.push(("", format!("… and {} more", steps - listed.len() as u64)));
    }
    lines
}

/// Items in a child its handler started (a supervisor from before
/// protocol 3 does not say: all it sent were started).
pub fn working(mail: &Value) -> u64 {
    let processing = mail["processing"].as_u64().unwrap_or(0);
    mail["working"].as_u64().unwrap_or(processing)
}

/// Items in a child its handler has not started: sent ahead of its work.
pub fn ahead(mail: &Value) -> u64 {
    let processing = mail["processing"].as_u64().unwrap_or(0);
    processing.saturating_sub(working(mail))
}

/// The mail counts, and the next step when some is dead.
fn mail(d: &Value) -> Vec<Line> {
    let mail = &d["mail"];
    let mut lines = vec![(
        "mail",
        format!(
            "{} waiting, {} in its child ({} being worked on, {} sent ahead, not started), {} done, {} dead",
            mail["inbox"],
            mail["processing"],
            working(mail),
            ahead(mail),
            mail["done"],
            mail["dead"]
        ),
    )];
    if mail["dead"].as_u64().is_some_and(|n| n > 0) {
        let id = d["id"].as_str().unwrap_or("?");
        lines.push((
            "",
            format!(
                "dead mail was quarantined after max_deliveries failed deliveries: `wfhost mail list {id} \
                 --state dead` shows why; fix the cause, then `wfhost mail retry --dead {id}`"
            ),
        ));
    }
    if let Some(open) = mail["questions_open"].as_u64().filter(|n| *n > 0) {
        let id = d["id"].as_str().unwrap_or("?");
        let oldest = mail["oldest_question_at_ms"]
            .as_u64()
            .map_or_else(String::new, |at| {
                format!(", the oldest asked {}", rfc3339_ms(at))
            });
        lines.push((
            "",
            format!(
                "{open} waiting for an answer{oldest} ({} given back, held by no child): \
                 `wfhost questions {id}` lists them, `wfhost answer ID KEY VALUE` answers one",
                mail["awaiting"]
            ),
        ));
    }
    if let Some(held) = mail["interrupted"].as_u64().filter(|n| *n > 0) {
        let id = d["id"].as_str().unwrap_or("?");
        lines.push((
            "",
            format!(
                "{held} interrupted (its child ended mid-item; redeliver = \"hold\"): \
                 `wfhost mail list {id} --state interrupted` lists them; `wfhost mail retry ID` runs one again as its next attempt, `wfhost mail cancel ID` ends it"
            ),
        ));
    }
    lines
}

/// The recycles by origin, then the last one (who, why, when, which
/// pids).
fn recycles(d: &Value) -> Vec<Line> {
    let r = &d["recycles"];
    let total: u64 = ["policy", "operator", "self"]
        .iter()
        .filter_map(|k| r[*k].as_u64())
        .sum();
    let mut lines = vec![(
        "recycles",
        format!(
            "{total} (policy {}, operator {}, the child itself {})",
            r["policy"], r["operator"], r["self"]
        ),
    )];
    if let Some(last) = d["last_recycle"].as_object() {
        lines.push(("", last_recycle(last)));
    }
    lines
}

/// The last recycle: by whom, why, when, and the pid it replaced.
fn last_recycle(last: &serde_json::Map<String, Value>) -> String {
    let at = last.get("at_ms").and_then(Value::as_u64).map(rfc3339_ms);
    let pid = |k: &str| {
        last.get(k)
            .and_then(Value::as_u64)
            .map_or_else(|| "-".to_owned(), |p| p.to_string())
    };
    format!(
        "last by {} ({}) at {}: pid {} -> {}",
        last.get("origin").and_then(Value::as_str).unwrap_or("?"),
        last.get("reason").and_then(Value::as_str).unwrap_or("?"),
        or_dash(at),
        pid("old_pid"),
        pid("new_pid"),
    )
}

/// How the last child ended, and when.
fn last_exit(d: &Value) -> String {
    match d["last_exit"].as_str() {
        Some(e) => match d["last_exit_at_ms"].as_u64() {
            Some(at) => format!("{e} (at {})", rfc3339_ms(at)),
            None => e.to_owned(),
        },
        None => "none yet".to_owned(),
    }
}

/// The last lines the child that ended wrote to stderr (its exception, a
/// missing file), and where the rest is.
fn last_stderr(d: &Value) -> Vec<Line> {
    let empty = Vec::new();
    let tail = d["last_stderr"].as_array().unwrap_or(&empty);
    if tail.is_empty() {
        return Vec::new();
    }
    let mut lines: Vec<Line> = tail
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let label = if i == 0 { "its stderr" } else { "" };
            (label, format!("| {}", l.as_str().unwrap_or("")))
        })
        .collect();
    lines.push((
        "",
        format!(
            "(its last lines; `wfhost logs {}` has the rest)",
            d["id"].as_str().unwrap_or("?")
        ),
    ));
    lines
}

/// Protocol violations and drain escalations, said only when there are any.
fn counted(d: &Value) -> Option<Line> {
    let violations = d["violations"].as_u64().unwrap_or(0);
    let escalations = d["escalations"].as_u64().unwrap_or(0);
    (violations + escalations > 0).then(|| {
        (
            "counted",
            format!("{violations} protocol violations, {escalations} drain escalations"),
        )
    })
}

/// The journal, said only while it refuses signed cancels.
fn journal(d: &Value) -> Option<Line> {
    let e = d["journal_error"].as_str()?;
    Some((
        "journal",
        format!(
            "refuses signed cancels ({} waiting): {e}",
            d["cancels_pending"]
        ),
    ))
}
