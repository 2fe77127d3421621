//! Signalling a child's process group and killing its whole tree.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// Sends `signal` to the process group led by `pid`; a group that is
/// already gone is fine.
pub fn signal_group(pid: u32, signal: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = killpg(Pid::from_raw(pid), signal);
    }
}

/// SIGKILLs a live child's whole tree: its process group, and every
/// descendant and the group each leads. A command hosted by
/// `wfhost-child exec` runs in a group of its own, and its children would
/// otherwise outlive it.
pub fn kill_tree(pid: u32) {
    let descendants = crate::procfs::descendants(pid);
    signal_group(pid, Signal::SIGKILL);
    for d in descendants {
        if let Ok(raw) = i32::try_from(d) {
            let _ = nix::sys::signal::kill(Pid::from_raw(raw), Signal::SIGKILL);
            let _ = killpg(Pid::from_raw(raw), Signal::SIGKILL);
        }
    }
}
