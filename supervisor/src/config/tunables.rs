//! The scalar settings of a deployment (timeouts, sizes, limits, the
//! recycle and restart tables), merged key by key and checked against
//! each other.

use std::ops::Range;
use std::time::Duration;

use super::build::{Setting, dur, pick, pick_opt, size};
use super::error::Problem;
use super::raw::RawCommon;
use super::*;

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

/// Most children one deployment may run side by side.
const MAX_REPLICAS: u32 = 256;

/// The shortest `recycle.max_uptime` and `max_grants_age`.
const MIN_RECYCLE_BOUND: Duration = Duration::from_millis(100);
const RECYCLE_WHY: &str = "a child recycled sooner than it can be spawned and ready would be replaced before it \
                           served; use e.g. \"6h\", or remove the key to disable this bound";

/// A refusal of duration `key` (at `span`) shorter than `floor`.
fn too_short(
    key: &str,
    span: Range<usize>,
    value: Duration,
    floor: Duration,
    why: &str,
) -> Problem {
    let what = if value.is_zero() {
        format!("{key} is zero")
    } else {
        format!(
            "{key} {} is shorter than {}",
            format_duration(value),
            format_duration(floor)
        )
    };
    Problem::new(
        span,
        what,
        format!("give at least \"{}\": {why}", format_duration(floor)),
    )
}

impl Tunables {
    /// The shortest value of each duration a working child can meet, and
    /// why: below these a deployment could only fail, or restart-loop at
    /// once (DESIGN §8's table of bounds says the same).
    fn floors(&self) -> [(&'static str, &Setting<Duration>, Duration, &'static str); 9] {
        let ms = Duration::from_millis;
        [
            (
                "ready_timeout",
                &self.ready_timeout,
                ms(100),
                "a spawn, the child's own start-up and its handshake take milliseconds even for the \
                 smallest child, tens of them on a busy machine (the default is \"10s\")",
            ),
            (
                "liveness_interval",
                &self.liveness_interval,
                ms(10),
                "a ping more often than that is load, not liveness (the default is \"10s\")",
            ),
            (
                "liveness_timeout",
                &self.liveness_timeout,
                ms(100),
                "a healthy child descheduled for a few tens of milliseconds on a busy machine must not \
                 be killed as hung (the default is \"30s\")",
            ),
            (
                "kill_timeout",
                &self.kill_timeout,
                ms(10),
                "a child needs a few milliseconds to act on SIGTERM before it is killed (the default is \"10s\")",
            ),
            (
                "drain_timeout",
                &self.drain_timeout,
                ms(10),
                "the child needs a few milliseconds to hear the drain before its budget can run out \
                 (the default is \"60s\")",
            ),
            (
                "drain_deadline",
                &self.drain_deadline,
                ms(10),
                "the child needs a few milliseconds to drain before it is killed (the default is \"90s\")",
            ),
            (
                "restart.backoff_max",
                &self.backoff_max,
                ms(10),
                "restarts with no delay between them are a busy loop (the default is \"30s\")",
            ),
            (
                "restart.period",
                &self.period,
                Duration::from_secs(1),
                "each restart takes a spawn and a handshake; in a shorter window too few fit to reach \
                 max_restarts, and a crash loop would run forever instead of failing (the default is \"60s\")",
            ),
            (
                "restart.healthy_after",
                &self.healthy_after,
                ms(100),
                "a crash after a shorter run would count as healthy, be restarted at once and never \
                 counted, so a crash loop would never fail (the default is \"1s\")",
            ),
        ]
    }

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

    /// Merges the deployment's own scalar keys with `[defaults]`.
    pub(super) fn merge(own: RawCommon, d: &RawCommon) -> Self {
        let own_recycle = own.recycle.unwrap_or_default();
        let def_recycle = d.recycle.clone().unwrap_or_default();
        let own_restart = own.restart.unwrap_or_default();
        let def_restart = d.restart.clone().unwrap_or_default();
        Self {
            drain_timeout: pick(
                own.drain_timeout,
                &d.drain_timeout,
                defaults::DRAIN_TIMEOUT,
                dur,
            ),
            drain_deadline: pick(
                own.drain_deadline,
                &d.drain_deadline,
                defaults::DRAIN_DEADLINE,
                dur,
            ),
            kill_timeout: pick(
                own.kill_timeout,
                &d.kill_timeout,
                defaults::KILL_TIMEOUT,
                dur,
            ),
            ready_timeout: pick(
                own.ready_timeout,
                &d.ready_timeout,
                defaults::READY_TIMEOUT,
                dur,
            ),
            liveness_interval: pick(
                own.liveness_interval,
                &d.liveness_interval,
                defaults::LIVENESS_INTERVAL,
                dur,
            ),
            liveness_timeout: pick(
                own.liveness_timeout,
                &d.liveness_timeout,
                defaults::LIVENESS_TIMEOUT,
                dur,
            ),
            max_frame_bytes: pick(
                own.max_frame_bytes,
                &d.max_frame_bytes,
                defaults::MAX_FRAME_BYTES,
                size,
            ),
            max_mail_bytes: pick(
                own.max_mail_bytes,
                &d.max_mail_bytes,
                defaults::MAX_MAIL_BYTES,
                size,
            ),
            max_inbox: pick(own.max_inbox, &d.max_inbox, defaults::MAX_INBOX, |n| *n),
            max_deliveries: pick(
                own.max_deliveries,
                &d.max_deliveries,
                defaults::MAX_DELIVERIES,
                |n| *n,
            ),
            max_uptime: pick_opt(own_recycle.max_uptime, &def_recycle.max_uptime, dur),
            max_rss: pick_opt(own_recycle.max_rss, &def_recycle.max_rss, size),
            max_grants_age: pick_opt(own_recycle.max_grants_age, &def_recycle.max_grants_age, dur),
            jitter: pick(own_recycle.jitter, &def_recycle.jitter, 0, |p| *p.get()),
            max_mail: pick_opt(own_recycle.max_mail, &def_recycle.max_mail, |n| *n),
            at: pick(own_recycle.at, &def_recycle.at, Vec::new(), |v| {
                v.iter().map(|t| t.0.clone()).collect()
            }),
            overlap: pick(own_recycle.overlap, &def_recycle.overlap, false, |b| *b),
            replicas: pick(own.replicas, &d.replicas, 1, |n| *n),
            backoff_initial: pick(
                own_restart.backoff_initial,
                &def_restart.backoff_initial,
                defaults::BACKOFF_INITIAL,
                dur,
            ),
            backoff_max: pick(
                own_restart.backoff_max,
                &def_restart.backoff_max,
                defaults::BACKOFF_MAX,
                dur,
            ),
            max_restarts: pick(
                own_restart.max_restarts,
                &def_restart.max_restarts,
                defaults::MAX_RESTARTS,
                |n| *n,
            ),
            healthy_after: pick(
                own_restart.healthy_after,
                &def_restart.healthy_after,
                defaults::HEALTHY_AFTER,
                dur,
            ),
            period: pick(
                own_restart.period,
                &def_restart.period,
                defaults::RESTART_PERIOD,
                dur,
            ),
        }
    }

    /// Checks every bound; errors point at the value that breaks it.
    pub(super) fn check(&self, table: &Range<usize>, has_grants_file: bool) -> Result<(), Problem> {
        for (key, s, floor, why) in self.floors() {
            if s.value < floor {
                return Err(too_short(key, s.at(table), s.value, floor, why));
            }
        }
        for (key, s, floor, why) in [
            (
                "recycle.max_uptime",
                &self.max_uptime,
                MIN_RECYCLE_BOUND,
                RECYCLE_WHY,
            ),
            (
                "recycle.max_grants_age",
                &self.max_grants_age,
                MIN_RECYCLE_BOUND,
                RECYCLE_WHY,
            ),
        ] {
            if let Some(d) = s.value
                && d < floor
            {
                return Err(too_short(key, s.at(table), d, floor, why));
            }
        }
        if self.drain_deadline.value < self.drain_timeout.value {
            let s = if self.drain_deadline.span.is_some() {
                &self.drain_deadline
            } else {
                &self.drain_timeout
            };
            return Err(Problem::new(
                s.at(table),
                format!(
                    "drain_deadline ({}) is shorter than drain_timeout ({})",
                    format_duration(self.drain_deadline.value),
                    format_duration(self.drain_timeout.value)
                ),
                "a recycle would kill the child before its drain budget could escalate to a signed cancel: make drain_deadline at least drain_timeout",
            ));
        }
        if self.liveness_timeout.value <= self.liveness_interval.value {
            let s = if self.liveness_timeout.span.is_some() {
                &self.liveness_timeout
            } else {
                &self.liveness_interval
            };
            return Err(Problem::new(
                s.at(table),
                format!(
                    "liveness_timeout ({}) must be longer than liveness_interval ({})",
                    format_duration(self.liveness_timeout.value),
                    format_duration(self.liveness_interval.value)
                ),
                "allow at least one missed ping, e.g. liveness_interval = \"10s\", liveness_timeout = \"30s\"",
            ));
        }
        let frame = self.max_frame_bytes.value;
        let mail = self.max_mail_bytes.value;
        if frame > MAX_FRAME_BYTES {
            return Err(Problem::new(
                self.max_frame_bytes.at(table),
                format!(
                    "max_frame_bytes {} is above the protocol's limit",
                    format_size(frame)
                ),
                "use at most \"64MiB\" (the default is \"1MiB\")",
            ));
        }
        if mail == 0 {
            return Err(Problem::new(
                self.max_mail_bytes.at(table),
                "max_mail_bytes is zero, so no mail could ever be sent",
                "allow at least one byte (the default is \"256KiB\")",
            ));
        }
        let carried = crate::control::protocol::MAX_SEND_PAYLOAD;
        if mail > carried {
            return Err(Problem::new(
                self.max_mail_bytes.at(table),
                format!(
                    "max_mail_bytes {} is more than the control socket carries in one send ({})",
                    format_size(mail),
                    format_size(carried)
                ),
                format!(
                    "use at most \"{}\" (the default is \"256KiB\"); pass bigger data by reference \
                     (a path or URL in the mail)",
                    format_size(carried)
                ),
            ));
        }
        if frame < mail.saturating_add(FRAME_HEADROOM) {
            let s = if self.max_frame_bytes.span.is_some() {
                &self.max_frame_bytes
            } else {
                &self.max_mail_bytes
            };
            return Err(Problem::new(
                s.at(table),
                format!(
                    "max_frame_bytes ({}) leaves no room for a max_mail_bytes ({}) payload",
                    format_size(frame),
                    format_size(mail)
                ),
                format!(
                    "make max_frame_bytes at least max_mail_bytes + 4KiB ({} bytes), or lower max_mail_bytes",
                    mail.saturating_add(FRAME_HEADROOM)
                ),
            ));
        }
        if !(1..=100_000_000).contains(&self.max_inbox.value) {
            return Err(Problem::new(
                self.max_inbox.at(table),
                format!("max_inbox {} is out of range", self.max_inbox.value),
                "keep between 1 and 100000000 messages (the default is 10000)",
            ));
        }
        if !(1..=1_000).contains(&self.max_deliveries.value) {
            return Err(Problem::new(
                self.max_deliveries.at(table),
                format!(
                    "max_deliveries {} is out of range",
                    self.max_deliveries.value
                ),
                "keep between 1 and 1000 deliveries (the default is 5): after that many children end holding an item, it is quarantined as dead",
            ));
        }
        if let Some(rss) = self.max_rss.value
            && rss < 1 << 20
        {
            return Err(Problem::new(
                self.max_rss.at(table),
                format!("recycle.max_rss {} is below 1MiB", format_size(rss)),
                "no process runs in less: the child would be recycled on every tick; use e.g. \"512MiB\"",
            ));
        }
        if self.max_grants_age.value.is_some() && !has_grants_file {
            return Err(Problem::new(
                self.max_grants_age.at(table),
                "recycle.max_grants_age is set but the deployment has no grants_file",
                "set grants_file, or remove max_grants_age",
            ));
        }
        if let Some(n) = self.max_mail.value
            && !(1..=1_000_000_000).contains(&n)
        {
            return Err(Problem::new(
                self.max_mail.at(table),
                format!("recycle.max_mail {n} is out of range"),
                "recycle after 1 to 1000000000 acknowledged items, e.g. 1000, or remove it",
            ));
        }
        if !(1..=MAX_REPLICAS).contains(&self.replicas.value) {
            return Err(Problem::new(
                self.replicas.at(table),
                format!("replicas {} is out of range", self.replicas.value),
                format!("run 1 to {MAX_REPLICAS} children per deployment (the default is 1)"),
            ));
        }
        if self.jitter.value > 50 {
            return Err(Problem::new(
                self.jitter.at(table),
                format!("recycle.jitter {}% is above 50%", self.jitter.value),
                "use at most \"50%\": more would let a bound be overshot by half again",
            ));
        }
        if self.backoff_initial.value > self.backoff_max.value {
            let s = if self.backoff_initial.span.is_some() {
                &self.backoff_initial
            } else {
                &self.backoff_max
            };
            return Err(Problem::new(
                s.at(table),
                format!(
                    "restart.backoff_initial ({}) is longer than restart.backoff_max ({})",
                    format_duration(self.backoff_initial.value),
                    format_duration(self.backoff_max.value)
                ),
                "make backoff_initial at most backoff_max",
            ));
        }
        if !(1..=10_000).contains(&self.max_restarts.value) {
            return Err(Problem::new(
                self.max_restarts.at(table),
                format!(
                    "restart.max_restarts {} is out of range",
                    self.max_restarts.value
                ),
                "allow between 1 and 10000 restarts per period (the default is 5)",
            ));
        }
        Ok(())
    }
}
