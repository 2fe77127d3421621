//! `wfhost events`: the durable event stream from a cursor, optionally
//! followed live with no gap and no duplicate; `--mail ID` follows one
//! item to its end (exit 0 when it succeeded, 1 otherwise), reconnecting
//! from its cursor if the supervisor goes away meanwhile.

use std::time::Duration;

use serde_json::Value;

use crate::control::client::{self, Target};
use crate::control::protocol::Request;
use crate::exit;

/// Arguments of `wfhost events`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Keep printing new events as they happen (with --mail: until the
    /// item ends).
    #[arg(long)]
    follow: bool,
    /// Start after this sequence number (0: from the oldest kept).
    #[arg(long, default_value_t = 0)]
    after: u64,
    /// Only this mail item's events (accepted, delivered, steps of its run
    /// `mail-ID`, progress, questions, cancels, its end).
    #[arg(long, value_name = "ID")]
    mail: Option<u64>,
    /// Only this deployment's events.
    #[arg(long, value_name = "DEP")]
    deployment: Option<String>,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

/// How many times a followed item's stream is opened again after the
/// supervisor went away (a restarted one answers within a second or two).
const TRIES: u32 = 6;

/// Runs the command.
pub fn run(args: Args) -> u8 {
    let Some(id) = args.mail.filter(|_| args.follow) else {
        let request = request(&args, args.after);
        return client::stream(&args.target, request, |e| print(&e, args.json));
    };
    let (mut last, mut end) = (args.after, None::<Value>);
    let (mut tries, mut pause) = (0, Duration::from_millis(200));
    loop {
        let seen = last;
        let streamed = args.target.stream_once(request(&args, last), |e| {
            last = e["seq"].as_u64().unwrap_or(last);
            print(&e, args.json);
            if matches!(e["kind"].as_str(), Some("mail_done" | "mail_dead")) {
                end = Some(e);
            }
        });
        if let Some(end) = end {
            return ended(&end);
        }
        match streamed {
            Err(e) if e.code != exit::UNREACHABLE => {
                eprintln!("wfhost: {}", e.message);
                return e.code;
            }
            // The stream ended before the item did: the supervisor went
            // away. Open it again from the cursor.
            result => {
                tries = if last > seen { 1 } else { tries + 1 };
                if tries >= TRIES {
                    let why = result.err().map_or_else(
                        || "the supervisor closed the stream".to_owned(),
                        |e| e.message,
                    );
                    eprintln!(
                        "wfhost: {why}; mail {id} has not ended as far as seen (last event {last})\n  \
                         help: `wfhost events --mail {id} --follow --after {last}` goes on from there"
                    );
                    return exit::UNREACHABLE;
                }
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// The request for events after `after`.
fn request(args: &Args, after: u64) -> Request {
    Request::Events {
        after,
        follow: args.follow,
        mail: args.mail,
        deployment: args.deployment.clone(),
    }
}

/// One event, as a line.
fn print(event: &Value, json: bool) {
    if json {
        println!("{event}");
    } else {
        println!(
            "{:>8} {} {:<14} {:<20} {}",
            event["seq"],
            crate::clock::rfc3339_ms(event["at_ms"].as_u64().unwrap_or(0)),
            event["deployment"].as_str().unwrap_or("-"),
            event["kind"].as_str().unwrap_or("?"),
            event["body"]
        );
    }
}

/// The exit code of a followed item's end: 0 when it succeeded.
fn ended(end: &Value) -> u8 {
    if end["kind"] == "mail_done" && end["body"]["outcome"] == "succeeded" {
        exit::OK
    } else {
        exit::FAILED
    }
}
