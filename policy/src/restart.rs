//! Crash-restart decisions (design §3), in the manner of Erlang/OTP's
//! `supervisor.erl` and supervisord's `startsecs`: restart at once after a healthy run, back off
//! exponentially on repeated crashes, and give up (the deployment goes
//! `failed`, loudly) when restarts come too often.
//!
//! The supervisor calls [`RestartTracker::on_exit`] every time a child exits
//! unexpectedly (crash, protocol violation, hung) and does what the
//! [`RestartDecision`] says. Planned exits (drain, recycle, stop) are not
//! crashes and are not reported here.
//!
//! Settings ([`RestartPolicy`], config `restart = { .. }`), with defaults:
//!
//! - **`backoff_initial`** (default 100 ms): the delay before the second
//!   restart of a crash streak. The first restart of a streak is always
//!   immediate (delay 0): no fixed throttle on a crash after a healthy run.
//!   Zero disables backoff: every restart is immediate and only the
//!   intensity limit stops a crash loop.
//! - **`backoff_max`** (default 30 s): the delay never exceeds this. Each
//!   further crash in the streak doubles the delay up to it. If it is below
//!   `backoff_initial`, every backed-off delay is `backoff_max`.
//! - **`max_restarts`** (default 5) and **`period`** (default 60 s): the
//!   restart intensity. Like Erlang's `intensity`/`period`: if restarting now
//!   would make *more than* `max_restarts` restarts within the last `period`
//!   (a sliding window, both ends inclusive: a restart exactly `period` ago
//!   still counts), the answer is [`RestartDecision::GiveUp`] and the
//!   supervisor marks the deployment `failed`. `max_restarts = 0` gives up on
//!   the first crash; `period = 0` counts only restarts at the very same
//!   instant. Refused restarts are not recorded: once the old restarts age
//!   out of the window, a new crash may be restarted again.
//! - **`healthy_after`** (default 1 s, config `restart.healthy_after`): a
//!   run that lasted at least this long was healthy: the crash that ended it
//!   starts afresh (immediate restart, backoff from the beginning, and an
//!   empty intensity window). As supervisord's `startsecs`, only crashes of
//!   children that die before they were up this long count towards giving
//!   up: a crash loop at start-up (a bad config, a missing dependency) backs
//!   off and fails the deployment, while a service that crashes now and then
//!   after serving is restarted at once every time, as runit and s6 do. Zero
//!   makes every run healthy (backoff and giving up never apply).
//!
//! Counters: [`restarts_total`](RestartTracker::restarts_total) counts every
//! restart granted over the tracker's life and survives
//! [`reset`](RestartTracker::reset), which only forgets the crash history
//! (streak and window), e.g. when an operator resumes a `failed` deployment.
//!
//! A clock that steps backwards is tolerated: a negative run length counts as
//! zero, and restarts "in the future" stay in the window.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How a deployment's crashed children are restarted: backoff and intensity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Delay before the second restart of a crash streak (the first is immediate); default 100 ms.
    pub backoff_initial: Duration,
    /// Ceiling on the doubling delay; default 30 s.
    pub backoff_max: Duration,
    /// At most this many restarts within `period`, then give up; default 5.
    pub max_restarts: u32,
    /// The sliding window for `max_restarts`; default 60 s.
    pub period: Duration,
    /// A run at least this long was healthy: it resets the backoff and the
    /// intensity window; default 1 s.
    pub healthy_after: Duration,
}

/// Default `backoff_initial`.
pub const DEFAULT_BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// Default `backoff_max`.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Default `max_restarts`.
pub const DEFAULT_MAX_RESTARTS: u32 = 5;
/// Default `period`.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(60);
/// Default `healthy_after`.
pub const DEFAULT_HEALTHY_AFTER: Duration = Duration::from_secs(1);

impl Default for RestartPolicy {
    fn default() -> Self {
        Self {
            backoff_initial: DEFAULT_BACKOFF_INITIAL,
            backoff_max: DEFAULT_BACKOFF_MAX,
            max_restarts: DEFAULT_MAX_RESTARTS,
            period: DEFAULT_PERIOD,
            healthy_after: DEFAULT_HEALTHY_AFTER,
        }
    }
}

impl RestartPolicy {
    /// The delay for the restart that follows `crashes_before` earlier crashes in the streak.
    ///
    /// 0 → immediate; n ≥ 1 → `backoff_initial × 2^(n−1)`, capped at `backoff_max`.
    pub fn backoff(&self, crashes_before: u32) -> Duration {
        crate::backoff::doubling(self.backoff_initial, self.backoff_max, crashes_before)
    }
}

/// What to do about a child that exited unexpectedly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartDecision {
    /// Spawn a new child after `delay`.
    Restart {
        /// How long to wait before spawning (zero: at once).
        delay: Duration,
        /// Which restart of the current crash streak this is, from 1.
        attempt: u32,
    },
    /// Too many restarts too fast: mark the deployment `failed` and say so loudly.
    GiveUp {
        /// Restarts within `period` had this one been granted (always > `max_restarts`).
        restarts: u32,
        /// The window they fell in.
        period: Duration,
    },
}

/// One deployment's crash history: the current streak and the restarts in the intensity window.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestartTracker {
    /// When each granted restart within the window was decided, oldest first.
    window: VecDeque<Instant>,
    /// Crashes since the last healthy run (or reset).
    streak: u32,
    /// Every restart granted, ever.
    total: u64,
}

impl RestartTracker {
    /// A tracker with no history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decides what to do about a child started at `started_at` that exited unexpectedly at `now`.
    pub fn on_exit(
        &mut self,
        policy: &RestartPolicy,
        started_at: Instant,
        now: Instant,
    ) -> RestartDecision {
        if now.saturating_duration_since(started_at) >= policy.healthy_after {
            self.streak = 0;
            self.window.clear();
        }
        self.prune(policy.period, now);
        let would_be = self.window.len().saturating_add(1);
        if would_be > usize::try_from(policy.max_restarts).unwrap_or(usize::MAX) {
            return RestartDecision::GiveUp {
                restarts: u32::try_from(would_be).unwrap_or(u32::MAX),
                period: policy.period,
            };
        }
        let delay = policy.backoff(self.streak);
        self.streak = self.streak.saturating_add(1);
        self.window.push_back(now);
        self.total = self.total.saturating_add(1);
        RestartDecision::Restart {
            delay,
            attempt: self.streak,
        }
    }

    /// Every restart granted over this tracker's life (kept across [`Self::reset`]).
    pub fn restarts_total(&self) -> u64 {
        self.total
    }

    /// Crashes since the last healthy run or reset (the backoff exponent).
    pub fn streak(&self) -> u32 {
        self.streak
    }

    /// Restarts granted within `policy.period` before `now`.
    pub fn restarts_in_window(&self, policy: &RestartPolicy, now: Instant) -> u32 {
        let n = self
            .window
            .iter()
            .filter(|at| in_window(**at, policy.period, now))
            .count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Forgets the crash history (streak and window), e.g. when an operator resumes a failed deployment.
    pub fn reset(&mut self) {
        self.window.clear();
        self.streak = 0;
    }

    fn prune(&mut self, period: Duration, now: Instant) {
        self.window.retain(|at| in_window(*at, period, now));
    }
}

/// Whether a restart at `at` still counts at `now` (inclusive, as in Erlang).
fn in_window(at: Instant, period: Duration, now: Instant) -> bool {
    now.saturating_duration_since(at) <= period
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn policy() -> RestartPolicy {
        RestartPolicy {
            backoff_initial: ms(100),
            backoff_max: ms(1000),
            max_restarts: 5,
            period: ms(60_000),
            healthy_after: ms(10_000),
        }
    }

    fn restart(delay: u64, attempt: u32) -> RestartDecision {
        RestartDecision::Restart {
            delay: ms(delay),
            attempt,
        }
    }

    #[test]
    fn defaults_match_the_design() {
        let p = RestartPolicy::default();
        assert_eq!(p.backoff_initial, ms(100));
        assert_eq!(p.backoff_max, Duration::from_secs(30));
        assert_eq!(p.max_restarts, 5);
        assert_eq!(p.period, Duration::from_secs(60));
        assert_eq!(p.healthy_after, Duration::from_secs(1));
    }

    #[test]
    fn first_crash_restarts_at_once() {
        let t0 = Instant::now();
        let mut r = RestartTracker::new();
        assert_eq!(r.on_exit(&policy(), t0, t0 + ms(5)), restart(0, 1));
        assert_eq!(r.restarts_total(), 1);
        assert_eq!(r.streak(), 1);
    }

    #[test]
    fn repeated_crashes_back_off_exponentially_to_the_cap() {
        let t0 = Instant::now();
        let p = RestartPolicy {
            max_restarts: 100,
            ..policy()
        };
        let mut r = RestartTracker::new();
        let mut t = t0;
        let mut delays = Vec::new();
        for _ in 0..7 {
            match r.on_exit(&p, t, t + ms(1)) {
                RestartDecision::Restart { delay, .. } => delays.push(delay.as_millis()),
                other => panic!("unexpected {other:?}"),
            }
            t += ms(1);
        }
        assert_eq!(delays, vec![0, 100, 200, 400, 800, 1000, 1000]);
    }

    #[test]
    fn a_healthy_run_resets_the_backoff() {
        let t0 = Instant::now();
        let p = policy();
        let mut r = RestartTracker::new();
        r.on_exit(&p, t0, t0 + ms(1));
        r.on_exit(&p, t0 + ms(1), t0 + ms(2));
        assert_eq!(r.on_exit(&p, t0 + ms(2), t0 + ms(3)), restart(200, 3));
        // Ran exactly healthy_after: healthy.
        let start = t0 + ms(3);
        assert_eq!(r.on_exit(&p, start, start + ms(10_000)), restart(0, 1));
        assert_eq!(
            r.on_exit(&p, start + ms(10_000), start + ms(10_001)),
            restart(100, 2)
        );
    }

    #[test]
    fn a_run_just_short_of_healthy_keeps_the_streak() {
        let t0 = Instant::now();
        let p = policy();
        let mut r = RestartTracker::new();
        r.on_exit(&p, t0, t0);
        assert_eq!(r.on_exit(&p, t0, t0 + ms(9_999)), restart(100, 2));
    }

    #[test]
    fn gives_up_on_more_than_max_restarts_in_the_period() {
        let t0 = Instant::now();
        let p = policy();
        let mut r = RestartTracker::new();
        for i in 0..5 {
            let now = t0 + ms(i);
            assert!(matches!(
                r.on_exit(&p, now, now),
                RestartDecision::Restart { .. }
            ));
        }
        assert_eq!(
            r.on_exit(&p, t0 + ms(5), t0 + ms(5)),
            RestartDecision::GiveUp {
                restarts: 6,
                period: ms(60_000)
            }
        );
        assert_eq!(r.restarts_total(), 5, "a refused restart is not counted");
        assert_eq!(r.restarts_in_window(&p, t0 + ms(5)), 5);
    }

    #[test]
    fn the_window_slides_inclusively() {
        let t0 = Instant::now();
        let p = RestartPolicy {
            max_restarts: 2,
            ..policy()
        };
        let mut r = RestartTracker::new();
        // Children that crash 1 ms after they start: never healthy.
        let crash = |r: &mut RestartTracker, at: Instant| r.on_exit(&p, at - ms(1), at);
        crash(&mut r, t0 + ms(1));
        crash(&mut r, t0 + ms(10));
        // The restart at t0 + 1 ms is exactly `period` old: still in the window.
        assert!(matches!(
            crash(&mut r, t0 + ms(60_001)),
            RestartDecision::GiveUp { restarts: 3, .. }
        ));
        // One millisecond later it has aged out.
        assert!(matches!(
            crash(&mut r, t0 + ms(60_002)),
            RestartDecision::Restart { .. }
        ));
        assert_eq!(r.restarts_in_window(&p, t0 + ms(60_002)), 2);
    }

    #[test]
    fn a_healthy_run_empties_the_intensity_window() {
        let t0 = Instant::now();
        let p = RestartPolicy {
            max_restarts: 2,
            ..policy()
        };
        let mut r = RestartTracker::new();
        // Twenty children that each served 15 s: all restarted at once.
        let mut t = t0;
        for _ in 0..20 {
            let started = t;
            t += ms(15_000);
            assert_eq!(r.on_exit(&p, started, t), restart(0, 1));
        }
        assert_eq!(r.restarts_in_window(&p, t), 1);
    }

    #[test]
    fn max_restarts_zero_gives_up_at_once() {
        let t0 = Instant::now();
        let p = RestartPolicy {
            max_restarts: 0,
            ..policy()
        };
        let mut r = RestartTracker::new();
        assert_eq!(
            r.on_exit(&p, t0, t0 + ms(20_000)),
            RestartDecision::GiveUp {
                restarts: 1,
                period: ms(60_000)
            }
        );
    }

    #[test]
    fn zero_period_counts_only_the_same_instant() {
        let t0 = Instant::now();
        let p = RestartPolicy {
            max_restarts: 1,
            period: Duration::ZERO,
            ..policy()
        };
        let mut r = RestartTracker::new();
        assert!(matches!(
            r.on_exit(&p, t0, t0),
            RestartDecision::Restart { .. }
        ));
        assert!(matches!(
            r.on_exit(&p, t0, t0),
            RestartDecision::GiveUp { .. }
        ));
        assert!(matches!(
            r.on_exit(&p, t0, t0 + ms(1)),
            RestartDecision::Restart { .. }
        ));
    }

    #[test]
    fn reset_forgets_history_but_not_the_total() {
        let t0 = Instant::now();
        let p = RestartPolicy {
            max_restarts: 1,
            ..policy()
        };
        let mut r = RestartTracker::new();
        r.on_exit(&p, t0, t0);
        assert!(matches!(
            r.on_exit(&p, t0, t0),
            RestartDecision::GiveUp { .. }
        ));
        r.reset();
        assert_eq!(r.streak(), 0);
        assert_eq!(r.on_exit(&p, t0, t0), restart(0, 1));
        assert_eq!(r.restarts_total(), 2);
    }

    #[test]
    fn zero_initial_backoff_is_always_immediate() {
        let p = RestartPolicy {
            backoff_initial: Duration::ZERO,
            ..policy()
        };
        assert_eq!(p.backoff(u32::MAX), Duration::ZERO);
    }

    #[test]
    fn cap_below_initial_caps_every_backed_off_delay() {
        let p = RestartPolicy {
            backoff_initial: ms(500),
            backoff_max: ms(200),
            ..policy()
        };
        assert_eq!(p.backoff(0), Duration::ZERO);
        assert_eq!(p.backoff(1), ms(200));
        assert_eq!(p.backoff(9), ms(200));
    }

    #[test]
    fn backoff_saturates_on_absurd_settings() {
        let p = RestartPolicy {
            backoff_initial: Duration::from_nanos(1),
            backoff_max: Duration::MAX,
            ..policy()
        };
        assert_eq!(p.backoff(u32::MAX), Duration::MAX);
        assert_eq!(p.backoff(2), Duration::from_nanos(2));
        let q = RestartPolicy {
            backoff_initial: Duration::MAX,
            backoff_max: Duration::MAX,
            ..policy()
        };
        assert_eq!(q.backoff(3), Duration::MAX);
    }

    #[test]
    fn clock_stepping_backwards_is_tolerated() {
        let t0 = Instant::now();
        let p = policy();
        let mut r = RestartTracker::new();
        // Started "after" it exited: a run of zero length, not healthy.
        r.on_exit(&p, t0 + ms(50), t0 + ms(40));
        assert_eq!(r.on_exit(&p, t0 + ms(50), t0), restart(100, 2));
        assert_eq!(r.restarts_in_window(&p, t0), 2);
    }
}
