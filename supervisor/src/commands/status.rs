//! `wfhost status`: every deployment at a glance.

use crate::control::client::{self, Target};
use crate::control::protocol::Request;

/// Arguments of `wfhost status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Print the stable JSON shape instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs the command.
pub fn run(args: Args) -> u8 {
    client::run(&args.target, Request::Status, |data| {
        if args.json {
            println!("{data}");
        } else {
            print!("{}", table(&data));
        }
    })
}

/// The readable table: one row per deployment, then the steps in flight
/// and the last recycle of each, so an operator sees *why* at a glance.
fn table(data: &serde_json::Value) -> String {
    let row = |cols: [&str; 11]| {
        format!(
            "{:<16} {:<9} {:>7} {:>7} {:>9} {:>7} {:>11} {:>13} {:>8} {:>8}  {}\n",
            cols[0],
            cols[1],
            cols[2],
            cols[3],
            cols[4],
            cols[5],
            cols[6],
            cols[7],
            cols[8],
            cols[9],
            cols[10]
        )
    };
    let mut out = row([
        "DEPLOYMENT",
        "STATE",
        "PID",
        "UPTIME",
        "RSS",
        "GRANTS",
        "DRAIN",
        "MAIL i/p/d",
        "RECYCLES",
        "RESTARTS",
        "LAST EXIT",
    ]);
    let mut notes = String::new();
    let dash = || "-".to_owned();
    let empty = Vec::new();
    for d in data["deployments"].as_array().unwrap_or(&empty) {
        let id = d["id"].as_str().unwrap_or("?");
        let has_child = d["pid"].is_u64();
        let drain = &d["drain"];
        let drain_text = if drain["active"] == true {
            format!(
                "{}/{}{}",
                human_ms(drain["used_ms"].as_u64().unwrap_or(0)),
                human_ms(drain["budget_ms"].as_u64().unwrap_or(0)),
                if drain["escalated"] == true { "!" } else { "" }
            )
        } else {
            dash()
        };
        let mail = &d["mail"];
        let r = &d["recycles"];
        out.push_str(&row([
            id,
            d["state"].as_str().unwrap_or("?"),
            &d["pid"]
                .as_u64()
                .map(|p| p.to_string())
                .unwrap_or_else(dash),
            &d["uptime_ms"]
                .as_u64()
                .filter(|_| has_child)
                .map(human_ms)
                .unwrap_or_else(dash),
            &d["rss_bytes"]
                .as_u64()
                .map(human_bytes)
                .unwrap_or_else(dash),
            &d["grants_age_ms"]
                .as_u64()
                .map(human_ms)
                .unwrap_or_else(dash),
            &drain_text,
            &format!("{}/{}/{}", mail["inbox"], mail["processing"], mail["done"]),
            &format!("{}/{}/{}", r["policy"], r["operator"], r["self"]),
            &d["restarts"].as_u64().unwrap_or(0).to_string(),
            d["last_exit"].as_str().unwrap_or("-"),
        ]));
        for step in d["steps"].as_array().unwrap_or(&empty) {
            notes.push_str(&format!(
                "  {id}: step {} of run {} in flight ({} on drain)\n",
                step["step"].as_str().unwrap_or("?"),
                step["run"].as_str().unwrap_or("?"),
                step["drain"].as_str().unwrap_or("?")
            ));
        }
        if let Some(last) = d["last_recycle"].as_object() {
            notes.push_str(&format!(
                "  {id}: last recycled by {} ({}), pid {} -> {}\n",
                last.get("origin").and_then(|v| v.as_str()).unwrap_or("?"),
                last.get("reason").and_then(|v| v.as_str()).unwrap_or("?"),
                last.get("old_pid")
                    .and_then(|v| v.as_u64())
                    .map(|p| p.to_string())
                    .unwrap_or_else(dash),
                last.get("new_pid")
                    .and_then(|v| v.as_u64())
                    .map(|p| p.to_string())
                    .unwrap_or_else(dash),
            ));
        }
        // A fleet host lists every deployment of the fleet, with its owner.
        if let Some(owner) = d["owner"].as_object() {
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
            notes.push_str(&format!(
                "  {id}: owned by {host} (epoch {epoch}, lease {lease})\n"
            ));
        }
    }
    if let Some(host) = data["host"].as_str() {
        notes.push_str(&format!(
            "  (fleet host {host}: deployments owned elsewhere show their owner's last report)\n"
        ));
    }
    if !notes.is_empty() {
        out.push('\n');
        out.push_str(&notes);
    }
    out
}

/// "512B", "3.4MiB", "1.2GiB".
fn human_bytes(b: u64) -> String {
    const KIB: f64 = 1024.0;
    let f = b as f64;
    if f < KIB {
        format!("{b}B")
    } else if f < KIB * KIB {
        format!("{:.1}KiB", f / KIB)
    } else if f < KIB * KIB * KIB {
        format!("{:.1}MiB", f / (KIB * KIB))
    } else {
        format!("{:.1}GiB", f / (KIB * KIB * KIB))
    }
}

/// "4.2s", "3m05s", "2h01m".
fn human_ms(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{}.{}s", s, (ms % 1000) / 100),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations() {
        assert_eq!(human_ms(4_250), "4.2s");
        assert_eq!(human_ms(185_000), "3m05s");
        assert_eq!(human_ms(7_260_000), "2h01m");
        assert_eq!(human_bytes(512), "512B");
        assert_eq!(human_bytes(5 << 20), "5.0MiB");
    }
}
