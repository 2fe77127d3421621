//! The SQLite backend: the whole backend suite, then what only SQLite
//! has (files and their modes, `user_version` migrations, its errors).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;
use rusqlite::{Connection, OpenFlags};
use serde_json::json;

use super::*;
use crate::journal::{JournalHead, JournalRecord, NewJournalEntry};
use crate::store::error::ErrorKind;
use crate::store::suite::Fixture;
use crate::store::{ChildrenStore, EventStore, JournalStore, MailAdmin, MailStore, Store};

/// A fresh SQLite store in a temp dir.
struct Sqlite {
    _dir: tempfile::TempDir,
    state: PathBuf,
}

fn sqlite() -> Box<dyn Fixture> {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    SqliteStore::open(&state).unwrap();
    Box::new(Sqlite { _dir: dir, state })
}

impl Fixture for Sqlite {
    fn open(&self) -> Box<dyn Store> {
        Box::new(SqliteStore::open(&self.state).unwrap())
    }

    fn exec(&self, sql: &str) {
        let conn = Connection::open(self.state.join(DB_FILE)).unwrap();
        conn.execute_batch(sql).unwrap();
    }

    fn count(&self, sql: &str) -> i64 {
        let conn = Connection::open(self.state.join(DB_FILE)).unwrap();
        conn.query_row(sql, [], |r| r.get(0)).unwrap()
    }

    fn blob(&self, hex: &str) -> String {
        format!("x'{hex}'")
    }
}

mod suite {
    use super::sqlite;
    use crate::store::suite::backend_suite;

    backend_suite!(sqlite());
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn sidecar(db: &Path, suffix: &str) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(suffix);
    PathBuf::from(p)
}

#[test]
fn open_creates_a_private_wal_database_at_the_current_schema() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("a/b/state");
    let store = SqliteStore::open(&state).unwrap();
    assert_eq!(store.path(), state.join(DB_FILE));
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
fn the_wal_and_shared_memory_files_are_as_private_as_the_database() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut store = SqliteStore::open(&state).unwrap();
    store
        .append_event(1, None, "spawned", &json!({ "payload": "secret" }))
        .unwrap();
    for suffix in ["-wal", "-shm"] {
        let side = sidecar(store.path(), suffix);
        assert!(side.exists(), "{}", side.display());
        assert_eq!(mode(&side), 0o600, "{}", side.display());
    }
    // Left 0644 by an older wfhost: made private on the next open.
    let db = store.path().to_path_buf();
    let open = |p: &Path| std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o644));
    open(&sidecar(&db, "-wal")).unwrap();
    open(&sidecar(&db, "-shm")).unwrap();
    let _second = SqliteStore::open(&state).unwrap();
    assert_eq!(mode(&sidecar(&db, "-wal")), 0o600);
    assert_eq!(mode(&sidecar(&db, "-shm")), 0o600);
}

#[test]
fn a_write_on_a_read_only_database_is_named_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    drop(SqliteStore::open(&state).unwrap());
    let mut store = SqliteStore::connect(state.join(DB_FILE), OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("a current database opens read-only");
    let k = SigningKey::from_bytes(&[1; 32]);
    let entry = NewJournalEntry {
        at_ms: 1,
        kind: "spawn".into(),
        deployment: None,
        body: json!({}),
    };
    let err = store.append_journal(&k, entry).unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::ReadOnly), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("appending to the journal failed: the store is read-only"),
        "{msg}"
    );
    assert!(
        msg.contains("remount,rw") && !msg.contains("check the disk"),
        "{msg}"
    );
}

#[test]
fn a_database_from_a_newer_wfhost_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    drop(SqliteStore::open(dir.path()).unwrap());
    Connection::open(dir.path().join(DB_FILE))
        .unwrap()
        .pragma_update(None, "user_version", SCHEMA_VERSION + 1)
        .unwrap();
    let err = SqliteStore::open(dir.path()).unwrap_err();
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

/// A database at schema version `version`, made by the shipped
/// migrations, with `sql` run on it.
fn database_at(version: usize, sql: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
    for step in &MIGRATIONS[..version] {
        conn.execute_batch(step).unwrap();
    }
    conn.execute_batch(sql).unwrap();
    conn.pragma_update(None, "user_version", version as i64)
        .unwrap();
    dir
}

#[test]
fn a_v1_database_gains_mail_and_keeps_its_journal() {
    let dir = database_at(1, "INSERT INTO children VALUES (7, 'd', 1, 'c', 2);");
    let mut store = SqliteStore::open(dir.path()).unwrap();
    assert_eq!(store.children().unwrap().len(), 1);
    store.enqueue_mail("d", None, b"x", 9, 1).unwrap();
    let counts = store.mail_counts("d").unwrap();
    assert_eq!((counts.inbox, counts.processing, counts.done), (1, 0, 0));
}

#[test]
fn a_v3_journal_gets_its_head_from_its_last_record() {
    let k = SigningKey::from_bytes(&[1; 32]);
    // Two records as a version-3 wfhost wrote them.
    let first = JournalRecord::next(JournalHead::GENESIS, entry(1), &k);
    let second = JournalRecord::next(first.head(), entry(2), &k);
    let insert = |r: &JournalRecord| {
        format!(
            "INSERT INTO journal VALUES ({}, {}, '{}', NULL, '{}', x'{}', x'{}', x'{}', x'{}');",
            r.seq,
            r.at_ms,
            r.kind,
            r.body,
            hex::encode(r.prev_hash),
            hex::encode(r.hash),
            hex::encode(r.key_id.0),
            hex::encode(&r.signature)
        )
    };
    let dir = database_at(3, &(insert(&first) + &insert(&second)));
    let mut store = SqliteStore::open(dir.path()).unwrap();
    let heads = store.journal_heads().unwrap();
    assert_eq!((heads.head, heads.verified), (second.head(), None));
    let third = store.append_journal(&k, entry(3)).unwrap();
    assert_eq!((third.seq, third.prev_hash), (3, second.hash));
    // An empty v3 journal starts from genesis.
    let empty = database_at(3, "");
    let heads = SqliteStore::open(empty.path())
        .unwrap()
        .journal_heads()
        .unwrap();
    assert_eq!(heads.head, JournalHead::GENESIS);
}

fn entry(i: u64) -> NewJournalEntry {
    NewJournalEntry {
        at_ms: i,
        kind: "spawn".into(),
        deployment: None,
        body: json!({ "n": i }),
    }
}

#[test]
fn a_v4_database_gains_holders_and_dead_mail_and_keeps_its_mail() {
    // Mail as a version-4 wfhost left it: waiting, in flight (its child
    // gone with the supervisor), done, and ids handed out up to 50.
    let dir = database_at(
        4,
        "INSERT INTO mail (id, deployment, state, payload, enqueued_at_ms, deliveries, idempotency_key)
             VALUES (1, 'd', 'inbox', x'61', 1, 0, 'k1'),
                    (2, 'd', 'processing', x'62', 2, 1, NULL);
         INSERT INTO mail (id, deployment, state, payload, enqueued_at_ms, deliveries, outcome, done_at_ms)
             VALUES (3, 'd', 'done', x'', 3, 1, 'succeeded', 4);
         UPDATE sqlite_sequence SET seq = 50 WHERE name = 'mail';",
    );
    let mut store = SqliteStore::open(dir.path()).unwrap();
    let version: i64 = store
        .conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, SCHEMA_VERSION);
    let counts = store.mail_counts("d").unwrap();
    assert_eq!(
        (counts.inbox, counts.processing, counts.done, counts.dead),
        (1, 1, 1, 0)
    );
    // The item in flight has an unknown holder until the start-up replay.
    let held = store.mail_item(2).unwrap().unwrap();
    assert_eq!(
        held.holder.map(|h| (h.channel_id, h.pid)),
        Some((String::new(), 0))
    );
    assert_eq!(store.replay_all_mail(5).unwrap(), 1);
    let child = crate::store::Holder {
        channel_id: "c".repeat(32),
        pid: 7,
    };
    let taken = store.take_mail("d", &child, 10, 6).unwrap();
    let seen: Vec<(u64, u32)> = taken.iter().map(|m| (m.id, m.attempt)).collect();
    assert_eq!(seen, [(1, 1), (2, 2)]);
    assert_eq!(
        store.mail_item(3).unwrap().unwrap().outcome.as_deref(),
        Some("succeeded")
    );
    // Ids go on above the old high mark; keys still name their item.
    assert_eq!(store.enqueue_mail("d", None, b"x", 9, 7).unwrap().id, 51);
    let err = store.enqueue_mail("d", Some("k1"), b"z", 9, 8).unwrap_err();
    assert!(matches!(err, StoreError::KeyReused { id: 1, .. }), "{err}");
}
