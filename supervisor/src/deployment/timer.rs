//! Sleeps that end within a fraction of a millisecond of their deadline,
//! for the deadlines an operator measures: SIGKILL at `kill_timeout`, the
//! end of a backoff, a drain budget running out. Tokio's timer wheel ticks
//! in whole milliseconds and rounds up, so a deadline fires up to ~1 ms
//! late; here the runtime's timer wakes us a little early and a blocking
//! thread sleeps the rest with the kernel's high-resolution timer.

use std::time::{Duration, Instant};

/// How early the runtime's timer hands over.
const HANDOVER: Duration = Duration::from_millis(2);

/// Returns at `at` (within the kernel's timer slack, ~50 µs), not before.
/// Cancel-safe: dropped, it leaves at most a 2 ms sleep on a blocking
/// thread.
pub async fn sleep_until(at: Instant) {
    if let Some(early) = at.checked_sub(HANDOVER)
        && Instant::now() < early
    {
        tokio::time::sleep_until(tokio::time::Instant::from_std(early)).await;
    }
    let left = at.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return;
    }
    if tokio::task::spawn_blocking(move || std::thread::sleep(left))
        .await
        .is_err()
    {
        // No blocking thread to be had: the runtime's timer, a little late.
        tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn it_never_ends_early_and_rarely_late() {
        let mut late = Vec::new();
        for ms in [0u64, 1, 3, 7, 12] {
            let at = Instant::now() + Duration::from_millis(ms);
            sleep_until(at).await;
            let now = Instant::now();
            assert!(now >= at, "never early");
            late.push(now - at);
        }
        late.sort();
        // Generous: a loaded machine delays any thread; the median is what
        // the benchmark measures.
        assert!(late[2] < Duration::from_millis(20), "{late:?}");
    }
}
