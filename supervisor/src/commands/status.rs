//! `wfhost status [DEPLOYMENT]`: every deployment at a glance (a table
//! that fits 100 columns for ids up to 16 characters and stays aligned
//! beyond, under a line about the host, with a legend), or one deployment
//! in detail: why it is in its state, its drain and steps, mail, recycles
//! and exits, and its child's implementation.

mod detail;
mod table;

use serde_json::Value;

use crate::control::client::Target;
use crate::control::protocol::Request;
use crate::exit;
use crate::human;
use detail::detail;
use table::table;

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

/// A duration in milliseconds, readable.
fn ms_of(v: &Value) -> Option<String> {
    v.as_u64().map(human::ms)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::table::wrap;
    use super::*;

    /// A deployment at the wide end of the usual: a 7-digit pid, hours of
    /// uptime, hundreds of MiB, a long drain that ran out, busy mail.
    fn deployment(id: &str) -> Value {
        json!({
            "id": id, "state": "draining", "pid": 4194303, "uptime_ms": 7_260_000,
            "rss_bytes": 536_870_912, "grants_age_ms": null,
            "drain": {"active": true, "used_ms": 65_000, "budget_ms": 120_000, "escalated": true},
            "mail": {"inbox": 3, "processing": 1, "done": 1234, "dead": 2},
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
            "mail": {"inbox": 0, "processing": 0, "done": 3, "dead": 0},
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
        assert!(quiet.contains(" 0/0/0/3/0 "), "{quiet}");
        assert!(
            quiet.contains("  not a wfhost child\n"),
            "the whole of it: {quiet}"
        );
        for line in quiet.lines() {
            assert!(line.chars().count() <= WIDTH, "{line}");
        }
        assert!(
            text.contains("MAIL waiting/in a child/working/done/dead"),
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
