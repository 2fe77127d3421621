//! `wfhost status [DEPLOYMENT]`: every deployment at a glance (a table
//! that fits 100 columns for ids up to 16 characters and stays aligned
//! beyond, under a line about the host, with a legend), or one deployment
//! in detail: why it is in its state, its drain and steps, mail, recycles
//! and exits, and its child's implementation.

use serde_json::Value;

use crate::commands::journal::rfc3339_ms;
use crate::control::client::Target;
use crate::control::protocol::Request;
use crate::exit;
use crate::observe::human;

/// Arguments of `wfhost status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Show this deployment in detail.
    deployment: Option<String>,
    /// Print the stable JSON shape instead (one deployment's object with
    /// DEPLOYMENT).
    #[arg(long)]
    json: bool,
}

/// The widest a table line should be.
const WIDTH: usize = 100;

/// Runs the command.
pub fn run(args: Args) -> u8 {
    let data = match args.target.call(Request::Status) {
        Ok(data) => data,
        Err(e) => {
            eprintln!("wfhost: {}", e.message);
            return e.code;
        }
    };
    let Some(id) = &args.deployment else {
        if args.json {
            println!("{data}");
        } else {
            print!("{}", table(&data));
        }
        return exit::OK;
    };
    let empty = Vec::new();
    let all = data["deployments"].as_array().unwrap_or(&empty);
    match all.iter().find(|d| d["id"] == id.as_str()) {
        Some(d) if args.json => println!("{d}"),
        Some(d) => print!("{}", detail(d)),
        None => {
            let known: Vec<&str> = all.iter().filter_map(|d| d["id"].as_str()).collect();
            eprintln!(
                "wfhost: unknown deployment {id:?}; known deployments: {}",
                known.join(", ")
            );
            return exit::FAILED;
        }
    }
    exit::OK
}

/// `-` for a missing value.
fn or_dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".to_owned())
}

fn ms_of(v: &Value) -> Option<String> {
    v.as_u64().map(human::ms)
}

/// The host line: what an operator checks first when recycles pile up.
/// The store, said only while it refuses writes: since when, why, and
/// what waits (it all goes through on its own once the store takes writes).
fn store_line(store: &Value) -> Option<String> {
    if store["takes_writes"].as_bool()? {
        return None;
    }
    let since = store["refusing_since_ms"].as_u64()?;
    let for_ms = crate::shared::unix_ms().saturating_sub(since);
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

/// The readable table, with notes for the deployments that need a look
/// (draining, stopping, restarting, failed) and a legend.
fn table(data: &Value) -> String {
    let empty = Vec::new();
    let deployments = data["deployments"].as_array().unwrap_or(&empty);
    let grants = deployments.iter().any(|d| d["grants_age_ms"].is_u64());
    let mut header = vec![
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
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut notes = String::new();
    for d in deployments {
        let id = d["id"].as_str().unwrap_or("?");
        let mail = &d["mail"];
        let r = &d["recycles"];
        let has_child = d["pid"].is_u64();
        rows.push(vec![
            id.to_owned(),
            d["state"].as_str().unwrap_or("?").to_owned(),
            or_dash(d["pid"].as_u64().map(|p| p.to_string())),
            or_dash(ms_of(&d["uptime_ms"]).filter(|_| has_child)),
            or_dash(d["rss_bytes"].as_u64().map(rss_cell)),
            or_dash(ms_of(&d["grants_age_ms"])),
            drain_cell(d),
            format!("{}/{}/{}", mail["inbox"], mail["processing"], mail["done"]),
            format!("{}/{}/{}", r["policy"], r["operator"], r["self"]),
            d["restarts"].as_u64().unwrap_or(0).to_string(),
            or_dash(d["last_exit_brief"].as_str().map(str::to_owned)),
        ]);
        let state = d["state"].as_str().unwrap_or("");
        if matches!(state, "draining" | "stopping" | "backoff" | "failed")
            && let Some(why) = d["why"].as_str()
        {
            notes.push_str(&wrap(&format!("  {id}: {why}")));
        }
        if let Some(e) = d["journal_error"].as_str() {
            notes.push_str(&wrap(&format!(
                "  {id}: the journal refuses signed cancels ({} waiting): {e}",
                d["cancels_pending"]
            )));
        }
    }
    if !grants {
        header.remove(5);
        for row in &mut rows {
            row.remove(5);
        }
    }
    let mut out = data.get("host").and_then(host_line).unwrap_or_default();
    out.push_str(&data.get("store").and_then(store_line).unwrap_or_default());
    out.push_str(&render(&header, &rows));
    if !notes.is_empty() {
        out.push('\n');
        out.push_str(&notes);
    }
    out.push('\n');
    out.push_str(
        "MAIL waiting/being processed/done   RECYCLES by policy/operator/the child itself\n",
    );
    out.push_str(if grants {
        "DRAIN budget used/budget (! ran out, cancel sent)   GRANTS age of the grants (- no grants_file)\n"
    } else {
        "DRAIN budget used/budget (! ran out, cancel sent)\n"
    });
    out.push_str(
        "`wfhost status DEPLOYMENT` tells why it is in its state, its steps, exits and recycles\n",
    );
    out
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
        .max(header[columns - 1].len() + 3);
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
fn wrap(text: &str) -> String {
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

/// One deployment in detail.
fn detail(d: &Value) -> String {
    let mut out = String::new();
    let mut put = |label: &str, value: String| {
        out.push_str(&format!("{label:<12} {value}\n"));
    };
    let id = d["id"].as_str().unwrap_or("?");
    let state = d["state"].as_str().unwrap_or("?");
    let since = ms_of(&d["since_ms"]).map_or_else(String::new, |s| format!(" for {s}"));
    put("deployment", id.to_owned());
    put("state", format!("{state}{since}"));
    put("why", d["why"].as_str().unwrap_or("?").to_owned());
    if let Some(pid) = d["pid"].as_u64() {
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
        put("child", child);
    }
    let implementation = d["implementation"].as_str().map_or_else(
        || "not known yet (no Hello)".to_owned(),
        |i| match d["takes_mail"].as_bool() {
            Some(false) => format!("{i}; takes no mail"),
            _ => format!("{i}; takes mail"),
        },
    );
    put("runs", implementation);
    put(
        "grants",
        ms_of(&d["grants_age_ms"]).map_or_else(
            || "none (no grants_file)".to_owned(),
            |age| format!("read {age} ago"),
        ),
    );
    let drain = &d["drain"];
    let budget_ms = drain["budget_ms"].as_u64().unwrap_or(0);
    let budget = wfhost_policy::format_duration(std::time::Duration::from_millis(budget_ms));
    let used = human::ms(drain["used_ms"].as_u64().unwrap_or(0));
    put(
        "drain",
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
        },
    );
    let steps = d["steps_in_flight"].as_u64().unwrap_or(0);
    put(
        "steps",
        match steps {
            0 => "none in flight".to_owned(),
            1 => "1 in flight".to_owned(),
            n => format!("{n} in flight"),
        },
    );
    let empty = Vec::new();
    let listed = d["steps"].as_array().unwrap_or(&empty);
    for step in listed {
        put(
            "",
            format!(
                "run {} step {} ({} on drain)",
                step["run"].as_str().unwrap_or("?"),
                step["step"].as_str().unwrap_or("?"),
                step["drain"].as_str().unwrap_or("?")
            ),
        );
    }
    if steps > listed.len() as u64 {
        put("", format!("… and {} more", steps - listed.len() as u64));
    }
    let mail = &d["mail"];
    put(
        "mail",
        format!(
            "{} waiting, {} being processed, {} done",
            mail["inbox"], mail["processing"], mail["done"]
        ),
    );
    let r = &d["recycles"];
    let total: u64 = ["policy", "operator", "self"]
        .iter()
        .filter_map(|k| r[*k].as_u64())
        .sum();
    put(
        "recycles",
        format!(
            "{total} (policy {}, operator {}, the child itself {})",
            r["policy"], r["operator"], r["self"]
        ),
    );
    if let Some(last) = d["last_recycle"].as_object() {
        let at = last.get("at_ms").and_then(Value::as_u64).map(rfc3339_ms);
        let pid = |k: &str| {
            last.get(k)
                .and_then(Value::as_u64)
                .map_or_else(|| "-".to_owned(), |p| p.to_string())
        };
        put(
            "",
            format!(
                "last by {} ({}) at {}: pid {} -> {}",
                last.get("origin").and_then(Value::as_str).unwrap_or("?"),
                last.get("reason").and_then(Value::as_str).unwrap_or("?"),
                or_dash(at),
                pid("old_pid"),
                pid("new_pid"),
            ),
        );
    }
    put("restarts", d["restarts"].as_u64().unwrap_or(0).to_string());
    put(
        "last exit",
        match d["last_exit"].as_str() {
            Some(e) => match d["last_exit_at_ms"].as_u64() {
                Some(at) => format!("{e} (at {})", rfc3339_ms(at)),
                None => e.to_owned(),
            },
            None => "none yet".to_owned(),
        },
    );
    let violations = d["violations"].as_u64().unwrap_or(0);
    let escalations = d["escalations"].as_u64().unwrap_or(0);
    if violations + escalations > 0 {
        put(
            "counted",
            format!("{violations} protocol violations, {escalations} drain escalations"),
        );
    }
    if let Some(e) = d["journal_error"].as_str() {
        put(
            "journal",
            format!(
                "refuses signed cancels ({} waiting): {e}",
                d["cancels_pending"]
            ),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A deployment at the wide end of the usual: a 7-digit pid, hours of
    /// uptime, hundreds of MiB, a long drain that ran out, busy mail.
    fn deployment(id: &str) -> Value {
        json!({
            "id": id, "state": "draining", "pid": 4194303, "uptime_ms": 7_260_000,
            "rss_bytes": 536_870_912, "grants_age_ms": null,
            "drain": {"active": true, "used_ms": 65_000, "budget_ms": 120_000, "escalated": true},
            "mail": {"inbox": 3, "processing": 1, "done": 1234},
            "recycles": {"policy": 12, "operator": 3, "self": 140},
            "restarts": 17, "last_exit_brief": "crashed: SIGSEGV",
            "why": "draining for a recycle: waiting for 2 steps in flight",
        })
    }

    /// A deployment as most are.
    fn quiet(id: &str) -> Value {
        json!({
            "id": id, "state": "ready", "pid": 52731, "uptime_ms": 185_000,
            "rss_bytes": 2_936_012, "grants_age_ms": null,
            "drain": {"active": false, "used_ms": 0, "budget_ms": 30_000, "escalated": false},
            "mail": {"inbox": 0, "processing": 0, "done": 3},
            "recycles": {"policy": 0, "operator": 1, "self": 0},
            "restarts": 0, "last_exit_brief": "not a wfhost child",
        })
    }

    fn status(ids: &[&str]) -> Value {
        json!({
            "deployments": ids.iter().map(|id| if id.starts_with('q') { quiet(id) } else { deployment(id) }).collect::<Vec<_>>(),
            "host": {"cores": 2, "load": [0.42, 0.35, 0.3], "memory_total_bytes": 8u64 << 30,
                     "memory_available_bytes": 5u64 << 30, "supervisor_pid": 4242,
                     "supervisor_rss_bytes": 6u64 << 20},
        })
    }

    #[test]
    fn the_table_fits_100_columns_for_ids_of_16_characters() {
        let text = table(&status(&["a", "exactly-16-chars"]));
        for line in text.lines() {
            assert!(
                line.chars().count() <= WIDTH,
                "{} columns: {line}",
                line.chars().count()
            );
        }
        assert!(
            text.starts_with("host: 2 cores, load 0.42 0.35 0.30, 5.0 of 8.0GiB memory available; wfhost pid 4242, 6.0MiB\n"),
            "{text}"
        );
        assert!(text.contains("crashed:"), "{text}");
        assert!(text.contains(" 65/120s! "), "{text}");
        assert!(text.contains(" 512MiB "), "{text}");
        let quiet = table(&status(&["quiet-16-chars-x"]));
        assert!(quiet.contains(" 0/0/3 "), "{quiet}");
        assert!(
            quiet.contains("  not a wfhost child\n"),
            "the whole of it: {quiet}"
        );
        for line in quiet.lines() {
            assert!(line.chars().count() <= WIDTH, "{line}");
        }
        assert!(
            text.contains("MAIL waiting/being processed/done"),
            "a legend: {text}"
        );
        assert!(
            !text.contains("GRANTS"),
            "no grants file, no column: {text}"
        );
    }

    #[test]
    fn longer_ids_keep_the_columns_aligned() {
        let long = "a-deployment-id-of-forty-characters-long";
        let text = table(&status(&["short", long]));
        let rows: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("DEPLOYMENT"))
            .take(3)
            .collect();
        let column = |line: &str, word: &str| line.find(word).expect(word);
        let state = column(rows[0], "STATE");
        assert_eq!(column(rows[1], "draining"), state, "{text}");
        assert_eq!(column(rows[2], "draining"), state, "{text}");
        let pid_end = column(rows[0], "PID") + 3;
        assert_eq!(column(rows[1], "4194303") + 7, pid_end, "{text}");
    }

    #[test]
    fn notes_fold_at_100_columns() {
        let long = format!("  x: {}", "word ".repeat(60));
        let folded = wrap(long.trim_end());
        assert!(folded.lines().count() >= 3, "{folded}");
        for line in folded.lines().skip(1) {
            assert!(line.starts_with("    word"), "{line}");
        }
        assert!(
            folded.lines().all(|l| l.chars().count() <= WIDTH),
            "{folded}"
        );
        assert_eq!(wrap("  a: b"), "  a: b\n");
    }

    #[test]
    fn the_detail_says_why() {
        let text = detail(&deployment("orders"));
        assert!(
            text.contains("why          draining for a recycle"),
            "{text}"
        );
        assert!(text.contains("ran out: a signed cancel was sent"), "{text}");
        assert!(
            text.contains("recycles     155 (policy 12, operator 3, the child itself 140)"),
            "{text}"
        );
        assert!(!text.contains("Some(") && !text.contains("null"), "{text}");
    }
}
