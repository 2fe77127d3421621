//! The durable store (DESIGN §7) behind one trait, so the embedded SQLite
//! default and a fleet's shared PostgreSQL look the same to the supervisor.
//! It holds the journal, the children table, mail and the event log.
//!
//! Layout: the trait (`api`), its errors (`error`), and one file per kind
//! of thing stored (`children`, `mail`, `events`, `journal_row`) hold
//! what every backend shares, rules included; `sqlite` holds the SQLite
//! backend; `guard` checks the journal when a supervisor starts and stops.

mod api;
mod children;
pub mod error;
mod events;
pub mod guard;
mod journal_row;
pub mod mail;
mod sqlite;
#[cfg(test)]
mod suite;

pub use api::Store;
pub use children::ChildRecord;
pub use error::StoreError;
pub use events::{EventRecord, NewEvent};
pub use mail::{Accepted, MailCounts, MailItem};
pub use sqlite::SqliteStore;
