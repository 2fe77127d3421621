//! How many observational facts one child may publish (its steps, runs
//! and custom events): a child in a loop must not grow the event log's
//! backlog, and so the supervisor's memory, without bound. Facts past the
//! rate are counted, not published, and the count is published once the
//! rate allows again, so an observer sees that (and how much) was left out.
//! Decisions (spawns, drains, cancels, recycles, mail) are never throttled.

use std::time::{Duration, Instant};

/// Facts a child may publish in a burst.
pub const BURST: u32 = 2_000;

/// Facts a child may publish each second, sustained.
pub const PER_SECOND: u32 = 500;

/// A token bucket with a count of what it refused.
#[derive(Debug)]
pub struct Throttle {
    tokens: f64,
    at: Instant,
    dropped: u64,
    burst: f64,
    per_second: f64,
}

/// What to do with one fact.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Publish it.
    Publish,
    /// Publish it, after a note that this many were left out before it.
    PublishAfterDropped(u64),
    /// Leave it out (counted).
    Drop,
}

impl Throttle {
    /// A full bucket at `now`, at the rate for facts.
    pub fn new(now: Instant) -> Self {
        Self::with_rate(now, BURST, PER_SECOND)
    }

    /// A full bucket at `now` of `burst` tokens, refilled at `per_second`
    /// (the same bound for something other than facts: output lines).
    pub fn with_rate(now: Instant, burst: u32, per_second: u32) -> Self {
        Self {
            tokens: f64::from(burst),
            at: now,
            dropped: 0,
            burst: f64::from(burst),
            per_second: f64::from(per_second),
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at);
        self.at = now;
        self.tokens = (self.tokens + elapsed.as_secs_f64() * self.per_second).min(self.burst);
    }

    /// Whether a fact at `now` is published.
    pub fn admit(&mut self, now: Instant) -> Verdict {
        self.refill(now);
        if self.tokens < 1.0 {
            self.dropped = self.dropped.saturating_add(1);
            return Verdict::Drop;
        }
        self.tokens -= 1.0;
        match std::mem::take(&mut self.dropped) {
            0 => Verdict::Publish,
            n => Verdict::PublishAfterDropped(n),
        }
    }

    /// The facts left out so far, reported now (the child is gone): taken,
    /// so they are reported once.
    pub fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped)
    }

    /// The count of facts left out, once the rate allows a report at `now`
    /// (a flood that went quiet is still reported).
    pub fn report_due(&mut self, now: Instant) -> Option<u64> {
        if self.dropped == 0 {
            return None;
        }
        self.refill(now);
        if self.tokens < 1.0 {
            return None;
        }
        self.tokens -= 1.0;
        Some(std::mem::take(&mut self.dropped))
    }

    /// When a report of what was left out is next possible, if one is owed.
    pub fn report_at(&self) -> Option<Instant> {
        (self.dropped > 0).then(|| {
            let wait = (1.0 - self.tokens).max(0.0) / self.per_second;
            self.at + Duration::from_secs_f64(wait)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_a_flood_is_counted_and_the_count_reported_once() {
        let t0 = Instant::now();
        let mut t = Throttle::new(t0);
        for _ in 0..BURST {
            assert_eq!(t.admit(t0), Verdict::Publish);
        }
        for _ in 0..1000 {
            assert_eq!(t.admit(t0), Verdict::Drop);
        }
        assert_eq!(t.dropped, 1000);
        // A second later the rate admits again, and says what was dropped.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(t.admit(t1), Verdict::PublishAfterDropped(1000));
        assert_eq!(t.admit(t1), Verdict::Publish);
        // Sustained: PER_SECOND a second.
        let mut published = 0;
        for ms in 0..10_000u64 {
            let now = t1 + Duration::from_millis(ms / 10);
            if t.admit(now) != Verdict::Drop {
                published += 1;
            }
        }
        assert!(
            published <= PER_SECOND as usize + BURST as usize,
            "{published}"
        );
        let flood_end = t1 + Duration::from_secs(1);
        assert!(
            t.report_at()
                .is_some_and(|at| at <= flood_end + Duration::from_millis(3))
        );
        assert!(
            t.report_due(flood_end + Duration::from_secs(1))
                .is_some_and(|n| n > 0)
        );
        assert_eq!(t.report_at(), None);
        assert_eq!(t.take_dropped(), 0);
    }
}
