//! `wfhost stop`: stop the supervisor gracefully, as SIGTERM does: every
//! deployment drains under its budget (escalating where it runs out), its
//! child is stopped, and the supervisor exits 0. With `--wait`, shows the
//! drains until the supervisor is gone.

use crate::commands::progress::{self, POLL, Progress};
use crate::control::client::Target;
use crate::control::protocol::Request;
use crate::exit;
use crate::human;

/// Arguments of `wfhost stop`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// Return once the supervisor has exited, showing the drains meanwhile.
    #[arg(long)]
    wait: bool,
}

/// Runs the command.
pub fn run(args: Args) -> u8 {
    let stopping = match args.target.call(Request::Stop) {
        Ok(data) => data,
        Err(e) => {
            eprintln!("wfhost: {}", e.message);
            return e.code;
        }
    };
    let pid = stopping["pid"].as_u64().unwrap_or(0);
    let n = stopping["deployments"].as_u64().unwrap_or(0);
    let noun = if n == 1 { "deployment" } else { "deployments" };
    println!("stopping the supervisor (pid {pid}): draining {n} {noun} under their budgets");
    if !args.wait {
        return exit::OK;
    }
    let mut progress = Progress::new();
    loop {
        let all = match progress::statuses(&args.target) {
            Ok(all) => all,
            // The socket is gone with the supervisor: done.
            Err(e) if e.code == exit::UNREACHABLE => break,
            Err(e) => {
                progress.clear();
                eprintln!("wfhost: {}", e.message);
                return e.code;
            }
        };
        let running: Vec<String> = all
            .iter()
            .filter(|d| !matches!(d["state"].as_str(), Some("exited" | "drained" | "failed")))
            .map(|d| {
                let (_, words) = progress::stage_of(d);
                format!("{}: {words}", d["id"].as_str().unwrap_or("?"))
            })
            .collect();
        let stage = format!("{} left", running.len());
        let text = match running.as_slice() {
            [] => "every child has stopped; the supervisor is finishing".to_owned(),
            [one] => format!("stopping: {one}"),
            [first, rest @ ..] => format!("stopping: {first}; and {} more", rest.len()),
        };
        progress.show(&stage, &text);
        std::thread::sleep(POLL);
    }
    progress.clear();
    let waited = human::ms(progress.elapsed().as_millis() as u64);
    println!("stopped: the supervisor (pid {pid}) exited after {waited}");
    exit::OK
}
