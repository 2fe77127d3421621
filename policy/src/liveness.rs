//! Liveness probing (design §3): when to ping a ready child and when a
//! silent one is hung.
//!
//! The supervisor holds one [`Liveness`] per ready child, sets a timer for
//! [`next_wake`](Liveness::next_wake), and on every wake-up (or any event):
//! sends `Ping { nonce }` for whatever [`ping_due`](Liveness::ping_due)
//! returns, feeds every `Pong` to [`on_pong`](Liveness::on_pong), and kills
//! and restarts the child like a crash once [`hung`](Liveness::hung) is true.
//!
//! Settings and semantics:
//!
//! - **`liveness_interval`** (default [`DEFAULT_LIVENESS_INTERVAL`] = 10 s):
//!   a ping is due `interval` after the previous ping was *issued* (the
//!   first, `interval` after the child became ready), whether or not it was
//!   answered: a slow child keeps being probed. A late wake-up does not cause
//!   a burst: the next ping is `interval` after the late one. Clamped to at
//!   least [`MIN_LIVENESS_INTERVAL`] (1 ms) so a zero setting cannot spin.
//! - **`liveness_timeout`** (default [`DEFAULT_LIVENESS_TIMEOUT`] = 30 s):
//!   the child is hung when its *oldest unanswered* ping was issued at least
//!   `timeout` ago. So a child that answers every ping within `timeout` is
//!   never hung, however long its steps run, and a child that goes silent is
//!   hung exactly `timeout` after the first ping it did not answer (not after
//!   the latest one: later pings do not extend its grace). Zero: any ping not
//!   answered at the instant it was issued makes the child hung.
//! - **Pongs**: a `Pong` for an outstanding nonce answers that ping *and every
//!   earlier one* (the channel is ordered; a later answer proves the child is
//!   alive now). A pong for an unknown, already answered or never issued
//!   nonce is ignored (`on_pong` returns `false`; the supervisor may log it).
//! - **Nonces** are issued 1, 2, 3, … per child.
//! - **Bound**: at most [`MAX_OUTSTANDING_PINGS`] unanswered pings are kept;
//!   while that many are outstanding no new ping is issued (the oldest one
//!   already decides hung-ness), so a silent child cannot grow memory.
//! - **Next wake**: the earlier of the next ping and the hung deadline, never
//!   earlier than `now` (an overdue action is due now).
//! - A clock that steps backwards only postpones pings and hung-ness.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::clock::saturating_add;

/// The default time between pings (`liveness_interval`), 10 s.
pub const DEFAULT_LIVENESS_INTERVAL: Duration = Duration::from_secs(10);

/// The default silence after which a child is hung (`liveness_timeout`), 30 s.
pub const DEFAULT_LIVENESS_TIMEOUT: Duration = Duration::from_secs(30);

/// The shortest ping interval honoured, so a zero setting cannot busy-loop.
pub const MIN_LIVENESS_INTERVAL: Duration = Duration::from_millis(1);

/// The most unanswered pings remembered per child; no new ping is issued beyond it.
pub const MAX_OUTSTANDING_PINGS: usize = 1024;

/// One child's ping schedule and unanswered pings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Liveness {
    interval: Duration,
    timeout: Duration,
    next_ping: Instant,
    next_nonce: u64,
    /// Unanswered pings as (nonce, issued at), oldest first.
    outstanding: VecDeque<(u64, Instant)>,
    last_pong: Option<Instant>,
}

impl Liveness {
    /// Probing for a child that became ready at `now`: first ping due `interval` later.
    pub fn new(interval: Duration, timeout: Duration, now: Instant) -> Self {
        let interval = interval.max(MIN_LIVENESS_INTERVAL);
        Self {
            interval,
            timeout,
            next_ping: saturating_add(now, interval),
            next_nonce: 1,
            outstanding: VecDeque::new(),
            last_pong: None,
        }
    }

    /// The nonce to send in a `Ping` if one is due at `now` (recorded as outstanding).
    pub fn ping_due(&mut self, now: Instant) -> Option<u64> {
        if now < self.next_ping || self.outstanding.len() >= MAX_OUTSTANDING_PINGS {
            return None;
        }
        let nonce = self.next_nonce;
        self.next_nonce = self.next_nonce.wrapping_add(1).max(1);
        self.outstanding.push_back((nonce, now));
        self.next_ping = saturating_add(now, self.interval);
        Some(nonce)
    }

    /// A `Pong`: answers that ping and every earlier one; `false` if the nonce was not outstanding.
    pub fn on_pong(&mut self, nonce: u64, now: Instant) -> bool {
        let Some(pos) = self.outstanding.iter().position(|(n, _)| *n == nonce) else {
            return false;
        };
        self.outstanding.drain(..=pos);
        self.last_pong = Some(now);
        true
    }

    /// Whether the oldest unanswered ping was issued at least `timeout` before `now`.
    pub fn hung(&self, now: Instant) -> bool {
        self.hung_deadline().is_some_and(|deadline| now >= deadline)
    }

    /// When to wake next: the earlier of the next ping and the hung deadline, not before `now`.
    pub fn next_wake(&self, now: Instant) -> Instant {
        let ping = (self.outstanding.len() < MAX_OUTSTANDING_PINGS).then_some(self.next_ping);
        let wake = match (ping, self.hung_deadline()) {
            (Some(p), Some(h)) => p.min(h),
            (Some(p), None) => p,
            (None, Some(h)) => h,
            // Unreachable in practice (full implies an oldest ping); wake after an interval.
            (None, None) => saturating_add(now, self.interval),
        };
        wake.max(now)
    }

    /// When the child becomes hung if the oldest unanswered ping stays unanswered.
    pub fn hung_deadline(&self) -> Option<Instant> {
        self.outstanding
            .front()
            .map(|(_, issued)| saturating_add(*issued, self.timeout))
    }

    /// When the oldest unanswered ping was issued, if any (for logs: "silent since").
    pub fn unanswered_since(&self) -> Option<Instant> {
        self.outstanding.front().map(|(_, issued)| *issued)
    }

    /// How many pings are unanswered.
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// When the last valid pong arrived, if any.
    pub fn last_pong(&self) -> Option<Instant> {
        self.last_pong
    }

    /// The ping interval in force (after clamping).
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// The silence after which the child is hung.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn defaults() {
        assert_eq!(DEFAULT_LIVENESS_INTERVAL, Duration::from_secs(10));
        assert_eq!(DEFAULT_LIVENESS_TIMEOUT, Duration::from_secs(30));
    }

    #[test]
    fn first_ping_is_due_one_interval_after_ready() {
        let t0 = Instant::now();
        let mut l = Liveness::new(ms(100), ms(300), t0);
        assert_eq!(l.next_wake(t0), t0 + ms(100));
        assert_eq!(l.ping_due(t0 + ms(99)), None);
        assert_eq!(l.ping_due(t0 + ms(100)), Some(1));
        assert_eq!(l.ping_due(t0 + ms(100)), None, "one ping per interval");
        assert_eq!(l.outstanding(), 1);
        assert_eq!(l.unanswered_since(), Some(t0 + ms(100)));
    }

    #[test]
    fn a_child_that_answers_every_ping_is_never_hung() {
        let t0 = Instant::now();
        let mut l = Liveness::new(ms(100), ms(300), t0);
        let mut t = t0;
        for i in 1..=50u64 {
            t = l.next_wake(t);
            assert_eq!(l.ping_due(t), Some(i));
            assert!(!l.hung(t));
            // Answers just inside the timeout.
            let answer = t + ms(299);
            assert!(!l.hung(answer));
            assert!(l.on_pong(i, t + ms(50)));
            assert!(!l.hung(answer));
            assert_eq!(l.last_pong(), Some(t + ms(50)));
        }
        assert_eq!(l.outstanding(), 0);
        assert_eq!(l.hung_deadline(), None);
    }

    #[test]
    fn a_silent_child_is_hung_timeout_after_the_first_unanswered_ping() {
        let t0 = Instant::now();
        let mut l = Liveness::new(ms(100), ms(300), t0);
        assert_eq!(l.ping_due(t0 + ms(100)), Some(1));
        assert!(l.on_pong(1, t0 + ms(110)));
        assert_eq!(l.ping_due(t0 + ms(200)), Some(2)); // never answered
        assert_eq!(l.ping_due(t0 + ms(300)), Some(3));
        assert_eq!(l.ping_due(t0 + ms(400)), Some(4));
        assert!(!l.hung(t0 + ms(499)));
        assert_eq!(l.hung_deadline(), Some(t0 + ms(500)));
        assert!(l.hung(t0 + ms(500)));
    }

    #[test]
    fn a_later_pong_answers_earlier_pings() {
        let t0 = Instant::now();
        let mut l = Liveness::new(ms(100), ms(300), t0);
        l.ping_due(t0 + ms(100));
        l.ping_due(t0 + ms(200));
        l.ping_due(t0 + ms(300));
        assert!(l.on_pong(2, t0 + ms(310)));
        assert_eq!(l.outstanding(), 1);
        assert_eq!(l.unanswered_since(), Some(t0 + ms(300)));
        assert!(!l.hung(t0 + ms(599)));
        assert!(l.hung(t0 + ms(600)));
        assert!(!l.on_pong(1, t0 + ms(320)), "already answered");
    }

    #[test]
    fn unknown_pongs_are_ignored() {
        let t0 = Instant::now();
        let mut l = Liveness::new(ms(100), ms(300), t0);
        assert!(!l.on_pong(1, t0), "never issued");
        l.ping_due(t0 + ms(100));
        assert!(!l.on_pong(99, t0 + ms(110)));
        assert!(!l.on_pong(0, t0 + ms(110)));
        assert_eq!(l.outstanding(), 1);
        assert_eq!(l.last_pong(), None);
        assert!(l.hung(t0 + ms(400)));
    }

    #[test]
    fn late_wakeups_do_not_burst() {
        let t0 = Instant::now();
        let mut l = Liveness::new(ms(100), ms(10_000), t0);
        assert_eq!(l.ping_due(t0 + ms(1000)), Some(1));
        assert_eq!(l.ping_due(t0 + ms(1000)), None);
        assert_eq!(l.next_wake(t0 + ms(1000)), t0 + ms(1100));
    }

    #[test]
    fn next_wake_is_the_earlier_of_ping_and_hung_deadline() {
        let t0 = Instant::now();
        let mut l = Liveness::new(ms(100), ms(50), t0);
        l.ping_due(t0 + ms(100));
        assert_eq!(l.next_wake(t0 + ms(100)), t0 + ms(150));
        l.on_pong(1, t0 + ms(120));
        assert_eq!(l.next_wake(t0 + ms(120)), t0 + ms(200));
        // Overdue: wake now.
        assert_eq!(l.next_wake(t0 + ms(500)), t0 + ms(500));
    }

    #[test]
    fn zero_interval_is_clamped() {
        let t0 = Instant::now();
        let mut l = Liveness::new(Duration::ZERO, ms(10), t0);
        assert_eq!(l.interval(), MIN_LIVENESS_INTERVAL);
        assert_eq!(l.ping_due(t0), None);
        assert_eq!(l.ping_due(t0 + ms(1)), Some(1));
        assert_eq!(l.ping_due(t0 + ms(1)), None);
    }

    #[test]
    fn zero_timeout_is_hung_unless_answered_at_once() {
        let t0 = Instant::now();
        let mut l = Liveness::new(ms(100), Duration::ZERO, t0);
        assert_eq!(l.timeout(), Duration::ZERO);
        l.ping_due(t0 + ms(100));
        assert!(l.hung(t0 + ms(100)));
        l.on_pong(1, t0 + ms(100));
        assert!(!l.hung(t0 + ms(100)));
    }

    #[test]
    fn outstanding_pings_are_bounded() {
        let t0 = Instant::now();
        let mut l = Liveness::new(ms(1), Duration::from_secs(3600), t0);
        let mut t = t0;
        for _ in 0..(MAX_OUTSTANDING_PINGS + 10) {
            t += ms(1);
            l.ping_due(t);
        }
        assert_eq!(l.outstanding(), MAX_OUTSTANDING_PINGS);
        // With the queue full, the only wake-up left is the hung deadline.
        assert_eq!(l.next_wake(t), t0 + ms(1) + Duration::from_secs(3600));
        // An answer frees the queue and pinging resumes.
        let newest = u64::try_from(MAX_OUTSTANDING_PINGS).unwrap_or(u64::MAX);
        assert!(l.on_pong(newest, t));
        assert_eq!(l.outstanding(), 0);
        assert_eq!(l.ping_due(t), Some(newest + 1));
    }

    #[test]
    fn never_hung_before_any_ping() {
        let t0 = Instant::now();
        let l = Liveness::new(ms(100), ms(1), t0);
        assert!(!l.hung(t0 + ms(99)));
        assert!(
            !l.hung(t0 + Duration::from_secs(1000)),
            "no ping issued yet"
        );
    }

    #[test]
    fn huge_settings_saturate() {
        let t0 = Instant::now();
        let mut l = Liveness::new(Duration::MAX, Duration::MAX, t0);
        assert_eq!(l.ping_due(t0 + Duration::from_secs(1_000_000)), None);
        assert!(l.next_wake(t0) > t0);
    }
}
