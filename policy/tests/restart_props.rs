//! Property tests for crash-restart decisions, against a reference that keeps
//! a plain list of restart times and a streak counter.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use wfhost_policy::{RestartDecision, RestartPolicy, RestartTracker};

#[derive(Debug, Clone)]
enum Event {
    /// The child ran `run_ms` and crashed; `spawn_ms` is the time to spawn after any delay.
    Crash { run_ms: u64, spawn_ms: u64 },
    /// An operator resumes the deployment (after a give-up, or any time).
    Reset { wait_ms: u64 },
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        12 => (prop_oneof![3 => 0u64..200, 1 => 0u64..12_000], 0u64..20)
            .prop_map(|(run_ms, spawn_ms)| Event::Crash { run_ms, spawn_ms }),
        1 => (0u64..20_000).prop_map(|wait_ms| Event::Reset { wait_ms }),
    ]
}

fn policy() -> impl Strategy<Value = RestartPolicy> {
    (0u64..500, 0u64..5_000, 0u32..8, 0u64..10_000, 0u64..5_000).prop_map(
        |(initial, max, max_restarts, period, healthy)| RestartPolicy {
            backoff_initial: Duration::from_millis(initial),
            backoff_max: Duration::from_millis(max),
            max_restarts,
            period: Duration::from_millis(period),
            healthy_after: Duration::from_millis(healthy),
        },
    )
}

/// `min(initial × 2^(n−1), max)` for n ≥ 1, in nanoseconds, computed independently.
fn expected_delay(p: &RestartPolicy, crashes_before: u32) -> Duration {
    if crashes_before == 0 {
        return Duration::ZERO;
    }
    let initial = p.backoff_initial.as_nanos();
    let max = p.backoff_max.as_nanos();
    let shift = crashes_before - 1;
    let scaled = if shift >= 64 {
        if initial == 0 { 0 } else { u128::MAX }
    } else {
        initial.saturating_mul(1u128 << shift)
    };
    Duration::from_nanos(u64::try_from(scaled.min(max)).unwrap_or(u64::MAX))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    /// Delays start at zero, never decrease within a streak, never exceed
    /// backoff_max, follow the doubling formula, and the tracker gives up
    /// exactly when the window would hold more than max_restarts restarts.
    #[test]
    fn backoff_and_intensity_match_the_reference(
        p in policy(),
        events in prop::collection::vec(event(), 1..120),
    ) {
        let t0 = Instant::now();
        let mut tracker = RestartTracker::new();
        let mut granted: Vec<Instant> = Vec::new(); // reference: every granted restart
        let mut streak = 0u32; // reference: crashes since a healthy run or reset
        let mut last_delay: Option<Duration> = None; // within the current streak
        let mut started = t0;
        let mut total = 0u64; // reference: every restart granted, across resets

        for ev in events {
            match ev {
                Event::Reset { wait_ms } => {
                    tracker.reset();
                    granted.clear();
                    streak = 0;
                    last_delay = None;
                    started += Duration::from_millis(wait_ms);
                }
                Event::Crash { run_ms, spawn_ms } => {
                    let now = started + Duration::from_millis(run_ms);
                    if Duration::from_millis(run_ms) >= p.healthy_after {
                        streak = 0;
                        last_delay = None;
                        granted.clear();
                    }
                    let in_window = granted
                        .iter()
                        .filter(|at| now.duration_since(**at) <= p.period)
                        .count();
                    let decision = tracker.on_exit(&p, started, now);
                    if in_window + 1 > p.max_restarts as usize {
                        prop_assert_eq!(
                            decision,
                            RestartDecision::GiveUp {
                                restarts: u32::try_from(in_window + 1).unwrap_or(u32::MAX),
                                period: p.period,
                            }
                        );
                        // The deployment is failed; the next event's child starts later.
                        started = now + Duration::from_millis(spawn_ms);
                        continue;
                    }
                    let RestartDecision::Restart { delay, attempt } = decision else {
                        return Err(TestCaseError::fail(format!("expected a restart, got {decision:?}")));
                    };
                    prop_assert_eq!(attempt, streak + 1);
                    if streak == 0 {
                        prop_assert_eq!(delay, Duration::ZERO, "first restart of a streak is immediate");
                    }
                    prop_assert!(delay <= p.backoff_max, "delay {:?} over the cap", delay);
                    if let Some(last) = last_delay {
                        prop_assert!(delay >= last, "delays never decrease within a streak");
                    }
                    prop_assert_eq!(delay, expected_delay(&p, streak));
                    streak += 1;
                    last_delay = Some(delay);
                    granted.push(now);
                    total += 1;
                    started = now + delay + Duration::from_millis(spawn_ms);
                }
            }
            prop_assert_eq!(tracker.streak(), streak);
        }
            prop_assert_eq!(tracker.restarts_total(), total, "the total survives resets");
    }

    /// A crash loop (every run instantly fatal) always ends in a give-up
    /// within max_restarts + 1 crashes when the delays fit inside the period.
    #[test]
    fn a_tight_crash_loop_gives_up(max_restarts in 0u32..10) {
        let p = RestartPolicy {
            backoff_initial: Duration::from_millis(1),
            backoff_max: Duration::from_millis(10),
            max_restarts,
            period: Duration::from_secs(60),
            healthy_after: Duration::from_secs(10),
        };
        let t0 = Instant::now();
        let mut tracker = RestartTracker::new();
        let mut now = t0;
        let mut restarts = 0;
        loop {
            match tracker.on_exit(&p, now, now) {
                RestartDecision::Restart { delay, .. } => {
                    restarts += 1;
                    now += delay;
                    prop_assert!(restarts <= max_restarts);
                }
                RestartDecision::GiveUp { restarts: r, .. } => {
                    prop_assert_eq!(r, max_restarts + 1);
                    break;
                }
            }
        }
        prop_assert_eq!(restarts, max_restarts);
        prop_assert_eq!(tracker.restarts_total(), u64::from(max_restarts));
    }

    /// The public backoff function is monotonic in the streak and capped, for any settings.
    #[test]
    fn backoff_is_monotonic_and_capped(
        initial_ns in any::<u64>(),
        max_ns in any::<u64>(),
        n in 0u32..200,
    ) {
        let p = RestartPolicy {
            backoff_initial: Duration::from_nanos(initial_ns),
            backoff_max: Duration::from_nanos(max_ns),
            ..RestartPolicy::default()
        };
        let a = p.backoff(n);
        let b = p.backoff(n + 1);
        prop_assert!(a <= b);
        prop_assert!(b <= p.backoff_max);
        prop_assert_eq!(a, expected_delay(&p, n));
    }
}
