//! `wfh-fleetchild --record FILE [--work-ms MS] [--drain wait] [--echo]`:
//! a mail-taking child for the black-box tests of fleets and calls, on
//! the Rust child runtime. Each mail item is one step of `--work-ms`
//! (20 ms) that a drain cancels (or, with `--drain wait`, waits for);
//! with `--echo` the item's result is its payload, byte for byte (binary
//! payloads for `wfhost call`), else empty. Every item it
//! works on appends one line to FILE, written with one `write` on an
//! append-only file so children of every host can share it:
//!
//! `PID DEPLOYMENT MAIL_ID START_MS END_MS OUTCOME`
//!
//! with OUTCOME `done` (acknowledged as succeeded) or `cancelled:CAUSE`
//! (a drain, an expired lease, a shutdown: left unacknowledged, so the
//! next child gets it again). Tests read which pid processed what, when.

use std::convert::Infallible;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use wfhost_child::{DrainBehavior, Outcome, Runtime, StepError};

fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// The value after `flag` in the arguments.
fn arg(flag: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let Some(record) = arg("--record") else {
        eprintln!("usage: wfh-fleetchild --record FILE [--work-ms MS] [--drain wait] [--echo]");
        return ExitCode::from(2);
    };
    let work = Duration::from_millis(arg("--work-ms").and_then(|v| v.parse().ok()).unwrap_or(20));
    let drain = match arg("--drain").as_deref() {
        Some("wait") => DrainBehavior::Wait,
        _ => DrainBehavior::Cancel,
    };
    let echo = std::env::args().any(|a| a == "--echo");
    let mut file = match std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&record)
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("wfh-fleetchild: cannot open {record}: {e}");
            return ExitCode::from(1);
        }
    };
    let rt = match Runtime::connect().await {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("wfh-fleetchild: {e}");
            return ExitCode::from(1);
        }
    };
    if let Err(e) = rt.ready().await {
        eprintln!("wfh-fleetchild: {e}");
        return ExitCode::from(1);
    }
    let pid = std::process::id();
    let deployment = std::env::var("WFHOST_DEPLOYMENT").unwrap_or_default();
    let mut inbox = rt.mail();
    while let Some(mail) = inbox.next().await {
        let id = mail.id();
        let run = format!("mail-{id}");
        let start = unix_ms();
        let worked = rt
            .step(&run, "work", drain, |_token| async move {
                tokio::time::sleep(work).await;
                Ok::<_, Infallible>(())
            })
            .await;
        let end = unix_ms();
        let outcome = match &worked {
            Ok(()) => "done".to_owned(),
            Err(StepError::Cancelled(cause)) => format!("cancelled:{}", cause.as_str()),
            Err(e) => format!("failed:{e}"),
        };
        let line = format!("{pid} {deployment} {id} {start} {end} {outcome}\n");
        let _ = file.write_all(line.as_bytes());
        if worked.is_ok() {
            let _ = rt.run_terminal(&run, Outcome::Succeeded).await;
            let result = if echo {
                mail.payload().to_vec()
            } else {
                Vec::new()
            };
            let _ = mail.done(Outcome::Succeeded, result).await;
        } else {
            let _ = rt.run_terminal(&run, Outcome::Cancelled).await;
            // Not acknowledged: it goes to the next child.
            drop(mail);
        }
    }
    rt.closed().await;
    ExitCode::SUCCESS
}
