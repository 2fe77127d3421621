//! `wfhost console token`: a one-time login link to the supervisor's
//! browser console (DESIGN §8, the console). The link's first use opens a
//! session that acts as the user who ran this command: the journal names
//! that user for every action taken in it.

use std::time::Duration;

use crate::control::client::{self, Target};
use crate::control::protocol::Request;

/// Console subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Print a one-time login link (open it once, before it expires); its session acts as you.
    Token(TokenArgs),
}

/// Arguments of `wfhost console token`.
#[derive(Debug, clap::Args)]
pub struct TokenArgs {
    #[command(flatten)]
    target: Target,
    /// How long the link may be used: 10s to 24h [default: 15m].
    #[arg(long, value_name = "DURATION", value_parser = ttl)]
    ttl: Option<Duration>,
}

fn ttl(text: &str) -> Result<Duration, String> {
    crate::config::parse_duration(text).map_err(|e| format!("{}; {}", e.message, e.hint))
}

/// Runs a console subcommand.
pub fn run(cmd: Command) -> u8 {
    match cmd {
        Command::Token(args) => {
            let request = Request::ConsoleToken {
                ttl_ms: args.ttl.map(|d| d.as_millis() as u64),
            };
            client::run(&args.target, request, |data| {
                let url = data["url"].as_str().unwrap_or_default();
                println!("{url}");
                let who = match (data["by"]["user"].as_str(), data["by"]["uid"].as_u64()) {
                    (Some(u), Some(uid)) => format!("{u} (uid {uid})"),
                    (None, Some(uid)) => format!("uid {uid}"),
                    _ => "you".into(),
                };
                eprintln!(
                    "  open it once within {}; the session it opens acts as {who} and lasts 12h",
                    crate::human::ms(data["ttl_ms"].as_u64().unwrap_or(0))
                );
                if url.starts_with("http://localhost/") {
                    eprintln!(
                        "  the console listens on a Unix socket: forward it (ssh -L 9180:SOCKET HOST) and open the link with localhost:9180"
                    );
                }
            })
        }
    }
}
