//! `wfhost recycle`: replace a deployment's child without losing mail
//! (drain, replay, respawn); waits and reports the new pid.

use crate::control::client::{self, Target};
use crate::control::protocol::Request;

/// Arguments of `wfhost recycle`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// The deployment to recycle.
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
        let old = data["old_pid"]
            .as_u64()
            .map(|p| p.to_string())
            .unwrap_or_else(|| "-".into());
        println!("recycled {}: pid {old} -> {}", args.deployment, data["pid"]);
    })
}
