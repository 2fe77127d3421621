//! `wfhost mail list|show|retry|purge`: stored mail as an operator sees it
//! (state, attempts and failures, holder, last failure, the history of
//! each delivery), and what to do with dead mail: deliver it again once
//! the child is fixed, or delete it.

use std::io::Write;

use serde_json::Value;

use crate::clock::rfc3339_ms;
use crate::commands::call;
use crate::commands::journal::printable;
use crate::config::parse_duration;
use crate::control::client::{self, Target};
use crate::control::protocol::Request;
use crate::exit;
use crate::store::mail_admin::PAYLOAD_CHUNK;

/// `wfhost mail …`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// List stored mail, oldest first: state, attempts, failures, age, holder, last failure.
    List(ListArgs),
    /// One item with the history of its deliveries (`--payload`: its raw bytes to stdout).
    Show(ShowArgs),
    /// One item's result as its child gave it (exit 0), or its outcome (exit 1); `--wait` for its end.
    Result(ResultArgs),
    /// Cancel one item: queued, it is never delivered; in flight, its child is sent a signed cancel.
    Cancel(CancelArgs),
    /// Deliver dead mail again, from attempt 1: one ID, or `--dead [DEPLOYMENT]`.
    Retry(RetryArgs),
    /// Delete dead mail: `--dead [DEPLOYMENT] [--older-than D]`.
    Purge(PurgeArgs),
}

/// Arguments of `wfhost mail result`.
#[derive(Debug, clap::Args)]
pub struct ResultArgs {
    #[command(flatten)]
    target: Target,
    /// The item's id.
    id: u64,
    /// Wait for the item to end (for `--timeout` at most).
    #[arg(long)]
    wait: bool,
    /// With `--wait`: stop waiting after this long (e.g. `30s`).
    #[arg(long, value_name = "DURATION", requires = "wait")]
    timeout: Option<String>,
    /// Print one JSON object: id, outcome, reason, result (base64) and
    /// result_text (when it is UTF-8).
    #[arg(long)]
    json: bool,
}

/// Arguments of `wfhost mail cancel`.
#[derive(Debug, clap::Args)]
pub struct CancelArgs {
    #[command(flatten)]
    target: Target,
    /// The item's id.
    id: u64,
    /// Why, for the journal and the child (default: "operator cancel").
    #[arg(long)]
    reason: Option<String>,
    /// Then wait for the item's end, and print it as `mail result` does.
    #[arg(long)]
    wait: bool,
}

/// Arguments of `wfhost mail list`.
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    target: Target,
    /// Only this deployment's mail.
    deployment: Option<String>,
    /// Only mail in this state.
    #[arg(long, value_parser = ["inbox", "processing", "done", "dead", "interrupted"])]
    state: Option<String>,
    /// At most this many items (1 to 10000).
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Only ids above this (to page on after a list that had more).
    #[arg(long, value_name = "ID", default_value_t = 0)]
    after: u64,
    /// One JSON object per item and line, with its history.
    #[arg(long)]
    json: bool,
}

/// Arguments of `wfhost mail show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    #[command(flatten)]
    target: Target,
    /// The item's id.
    id: u64,
    /// Write the payload's raw bytes to stdout, and nothing else.
    #[arg(long, conflicts_with = "json")]
    payload: bool,
    /// The item as one JSON object, with its history.
    #[arg(long)]
    json: bool,
}

/// Arguments of `wfhost mail retry`.
#[derive(Debug, clap::Args)]
pub struct RetryArgs {
    #[command(flatten)]
    target: Target,
    /// The dead item's id; with `--dead`, a deployment (default: every one).
    which: Option<String>,
    /// Retry every dead item (of the deployment named, else of every deployment).
    #[arg(long)]
    dead: bool,
}

/// Arguments of `wfhost mail purge`.
#[derive(Debug, clap::Args)]
pub struct PurgeArgs {
    #[command(flatten)]
    target: Target,
    /// Only this deployment's dead mail.
    deployment: Option<String>,
    /// Purge dead mail (the only mail that can be purged; say so to be sure).
    #[arg(long, required = true)]
    dead: bool,
    /// Only mail dead for longer than this, e.g. "7d", "12h".
    #[arg(long, value_name = "DURATION")]
    older_than: Option<String>,
}

/// Runs a mail subcommand.
pub fn run(cmd: Command) -> u8 {
    match cmd {
        Command::List(args) => list(&args),
        Command::Show(args) => show(&args),
        Command::Result(args) => result(&args),
        Command::Cancel(args) => cancel(&args),
        Command::Retry(args) => retry(&args),
        Command::Purge(args) => purge(&args),
    }
}

/// Exit 0 when the item is stopped (cancelled, acknowledged, or its child
/// ended), else 1 with the verdict's words.
fn cancel(args: &CancelArgs) -> u8 {
    let request = Request::MailCancel {
        id: args.id,
        reason: args.reason.clone(),
    };
    let data = match args.target.call(request) {
        Ok(data) => data,
        Err(e) => {
            eprintln!("wfhost: {}", e.message);
            return e.code;
        }
    };
    let verdict = data["verdict"].as_str().unwrap_or("?");
    let journal = data["journal_seq"]
        .as_u64()
        .map_or_else(String::new, |seq| format!(" (journal record {seq})"));
    let line = format!(
        "mail {} of {}: {verdict}{journal}: {}",
        args.id,
        data["deployment"].as_str().unwrap_or("?"),
        data["detail"].as_str().unwrap_or_default()
    );
    let stopped = matches!(verdict, "cancelled" | "acknowledged" | "ended");
    if stopped {
        println!("{line}");
    } else {
        eprintln!("wfhost: {line}");
    }
    if !args.wait {
        return if stopped { exit::OK } else { exit::FAILED };
    }
    let end = match call::wait_for(&mut args.target.kept(), args.id, None) {
        Ok(end) => end,
        Err(code) => return code,
    };
    let outcome = end["outcome"].as_str().unwrap_or("?");
    let why = end["reason"]
        .as_str()
        .map_or_else(String::new, |r| format!(": {r}"));
    println!("mail {} ended: {outcome}{why}", args.id);
    if outcome == "cancelled" {
        exit::OK
    } else {
        exit::FAILED
    }
}

fn result(args: &ResultArgs) -> u8 {
    let wait = match call::timeout(args.timeout.as_deref()) {
        Ok(t) if args.wait => t,
        Ok(_) => Some(std::time::Duration::ZERO),
        Err(code) => return code,
    };
    call::wait_and_print(&mut args.target.kept(), args.id, wait, args.json)
}

fn list(args: &ListArgs) -> u8 {
    let request = Request::MailList {
        deployment: args.deployment.clone(),
        state: args.state.clone(),
        after: args.after,
        limit: Some(args.limit),
    };
    client::run(&args.target, request, |data| {
        let items = data["items"].as_array().cloned().unwrap_or_default();
        if args.json {
            for item in &items {
                println!("{item}");
            }
        } else {
            print!("{}", table(&items));
        }
        let more = data["more"].as_u64().unwrap_or(0);
        if let Some(last) = items.last().and_then(|i| i["id"].as_u64())
            && more > 0
        {
            eprintln!("… and {more} more: `wfhost mail list --after {last}` shows the next page");
        }
    })
}

/// The readable list: one line per item.
fn table(items: &[Value]) -> String {
    if items.is_empty() {
        return "no mail matches\n".into();
    }
    let row = |c: [&str; 8]| {
        format!(
            "{:>8}  {:<16} {:<10} {:>8} {:>8} {:>8} {:>8}  {}\n",
            c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]
        )
    };
    let mut out = row([
        "ID",
        "DEPLOYMENT",
        "STATE",
        "ATTEMPTS",
        "FAILURES",
        "AGE",
        "HOLDER",
        "LAST FAILURE",
    ]);
    for i in items {
        let holder = i["holder"]["pid"]
            .as_u64()
            .map_or_else(|| "-".to_owned(), |p| p.to_string());
        out.push_str(&row([
            &i["id"].to_string(),
            i["deployment"].as_str().unwrap_or("?"),
            state_of(i),
            &i["attempts"].to_string(),
            &i["failures"].to_string(),
            &age(i["age_ms"].as_u64().unwrap_or(0)),
            &holder,
            &last_failure(&i["last_failure"]),
        ]));
    }
    out
}

/// The item's state as operators read it: `waiting for an answer` when
/// a question of its handler is open, else the stored state.
fn state_of(i: &Value) -> &str {
    if i["waiting_for_answer"] == true {
        "waiting for an answer"
    } else {
        i["state"].as_str().unwrap_or("?")
    }
}

/// "exited unexpectedly: exit status 3 (pid 812, 2026-12-01T14:20:26.020Z)", or "-".
fn last_failure(f: &Value) -> String {
    match f["cause"].as_str() {
        Some(cause) => format!(
            "{cause} (pid {}, {})",
            f["pid"],
            rfc3339_ms(f["at_ms"].as_u64().unwrap_or(0))
        ),
        None => "-".into(),
    }
}

/// A coarse age: "850ms", "42s", "3m5s", "4h12m", "2d3h".
pub fn age(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        3600..86_400 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86_400, s % 86_400 / 3600),
    }
}

fn show(args: &ShowArgs) -> u8 {
    let item = match args.target.call(Request::MailShow { id: args.id }) {
        Ok(item) => item,
        Err(e) => {
            eprintln!("wfhost: {}", e.message);
            return e.code;
        }
    };
    if args.payload {
        return write_payload(args, &item);
    }
    if args.json {
        println!("{item}");
    } else {
        print!("{}", describe(&item));
    }
    exit::OK
}

/// The payload to stdout, read in pieces of at most [`PAYLOAD_CHUNK`].
fn write_payload(args: &ShowArgs, item: &Value) -> u8 {
    let total = item["payload_bytes"].as_u64().unwrap_or(0);
    if total == 0 && item["state"] == "done" {
        eprintln!(
            "wfhost: mail {} is done: its payload was cleared when it was acknowledged",
            args.id
        );
        return exit::OK;
    }
    let mut out = std::io::stdout().lock();
    let mut offset = 0;
    while offset < total {
        let request = Request::MailPayload {
            id: args.id,
            offset,
            length: PAYLOAD_CHUNK,
        };
        let piece = match args.target.call(request) {
            Ok(data) => hex::decode(data["hex"].as_str().unwrap_or("")),
            Err(e) => {
                eprintln!("wfhost: {}", e.message);
                return e.code;
            }
        };
        let piece = match piece {
            Ok(p) if !p.is_empty() => p,
            _ => {
                eprintln!(
                    "wfhost: the payload of mail {} changed while it was read (it was acknowledged or purged) after {offset} of {total} bytes",
                    args.id
                );
                return exit::FAILED;
            }
        };
        if let Err(e) = out.write_all(&piece) {
            eprintln!("wfhost: cannot write the payload: {e}");
            return exit::FAILED;
        }
        offset += piece.len() as u64;
    }
    if let Err(e) = out.flush() {
        eprintln!("wfhost: cannot write the payload: {e}");
        return exit::FAILED;
    }
    exit::OK
}

/// The readable item: what it is, where it stands, its history, and what
/// to do next.
fn describe(i: &Value) -> String {
    let id = &i["id"];
    let state = i["state"].as_str().unwrap_or("?");
    let shown_state = state_of(i);
    let time = |v: &Value| v.as_u64().map_or_else(|| "-".to_owned(), rfc3339_ms);
    let mut out = format!(
        "mail {id} of {}: {shown_state}\n  attempts {}, failures {}, accepted {} ({} ago), payload {} bytes\n",
        i["deployment"].as_str().unwrap_or("?"),
        i["attempts"],
        i["failures"],
        time(&i["enqueued_at_ms"]),
        age(i["age_ms"].as_u64().unwrap_or(0)),
        i["payload_bytes"],
    );
    if let Some(pid) = i["holder"]["pid"].as_u64() {
        out.push_str(&format!(
            "  held by pid {pid} (channel {}) since {}\n",
            i["holder"]["channel_id"].as_str().unwrap_or("?"),
            time(&i["taken_at_ms"])
        ));
    }
    if !i["last_failure"].is_null() {
        out.push_str(&format!(
            "  last failure: {}\n",
            last_failure(&i["last_failure"])
        ));
    }
    if let Some(outcome) = i["outcome"].as_str() {
        out.push_str(&format!(
            "  done at {}: {outcome}, result {} bytes (`wfhost mail result {id}` prints it)\n",
            time(&i["done_at_ms"]),
            i["result_bytes"]
        ));
    }
    if !i["dead_at_ms"].is_null() {
        out.push_str(&format!("  dead since {}\n", time(&i["dead_at_ms"])));
    }
    out.push_str(&questions(i));
    let history = i["history"].as_array().cloned().unwrap_or_default();
    out.push_str("history:\n");
    if history.is_empty() {
        out.push_str("  not delivered yet\n");
    }
    for h in &history {
        let attempt = h["attempt"]
            .as_u64()
            .map_or_else(|| "-".to_owned(), |a| format!("#{a}"));
        let pid = h["pid"]
            .as_u64()
            .map_or_else(|| "-".to_owned(), |p| format!("pid {p}"));
        let how = h["how"].as_str().unwrap_or("in flight");
        out.push_str(&format!(
            "  {attempt:>4} {pid:<10} taken {} ended {}: {how}\n",
            time(&h["taken_at_ms"]),
            time(&h["ended_at_ms"])
        ));
    }
    if state == "dead" {
        out.push_str(&format!(
            "next: fix what makes the child end on it (its payload: `wfhost mail show {id} --payload`), then `wfhost mail retry {id}`; or delete it with `wfhost mail purge --dead`\n"
        ));
    }
    out
}

/// The questions its handlers asked, each with its answer or how to give
/// one (prompts and keys are a child's words: escaped and cut).
fn questions(i: &Value) -> String {
    let id = &i["id"];
    let Some(qs) = i["questions"].as_array().filter(|q| !q.is_empty()) else {
        return String::new();
    };
    let mut out = "questions:\n".to_owned();
    for q in qs {
        let key = printable(q["key"].as_str().unwrap_or("?"), 80);
        let prompt = printable(&q["prompt"].to_string(), 200);
        out.push_str(&format!("  {key} (attempt {}): {prompt}\n", q["attempt"]));
        match q["answer"].as_object() {
            Some(a) => out.push_str(&format!(
                "    answered {} at {}\n",
                printable(&a["value"].to_string(), 200),
                a["at_ms"]
                    .as_u64()
                    .map_or_else(|| "-".to_owned(), rfc3339_ms)
            )),
            None => out.push_str(&format!(
                "    waiting: `wfhost answer {id} {key} VALUE` answers it\n"
            )),
        }
    }
    out
}

fn retry(args: &RetryArgs) -> u8 {
    let request = if args.dead {
        Request::MailRetry {
            id: None,
            dead: true,
            deployment: args.which.clone(),
        }
    } else {
        let Some(which) = &args.which else {
            eprintln!(
                "wfhost: say which mail to retry: an ID (see `wfhost mail list --state dead`), or --dead [DEPLOYMENT]"
            );
            return exit::USAGE;
        };
        let Ok(id) = which.parse() else {
            eprintln!(
                "wfhost: {which:?} is not a mail id; to retry a deployment's dead mail use `wfhost mail retry --dead {which}`"
            );
            return exit::USAGE;
        };
        Request::MailRetry {
            id: Some(id),
            dead: false,
            deployment: None,
        }
    };
    client::run(&args.target, request, |data| {
        let groups = data["retried"].as_array().cloned().unwrap_or_default();
        if data["count"].as_u64().unwrap_or(0) == 0 {
            println!("no dead mail to retry");
        }
        for g in &groups {
            let d = g["deployment"].as_str().unwrap_or("?");
            let ids: Vec<String> = g["ids"]
                .as_array()
                .into_iter()
                .flatten()
                .map(Value::to_string)
                .collect();
            match ids.as_slice() {
                [] => {}
                [one] => println!(
                    "retried mail {one} of {d}: back at the head of its inbox, delivered next as attempt 1"
                ),
                many => println!(
                    "retried {} dead items of {d} ({}): back at the head of its inbox",
                    many.len(),
                    many.join(", ")
                ),
            }
            let left = g["left"].as_u64().unwrap_or(0);
            if left > 0 {
                println!("{left} more of {d} are still dead: run it again to retry them");
            }
        }
    })
}

fn purge(args: &PurgeArgs) -> u8 {
    let older_than_ms = match args.older_than.as_deref().map(parse_duration) {
        None => None,
        Some(Ok(d)) => Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        Some(Err(e)) => {
            eprintln!("wfhost: --older-than: {}\n  help: {}", e.message, e.hint);
            return exit::USAGE;
        }
    };
    let request = Request::MailPurge {
        deployment: args.deployment.clone(),
        older_than_ms,
    };
    client::run(&args.target, request, |data| {
        let groups = data["purged"].as_array().cloned().unwrap_or_default();
        if groups.is_empty() {
            println!("no dead mail to purge");
        }
        for g in &groups {
            println!(
                "purged {} dead items of {}",
                g["count"],
                g["deployment"].as_str().unwrap_or("?")
            );
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_coarse() {
        assert_eq!(age(850), "850ms");
        assert_eq!(age(42_000), "42s");
        assert_eq!(age(185_000), "3m5s");
        assert_eq!(age(4 * 3_600_000 + 12 * 60_000), "4h12m");
        assert_eq!(age(2 * 86_400_000 + 3 * 3_600_000), "2d3h");
    }
}
