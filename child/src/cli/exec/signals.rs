//! The signals exec answers (SIGTERM, SIGINT, SIGCHLD), read from a
//! `signalfd` in the same `poll` as the control channel: no handler, no
//! thread. They are blocked before the command is spawned, so none that
//! arrives before the loop is lost; the command starts with an empty mask
//! (std's spawn clears it).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A signal exec acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caught {
    /// SIGTERM: forwarded to the command.
    Term,
    /// SIGINT: forwarded to the command.
    Int,
    /// SIGCHLD: a child (the command or an adopted orphan) changed state.
    Child,
}

/// The blocked signals and the fd that reads them.
pub struct Signals {
    fd: OwnedFd,
}

impl Signals {
    /// Blocks SIGTERM, SIGINT and SIGCHLD and opens their `signalfd`.
    pub fn block() -> io::Result<Self> {
        // SAFETY: sigset_t is plain data initialised by sigemptyset; the
        // calls only read and write it and this thread's mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGCHLD] {
                libc::sigaddset(&mut set, sig);
            }
            let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
            let fd = libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(Self {
                fd: OwnedFd::from_raw_fd(fd),
            })
        }
    }

    /// The fd, for `poll`.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Every signal pending now, in arrival order (standard signals
    /// coalesce: one SIGCHLD may stand for several children).
    pub fn drain(&self) -> Vec<Caught> {
        let mut caught = Vec::new();
        loop {
            // SAFETY: signalfd_siginfo is plain data; read fills at most
            // its size.
            let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
            let size = std::mem::size_of::<libc::signalfd_siginfo>();
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    (&mut info as *mut libc::signalfd_siginfo).cast(),
                    size,
                )
            };
            if n != size as isize {
                return caught;
            }
            match info.ssi_signo as i32 {
                libc::SIGTERM => caught.push(Caught::Term),
                libc::SIGINT => caught.push(Caught::Int),
                libc::SIGCHLD => caught.push(Caught::Child),
                _ => {}
            }
        }
    }
}
