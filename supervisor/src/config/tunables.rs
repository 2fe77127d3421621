//! The scalar settings of a deployment (timeouts, sizes, limits, the
//! recycle and restart tables), merged key by key; [`check`] holds the
//! bounds they must keep, alone and against each other.

use std::ops::Range;
use std::time::Duration;

use toml::Spanned;

use super::build::{Setting, dur, pick, pick_opt, size};
use super::error::Problem;
use super::raw::RawCommon;
use super::units::{DurationValue, SizeValue};
use super::*;

mod check;

/// The scalar (non-path, non-identity) settings of a deployment, merged.
pub(super) struct Tunables {
    pub(super) drain_timeout: Setting<Duration>,
    pub(super) drain_deadline: Setting<Duration>,
    pub(super) kill_timeout: Setting<Duration>,
    pub(super) ready_timeout: Setting<Duration>,
    pub(super) liveness_interval: Setting<Duration>,
    pub(super) liveness_timeout: Setting<Duration>,
    pub(super) max_frame_bytes: Setting<u64>,
    pub(super) max_mail_bytes: Setting<u64>,
    pub(super) max_result_bytes: Setting<u64>,
    pub(super) mail_deadline: Setting<Option<Duration>>,
    pub(super) max_inbox: Setting<u64>,
    pub(super) max_deliveries: Setting<u64>,
    pub(super) max_uptime: Setting<Option<Duration>>,
    pub(super) max_rss: Setting<Option<u64>>,
    pub(super) max_grants_age: Setting<Option<Duration>>,
    pub(super) jitter: Setting<u32>,
    pub(super) max_mail: Setting<Option<u64>>,
    pub(super) at: Setting<Vec<String>>,
    pub(super) overlap: Setting<bool>,
    pub(super) replicas: Setting<u32>,
    pub(super) backoff_initial: Setting<Duration>,
    pub(super) backoff_max: Setting<Duration>,
    pub(super) max_restarts: Setting<u32>,
    pub(super) period: Setting<Duration>,
    pub(super) healthy_after: Setting<Duration>,
}

impl Tunables {
    /// `recycle.at`, parsed; the error points at the list.
    pub(super) fn schedule(
        &self,
        table: &Range<usize>,
    ) -> Result<wfhost_policy::schedule::Schedule, Problem> {
        wfhost_policy::schedule::Schedule::parse(&self.at.value).map_err(|why| {
            Problem::new(
                self.at.at(table),
                why,
                "write \"HH:MM\" (local time) or five cron fields, e.g. at = [\"03:00\"] or [\"0 */6 * * *\"]",
            )
        })
    }

    /// The recycle table as the deployment runs it, `at` parsed by
    /// [`Self::schedule`].
    pub(super) fn recycle(&self, at: wfhost_policy::schedule::Schedule) -> RecycleSettings {
        RecycleSettings {
            max_uptime: self.max_uptime.value,
            max_rss: self.max_rss.value,
            max_grants_age: self.max_grants_age.value,
            jitter_percent: self.jitter.value,
            max_mail: self.max_mail.value,
            at,
            overlap: self.overlap.value,
        }
    }

    /// The restart table as the deployment runs it.
    pub(super) fn restart(&self) -> RestartSettings {
        RestartSettings {
            backoff_initial: self.backoff_initial.value,
            backoff_max: self.backoff_max.value,
            max_restarts: self.max_restarts.value,
            period: self.period.value,
            healthy_after: self.healthy_after.value,
        }
    }

    /// Merges the deployment's own scalar keys with `[defaults]`.
    pub(super) fn merge(own: RawCommon, d: &RawCommon) -> Self {
        let own_recycle = own.recycle.unwrap_or_default();
        let def_recycle = d.recycle.clone().unwrap_or_default();
        let (r, dr) = (own_recycle, &def_recycle);
        let own_restart = own.restart.unwrap_or_default();
        let def_restart = d.restart.clone().unwrap_or_default();
        let (t, dt) = (own_restart, &def_restart);
        Self {
            drain_timeout: timed(own.drain_timeout, &d.drain_timeout, defaults::DRAIN_TIMEOUT),
            drain_deadline: timed(
                own.drain_deadline,
                &d.drain_deadline,
                defaults::DRAIN_DEADLINE,
            ),
            kill_timeout: timed(own.kill_timeout, &d.kill_timeout, defaults::KILL_TIMEOUT),
            ready_timeout: timed(own.ready_timeout, &d.ready_timeout, defaults::READY_TIMEOUT),
            liveness_interval: timed(
                own.liveness_interval,
                &d.liveness_interval,
                defaults::LIVENESS_INTERVAL,
            ),
            liveness_timeout: timed(
                own.liveness_timeout,
                &d.liveness_timeout,
                defaults::LIVENESS_TIMEOUT,
            ),
            max_frame_bytes: sized(
                own.max_frame_bytes,
                &d.max_frame_bytes,
                defaults::MAX_FRAME_BYTES,
            ),
            max_mail_bytes: sized(
                own.max_mail_bytes,
                &d.max_mail_bytes,
                defaults::MAX_MAIL_BYTES,
            ),
            max_result_bytes: sized(
                own.max_result_bytes,
                &d.max_result_bytes,
                defaults::MAX_RESULT_BYTES,
            ),
            mail_deadline: pick_opt(own.mail_deadline, &d.mail_deadline, dur),
            max_inbox: as_written(own.max_inbox, &d.max_inbox, defaults::MAX_INBOX),
            max_deliveries: as_written(
                own.max_deliveries,
                &d.max_deliveries,
                defaults::MAX_DELIVERIES,
            ),
            max_uptime: pick_opt(r.max_uptime, &dr.max_uptime, dur),
            max_rss: pick_opt(r.max_rss, &dr.max_rss, size),
            max_grants_age: pick_opt(r.max_grants_age, &dr.max_grants_age, dur),
            jitter: pick(r.jitter, &dr.jitter, 0, |p| *p.get()),
            max_mail: pick_opt(r.max_mail, &dr.max_mail, |n| *n),
            at: pick(r.at, &dr.at, Vec::new(), |v| {
                v.iter().map(|t| t.0.clone()).collect()
            }),
            overlap: as_written(r.overlap, &dr.overlap, false),
            replicas: as_written(own.replicas, &d.replicas, 1),
            backoff_initial: timed(
                t.backoff_initial,
                &dt.backoff_initial,
                defaults::BACKOFF_INITIAL,
            ),
            backoff_max: timed(t.backoff_max, &dt.backoff_max, defaults::BACKOFF_MAX),
            max_restarts: as_written(t.max_restarts, &dt.max_restarts, defaults::MAX_RESTARTS),
            healthy_after: timed(t.healthy_after, &dt.healthy_after, defaults::HEALTHY_AFTER),
            period: timed(t.period, &dt.period, defaults::RESTART_PERIOD),
        }
    }
}

/// [`pick`] for a duration.
fn timed(
    own: Option<Spanned<DurationValue>>,
    d: &Option<Spanned<DurationValue>>,
    builtin: Duration,
) -> Setting<Duration> {
    pick(own, d, builtin, dur)
}

/// [`pick`] for a size.
fn sized(
    own: Option<Spanned<SizeValue>>,
    d: &Option<Spanned<SizeValue>>,
    builtin: u64,
) -> Setting<u64> {
    pick(own, d, builtin, size)
}

/// [`pick`] for a number or flag taken as written.
fn as_written<V: Copy>(own: Option<Spanned<V>>, d: &Option<Spanned<V>>, builtin: V) -> Setting<V> {
    pick(own, d, builtin, |v| *v)
}
