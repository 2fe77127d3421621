//! `wfhost logs DEPLOYMENT`: what the deployment's children wrote lately
//! (stdout and stderr, across recycles), from the supervisor's bounded
//! buffer, optionally followed live.

use crate::clock::rfc3339_ms;
use crate::control::client::{self, Target};
use crate::control::protocol::Request;
use crate::deployment::output::{LINE_BURST, LINES_PER_SECOND, MAX_LINES};

/// Arguments of `wfhost logs`.
#[derive(Debug, clap::Args)]
#[command(after_help = format!(
    "The supervisor keeps the last {MAX_LINES} lines (at most 128 KiB) of each deployment's output; \
     its own log has every line a child's rate allows ({LINE_BURST} at once, {LINES_PER_SECOND} a second; \
     past it lines are counted and the count said)."
))]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// The deployment.
    deployment: String,
    /// Keep printing new lines as the children write them.
    #[arg(long, short)]
    follow: bool,
    /// How many of the newest lines to print first.
    #[arg(long, short = 'n', value_name = "N", default_value_t = 20)]
    lines: u64,
    /// One JSON object per line: seq, at_ms, pid, stream, text, cut.
    #[arg(long)]
    json: bool,
}

/// Runs the command.
pub fn run(args: Args) -> u8 {
    let request = Request::Logs {
        deployment: args.deployment.clone(),
        lines: args.lines,
        follow: args.follow,
    };
    let id = args.deployment.as_str();
    client::stream(&args.target, request, |line| {
        if args.json {
            println!("{line}");
        } else if let Some(missed) = line["missed"].as_u64() {
            println!("… {missed} lines missed: the supervisor keeps the last {MAX_LINES}");
        } else if let Some(n) = line["suppressed"].as_u64() {
            println!(
                "{} {id}[{}] … {n} lines of output suppressed: more than {LINE_BURST} at once or \
                 {LINES_PER_SECOND} a second",
                rfc3339_ms(line["at_ms"].as_u64().unwrap_or(0)),
                line["pid"],
            );
        } else {
            println!(
                "{} {id}[{}] {}: {}{}",
                rfc3339_ms(line["at_ms"].as_u64().unwrap_or(0)),
                line["pid"],
                line["stream"].as_str().unwrap_or("?"),
                line["text"].as_str().unwrap_or(""),
                if line["cut"] == true { " [cut]" } else { "" }
            );
        }
    })
}
