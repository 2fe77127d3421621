//! `wfhost recycle`: replace a deployment's child without losing mail
//! (drain, replay, respawn); waits and reports the new pid.

use crate::control::client::{self, Target};
use crate::control::protocol::Request;

/// Arguments of `wfhost recycle`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// The deployment to recycle (every replica, one at a time), or one
    /// replica of it as `DEP/N`.
    deployment: String,
    /// Why, for the journal and status.
    #[arg(long)]
    reason: Option<String>,
}

/// Runs the command.
pub fn run(args: Args) -> u8 {
    let request = Request::Recycle {
        deployment: args.deployment.clone(),
        reason: args.reason,
    };
    client::run(&args.target, request, |data| {
        let list = |key: &str| -> Vec<String> {
            data[key]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p.as_u64().map(|p| p.to_string()))
                .collect()
        };
        let (old, new) = (list("old_pids"), list("pids"));
        if new.len() > 1 || old.len() > 1 {
            println!(
                "recycled {}: pids {} -> {}",
                args.deployment,
                old.join(", "),
                new.join(", ")
            );
        } else {
            let old = old.first().map_or("-", String::as_str);
            println!("recycled {}: pid {old} -> {}", args.deployment, data["pid"]);
        }
    })
}
