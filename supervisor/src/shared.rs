//! What every deployment task shares: the store, the signing key and the
//! spawner.

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use ed25519_dalek::SigningKey;
use tokio::sync::broadcast;
use tracing::error;

use crate::journal::NewJournalEntry;
use crate::procfs;
use crate::spawn::Spawner;
use crate::store::{ChildRecord, EventRecord, NewEvent};
use crate::store_handle::StoreHandle;

/// State shared by the supervisor's tasks.
pub struct Shared {
    /// The durable store, on its own thread.
    pub store: StoreHandle,
    /// The key that signs journal records and cancels.
    pub key: Arc<SigningKey>,
    /// The one thread that forks children.
    pub spawner: Spawner,
    /// Live feed of events as they are committed, for `wfhost events --follow`.
    pub events: broadcast::Sender<EventRecord>,
    /// How many events the store keeps.
    pub event_retention: u64,
    /// Events waiting for the store thread's next batch.
    pub pending_events: Arc<Mutex<Vec<NewEvent>>>,
    /// Signalled when a deployment first gets a ready child or fails, so
    /// systemd hears `READY=1` without waiting for the next tick.
    pub started: tokio::sync::Notify,
}

/// Events between two prunings of the event table.
const PRUNE_EVERY: u64 = 1024;

/// Unix time in milliseconds, for records meant to outlive this process.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn entry(kind: &str, deployment: Option<&str>, body: serde_json::Value) -> NewJournalEntry {
    NewJournalEntry {
        at_ms: unix_ms(),
        kind: kind.to_owned(),
        deployment: deployment.map(str::to_owned),
        body,
    }
}

impl Shared {
    /// Queues a signed journal record describing what already happened; a
    /// failure is logged, not fatal.
    pub fn journal(&self, kind: &str, deployment: Option<&str>, body: serde_json::Value) {
        let entry = entry(kind, deployment, body);
        let key = self.key.clone();
        self.store.submit(move |s| {
            let (kind, deployment) = (entry.kind.clone(), entry.deployment.clone());
            if let Err(e) = s.append_journal(&key, entry) {
                error!(kind, deployment, error = %e, "cannot append to the journal");
            }
        });
    }

    /// Appends a signed journal record and waits until it is durable: for
    /// records that gate what happens next (a cancel is sent only once
    /// committed). Returns the record's sequence number.
    pub async fn journal_durably(
        &self,
        kind: &str,
        deployment: &str,
        body: serde_json::Value,
    ) -> Result<u64, String> {
        let entry = entry(kind, Some(deployment), body);
        let key = self.key.clone();
        self.store
            .call(move |s| {
                s.append_journal(&key, entry)
                    .map(|r| r.seq)
                    .map_err(|e| e.to_string())
            })
            .await
            .map_err(|e| e.to_string())?
    }

    /// Records a live child so a supervisor restarted after a crash can
    /// find and kill it.
    pub fn remember_child(&self, deployment: &str, pid: u32, channel_id: &str) {
        let start_time = match procfs::start_time(pid) {
            Ok(t) => t,
            Err(e) => {
                error!(deployment, pid, error = %e, "cannot read the child's start time; it will not be tracked");
                return;
            }
        };
        let record = ChildRecord {
            deployment: deployment.to_owned(),
            pid,
            start_time,
            channel_id: channel_id.to_owned(),
            spawned_at_ms: unix_ms(),
        };
        self.store.submit(move |s| {
            if let Err(e) = s.record_child(&record) {
                error!(deployment = %record.deployment, pid, error = %e, "cannot record the child in the store");
            }
        });
    }

    /// Forgets a child that has been reaped.
    pub fn forget_child(&self, deployment: &str, pid: u32) {
        let deployment = deployment.to_owned();
        self.store.submit(move |s| {
            if let Err(e) = s.forget_child(&deployment, pid) {
                error!(deployment, pid, error = %e, "cannot remove the child from the store");
            }
        });
    }
}

impl Shared {
    /// Appends an event to the durable event log, then hands it to live
    /// followers. Events are queued and written in batches, one commit per
    /// batch (group commit), so a burst of step events costs one fsync, not
    /// one each; the log is kept within `event_retention`.
    pub fn event(&self, kind: &str, deployment: Option<&str>, body: serde_json::Value) {
        let event = NewEvent {
            at_ms: unix_ms(),
            deployment: deployment.map(str::to_owned),
            kind: kind.to_owned(),
            body,
        };
        let first = {
            let mut queue = self
                .pending_events
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            queue.push(event);
            queue.len() == 1
        };
        if !first {
            // A flush is already queued and will take this one too.
            return;
        }
        let queue = self.pending_events.clone();
        let feed = self.events.clone();
        let retention = self.event_retention;
        self.store.submit(move |s| {
            let batch = std::mem::take(&mut *queue.lock().unwrap_or_else(|p| p.into_inner()));
            match s.append_events(&batch) {
                Ok(seqs) => {
                    let crossed = seqs.iter().any(|seq| seq % PRUNE_EVERY == 0);
                    for (seq, e) in seqs.into_iter().zip(batch) {
                        let _ = feed.send(EventRecord {
                            seq,
                            at_ms: e.at_ms,
                            deployment: e.deployment,
                            kind: e.kind,
                            body: e.body,
                        });
                    }
                    if crossed && let Err(e) = s.prune_events(retention) {
                        error!(error = %e, "cannot prune the event log");
                    }
                }
                Err(e) => {
                    error!(events = batch.len(), error = %e, "cannot append to the event log")
                }
            }
        });
    }
}
