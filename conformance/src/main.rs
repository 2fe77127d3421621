//! `wfhost-conformance`: starts a child command exactly as `wfhost
//! supervise` starts a deployment's child and plays scripted supervisor
//! scenarios against it, one fresh child each, printing one line per
//! scenario and exiting 0 only if every one passed (`docs/conformance.md`).

mod events;
mod failure;
mod forgery;
mod run;
mod scenarios;
mod subject;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

use crate::scenarios::Scenario;

/// Check that a child implementation speaks the wfhost protocol: each
/// scenario starts CMD as the supervisor would (fd 3, cleared environment
/// plus WFHOST_*, own process group) and plays the supervisor's part.
#[derive(Debug, Parser)]
#[command(name = "wfhost-conformance", version)]
struct Args {
    /// Run only this scenario (repeatable; see --list).
    #[arg(long, value_name = "NAME")]
    only: Vec<String>,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
    /// The child speaks only this protocol version: 2 plays the scenarios
    /// of version 2 (and handshake-v2-supervisor) and requires every Hello
    /// to say 2; 3 requires every Hello to say 3. Without it the child may
    /// choose either where a scenario allows, and every scenario is played.
    #[arg(long, value_name = "VERSION", value_parser = clap::value_parser!(u32).range(2..=3))]
    protocol: Option<u32>,
    /// Pass K=V in the child's environment, beside PATH and WFHOST_*
    /// (repeatable).
    #[arg(long = "env", value_name = "K=V", value_parser = parse_env)]
    env: Vec<(OsString, OsString)>,
    /// The child command and its arguments, after `--`.
    #[arg(value_name = "CMD", last = true)]
    command: Vec<OsString>,
}

/// Reads one `--env K=V`; the `WFHOST_*` variables are the kit's to set.
fn parse_env(text: &str) -> Result<(OsString, OsString), String> {
    let Some((name, value)) = text.split_once('=') else {
        return Err(format!("{text:?} is not K=V"));
    };
    if name.is_empty() {
        return Err(format!("{text:?} has no variable name before ="));
    }
    if name.starts_with("WFHOST_") {
        return Err(format!(
            "{name} is set by the kit for each child (the WFHOST_* contract); it cannot be overridden"
        ));
    }
    Ok((name.into(), value.into()))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let all = Scenario::for_protocol(args.protocol.unwrap_or(wfhost_ipc::PROTOCOL_VERSION));
    if args.list {
        let mut out = std::io::stdout().lock();
        for scenario in &all {
            let _ = writeln!(out, "{}", scenario.name());
        }
        return ExitCode::SUCCESS;
    }
    let chosen = match choose(&all, &args.only) {
        Ok(chosen) => chosen,
        Err(message) => {
            eprintln!("wfhost-conformance: {message}");
            return ExitCode::from(2);
        }
    };
    if args.command.is_empty() {
        eprintln!(
            "wfhost-conformance: no child command given; usage: wfhost-conformance [--only NAME]... [--env K=V]... -- CMD ARGS…"
        );
        return ExitCode::from(2);
    }
    // A current-thread runtime on the main thread, which lives until exit;
    // children are forked on the spawner thread, as the supervisor does.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("wfhost-conformance: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(run::run(&chosen, &args.command, args.env, args.protocol))
}

/// The scenarios `--only` names (all of them without it), in the kit's
/// order; an unknown name is an error listing the known ones.
fn choose(all: &[Scenario], only: &[String]) -> Result<Vec<Scenario>, String> {
    if only.is_empty() {
        return Ok(all.to_vec());
    }
    let names: Vec<String> = all.iter().map(Scenario::name).collect();
    if let Some(unknown) = only.iter().find(|n| !names.contains(n)) {
        return Err(format!(
            "unknown scenario {unknown:?}; the scenarios are: {}",
            names.join(", ")
        ));
    }
    Ok(all
        .iter()
        .filter(|s| only.contains(&s.name()))
        .copied()
        .collect())
}
