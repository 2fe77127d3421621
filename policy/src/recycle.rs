//! Recycle bounds (design §5): whether a live child has passed a limit and
//! should be replaced by a fresh one.
//!
//! Every `policy_interval` (default 60 s) the supervisor takes a [`Sample`]
//! of each ready child and asks [`RecycleBounds::check`]. The bounds are
//! checked in a fixed order, **uptime, RSS, grant age**, and the first one
//! passed is the reason (`max_uptime`, `max_rss`, `max_grants_age`): one
//! trigger per tick, always with the same reason for the same sample.
//!
//! Settings (config `recycle = { .. }`), all off by default:
//!
//! - **`max_uptime`** (default none): recycle once the child has run this
//!   long. Passed when `uptime >= max_uptime` (reaching the bound is enough).
//!   Jittered (below).
//! - **`max_rss`** (default none), bytes: recycle once resident memory
//!   reaches this. Never jittered: memory limits are hard. A sample without
//!   RSS (the read failed, the process is gone) skips this bound.
//! - **`max_grants_age`** (default none): recycle once the grants snapshot
//!   handed to the child is this old, so credentials are re-read. A sample
//!   without grant age (the deployment has no `grants_file`) skips this bound.
//!   Jittered.
//! - **`max_mail`** (default none): recycle once the child has acknowledged
//!   this many mail items since it became ready (gunicorn's
//!   `max_requests`). Counted by the deployment's task as acks land, so it
//!   is checked at once, not at the tick. Jittered like the time bounds.
//! - **schedule** (`recycle.at`, [`crate::schedule`]): recycle at clock
//!   times; the supervisor works out each child's moment when it becomes
//!   ready (the first scheduled time after that, delayed by its jitter ×
//!   the gap to the following scheduled time) and the tick reports in
//!   [`Sample::scheduled`] whether it has come.
//! - **`jitter`** (`jitter_percent`, default 0, clamped to 100): spreads
//!   recycles of many deployments apart. Each child gets a [`Jitter`], a
//!   factor in `[0, 1)` derived deterministically from a 64-bit seed
//!   (splitmix64), and each time-based bound is shortened by
//!   `bound × jitter_percent% × factor`: with `"10%"`, a 6 h `max_uptime`
//!   becomes somewhere in (5 h 24 min, 6 h], fixed for that child. The
//!   supervisor seeds it per child (e.g. from the channel id), so many
//!   deployments started together do not all recycle at the same instant,
//!   and the same seed always gives the same bound (reproducible, testable).
//!   Jitter only ever shortens a bound, never lengthens it.
//! - A bound of zero is passed at every tick (the supervisor's config check
//!   should refuse it; here it is taken literally).

use std::time::Duration;

/// Which bound a child passed: the reason a policy recycle names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecycleReason {
    /// The child ran longer than `max_uptime` (jittered).
    MaxUptime,
    /// The child's resident memory reached `max_rss`.
    MaxRss,
    /// The child's grants snapshot is older than `max_grants_age` (jittered).
    MaxGrantsAge,
    /// The child acknowledged `max_mail` items since it became ready (jittered).
    MaxMail,
    /// The child's scheduled time (`recycle.at`, jittered) came.
    Schedule,
    /// An item it held outlived its deadline and its cancel
    /// (`mail_deadline` or the item's own).
    MailDeadline,
}

impl RecycleReason {
    /// The name used in the journal, logs and status: `max_uptime`,
    /// `max_rss`, `max_grants_age`, `max_mail`, `schedule`, `mail_deadline`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MaxUptime => "max_uptime",
            Self::MaxRss => "max_rss",
            Self::MaxGrantsAge => "max_grants_age",
            Self::MaxMail => "max_mail",
            Self::Schedule => "schedule",
            Self::MailDeadline => "mail_deadline",
        }
    }
}

impl std::fmt::Display for RecycleReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the supervisor measured of one child at a policy tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sample {
    /// How long the child has been running.
    pub uptime: Duration,
    /// Resident memory in bytes; `None` when it could not be read.
    pub rss_bytes: Option<u64>,
    /// Age of the grants snapshot the child holds; `None` when the deployment has no grants.
    pub grants_age: Option<Duration>,
    /// The child's scheduled recycle time has come.
    pub scheduled: bool,
}

/// A per-child factor in `[0, 1)` that shortens time-based bounds, so recycles spread out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Jitter {
    /// The factor as a fraction of 2^32.
    fraction: u32,
}

impl Jitter {
    /// No jitter: bounds apply exactly as configured.
    pub const NONE: Self = Self { fraction: 0 };

    /// The jitter for `seed`: deterministic, uniform over `[0, 1)` across seeds.
    pub fn from_seed(seed: u64) -> Self {
        let mixed = splitmix64(seed);
        Self {
            fraction: u32::try_from(mixed >> 32).unwrap_or(u32::MAX),
        }
    }

    /// The factor in `[0, 1)`, for logs and status.
    pub fn factor(self) -> f64 {
        f64::from(self.fraction) / 4_294_967_296.0
    }

    /// `bound` shortened by `bound × percent% × factor` (`percent` clamped to 100).
    pub fn shorten(self, bound: Duration, percent: u32) -> Duration {
        let percent = u128::from(percent.min(100));
        let nanos = bound.as_nanos();
        // nanos < 2^94 and fraction < 2^32: the product fits in u128.
        let cut = nanos
            .checked_mul(u128::from(self.fraction))
            .map(|scaled| scaled >> 32)
            .and_then(|scaled| scaled.checked_mul(percent))
            .map_or(0, |scaled| scaled / 100);
        bound.saturating_sub(duration_from_nanos(cut))
    }

    /// A count bound shortened the same way, never below 1.
    pub fn shorten_count(self, bound: u64, percent: u32) -> u64 {
        let cut = u128::from(bound)
            .saturating_mul(u128::from(self.fraction))
            .checked_shr(32)
            .unwrap_or(0)
            .saturating_mul(u128::from(percent.min(100)))
            / 100;
        bound
            .saturating_sub(u64::try_from(cut).unwrap_or(u64::MAX))
            .max(1)
    }
}

/// The limits past which a live child is recycled, plus how much to jitter them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecycleBounds {
    /// Recycle after this much uptime (jittered); `None`: never.
    pub max_uptime: Option<Duration>,
    /// Recycle at this resident memory in bytes (never jittered); `None`: never.
    pub max_rss: Option<u64>,
    /// Recycle when the grants snapshot is this old (jittered); `None`: never.
    pub max_grants_age: Option<Duration>,
    /// Recycle after this many acknowledged items (jittered); `None`: never.
    pub max_mail: Option<u64>,
    /// Time bounds are shortened by up to this percentage (clamped to 100).
    pub jitter_percent: u32,
}

impl RecycleBounds {
    /// The first bound `sample` passed, in the order uptime, RSS, grant
    /// age, schedule; `None` if none. (`max_mail` is [`Self::mail_passed`]'s.)
    pub fn check(&self, sample: &Sample, jitter: Jitter) -> Option<RecycleReason> {
        if self
            .effective_max_uptime(jitter)
            .is_some_and(|max| sample.uptime >= max)
        {
            return Some(RecycleReason::MaxUptime);
        }
        if let (Some(max), Some(rss)) = (self.max_rss, sample.rss_bytes)
            && rss >= max
        {
            return Some(RecycleReason::MaxRss);
        }
        if let (Some(max), Some(age)) = (self.effective_max_grants_age(jitter), sample.grants_age)
            && age >= max
        {
            return Some(RecycleReason::MaxGrantsAge);
        }
        sample.scheduled.then_some(RecycleReason::Schedule)
    }

    /// Whether `done` acknowledged items reach the jittered `max_mail`.
    pub fn mail_passed(&self, done: u64, jitter: Jitter) -> bool {
        self.effective_max_mail(jitter)
            .is_some_and(|max| done >= max)
    }

    /// The mail bound after jitter, as this child experiences it.
    pub fn effective_max_mail(&self, jitter: Jitter) -> Option<u64> {
        self.max_mail
            .map(|bound| jitter.shorten_count(bound, self.jitter_percent))
    }

    /// The uptime bound after jitter, as this child experiences it.
    pub fn effective_max_uptime(&self, jitter: Jitter) -> Option<Duration> {
        self.max_uptime
            .map(|bound| jitter.shorten(bound, self.jitter_percent))
    }

    /// The grant-age bound after jitter, as this child experiences it.
    pub fn effective_max_grants_age(&self, jitter: Jitter) -> Option<Duration> {
        self.max_grants_age
            .map(|bound| jitter.shorten(bound, self.jitter_percent))
    }
}

/// splitmix64: a fast, well-mixed 64-bit hash of the seed.
fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A `Duration` of `nanos`, saturating at `Duration::MAX`.
fn duration_from_nanos(nanos: u128) -> Duration {
    const PER_SEC: u128 = 1_000_000_000;
    let secs = u64::try_from(nanos / PER_SEC).unwrap_or(u64::MAX);
    let sub = u32::try_from(nanos % PER_SEC).unwrap_or(0);
    Duration::new(secs, 0).saturating_add(Duration::from_nanos(u64::from(sub)))
}

/// Who or what asked for a recycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecycleCause {
    /// A policy bound was passed.
    Bound(RecycleReason),
    /// An operator: `wfhost recycle`, SIGUSR1 or a config reload.
    Operator,
    /// The child asked with `RecycleRequest`.
    Child,
}

impl RecycleCause {
    /// The origin as status, metrics and the journal name it: `policy`,
    /// `operator` or `self`.
    pub fn origin(self) -> &'static str {
        match self {
            Self::Bound(_) => "policy",
            Self::Operator => "operator",
            Self::Child => "self",
        }
    }

    /// What status counts recycles by: the bound's name for policy
    /// recycles, else the origin.
    pub fn key(self) -> &'static str {
        match self {
            Self::Bound(bound) => bound.as_str(),
            other => other.origin(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn all_bounds() -> RecycleBounds {
        RecycleBounds {
            max_uptime: Some(secs(3600)),
            max_rss: Some(512 << 20),
            max_grants_age: Some(secs(600)),
            max_mail: None,
            jitter_percent: 0,
        }
    }

    #[test]
    fn reason_names() {
        assert_eq!(RecycleReason::MaxUptime.as_str(), "max_uptime");
        assert_eq!(RecycleReason::MaxRss.as_str(), "max_rss");
        assert_eq!(RecycleReason::MaxGrantsAge.to_string(), "max_grants_age");
    }

    #[test]
    fn no_bounds_never_recycle() {
        let b = RecycleBounds::default();
        let s = Sample {
            uptime: Duration::MAX,
            rss_bytes: Some(u64::MAX),
            grants_age: Some(Duration::MAX),
            scheduled: false,
        };
        assert_eq!(b.check(&s, Jitter::from_seed(7)), None);
    }

    #[test]
    fn within_bounds_is_none() {
        let s = Sample {
            uptime: secs(3599),
            rss_bytes: Some((512 << 20) - 1),
            grants_age: Some(secs(599)),
            scheduled: false,
        };
        assert_eq!(all_bounds().check(&s, Jitter::NONE), None);
    }

    #[test]
    fn each_bound_is_passed_on_reaching_it() {
        let b = all_bounds();
        let base = Sample {
            uptime: secs(1),
            rss_bytes: Some(1),
            grants_age: Some(secs(1)),
            scheduled: false,
        };
        let up = Sample {
            uptime: secs(3600),
            ..base
        };
        assert_eq!(b.check(&up, Jitter::NONE), Some(RecycleReason::MaxUptime));
        let rss = Sample {
            rss_bytes: Some(512 << 20),
            ..base
        };
        assert_eq!(b.check(&rss, Jitter::NONE), Some(RecycleReason::MaxRss));
        let age = Sample {
            grants_age: Some(secs(600)),
            ..base
        };
        assert_eq!(
            b.check(&age, Jitter::NONE),
            Some(RecycleReason::MaxGrantsAge)
        );
    }

    #[test]
    fn order_is_uptime_then_rss_then_grants_age() {
        let b = all_bounds();
        let all = Sample {
            uptime: secs(9999),
            rss_bytes: Some(u64::MAX),
            grants_age: Some(secs(9999)),
            scheduled: false,
        };
        assert_eq!(b.check(&all, Jitter::NONE), Some(RecycleReason::MaxUptime));
        let rss_and_age = Sample {
            uptime: secs(0),
            ..all
        };
        assert_eq!(
            b.check(&rss_and_age, Jitter::NONE),
            Some(RecycleReason::MaxRss)
        );
    }

    #[test]
    fn missing_measurements_skip_their_bound() {
        let b = all_bounds();
        let s = Sample {
            uptime: secs(0),
            rss_bytes: None,
            grants_age: None,
            scheduled: false,
        };
        assert_eq!(b.check(&s, Jitter::NONE), None);
    }

    #[test]
    fn zero_bounds_are_passed_at_once() {
        let b = RecycleBounds {
            max_uptime: Some(Duration::ZERO),
            ..RecycleBounds::default()
        };
        assert_eq!(
            b.check(&Sample::default(), Jitter::NONE),
            Some(RecycleReason::MaxUptime)
        );
    }

    #[test]
    fn jitter_is_deterministic_and_varies_by_seed() {
        assert_eq!(Jitter::from_seed(42), Jitter::from_seed(42));
        let distinct: std::collections::HashSet<_> = (0..100).map(Jitter::from_seed).collect();
        assert!(distinct.len() > 90);
        for seed in 0..1000 {
            let f = Jitter::from_seed(seed).factor();
            assert!((0.0..1.0).contains(&f));
        }
        assert_eq!(Jitter::NONE.factor(), 0.0);
    }

    #[test]
    fn jitter_shortens_time_bounds_within_the_percentage() {
        let bound = secs(6 * 3600);
        let mut shortest = bound;
        for seed in 0..1000 {
            let got = Jitter::from_seed(seed).shorten(bound, 10);
            assert!(got <= bound);
            assert!(got > bound - bound / 10, "seed {seed}: {got:?}");
            shortest = shortest.min(got);
        }
        assert!(shortest < bound - bound / 20, "jitter actually spreads");
    }

    #[test]
    fn jitter_matches_the_factor() {
        let j = Jitter::from_seed(1);
        let bound = secs(1000);
        let got = j.shorten(bound, 10).as_secs_f64();
        let want = 1000.0 * (1.0 - 0.10 * j.factor());
        assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    }

    #[test]
    fn no_jitter_or_zero_percent_keeps_the_bound() {
        assert_eq!(Jitter::NONE.shorten(secs(60), 50), secs(60));
        assert_eq!(Jitter::from_seed(3).shorten(secs(60), 0), secs(60));
    }

    #[test]
    fn jitter_percent_is_clamped_and_never_underflows() {
        let j = Jitter::from_seed(9);
        let got = j.shorten(secs(60), u32::MAX);
        assert_eq!(got, j.shorten(secs(60), 100));
        assert!(got <= secs(60));
        assert!(j.shorten(Duration::MAX, 100) > Duration::ZERO);
        assert_eq!(j.shorten(Duration::ZERO, 100), Duration::ZERO);
    }

    #[test]
    fn jitter_applies_to_uptime_and_grants_age_but_not_rss() {
        // Find a seed with a large factor so the effect is visible.
        let j = (0..)
            .map(Jitter::from_seed)
            .find(|j| j.factor() > 0.5)
            .unwrap_or(Jitter::NONE);
        let b = RecycleBounds {
            jitter_percent: 10,
            ..all_bounds()
        };
        let up = b.effective_max_uptime(j).unwrap_or(Duration::MAX);
        assert!(up < secs(3600) && up > secs(3240));
        let age = b.effective_max_grants_age(j).unwrap_or(Duration::MAX);
        assert!(age < secs(600) && age > secs(540));
        let s = Sample {
            uptime: up,
            rss_bytes: None,
            grants_age: None,
            scheduled: false,
        };
        assert_eq!(b.check(&s, j), Some(RecycleReason::MaxUptime));
        assert_eq!(b.check(&s, Jitter::NONE), None);
        let rss = Sample {
            uptime: secs(0),
            rss_bytes: Some((512 << 20) - 1),
            grants_age: Some(age),
            scheduled: false,
        };
        assert_eq!(b.check(&rss, j), Some(RecycleReason::MaxGrantsAge));
        let rss_only = Sample {
            grants_age: None,
            ..rss
        };
        assert_eq!(b.check(&rss_only, j), None, "RSS is never jittered");
    }

    #[test]
    fn splitmix_reference_values() {
        // First outputs of the reference splitmix64 generator seeded with 0.
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn max_mail_is_reached_at_the_count_and_jitter_shortens_it_never_below_one() {
        let b = RecycleBounds {
            max_mail: Some(25),
            ..RecycleBounds::default()
        };
        assert!(!b.mail_passed(24, Jitter::NONE));
        assert!(b.mail_passed(25, Jitter::NONE));
        let jittered = RecycleBounds {
            jitter_percent: 20,
            ..b
        };
        for seed in 0..200 {
            let j = Jitter::from_seed(seed);
            let max = jittered.effective_max_mail(j).unwrap();
            assert!((20..=25).contains(&max), "seed {seed}: {max}");
            assert!(jittered.mail_passed(max, j) && !jittered.mail_passed(max - 1, j));
        }
        let one = RecycleBounds {
            max_mail: Some(1),
            jitter_percent: 100,
            ..RecycleBounds::default()
        };
        assert_eq!(one.effective_max_mail(Jitter::from_seed(7)), Some(1));
    }

    #[test]
    fn a_schedule_that_came_is_the_last_reason_checked() {
        let sample = Sample {
            scheduled: true,
            ..Sample::default()
        };
        assert_eq!(
            RecycleBounds::default().check(&sample, Jitter::NONE),
            Some(RecycleReason::Schedule)
        );
        let up = Sample {
            uptime: secs(7200),
            ..sample
        };
        assert_eq!(
            all_bounds().check(&up, Jitter::NONE),
            Some(RecycleReason::MaxUptime)
        );
        assert_eq!(RecycleReason::Schedule.as_str(), "schedule");
        assert_eq!(RecycleReason::MaxMail.as_str(), "max_mail");
    }
}
