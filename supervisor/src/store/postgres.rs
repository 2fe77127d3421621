//! The PostgreSQL store, chosen by `[store] url`: the same tables as
//! SQLite in PostgreSQL's types (`schema`), through the synchronous
//! `postgres` client on the store thread. Appends to the journal are
//! serialized by a row lock on its head, so connections from anywhere
//! still make one chain; event-writing transactions take one advisory
//! lock, so a follower never sees a later seq commit before an earlier
//! one. A lost connection is made again on the next call.
//!
//! The client runs its own small runtime and blocks on it, so a store
//! must be opened and used off any tokio runtime thread (the store thread,
//! or a thread of its own at start-up).

mod children;
mod errors;
mod events;
mod fence;
mod journal;
pub mod lease;
mod lease_schema;
#[cfg(test)]
mod lease_tests;
pub mod listen;
mod mail;
mod mail_admin;
mod questions;
mod schema;
mod takeover;
#[cfg(test)]
mod tests;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use postgres::config::Host;
use postgres::{Client, NoTls};

use super::StoreError;
use super::error::Location;
use super::fence::Fence;

/// How long a statement waits for another session's lock before failing.
const LOCK_TIMEOUT: &str = "5s";
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The PostgreSQL store of one supervisor.
pub struct PostgresStore {
    config: postgres::Config,
    client: Client,
    location: Location,
    /// A fleet host's leases: its writes concerning a deployment are
    /// conditioned on them (`fence.rs`); none on a single host.
    fence: Option<Arc<Fence>>,
}

/// `url` (a `postgresql://` URL or `key=value` pairs) as a client config,
/// or what is wrong with it.
pub fn parse_url(url: &str) -> Result<postgres::Config, String> {
    let config = postgres::Config::from_str(url).map_err(|e| e.to_string())?;
    if config.get_hosts().is_empty() {
        return Err(
            "it names no server: add host=/path/to/socketdir or postgresql://HOST/DB".into(),
        );
    }
    if config.get_dbname().is_none() {
        return Err("it names no database: add dbname=NAME or postgresql://HOST/NAME".into());
    }
    Ok(config)
}

/// Where `config` points, for messages: never the password.
pub fn describe(config: &postgres::Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let port = config
        .get_ports()
        .first()
        .map_or(String::new(), |p| format!(":{p}"));
    format!(
        "postgresql://{}@{}{port}/{}",
        config.get_user().unwrap_or(""),
        hosts.join(","),
        config.get_dbname().unwrap_or("")
    )
}

impl PostgresStore {
    /// Connects to the database `url` names and migrates its schema,
    /// creating wfhost's tables on first use.
    pub fn open(url: &str) -> Result<Self, StoreError> {
        let mut store = Self::connect(url)?;
        store.migrate()?;
        Ok(store)
    }

    /// Connects to a database that already holds a wfhost store (for the
    /// journal commands), never creating one.
    pub fn open_existing(url: &str) -> Result<Self, StoreError> {
        let mut store = Self::connect(url)?;
        if !store.has_schema()? {
            return Err(StoreError::Missing {
                location: store.location.clone(),
            });
        }
        store.migrate()?;
        Ok(store)
    }

    /// Like [`PostgresStore::open`] for a fleet host: `tune` adjusts the
    /// connection (timeouts that notice a partition within a lease), and
    /// with a `fence` every write concerning a deployment is conditioned
    /// on this host's lease of it.
    pub fn open_fleet(
        url: &str,
        tune: &dyn Fn(&mut postgres::Config),
        fence: Option<Arc<Fence>>,
    ) -> Result<Self, StoreError> {
        let mut store = Self::connect_with(url, tune)?;
        store.migrate()?;
        store.fence = fence;
        Ok(store)
    }

    /// The host whose children rows this store reads and writes: the
    /// fence's host, or none (`''`) on a single host.
    fn host(&self) -> &str {
        self.fence.as_deref().map_or("", Fence::host)
    }

    fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, &|_| {})
    }

    fn connect_with(url: &str, tune: &dyn Fn(&mut postgres::Config)) -> Result<Self, StoreError> {
        let mut config = parse_url(url).map_err(|message| {
            StoreError::Backend(super::error::Failure {
                location: Location::Server("[store] url".into()),
                action: "reading the connection string",
                kind: super::error::ErrorKind::Other,
                message,
            })
        })?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config.application_name("wfhost");
        tune(&mut config);
        let location = Location::Server(describe(&config));
        let client = Self::session(&config, &location)?;
        Ok(Self {
            config,
            client,
            location,
            fence: None,
        })
    }

    /// A new session with wfhost's settings.
    fn session(config: &postgres::Config, location: &Location) -> Result<Client, StoreError> {
        let mut client = config
            .connect(NoTls)
            .map_err(|e| errors::failure(location, "connecting to the database", &e))?;
        client
            .batch_execute(&format!("SET lock_timeout = '{LOCK_TIMEOUT}'"))
            .map_err(|e| errors::failure(location, "configuring the session", &e))?;
        Ok(client)
    }

    /// The session, made again first if the last one was lost (a server
    /// restart): the store then resumes by itself.
    fn client(&mut self) -> Result<&mut Client, StoreError> {
        if self.client.is_closed() {
            self.client = Self::session(&self.config, &self.location)?;
            tracing::info!(store = %self.location, "reconnected to the database");
        }
        Ok(&mut self.client)
    }

    /// `err` from `action`, as a store error naming this database.
    fn fail(&self, action: &'static str, err: &postgres::Error) -> StoreError {
        errors::failure(&self.location, action, err)
    }

    /// A `Corrupt` error about this database.
    fn corrupt(&self, what: String) -> StoreError {
        StoreError::Corrupt {
            location: self.location.clone(),
            what,
        }
    }
}

/// Column `idx` of `row`, or what is wrong with it (a value of another
/// type: the schema was changed by hand).
fn col<'a, T: postgres::types::FromSql<'a>>(
    row: &'a postgres::Row,
    idx: usize,
) -> Result<T, String> {
    row.try_get(idx)
        .map_err(|e| format!("a stored value has the wrong type: {e}"))
}

/// A stored BIGINT that must not be negative, or what is wrong.
fn unsigned(what: &str, value: i64) -> Result<u64, String> {
    u64::try_from(value).map_err(|_| format!("{what}: a stored value has the wrong sign: {value}"))
}

/// A u64 as a BIGINT: every value wfhost stores (ids, seqs, Unix ms, clock
/// ticks) is far below `i64::MAX`, so saturating never changes one.
fn signed(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Each write is a transaction of its own on PostgreSQL: its client's
/// transactions cannot nest in a group opened outside them.
impl super::Grouping for PostgresStore {
    fn begin_group(&mut self) -> Result<bool, StoreError> {
        Ok(false)
    }

    fn group_open(&mut self) -> bool {
        false
    }

    fn end_group(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
}
