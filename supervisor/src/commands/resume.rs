//! `wfhost resume`: start a fresh child for a drained or failed
//! deployment, and wait for it to be ready (or say why it was not).

use crate::commands::progress;
use crate::control::client::Target;
use crate::control::protocol::Request;
use crate::exit;

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
    let request = Request::Resume {
        deployment: args.deployment.clone(),
    };
    match args.target.call(request) {
        Ok(data) => println!("{}", data["message"].as_str().unwrap_or("resuming")),
        Err(e) => {
            eprintln!("wfhost: {}", e.message);
            return e.code;
        }
    }
    let id = &args.deployment;
    progress::follow(&args.target, id, |d, _| match d["state"].as_str()? {
        "ready" => Some((format!("{id} is ready: pid {}", d["pid"]), exit::OK)),
        "backoff" | "failed" => Some((
            format!(
                "the new child of {id} ended before it was ready: {}\n  help: `wfhost status {id}` and \
                 `wfhost logs {id}` say more",
                d["last_exit"].as_str().unwrap_or("?")
            ),
            exit::FAILED,
        )),
        state @ ("drained" | "exited") => Some((format!("{id} is {state} again"), exit::OK)),
        _ => None,
    })
}
