//! The PostgreSQL backend on a throwaway server: the whole backend suite,
//! then what only PostgreSQL has (connection strings, its schema table,
//! lost sessions, a read-only server).

use ed25519_dalek::SigningKey;
use serde_json::json;
use wfhost_tests::postgres::PgServer;

use super::schema::SCHEMA_VERSION;
use super::*;
use crate::journal::NewJournalEntry;
use crate::store::error::ErrorKind;
use crate::store::suite::Fixture;
use crate::store::{JournalStore, MailStore, Store};

/// A fresh server of its own; the store is in its `postgres` database.
struct Pg {
    server: PgServer,
    url: String,
}

fn pg() -> Box<dyn Fixture> {
    Box::new(fresh())
}

fn fresh() -> Pg {
    let server = PgServer::start();
    let url = server.url("postgres");
    PostgresStore::open(&url).expect("a fresh database migrates");
    Pg { server, url }
}

impl Pg {
    fn client(&self) -> Client {
        postgres::Client::connect(&self.url, postgres::NoTls).expect("connect")
    }
}

impl Fixture for Pg {
    fn open(&self) -> Box<dyn Store> {
        Box::new(PostgresStore::open(&self.url).expect("open"))
    }

    fn exec(&self, sql: &str) {
        self.client().batch_execute(sql).expect("exec");
    }

    fn count(&self, sql: &str) -> i64 {
        self.client()
            .query_one(&format!("SELECT ({sql})::BIGINT"), &[])
            .expect("count")
            .get(0)
    }

    fn blob(&self, hex: &str) -> String {
        format!("'\\x{hex}'::bytea")
    }
}

mod suite {
    use super::pg;
    use crate::store::suite::backend_suite;

    backend_suite!(pg());
}

fn entry() -> NewJournalEntry {
    NewJournalEntry {
        at_ms: 1,
        kind: "spawn".into(),
        deployment: None,
        body: json!({}),
    }
}

#[test]
fn connection_strings_are_checked_and_shown_without_the_password() {
    let config = parse_url("postgresql://app:secret@db.example:6543/wfhost").unwrap();
    assert_eq!(describe(&config), "postgresql://app@db.example:6543/wfhost");
    let config = parse_url("host=/run/postgresql user=wfhost dbname=w password=x").unwrap();
    assert_eq!(describe(&config), "postgresql://wfhost@/run/postgresql/w");
    let err = parse_url("dbname=w").unwrap_err();
    assert!(err.contains("names no server"), "{err}");
    let err = parse_url("host=/run/postgresql").unwrap_err();
    assert!(err.contains("names no database"), "{err}");
    assert!(parse_url("postgresql://h:notaport/db").is_err());
}

#[test]
fn a_uri_with_a_socket_dir_works_like_key_value_pairs() {
    let pg = fresh();
    let mut store = PostgresStore::open(&pg.server.uri("postgres")).unwrap();
    let k = SigningKey::from_bytes(&[1; 32]);
    assert_eq!(store.append_journal(&k, entry()).unwrap().seq, 1);
    assert_eq!(pg.open().journal(None).unwrap().len(), 1);
}

#[test]
fn open_existing_never_creates_a_store() {
    let pg = fresh();
    pg.server.create_database("empty");
    let url = pg.server.url("empty");
    let err = PostgresStore::open_existing(&url).err().expect("refused");
    assert!(matches!(err, StoreError::Missing { .. }), "{err}");
    assert!(
        err.to_string().starts_with("no journal at postgresql://"),
        "{err}"
    );
    assert_eq!(
        pg.server.psql(
            "empty",
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        ),
        "0"
    );
    assert!(PostgresStore::open_existing(&pg.url).is_ok());
}

#[test]
fn a_store_from_a_newer_wfhost_is_refused() {
    let pg = fresh();
    pg.exec("UPDATE wfhost_schema SET version = version + 1");
    let err = PostgresStore::open(&pg.url).err().expect("refused");
    assert!(matches!(err, StoreError::TooNew { .. }), "{err}");
    assert!(
        err.to_string().contains("help: run the newer wfhost"),
        "{err}"
    );
}

#[test]
fn hosts_migrating_at_once_apply_each_step_once() {
    let server = PgServer::start();
    let url = server.url("postgres");
    let opened: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || PostgresStore::open(&url).map(drop))
        })
        .collect();
    for t in opened {
        t.join().unwrap().unwrap();
    }
    assert_eq!(
        server.psql("postgres", "SELECT version FROM wfhost_schema"),
        SCHEMA_VERSION.to_string()
    );
}

#[test]
fn a_server_that_cannot_be_reached_is_named_unavailable() {
    let pg = fresh();
    pg.server.stop();
    let err = PostgresStore::open(&pg.url).err().expect("refused");
    assert_eq!(err.kind(), Some(ErrorKind::Unavailable), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("connecting to the database failed: unavailable"),
        "{msg}"
    );
    assert!(msg.contains("pg_isready"), "{msg}");
}

#[test]
fn a_lost_session_is_made_again_on_the_next_call() {
    let pg = fresh();
    let mut store = PostgresStore::open(&pg.url).unwrap();
    let k = SigningKey::from_bytes(&[1; 32]);
    store.append_journal(&k, entry()).unwrap();
    pg.exec(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = 'wfhost' AND pid <> pg_backend_pid()",
    );
    // The call that finds the session gone fails, naming it...
    let first = store.append_journal(&k, entry());
    if let Err(e) = &first {
        assert_eq!(e.kind(), Some(ErrorKind::Unavailable), "{e}");
    }
    // ...and the store carries on without anyone reopening it.
    let next = store.append_journal(&k, entry()).unwrap();
    assert_eq!(next.seq, if first.is_ok() { 3 } else { 2 });
}

#[test]
fn a_read_only_server_is_named_read_only() {
    let pg = fresh();
    pg.exec("ALTER DATABASE postgres SET default_transaction_read_only = on");
    let mut store = PostgresStore::open(&pg.url).unwrap();
    let k = SigningKey::from_bytes(&[1; 32]);
    let err = store.append_journal(&k, entry()).unwrap_err();
    assert_eq!(err.kind(), Some(ErrorKind::ReadOnly), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("appending to the journal failed: the store is read-only"),
        "{msg}"
    );
    assert!(msg.contains("point [store] url at the primary"), "{msg}");
}

#[test]
fn a_column_changed_by_hand_is_named_not_a_crash() {
    let pg = fresh();
    let mut store = pg.open();
    store.append_event(1, None, "spawned", &json!({})).unwrap();
    pg.exec("ALTER TABLE events ALTER COLUMN at_ms TYPE TEXT");
    let err = store.events_after(0, 10).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("a stored value has the wrong type"),
        "{err}"
    );
}

#[test]
fn a_version_1_store_gains_holders_and_dead_mail_and_keeps_its_mail() {
    let server = PgServer::start();
    let url = server.url("postgres");
    let mut client = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    // Mail as a version-1 wfhost left it: waiting, in flight, done.
    client
        .batch_execute(&format!(
            "CREATE TABLE wfhost_schema (id INT PRIMARY KEY CHECK (id = 1), version BIGINT NOT NULL);
             INSERT INTO wfhost_schema VALUES (1, 1);
             {}
             INSERT INTO mail (deployment, state, payload, enqueued_at_ms, deliveries)
                 VALUES ('d', 'inbox', 'a', 1, 0), ('d', 'processing', 'b', 2, 1);
             INSERT INTO mail (deployment, state, payload, enqueued_at_ms, deliveries, outcome, done_at_ms)
                 VALUES ('d', 'done', '', 3, 1, 'succeeded', 4);",
            super::schema::MIGRATIONS[0]
        ))
        .expect("a version-1 store");
    let mut store = PostgresStore::open(&url).expect("migrates");
    assert_eq!(
        server.psql("postgres", "SELECT version FROM wfhost_schema"),
        SCHEMA_VERSION.to_string()
    );
    let counts = store.mail_counts("d").unwrap();
    assert_eq!(
        (counts.inbox, counts.processing, counts.done, counts.dead),
        (1, 1, 1, 0)
    );
    assert_eq!(store.replay_all_mail(5).unwrap(), 1);
    let child = crate::store::Holder {
        channel_id: "c".repeat(32),
        pid: 7,
    };
    let taken = store.take_mail("d", &child, 10, 6).unwrap();
    let seen: Vec<(u64, u32)> = taken.iter().map(|m| (m.id, m.attempt)).collect();
    assert_eq!(seen, [(1, 1), (2, 2)]);
    let back = store
        .replay_mail(
            "d",
            &child,
            &crate::store::Ending {
                cause: "hung".into(),
                counts: true,
                at_ms: 7,
                hold: false,
            },
            1,
        )
        .unwrap();
    assert_eq!(back.dead.len(), 2, "the new dead state is allowed");
    assert_eq!(store.mail_counts("d").unwrap().dead, 2);
    assert_eq!(store.enqueue_mail("d", None, b"x", 9, 8).unwrap().id, 4);
}

/// A session killed in the middle of a group: the write that meets it is
/// told the server is unavailable, and so is every write before it in the
/// group (none of which was kept); the next group reconnects.
#[test]
fn a_group_whose_connection_is_lost_tells_every_write_why() {
    let pg = fresh();
    let mut store = pg.open();
    assert!(store.begin_group().unwrap());
    store.enqueue_mail("d", None, b"a", 100, 1).unwrap();
    pg.exec(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'wfhost'",
    );
    // Gone before the next statement: it meets the closed session.
    let gone = "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'wfhost'";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while pg.count(gone) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the session outlived its termination"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let met = store.enqueue_mail("d", None, b"b", 100, 2).unwrap_err();
    assert_eq!(met.kind(), Some(ErrorKind::Unavailable), "{met}");
    let lost = store
        .group_lost()
        .expect("the group went with its connection");
    assert_eq!(lost.kind(), Some(ErrorKind::Unavailable), "{lost}");
    let told = lost.for_write("accepting mail").to_string();
    assert!(
        told.contains("accepting mail failed: unavailable") && told.contains("pg_isready"),
        "{told}"
    );
    assert_eq!(pg.count("SELECT count(*) FROM mail"), 0);
    assert!(store.begin_group().unwrap(), "a new group on a new session");
    store.enqueue_mail("d", None, b"c", 100, 3).unwrap();
    store.end_group().unwrap();
    assert_eq!(pg.count("SELECT count(*) FROM mail"), 1);
}
