//! The CLI's commands: one module each, and the table below naming each
//! command with its one-line help and running it.

pub mod answer;
pub mod call;
pub mod cancel;
pub mod check_config;
pub mod console;
pub mod demo;
pub mod drain;
pub mod events;
pub mod host;
pub mod hosts;
pub mod journal;
pub mod keygen;
pub mod kill;
pub mod logs;
pub mod mail;
pub mod man;
pub mod move_to;
pub mod progress;
pub mod questions;
pub mod recycle;
pub mod reload;
pub mod resume;
pub mod send;
pub mod status;
pub mod stop;
pub mod supervise;

use clap::Subcommand;

use crate::exit;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the supervisor in the foreground.
    Supervise(supervise::Args),
    /// A self-contained tour: mail, self and policy recycles, a wait step outlasting a drain, a signed cancel.
    Demo(demo::Args),
    /// Show every deployment at a glance, or one (DEPLOYMENT) in detail.
    Status(status::Args),
    /// Replace a deployment's child without losing mail; shows each stage, prints the new pid.
    Recycle(recycle::Args),
    /// Drain a deployment under its budget; it stays drained until resumed (--wait: until its child is gone).
    Drain(drain::Args),
    /// Start a drained or failed deployment again, and wait for it to be ready.
    Resume(resume::Args),
    /// Re-read the config, as SIGHUP does, and say what was started, stopped and recycled.
    Reload(reload::Args),
    /// Stop the supervisor gracefully, as SIGTERM does (--wait: until it has exited).
    Stop(stop::Args),
    /// Cancel a run (or every run) with a signed, journaled request.
    Cancel(cancel::Args),
    /// Accept mail for a deployment (durable before it returns).
    Send(send::Args),
    /// Send mail and wait for its end: its result on stdout (exit 0), or its outcome on stderr (exit 1).
    Call(call::Args),
    /// Print the durable event stream, optionally following it live (--mail ID: one item, to its end).
    Events(events::Args),
    /// List the questions items' handlers asked a person and that wait for an answer.
    Questions(questions::Args),
    /// Answer a question an item's handler asked (VALUE is JSON); the waiting handler gets it.
    Answer(answer::Args),
    /// Print a deployment's recent child output, optionally following it.
    Logs(logs::Args),
    /// SIGKILL a deployment's child now, even one stuck stopping.
    Kill(kill::Args),
    /// In a fleet: hand a deployment to another host (drained, then taken at once).
    Move(move_to::Args),
    /// In a fleet: drain a host for maintenance (its deployments go to the others) or resume it.
    #[command(subcommand)]
    Host(host::Command),
    /// In a fleet: the live hosts with heartbeat age, state, leases held and encryption.
    Hosts(hosts::Args),
    /// Validate a config file and every program it names; errors give file, line and column.
    CheckConfig(check_config::Args),
    /// Write a new ed25519 signing key (PKCS#8 PEM, mode 0600).
    Keygen(keygen::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(after_help = COMPLETIONS_HELP)]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the manual pages (wfhost.1 and one for each command) into a directory.
    Man(man::Args),
    /// Check or list the signed journal.
    #[command(subcommand)]
    Journal(journal::Command),
    /// List and inspect stored mail; retry or purge dead mail.
    #[command(subcommand)]
    Mail(mail::Command),
    /// The browser console: `token` prints a one-time login link.
    #[command(subcommand)]
    Console(console::Command),
}

/// Where each shell looks for completions.
const COMPLETIONS_HELP: &str = "Install the script where your shell looks for it:\n  \
    bash: wfhost completions bash > ~/.local/share/bash-completion/completions/wfhost\n        \
    (system-wide: /usr/share/bash-completion/completions/wfhost)\n  \
    zsh:  wfhost completions zsh > ~/.zfunc/_wfhost, with fpath+=(~/.zfunc) before compinit in ~/.zshrc\n        \
    (system-wide: /usr/local/share/zsh/site-functions/_wfhost)\n  \
    fish: wfhost completions fish > ~/.config/fish/completions/wfhost.fish\n\
then open a new shell.";

/// Runs one command; `cli` builds the whole command line's description
/// (for the manual pages and shell completions).
pub fn run(command: Command, cli: fn() -> clap::Command) -> u8 {
    match command {
        Command::Supervise(args) => supervise::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Status(args) => status::run(args),
        Command::Recycle(args) => recycle::run(args),
        Command::Drain(args) => drain::run(args),
        Command::Resume(args) => resume::run(args),
        Command::Reload(args) => reload::run(args),
        Command::Stop(args) => stop::run(args),
        Command::Cancel(args) => cancel::run(args),
        Command::Send(args) => send::run(args),
        Command::Call(args) => call::run(args),
        Command::Events(args) => events::run(args),
        Command::Questions(args) => questions::run(args),
        Command::Answer(args) => answer::run(args),
        Command::Logs(args) => logs::run(args),
        Command::Kill(args) => kill::run(args),
        Command::Move(args) => move_to::run(args),
        Command::Host(cmd) => host::run(cmd),
        Command::Hosts(args) => hosts::run(args),
        Command::CheckConfig(args) => check_config::run(args),
        Command::Keygen(args) => keygen::run(args),
        Command::Journal(cmd) => journal::run(cmd),
        Command::Man(args) => man::run(args, cli()),
        Command::Mail(cmd) => mail::run(cmd),
        Command::Console(cmd) => console::run(cmd),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut cli(), "wfhost", &mut std::io::stdout());
            exit::OK
        }
    }
}
