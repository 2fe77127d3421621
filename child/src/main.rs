//! `wfhost-child`: runs under `wfhost supervise` and hosts work for it;
//! `exec` wraps a plain command so it can be supervised like a workflow,
//! `demo` runs the demo workflow of the `wfhost demo` tour.

mod cli;

use std::process::ExitCode;

use cli::Chosen;

fn main() -> ExitCode {
    let args = match Chosen::from_args() {
        // A plain command's wrapper: one thread, no runtime, no subscriber.
        Chosen::Exec(args) => return ExitCode::from(cli::run_exec(args)),
        Chosen::Other(cli) => cli,
    };
    cli::log::install();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("wfhost-child: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    // The current-thread runtime keeps everything, the command's spawn
    // included, on this thread, which lives until exit: the command's
    // parent-death signal fires only when wfhost-child itself is gone.
    let code = runtime.block_on(cli::run(args));
    ExitCode::from(code)
}
