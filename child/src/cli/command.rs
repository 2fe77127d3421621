//! Starting the hosted command: its own process group, stdin from
//! /dev/null, stdout and stderr inherited, killed if wfhost-child dies;
//! and what it leaves behind: wfhost-child is a child subreaper, so every
//! descendant of the command that loses its parent (a daemon that double
//! forked, a `setsid` child of a shell that exited) becomes its child, is
//! reaped when it dies, and is killed once the command has exited.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use std::process::{Child, Command};
use wfhost_ipc::Outcome;
use wfhost_ipc::handshake::{ENV_ALL, ENV_CHANNEL_ID, ENV_DEPLOYMENT};
use wfhost_process::{ChildSetup, is_zombie, kill_tree, own_children, try_reap};

/// How long what the command left behind may take to die.
const LEFTOVERS_GONE_WITHIN: Duration = Duration::from_secs(5);

/// The variable naming the run a hosted command is.
pub const ENV_RUN: &str = "WFHOST_RUN";

/// Who a hosted command works for: its deployment, its child's channel id
/// and its run, handed on as `WFHOST_DEPLOYMENT`, `WFHOST_CHANNEL_ID` and
/// `WFHOST_RUN`.
pub struct Identity<'a> {
    /// The deployment id.
    pub deployment: &'a str,
    /// The wfhost-child's channel id (new for every spawn).
    pub channel_id: &'a str,
    /// The run the command is.
    pub run: &'a str,
}

/// Spawns `argv` as the leader of a new process group, SIGKILLed if
/// wfhost-child dies, inheriting no fd above 2. Every `WFHOST_*` variable
/// is removed (the control channel belongs to wfhost-child, and the
/// command never inherits it), then the command's `identity` is set.
pub fn spawn(argv: &[OsString], identity: &Identity<'_>) -> io::Result<Child> {
    let Some((program, args)) = argv.split_first() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "no command given",
        ));
    };
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    for var in ENV_ALL {
        cmd.env_remove(var);
    }
    cmd.env(ENV_DEPLOYMENT, identity.deployment)
        .env(ENV_CHANNEL_ID, identity.channel_id)
        .env(ENV_RUN, identity.run);
    ChildSetup::new()?.install(&mut cmd);
    cmd.spawn()
}

/// Makes wfhost-child the reaper of the command's orphans (see the module
/// docs); a kernel that refuses leaves them to the supervisor.
pub fn adopt_orphans() {
    if let Err(e) = wfhost_process::become_subreaper() {
        eprintln!(
            "wfhost-child: cannot become a child subreaper ({e}); what the command leaves behind is the supervisor's to kill"
        );
    }
}

/// Kills and reaps every process the exited command left behind (every
/// child of wfhost-child now, with its tree), until none is left; returns
/// how many were killed.
pub fn kill_leftovers() -> usize {
    let deadline = Instant::now() + LEFTOVERS_GONE_WITHIN;
    let mut killed = std::collections::HashSet::new();
    loop {
        let left = own_children();
        if left.is_empty() {
            return killed.len();
        }
        for pid in left {
            if is_zombie(pid) {
                try_reap(pid);
            } else {
                kill_tree(pid);
                killed.insert(pid);
            }
        }
        if Instant::now() >= deadline {
            eprintln!(
                "wfhost-child: processes the command left behind survive SIGKILL; the supervisor kills them with this child"
            );
            return killed.len();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Sends `signal` to process group `pgid`; a group already gone is fine.
pub fn signal_group(pgid: u32, signal: Signal) {
    if let Err(e) = wfhost_process::signal_group(pgid, signal) {
        eprintln!("wfhost-child: {e}");
    }
}

/// How an exit status reads in a step outcome: `Succeeded` for 0, else
/// `Failed("exit status N")` or `Failed("killed by signal SIGX")`.
pub fn outcome_of(status: ExitStatus) -> Outcome {
    if status.success() {
        return Outcome::Succeeded;
    }
    match (status.code(), status.signal()) {
        (Some(code), _) => Outcome::Failed(format!("exit status {code}")),
        (None, Some(sig)) => Outcome::Failed(format!("killed by signal {}", signal_name(sig))),
        (None, None) => Outcome::Failed(format!("ended with {status}")),
    }
}

/// The exit code that passes the command's status on, shell-style: its
/// code, or 128+N when signal N killed it.
pub fn exit_code_of(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => (code & 0xff) as u8,
        (None, Some(sig)) => (128 + (sig & 0x7f)) as u8,
        (None, None) => 1,
    }
}

fn signal_name(sig: i32) -> String {
    Signal::try_from(sig)
        .map(|s| s.as_str().to_owned())
        .unwrap_or_else(|_| format!("{sig}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_and_exit_codes_follow_the_status() {
        let ok = ExitStatus::from_raw(0);
        assert_eq!(outcome_of(ok), Outcome::Succeeded);
        assert_eq!(exit_code_of(ok), 0);
        let three = ExitStatus::from_raw(3 << 8);
        assert_eq!(outcome_of(three), Outcome::Failed("exit status 3".into()));
        assert_eq!(exit_code_of(three), 3);
        let term = ExitStatus::from_raw(libc::SIGTERM);
        assert_eq!(
            outcome_of(term),
            Outcome::Failed("killed by signal SIGTERM".into())
        );
        assert_eq!(exit_code_of(term), 143);
    }
}
