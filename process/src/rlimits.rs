//! Resource limits a child gets before it runs its program: what
//! `setrlimit(2)` can bound without cgroups (open files, core dumps,
//! address space). Each is set as both soft and hard limit, as systemd's
//! `LimitNOFILE=N` does, so the program cannot raise it again.

use std::io;

use crate::nofile::nofile_limit;

/// Limits for one child; `None` keeps what it inherits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rlimits {
    /// `RLIMIT_NOFILE`: most open fds.
    pub nofile: Option<u64>,
    /// `RLIMIT_CORE`: largest core dump in bytes (0: none).
    pub core: Option<u64>,
    /// `RLIMIT_AS`: largest address space in bytes.
    pub address_space: Option<u64>,
}

/// A limit the child gets lower than asked, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capped {
    /// `nofile`, `core` or `as`.
    pub limit: &'static str,
    /// What was asked.
    pub asked: u64,
    /// What the child gets: the hard limit this process has.
    pub hard: u64,
}

impl Rlimits {
    /// The limits as `setrlimit` will apply them: a child can never be
    /// given more than this process's own hard limit (raising it needs a
    /// privilege the child loses with its uid change, or never had), so a
    /// limit above it is lowered to it and reported.
    pub fn fitted(self) -> io::Result<(Self, Vec<Capped>)> {
        let mut capped = Vec::new();
        let mut fit = |limit: &'static str, resource, asked: Option<u64>| -> io::Result<_> {
            let Some(asked) = asked else { return Ok(None) };
            let hard = hard_limit(resource)?;
            if asked > hard {
                capped.push(Capped { limit, asked, hard });
                return Ok(Some(hard));
            }
            Ok(Some(asked))
        };
        let fitted = Self {
            nofile: fit("nofile", libc::RLIMIT_NOFILE, self.nofile)?,
            core: fit("core", libc::RLIMIT_CORE, self.core)?,
            address_space: fit("as", libc::RLIMIT_AS, self.address_space)?,
        };
        Ok((fitted, capped))
    }

    /// Applies the limits to the calling process. Async-signal-safe: runs
    /// between fork and exec.
    pub(crate) fn apply(&self) -> io::Result<()> {
        for (resource, value) in [
            (libc::RLIMIT_NOFILE, self.nofile),
            (libc::RLIMIT_CORE, self.core),
            (libc::RLIMIT_AS, self.address_space),
        ] {
            if let Some(v) = value {
                let limit = libc::rlimit {
                    rlim_cur: v,
                    rlim_max: v,
                };
                // SAFETY: setrlimit reads the struct on our stack.
                if unsafe { libc::setrlimit(resource, &limit) } != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }
}

/// This process's hard limit of `resource` (`u64::MAX` for unlimited).
fn hard_limit(resource: libc::__rlimit_resource_t) -> io::Result<u64> {
    if resource == libc::RLIMIT_NOFILE {
        return Ok(nofile_limit()?.rlim_max);
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(resource, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(if limit.rlim_max == libc::RLIM_INFINITY {
        u64::MAX
    } else {
        limit.rlim_max
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_within_the_hard_limit_are_kept_and_those_above_are_capped() {
        let hard = nofile_limit().expect("nofile").rlim_max;
        let (fit, capped) = Rlimits {
            nofile: Some(hard.saturating_add(1)),
            core: Some(0),
            address_space: None,
        }
        .fitted()
        .expect("fitted");
        assert_eq!(fit.nofile, Some(hard));
        assert_eq!(fit.core, Some(0));
        assert_eq!(fit.address_space, None);
        assert_eq!(
            capped,
            [Capped {
                limit: "nofile",
                asked: hard.saturating_add(1),
                hard
            }]
        );
    }
}
