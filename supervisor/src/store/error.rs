//! Why the store could not do what was asked, in terms that do not depend
//! on the backend: each backend maps its own errors to an [`ErrorKind`]
//! and keeps its message; the hint an operator reads is chosen here, from
//! the kind and the kind of place the store lives in.

use std::fmt;
use std::path::PathBuf;

use thiserror::Error;

/// Where a store lives, for messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A database file (SQLite).
    File(PathBuf),
    /// A database server, as a connection string with any password removed.
    Server(String),
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File(path) => write!(f, "{}", path.display()),
            Self::Server(url) => f.write_str(url),
        }
    }
}

/// What kind of failure a backend reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No space left (or a quota reached).
    DiskFull,
    /// The store or its filesystem refuses writes (EROFS, a read-only
    /// database, a read-only server).
    ReadOnly,
    /// This user or role may not do it.
    Permission,
    /// Another writer holds a lock for too long (or a serialization
    /// conflict kept recurring).
    Busy,
    /// The stored data is damaged or is not a wfhost store.
    Corrupt,
    /// The operating system reported an I/O error.
    Io,
    /// The store cannot be reached (a server down, a connection lost).
    Unavailable,
    /// A fleet's fence refused the write: this host no longer holds the
    /// deployment's lease at the epoch it wrote with (DESIGN §10b).
    Fenced,
    /// Anything else.
    Other,
}

impl ErrorKind {
    /// A few words naming the kind, shown before the backend's message.
    fn label(self) -> Option<&'static str> {
        Some(match self {
            Self::DiskFull => "disk full",
            Self::ReadOnly => "the store is read-only",
            Self::Permission => "permission denied",
            Self::Busy => "busy",
            Self::Corrupt => "damaged",
            Self::Io => "I/O error",
            Self::Unavailable => "unavailable",
            Self::Fenced => "fenced",
            Self::Other => return None,
        })
    }
}

/// The failure a backend reported, with the action that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Where the store lives.
    pub location: Location,
    /// What was being done ("appending to the journal").
    pub action: &'static str,
    /// What kind of failure it was.
    pub kind: ErrorKind,
    /// The backend's own message.
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} failed: ", self.location, self.action)?;
        match self.kind.label() {
            Some(label) => write!(f, "{label} ({})", self.message)?,
            None => f.write_str(&self.message)?,
        }
        write!(f, "\n  help: {}", hint(self.kind, &self.location))
    }
}

/// What to do about a failure of `kind` at `location`.
pub fn hint(kind: ErrorKind, location: &Location) -> String {
    match location {
        Location::File(path) => {
            let p = path.display();
            match kind {
                ErrorKind::DiskFull => {
                    format!("the filesystem holding {p} is full: free some space")
                }
                ErrorKind::ReadOnly => format!(
                    "{p} cannot be written: its filesystem is mounted (or was remounted after an error) read-only, or the file is read-only; check `findmnt -T {p}` and dmesg, make it writable again (e.g. `mount -o remount,rw`), or point state_dir at a writable directory"
                ),
                ErrorKind::Permission => format!(
                    "check permissions of {p} and its directory: this user must be able to write both"
                ),
                ErrorKind::Busy => format!(
                    "another process holds a lock on {p} for too long: check for a stuck wfhost or sqlite3 process"
                ),
                ErrorKind::Corrupt => format!(
                    "{p} is not a wfhost database or is damaged: move it aside and restore a backup"
                ),
                ErrorKind::Io => {
                    format!("an I/O error occurred: check the disk holding {p} (dmesg)")
                }
                ErrorKind::Unavailable | ErrorKind::Other => {
                    format!("check free space and permissions of {p}")
                }
                // Only a fleet's PostgreSQL store fences.
                ErrorKind::Fenced => format!("{p} has no fence: this is a bug, please report it"),
            }
        }
        Location::Server(url) => match kind {
            ErrorKind::DiskFull => {
                format!("the database server of {url} is out of disk space: free some on its host")
            }
            ErrorKind::ReadOnly => format!(
                "the database server of {url} accepts no writes (a standby, or default_transaction_read_only): point [store] url at the primary"
            ),
            ErrorKind::Permission => format!(
                "the role in {url} lacks a privilege: grant it CREATE on the database (for migrations) and the right to read and write wfhost's tables"
            ),
            ErrorKind::Busy => format!(
                "another session holds a lock on wfhost's tables in {url} for too long: look for it in pg_stat_activity"
            ),
            ErrorKind::Corrupt => format!(
                "{url} holds data wfhost did not write: check that [store] url names wfhost's own database"
            ),
            ErrorKind::Io | ErrorKind::Unavailable => format!(
                "cannot reach the database server of {url}: check that it is running and that this host can connect (pg_isready)"
            ),
            ErrorKind::Fenced => format!(
                "this host no longer holds the deployment's lease in {url} (another host took it over, or it ran out), so its write was refused and the deployment stopped here; nothing to do: its new owner carries on (`wfhost status` names it)"
            ),
            ErrorKind::Other => format!("check the database server's log for {url}"),
        },
    }
}

/// Why the store could not do what was asked; each names the store and
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
    /// There is no store where one was expected.
    #[error(
        "no journal at {location}: no supervisor has used this store\n  help: check --state-dir (or state_dir and [store] url in the config); the supervisor creates the store on its first start"
    )]
    Missing {
        /// Where it was looked for.
        location: Location,
    },
    /// The backend refused an operation.
    #[error("{0}")]
    Backend(Failure),
    /// A connection setting was refused (a server certificate that does
    /// not verify, a secret file others can read): the message names
    /// what failed and the setting to change.
    #[error("cannot connect to {location}: {message}")]
    Settings {
        /// The server.
        location: Location,
        /// What failed, with its help line.
        message: String,
    },
    /// A commit failed in a way that leaves open whether it landed (an I/O
    /// error while committing, a connection lost before the server's
    /// answer): what it wrote may be there or not. A sender learns which
    /// by sending again under the same idempotency key.
    #[error("{0}\n  note: whether the commit landed is unknown; it may have been written")]
    CommitUnknown(Failure),
    /// The group commit this write was part of was rolled back by the
    /// database after another write in it failed: nothing of it was kept.
    #[error(
        "the store rolled back the commit this write shared with others after one of them failed; nothing of it was written\n  help: it is retried; if it keeps failing, the error of the write that failed is logged beside it"
    )]
    GroupLost,
    /// The store was written by a newer wfhost.
    #[error(
        "{location}: schema version {found} is newer than this wfhost knows ({known})\n  help: run the newer wfhost that wrote it, or point the supervisor at another store"
    )]
    TooNew {
        /// The store.
        location: Location,
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
    /// No stored mail item has this id.
    #[error(
        "no mail item {id} in the store\n  help: `wfhost mail list` shows the items kept (done mail is deleted after mail_retention, purged dead mail at once)"
    )]
    UnknownMail {
        /// The id asked for.
        id: u64,
    },
    /// An operator asked to retry mail that is not dead; nothing changed.
    #[error(
        "mail {id} of {deployment} is {state}, not dead or interrupted: only those are retried, and nothing was changed\n  help: `wfhost mail show {id}` shows where it is; `wfhost mail list --state dead` (or `--state interrupted`) lists what can be retried"
    )]
    NotDead {
        /// The item.
        id: u64,
        /// Its deployment.
        deployment: String,
        /// Where it is.
        state: super::mail_admin::MailState,
    },
    /// A stored row cannot be what wfhost wrote.
    #[error(
        "{location}: {what}\n  help: the store was edited or damaged; run `wfhost journal verify` and restore a backup"
    )]
    Corrupt {
        /// The store.
        location: Location,
        /// What is wrong.
        what: String,
    },
}

impl StoreError {
    /// The backend failure's kind, if this is one (for a store-health
    /// field in status and metrics).
    #[allow(dead_code, reason = "for status and metrics (integrator)")]
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            Self::Backend(f) | Self::CommitUnknown(f) => Some(f.kind),
            _ => None,
        }
    }

    /// The same error for another write of the group whose commit
    /// failed (errors hold an `io::Error` now and then, so are not Clone).
    pub fn for_group(&self) -> Self {
        match self {
            Self::Backend(f) => Self::Backend(f.clone()),
            Self::CommitUnknown(f) => Self::CommitUnknown(f.clone()),
            Self::GroupLost => Self::GroupLost,
            other => Self::CommitUnknown(Failure {
                location: Location::Server("the store".into()),
                action: "committing a group of writes",
                kind: ErrorKind::Other,
                message: other.to_string(),
            }),
        }
    }

    /// A group's commit error as one of its writes tells it: named by
    /// what that write did ("accepting mail"), not by the group.
    pub fn for_write(&self, action: &'static str) -> Self {
        match self.for_group() {
            Self::Backend(f) => Self::Backend(Failure { action, ..f }),
            Self::CommitUnknown(f) => Self::CommitUnknown(Failure { action, ..f }),
            other => other,
        }
    }

    /// This error, as the error of a commit: a backend failure there
    /// leaves unknown whether what it wrote landed.
    pub fn at_commit(self) -> Self {
        match self {
            Self::Backend(f) => Self::CommitUnknown(f),
            other => other,
        }
    }

    /// Whether it is unknown if the write landed.
    pub fn is_unknown(&self) -> bool {
        matches!(self, Self::CommitUnknown(_))
    }

    /// Whether a fleet's fence refused the write: the lease is gone, so
    /// the writer must stop, not retry.
    pub fn is_fenced(&self) -> bool {
        matches!(self, Self::Backend(f) | Self::CommitUnknown(f) if f.kind == ErrorKind::Fenced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(kind: ErrorKind, location: Location) -> String {
        StoreError::Backend(Failure {
            location,
            action: "appending to the journal",
            kind,
            message: "disk I/O error".into(),
        })
        .to_string()
    }

    #[test]
    fn a_read_only_store_is_named_read_only_with_the_fix() {
        let msg = failure(ErrorKind::ReadOnly, Location::File("/s/wfhost.db".into()));
        assert!(
            msg.starts_with(
                "/s/wfhost.db: appending to the journal failed: the store is read-only (disk I/O error)"
            ),
            "{msg}"
        );
        assert!(msg.contains("mount -o remount,rw"), "{msg}");
        assert!(!msg.contains("check the disk"), "{msg}");
    }

    #[test]
    fn every_kind_has_a_hint_for_files_and_servers() {
        let kinds = [
            ErrorKind::DiskFull,
            ErrorKind::ReadOnly,
            ErrorKind::Permission,
            ErrorKind::Busy,
            ErrorKind::Corrupt,
            ErrorKind::Io,
            ErrorKind::Unavailable,
            ErrorKind::Fenced,
            ErrorKind::Other,
        ];
        for kind in kinds {
            for location in [
                Location::File("/s/wfhost.db".into()),
                Location::Server("postgresql://h/db".into()),
            ] {
                let msg = failure(kind, location.clone());
                let help = msg.split("\n  help: ").nth(1).unwrap_or("");
                assert!(help.contains(&location.to_string()), "{kind:?}: {msg}");
            }
        }
        let other = failure(ErrorKind::Other, Location::File("/s/db".into()));
        assert!(
            other.starts_with("/s/db: appending to the journal failed: disk I/O error\n"),
            "{other}"
        );
    }
}
