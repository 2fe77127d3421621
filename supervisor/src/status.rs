//! What the supervisor knows about each deployment, kept current by the
//! deployment's task and read by `wfhost status` and the signal dump.

use std::time::Instant;

use serde::Serialize;

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

/// The live facts of one deployment.
#[derive(Debug, Clone)]
pub struct Status {
    /// Deployment id.
    pub id: String,
    /// Current state.
    pub state: State,
    /// Pid of the live child, if any.
    pub pid: Option<u32>,
    /// Channel id of the live child, if any.
    pub channel_id: Option<String>,
    /// When the live child was spawned.
    pub started_at: Option<Instant>,
    /// Restarts after unexpected exits, over the supervisor's life.
    pub restarts: u32,
    /// Why the last child ended, for operators asking "why".
    pub last_exit: Option<String>,
}

impl Status {
    /// A deployment that has not spawned anything yet.
    pub fn new(id: &str) -> Self {
        Self {
            id: id.to_owned(),
            state: State::Starting,
            pid: None,
            channel_id: None,
            started_at: None,
            restarts: 0,
            last_exit: None,
        }
    }

    /// The stable JSON shape of `wfhost status --json` (DESIGN §8).
    pub fn to_json(&self, now: Instant) -> serde_json::Value {
        let uptime_ms = self
            .started_at
            .map(|t| now.saturating_duration_since(t).as_millis() as u64)
            .unwrap_or(0);
        serde_json::json!({
            "id": self.id,
            "state": self.state,
            "pid": self.pid,
            "channel_id": self.channel_id,
            "uptime_ms": uptime_ms,
            "restarts": self.restarts,
            "last_exit": self.last_exit,
        })
    }
}
