//! The table of every deployment: a line about the host (and the store
//! while it refuses writes), one row per deployment, notes for those that
//! need a look, and a legend.

use serde_json::Value;

use super::{WIDTH, ms_of, or_dash};
use crate::human;

/// The columns, in order; GRANTS is left out when no deployment has a
/// grants file.
const HEADER: [&str; 11] = [
    "DEPLOYMENT",
    "STATE",
    "PID",
    "UPTIME",
    "RSS",
    "GRANTS",
    "DRAIN",
    "MAIL",
    "RECYCLES",
    "RESTARTS",
    "LAST EXIT",
];

/// Where GRANTS is in [`HEADER`].
const GRANTS: usize = 5;

/// The readable table, with notes for the deployments that need a look
/// (draining, stopping, restarting, failed) and a legend.
pub(super) fn table(data: &Value) -> String {
    let empty = Vec::new();
    let deployments = data["deployments"].as_array().unwrap_or(&empty);
    let grants = deployments.iter().any(|d| d["grants_age_ms"].is_u64());
    let mut header = HEADER.to_vec();
    let mut rows: Vec<Vec<String>> = deployments.iter().map(cells).collect();
    let mut notes: String = deployments.iter().map(notes).collect();
    if let Some(host) = data["host"].as_str() {
        notes.push_str(&format!(
            "  (fleet host {host}: deployments owned elsewhere show their owner's last report)\n"
        ));
    }
    if !grants {
        header.remove(GRANTS);
        for row in &mut rows {
            row.remove(GRANTS);
        }
    }
    let mut out = data.get("host").and_then(host_line).unwrap_or_default();
    out.push_str(&data.get("store").and_then(store_line).unwrap_or_default());
    if let Some(e) = data["store"]["encryption"].as_str() {
        out.push_str(&format!("store connection: {e}\n"));
    }
    out.push_str(&render(&header, &rows));
    if !notes.is_empty() {
        out.push('\n');
        out.push_str(&notes);
    }
    out.push('\n');
    out.push_str(&legend(grants));
    out
}

/// One deployment's row, a cell per column of [`HEADER`].
fn cells(d: &Value) -> Vec<String> {
    let (mail, r) = (&d["mail"], &d["recycles"]);
    let has_child = d["pid"].is_u64();
    vec![
        d["id"].as_str().unwrap_or("?").to_owned(),
        d["state"].as_str().unwrap_or("?").to_owned(),
        or_dash(d["pid"].as_u64().map(|p| p.to_string())),
        or_dash(ms_of(&d["uptime_ms"]).filter(|_| has_child)),
        or_dash(d["rss_bytes"].as_u64().map(rss_cell)),
        or_dash(ms_of(&d["grants_age_ms"])),
        drain_cell(d),
        format!(
            "{}/{}/{}/{}/{}",
            mail["inbox"],
            super::detail::ahead(mail),
            super::detail::working(mail),
            mail["done"],
            mail["dead"]
        ),
        format!("{}/{}/{}", r["policy"], r["operator"], r["self"]),
        d["restarts"].as_u64().unwrap_or(0).to_string(),
        or_dash(d["last_exit_brief"].as_str().map(str::to_owned)),
    ]
}

/// The notes under the table for one deployment: why it is in a state
/// that needs a look, a journal refusing cancels, and (in a fleet) its
/// owner.
fn notes(d: &Value) -> String {
    let id = d["id"].as_str().unwrap_or("?");
    let mut notes = String::new();
    let state = d["state"].as_str().unwrap_or("");
    if matches!(state, "draining" | "stopping" | "backoff" | "failed")
        && let Some(why) = d["why"].as_str()
    {
        notes.push_str(&wrap(&format!("  {id}: {why}")));
    }
    // A child that keeps ending: the last thing it said on stderr.
    if matches!(state, "backoff" | "failed")
        && let Some(last) = d["last_stderr"]
            .as_array()
            .and_then(|t| t.last())
            .and_then(Value::as_str)
    {
        notes.push_str(&wrap(&format!(
            "  {id}: its last stderr line: {last} (`wfhost logs {id}` has the rest)"
        )));
    }
    if let Some(dead) = d["mail"]["dead"].as_u64().filter(|n| *n > 0) {
        let items = if dead == 1 { "item is" } else { "items are" };
        notes.push_str(&wrap(&format!(
            "  {id}: {dead} mail {items} dead (quarantined after max_deliveries failed deliveries): \
             `wfhost mail list {id} --state dead` shows why; fix the cause, then `wfhost mail retry --dead {id}`"
        )));
    }
    if let Some(open) = d["mail"]["questions_open"].as_u64().filter(|n| *n > 0) {
        let questions = if open == 1 {
            "question waits"
        } else {
            "questions wait"
        };
        notes.push_str(&wrap(&format!(
            "  {id}: {open} {questions} for an answer: `wfhost questions {id}` lists them, \
             `wfhost answer ID KEY VALUE` answers one"
        )));
    }
    if let Some(held) = d["mail"]["interrupted"].as_u64().filter(|n| *n > 0) {
        let items = if held == 1 {
            "item waits"
        } else {
            "items wait"
        };
        notes.push_str(&wrap(&format!(
            "  {id}: {held} interrupted mail {items} for an operator (redeliver = \"hold\"): \
             `wfhost mail list {id} --state interrupted` lists them; `wfhost mail retry ID` runs one again as its next attempt, `wfhost mail cancel ID` ends it"
        )));
    }
    if let Some(e) = d["journal_error"].as_str() {
        notes.push_str(&wrap(&format!(
            "  {id}: the journal refuses signed cancels ({} waiting): {e}",
            d["cancels_pending"]
        )));
    }
    // A fleet host lists every deployment of the fleet, with its owner.
    if let Some(owner) = d["owner"].as_object() {
        notes.push_str(&owner_note(id, owner));
    }
    // Where it may run, when that limits it or it runs nowhere.
    if let Some(placement) = d["placement"].as_str()
        && (d["hosts"].is_array() || placement.starts_with("runs nowhere"))
    {
        notes.push_str(&wrap(&format!("  {id}: {placement}")));
    }
    notes
}

/// Which host owns a deployment of the fleet, and whether its lease holds.
fn owner_note(id: &str, owner: &serde_json::Map<String, Value>) -> String {
    let host = owner
        .get("host")
        .and_then(|v| v.as_str())
        .unwrap_or("nobody");
    let epoch = owner.get("epoch").and_then(|v| v.as_i64()).unwrap_or(0);
    let expired = owner
        .get("expired")
        .and_then(|v| v.as_bool())
        .unwrap_or(true);
    let lease = if expired {
        "ran out or released"
    } else {
        "held"
    };
    format!("  {id}: owned by {host} (epoch {epoch}, lease {lease})\n")
}

/// What the compound columns mean (GRANTS only when shown).
fn legend(grants: bool) -> String {
    let drain = if grants {
        "DRAIN budget used/budget (! ran out, cancel sent)   GRANTS age of the grants (- no grants_file)\n"
    } else {
        "DRAIN budget used/budget (! ran out, cancel sent)\n"
    };
    format!(
        "MAIL waiting/in a child/working/done/dead   RECYCLES by policy/operator/the child itself\n\
         (in a child: sent ahead to it, not started; working: its handler started it; up to 32 are sent)\n\
         {drain}\
         `wfhost status DEPLOYMENT` tells why it is in its state, its steps, exits and recycles\n"
    )
}

/// The store, said only while it refuses writes: since when, why, and
/// what waits (it all goes through on its own once the store takes writes).
fn store_line(store: &Value) -> Option<String> {
    if store["takes_writes"].as_bool()? {
        return None;
    }
    let since = store["refusing_since_ms"].as_u64()?;
    let for_ms = crate::clock::unix_ms().saturating_sub(since);
    let w = &store["waiting"];
    let n = |k: &str| w[k].as_u64().unwrap_or(0);
    Some(format!(
        "store: REFUSING WRITES for {} ({}); waiting: {} mail acks, {} journal records, {} events, \
         written once it takes writes again (check the disk: df, dmesg)\n",
        human::ms(for_ms),
        store["last_error"].as_str().unwrap_or("no reason given"),
        n("acks"),
        n("journal_records"),
        n("events"),
    ))
}

/// The host line: what an operator checks first when recycles pile up.
fn host_line(host: &Value) -> Option<String> {
    let n = |k: &str| host[k].as_u64();
    let load: Vec<String> = host["load"]
        .as_array()?
        .iter()
        .filter_map(|l| l.as_f64().map(|l| format!("{l:.2}")))
        .collect();
    let available = human::bytes(n("memory_available_bytes")?);
    let total = human::bytes(n("memory_total_bytes")?);
    // "22.8 of 23.5GiB" when both have one unit.
    let unit = |s: &str| {
        s.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.')
            .to_owned()
    };
    let available = if unit(&available) == unit(&total) {
        available
            .trim_end_matches(|c: char| c.is_ascii_alphabetic())
            .to_owned()
    } else {
        available
    };
    Some(format!(
        "host: {} cores, load {}, {available} of {total} memory available; wfhost pid {}, {}\n",
        n("cores")?,
        load.join(" "),
        n("supervisor_pid")?,
        human::bytes(n("supervisor_rss_bytes")?),
    ))
}

/// The drain column: budget used/budget in seconds (`1.2/30s`,
/// `65/120s`), `!` once it ran out.
fn drain_cell(d: &Value) -> String {
    let drain = &d["drain"];
    if drain["active"] != true {
        return "-".to_owned();
    }
    let used = drain["used_ms"].as_u64().unwrap_or(0) as f64 / 1000.0;
    let budget = drain["budget_ms"].as_u64().unwrap_or(0) as f64 / 1000.0;
    let mark = if drain["escalated"] == true { "!" } else { "" };
    if budget < 60.0 {
        format!("{used:.1}/{budget}s{mark}")
    } else {
        format!("{used:.0}/{budget:.0}s{mark}")
    }
}

/// A size for the table: one decimal below 100 of its unit.
fn rss_cell(bytes: u64) -> String {
    let text = human::bytes(bytes);
    match text.split_once('.') {
        Some((whole, rest)) if whole.len() >= 3 => {
            format!(
                "{whole}{}",
                rest.trim_start_matches(|c: char| c.is_ascii_digit())
            )
        }
        _ => text,
    }
}

/// Columns as wide as their widest cell, the last one (free text) cut to
/// keep the line within [`WIDTH`] when the others leave room for it.
fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let columns = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    // Two spaces after the id and before the free text, one elsewhere.
    let gap = |i: usize| if i == 0 || i == columns - 2 { 2 } else { 1 };
    let fixed: usize = (0..columns - 1).map(|i| widths[i] + gap(i)).sum();
    let last = WIDTH
        .saturating_sub(fixed)
        .max(header[columns - 1].len() + 1);
    // Left-aligned: the id, the state and the last exit; numbers right.
    let left = |i: usize| i == 0 || i == 1;
    let line = |cells: Vec<String>| {
        let mut text = String::new();
        for (i, cell) in cells.into_iter().enumerate() {
            let (w, g) = (widths[i], " ".repeat(gap(i)));
            if i == columns - 1 {
                text.push_str(&cut(&cell, last));
            } else if left(i) {
                text.push_str(&format!("{cell:<w$}{g}"));
            } else {
                text.push_str(&format!("{cell:>w$}{g}"));
            }
        }
        text.trim_end().to_owned() + "\n"
    };
    let mut out = line(header.iter().map(|h| (*h).to_owned()).collect());
    for row in rows {
        out.push_str(&line(row.clone()));
    }
    out
}

/// A note folded at spaces into lines of at most [`WIDTH`] characters,
/// the rest indented under its first.
pub(super) fn wrap(text: &str) -> String {
    let indent = text.len() - text.trim_start().len();
    let mut out = String::new();
    let mut line = " ".repeat(indent);
    let mut empty = true;
    for word in text.split_whitespace() {
        if !empty && line.chars().count() + 1 + word.chars().count() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = " ".repeat(indent + 2);
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(&line);
    out.push('\n');
    out
}

/// `text` within `width` characters, `…` marking a cut.
fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        text.to_owned()
    } else {
        let kept: String = text.chars().take(width.saturating_sub(1)).collect();
        format!("{kept}…")
    }
}
