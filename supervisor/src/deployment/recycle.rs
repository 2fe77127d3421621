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

use std::time::{Duration, Instant, SystemTime};

use wfhost_policy::life::Fresh;
use wfhost_policy::recycle::{Jitter, RecycleBounds, Sample};

use super::grants;
use crate::config::DeploymentConfig;
use crate::localtime;

/// What a new child needs that can be checked before the old one drains:
/// an executable program, and grants (read now, if the deployment has a
/// grants file, and handed to the new child should the file break while
/// the old one drains). A recycle whose successor could not start is
/// refused, and the old child keeps serving, rather than being replaced by
/// none.
pub async fn vet(cfg: &DeploymentConfig) -> Result<Option<Fresh>, String> {
    if let Some(program) = cfg.command.first() {
        nix::unistd::access(program.as_str(), nix::unistd::AccessFlags::X_OK).map_err(|e| {
            format!("command {program} cannot be run ({e}); restore it or fix the config")
        })?;
    }
    match cfg.grants_file.as_deref() {
        Some(path) => grants::read(cfg, path).await.map(Some),
        None => Ok(None),
    }
}

/// The recycle bounds of a deployment in policy terms.
pub fn bounds(cfg: &DeploymentConfig) -> RecycleBounds {
    RecycleBounds {
        max_uptime: cfg.recycle.max_uptime,
        max_rss: cfg.recycle.max_rss,
        max_grants_age: cfg.recycle.max_grants_age,
        max_mail: cfg.recycle.max_mail,
        jitter_percent: cfg.recycle.jitter_percent,
    }
}

/// A child's moment to be recycled by the clock, and the reason it names.
#[derive(Debug, Clone)]
pub struct Planned {
    /// When.
    pub at: SystemTime,
    /// `schedule: …`, for the journal and status.
    pub reason: String,
}

/// When `recycle.at` recycles a child ready at `ready_at`: the first
/// scheduled minute after it, delayed by the child's jitter share of the
/// gap to the scheduled minute after that (so with `jitter = "10%"` a
/// daily 03:00 spreads a fleet over 03:00–05:24).
pub fn planned(cfg: &DeploymentConfig, jitter: Jitter, ready_at: SystemTime) -> Option<Planned> {
    let schedule = &cfg.recycle.at;
    if schedule.is_empty() {
        return None;
    }
    let first = schedule.next_after(localtime::civil_of(ready_at)?)?;
    let at = localtime::time_of(first)?;
    let gap = schedule
        .next_after(first)
        .and_then(localtime::time_of)
        .and_then(|next| next.duration_since(at).ok())
        .unwrap_or_default();
    let delay = gap.saturating_sub(jitter.shorten(gap, cfg.recycle.jitter_percent));
    let reason = if delay.is_zero() {
        format!("schedule: recycle.at came at {first} local time")
    } else {
        format!(
            "schedule: recycle.at came at {first} local time (+{} jitter)",
            wfhost_policy::format_duration(delay)
        )
    };
    Some(Planned {
        at: at + delay,
        reason,
    })
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
    planned: Option<&Planned>,
    now: Instant,
) -> Sample {
    Sample {
        uptime: now.saturating_duration_since(started_at),
        rss_bytes,
        grants_age: grants_read_at.map(|t| now.saturating_duration_since(t)),
        scheduled: planned.is_some_and(|p| SystemTime::now() >= p.at),
    }
}

/// The reason text for a policy recycle, e.g. `max_rss: 540000000 bytes > 536870912`.
pub fn policy_reason(
    reason: wfhost_policy::recycle::RecycleReason,
    sample: &Sample,
    bounds: &RecycleBounds,
    planned: Option<&Planned>,
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
        MaxMail => format!(
            "max_mail: {} items acknowledged since ready",
            bounds.max_mail.unwrap_or(0)
        ),
        Schedule => planned.map_or_else(|| "schedule".to_owned(), |p| p.reason.clone()),
        // Asked by the deployment's task with its own words, never a tick.
        MailDeadline => "mail_deadline".to_owned(),
    }
}

/// The reason text of a `max_mail` recycle.
pub fn mail_reason(done: u64, bounds: &RecycleBounds, jitter: Jitter) -> String {
    let max = bounds.max_mail.unwrap_or(0);
    match bounds.effective_max_mail(jitter) {
        Some(effective) if effective != max => {
            format!(
                "max_mail: {done} items acknowledged since ready, bound {max} (jittered to {effective})"
            )
        }
        _ => format!("max_mail: {done} items acknowledged since ready, bound {max}"),
    }
}
