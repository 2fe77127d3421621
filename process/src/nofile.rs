//! `RLIMIT_NOFILE`: the supervisor raises its own soft limit (each child
//! costs several fds), and every child starts again from the usual 1,024,
//! which some programs rely on (`select(2)`, fd-table loops).

use std::io;

/// The soft `RLIMIT_NOFILE` every child starts with, whatever the parent
/// raised its own to (capped by the hard limit).
pub const CHILD_NOFILE_SOFT: libc::rlim_t = 1024;

/// This process's `RLIMIT_NOFILE`.
pub(crate) fn nofile_limit() -> io::Result<libc::rlimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(limit)
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit: each
/// child costs several fds and a thousand children pass the default 1,024.
/// Returns the new soft limit.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let mut limit = nofile_limit()?;
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: setrlimit reads the struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(limit.rlim_cur)
}
