//! The bounds a deployment's scalar settings must keep, alone and
//! against each other: each rule a small function, run in a fixed order
//! so a file that breaks several hears of the first.

use std::ops::Range;
use std::time::Duration;

use super::Tunables;
use crate::config::build::Setting;
use crate::config::error::Problem;
use crate::config::*;

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

    /// Checks every bound; errors point at the value that breaks it. The
    /// rules run in this order, so a file breaking several hears of the
    /// first.
    pub(in crate::config) fn check(
        &self,
        table: &Range<usize>,
        has_grants_file: bool,
    ) -> Result<(), Problem> {
        self.check_floors(table)?;
        self.check_drain_pair(table)?;
        self.check_liveness_pair(table)?;
        self.check_frame_and_mail(table)?;
        self.check_store_counts(table)?;
        self.check_recycle_bounds(table, has_grants_file)?;
        self.check_replicas(table)?;
        self.check_jitter(table)?;
        self.check_restart(table)
    }

    /// Every duration at least its floor, then the recycle bounds that
    /// are set at least [`MIN_RECYCLE_BOUND`].
    fn check_floors(&self, table: &Range<usize>) -> Result<(), Problem> {
        for (key, s, floor, why) in self.floors() {
            if s.value < floor {
                return Err(too_short(key, s.at(table), s.value, floor, why));
            }
        }
        for (key, s) in [
            ("recycle.max_uptime", &self.max_uptime),
            ("recycle.max_grants_age", &self.max_grants_age),
            ("mail_deadline", &self.mail_deadline),
        ] {
            if let Some(d) = s.value
                && d < MIN_RECYCLE_BOUND
            {
                return Err(too_short(
                    key,
                    s.at(table),
                    d,
                    MIN_RECYCLE_BOUND,
                    RECYCLE_WHY,
                ));
            }
        }
        Ok(())
    }

    /// The drain deadline leaves the budget room to escalate.
    fn check_drain_pair(&self, table: &Range<usize>) -> Result<(), Problem> {
        if self.drain_deadline.value >= self.drain_timeout.value {
            return Ok(());
        }
        Err(Problem::new(
            written_first(&self.drain_deadline, &self.drain_timeout, table),
            format!(
                "drain_deadline ({}) is shorter than drain_timeout ({})",
                format_duration(self.drain_deadline.value),
                format_duration(self.drain_timeout.value)
            ),
            "a recycle would kill the child before its drain budget could escalate to a signed cancel: make drain_deadline at least drain_timeout",
        ))
    }

    /// The liveness timeout allows at least one missed ping.
    fn check_liveness_pair(&self, table: &Range<usize>) -> Result<(), Problem> {
        if self.liveness_timeout.value > self.liveness_interval.value {
            return Ok(());
        }
        Err(Problem::new(
            written_first(&self.liveness_timeout, &self.liveness_interval, table),
            format!(
                "liveness_timeout ({}) must be longer than liveness_interval ({})",
                format_duration(self.liveness_timeout.value),
                format_duration(self.liveness_interval.value)
            ),
            "allow at least one missed ping, e.g. liveness_interval = \"10s\", liveness_timeout = \"30s\"",
        ))
    }

    /// A frame within the protocol's limit; mail that is not empty, that
    /// one control-socket send carries, and that fits in a frame.
    fn check_frame_and_mail(&self, table: &Range<usize>) -> Result<(), Problem> {
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
        let carried = crate::config::defaults::MAX_SEND_PAYLOAD;
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
        let result = &self.max_result_bytes;
        if result.value > MAX_FRAME_BYTES {
            return Err(Problem::new(
                result.at(table),
                format!(
                    "max_result_bytes {} is above what one frame can carry",
                    format_size(result.value)
                ),
                "use at most \"64MiB\" (the default is \"1MiB\"); keep bigger results elsewhere and return a reference",
            ));
        }
        if frame < mail.saturating_add(FRAME_HEADROOM) {
            return Err(Problem::new(
                written_first(&self.max_frame_bytes, &self.max_mail_bytes, table),
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
        Ok(())
    }

    /// The inbox and the deliveries per item within what the store keeps.
    fn check_store_counts(&self, table: &Range<usize>) -> Result<(), Problem> {
        let inbox = &self.max_inbox;
        if !(1..=100_000_000).contains(&inbox.value) {
            return Err(out_of_range(
                "max_inbox",
                inbox.value,
                inbox.at(table),
                "keep between 1 and 100000000 messages (the default is 10000)",
            ));
        }
        let deliveries = &self.max_deliveries;
        if !(1..=1_000).contains(&deliveries.value) {
            return Err(out_of_range(
                "max_deliveries",
                deliveries.value,
                deliveries.at(table),
                "keep between 1 and 1000 deliveries (the default is 5): after that many children end holding an item, it is quarantined as dead",
            ));
        }
        Ok(())
    }

    /// The recycle bounds that are set: an RSS a process can stay under,
    /// a grants age only with a grants file, a mail count in range.
    fn check_recycle_bounds(
        &self,
        table: &Range<usize>,
        has_grants_file: bool,
    ) -> Result<(), Problem> {
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
            return Err(out_of_range(
                "recycle.max_mail",
                n,
                self.max_mail.at(table),
                "recycle after 1 to 1000000000 acknowledged items, e.g. 1000, or remove it",
            ));
        }
        Ok(())
    }

    /// At least one child, at most [`MAX_REPLICAS`].
    fn check_replicas(&self, table: &Range<usize>) -> Result<(), Problem> {
        if (1..=MAX_REPLICAS).contains(&self.replicas.value) {
            return Ok(());
        }
        Err(out_of_range(
            "replicas",
            self.replicas.value,
            self.replicas.at(table),
            format!("run 1 to {MAX_REPLICAS} children per deployment (the default is 1)"),
        ))
    }

    /// Jitter of at most half a bound.
    fn check_jitter(&self, table: &Range<usize>) -> Result<(), Problem> {
        if self.jitter.value <= 50 {
            return Ok(());
        }
        Err(Problem::new(
            self.jitter.at(table),
            format!("recycle.jitter {}% is above 50%", self.jitter.value),
            "use at most \"50%\": more would let a bound be overshot by half again",
        ))
    }

    /// Backoff that grows towards its maximum, and a restart count in range.
    fn check_restart(&self, table: &Range<usize>) -> Result<(), Problem> {
        if self.backoff_initial.value > self.backoff_max.value {
            return Err(Problem::new(
                written_first(&self.backoff_initial, &self.backoff_max, table),
                format!(
                    "restart.backoff_initial ({}) is longer than restart.backoff_max ({})",
                    format_duration(self.backoff_initial.value),
                    format_duration(self.backoff_max.value)
                ),
                "make backoff_initial at most backoff_max",
            ));
        }
        if !(1..=10_000).contains(&self.max_restarts.value) {
            return Err(out_of_range(
                "restart.max_restarts",
                self.max_restarts.value,
                self.max_restarts.at(table),
                "allow between 1 and 10000 restarts per period (the default is 5)",
            ));
        }
        Ok(())
    }
}

/// Where to point an error about two settings that must agree: at the
/// first when it was written, else at the other (or the deployment).
fn written_first<T, U>(
    first: &Setting<T>,
    other: &Setting<U>,
    table: &Range<usize>,
) -> Range<usize> {
    if first.span.is_some() {
        first.at(table)
    } else {
        other.at(table)
    }
}

/// A refusal of `key`'s `value` (at `span`) as out of range.
fn out_of_range(
    key: &str,
    value: impl std::fmt::Display,
    span: Range<usize>,
    hint: impl Into<String>,
) -> Problem {
    Problem::new(span, format!("{key} {value} is out of range"), hint)
}
