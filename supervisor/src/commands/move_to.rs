//! `wfhost move DEP --to HOST`: in a fleet, hand a deployment to another
//! host without waiting out a lease: it is drained where it runs (under
//! its budget), its lease is released for HOST only, and the command ends
//! once HOST holds it. Any host of the fleet takes the request.

use crate::control::client::{self, Target};
use crate::control::protocol::Request;

/// Arguments of `wfhost move`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// The deployment to move.
    deployment: String,
    /// The host to run it from now on (its `[fleet] host_id`).
    #[arg(long, value_name = "HOST")]
    to: String,
}

/// Runs the command.
pub fn run(args: Args) -> u8 {
    let request = Request::Move {
        deployment: args.deployment,
        to: args.to,
    };
    client::run(&args.target, request, |data| {
        println!(
            "moved {} from {} to {} (epoch {}) in {} ms",
            data["deployment"].as_str().unwrap_or("?"),
            data["from"].as_str().unwrap_or("?"),
            data["to"].as_str().unwrap_or("?"),
            data["epoch"],
            data["took_ms"],
        );
    })
}
