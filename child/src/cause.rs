//! Why work stops: a step's [`CancelCause`] and the runtime's
//! [`CloseReason`]. Plain values at the bottom of the crate, so the drain
//! rules and the lean exec shim use them without the async runtime.

/// Why a step is asked to stop, ordered by severity: a token only ever moves
/// to a more severe cause, so a drain can later escalate to a cancel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CancelCause {
    /// The child is draining and the step's drain behaviour is cancel.
    Drain,
    /// The supervisor's lease (`Lease`) ran out before a newer one came:
    /// the child drains on its own, as its supervisor may have lost the
    /// deployment to another host. Cancel-behaviour steps only.
    LeaseExpired,
    /// The supervisor sent `Shutdown`: the child should exit now.
    Shutdown,
    /// The control channel ended (the supervisor is gone or broke the protocol).
    Disconnected,
    /// A verified, signed cancel named the step's run (or every run).
    Cancel,
}

impl CancelCause {
    /// The lower-case name used in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Drain => "drain",
            Self::LeaseExpired => "lease-expired",
            Self::Shutdown => "shutdown",
            Self::Disconnected => "disconnected",
            Self::Cancel => "cancel",
        }
    }
}

/// Why the runtime closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseReason {
    /// The supervisor sent `Shutdown`: finish up and exit now.
    Shutdown,
    /// The supervisor closed the channel (it stopped or died).
    Disconnected,
    /// The channel failed or the supervisor broke the protocol.
    Failed(String),
}

impl CloseReason {
    /// The cause given to step tokens when the runtime closes for this reason.
    pub fn cancel_cause(&self) -> CancelCause {
        match self {
            Self::Shutdown => CancelCause::Shutdown,
            Self::Disconnected | Self::Failed(_) => CancelCause::Disconnected,
        }
    }
}
