//! Keeps the mail table bounded: done items older than `mail_retention`
//! are deleted (their payloads were already cleared on ack), and with them
//! the idempotency keys they were sent under. Inbox and processing items
//! are never touched.

use std::time::Duration;

use tracing::{error, info};

use super::handle::StoreHandle;
use crate::clock::unix_ms;

/// Longest pause between two prunes.
const MAX_PERIOD: Duration = Duration::from_secs(3600);

/// How often to prune for a given retention: a tenth of it, so items go
/// at most about 10% past it, between 1 s and an hour.
pub fn period(retention: Duration) -> Duration {
    (retention / 10).clamp(Duration::from_secs(1), MAX_PERIOD)
}

/// Prunes at start and then every [`period`] until the task is dropped.
pub async fn run(store: StoreHandle, retention: Duration) {
    let mut ticker = tokio::time::interval(period(retention));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let retention_ms = u64::try_from(retention.as_millis()).unwrap_or(u64::MAX);
    loop {
        ticker.tick().await;
        let cut = unix_ms().saturating_sub(retention_ms);
        match store.call(move |s| s.prune_done_mail(cut)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => info!(items = n, "done mail past mail_retention deleted"),
            Ok(Err(e)) => {
                error!(error = %e, "cannot prune done mail; it is kept and tried again later")
            }
            // The store is gone: the supervisor is stopping.
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_period_is_a_tenth_of_the_retention_within_bounds() {
        assert_eq!(period(Duration::from_secs(5)), Duration::from_secs(1));
        assert_eq!(period(Duration::from_secs(600)), Duration::from_secs(60));
        assert_eq!(period(Duration::from_secs(7 * 86_400)), MAX_PERIOD);
    }
}
