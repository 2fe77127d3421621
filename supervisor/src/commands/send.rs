//! `wfhost send`: accept mail for a deployment; returns once it is durable
//! in the inbox, printing its id. `--key` makes a retry safe.

use std::path::PathBuf;

use crate::control::client::{self, Target};
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
    /// The item's deadline, counted from its first delivery (e.g. `30s`):
    /// when it passes, the item is cancelled; not ended after the
    /// deployment's drain_timeout more, it ends failed and its child is
    /// recycled. Default: the deployment's `mail_deadline`, if any.
    #[arg(long, value_name = "DURATION")]
    deadline: Option<String>,
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
    let deadline_ms = match deadline(args.deadline.as_deref()) {
        Ok(d) => d,
        Err(code) => return code,
    };
    client::send(
        &args.target,
        &args.deployment,
        &payload,
        args.key.as_deref(),
        deadline_ms,
        |data| {
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
        },
    )
}

/// The largest payload any deployment can take (its `max_mail_bytes` is
/// at most what the control socket carries in one send): reading stops one
/// byte past it, so `send @/dev/zero` is refused instead of filling memory.
const MAX_PAYLOAD: u64 = crate::control::protocol::MAX_SEND_PAYLOAD;

/// A `--deadline` in milliseconds, or the usage error printed.
pub fn deadline(arg: Option<&str>) -> Result<Option<u64>, u8> {
    match arg.map(crate::config::parse_duration) {
        None => Ok(None),
        Some(Ok(d)) if !d.is_zero() => Ok(Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))),
        Some(Ok(_)) => {
            eprintln!(
                "wfhost: --deadline: a deadline of 0 would cancel the item as it starts\n  help: give a positive duration, e.g. 30s"
            );
            Err(exit::USAGE)
        }
        Some(Err(e)) => {
            eprintln!("wfhost: --deadline: {}\n  help: {}", e.message, e.hint);
            Err(exit::USAGE)
        }
    }
}

/// The payload an argument names: itself, `@PATH` a file's bytes, `-`
/// standard input's.
pub fn read_payload(arg: &str) -> Result<Vec<u8>, String> {
    let (source, name): (Box<dyn std::io::Read>, String) = if arg == "-" {
        (Box::new(std::io::stdin()), "standard input".into())
    } else if let Some(path) = arg.strip_prefix('@') {
        let path = PathBuf::from(path);
        let file = std::fs::File::open(&path)
            .map_err(|e| format!("cannot read payload file {}: {e}", path.display()))?;
        (Box::new(file), format!("payload file {}", path.display()))
    } else {
        return Ok(arg.as_bytes().to_vec());
    };
    let mut buf = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(source, MAX_PAYLOAD + 1), &mut buf)
        .map_err(|e| format!("cannot read {name}: {e}"))?;
    if buf.len() as u64 > MAX_PAYLOAD {
        return Err(format!(
            "{name} holds more than {MAX_PAYLOAD} bytes, more than any deployment's max_mail_bytes; nothing was sent"
        ));
    }
    Ok(buf)
}
