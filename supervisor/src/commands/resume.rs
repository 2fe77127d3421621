//! `wfhost resume`: start a fresh child for a drained or failed
//! deployment, and wait for it to be ready (or say why it was not).

use crate::commands::progress::{self, POLL, Progress};
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
    let mut progress = Progress::new();
    loop {
        let d = match progress::status_of(&args.target, id) {
            Ok(Some(d)) => d,
            Ok(None) => {
                progress.clear();
                eprintln!("wfhost: {id} is no longer configured (a reload removed it)");
                return exit::FAILED;
            }
            Err(e) => {
                progress.clear();
                eprintln!("wfhost: {}", e.message);
                return e.code;
            }
        };
        match d["state"].as_str() {
            Some("ready") => {
                progress.clear();
                println!("{id} is ready: pid {}", d["pid"]);
                return exit::OK;
            }
            Some("backoff" | "failed") => {
                progress.clear();
                eprintln!(
                    "wfhost: the new child of {id} ended before it was ready: {}\n  help: `wfhost status {id}` and `wfhost logs {id}` say more",
                    d["last_exit"].as_str().unwrap_or("?")
                );
                return exit::FAILED;
            }
            Some("drained" | "exited") => {
                progress.clear();
                println!("{id} is {} again", d["state"].as_str().unwrap_or("?"));
                return exit::OK;
            }
            _ => {
                let (stage, words) = progress::stage_of(&d);
                progress.show(&stage, &format!("{id}: {words}"));
            }
        }
        std::thread::sleep(POLL);
    }
}
