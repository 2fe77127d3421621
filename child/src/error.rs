//! What can go wrong: before the runtime exists (connecting), while it runs
//! (the channel closed, an event too large), and inside a step.

use std::io;
use std::os::fd::RawFd;

use thiserror::Error;
use wfhost_ipc::HandshakeError;

use crate::cause::CancelCause;
use crate::env::EnvError;

/// Why [`Runtime::connect`](crate::Runtime::connect) failed.
#[derive(Debug, Error)]
pub enum ConnectError {
    /// A `WFHOST_*` variable is missing or unusable.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// The process already took the control channel; there is only one.
    #[error("the control channel was already taken by an earlier Runtime::connect in this process")]
    AlreadyConnected,
    /// The fd named by `WFHOST_CONTROL_FD` is not a usable socket.
    #[error(
        "control fd {fd} (WFHOST_CONTROL_FD) is unusable: {source}; this process must be started by `wfhost supervise`"
    )]
    Fd {
        /// The fd number.
        fd: RawFd,
        /// What the OS said.
        #[source]
        source: io::Error,
    },
    /// The channel failed during the handshake, or the supervisor answered
    /// `Hello` with something other than a `Welcome` of this protocol.
    #[error("handshake with the supervisor failed: {0}")]
    Handshake(#[from] HandshakeError),
    /// The Welcome is for another deployment than `WFHOST_DEPLOYMENT`.
    #[error(
        "handshake with the supervisor failed: Welcome is for deployment {welcome:?} but WFHOST_DEPLOYMENT is {env:?}"
    )]
    WrongDeployment {
        /// The deployment the Welcome names.
        welcome: String,
        /// The deployment of the environment.
        env: String,
    },
}

/// Why the runtime could not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RuntimeError {
    /// The control channel is closed; nothing more reaches the supervisor.
    #[error("control channel is closed ({0}); the supervisor is gone or asked this child to stop")]
    Closed(String),
    /// The event would exceed the supervisor's `max_frame_bytes`, which it
    /// treats as a violation; it was not sent.
    #[error("{event} event not sent: {reason}; send less data per event")]
    TooLarge {
        /// The event's name.
        event: &'static str,
        /// The size problem.
        reason: String,
    },
    /// A mail item's result would not fit in a frame of the supervisor's
    /// `max_frame_bytes`: the item was reported `Failed` without it.
    #[error(
        "result of {bytes} bytes does not fit in a frame of max_frame_bytes {max_frame_bytes}; the item was reported Failed without it"
    )]
    ResultTooLarge {
        /// The result's size.
        bytes: usize,
        /// The Welcome's `max_frame_bytes`.
        max_frame_bytes: u32,
    },
}

/// How a step run with [`Runtime::step`](crate::Runtime::step) ended other
/// than with its output.
#[derive(Debug, Error)]
pub enum StepError<E> {
    /// The step returned an error (reported as `Failed`).
    #[error("step failed: {0}")]
    Failed(E),
    /// The step was stopped by drain, a verified cancel, shutdown or the
    /// loss of the channel (reported as `Cancelled`).
    #[error("step cancelled ({})", .0.as_str())]
    Cancelled(CancelCause),
    /// The step could not be reported, so it was not run.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}
