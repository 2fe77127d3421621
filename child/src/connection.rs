//! Taking the inherited control fd and the handshake: `Hello` up,
//! `Welcome` down (the child end of `wfhost_ipc::channel`).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::UnixStream;
use wfhost_ipc::{ChildEnd, Hello, Welcomed};

use crate::env::ChildEnv;
use crate::error::ConnectError;
use crate::options::Options;

/// Set once the process has taken its control fd, which it may do only once.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// Takes ownership of the inherited control fd: checks it is an open
/// socket, marks it close-on-exec (so the application's own children never
/// inherit it) and non-blocking, and wraps it for tokio.
pub(crate) fn take_control_fd(fd: RawFd) -> Result<UnixStream, ConnectError> {
    let fd_err = |source: std::io::Error| ConnectError::Fd { fd, source };
    // SAFETY: F_GETFD only reads the descriptor flags of `fd`.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(fd_err(std::io::Error::last_os_error()));
    }
    // SAFETY: `st` is a plain struct the kernel fills; `fd` is open.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &mut st) } < 0 {
        return Err(fd_err(std::io::Error::last_os_error()));
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(fd_err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a socket",
        )));
    }
    if TAKEN.swap(true, Ordering::SeqCst) {
        return Err(ConnectError::AlreadyConnected);
    }
    // SAFETY: the fd is open (checked above), was inherited for this purpose,
    // and the TAKEN flag guarantees nothing else in this process owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: F_SETFD with FD_CLOEXEC on an fd we own.
    if unsafe { libc::fcntl(owned.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(fd_err(std::io::Error::last_os_error()));
    }
    let std_stream = std::os::unix::net::UnixStream::from(owned);
    std_stream.set_nonblocking(true).map_err(fd_err)?;
    UnixStream::from_std(std_stream).map_err(fd_err)
}

/// Sends `Hello` and waits for a `Welcome` of this protocol version for
/// this deployment, through the child end of the channel.
pub(crate) async fn handshake(
    stream: UnixStream,
    env: &ChildEnv,
    options: &Options,
) -> Result<Welcomed, ConnectError> {
    let hello = Hello {
        protocol: env.protocol,
        channel_id: env.channel_id.clone(),
        pid: std::process::id(),
        takes_mail: options.takes_mail,
        implementation: options.implementation.clone(),
    };
    let welcomed = ChildEnd::new(stream).handshake(hello).await?;
    if welcomed.welcome.deployment != env.deployment {
        return Err(ConnectError::WrongDeployment {
            welcome: welcomed.welcome.deployment,
            env: env.deployment.clone(),
        });
    }
    Ok(welcomed)
}
