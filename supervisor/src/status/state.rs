//! A deployment's state as operators see it: the phase of its life,
//! named.

use serde::Serialize;
use wfhost_policy::life::Phase;

/// A deployment's place in its life (DESIGN §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// A child was spawned and has not sent `Ready` yet.
    Starting,
    /// The child is taking work.
    Ready,
    /// The child was asked to wind down.
    Draining,
    /// The child is being stopped (SIGTERM sent, SIGKILL pending).
    Stopping,
    /// No child, and none will be started (supervisor stopping).
    Exited,
    /// Waiting before the next restart.
    Backoff,
    /// Too many restarts within the period; not restarted.
    Failed,
    /// Drained by an operator; not restarted until resumed.
    Drained,
}

impl State {
    /// The state operators see for a phase of a deployment's life.
    pub fn of<W>(phase: &Phase<W>) -> Self {
        match phase {
            Phase::Starting { .. } => Self::Starting,
            Phase::Ready { .. } => Self::Ready,
            Phase::Draining { .. } => Self::Draining,
            Phase::Stopping { .. } | Phase::Closing { .. } => Self::Stopping,
            Phase::Backoff { .. } => Self::Backoff,
            Phase::Drained { .. } => Self::Drained,
            Phase::Failed => Self::Failed,
            Phase::Exited => Self::Exited,
        }
    }

    /// The lower-case name shown to operators.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Ready => "ready",
            Self::Draining => "draining",
            Self::Stopping => "stopping",
            Self::Exited => "exited",
            Self::Backoff => "backoff",
            Self::Failed => "failed",
            Self::Drained => "drained",
        }
    }
}
