//! `wfhost call`: send mail and wait for its end; print its result as the
//! child gave it (succeeded: exit 0) or its outcome and reason (exit 1).
//! `wfhost mail result` prints a stored item's end the same way.

use std::io::Write;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

use crate::commands::send::read_payload;
use crate::config::parse_duration;
use crate::control::client::{Kept, Target};
use crate::control::handlers::mail_result::MAX_WAIT_MS;
use crate::control::protocol::Request;
use crate::exit;

/// Arguments of `wfhost call`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// The deployment to send to.
    deployment: String,
    /// The payload; `@PATH` reads it from a file, `-` from standard input.
    payload: String,
    /// Idempotency key: calling again with the same key and payload (after
    /// a lost answer, a timeout, a restart) waits for the same item, or
    /// prints its stored result at once; the work is never done twice.
    #[arg(long)]
    key: Option<String>,
    /// Stop waiting after this long (e.g. `30s`): exit 1 naming the item,
    /// which goes on (`wfhost mail result ID --wait` waits on). Default:
    /// wait until the item ends.
    #[arg(long, value_name = "DURATION")]
    timeout: Option<String>,
    /// The item's deadline, counted from its first delivery (as `send
    /// --deadline`): past it the item is cancelled, and the call ends with
    /// the item.
    #[arg(long, value_name = "DURATION")]
    deadline: Option<String>,
    /// Print one JSON object: id, outcome, reason, result (base64) and
    /// result_text (when it is UTF-8).
    #[arg(long)]
    json: bool,
}

/// Runs `wfhost call`.
pub fn run(args: Args) -> u8 {
    let timeout = match timeout(args.timeout.as_deref()) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let payload = match read_payload(&args.payload) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("wfhost: {e}");
            return exit::USAGE;
        }
    };
    let deadline_ms = match crate::commands::send::deadline(args.deadline.as_deref()) {
        Ok(d) => d,
        Err(code) => return code,
    };
    let started = Instant::now();
    // One connection for the send and the waits after it.
    let mut connection = args.target.kept();
    let sent = connection.send(&args.deployment, &payload, args.key.as_deref(), deadline_ms);
    let sent = match sent {
        Ok(data) => data,
        Err(e) => {
            eprintln!("wfhost: {}", e.message);
            return e.code;
        }
    };
    let Some(id) = sent["id"].as_u64() else {
        eprintln!("wfhost: the supervisor accepted the mail without an id: {sent}");
        return exit::FAILED;
    };
    let left = timeout.map(|t| t.saturating_sub(started.elapsed()));
    wait_and_print(&mut connection, id, left, args.json)
}

/// A `--timeout` given as a duration, or the usage error printed.
pub fn timeout(arg: Option<&str>) -> Result<Option<Duration>, u8> {
    match arg.map(parse_duration) {
        None => Ok(None),
        Some(Ok(d)) => Ok(Some(d)),
        Some(Err(e)) => {
            eprintln!("wfhost: --timeout: {}\n  help: {}", e.message, e.hint);
            Err(exit::USAGE)
        }
    }
}

/// Waits for item `id`'s end (for `wait` at most; `None`: as long as it
/// takes, one bounded request after another) and prints it.
pub fn wait_and_print(
    connection: &mut Kept<'_>,
    id: u64,
    wait: Option<Duration>,
    json: bool,
) -> u8 {
    match wait_for(connection, id, wait) {
        Ok(data) => print_end(&data, json),
        Err(code) => code,
    }
}

/// Item `id` once it has ended, or (after `wait`) where it is; `None`
/// waits as long as it takes, one bounded request after another. An
/// error is printed and its exit code returned.
pub fn wait_for(connection: &mut Kept<'_>, id: u64, wait: Option<Duration>) -> Result<Value, u8> {
    let started = Instant::now();
    loop {
        let left = wait.map(|w| ms(w.saturating_sub(started.elapsed())));
        // Each request waits 300 s at most; a longer wait asks again.
        let wait_ms = left.map_or(MAX_WAIT_MS, |l| l.min(MAX_WAIT_MS));
        let request = Request::MailResult {
            id,
            wait_ms: Some(wait_ms),
        };
        let data = asked(connection, request, id)?;
        // Ended, or this request waited out the rest of the caller's wait.
        if data["ended"] == true || left.is_some_and(|l| l <= MAX_WAIT_MS) {
            return Ok(data);
        }
    }
}

/// How many times a wait whose supervisor went away is asked again (a
/// restarted supervisor answers within a second or two).
const WAIT_TRIES: u32 = 6;

/// One `mail-result` request, asked again while the supervisor cannot be
/// reached (it is safe to repeat); on giving up, the error names the
/// item, which lives on in the store.
fn asked(connection: &mut Kept<'_>, request: Request, id: u64) -> Result<Value, u8> {
    let mut pause = Duration::from_millis(200);
    let mut tries = 0;
    loop {
        tries += 1;
        match connection.call(request.clone()) {
            Ok(data) => return Ok(data),
            Err(e) if e.code == exit::UNREACHABLE && tries < WAIT_TRIES => {
                std::thread::sleep(pause);
                pause = pause.saturating_mul(2);
            }
            Err(e) => {
                eprintln!(
                    "wfhost: {}\n  help: mail {id} was accepted and is kept in the store: `wfhost mail result {id} --wait` waits for its end (or call again with the same --key)",
                    e.message
                );
                return Err(e.code);
            }
        }
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Prints an item's end as `call` does: a success's result bytes on
/// stdout, exactly; a failure's outcome and reason on stderr; an item
/// that has not ended, named with where it is.
pub fn print_end(data: &Value, json: bool) -> u8 {
    let id = data["id"].as_u64().unwrap_or_default();
    let outcome = data["outcome"].as_str();
    let result = data["result"]
        .as_str()
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .unwrap_or_default();
    let code = match outcome {
        Some("succeeded") => exit::OK,
        _ => exit::FAILED,
    };
    if json {
        let object = json!({
            "id": id,
            "deployment": data["deployment"],
            "ended": data["ended"],
            "state": data["state"],
            "outcome": outcome,
            "reason": data["reason"],
            "result": data["result"],
            "result_text": std::str::from_utf8(&result).ok(),
        });
        println!("{object}");
        return code;
    }
    match outcome {
        Some("succeeded") => {
            let mut out = std::io::stdout().lock();
            if out.write_all(&result).and_then(|()| out.flush()).is_err() {
                return exit::FAILED;
            }
        }
        Some(other) => {
            let why = data["reason"]
                .as_str()
                .map_or_else(String::new, |r| format!(": {r}"));
            eprintln!("wfhost: mail {id} {other}{why}");
        }
        None => eprintln!(
            "wfhost: mail {id} has not ended: it is {} (nothing was cancelled)\n  help: `wfhost mail result {id} --wait` waits for its end",
            match data["state"].as_str() {
                Some("processing") => "in a child, being worked on",
                Some("inbox") => "waiting in the inbox",
                _ => "not done",
            }
        ),
    }
    code
}
