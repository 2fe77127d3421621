//! Recycling (DESIGN §5): replacing a live child with a fresh one without
//! losing mail. The sequence, top to bottom, and where each step lives:
//!
//! 1. **trigger**: a policy bound passed (`host::policy_tick`, with the
//!    bounds, jitter and reason text below), an operator (`wfhost
//!    recycle`, SIGUSR1, a reload), or the child's `RecycleRequest`; each
//!    becomes a `Request::Recycle` with a typed `RecycleCause`. One under
//!    way absorbs the others (the machine's `merge` cells);
//! 2. **check**: [`vet`] below: a successor must be able to start, or the
//!    recycle is refused (`recycle_refused`) and the old child keeps
//!    serving;
//! 3. **drain** the old child under its budget (the machine's
//!    `start_drain`, the driver's `SendDrain`), waiting for `Drained` or
//!    `drain_deadline`; escalation as for any drain;
//! 4. **stop dispatching**: no mail is taken while the phase is not ready;
//!    what arrives waits in the durable inbox;
//! 5. **stop** the old child (SIGTERM, SIGKILL after `kill_timeout`) and
//!    **replay** its unacknowledged mail to the head of the inbox (the
//!    machine's `ended` cell: `ReplayMail`);
//! 6. **respawn** with a fresh channel id and freshly read grants (those
//!    checked in step 2 if the file broke meanwhile), wait for `Ready`;
//! 7. **install**: the `recycled` fact, the waiters get the new pid, and
//!    mail flows again (the machine's `became_ready` cell).

use std::time::{Duration, Instant};

use wfhost_policy::life::Fresh;
use wfhost_policy::recycle::{Jitter, RecycleBounds, Sample};

use super::grants;
use crate::config::DeploymentConfig;

/// What a new child needs that can be checked before the old one drains:
/// an executable program, and grants (read now, if the deployment has a
/// grants file, and handed to the new child should the file break while
/// the old one drains). A recycle whose successor could not start is
/// refused, and the old child keeps serving, rather than being replaced by
/// none.
pub fn vet(cfg: &DeploymentConfig) -> Result<Option<Fresh>, String> {
    if let Some(program) = cfg.command.first() {
        nix::unistd::access(program.as_str(), nix::unistd::AccessFlags::X_OK).map_err(|e| {
            format!("command {program} cannot be run ({e}); restore it or fix the config")
        })?;
    }
    cfg.grants_file.as_deref().map(grants::read).transpose()
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
