//! `wfhost reload`: what SIGHUP does, without finding the pid: the
//! supervisor re-reads its config file, applies its `[supervisor]`
//! settings, starts added deployments, stops removed ones, recycles
//! changed ones, and says so; a file that does not load, changes what only
//! a restart applies, or has no deployment while some run (without
//! `allow_empty = true`) is refused, naming its problem, and the running
//! config is kept.

use serde_json::Value;

use crate::control::client::{self, Target};
use crate::control::protocol::Request;

/// Arguments of `wfhost reload`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: 0 if the new file was taken, 2 if it was refused (the running config is kept), 3 if \
                  the supervisor cannot be reached."
)]
pub struct Args {
    #[command(flatten)]
    target: Target,
}

/// Runs the command.
pub fn run(args: Args) -> u8 {
    client::run(&args.target, Request::Reload, |data| {
        let ids = |key: &str| -> Vec<String> {
            data[key]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        println!("reloaded {}", data["path"].as_str().unwrap_or("the config"));
        for (key, what) in [
            ("added", "started"),
            ("removed", "stopped (drained under its budget)"),
            ("changed", "recycled onto its new settings"),
            ("unchanged", "unchanged"),
            ("settings", "settings applied"),
        ] {
            let list = ids(key);
            if !list.is_empty() {
                println!("  {what}: {}", list.join(", "));
            }
        }
        if ["added", "removed", "changed", "settings"]
            .iter()
            .all(|k| ids(k).is_empty())
        {
            println!("  nothing to do: every deployment is as configured");
        }
    })
}
