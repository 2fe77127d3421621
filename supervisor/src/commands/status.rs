//! `wfhost status`: every deployment at a glance.

use crate::client::{self, Target};
use crate::control::Request;

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

/// The readable table: one row per deployment.
fn table(data: &serde_json::Value) -> String {
    let mut out = format!(
        "{:<20} {:<9} {:>8} {:>10} {:>8}  {}\n",
        "DEPLOYMENT", "STATE", "PID", "UPTIME", "RESTARTS", "LAST EXIT"
    );
    let empty = Vec::new();
    for d in data["deployments"].as_array().unwrap_or(&empty) {
        let pid = d["pid"]
            .as_u64()
            .map(|p| p.to_string())
            .unwrap_or_else(|| "-".into());
        let uptime = d["uptime_ms"]
            .as_u64()
            .map(human_ms)
            .unwrap_or_else(|| "-".into());
        out.push_str(&format!(
            "{:<20} {:<9} {:>8} {:>10} {:>8}  {}\n",
            d["id"].as_str().unwrap_or("?"),
            d["state"].as_str().unwrap_or("?"),
            pid,
            uptime,
            d["restarts"].as_u64().unwrap_or(0),
            d["last_exit"].as_str().unwrap_or("-"),
        ));
    }
    out
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
    }
}
