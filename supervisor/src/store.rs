//! The durable store (DESIGN §7) behind one trait, so the embedded SQLite
//! default and a fleet's shared PostgreSQL look the same to the supervisor.
//! It holds the journal, the children table, mail and the event log.

mod events;
mod mail;
mod sqlite;

use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;
use rusqlite::ErrorCode;
use thiserror::Error;

use crate::journal::{JournalRecord, NewJournalEntry};
pub use events::{EventRecord, NewEvent};
pub use mail::{Accepted, MailCounts, MailItem};
pub use sqlite::SqliteStore;

/// A child the supervisor started, kept so a later supervisor can kill it
/// if this one dies without reaping it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildRecord {
    /// The deployment it belongs to.
    pub deployment: String,
    /// Its pid (also its process group id).
    pub pid: u32,
    /// Field 22 of `/proc/PID/stat` (clock ticks since boot): with the pid,
    /// tells our child from an unrelated process that reused the pid.
    pub start_time: u64,
    /// The channel id it was spawned with.
    pub channel_id: String,
    /// Unix time in milliseconds of the spawn.
    pub spawned_at_ms: u64,
}

/// Durable state of one supervisor. Every write is durable when it returns.
pub trait Store: Send {
    /// Remembers a spawned child (replacing any record of the same pid).
    fn record_child(&mut self, child: &ChildRecord) -> Result<(), StoreError>;

    /// Forgets a child once it has been reaped.
    fn forget_child(&mut self, deployment: &str, pid: u32) -> Result<(), StoreError>;

    /// Every remembered child, by deployment then pid.
    fn children(&mut self) -> Result<Vec<ChildRecord>, StoreError>;

    /// Numbers, chains, signs and durably appends one journal record, in
    /// one transaction with reading the record before it.
    fn append_journal(
        &mut self,
        key: &SigningKey,
        entry: NewJournalEntry,
    ) -> Result<JournalRecord, StoreError>;

    /// Journal records in seq order: all of them, or one deployment's.
    fn journal(&mut self, deployment: Option<&str>) -> Result<Vec<JournalRecord>, StoreError>;

    /// Durably accepts one mail item into `deployment`'s inbox and returns
    /// its id, or refuses with [`StoreError::InboxFull`] (writing nothing)
    /// when `max_inbox` items already wait in its inbox and processing. The
    /// `mail_accepted` event is written in the same transaction. With an
    /// idempotency `key` already used for this deployment, the earlier
    /// item's id comes back and nothing is written (or
    /// [`StoreError::KeyReused`] if its payload differs), so a sender can
    /// retry after losing the answer without enqueuing twice.
    fn enqueue_mail(
        &mut self,
        deployment: &str,
        key: Option<&str>,
        payload: &[u8],
        max_inbox: u64,
        at_ms: u64,
    ) -> Result<Accepted, StoreError>;

    /// Moves the first `limit` inbox items (FIFO, by id) to processing and
    /// returns them in that order, for sending to the child.
    fn take_mail(&mut self, deployment: &str, limit: usize) -> Result<Vec<MailItem>, StoreError>;

    /// Marks a processing item done with the child's outcome, writing the
    /// `mail_done` event in the same transaction; `false` (and no change)
    /// when it is not in processing for `deployment`, i.e. a duplicate or
    /// unknown ack.
    fn ack_mail(
        &mut self,
        deployment: &str,
        id: u64,
        outcome: &str,
        at_ms: u64,
    ) -> Result<bool, StoreError>;

    /// Puts every unacknowledged item of `deployment` back at the head of
    /// its inbox in original order (its child is gone); returns how many.
    fn replay_mail(&mut self, deployment: &str) -> Result<u64, StoreError>;

    /// [`Store::replay_mail`] for every deployment: at start-up, after a
    /// supervisor died with mail in flight.
    fn replay_all_mail(&mut self) -> Result<u64, StoreError>;

    /// Deletes done items acknowledged before `done_before_ms` (Unix ms),
    /// and with them their idempotency keys (`mail_retention`); returns
    /// how many went. Inbox and processing items are never pruned.
    fn prune_done_mail(&mut self, done_before_ms: u64) -> Result<u64, StoreError>;

    /// How many of `deployment`'s items are in each state.
    fn mail_counts(&mut self, deployment: &str) -> Result<MailCounts, StoreError>;

    #[cfg(test)]
    /// Ids of `deployment`'s done items, ascending (for tests and audits).
    fn mail_done_ids(&mut self, deployment: &str) -> Result<Vec<u64>, StoreError>;

    /// Durably appends events in one transaction (events come in bursts;
    /// one commit for many keeps the log cheap) and returns their seqs
    /// (strictly increasing, never reused, even after pruning).
    fn append_events(&mut self, events: &[NewEvent]) -> Result<Vec<u64>, StoreError>;

    /// Durably appends one event and returns its seq.
    #[cfg(test)]
    fn append_event(
        &mut self,
        at_ms: u64,
        deployment: Option<&str>,
        kind: &str,
        body: &serde_json::Value,
    ) -> Result<u64, StoreError> {
        let event = NewEvent {
            at_ms,
            deployment: deployment.map(str::to_owned),
            kind: kind.to_owned(),
            body: body.clone(),
        };
        let seqs = self.append_events(std::slice::from_ref(&event))?;
        Ok(seqs.first().copied().unwrap_or(0))
    }

    /// At most `limit` events with seq greater than `after`, ascending: a
    /// follower's catch-up from its cursor.
    fn events_after(&mut self, after: u64, limit: usize) -> Result<Vec<EventRecord>, StoreError>;

    /// Deletes all but the newest `keep` events (retention); returns how
    /// many were deleted.
    fn prune_events(&mut self, keep: u64) -> Result<u64, StoreError>;

    #[cfg(test)]
    /// The highest seq ever assigned (0 when none), even if pruned since:
    /// the cursor for following from now on.
    fn last_event_seq(&mut self) -> Result<u64, StoreError>;
}

/// Why the store could not do what was asked; each names the database and
/// what to do.
#[derive(Debug, Error)]
pub enum StoreError {
    /// The state directory could not be created.
    #[error(
        "cannot create state directory {}: {source}\n  help: create it, or make its parent writable by this user",
        dir.display()
    )]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// There is no database where one was expected.
    #[error(
        "no journal at {}: no supervisor has used this state directory\n  help: check --state-dir (or state_dir in the config); the supervisor creates the store on its first start",
        path.display()
    )]
    Missing {
        /// The database file.
        path: PathBuf,
    },
    /// SQLite refused an operation.
    #[error("{}: {action} failed: {source}\n  help: {}", path.display(), sqlite_hint(source, path))]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// The database was written by a newer wfhost.
    #[error(
        "{}: schema version {found} is newer than this wfhost knows ({known})\n  help: run the newer wfhost that wrote it, or point state_dir at another directory",
        path.display()
    )]
    TooNew {
        /// The database file.
        path: PathBuf,
        /// Its schema version.
        found: i64,
        /// The newest version this build knows.
        known: i64,
    },
    /// A deployment's inbox is at its `max_inbox` limit; nothing was written.
    #[error(
        "deployment {deployment} is busy: {limit} mail items (its max_inbox) already wait in its inbox and processing\n  help: retry later, or raise max_inbox for {deployment} in the config"
    )]
    InboxFull {
        /// The deployment.
        deployment: String,
        /// Its `max_inbox`.
        limit: u64,
    },
    /// An idempotency key came back with another payload; nothing was
    /// written.
    #[error(
        "idempotency key {key:?} of deployment {deployment} was used for mail {id} with a different payload; nothing was accepted\n  help: use a new key for new mail, or resend mail {id}'s payload unchanged"
    )]
    KeyReused {
        /// The deployment.
        deployment: String,
        /// The key.
        key: String,
        /// The item accepted under it.
        id: u64,
    },
    /// A stored row cannot be what wfhost wrote.
    #[error(
        "{}: {what}\n  help: the database was edited or damaged; run `wfhost journal verify` and restore a backup",
        path.display()
    )]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
}

/// What to do about a SQLite error on `path`.
fn sqlite_hint(err: &rusqlite::Error, path: &Path) -> String {
    let p = path.display();
    match err.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => format!("the filesystem holding {p} is full: free some space"),
        Some(ErrorCode::ReadOnly | ErrorCode::PermissionDenied | ErrorCode::CannotOpen) => {
            format!(
                "check permissions of {p} and its directory: this user must be able to write both"
            )
        }
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => format!(
            "another process holds a lock on {p} for too long: check for a stuck wfhost or sqlite3 process"
        ),
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => format!(
            "{p} is not a wfhost database or is damaged: move it aside and restore a backup"
        ),
        Some(ErrorCode::SystemIoFailure) => {
            format!("an I/O error occurred: check the disk holding {p} (dmesg)")
        }
        _ => format!("check free space and permissions of {p}"),
    }
}
