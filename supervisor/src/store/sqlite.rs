//! The embedded store: SQLite in `state_dir/wfhost.db`, WAL with
//! `synchronous=FULL` so a commit survives power loss, schema versioned by
//! `PRAGMA user_version` and migrated one transaction per step.

mod events;
mod mail;

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ed25519_dalek::SigningKey;
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use wfhost_ipc::KeyId;

use super::{
    Accepted, ChildRecord, EventRecord, MailCounts, MailItem, NewEvent, Store, StoreError,
};
use crate::journal::{GENESIS_HASH, JournalRecord, NewJournalEntry};

/// The database file inside `state_dir`.
pub const DB_FILE: &str = "wfhost.db";

/// How long a writer waits for another's lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Schema migrations in order: entry `i` takes the schema from version `i`
/// to `i + 1`. To change the schema, append one entry; never edit a
/// shipped one.
const MIGRATIONS: &[&str] = &[
    // 1: children (for orphan clean-up) and the signed journal.
    "CREATE TABLE children (
         pid INTEGER PRIMARY KEY,
         deployment TEXT NOT NULL,
         start_time INTEGER NOT NULL,
         channel_id TEXT NOT NULL,
         spawned_at_ms INTEGER NOT NULL
     ) STRICT;
     CREATE TABLE journal (
         seq INTEGER PRIMARY KEY,
         at_ms INTEGER NOT NULL,
         kind TEXT NOT NULL,
         deployment TEXT,
         body TEXT NOT NULL,
         prev_hash BLOB NOT NULL,
         hash BLOB NOT NULL,
         key_id BLOB NOT NULL,
         signature BLOB NOT NULL
     ) STRICT;
     CREATE INDEX journal_by_deployment ON journal (deployment, seq);",
    // 2: mail (inbox -> processing -> done, DESIGN §6) and the event log
    // (§7). AUTOINCREMENT so an id or seq is never reused after pruning.
    // `mail_counts` is kept by triggers, so the inbox limit and status
    // cost one lookup however much mail is stored.
    "CREATE TABLE mail (
         id INTEGER PRIMARY KEY AUTOINCREMENT,
         deployment TEXT NOT NULL,
         state TEXT NOT NULL CHECK (state IN ('inbox', 'processing', 'done')),
         payload BLOB NOT NULL,
         enqueued_at_ms INTEGER NOT NULL,
         deliveries INTEGER NOT NULL DEFAULT 0,
         outcome TEXT,
         done_at_ms INTEGER
     ) STRICT;
     CREATE INDEX mail_by_state ON mail (deployment, state, id);
     CREATE INDEX mail_processing ON mail (deployment, id) WHERE state = 'processing';
     CREATE TABLE mail_counts (
         deployment TEXT PRIMARY KEY,
         inbox INTEGER NOT NULL DEFAULT 0,
         processing INTEGER NOT NULL DEFAULT 0,
         done INTEGER NOT NULL DEFAULT 0
     ) STRICT, WITHOUT ROWID;
     CREATE TRIGGER mail_counts_on_insert AFTER INSERT ON mail BEGIN
         INSERT INTO mail_counts (deployment, inbox, processing, done)
         VALUES (new.deployment, new.state = 'inbox', new.state = 'processing', new.state = 'done')
         ON CONFLICT (deployment) DO UPDATE SET
             inbox = inbox + excluded.inbox,
             processing = processing + excluded.processing,
             done = done + excluded.done;
     END;
     CREATE TRIGGER mail_counts_on_update AFTER UPDATE OF deployment, state ON mail
     WHEN old.state IS NOT new.state OR old.deployment IS NOT new.deployment BEGIN
         UPDATE mail_counts SET
             inbox = inbox - (old.state = 'inbox'),
             processing = processing - (old.state = 'processing'),
             done = done - (old.state = 'done')
         WHERE deployment = old.deployment;
         INSERT INTO mail_counts (deployment, inbox, processing, done)
         VALUES (new.deployment, new.state = 'inbox', new.state = 'processing', new.state = 'done')
         ON CONFLICT (deployment) DO UPDATE SET
             inbox = inbox + excluded.inbox,
             processing = processing + excluded.processing,
             done = done + excluded.done;
     END;
     CREATE TRIGGER mail_counts_on_delete AFTER DELETE ON mail BEGIN
         UPDATE mail_counts SET
             inbox = inbox - (old.state = 'inbox'),
             processing = processing - (old.state = 'processing'),
             done = done - (old.state = 'done')
         WHERE deployment = old.deployment;
     END;
     CREATE TABLE events (
         seq INTEGER PRIMARY KEY AUTOINCREMENT,
         at_ms INTEGER NOT NULL,
         deployment TEXT,
         kind TEXT NOT NULL,
         body TEXT NOT NULL
     ) STRICT;",
    // 3: idempotency keys for `wfhost send --key`, unique per deployment,
    // with the SHA-256 of the payload they were first used with (a done
    // item's payload is cleared).
    "ALTER TABLE mail ADD COLUMN idempotency_key TEXT;
     ALTER TABLE mail ADD COLUMN payload_sha256 BLOB;
     CREATE UNIQUE INDEX mail_by_key ON mail (deployment, idempotency_key)
         WHERE idempotency_key IS NOT NULL;",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The SQLite store of one supervisor.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Connection,
    path: PathBuf,
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
        let existed = path.exists();
        let store = Self::connect(path, OpenFlags::default())?;
        if !existed {
            // Mail payloads may be private; the WAL and shared-memory files
            // copy the database's mode.
            if let Err(e) =
                std::fs::set_permissions(&store.path, std::fs::Permissions::from_mode(0o600))
            {
                tracing::warn!(db = %store.path.display(), error = %e, "cannot make the database private (chmod 600)");
            }
        }
        Ok(store)
    }

    /// Opens an existing `state_dir/wfhost.db` (for the journal commands),
    /// never creating one: a missing database is [`StoreError::Missing`].
    pub fn open_existing(state_dir: &Path) -> Result<Self, StoreError> {
        let path = state_dir.join(DB_FILE);
        if !path.exists() {
            return Err(StoreError::Missing { path });
        }
        Self::connect(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn connect(path: PathBuf, flags: OpenFlags) -> Result<Self, StoreError> {
        let conn = match Connection::open_with_flags(&path, flags) {
            Ok(conn) => conn,
            Err(source) => {
                return Err(StoreError::Sqlite {
                    path,
                    action: "opening the database",
                    source,
                });
            }
        };
        let mut store = Self { conn, path };
        store.configure()?;
        store.migrate()?;
        Ok(store)
    }

    /// An error mapper for `action` on this database.
    fn fail(&self, action: &'static str) -> impl FnOnce(rusqlite::Error) -> StoreError + use<> {
        let path = self.path.clone();
        move |source| StoreError::Sqlite {
            path,
            action,
            source,
        }
    }

    fn configure(&mut self) -> Result<(), StoreError> {
        self.conn
            .busy_timeout(BUSY_TIMEOUT)
            .map_err(self.fail("setting the busy timeout"))?;
        let mode: String = self
            .conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(self.fail("switching to WAL mode"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(
                db = %self.path.display(),
                mode,
                "SQLite refused WAL mode (is the state directory on a network filesystem?); continuing in this mode"
            );
        }
        self.conn
            .pragma_update(None, "synchronous", "FULL")
            .map_err(self.fail("setting synchronous=FULL"))?;
        self.conn
            .pragma_update(None, "foreign_keys", true)
            .map_err(self.fail("enabling foreign keys"))?;
        // The working set is small (recent mail, the journal's tail); a
        // 512 KiB page cache per connection keeps an idle supervisor lean.
        self.conn
            .pragma_update(None, "cache_size", -512)
            .map_err(self.fail("setting the page cache size"))?;
        Ok(())
    }

    /// Brings the schema to [`SCHEMA_VERSION`], one transaction per step,
    /// rechecking the version under the write lock so two processes
    /// opening the same database never apply a step twice.
    fn migrate(&mut self) -> Result<(), StoreError> {
        let version: i64 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(self.fail("reading the schema version"))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                path: self.path.clone(),
                found: version,
                known: SCHEMA_VERSION,
            });
        }
        if version < 0 {
            return Err(StoreError::Corrupt {
                path: self.path.clone(),
                what: format!("schema version {version} is negative"),
            });
        }
        for (step, sql) in (1..)
            .zip(MIGRATIONS)
            .skip(usize::try_from(version).unwrap_or(0))
        {
            let fail = self.fail("migrating the schema");
            let path = self.path.clone();
            let result = (|| {
                let tx = self
                    .conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)?;
                let current: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
                if current >= step {
                    return Ok(false);
                }
                tx.execute_batch(sql)?;
                tx.pragma_update(None, "user_version", step)?;
                tx.commit()?;
                Ok(true)
            })();
            if result.map_err(fail)? {
                tracing::info!(db = %path.display(), version = step, "store schema migrated");
            }
        }
        Ok(())
    }

    /// A `Corrupt` error about this database.
    fn corrupt(&self, what: String) -> StoreError {
        StoreError::Corrupt {
            path: self.path.clone(),
            what,
        }
    }

    /// Maps a row-reading error: a stored value of the wrong type or range
    /// means the database was edited, anything else is SQLite's.
    fn read_fail(
        &self,
        action: &'static str,
    ) -> impl FnOnce(rusqlite::Error) -> StoreError + use<> {
        let path = self.path.clone();
        move |source| match source {
            rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
            | rusqlite::Error::InvalidColumnType(..) => StoreError::Corrupt {
                path,
                what: format!("{action}: a stored value has the wrong type: {source}"),
            },
            source => StoreError::Sqlite {
                path,
                action,
                source,
            },
        }
    }
}

/// A journal row as stored, before its blobs are checked.
struct JournalRow {
    seq: u64,
    at_ms: u64,
    kind: String,
    deployment: Option<String>,
    body: String,
    prev_hash: Vec<u8>,
    hash: Vec<u8>,
    key_id: Vec<u8>,
    signature: Vec<u8>,
}

impl JournalRow {
    fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self {
            seq: row.get(0)?,
            at_ms: row.get(1)?,
            kind: row.get(2)?,
            deployment: row.get(3)?,
            body: row.get(4)?,
            prev_hash: row.get(5)?,
            hash: row.get(6)?,
            key_id: row.get(7)?,
            signature: row.get(8)?,
        })
    }

    /// The record, or what is wrong with the row.
    fn into_record(self) -> Result<JournalRecord, String> {
        let seq = self.seq;
        let fixed = |name: &str, v: Vec<u8>, len: usize| {
            let got = v.len();
            if got == len {
                Ok(v)
            } else {
                Err(format!(
                    "journal record {seq}: {name} is {got} bytes, expected {len}"
                ))
            }
        };
        let mut prev_hash = [0u8; 32];
        prev_hash.copy_from_slice(&fixed("prev_hash", self.prev_hash, 32)?);
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&fixed("hash", self.hash, 32)?);
        let mut key_id = [0u8; 8];
        key_id.copy_from_slice(&fixed("key_id", self.key_id, 8)?);
        Ok(JournalRecord {
            seq,
            at_ms: self.at_ms,
            kind: self.kind,
            deployment: self.deployment,
            body: self.body,
            prev_hash,
            hash,
            key_id: KeyId(key_id),
            signature: self.signature,
        })
    }
}

impl Store for SqliteStore {
    fn record_child(&mut self, child: &ChildRecord) -> Result<(), StoreError> {
        let fail = self.fail("recording a child");
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO children (pid, deployment, start_time, channel_id, spawned_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    child.pid,
                    child.deployment,
                    child.start_time,
                    child.channel_id,
                    child.spawned_at_ms
                ])
            })
            .map(drop)
            .map_err(fail)
    }

    fn forget_child(&mut self, deployment: &str, pid: u32) -> Result<(), StoreError> {
        let fail = self.fail("forgetting a child");
        self.conn
            .prepare_cached("DELETE FROM children WHERE deployment = ?1 AND pid = ?2")
            .and_then(|mut stmt| stmt.execute(params![deployment, pid]))
            .map(drop)
            .map_err(fail)
    }

    fn children(&mut self) -> Result<Vec<ChildRecord>, StoreError> {
        let fail = self.read_fail("reading the children table");
        let read = || -> rusqlite::Result<Vec<ChildRecord>> {
            let mut stmt = self.conn.prepare_cached(
                "SELECT deployment, pid, start_time, channel_id, spawned_at_ms
                 FROM children ORDER BY deployment, pid",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(ChildRecord {
                    deployment: r.get(0)?,
                    pid: r.get(1)?,
                    start_time: r.get(2)?,
                    channel_id: r.get(3)?,
                    spawned_at_ms: r.get(4)?,
                })
            })?;
            rows.collect()
        };
        read().map_err(fail)
    }

    fn append_journal(
        &mut self,
        key: &SigningKey,
        entry: NewJournalEntry,
    ) -> Result<JournalRecord, StoreError> {
        let fail = self.fail("appending to the journal");
        let path = self.path.clone();
        let tx = match self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
        {
            Ok(tx) => tx,
            Err(e) => return Err(fail(e)),
        };
        let last: Option<(u64, Vec<u8>)> = match tx
            .prepare_cached("SELECT seq, hash FROM journal ORDER BY seq DESC LIMIT 1")
            .and_then(|mut stmt| {
                stmt.query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            }) {
            Ok(last) => last,
            Err(e) => return Err(fail(e)),
        };
        let (seq, prev_hash) = match last {
            None => (1, GENESIS_HASH),
            Some((seq, hash)) => {
                let Ok(hash) = <[u8; 32]>::try_from(hash.as_slice()) else {
                    return Err(StoreError::Corrupt {
                        path,
                        what: format!(
                            "journal record {seq}: hash is {} bytes, expected 32",
                            hash.len()
                        ),
                    });
                };
                (seq.saturating_add(1), hash)
            }
        };
        let record = JournalRecord::seal(seq, prev_hash, entry, key);
        let inserted = tx
            .prepare_cached(
                "INSERT INTO journal (seq, at_ms, kind, deployment, body, prev_hash, hash, key_id, signature)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    record.seq,
                    record.at_ms,
                    record.kind,
                    record.deployment,
                    record.body,
                    record.prev_hash.as_slice(),
                    record.hash.as_slice(),
                    record.key_id.0.as_slice(),
                    record.signature
                ])
            })
            .and_then(|_| tx.commit());
        match inserted {
            Ok(()) => Ok(record),
            Err(e) => Err(fail(e)),
        }
    }

    fn journal(&mut self, deployment: Option<&str>) -> Result<Vec<JournalRecord>, StoreError> {
        let fail = self.read_fail("reading the journal");
        let read = || -> rusqlite::Result<Vec<JournalRow>> {
            let mut stmt = self.conn.prepare_cached(
                "SELECT seq, at_ms, kind, deployment, body, prev_hash, hash, key_id, signature
                 FROM journal WHERE ?1 IS NULL OR deployment = ?1 ORDER BY seq",
            )?;
            let rows = stmt.query_map(params![deployment], JournalRow::read)?;
            rows.collect()
        };
        let rows = read().map_err(fail)?;
        rows.into_iter()
            .map(|row| row.into_record().map_err(|what| self.corrupt(what)))
            .collect()
    }

    fn enqueue_mail(
        &mut self,
        deployment: &str,
        key: Option<&str>,
        payload: &[u8],
        max_inbox: u64,
        at_ms: u64,
    ) -> Result<Accepted, StoreError> {
        mail::enqueue(self, deployment, key, payload, max_inbox, at_ms)
    }

    fn take_mail(&mut self, deployment: &str, limit: usize) -> Result<Vec<MailItem>, StoreError> {
        mail::take(self, deployment, limit)
    }

    fn ack_mail(
        &mut self,
        deployment: &str,
        id: u64,
        outcome: &str,
        at_ms: u64,
    ) -> Result<bool, StoreError> {
        mail::ack(self, deployment, id, outcome, at_ms)
    }

    fn replay_mail(&mut self, deployment: &str) -> Result<u64, StoreError> {
        mail::replay(self, Some(deployment))
    }

    fn replay_all_mail(&mut self) -> Result<u64, StoreError> {
        mail::replay(self, None)
    }

    fn prune_done_mail(&mut self, done_before_ms: u64) -> Result<u64, StoreError> {
        mail::prune_done(self, done_before_ms)
    }

    fn mail_counts(&mut self, deployment: &str) -> Result<MailCounts, StoreError> {
        mail::counts(self, deployment)
    }

    #[cfg(test)]
    fn mail_done_ids(&mut self, deployment: &str) -> Result<Vec<u64>, StoreError> {
        mail::done_ids(self, deployment)
    }

    fn append_events(&mut self, new: &[NewEvent]) -> Result<Vec<u64>, StoreError> {
        events::append(self, new)
    }

    fn events_after(&mut self, after: u64, limit: usize) -> Result<Vec<EventRecord>, StoreError> {
        events::after(self, after, limit)
    }

    fn prune_events(&mut self, keep: u64) -> Result<u64, StoreError> {
        events::prune(self, keep)
    }

    #[cfg(test)]
    fn last_event_seq(&mut self) -> Result<u64, StoreError> {
        events::last_seq(self)
    }
}

#[cfg(test)]
mod tests {
    use ed25519_dalek::SigningKey;
    use serde_json::json;

    use super::*;
    use crate::journal::{Breakage, JournalBroken, verify};

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    fn entry(i: u64, deployment: &str) -> NewJournalEntry {
        NewJournalEntry {
            at_ms: 1_700_000_000_000 + i,
            kind: "recycle".into(),
            deployment: Some(deployment.into()),
            body: json!({ "origin": "operator", "n": i }),
        }
    }

    /// A store in a fresh temp dir holding `n` journal records.
    fn store_with(n: u64, k: &SigningKey) -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(&dir.path().join("state")).unwrap();
        for i in 1..=n {
            store
                .append_journal(k, entry(i, if i % 2 == 0 { "even" } else { "odd" }))
                .unwrap();
        }
        (dir, store)
    }

    /// A second connection for tampering, as an attacker with file access.
    fn tamper(store: &SqliteStore, sql: &str) {
        let conn = Connection::open(store.path()).unwrap();
        conn.execute_batch(sql).unwrap();
    }

    fn verify_store(store: &mut SqliteStore, k: &SigningKey) -> Result<u64, JournalBroken> {
        verify(&store.journal(None).unwrap(), &k.verifying_key())
    }

    #[test]
    fn open_creates_a_private_wal_database_at_the_current_schema() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("a/b/state");
        let store = SqliteStore::open(&state).unwrap();
        assert_eq!(store.path(), state.join(DB_FILE));
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&state), 0o700);
        assert_eq!(mode(store.path()), 0o600);
        let c = &store.conn;
        let get = |pragma: &str| -> String {
            c.pragma_query_value(None, pragma, |r| r.get::<_, rusqlite::types::Value>(0))
                .map(|v| format!("{v:?}"))
                .unwrap()
        };
        assert_eq!(get("journal_mode"), "Text(\"wal\")");
        assert_eq!(get("synchronous"), "Integer(2)", "FULL");
        assert_eq!(get("user_version"), format!("Integer({SCHEMA_VERSION})"));
        drop(store);
        // Reopening is a no-op migration.
        SqliteStore::open(&state).unwrap();
    }

    #[test]
    fn a_database_from_a_newer_wfhost_is_refused() {
        let (_dir, store) = store_with(0, &key(1));
        tamper(
            &store,
            &format!("PRAGMA user_version = {};", SCHEMA_VERSION + 1),
        );
        let state = store.path().parent().unwrap().to_path_buf();
        drop(store);
        let err = SqliteStore::open(&state).unwrap_err();
        assert!(matches!(err, StoreError::TooNew { .. }), "{err}");
        assert!(
            err.to_string().contains("help: run the newer wfhost"),
            "{err}"
        );
    }

    #[test]
    fn migrations_run_from_an_empty_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(DB_FILE), b"").unwrap();
        let mut store = SqliteStore::open_existing(dir.path()).unwrap();
        assert!(store.journal(None).unwrap().is_empty());
    }

    #[test]
    fn open_existing_never_creates_a_database() {
        let dir = tempfile::tempdir().unwrap();
        let err = SqliteStore::open_existing(dir.path()).unwrap_err();
        assert!(matches!(err, StoreError::Missing { .. }), "{err}");
        assert!(err.to_string().starts_with("no journal at "), "{err}");
        assert!(!dir.path().join(DB_FILE).exists());
    }

    #[test]
    fn garbage_is_not_a_database_and_the_error_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(DB_FILE), vec![0x5a; 8192]).unwrap();
        let err = SqliteStore::open_existing(dir.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains(DB_FILE), "{err}");
        assert!(err.contains("not a wfhost database or is damaged"), "{err}");
    }

    #[test]
    fn unwritable_state_dir_names_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let err = SqliteStore::open(&file.join("state"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("cannot create state directory"), "{err}");
        assert!(err.contains("help:"), "{err}");
    }

    #[test]
    fn children_are_remembered_until_forgotten() {
        let (_dir, mut store) = store_with(0, &key(1));
        let child = |deployment: &str, pid| ChildRecord {
            deployment: deployment.into(),
            pid,
            start_time: 123_456_789,
            channel_id: "9f".repeat(16),
            spawned_at_ms: 1_700_000_000_000,
        };
        store.record_child(&child("b", 20)).unwrap();
        store.record_child(&child("a", 30)).unwrap();
        store.record_child(&child("a", 10)).unwrap();
        assert_eq!(
            store.children().unwrap(),
            [child("a", 10), child("a", 30), child("b", 20)]
        );
        // A reused pid replaces the stale record.
        store.record_child(&child("c", 20)).unwrap();
        // Forgetting needs the deployment too: a stale forget is harmless.
        store.forget_child("b", 20).unwrap();
        store.forget_child("a", 10).unwrap();
        assert_eq!(store.children().unwrap(), [child("a", 30), child("c", 20)]);
        let state = store.path().parent().unwrap().to_path_buf();
        drop(store);
        let mut reopened = SqliteStore::open(&state).unwrap();
        assert_eq!(reopened.children().unwrap().len(), 2);
    }

    #[test]
    fn appended_records_chain_verify_and_survive_a_reopen() {
        let k = key(1);
        let (_dir, mut store) = store_with(3, &k);
        let records = store.journal(None).unwrap();
        assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(records[0].prev_hash, GENESIS_HASH);
        assert_eq!(records[2].prev_hash, records[1].hash);
        assert_eq!(records[1].body, r#"{"n":2,"origin":"operator"}"#);
        assert_eq!(verify_store(&mut store, &k), Ok(3));

        let state = store.path().parent().unwrap().to_path_buf();
        drop(store);
        let mut store = SqliteStore::open(&state).unwrap();
        let fourth = store.append_journal(&k, entry(4, "even")).unwrap();
        assert_eq!(fourth.seq, 4);
        assert_eq!(fourth.prev_hash, records[2].hash);
        assert_eq!(verify_store(&mut store, &k), Ok(4));
    }

    #[test]
    fn the_journal_filters_by_deployment() {
        let (_dir, mut store) = store_with(5, &key(1));
        let odd: Vec<u64> = store
            .journal(Some("odd"))
            .unwrap()
            .iter()
            .map(|r| r.seq)
            .collect();
        assert_eq!(odd, [1, 3, 5]);
        assert!(store.journal(Some("none")).unwrap().is_empty());
    }

    #[test]
    fn a_global_record_has_no_deployment() {
        let k = key(1);
        let (_dir, mut store) = store_with(0, &k);
        let entry = NewJournalEntry {
            at_ms: 1,
            kind: "config-reload".into(),
            deployment: None,
            body: json!({}),
        };
        store.append_journal(&k, entry).unwrap();
        assert_eq!(store.journal(None).unwrap()[0].deployment, None);
        assert_eq!(verify_store(&mut store, &k), Ok(1));
    }

    #[test]
    fn editing_one_byte_of_a_body_is_detected() {
        let k = key(1);
        let (_dir, mut store) = store_with(5, &k);
        tamper(
            &store,
            "UPDATE journal SET body = replace(body, 'operator', 'operatos') WHERE seq = 3;",
        );
        assert_eq!(
            verify_store(&mut store, &k),
            Err(JournalBroken {
                seq: 3,
                problem: Breakage::Edited
            })
        );
    }

    #[test]
    fn deleting_a_middle_record_is_detected() {
        let k = key(1);
        let (_dir, mut store) = store_with(5, &k);
        tamper(&store, "DELETE FROM journal WHERE seq = 3;");
        assert_eq!(
            verify_store(&mut store, &k),
            Err(JournalBroken {
                seq: 4,
                problem: Breakage::Missing {
                    expected: 3,
                    found: 4
                }
            })
        );
        // Closing the gap by renumbering breaks the chain instead.
        tamper(&store, "UPDATE journal SET seq = seq - 1 WHERE seq > 3;");
        assert_eq!(
            verify_store(&mut store, &k),
            Err(JournalBroken {
                seq: 3,
                problem: Breakage::ChainBroken
            })
        );
    }

    #[test]
    fn swapping_two_records_is_detected() {
        let k = key(1);
        let (_dir, mut store) = store_with(5, &k);
        tamper(
            &store,
            "UPDATE journal SET seq = -2 WHERE seq = 2;
             UPDATE journal SET seq = 2 WHERE seq = 3;
             UPDATE journal SET seq = 3 WHERE seq = -2;",
        );
        assert_eq!(
            verify_store(&mut store, &k),
            Err(JournalBroken {
                seq: 2,
                problem: Breakage::ChainBroken
            })
        );
    }

    #[test]
    fn a_forged_record_is_detected() {
        let k = key(1);
        let (_dir, mut store) = store_with(3, &k);
        // Forged by another key, chained correctly, appended at the end.
        let forger = key(9);
        let last = store.journal(None).unwrap().pop().unwrap();
        let forged = JournalRecord::seal(4, last.hash, entry(4, "even"), &forger);
        let db = store.path().to_path_buf();
        let insert = |r: &JournalRecord| {
            Connection::open(&db)
                .unwrap()
                .execute(
                    "INSERT INTO journal VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                    params![
                        r.seq,
                        r.at_ms,
                        r.kind,
                        r.deployment,
                        r.body,
                        r.prev_hash.as_slice(),
                        r.hash.as_slice(),
                        r.key_id.0.as_slice(),
                        r.signature
                    ],
                )
                .unwrap();
        };
        insert(&forged);
        assert_eq!(
            verify_store(&mut store, &k),
            Err(JournalBroken {
                seq: 4,
                problem: Breakage::UnknownKey(KeyId::of(&forger.verifying_key()))
            })
        );
        // Claiming the real key's id: the signature gives it away.
        let mut claimed = forged.clone();
        claimed.key_id = KeyId::of(&k.verifying_key());
        claimed.hash = claimed.computed_hash();
        tamper(&store, "DELETE FROM journal WHERE seq = 4;");
        insert(&claimed);
        assert_eq!(
            verify_store(&mut store, &k),
            Err(JournalBroken {
                seq: 4,
                problem: Breakage::BadSignature
            })
        );
        // Inserted in the middle, with the later records renumbered.
        tamper(&store, "DELETE FROM journal WHERE seq = 4;");
        tamper(
            &store,
            "UPDATE journal SET seq = seq + 10 WHERE seq >= 2;
                        UPDATE journal SET seq = seq - 9 WHERE seq >= 12;",
        );
        let mut middle = JournalRecord::seal(
            2,
            store.journal(None).unwrap()[0].hash,
            entry(2, "odd"),
            &forger,
        );
        middle.key_id = KeyId::of(&k.verifying_key());
        middle.hash = middle.computed_hash();
        insert(&middle);
        assert_eq!(
            verify_store(&mut store, &k),
            Err(JournalBroken {
                seq: 2,
                problem: Breakage::BadSignature
            })
        );
    }

    #[test]
    fn a_mangled_blob_is_reported_as_corruption_naming_the_record() {
        let k = key(1);
        let (_dir, mut store) = store_with(2, &k);
        tamper(&store, "UPDATE journal SET hash = x'00' WHERE seq = 2;");
        let err = store.journal(None).unwrap_err().to_string();
        assert!(
            err.contains("journal record 2: hash is 1 bytes, expected 32"),
            "{err}"
        );
        let err = store.append_journal(&k, entry(3, "odd")).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    }

    #[test]
    fn a_negative_number_is_reported_as_corruption() {
        let k = key(1);
        let (_dir, mut store) = store_with(1, &k);
        tamper(&store, "UPDATE journal SET at_ms = -5;");
        let err = store.journal(None).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    }

    #[test]
    fn appends_from_two_connections_stay_one_chain() {
        let k = key(1);
        let (_dir, mut a) = store_with(0, &k);
        let state = a.path().parent().unwrap().to_path_buf();
        let mut b = SqliteStore::open(&state).unwrap();
        for i in 0..10 {
            let s = if i % 2 == 0 { &mut a } else { &mut b };
            s.append_journal(&k, entry(i, "odd")).unwrap();
        }
        assert_eq!(verify_store(&mut a, &k), Ok(10));
    }
}
