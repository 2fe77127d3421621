//! `wfhost events`: the durable event stream from a cursor, optionally
//! followed live with no gap and no duplicate.

use crate::control::client::{self, Target};
use crate::control::protocol::Request;

/// Arguments of `wfhost events`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Keep printing new events as they happen.
    #[arg(long)]
    follow: bool,
    /// Start after this sequence number (0: from the oldest kept).
    #[arg(long, default_value_t = 0)]
    after: u64,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

/// Runs the command.
pub fn run(args: Args) -> u8 {
    let request = Request::Events {
        after: args.after,
        follow: args.follow,
    };
    client::stream(&args.target, request, |event| {
        if args.json {
            println!("{event}");
        } else {
            println!(
                "{:>8} {} {:<14} {:<20} {}",
                event["seq"],
                crate::commands::journal::rfc3339_ms(event["at_ms"].as_u64().unwrap_or(0)),
                event["deployment"].as_str().unwrap_or("-"),
                event["kind"].as_str().unwrap_or("?"),
                event["body"]
            );
        }
    })
}
