//! `wfhost cancel`: a signed, journaled operator cancel of one run (or of
//! every run) of a deployment, applied at once; it also ends a drain early.

use crate::control::client::{self, Target};
use crate::control::protocol::Request;

/// Arguments of `wfhost cancel`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// The deployment whose work to cancel.
    deployment: String,
    /// The run to cancel (see `wfhost status`); every run when omitted.
    #[arg(long)]
    run: Option<String>,
}

/// Runs the command.
pub fn run(args: Args) -> u8 {
    let request = Request::Cancel {
        deployment: args.deployment.clone(),
        run: args.run.clone(),
    };
    client::run(&args.target, request, |data| {
        let what = args
            .run
            .as_deref()
            .map(|r| format!("run {r}"))
            .unwrap_or_else(|| "every run".into());
        println!(
            "cancelled {what} of {}: signed, committed as journal record {}, sent",
            args.deployment, data["journal_seq"]
        );
    })
}
