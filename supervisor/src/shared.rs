//! What every deployment task shares: the store, the signing key and the
//! spawner. Store calls are short synchronous SQLite transactions.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use ed25519_dalek::SigningKey;
use tracing::error;

use crate::journal::NewJournalEntry;
use crate::procfs;
use crate::spawn::Spawner;
use crate::store::{ChildRecord, SqliteStore, Store};

/// State shared by the supervisor's tasks.
pub struct Shared {
    /// The durable store.
    pub store: Mutex<SqliteStore>,
    /// The key that signs journal records and cancels.
    pub key: SigningKey,
    /// The one thread that forks children.
    pub spawner: Spawner,
}

/// Unix time in milliseconds, for records meant to outlive this process.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Shared {
    /// Runs `f` on the store; a poisoned lock (a panic elsewhere) still
    /// yields the store, whose transactions are atomic anyway.
    pub fn with_store<T>(&self, f: impl FnOnce(&mut SqliteStore) -> T) -> T {
        let mut guard = self.store.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    /// Appends a signed journal record; a failure is logged, not fatal,
    /// for records that only describe what already happened.
    pub fn journal(&self, kind: &str, deployment: Option<&str>, body: serde_json::Value) {
        let entry = NewJournalEntry {
            at_ms: unix_ms(),
            kind: kind.to_owned(),
            deployment: deployment.map(str::to_owned),
            body,
        };
        if let Err(e) = self.with_store(|s| s.append_journal(&self.key, entry)) {
            error!(kind, deployment, error = %e, "cannot append to the journal");
        }
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
        if let Err(e) = self.with_store(|s| s.record_child(&record)) {
            error!(deployment, pid, error = %e, "cannot record the child in the store");
        }
    }

    /// Forgets a child that has been reaped.
    pub fn forget_child(&self, deployment: &str, pid: u32) {
        if let Err(e) = self.with_store(|s| s.forget_child(deployment, pid)) {
            error!(deployment, pid, error = %e, "cannot remove the child from the store");
        }
    }
}
