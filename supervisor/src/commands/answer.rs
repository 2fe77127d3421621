//! `wfhost answer`: a person's answer to a question an item's handler
//! asked; stored once (the same answer again changes nothing, another is
//! refused), journaled with who gave it, and sent to the waiting handler.

use crate::commands::send::read_payload;
use crate::control::client::{self, Target};
use crate::control::protocol::Request;
use crate::exit;

/// Arguments of `wfhost answer`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// The mail item (see `wfhost questions`).
    id: u64,
    /// The question's key.
    key: String,
    /// The answer: JSON (`'{"approved":true}'`), `@PATH` for a file's, `-`
    /// for standard input's.
    value: String,
    /// A label for who answered, kept beside your user name.
    #[arg(long, value_name = "NAME")]
    by: Option<String>,
}

/// Runs the command.
pub fn run(args: Args) -> u8 {
    let bytes = match read_payload(&args.value) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("wfhost: {e}");
            return exit::USAGE;
        }
    };
    let value: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            eprintln!(
                "wfhost: the answer is not JSON ({e}); nothing was answered\n  help: quote a string as JSON, e.g. '\"yes\"', or give an object: '{{\"approved\":true}}'"
            );
            return exit::USAGE;
        }
    };
    let request = Request::Answer {
        id: args.id,
        key: args.key.clone(),
        value,
        by: args.by.clone(),
        peer: None,
    };
    client::run(&args.target, request, |data| {
        let seq = data["journal_seq"]
            .as_u64()
            .map_or_else(String::new, |s| format!(", journal record {s}"));
        let delivered = if data["delivered"] == true {
            "handed to its deployment"
        } else {
            "delivered when the item runs again"
        };
        if data["new"] == true {
            println!(
                "answered question {:?} of mail {} ({}){seq}; {delivered}",
                args.key,
                args.id,
                data["deployment"].as_str().unwrap_or("?")
            );
        } else {
            println!(
                "question {:?} of mail {} already had this answer; nothing changed",
                args.key, args.id
            );
        }
    })
}
