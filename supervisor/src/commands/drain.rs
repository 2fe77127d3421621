//! `wfhost drain`: wind a deployment down under its drain budget; it stays
//! drained (mail held in the inbox) until `wfhost resume`. With `--wait`,
//! shows the drain (budget used and left, steps in flight) until the
//! child is gone.

use crate::commands::progress;
use crate::control::client::Target;
use crate::control::protocol::Request;
use crate::exit;
use crate::human;

/// Arguments of `wfhost drain`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: Target,
    /// The deployment to drain.
    deployment: String,
    /// Return once the child is gone, showing the drain meanwhile.
    #[arg(long)]
    wait: bool,
}

/// Runs the command.
pub fn run(args: Args) -> u8 {
    let request = Request::Drain {
        deployment: args.deployment.clone(),
    };
    let message = match args.target.call(request) {
        Ok(data) => data["message"].as_str().unwrap_or("draining").to_owned(),
        Err(e) => {
            eprintln!("wfhost: {}", e.message);
            return e.code;
        }
    };
    println!("{message}");
    if !args.wait {
        return exit::OK;
    }
    let id = &args.deployment;
    progress::follow(&args.target, id, |d, progress| {
        let state = d["state"].as_str()?;
        matches!(state, "drained" | "failed" | "exited").then(|| {
            let last = d["last_exit"].as_str().unwrap_or("none ran");
            let waited = human::ms(progress.elapsed().as_millis() as u64);
            (
                format!("{id} is {state} after {waited} (its child's end: {last})"),
                exit::OK,
            )
        })
    })
}
