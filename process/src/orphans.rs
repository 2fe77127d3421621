//! Containment without cgroups: a process that leaves its parent's
//! process group (`setsid`, a double fork, `setpgid`) is out of reach of a
//! group kill, but not of its ancestors. A *child subreaper*
//! (`PR_SET_CHILD_SUBREAPER`) adopts every orphan among its descendants
//! instead of init, so it can still find them (as its own children) and
//! kill them; being their parent, it must also reap them. Each is told
//! apart by [`ENV_ORIGIN`], the channel id of the deployment child it
//! descends from, which every process inherits in its environment.
//!
//! Reaping is by pid only, never `waitpid(-1)`: the async runtime reaps
//! the children it spawned itself, and must find them still there.

use std::collections::HashSet;
use std::io;

use nix::errno::Errno;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// Environment variable naming the channel id of the deployment child a
/// process descends from. The supervisor sets it for every child;
/// `wfhost-child exec` and the SDKs pass it on (unlike the protocol's
/// `WFHOST_*` variables, it gives no access to anything), so an escaped
/// process can be traced back to its deployment.
pub const ENV_ORIGIN: &str = "WFHOST_ORIGIN";

/// Makes this process a child subreaper: orphaned descendants are
/// re-parented to it rather than to init.
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether this process is a child subreaper.
pub fn is_subreaper() -> bool {
    let mut flag: libc::c_int = 0;
    // SAFETY: prctl writes one int into `flag`.
    let done = unsafe {
        libc::prctl(
            libc::PR_GET_CHILD_SUBREAPER,
            &mut flag as *mut libc::c_int,
            0,
            0,
            0,
        )
    };
    done == 0 && flag != 0
}

/// This process's children (of every thread), zombies included.
pub fn own_children() -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Whether `pid` is a zombie (exited, not yet reaped).
pub fn is_zombie(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    stat.rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        == Some("Z")
}

/// Reaps child `pid` if it has exited; true when it was reaped (or is no
/// child of ours any more). Never blocks, and never touches another pid.
pub fn try_reap(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 1 {
        return false;
    }
    match waitpid(Pid::from_raw(raw), Some(WaitPidFlag::WNOHANG)) {
        Ok(WaitStatus::StillAlive) => false,
        Ok(_) | Err(Errno::ECHILD) => true,
        Err(_) => false,
    }
}

/// The channel id `pid` descends from: its [`ENV_ORIGIN`], else (a
/// deployment child itself, or one started by an older supervisor) its
/// `WFHOST_CHANNEL_ID`. `None` when its environment cannot be read (gone,
/// a zombie, another user's) or names neither.
pub fn origin_of(pid: u32) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let mut channel = None;
    for var in environ.split(|&b| b == 0) {
        let Some(eq) = var.iter().position(|&b| b == b'=') else {
            continue;
        };
        let (key, value) = (&var[..eq], &var[eq + 1..]);
        let value = || String::from_utf8_lossy(value).into_owned();
        if key == ENV_ORIGIN.as_bytes() {
            return Some(value());
        }
        if key == b"WFHOST_CHANNEL_ID" {
            channel = Some(value());
        }
    }
    channel
}

/// Every live process on the machine that descends from one of
/// `origins`, with its origin: what a supervisor killed without warning
/// (SIGKILL, a crash) left behind.
pub fn processes_from(origins: &HashSet<String>) -> Vec<(u32, String)> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me && pid > 1)
        .filter_map(|pid| {
            let origin = origin_of(pid)?;
            (origins.contains(&origin) && !is_zombie(pid)).then_some((pid, origin))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_environment_names_no_origin_unless_set() {
        // The test process was not started by a supervisor.
        if std::env::var_os(ENV_ORIGIN).is_none() && std::env::var_os("WFHOST_CHANNEL_ID").is_none()
        {
            assert_eq!(origin_of(std::process::id()), None);
        }
        assert_eq!(origin_of(u32::MAX), None, "no such process");
    }

    #[test]
    fn reaping_refuses_pids_that_are_not_children() {
        assert!(!try_reap(0), "0 would mean any child of the group");
        assert!(!try_reap(1));
        // pid 2 is never our child: ECHILD counts as nothing to wait for.
        assert!(try_reap(2));
    }
}
