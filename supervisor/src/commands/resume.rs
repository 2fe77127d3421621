//! `wfhost resume`: start a fresh child for a drained or failed deployment.

use crate::control::client::{self, Target};
use crate::control::protocol::Request;

/// Arguments of `wfhost resume`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// The deployment to resume.
    deployment: String,
}

/// Runs the command.
pub fn run(args: Args) -> u8 {
    client::run(
        &args.target,
        Request::Resume {
            deployment: args.deployment,
        },
        |data| {
            println!("{}", data["message"].as_str().unwrap_or("resuming"));
        },
    )
}
