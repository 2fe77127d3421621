//! `wfhost questions`: the questions items' handlers asked a person and
//! that wait for an answer, oldest first.

use serde_json::Value;

use crate::commands::journal::printable;
use crate::control::client::{self, Target};
use crate::control::protocol::Request;

/// Arguments of `wfhost questions`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Only this deployment's.
    deployment: Option<String>,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

/// Runs the command.
pub fn run(args: Args) -> u8 {
    let request = Request::Questions {
        deployment: args.deployment.clone(),
    };
    client::run(&args.target, request, |data| {
        let questions = data["questions"].as_array().cloned().unwrap_or_default();
        if args.json {
            for q in &questions {
                println!("{q}");
            }
        } else {
            print!("{}", table(&questions));
        }
    })
}

/// The questions as a table, with how to answer (a child's words are
/// escaped and cut).
fn table(questions: &[Value]) -> String {
    if questions.is_empty() {
        return "no question waits for an answer\n".into();
    }
    let row = |c: [&str; 6]| {
        format!(
            "{:>8}  {:<16} {:<20} {:>8} {:<24}  {}\n",
            c[0], c[1], c[2], c[3], c[4], c[5]
        )
    };
    let mut out = row(["ID", "DEPLOYMENT", "KEY", "AGE", "ASKED", "PROMPT"]);
    for q in questions {
        out.push_str(&row([
            &q["id"].to_string(),
            q["deployment"].as_str().unwrap_or("?"),
            &printable(q["key"].as_str().unwrap_or("?"), 40),
            &super::mail::age(q["age_ms"].as_u64().unwrap_or(0)),
            &crate::clock::rfc3339_ms(q["asked_at_ms"].as_u64().unwrap_or(0)),
            &printable(&q["prompt"].to_string(), 120),
        ]));
    }
    out.push_str("answer with `wfhost answer ID KEY VALUE` (VALUE is JSON, @PATH or -)\n");
    out
}
