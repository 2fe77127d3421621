//! What a child gets between `fork` and `exec`.
//!
//! The hook runs in the forked child of a multi-threaded parent, where only
//! async-signal-safe calls are allowed: every value it needs is captured as
//! a plain integer before the fork, and it makes raw syscalls only (no
//! allocation, no locks, no logging).

use std::io;
use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::CONTROL_FD;
use crate::nofile::{CHILD_NOFILE_SOFT, nofile_limit};
use crate::rlimits::Rlimits;

/// Most fds the fallback (kernels without `close_range(2)`) marks one by
/// one.
const FALLBACK_FD_SCAN: libc::rlim_t = 1 << 20;

/// How a child is set up between `fork` and `exec`: optionally moved into
/// its cgroup first, the leader of its own process group, SIGKILLed when
/// its parent's spawning thread dies (and not started at all if the
/// parent is already gone), optionally its control channel at exactly fd
/// 3, every fd above it (or above 2 without a channel) close-on-exec, the
/// soft `RLIMIT_NOFILE` back at [`CHILD_NOFILE_SOFT`], any configured
/// [`Rlimits`], and no signal blocked (a parent that reads its signals
/// from a `signalfd`, as `wfhost-child exec` does, blocks them, and a
/// mask survives `exec`).
#[derive(Debug, Clone, Copy)]
pub struct ChildSetup {
    parent: libc::pid_t,
    control: Option<RawFd>,
    cgroup: Option<RawFd>,
    nofile: libc::rlimit,
    rlimits: Rlimits,
    scan_to: libc::rlim_t,
}

impl ChildSetup {
    /// The setup for a child of this process, without a control channel.
    /// Reads this process's pid and fd limit now, before any fork.
    pub fn new() -> io::Result<Self> {
        let limit = nofile_limit()?;
        Ok(Self {
            parent: std::process::id() as libc::pid_t,
            control: None,
            cgroup: None,
            nofile: libc::rlimit {
                rlim_cur: CHILD_NOFILE_SOFT.min(limit.rlim_max),
                rlim_max: limit.rlim_max,
            },
            rlimits: Rlimits::default(),
            scan_to: limit.rlim_cur.min(FALLBACK_FD_SCAN),
        })
    }

    /// Places `fd` (this process's copy of the child's end of the control
    /// channel) at exactly [`CONTROL_FD`] in the child, inheritable. `fd`
    /// should be close-on-exec here, so children that other threads fork
    /// meanwhile do not inherit it; drop it once the child is spawned, or
    /// the channel never reads end of stream.
    pub fn control_fd(mut self, fd: RawFd) -> Self {
        self.control = Some(fd);
        self
    }

    /// Moves the child into the cgroup whose `cgroup.procs` is open at
    /// `procs` ([`Cgroup::procs_for_spawn`](crate::Cgroup::procs_for_spawn))
    /// before anything else, so it never runs its program outside it; keep
    /// the file open until the child is spawned.
    pub fn cgroup(mut self, procs: RawFd) -> Self {
        self.cgroup = Some(procs);
        self
    }

    /// Applies `rlimits` ([`Rlimits::fitted`] first) last, after the
    /// soft `RLIMIT_NOFILE` reset, which a configured `nofile` replaces.
    pub fn rlimits(mut self, rlimits: Rlimits) -> Self {
        self.rlimits = rlimits;
        self
    }

    /// Makes `cmd` start its child with this setup: in a process group of
    /// its own, with the pre-exec hook installed.
    pub fn install(self, cmd: &mut Command) {
        cmd.process_group(0);
        // SAFETY: `run` makes only async-signal-safe syscalls on the
        // integers captured in `self` (a `Copy` value): no allocation, no
        // locks, no logging.
        unsafe {
            cmd.pre_exec(move || self.run());
        }
    }

    /// Runs in the child between fork and exec. Async-signal-safe only.
    /// The standard library runs it after any `uid`/`gid` change of the
    /// command, which would otherwise clear the death signal again.
    fn run(&self) -> io::Result<()> {
        // SAFETY: raw syscalls on integers; each result is checked.
        unsafe {
            // "0" moves the writing process: the child itself, before it
            // can fork anything that would start outside the cgroup.
            if let Some(procs) = self.cgroup
                && libc::write(procs, b"0".as_ptr().cast(), 1) != 1
            {
                return Err(io::Error::last_os_error());
            }
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
            // The parent may have died before the death signal was armed.
            if libc::getppid() != self.parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            let mut first_private = 3;
            if let Some(fd) = self.control {
                if fd == CONTROL_FD {
                    // dup2 onto itself is a no-op that leaves close-on-exec set.
                    if libc::fcntl(CONTROL_FD, libc::F_SETFD, 0) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                } else if libc::dup2(fd, CONTROL_FD) < 0 {
                    return Err(io::Error::last_os_error());
                }
                first_private = CONTROL_FD + 1;
            }
            // Marked close-on-exec, not closed now: the runtime's exec-error
            // pipe must survive until exec.
            mark_cloexec_from(first_private, self.scan_to)?;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &self.nofile) != 0 {
                return Err(io::Error::last_os_error());
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            let rc = libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
        }
        self.rlimits.apply()
    }
}

/// Marks every fd from `first` up close-on-exec: one `close_range(2)`, or,
/// on kernels without it (before 5.11), one `fcntl` per fd below `scan_to`.
/// Async-signal-safe.
fn mark_cloexec_from(first: RawFd, scan_to: libc::rlim_t) -> io::Result<()> {
    // SAFETY: raw syscalls on integers.
    unsafe {
        let done = libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        if done == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if !matches!(err.raw_os_error(), Some(libc::ENOSYS | libc::EINVAL)) {
            return Err(err);
        }
        let mut fd = first;
        while (fd as libc::rlim_t) < scan_to {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
            fd += 1;
        }
    }
    Ok(())
}
