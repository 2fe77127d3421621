//! `wfhost recycle`: replace a deployment's child without losing mail
//! (drain, replay, respawn); waits, showing each stage (the drain's
//! budget and steps, the old child stopping, the new one starting), and
//! reports the new pid.

use std::sync::mpsc;

use crate::commands::progress::{self, POLL, Progress};
use crate::control::client::Target;
use crate::control::protocol::Request;
use crate::exit;

/// Arguments of `wfhost recycle`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// The deployment to recycle (every replica, one at a time), or one
    /// replica of it as `DEP/N`.
    deployment: String,
    /// Why, for the journal and status.
    #[arg(long)]
    reason: Option<String>,
}

/// Runs the command.
pub fn run(args: Args) -> u8 {
    let request = Request::Recycle {
        deployment: args.deployment.clone(),
        reason: args.reason,
    };
    let (tx, rx) = mpsc::channel();
    let target = args.target.clone();
    std::thread::spawn(move || {
        let _ = tx.send(target.call(request));
    });
    let id = &args.deployment;
    let mut progress = Progress::new();
    let old = progress::status_of(&args.target, id)
        .ok()
        .flatten()
        .and_then(|d| d["pid"].as_u64());
    let answer = loop {
        match rx.recv_timeout(POLL) {
            Ok(answer) => break answer,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                eprintln!("wfhost: the recycle request was lost; see `wfhost status {id}`");
                return exit::FAILED;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if let Ok(Some(d)) = progress::status_of(&args.target, id) {
            let (stage, words) = progress::stage_of(&d);
            let stage_words = match (stage.as_str(), d["pid"].as_u64()) {
                ("ready", pid) if pid == old => "checking that a new child could start".to_owned(),
                ("stopping", _) => format!("old child {words}"),
                ("starting", _) => format!("new child {words}"),
                _ => words,
            };
            progress.show(&stage, &format!("recycling {id}: {stage_words}"));
        }
    };
    progress.clear();
    match answer {
        Ok(data) => {
            println!("recycled {id}: {}", pids_line(&data));
            exit::OK
        }
        Err(e) => {
            eprintln!("wfhost: {}", e.message);
            e.code
        }
    }
}

/// `pid OLD -> NEW`, or with several replicas `pids A, B -> C, D`.
fn pids_line(data: &serde_json::Value) -> String {
    let list = |key: &str| -> Vec<String> {
        data[key]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p.as_u64().map(|p| p.to_string()))
            .collect()
    };
    let (old, new) = (list("old_pids"), list("pids"));
    if new.len() > 1 || old.len() > 1 {
        format!("pids {} -> {}", old.join(", "), new.join(", "))
    } else {
        let old = old.first().map_or("-", String::as_str);
        format!("pid {old} -> {}", new.first().map_or("-", String::as_str))
    }
}
