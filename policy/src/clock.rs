//! The injected clock: where every decision in this crate gets "now".
//!
//! The decision types never read a clock themselves; they take `now` as an
//! argument. The supervisor reads the monotonic clock where an event
//! arrives and hands that instant to every decision it makes of it; tests
//! hold a [`ManualClock`] and move it by hand.
//!
//! - [`SystemClock`]: the real monotonic clock (`Instant::now()`).
//! - [`ManualClock`]: a test clock that moves only when told to. Starts at the
//!   `Instant::now()` of its creation (or at a given instant), then
//!   [`advance`](ManualClock::advance) moves it forward (saturating: an
//!   advance past what `Instant` can represent stops at the largest instant
//!   reachable) and [`set`](ManualClock::set) puts it anywhere, backwards
//!   included, to test how decisions treat a clock that steps back.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A source of the current monotonic time, injected so decisions are testable.
pub trait Clock: Send + Sync {
    /// The current instant.
    fn now(&self) -> Instant;
}

/// The real monotonic clock, for production.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when a test says so.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<Instant>,
}

impl ManualClock {
    /// A manual clock reading the real time of its creation.
    pub fn new() -> Self {
        Self::starting_at(Instant::now())
    }

    /// A manual clock reading `start`.
    pub fn starting_at(start: Instant) -> Self {
        Self {
            now: Mutex::new(start),
        }
    }

    /// Moves the clock forward by `by`, saturating at the largest instant reachable.
    pub fn advance(&self, by: Duration) {
        let mut now = self.lock();
        *now = saturating_add(*now, by);
    }

    /// Puts the clock at `to` (backwards allowed, for testing clock steps).
    pub fn set(&self, to: Instant) {
        *self.lock() = to;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Instant> {
        // A poisoned lock still holds a valid Instant: keep using it.
        self.now
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        *self.lock()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Instant {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> Instant {
        (**self).now()
    }
}

/// `at + by`, or the latest instant reachable from `at` when that overflows.
///
/// Deadlines computed from absurd settings (`Duration::MAX`) land far in the
/// future instead of panicking or wrapping.
pub(crate) fn saturating_add(at: Instant, by: Duration) -> Instant {
    if let Some(sum) = at.checked_add(by) {
        return sum;
    }
    // Binary search for the largest addable duration: at most ~96 steps.
    let mut lo = Duration::ZERO; // known addable
    let mut hi = by; // known not addable
    while hi.saturating_sub(lo) > Duration::from_nanos(1) {
        let half = hi
            .saturating_sub(lo)
            .checked_div(2)
            .unwrap_or(Duration::ZERO);
        let mid = lo.saturating_add(half);
        if at.checked_add(mid).is_some() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    at.checked_add(lo).unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let t0 = Instant::now();
        let clock = ManualClock::starting_at(t0);
        assert_eq!(clock.now(), t0);
        assert_eq!(clock.now(), t0);
        clock.advance(Duration::from_millis(250));
        assert_eq!(clock.now(), t0 + Duration::from_millis(250));
        clock.advance(Duration::ZERO);
        assert_eq!(clock.now(), t0 + Duration::from_millis(250));
    }

    #[test]
    fn manual_clock_set_can_step_backwards() {
        let t0 = Instant::now();
        let clock = ManualClock::starting_at(t0 + Duration::from_secs(5));
        clock.set(t0);
        assert_eq!(clock.now(), t0);
    }

    #[test]
    fn manual_clock_advance_saturates() {
        let t0 = Instant::now();
        let clock = ManualClock::starting_at(t0);
        clock.advance(Duration::MAX);
        let far = clock.now();
        assert!(far > t0 + Duration::from_secs(1_000_000));
        clock.advance(Duration::MAX);
        assert_eq!(clock.now(), far, "already at the limit");
    }

    #[test]
    fn new_manual_clock_reads_roughly_now() {
        let before = Instant::now();
        let clock = ManualClock::default();
        assert!(clock.now() >= before);
    }

    #[test]
    fn system_clock_is_monotonic() {
        let clock = SystemClock;
        let a = clock.now();
        let b = clock.now();
        assert!(b >= a);
    }

    #[test]
    fn clock_works_through_arc_and_reference() {
        let t0 = Instant::now();
        let manual = Arc::new(ManualClock::starting_at(t0));
        let shared: Arc<dyn Clock> = manual.clone();
        manual.advance(Duration::from_secs(1));
        assert_eq!(shared.now(), t0 + Duration::from_secs(1));
        fn read(clock: impl Clock) -> Instant {
            clock.now()
        }
        assert_eq!(read(&*manual), t0 + Duration::from_secs(1));
        assert_eq!(read(shared), t0 + Duration::from_secs(1));
    }

    #[test]
    fn saturating_add_is_exact_when_it_fits() {
        let t0 = Instant::now();
        assert_eq!(
            saturating_add(t0, Duration::from_millis(7)),
            t0 + Duration::from_millis(7)
        );
        let far = saturating_add(t0, Duration::MAX);
        assert!(far >= t0);
        assert!(far.checked_add(Duration::from_secs(1)).is_none());
    }
}
