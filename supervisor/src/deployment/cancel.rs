//! Signed cancels on their way to a child: each is committed to the
//! journal before it is sent (DESIGN §4), and a commit the journal refuses
//! is retried with backoff and reported, never dropped and never skipped.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use std::sync::Arc;

use ed25519_dalek::SigningKey;
use wfhost_ipc::{
    CancelOrigin, CancelRequested, Control, MailCancelRequested, SignedCancel, SignedMailCancel,
};
use wfhost_policy::{Escalation, Fact, format_duration};

use super::Waiter;
use crate::clock::unix_ms;
use crate::shared::Shared;

/// The signed cancels a spent drain budget issues: one per run that still
/// had cancel-behaviour work when it ran out, with the reason they give.
pub fn for_escalation(
    escalation: &Escalation,
    key: &SigningKey,
    deployment: &str,
) -> (String, Vec<SignedCancel>) {
    let reason = format!(
        "drain budget of {} spent",
        format_duration(escalation.budget)
    );
    let signed = escalation
        .runs
        .iter()
        .map(|run| {
            sign(
                key,
                CancelOrigin::SupervisorDrain,
                deployment,
                Some(run.clone()),
                reason.clone(),
            )
        })
        .collect();
    (reason, signed)
}

/// First retry delay after a refused commit.
const RETRY_INITIAL: Duration = Duration::from_millis(100);
/// Longest retry delay.
const RETRY_MAX: Duration = Duration::from_secs(5);

/// A signed cancel: of a run (or every run), or of one mail item.
#[derive(Debug, Clone)]
pub enum Signed {
    /// A run's (protocol 2 and 3).
    Run(SignedCancel),
    /// One mail item's (protocol 3).
    Mail(SignedMailCancel),
}

impl Signed {
    /// The message that carries it to the child.
    pub fn control(self) -> Control {
        match self {
            Self::Run(s) => Control::Cancel(s),
            Self::Mail(s) => Control::CancelMail(s),
        }
    }

    /// What it cancels, for the log.
    pub fn target(&self) -> String {
        match self {
            Self::Run(s) => s.record.run.clone().unwrap_or_else(|| "every run".into()),
            Self::Mail(s) => format!("mail {}", s.record.id),
        }
    }

    /// Who asked, for the log.
    pub fn origin(&self) -> CancelOrigin {
        match self {
            Self::Run(s) => s.record.origin,
            Self::Mail(s) => s.record.origin,
        }
    }
}

/// One signed cancel not yet committed.
#[derive(Debug)]
pub struct Pending {
    /// The signed request.
    pub signed: Signed,
    /// Who waits for it.
    pub reply: Option<Waiter>,
}

/// Cancels waiting for the journal, in the order they were issued.
#[derive(Debug, Default)]
pub struct CancelQueue {
    queue: VecDeque<Pending>,
    retry_at: Option<Instant>,
    failures: u32,
}

/// A cancel's journal commit running on its own task, so the deployment's
/// loop keeps serving while the store waits on a lock or a disk.
pub type Commit = tokio::task::JoinHandle<Result<u64, String>>;

/// The running commit's result; never resolves when none runs.
/// Cancel-safe.
pub async fn wait_commit(commit: &mut Option<Commit>) -> Result<u64, String> {
    match commit {
        Some(task) => {
            let result = task
                .await
                .unwrap_or_else(|e| Err(format!("journal task failed: {e}")));
            *commit = None;
            result
        }
        None => std::future::pending().await,
    }
}

/// Starts committing the next due cancel to the journal, if one is due.
pub fn start_commit(queue: &CancelQueue, shared: &Arc<Shared>, deployment: &str) -> Option<Commit> {
    let pending = queue.due(Instant::now())?;
    let fact = Fact::CancelCommitted {
        cancel: journal_body(&pending.signed),
        journal_seq: None,
    };
    let (shared, id) = (shared.clone(), deployment.to_owned());
    Some(tokio::spawn(async move {
        shared.record_durably(&id, &fact).await
    }))
}

/// Builds and signs a cancel request.
pub fn sign(
    key: &SigningKey,
    origin: CancelOrigin,
    deployment: &str,
    run: Option<String>,
    reason: String,
) -> SignedCancel {
    let record = CancelRequested {
        origin,
        deployment: deployment.to_owned(),
        run,
        reason,
        at_ms: unix_ms(),
    };
    SignedCancel::sign(record, key)
}

/// Builds and signs a cancel of one mail item.
pub fn sign_mail(
    key: &SigningKey,
    origin: CancelOrigin,
    deployment: &str,
    id: u64,
    reason: String,
) -> SignedMailCancel {
    let record = MailCancelRequested {
        origin,
        deployment: deployment.to_owned(),
        id,
        reason,
        at_ms: unix_ms(),
    };
    SignedMailCancel::sign(record, key)
}

/// The journal body of a cancel: the request and its signature, so the
/// journal alone proves what was sent.
pub fn journal_body(signed: &Signed) -> serde_json::Value {
    match signed {
        Signed::Run(s) => {
            let r = &s.record;
            serde_json::json!({
                "origin": r.origin.as_str(),
                "run": r.run,
                "reason": r.reason,
                "at_ms": r.at_ms,
                "key_id": s.key_id.to_string(),
                "signature": hex::encode(&s.signature),
            })
        }
        Signed::Mail(s) => {
            let r = &s.record;
            serde_json::json!({
                "origin": r.origin.as_str(),
                "mail": r.id,
                "reason": r.reason,
                "at_ms": r.at_ms,
                "key_id": s.key_id.to_string(),
                "signature": hex::encode(&s.signature),
            })
        }
    }
}

impl CancelQueue {
    /// Queues a signed cancel behind any already waiting.
    pub fn push(&mut self, signed: Signed, reply: Option<Waiter>) {
        self.queue.push_back(Pending { signed, reply });
    }

    /// The cancel to commit next, when one is due at `now`.
    pub fn due(&self, now: Instant) -> Option<&Pending> {
        match self.retry_at {
            Some(t) if now < t => None,
            _ => self.queue.front(),
        }
    }

    /// When the next commit attempt is due, if any cancel waits.
    pub fn wake(&self) -> Option<Instant> {
        if self.queue.is_empty() {
            None
        } else {
            Some(self.retry_at.unwrap_or_else(Instant::now))
        }
    }

    /// The head was committed: hands it over for sending.
    pub fn committed(&mut self) -> Option<Pending> {
        self.failures = 0;
        self.retry_at = None;
        self.queue.pop_front()
    }

    /// The journal refused the head: schedules a retry and returns the
    /// attempt number and the delay.
    pub fn refused(&mut self, now: Instant) -> (u32, Duration) {
        self.failures = self.failures.saturating_add(1);
        let delay = wfhost_policy::backoff::doubling(RETRY_INITIAL, RETRY_MAX, self.failures);
        self.retry_at = Some(now + delay);
        (self.failures, delay)
    }

    /// How many cancels wait.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Answers every waiter with `error` and empties the queue (the child
    /// is gone, so nothing is left to cancel).
    pub fn abandon(&mut self, error: &str) {
        for p in self.queue.drain(..) {
            if let Some(reply) = p.reply {
                reply.fail(error.to_owned());
            }
        }
        self.retry_at = None;
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> SigningKey {
        SigningKey::from_bytes(&[7; 32])
    }

    #[test]
    fn refused_commits_back_off_and_a_commit_resets() {
        let mut q = CancelQueue::default();
        let t0 = Instant::now();
        q.push(
            Signed::Run(sign(
                &key(),
                CancelOrigin::SupervisorDrain,
                "d",
                Some("r".into()),
                "budget".into(),
            )),
            None,
        );
        assert!(q.due(t0).is_some());
        assert_eq!(q.refused(t0), (1, Duration::from_millis(100)));
        assert!(q.due(t0).is_none(), "not due before the retry");
        assert_eq!(q.refused(t0), (2, Duration::from_millis(200)));
        for _ in 0..10 {
            q.refused(t0);
        }
        assert_eq!(q.refused(t0).1, RETRY_MAX);
        assert!(q.due(t0 + RETRY_MAX).is_some());
        assert!(q.committed().is_some());
        assert_eq!(q.len(), 0);
        assert!(q.wake().is_none());
    }

    #[test]
    fn the_journal_body_carries_the_signature() {
        let signed = sign(&key(), CancelOrigin::Operator, "d", None, "operator".into());
        let body = journal_body(&Signed::Run(signed.clone()));
        assert_eq!(body["origin"], "operator");
        assert_eq!(body["signature"].as_str().map(str::len), Some(128));
        assert!(signed.verify(&key().verifying_key()).is_ok());
        let mail = sign_mail(&key(), CancelOrigin::Deadline, "d", 17, "late".into());
        let body = journal_body(&Signed::Mail(mail.clone()));
        assert_eq!(
            (body["origin"].as_str(), body["mail"].as_u64()),
            (Some("deadline"), Some(17))
        );
        assert!(mail.verify(&key().verifying_key()).is_ok());
    }
}
