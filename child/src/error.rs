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

/// Why [`Mail::ask`](crate::Mail::ask) or
/// [`Mail::progress`](crate::Mail::progress) failed. The checks on what is
/// sent (protocol, key, sizes) fail before anything is sent, so the
/// supervisor never sees a question or a report it would take for a
/// protocol violation.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AskError {
    /// The supervisor speaks protocol 2, which has neither questions nor
    /// progress.
    #[error(
        "{what} needs protocol 3, but this child speaks protocol {protocol} with its supervisor; nothing was sent"
    )]
    Unsupported {
        /// `"ask"` or `"progress"`.
        what: &'static str,
        /// The protocol version spoken.
        protocol: u32,
    },
    /// The question's key is empty or longer than 256 bytes.
    #[error("a question's key must be 1 to 256 bytes of UTF-8, not {0} bytes; nothing was sent")]
    BadKey(usize),
    /// The prompt or the progress data could not be written as JSON.
    #[error("{what} cannot be written as JSON: {reason}; nothing was sent")]
    NotJson {
        /// `"prompt"` or `"progress data"`.
        what: &'static str,
        /// What serde_json said.
        reason: String,
    },
    /// The prompt or the progress data is over 64 KiB as JSON.
    #[error("{what} is {bytes} bytes of JSON, over the limit of 65536; nothing was sent")]
    TooLarge {
        /// `"prompt"` or `"progress data"`.
        what: &'static str,
        /// Its size as JSON.
        bytes: usize,
    },
    /// The event would not fit in a frame of the Welcome's
    /// `max_frame_bytes`.
    #[error(
        "{event} of {bytes} bytes does not fit in a frame of max_frame_bytes {max_frame_bytes}; nothing was sent"
    )]
    FrameTooLarge {
        /// `"Ask"` or `"Progress"`.
        event: &'static str,
        /// The frame body's size.
        bytes: usize,
        /// The Welcome's `max_frame_bytes`.
        max_frame_bytes: u32,
    },
    /// The item already has 64 distinct questions, the most the
    /// supervisor keeps for one item.
    #[error(
        "mail item {0} already asked 64 distinct questions, the most one item may ask; nothing was sent"
    )]
    TooManyQuestions(u64),
    /// A drain began (or the lease ran out) while the handler waited for
    /// an answer, or before it asked: the item went back to the
    /// supervisor, which delivers it again once the question is answered.
    /// Let this error pass: the item is no longer this child's, so its
    /// end is not reported.
    #[error(
        "mail item {0} was given back to the supervisor while waiting for an answer (this child is draining); it will be delivered again once the question is answered"
    )]
    GivenBack(u64),
    /// The item was cancelled (a verified `CancelMail`), or the runtime
    /// closed, while the handler waited: end the item `Cancelled`.
    #[error("ask of mail item {id} cancelled ({})", .cause.as_str())]
    Cancelled {
        /// The item.
        id: u64,
        /// Why: [`CancelCause::Cancel`] for a cancel of the item.
        cause: CancelCause,
    },
    /// The supervisor's answer is not JSON (it checks answers, so this
    /// is a broken supervisor).
    #[error("the answer to question {key:?} is not JSON: {reason}")]
    BadAnswer {
        /// The question's key.
        key: String,
        /// What serde_json said.
        reason: String,
    },
}
