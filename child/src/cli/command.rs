//! Starting the hosted command: its own process group, stdin from
//! /dev/null, stdout and stderr inherited, killed if wfhost-child dies.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use wfhost_ipc::Outcome;
use wfhost_ipc::handshake::ENV_ALL;

/// Spawns `argv` as the leader of a new process group. The `WFHOST_*`
/// variables are removed: the control channel belongs to wfhost-child,
/// and the command never inherits it.
pub fn spawn(argv: &[OsString]) -> io::Result<Child> {
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
        .stderr(Stdio::inherit())
        .process_group(0)
        .kill_on_drop(false);
    for var in ENV_ALL {
        cmd.env_remove(var);
    }
    // Captured before the fork: the pid the command must see as its parent.
    let parent = nix::unistd::getpid().as_raw();
    // SAFETY: the closure runs between fork and exec and makes only raw,
    // async-signal-safe calls (prctl, getppid); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Sends `signal` to process group `pgid`; a group already gone is fine.
pub fn signal_group(pgid: i32, signal: Signal) {
    match killpg(Pid::from_raw(pgid), signal) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => eprintln!("wfhost-child: cannot send {signal} to process group {pgid}: {e}"),
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
