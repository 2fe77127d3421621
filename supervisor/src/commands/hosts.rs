//! `wfhost hosts`: the fleet's live hosts (and the drained ones, running
//! or not) with their heartbeat age, state (serving, draining, drained,
//! stopping), leases held and whether their connections are encrypted.

use serde_json::Value;

use crate::control::client::{self, Target};
use crate::control::protocol::Request;
use crate::human;

/// Arguments of `wfhost hosts`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Print the stable JSON shape instead.
    #[arg(long)]
    json: bool,
}

/// Runs the command.
pub fn run(args: Args) -> u8 {
    let json = args.json;
    client::run(&args.target, Request::Hosts, |data| {
        if json {
            println!("{data}");
        } else {
            print!("{}", table(&data));
        }
    })
}

/// The table.
fn table(data: &Value) -> String {
    let mut rows = vec![[
        "HOST".to_owned(),
        "HEARTBEAT".to_owned(),
        "STATE".to_owned(),
        "LEASES".to_owned(),
        "CONNECTION".to_owned(),
    ]];
    for h in data["hosts"].as_array().into_iter().flatten() {
        let age = match h["heartbeat_age_ms"].as_i64() {
            Some(ms) if h["live"] == true => format!("{} ago", human::ms(ms.unsigned_abs())),
            Some(ms) => format!("gone ({} ago)", human::ms(ms.unsigned_abs())),
            None => "not running".to_owned(),
        };
        let mut state = h["state"].as_str().unwrap_or("?").to_owned();
        if let Some(by) = h["drained_by"].as_str() {
            state.push_str(&format!(" (by {by})"));
        }
        rows.push([
            h["host"].as_str().unwrap_or("?").to_owned(),
            age,
            state,
            h["leases"].to_string(),
            h["connection"].as_str().unwrap_or("-").to_owned(),
        ]);
    }
    let widths: Vec<usize> = (0..5)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}
