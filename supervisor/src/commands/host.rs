//! `wfhost host drain HOST [--wait]` and `wfhost host resume HOST`: take a
//! fleet host out for maintenance (a kernel update, a reboot) and bring it
//! back. Drained, it hands every deployment it holds to the other hosts
//! (each drained under its budget, then taken at once, as `move` does)
//! and takes none, through its own restarts too, until resumed. Any host
//! of the fleet takes the request; both are journaled with who asked.

use serde_json::Value;

use crate::control::client::{self, Target};
use crate::control::protocol::Request;

/// `wfhost host …`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Hand every deployment HOST holds to the other hosts and keep it from taking any (--wait: until it holds none).
    Drain(DrainArgs),
    /// Let a drained HOST take deployments again (its fair share, by graceful hand-offs).
    Resume(ResumeArgs),
}

/// Arguments of `wfhost host drain`.
#[derive(Debug, clap::Args)]
pub struct DrainArgs {
    #[command(flatten)]
    target: Target,
    /// The host (its `[fleet] host_id`).
    host: String,
    /// Wait until the host holds no deployment.
    #[arg(long)]
    wait: bool,
}

/// Arguments of `wfhost host resume`.
#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    target: Target,
    /// The host.
    host: String,
}

/// Runs the command.
pub fn run(command: Command) -> u8 {
    match command {
        Command::Drain(args) => {
            let request = Request::HostDrain {
                host: args.host,
                wait: args.wait,
            };
            client::run(&args.target, request, |data| print!("{}", drained(&data)))
        }
        Command::Resume(args) => {
            let request = Request::HostResume { host: args.host };
            client::run(&args.target, request, |data| {
                let host = data["host"].as_str().unwrap_or("?");
                if data["resumed"] == true {
                    println!("resumed {host}: it takes its share of deployments again");
                } else {
                    println!("{host} was not drained; nothing changed");
                }
            })
        }
    }
}

/// What `host drain` prints.
fn drained(data: &Value) -> String {
    let host = data["host"].as_str().unwrap_or("?");
    let mut out = if data["newly_drained"] == true {
        format!("drained {host}: it takes no deployment until `wfhost host resume {host}`\n")
    } else {
        format!("{host} was already drained\n")
    };
    for m in data["moved"].as_array().into_iter().flatten() {
        let d = m["deployment"].as_str().unwrap_or("?");
        match m["to"].as_str() {
            Some(to) => out.push_str(&format!("  {d}: now on {to}\n")),
            None => out.push_str(&format!("  {d}: being handed off\n")),
        }
    }
    if data["waited"] == true {
        out.push_str(&format!(
            "{host} holds no deployment ({} ms)\n",
            data["took_ms"]
        ));
    }
    out
}
