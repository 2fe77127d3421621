//! `wfhost drain`: wind a deployment down under its drain budget; it stays
//! drained (mail held in the inbox) until `wfhost resume`.

use crate::control::client::{self, Target};
use crate::control::protocol::Request;

/// Arguments of `wfhost drain`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// The deployment to drain.
    deployment: String,
}

/// Runs the command.
pub fn run(args: Args) -> u8 {
    client::run(
        &args.target,
        Request::Drain {
            deployment: args.deployment,
        },
        |data| {
            println!("{}", data["message"].as_str().unwrap_or("draining"));
        },
    )
}
