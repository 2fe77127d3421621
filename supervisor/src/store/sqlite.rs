//! The embedded store: SQLite in `state_dir/wfhost.db`, WAL with
//! `synchronous=FULL` so a commit survives power loss, schema versioned by
//! `PRAGMA user_version` (`schema`). Only storage lives here: the rules
//! the SQL follows are the journal's and the mail module's.

mod children;
mod errors;
mod events;
mod journal;
mod mail;
mod mail_admin;
mod questions;
mod schema;
#[cfg(test)]
mod tests;

use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::StoreError;
use super::error::Location;
#[cfg(test)]
pub use schema::{MIGRATIONS, SCHEMA_VERSION};

/// The database file inside `state_dir`.
pub const DB_FILE: &str = "wfhost.db";

/// How long a writer waits for another's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The SQLite store of one supervisor.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
    location: Location,
    /// Whether a group's transaction is open (`Grouping`): writes then
    /// run in savepoints of it.
    grouped: bool,
}

/// Where one write runs: a write transaction of its own (IMMEDIATE: it
/// waits for another process's lock up front instead of failing half-way),
/// or a savepoint of the open group's, committed with the group.
enum Write<'c> {
    Own(rusqlite::Transaction<'c>),
    Part(rusqlite::Savepoint<'c>),
}

impl std::ops::Deref for Write<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        match self {
            Self::Own(tx) => tx,
            Self::Part(sp) => sp,
        }
    }
}

impl Write<'_> {
    /// Commits a write of its own; releases a savepoint into its group.
    fn commit(self) -> rusqlite::Result<()> {
        match self {
            Self::Own(tx) => tx.commit(),
            Self::Part(sp) => sp.commit(),
        }
    }
}

/// Starts a write on `conn`: in the open group if `grouped`.
fn write(conn: &mut Connection, grouped: bool) -> rusqlite::Result<Write<'_>> {
    if grouped {
        conn.savepoint().map(Write::Part)
    } else {
        conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map(Write::Own)
    }
}

impl super::Grouping for SqliteStore {
    fn begin_group(&mut self) -> Result<bool, StoreError> {
        self.conn
            .execute_batch("BEGIN IMMEDIATE")
            .map_err(|e| self.fail("starting a group of writes", &e))?;
        self.grouped = true;
        Ok(true)
    }

    fn group_lost(&mut self) -> Option<StoreError> {
        // SQLite rolls a whole transaction back after some errors (a full
        // disk, an I/O error) and is in autocommit mode again; the write
        // that failed has its own error.
        let open = !self.conn.is_autocommit();
        self.grouped = open;
        (!open).then_some(StoreError::GroupLost)
    }

    fn end_group(&mut self) -> Result<(), StoreError> {
        self.grouped = false;
        if let Err(e) = self.conn.execute_batch("COMMIT") {
            let e = self.fail("committing a group of writes", &e).at_commit();
            if !self.conn.is_autocommit() {
                // A COMMIT that could not finish (busy) leaves the
                // transaction open: end it, or the next write joins it.
                let _ = self.conn.execute_batch("ROLLBACK");
            }
            return Err(e);
        }
        Ok(())
    }
}

impl SqliteStore {
    /// Opens `state_dir/wfhost.db`, creating the directory (mode 0700) and
    /// the database (mode 0600) when missing, and migrates it.
    pub fn open(state_dir: &Path) -> Result<Self, StoreError> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(state_dir)
            .map_err(|source| StoreError::CreateDir {
                dir: state_dir.to_path_buf(),
                source,
            })?;
        let path = state_dir.join(DB_FILE);
        // Created here, private from its first byte: SQLite gives the WAL
        // and shared-memory files (which hold payloads too) the mode of
        // the database file, so they are 0600 as well. SQLite takes an
        // empty file for a new database.
        if let Err(e) = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            && e.kind() != std::io::ErrorKind::AlreadyExists
        {
            tracing::warn!(db = %path.display(), error = %e, "cannot create the database file ahead of SQLite");
        }
        private_sidecars(&path);
        Self::connect(path, OpenFlags::default())
    }

    /// Opens an existing `state_dir/wfhost.db` (for the journal commands),
    /// never creating one: a missing database is [`StoreError::Missing`].
    pub fn open_existing(state_dir: &Path) -> Result<Self, StoreError> {
        let path = state_dir.join(DB_FILE);
        if !path.exists() {
            return Err(StoreError::Missing {
                location: Location::File(path),
            });
        }
        Self::connect(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
    }

    /// The database file.
    #[cfg(test)]
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn connect(path: PathBuf, flags: OpenFlags) -> Result<Self, StoreError> {
        let location = Location::File(path.clone());
        let conn = match Connection::open_with_flags(&path, flags) {
            Ok(conn) => conn,
            Err(e) => return Err(errors::failure(&location, "opening the database", &e, 0)),
        };
        let mut store = Self {
            conn,
            path,
            location,
            grouped: false,
        };
        store.configure()?;
        store.migrate()?;
        Ok(store)
    }

    /// `err` from `action`, as a store error naming this database.
    fn fail(&self, action: &'static str, err: &rusqlite::Error) -> StoreError {
        errors::failure(
            &self.location,
            action,
            err,
            errors::system_errno(&self.conn),
        )
    }

    fn configure(&mut self) -> Result<(), StoreError> {
        self.conn
            .busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| self.fail("setting the busy timeout", &e))?;
        let mode: String = self
            .conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(|e| self.fail("switching to WAL mode", &e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(
                db = %self.path.display(),
                mode,
                "SQLite refused WAL mode (is the state directory on a network filesystem?); continuing in this mode"
            );
        }
        self.conn
            .pragma_update(None, "synchronous", "FULL")
            .map_err(|e| self.fail("setting synchronous=FULL", &e))?;
        self.conn
            .pragma_update(None, "foreign_keys", true)
            .map_err(|e| self.fail("enabling foreign keys", &e))?;
        // SQLite's own checkpoint runs inside COMMIT, once the transaction
        // is durable, and reports its failure as the commit's: a sender
        // told "failed" whose mail was accepted. This one does the same
        // work and keeps its failure to itself (the next one retries).
        self.conn.wal_hook(Some(checkpoint_after_commit));
        // The working set is small (recent mail, the journal's tail); a
        // 512 KiB page cache per connection keeps an idle supervisor lean.
        self.conn
            .pragma_update(None, "cache_size", -512)
            .map_err(|e| self.fail("setting the page cache size", &e))?;
        Ok(())
    }

    /// A `Corrupt` error about this database.
    fn corrupt(&self, what: String) -> StoreError {
        StoreError::Corrupt {
            location: self.location.clone(),
            what,
        }
    }

    /// Maps a row-reading error: a stored value of the wrong type or range
    /// means the database was edited, anything else is SQLite's.
    fn read_fail(&self, action: &'static str, err: &rusqlite::Error) -> StoreError {
        match err {
            rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
            | rusqlite::Error::InvalidColumnType(..) => self.corrupt(format!(
                "{action}: a stored value has the wrong type: {err}"
            )),
            _ => self.fail(action, err),
        }
    }
}

/// WAL pages after which a commit is followed by a checkpoint (SQLite's
/// own default).
const CHECKPOINT_PAGES: std::ffi::c_int = 1000;

/// Runs after every commit (the commit is durable by then): checkpoints
/// the WAL into the database once it holds [`CHECKPOINT_PAGES`], as
/// SQLite's automatic checkpoint would, but never fails the commit.
fn checkpoint_after_commit(
    wal: &rusqlite::hooks::Wal,
    pages: std::ffi::c_int,
) -> rusqlite::Result<()> {
    if pages >= CHECKPOINT_PAGES
        && let Err(e) = wal.checkpoint_v2(rusqlite::hooks::CheckpointMode::PASSIVE)
    {
        tracing::warn!(error = %e, pages, "checkpointing the store's WAL failed; the commit before it stands, and the next commit tries again");
    }
    Ok(())
}

/// Gives an existing `-wal` or `-shm` file beside `db` the database's own
/// permission bits: older versions left them 0644 beside a 0600 database.
fn private_sidecars(db: &Path) {
    let Ok(meta) = std::fs::metadata(db) else {
        return;
    };
    let mode = meta.mode() & 0o777;
    for suffix in ["-wal", "-shm"] {
        let mut side = db.as_os_str().to_owned();
        side.push(suffix);
        let side = PathBuf::from(side);
        if let Ok(m) = std::fs::metadata(&side)
            && m.mode() & 0o777 != mode
            && let Err(e) = std::fs::set_permissions(&side, std::fs::Permissions::from_mode(mode))
        {
            tracing::warn!(file = %side.display(), error = %e, "cannot give this file the database's mode");
        }
    }
}
