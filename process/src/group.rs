//! Signalling a child's process group, and killing its whole tree.

use std::io;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use crate::tree::descendants;

/// Sends `signal` to the process group `pgid` (a child started with
/// [`ChildSetup`](crate::ChildSetup) leads a group whose id is its pid).
/// `Ok(false)` when the group is already gone. Group ids 0 and 1 are
/// refused: `killpg(0)` would signal the caller's own group.
pub fn signal_group(pgid: u32, signal: Signal) -> io::Result<bool> {
    let raw = checked_pid(pgid)?;
    match killpg(Pid::from_raw(raw), signal) {
        Ok(()) => Ok(true),
        Err(Errno::ESRCH) => Ok(false),
        Err(e) => Err(io::Error::other(format!(
            "cannot send {signal} to process group {pgid}: {e}"
        ))),
    }
}

/// SIGKILLs the tree of `pid`: `pid` itself and the process group it leads
/// (if it leads one: an adopted orphan may not), and every descendant and
/// the group each leads (a command hosted by `wfhost-child exec` runs in a
/// group of its own, and its children would otherwise outlive it). The
/// descendants are listed before anything is killed, since a killed parent's
/// children are re-parented at once. Returns how many descendants were
/// found. A process that left the group and the tree (`setsid` and a double
/// fork) escapes it: a cgroup ([`Cgroup::kill`](crate::Cgroup::kill)) or a
/// subreaper that adopted it ([`crate::become_subreaper`]) catches that.
pub fn kill_tree(pid: u32) -> usize {
    let Ok(raw) = checked_pid(pid) else {
        return 0;
    };
    let found = descendants(pid);
    let _ = kill(Pid::from_raw(raw), Signal::SIGKILL);
    let _ = killpg(Pid::from_raw(raw), Signal::SIGKILL);
    for d in &found {
        if let Ok(d) = checked_pid(*d) {
            let _ = kill(Pid::from_raw(d), Signal::SIGKILL);
            let _ = killpg(Pid::from_raw(d), Signal::SIGKILL);
        }
    }
    found.len()
}

/// `pid` as a `pid_t` fit to be signalled: above 1 and in range.
fn checked_pid(pid: u32) -> io::Result<i32> {
    match i32::try_from(pid) {
        Ok(raw) if raw > 1 => Ok(raw),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal process (group) {pid}: not a child's pid"),
        )),
    }
}
