//! Kill escalation timing (design §3): when a stopping child's SIGTERM turns
//! into SIGKILL.
//!
//! The supervisor sends SIGTERM to the child's process group, calls
//! [`KillEscalation::begin`], sets a timer for
//! [`deadline`](KillEscalation::deadline), and sends SIGKILL when
//! [`poll`](KillEscalation::poll) says so (exactly once) or whenever
//! [`due`](KillEscalation::due) is true. It always reaps afterwards.
//!
//! Settings:
//!
//! - **`kill_timeout`** (default [`DEFAULT_KILL_TIMEOUT`] = 10 s, per
//!   deployment): grace between SIGTERM and SIGKILL. SIGKILL is due when
//!   `now >= begin + kill_timeout`. Zero means SIGKILL is due at once
//!   (SIGTERM is still sent first). An absurdly long timeout saturates at the
//!   farthest representable instant instead of overflowing.
//! - **Forcing**: [`force`](KillEscalation::force) (SIGQUIT to the supervisor,
//!   an operator's stop-now) makes SIGKILL due immediately, whatever `now`
//!   is; the deadline becomes the instant the escalation began.
//! - A clock stepping backwards only delays SIGKILL until it catches up.

use std::time::{Duration, Instant};

use crate::clock::saturating_add;

/// The default grace between SIGTERM and SIGKILL (`kill_timeout`), 10 s.
pub const DEFAULT_KILL_TIMEOUT: Duration = Duration::from_secs(10);

/// One stop in progress: SIGTERM was sent at `began`; SIGKILL is due at the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KillEscalation {
    began: Instant,
    kill_timeout: Duration,
    deadline: Instant,
    forced: bool,
    fired: bool,
}

impl KillEscalation {
    /// SIGTERM was sent at `now`; SIGKILL becomes due `kill_timeout` later.
    pub fn begin(now: Instant, kill_timeout: Duration) -> Self {
        Self {
            began: now,
            kill_timeout,
            deadline: saturating_add(now, kill_timeout),
            forced: false,
            fired: false,
        }
    }

    /// When SIGKILL is due (the instant the escalation began, once forced).
    pub fn deadline(&self) -> Instant {
        if self.forced {
            self.began
        } else {
            self.deadline
        }
    }

    /// Whether SIGKILL is due at `now` (always, once forced).
    pub fn due(&self, now: Instant) -> bool {
        self.forced || now >= self.deadline
    }

    /// Whether SIGKILL should be sent now: `true` exactly once, the first call when due.
    pub fn poll(&mut self, now: Instant) -> bool {
        if self.fired || !self.due(now) {
            return false;
        }
        self.fired = true;
        true
    }

    /// An operator wants the child dead now: SIGKILL is due at once.
    pub fn force(&mut self) {
        self.forced = true;
    }

    /// Whether [`Self::force`] was called.
    pub fn is_forced(&self) -> bool {
        self.forced
    }

    /// Whether [`Self::poll`] has already said to send SIGKILL.
    pub fn has_fired(&self) -> bool {
        self.fired
    }

    /// When SIGTERM was sent.
    pub fn began(&self) -> Instant {
        self.began
    }

    /// The configured grace period.
    pub fn kill_timeout(&self) -> Duration {
        self.kill_timeout
    }

    /// Grace left before SIGKILL at `now` (zero once due).
    pub fn remaining(&self, now: Instant) -> Duration {
        if self.forced {
            return Duration::ZERO;
        }
        self.deadline.saturating_duration_since(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn default_is_ten_seconds() {
        assert_eq!(DEFAULT_KILL_TIMEOUT, Duration::from_secs(10));
    }

    #[test]
    fn due_exactly_at_the_deadline() {
        let t0 = Instant::now();
        let k = KillEscalation::begin(t0, ms(100));
        assert_eq!(k.deadline(), t0 + ms(100));
        assert_eq!(k.began(), t0);
        assert_eq!(k.kill_timeout(), ms(100));
        assert!(!k.due(t0));
        assert!(!k.due(t0 + ms(99)));
        assert!(k.due(t0 + ms(100)));
        assert!(k.due(t0 + ms(5000)));
        assert_eq!(k.remaining(t0 + ms(30)), ms(70));
        assert_eq!(k.remaining(t0 + ms(300)), Duration::ZERO);
    }

    #[test]
    fn poll_fires_once() {
        let t0 = Instant::now();
        let mut k = KillEscalation::begin(t0, ms(100));
        assert!(!k.poll(t0 + ms(50)));
        assert!(!k.has_fired());
        assert!(k.poll(t0 + ms(100)));
        assert!(k.has_fired());
        assert!(!k.poll(t0 + ms(200)));
        assert!(k.due(t0 + ms(200)), "due stays true");
    }

    #[test]
    fn force_makes_it_due_at_once() {
        let t0 = Instant::now();
        let mut k = KillEscalation::begin(t0, ms(10_000));
        k.force();
        assert!(k.is_forced());
        assert!(k.due(t0));
        assert_eq!(k.deadline(), t0);
        assert_eq!(k.remaining(t0), Duration::ZERO);
        assert!(k.poll(t0));
        assert!(!k.poll(t0));
        k.force();
        assert!(!k.poll(t0), "forcing again does not re-fire");
    }

    #[test]
    fn zero_timeout_is_due_at_once() {
        let t0 = Instant::now();
        let k = KillEscalation::begin(t0, Duration::ZERO);
        assert!(k.due(t0));
    }

    #[test]
    fn huge_timeout_saturates() {
        let t0 = Instant::now();
        let k = KillEscalation::begin(t0, Duration::MAX);
        assert!(!k.due(t0 + Duration::from_secs(1_000_000_000)));
        assert!(k.deadline() > t0);
    }

    #[test]
    fn clock_stepping_back_is_not_due() {
        let t0 = Instant::now() + ms(1000);
        let k = KillEscalation::begin(t0, ms(100));
        assert!(!k.due(t0 - ms(500)));
        assert_eq!(k.remaining(t0 - ms(500)), ms(600));
    }
}
