//! The cancellation token handed to every step: it fires when the step must
//! stop, and says why, so a step can wind down gently on drain and at once on
//! a signed cancel.

use std::sync::Arc;

use tokio::sync::watch;

pub use crate::cause::CancelCause;

/// A cloneable signal that a step should stop, carrying the most severe
/// cause seen so far.
#[derive(Debug, Clone)]
pub struct CancelToken {
    cause: Arc<watch::Sender<Option<CancelCause>>>,
}

impl Default for CancelToken {
    fn default() -> Self {
        Self::new()
    }
}

impl CancelToken {
    /// A token that has not fired.
    pub fn new() -> Self {
        Self {
            cause: Arc::new(watch::Sender::new(None)),
        }
    }

    /// Fires the token, or escalates it when `cause` is more severe than the
    /// current one; a milder cause than the current one changes nothing.
    pub fn cancel(&self, cause: CancelCause) {
        self.cause.send_if_modified(|current| {
            if *current < Some(cause) {
                *current = Some(cause);
                true
            } else {
                false
            }
        });
    }

    /// Whether the token has fired.
    pub fn is_cancelled(&self) -> bool {
        self.cause.borrow().is_some()
    }

    /// The most severe cause so far, or `None` while the step may go on.
    pub fn cause(&self) -> Option<CancelCause> {
        *self.cause.borrow()
    }

    /// Resolves when the token fires, with its cause.
    pub async fn cancelled(&self) -> CancelCause {
        self.escalated(None).await
    }

    /// Resolves when the cause becomes more severe than `seen`, with the new
    /// cause; lets a step react to a drain and later to a cancel.
    pub async fn escalated(&self, seen: Option<CancelCause>) -> CancelCause {
        let mut rx = self.cause.subscribe();
        let cause = match rx.wait_for(|c| *c > seen).await {
            Ok(cause) => *cause,
            // The sender lives in `self`, so it cannot be dropped while we wait.
            Err(_) => None,
        };
        match cause {
            Some(cause) => cause,
            // Unreachable: `wait_for` only returns a value above `seen >= None`.
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn fires_once_and_only_escalates() {
        let token = CancelToken::new();
        assert!(!token.is_cancelled());
        let waiter = {
            let token = token.clone();
            tokio::spawn(async move { token.cancelled().await })
        };
        token.cancel(CancelCause::Drain);
        assert_eq!(waiter.await.unwrap(), CancelCause::Drain);
        token.cancel(CancelCause::Cancel);
        assert_eq!(token.cause(), Some(CancelCause::Cancel));
        token.cancel(CancelCause::Shutdown);
        assert_eq!(token.cause(), Some(CancelCause::Cancel), "never downgrades");
    }

    #[tokio::test]
    async fn escalated_waits_for_a_more_severe_cause() {
        let token = CancelToken::new();
        token.cancel(CancelCause::Drain);
        let pending = tokio::time::timeout(
            Duration::from_millis(20),
            token.escalated(Some(CancelCause::Drain)),
        )
        .await;
        assert!(pending.is_err(), "drain again is no escalation");
        token.cancel(CancelCause::Cancel);
        assert_eq!(
            token.escalated(Some(CancelCause::Drain)).await,
            CancelCause::Cancel
        );
    }
}
