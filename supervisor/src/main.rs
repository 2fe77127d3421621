//! `wfhost`: the supervisor and the operator's CLI in one binary.

mod clock;
mod commands;
mod config;
mod contain;
mod control;
mod deployment;
mod exit;
mod fleet;
mod host;
mod human;
mod journal;
mod localtime;
mod logging;
mod observe;
mod procfs;
mod record;
mod shared;
mod signing_key;
mod status;
mod store;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// A workflow host: supervises workflow children, drains them under a
/// budget, recycles them without losing mail.
#[derive(Debug, Parser)]
#[command(
    name = "wfhost",
    version,
    propagate_version = true,
    after_help = "Client commands find the supervisor through --socket PATH, else --config PATH, else \
                  $WFHOST_CONFIG, else /etc/wfhost/wfhost.toml (its state_dir has the socket).\n\
                  Exit status: 0 success, 1 the operation failed, 2 usage or config error, 3 supervisor unreachable."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the supervisor in the foreground.
    Supervise(commands::supervise::Args),
    /// A self-contained tour: mail, self and policy recycles, a wait step outlasting a drain, a signed cancel.
    Demo(commands::demo::Args),
    /// Show every deployment at a glance, or one (DEPLOYMENT) in detail.
    Status(commands::status::Args),
    /// Replace a deployment's child without losing mail; shows each stage, prints the new pid.
    Recycle(commands::recycle::Args),
    /// Drain a deployment under its budget; it stays drained until resumed (--wait: until its child is gone).
    Drain(commands::drain::Args),
    /// Start a drained or failed deployment again, and wait for it to be ready.
    Resume(commands::resume::Args),
    /// Re-read the config, as SIGHUP does, and say what was started, stopped and recycled.
    Reload(commands::reload::Args),
    /// Stop the supervisor gracefully, as SIGTERM does (--wait: until it has exited).
    Stop(commands::stop::Args),
    /// Cancel a run (or every run) with a signed, journaled request.
    Cancel(commands::cancel::Args),
    /// Accept mail for a deployment (durable before it returns).
    Send(commands::send::Args),
    /// Print the durable event stream, optionally following it live.
    Events(commands::events::Args),
    /// Print a deployment's recent child output, optionally following it.
    Logs(commands::logs::Args),
    /// SIGKILL a deployment's child now, even one stuck stopping.
    Kill(commands::kill::Args),
    /// In a fleet: hand a deployment to another host (drained, then taken at once).
    Move(commands::move_to::Args),
    /// Validate a config file and every program it names; errors give file, line and column.
    CheckConfig(commands::check_config::Args),
    /// Write a new ed25519 signing key (PKCS#8 PEM, mode 0600).
    Keygen(commands::keygen::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(after_help = COMPLETIONS_HELP)]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the manual pages (wfhost.1 and one for each command) into a directory.
    Man(commands::man::Args),
    /// Check or list the signed journal.
    #[command(subcommand)]
    Journal(commands::journal::Command),
    /// List and inspect stored mail; retry or purge dead mail.
    #[command(subcommand)]
    Mail(commands::mail::Command),
}

/// Where each shell looks for completions.
const COMPLETIONS_HELP: &str = "Install the script where your shell looks for it:\n  \
    bash: wfhost completions bash > ~/.local/share/bash-completion/completions/wfhost\n        \
    (system-wide: /usr/share/bash-completion/completions/wfhost)\n  \
    zsh:  wfhost completions zsh > ~/.zfunc/_wfhost, with fpath+=(~/.zfunc) before compinit in ~/.zshrc\n        \
    (system-wide: /usr/local/share/zsh/site-functions/_wfhost)\n  \
    fish: wfhost completions fish > ~/.config/fish/completions/wfhost.fish\n\
then open a new shell.";

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                exit::USAGE
            } else {
                exit::OK
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if !matches!(cli.command, Command::Supervise(_)) {
        // Client commands behave like other Unix tools in a pipeline:
        // `wfhost events --follow | head` ends quietly when head exits.
        // SAFETY: setting a signal disposition before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let code = match cli.command {
        Command::Supervise(args) => commands::supervise::run(args),
        Command::Demo(args) => commands::demo::run(args),
        Command::Status(args) => commands::status::run(args),
        Command::Recycle(args) => commands::recycle::run(args),
        Command::Drain(args) => commands::drain::run(args),
        Command::Resume(args) => commands::resume::run(args),
        Command::Reload(args) => commands::reload::run(args),
        Command::Stop(args) => commands::stop::run(args),
        Command::Cancel(args) => commands::cancel::run(args),
        Command::Send(args) => commands::send::run(args),
        Command::Events(args) => commands::events::run(args),
        Command::Logs(args) => commands::logs::run(args),
        Command::Kill(args) => commands::kill::run(args),
        Command::Move(args) => commands::move_to::run(args),
        Command::CheckConfig(args) => commands::check_config::run(args),
        Command::Keygen(args) => commands::keygen::run(args),
        Command::Journal(cmd) => commands::journal::run(cmd),
        Command::Man(args) => {
            use clap::CommandFactory;
            commands::man::run(args, Cli::command())
        }
        Command::Mail(cmd) => commands::mail::run(cmd),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "wfhost", &mut std::io::stdout());
            exit::OK
        }
    };
    // The supervisor's last lines may still wait for stderr.
    logging::flush(std::time::Duration::from_secs(2));
    ExitCode::from(code)
}
