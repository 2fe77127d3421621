//! Recycling: who asked for a replacement child and why, and the policy
//! check that asks on its own (DESIGN §5). The sequence itself (drain,
//! replay, stop dispatching, kill, respawn, install) is carried out by the
//! deployment task and the live child.

use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::oneshot;
use wfhost_policy::recycle::{Jitter, RecycleBounds, Sample};

use crate::config::DeploymentConfig;
use crate::grants;

/// Who triggered a recycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// A bound (uptime, RSS, grant age) was passed.
    Policy,
    /// An operator: `wfhost recycle`, SIGUSR1 or a config reload.
    Operator,
    /// The child asked with `RecycleRequest`.
    #[serde(rename = "self")]
    SelfRequest,
}

impl Origin {
    /// The name in status, the journal and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Policy => "policy",
            Self::Operator => "operator",
            Self::SelfRequest => "self",
        }
    }
}

/// A reply owed to an operator waiting for the new child's pid.
pub type Reply = oneshot::Sender<Result<u32, String>>;

/// A recycle under way: the first trigger's origin and reason, and every
/// waiter (later triggers are absorbed into it).
#[derive(Debug)]
pub struct Trigger {
    /// Who asked first.
    pub origin: Origin,
    /// Why, in words (`max_rss`, the operator's `--reason`, the child's).
    pub reason: String,
    /// Operators waiting for the new pid.
    pub replies: Vec<Reply>,
    /// The grants read when the recycle began: the new child's, should the
    /// file break while the old child drains.
    pub grants: Option<grants::Fresh>,
}

impl Trigger {
    /// A new trigger with an optional waiter.
    pub fn new(origin: Origin, reason: String, reply: Option<Reply>) -> Self {
        Self {
            origin,
            reason,
            replies: reply.into_iter().collect(),
            grants: None,
        }
    }

    /// Tells every waiter how it ended.
    pub fn answer(self, result: Result<u32, String>) {
        for reply in self.replies {
            let _ = reply.send(result.clone());
        }
    }
}

/// The recycle bounds of a deployment in policy terms.
pub fn bounds(cfg: &DeploymentConfig) -> RecycleBounds {
    RecycleBounds {
        max_uptime: cfg.recycle.max_uptime,
        max_rss: cfg.recycle.max_rss,
        max_grants_age: cfg.recycle.max_grants_age,
        jitter_percent: cfg.recycle.jitter_percent,
    }
}

/// The per-child jitter: seeded by the channel id so each child of a fleet
/// recycles at its own moment, and a given child always at the same one.
pub fn jitter(channel_id: &str) -> Jitter {
    let seed = channel_id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    Jitter::from_seed(seed)
}

/// One policy tick's facts about a child.
pub fn sample(
    started_at: Instant,
    rss_bytes: Option<u64>,
    grants_read_at: Option<Instant>,
    now: Instant,
) -> Sample {
    Sample {
        uptime: now.saturating_duration_since(started_at),
        rss_bytes,
        grants_age: grants_read_at.map(|t| now.saturating_duration_since(t)),
    }
}

/// The reason text for a policy recycle, e.g. `max_rss: 540000000 bytes > 536870912`.
pub fn policy_reason(
    reason: wfhost_policy::recycle::RecycleReason,
    sample: &Sample,
    bounds: &RecycleBounds,
) -> String {
    use wfhost_policy::recycle::RecycleReason::*;
    let ms = |d: Option<Duration>| d.map(|d| d.as_millis()).unwrap_or(0);
    match reason {
        MaxUptime => format!(
            "max_uptime: up {} ms, bound {} ms",
            sample.uptime.as_millis(),
            ms(bounds.max_uptime)
        ),
        MaxRss => format!(
            "max_rss: {} bytes resident, bound {} bytes",
            sample.rss_bytes.unwrap_or(0),
            bounds.max_rss.unwrap_or(0)
        ),
        MaxGrantsAge => format!(
            "max_grants_age: grants {} ms old, bound {} ms",
            ms(sample.grants_age),
            ms(bounds.max_grants_age)
        ),
    }
}
