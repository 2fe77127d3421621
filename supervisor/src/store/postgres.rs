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
pub mod maintenance;
mod password;
mod questions;
mod schema;
mod session;
mod takeover;
#[cfg(test)]
mod tests;
pub mod tls;

use std::sync::Arc;
use std::time::Duration;

use postgres::Client;
use postgres::config::Host;

use super::StoreError;
use super::error::Location;
use super::fence::Fence;
use crate::config::conninfo::Conninfo;
use session::Session;
use tls::{Encryption, Tls};

/// How long a statement waits for another session's lock before failing.
const LOCK_TIMEOUT: &str = "5s";
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The PostgreSQL store of one supervisor.
pub struct PostgresStore {
    target: Target,
    /// The connection, its prepared statements and its open group.
    session: Session,
    /// How the current session is protected.
    encryption: Encryption,
    location: Location,
    /// A fleet host's leases: its writes concerning a deployment are
    /// conditioned on them (`fence.rs`); none on a single host.
    fence: Option<Arc<Fence>>,
}

/// `url` (a `postgresql://` URL or `key=value` pairs) as a client config,
/// or what is wrong with it.
pub fn parse_url(url: &str) -> Result<postgres::Config, String> {
    conninfo(url).map(|c| c.config)
}

/// `url` parsed and checked, with libpq's TLS and password words.
fn conninfo(url: &str) -> Result<Conninfo, String> {
    let info = Conninfo::parse(url)?;
    let config = &info.config;
    if config.get_hosts().is_empty() {
        return Err(
            "it names no server: add host=/path/to/socketdir or postgresql://HOST/DB".into(),
        );
    }
    if config.get_dbname().is_none() {
        return Err("it names no database: add dbname=NAME or postgresql://HOST/NAME".into());
    }
    Ok(info)
}

/// Where and how to connect: the client's config (tuned), its TLS setup
/// and the password's sources; every connection of a host is made by one
/// (`Target::connect`), so each is protected alike.
#[derive(Clone)]
pub struct Target {
    info: Conninfo,
    config: postgres::Config,
    tls: Tls,
    location: Location,
}

/// Why a connection could not be made.
pub enum Unconnected {
    /// A setting was refused before connecting (the password file, the
    /// TLS files): what and the fix.
    Settings(String),
    /// The client failed (a refused certificate among its causes).
    Client(postgres::Error),
}

impl Target {
    /// `url` with `tune` applied, its TLS files read and checked.
    pub fn new(url: &str, tune: &dyn Fn(&mut postgres::Config)) -> Result<Self, StoreError> {
        let info = conninfo(url).map_err(|message| {
            StoreError::Backend(super::error::Failure {
                location: Location::Server("[store] url".into()),
                action: "reading the connection string",
                kind: super::error::ErrorKind::Other,
                message,
            })
        })?;
        let mut config = info.config.clone();
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config.application_name("wfhost");
        tune(&mut config);
        let location = Location::Server(describe(&config));
        let tls = Tls::new(&info, &mut config).map_err(|message| StoreError::Settings {
            location: location.clone(),
            message,
        })?;
        Ok(Self {
            info,
            config,
            tls,
            location,
        })
    }

    /// Where it points, for messages (never the password).
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// The client's config (for a connection's own settings).
    pub fn config_mut(&mut self) -> &mut postgres::Config {
        &mut self.config
    }

    /// A new connection, the password read now (a rotated file counts).
    pub fn connect(&self) -> Result<(Client, Encryption), Unconnected> {
        let mut config = self.config.clone();
        password::resolve(&self.info, &mut config).map_err(Unconnected::Settings)?;
        self.tls
            .connect(&config, &self.location.to_string())
            .map_err(Unconnected::Client)
    }
}

impl Unconnected {
    /// As a store error from `action` at `location`.
    fn into_store(self, location: &Location, action: &'static str) -> StoreError {
        match self {
            Self::Settings(message) => StoreError::Settings {
                location: location.clone(),
                message,
            },
            Self::Client(e) => match refused(&e).or_else(|| credentials(&e)) {
                Some(message) => StoreError::Settings {
                    location: location.clone(),
                    message,
                },
                None => errors::failure(location, action, &e),
            },
        }
    }
}

/// What to set when the server turned this host's credentials down (a
/// client certificate or a password it wants and did not get).
fn credentials(err: &postgres::Error) -> Option<String> {
    if let Some(db) = err.as_db_error() {
        let code = db.code().code();
        let text = db.message();
        if code == "28000" && text.contains("certificate") {
            return Some(format!(
                "the server demands a client certificate: {text}\n  help: set [store] sslcert and sslkey to a certificate signed by a CA in the server's ssl_ca_file, whose CN is the database user"
            ));
        }
        if code == "28P01" {
            return Some(format!(
                "the server refused the password: {text}\n  help: put the right password in [store] password_file (mode 0600), PGPASSWORD or a ~/.pgpass line"
            ));
        }
        return None;
    }
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        text.push_str(&s.to_string());
        source = s.source();
    }
    text.contains("password missing").then(|| {
        "the server asks for a password and none was given\n  help: set [store] password_file to a file holding it (mode 0600), or PGPASSWORD, or a ~/.pgpass line".to_owned()
    })
}

impl std::fmt::Display for Unconnected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Settings(m) => f.write_str(m),
            Self::Client(e) => match refused(e) {
                Some(m) => f.write_str(&m),
                None => write!(f, "{e}"),
            },
        }
    }
}

/// The words of a refused TLS handshake among `err`'s causes.
fn refused(err: &postgres::Error) -> Option<String> {
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<tls::Refused>() {
            return Some(r.to_string());
        }
        source = s.source();
    }
    None
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
        let target = Target::new(url, tune)?;
        let location = target.location().clone();
        let (client, encryption) = Self::connect_session(&target)?;
        Ok(Self {
            target,
            session: Session::new(client),
            encryption,
            location,
            fence: None,
        })
    }

    /// A new session with wfhost's settings.
    fn connect_session(target: &Target) -> Result<(Client, Encryption), StoreError> {
        let location = target.location();
        let (mut client, encryption) = target
            .connect()
            .map_err(|e| e.into_store(location, "connecting to the database"))?;
        client
            .batch_execute(&format!("SET lock_timeout = '{LOCK_TIMEOUT}'"))
            .map_err(|e| errors::failure(location, "configuring the session", &e))?;
        Ok((client, encryption))
    }

    /// How this store's connection is protected (plaintext or TLS).
    pub fn encryption(&self) -> &Encryption {
        &self.encryption
    }

    /// The session, made again first if the last one was lost (a server
    /// restart): the store then resumes by itself. Not while a group is
    /// open: its transaction went with the connection, and a write made
    /// on a new one would commit alone (`Grouping::group_lost` says so).
    fn session(&mut self) -> Result<&mut Session, StoreError> {
        if self.session.is_closed() && !self.session.grouped() {
            self.reconnect()?;
        }
        Ok(&mut self.session)
    }

    /// The connection itself (leases, snapshots), made again if lost.
    fn client(&mut self) -> Result<&mut Client, StoreError> {
        self.session().map(Session::client)
    }

    fn reconnect(&mut self) -> Result<(), StoreError> {
        let (client, encryption) = Self::connect_session(&self.target)?;
        self.session = Session::new(client);
        self.encryption = encryption;
        tracing::info!(store = %self.location, encryption = %self.encryption, "reconnected to the database");
        Ok(())
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

/// A group is one transaction on the session, each write a savepoint of it.
impl super::Grouping for PostgresStore {
    fn begin_group(&mut self) -> Result<bool, StoreError> {
        if self.session.is_closed() {
            // The group that was open, if any, went with the connection.
            self.reconnect()?;
        }
        self.session
            .begin_group()
            .map_err(|e| self.fail("starting a group of writes", &e))?;
        Ok(true)
    }

    fn group_lost(&mut self) -> Option<StoreError> {
        use super::error::{ErrorKind, Failure};
        // The server went away (a restart, a network cut), and the
        // transaction with it: every write of the group learns that cause.
        // The client may see its connection closed only later than the
        // failure that says so.
        let message = match self.session.aborted_by() {
            Some((ErrorKind::Unavailable, message)) => Some(message.clone()),
            _ if self.session.is_closed() => {
                Some("the connection to the database was lost before the group committed".into())
            }
            _ => None,
        };
        if let Some(message) = message {
            return Some(StoreError::Backend(Failure {
                location: self.location.clone(),
                action: "writing to the database",
                kind: ErrorKind::Unavailable,
                message,
            }));
        }
        (!self.session.group_open()).then_some(StoreError::GroupLost)
    }

    fn end_group(&mut self) -> Result<(), StoreError> {
        let aborted = !self.session.group_open();
        match self.session.end_group() {
            Err(e) => Err(self.fail("committing a group of writes", &e).at_commit()),
            Ok(()) if aborted => Err(StoreError::GroupLost),
            Ok(()) => Ok(()),
        }
    }
}
