//! `wfhost send`: accept mail for a deployment; returns once it is durable
//! in the inbox, printing its id. `--key` makes a retry safe.

use std::path::PathBuf;

use crate::client::{self, Target};
use crate::control::Request;
use crate::exit;

/// Arguments of `wfhost send`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// The deployment to send to.
    deployment: String,
    /// The payload; `@PATH` reads it from a file, `-` from standard input.
    payload: String,
    /// Idempotency key (1 to 256 bytes): sending again with the same key
    /// and payload, e.g. after a lost answer or a supervisor restart, returns
    /// the first item's id and enqueues nothing.
    #[arg(long)]
    key: Option<String>,
}

/// Runs the command.
pub fn run(args: Args) -> u8 {
    let payload = match read_payload(&args.payload) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("wfhost: {e}");
            return exit::USAGE;
        }
    };
    let request = Request::Send {
        deployment: args.deployment.clone(),
        payload_hex: hex::encode(payload),
        key: args.key.clone(),
    };
    client::run(&args.target, request, |data| {
        if data["new"] == false {
            println!(
                "mail {} for {} was already accepted under key {:?}; nothing new enqueued",
                data["id"],
                args.deployment,
                args.key.as_deref().unwrap_or_default()
            );
        } else {
            println!("accepted mail {} for {}", data["id"], args.deployment);
        }
    })
}

fn read_payload(arg: &str) -> Result<Vec<u8>, String> {
    if arg == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
            .map_err(|e| format!("cannot read stdin: {e}"))?;
        return Ok(buf);
    }
    match arg.strip_prefix('@') {
        Some(path) => {
            let path = PathBuf::from(path);
            std::fs::read(&path)
                .map_err(|e| format!("cannot read payload file {}: {e}", path.display()))
        }
        None => Ok(arg.as_bytes().to_vec()),
    }
}
