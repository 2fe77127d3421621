//! Property tests for recycle bounds (order, jitter) and liveness (answered
//! children are never hung; silent ones are hung exactly on time).

use std::time::{Duration, Instant};

use proptest::prelude::*;
use wfhost_policy::{Jitter, Liveness, RecycleBounds, RecycleReason, Sample};

fn opt_secs() -> impl Strategy<Value = Option<Duration>> {
    prop::option::of((0u64..10_000).prop_map(Duration::from_secs))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    /// check() returns the first passed bound in the order uptime, RSS, grant
    /// age, with time bounds shortened by jitter and RSS never jittered.
    #[test]
    fn recycle_check_matches_the_reference(
        max_uptime in opt_secs(),
        max_rss in prop::option::of(0u64..1_000_000),
        max_grants_age in opt_secs(),
        jitter_percent in 0u32..=150,
        seed in any::<u64>(),
        uptime in (0u64..12_000).prop_map(Duration::from_secs),
        rss in prop::option::of(0u64..1_200_000),
        age in prop::option::of((0u64..12_000).prop_map(Duration::from_secs)),
    ) {
        let bounds = RecycleBounds { max_uptime, max_rss, max_grants_age, max_mail: None, jitter_percent };
        let jitter = Jitter::from_seed(seed);
        let pct = f64::from(jitter_percent.min(100)) / 100.0;
        let shorten = |d: Duration| {
            let got = jitter.shorten(d, jitter_percent);
            // Within a nanosecond or so of bound × (1 − pct × factor), never longer.
            let want = d.as_secs_f64() * (1.0 - pct * jitter.factor());
            assert!(got <= d);
            assert!((got.as_secs_f64() - want).abs() <= 1e-6, "{got:?} vs {want}");
            got
        };
        let want = if max_uptime.map(shorten).is_some_and(|m| uptime >= m) {
            Some(RecycleReason::MaxUptime)
        } else if matches!((max_rss, rss), (Some(m), Some(r)) if r >= m) {
            Some(RecycleReason::MaxRss)
        } else if matches!((max_grants_age.map(shorten), age), (Some(m), Some(a)) if a >= m) {
            Some(RecycleReason::MaxGrantsAge)
        } else {
            None
        };
        let sample = Sample { uptime, rss_bytes: rss, grants_age: age, scheduled: false };
        prop_assert_eq!(bounds.check(&sample, jitter), want);
        // Without jitter, the bounds apply exactly.
        let exact = RecycleBounds { jitter_percent: 0, ..bounds };
        prop_assert_eq!(exact.effective_max_uptime(jitter), max_uptime);
        prop_assert_eq!(exact.effective_max_grants_age(jitter), max_grants_age);
    }

    /// Simulated child answering pings after random delays, then (maybe)
    /// going silent; the supervisor wakes when told, sometimes late. At every
    /// event, hung() and hung_deadline() match a reference computed from the
    /// raw ping and pong times: hung iff some ping issued at `s` with
    /// `s + timeout <= now` has no answer (a pong for it or a later nonce).
    #[test]
    fn liveness_matches_the_reference(
        interval_ms in 1u64..200,
        timeout_ms in 0u64..600,
        answer_ms in prop::collection::vec(0u64..400, 1..20),
        late_ms in prop::collection::vec(0u64..30, 1..20),
        stop_after in prop_oneof![Just(u64::MAX), 0u64..40],
    ) {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut l = Liveness::new(ms(interval_ms), ms(timeout_ms), t0);
        let mut now = t0;
        let mut pings: Vec<(u64, Instant)> = Vec::new(); // reference: every ping issued
        let mut pongs: Vec<(u64, Instant)> = Vec::new(); // in flight: (nonce, arrival)
        let mut arrived: Vec<(u64, Instant)> = Vec::new(); // reference: delivered pongs
        let never_silent = stop_after == u64::MAX && answer_ms.iter().all(|d| *d < timeout_ms);

        for step in 0..300usize {
            let timer = l.next_wake(now) + ms(late_ms[step % late_ms.len()]);
            let next_pong = pongs.iter().map(|(_, at)| *at).min();
            match next_pong {
                Some(at) if at <= timer => {
                    now = at;
                    let due: Vec<_> = pongs.iter().filter(|(_, a)| *a == at).copied().collect();
                    pongs.retain(|(_, a)| *a != at);
                    for (nonce, _) in due {
                        l.on_pong(nonce, now);
                        arrived.push((nonce, now));
                    }
                }
                _ => {
                    now = timer;
                    if let Some(nonce) = l.ping_due(now) {
                        prop_assert_eq!(nonce, pings.len() as u64 + 1, "nonces count from 1");
                        pings.push((nonce, now));
                        if nonce <= stop_after {
                            let delay = answer_ms[(nonce as usize - 1) % answer_ms.len()];
                            pongs.push((nonce, now + ms(delay)));
                        }
                    }
                }
            }
            // Reference at `now`.
            let answered = |n: u64| arrived.iter().any(|(k, at)| *k >= n && *at <= now);
            let oldest_unanswered = pings.iter().find(|(n, _)| !answered(*n)).map(|(_, s)| *s);
            let ref_deadline = oldest_unanswered.map(|s| s + ms(timeout_ms));
            let ref_hung = ref_deadline.is_some_and(|d| d <= now);
            prop_assert_eq!(l.hung_deadline(), ref_deadline, "hung deadline at step {}", step);
            prop_assert_eq!(l.hung(now), ref_hung, "hung at step {}", step);
            prop_assert!(l.next_wake(now) >= now);
            if never_silent {
                prop_assert!(!ref_hung, "a child answering every ping in time is never hung");
            }
            if ref_hung {
                // The supervisor kills it here.
                prop_assert!(!never_silent);
                return Ok(());
            }
        }
        // A child still alive after 300 events is one the reference says is not hung.
        prop_assert!(!l.hung(now));
    }
}
