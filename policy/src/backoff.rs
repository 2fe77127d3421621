//! Exponential backoff: the one doubling rule behind restart delays and
//! the retries of a refused journal commit.

use std::time::Duration;

/// The `n`-th delay of a doubling series (`n` from 1): `initial`, then
/// twice that, and so on, never more than `max`; zero when `initial` or
/// `max` is zero or `n` is 0.
pub fn doubling(initial: Duration, max: Duration, n: u32) -> Duration {
    if n == 0 || initial.is_zero() || max.is_zero() {
        return Duration::ZERO;
    }
    let mut delay = initial;
    let mut doublings = n.saturating_sub(1);
    // Terminates within ~100 doublings: a non-zero Duration saturates by then.
    while doublings > 0 && delay < max {
        delay = delay.saturating_mul(2);
        doublings = doublings.saturating_sub(1);
    }
    delay.min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_ceiling() {
        let ms = Duration::from_millis;
        let d = |n| doubling(ms(100), ms(1000), n);
        assert_eq!(
            [d(0), d(1), d(2), d(3), d(4), d(5), d(99)],
            [
                ms(0),
                ms(100),
                ms(200),
                ms(400),
                ms(800),
                ms(1000),
                ms(1000)
            ]
        );
        assert_eq!(doubling(Duration::ZERO, ms(5), 3), Duration::ZERO);
        assert_eq!(doubling(ms(1), Duration::MAX, u32::MAX), Duration::MAX);
    }
}
