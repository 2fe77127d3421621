//! The durable store (DESIGN §7) behind one trait, so the embedded SQLite
//! default and a fleet's shared PostgreSQL look the same to the supervisor.
//! It holds the journal, the children table, mail and the event log.
//!
//! Layout: the interface (`api`: one trait per kind of thing stored,
//! [`Store`] all of them), its errors (`error`), and one file per kind
//! of thing stored (`children`, `mail`, `events`, `journal_row`; mail
//! held per child and quarantined in `held`, the operator's view of mail
//! in `mail_admin`, a handler's questions to a person in `questions`)
//! hold what every backend shares, rules included;
//! `sqlite` holds the SQLite backend, `postgres` the PostgreSQL one
//! (`[store] url`), each implementing every noun's trait in its file of
//! that noun; `guard` checks the journal when a supervisor starts and
//! stops. Around the store: `handle` runs it on threads of its own,
//! `offers` writes each sender's mail in the next group commit, `retention`
//! prunes done mail, and `unwritten` keeps what a stopping supervisor
//! could not write for the next start.

mod api;
mod children;
pub mod error;
mod events;
pub mod fence;
pub mod guard;
pub mod handle;
pub mod held;
mod journal_row;
pub mod mail;
pub mod mail_admin;
#[cfg(test)]
mod measure;
pub mod offers;
pub mod postgres;
pub mod questions;
pub mod retention;
pub mod rooms;
mod sqlite;
#[cfg(test)]
mod suite;
pub mod unwritten;

pub use api::{
    ChildrenStore, EventStore, Grouping, JournalStore, MailAdmin, MailStore, QuestionStore, Store,
};
pub use children::ChildRecord;
pub use error::StoreError;
pub use events::{EventRecord, NewEvent};
pub use held::{AckOf, CancelFound, DeadMail, Ending, Holder, Landed, Replayed, Settle};
pub use mail::{Accepted, MailCounts, MailItem, Offer};
pub use mail_admin::{MailPage, MailQuery, MailState, MailView, Retried};
pub use postgres::PostgresStore;
pub use questions::{Answer, Answering, Asking, Question};
pub use sqlite::SqliteStore;

use std::path::{Path, PathBuf};

/// Which backend holds a supervisor's store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// SQLite in `state_dir/wfhost.db` (the default).
    Sqlite(PathBuf),
    /// PostgreSQL at this connection string (`[store] url`).
    Postgres(String),
}

impl Backend {
    /// The backend a config names: `[store] url` if set, else SQLite in
    /// `state_dir`.
    pub fn of(state_dir: &Path, url: Option<&str>) -> Self {
        match url {
            Some(url) => Self::Postgres(url.to_owned()),
            None => Self::Sqlite(state_dir.to_path_buf()),
        }
    }

    /// Opens the store, creating it (and its schema) on first use. The
    /// PostgreSQL client blocks on a runtime of its own: call this off any
    /// tokio runtime thread.
    pub fn open(&self) -> Result<Box<dyn Store>, StoreError> {
        Ok(match self {
            Self::Sqlite(dir) => Box::new(SqliteStore::open(dir)?),
            Self::Postgres(url) => Box::new(PostgresStore::open(url)?),
        })
    }

    /// Opens a store that exists, never creating one (the journal
    /// commands); the same thread rule as [`Backend::open`].
    pub fn open_existing(&self) -> Result<Box<dyn Store>, StoreError> {
        Ok(match self {
            Self::Sqlite(dir) => Box::new(SqliteStore::open_existing(dir)?),
            Self::Postgres(url) => Box::new(PostgresStore::open_existing(url)?),
        })
    }

    /// Where the store lives, for messages (never a password).
    pub fn describe(&self) -> String {
        match self {
            Self::Sqlite(dir) => dir.join(sqlite::DB_FILE).display().to_string(),
            Self::Postgres(url) => postgres::parse_url(url)
                .map(|c| postgres::describe(&c))
                .unwrap_or_else(|_| "the [store] url".into()),
        }
    }
}
