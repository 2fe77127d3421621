//! `wfhost kill`: SIGKILL a deployment's child now, even one already stuck
//! in "stopping" (the supervisor restarts it as after any crash unless it
//! was being stopped).

use crate::control::client::{self, Target};
use crate::control::protocol::Request;

/// Arguments of `wfhost kill`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// The deployment whose child to kill.
    deployment: String,
}

/// Runs the command.
pub fn run(args: Args) -> u8 {
    let deployment = args.deployment.clone();
    client::run(&args.target, Request::Kill { deployment }, |_| {
        println!("sent SIGKILL to the child of {}", args.deployment);
    })
}
