//! Figures for the store, run by hand (`cargo nextest run -p wfhost
//! --run-ignored only store::measure --no-capture`): journal append
//! latency on SQLite and on a durable PostgreSQL (fsync on), and the
//! start-up check over a 100,000-record journal, full and from the last
//! verified head; mail takes and acks with holders and history beside one
//! durable commit. Each asserts that what it measured is correct.

use std::time::{Duration, Instant};

use ed25519_dalek::SigningKey;
use serde_json::json;
use wfhost_tests::postgres::PgServer;

use super::guard;
use super::{PostgresStore, SqliteStore, Store};
use crate::journal::{JournalHead, JournalRecord, NewJournalEntry};

fn entry(i: u64) -> NewJournalEntry {
    NewJournalEntry {
        at_ms: 1_700_000_000_000 + i,
        kind: "spawn".into(),
        deployment: Some("billing".into()),
        body: json!({ "pid": 4000 + i, "channel": "9f".repeat(16) }),
    }
}

/// p50 and p99 of `samples`.
fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize];
    (at(0.50), at(0.99))
}

/// Appends `n` records one by one, timing each; checks the chain.
fn appends(store: &mut dyn Store, n: u64) -> (Duration, Duration) {
    let k = SigningKey::from_bytes(&[1; 32]);
    let samples = (1..=n)
        .map(|i| {
            let t = Instant::now();
            store.append_journal(&k, entry(i)).expect("append");
            t.elapsed()
        })
        .collect();
    let checked = guard::check(store, &k.verifying_key()).expect("a correct chain");
    assert_eq!(checked.records, n);
    percentiles(samples)
}

#[test]
#[ignore = "a measurement: run by hand"]
fn journal_append_latency_on_sqlite_and_postgres() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut sqlite = SqliteStore::open(dir.path()).expect("sqlite");
    let (p50, p99) = appends(&mut sqlite, 500);
    println!("journal append, SQLite (WAL, synchronous=FULL): p50 {p50:?} p99 {p99:?}");
    let pg = PgServer::start_durable();
    let mut postgres = PostgresStore::open(&pg.url("postgres")).expect("postgres");
    let (p50, p99) = appends(&mut postgres, 500);
    println!("journal append, PostgreSQL 15 (fsync on, Unix socket): p50 {p50:?} p99 {p99:?}");
}

/// A correct chain of `n` records, sealed in memory.
fn chain(n: u64) -> Vec<JournalRecord> {
    let k = SigningKey::from_bytes(&[1; 32]);
    let mut head = JournalHead::GENESIS;
    (1..=n)
        .map(|i| {
            let r = JournalRecord::next(head, entry(i), &k);
            head = r.head();
            r
        })
        .collect()
}

/// Times the first (full) and second (anchored) start-up checks.
fn checks(store: &mut dyn Store, n: u64) -> (Duration, Duration) {
    let key = SigningKey::from_bytes(&[1; 32]).verifying_key();
    let first = guard::check(store, &key).expect("verifies");
    assert_eq!((first.records, first.from), (n, None));
    let second = guard::check(store, &key).expect("verifies");
    assert_eq!((second.records, second.from), (0, Some(first.head)));
    assert!(second.took < first.took);
    (first.took, second.took)
}

#[test]
#[ignore = "a measurement: run by hand"]
fn the_start_up_check_over_100_000_records() {
    const N: u64 = 100_000;
    let records = chain(N);
    let last = records[records.len() - 1].head();

    let dir = tempfile::tempdir().expect("temp dir");
    drop(SqliteStore::open(dir.path()).expect("sqlite"));
    let mut conn = rusqlite::Connection::open(dir.path().join(super::sqlite::DB_FILE)).unwrap();
    let tx = conn.transaction().unwrap();
    for r in &records {
        tx.execute(
            "INSERT INTO journal VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            rusqlite::params![
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
    }
    tx.execute(
        "UPDATE journal_head SET seq = ?1, hash = ?2",
        rusqlite::params![last.seq, last.hash.as_slice()],
    )
    .unwrap();
    tx.commit().unwrap();
    let mut sqlite = SqliteStore::open(dir.path()).unwrap();
    let (full, anchored) = checks(&mut sqlite, N);
    println!("start-up check, SQLite, {N} records: first start {full:?}, next start {anchored:?}");

    let pg = PgServer::start();
    let url = pg.url("postgres");
    drop(PostgresStore::open(&url).expect("postgres"));
    let mut client = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let mut tx = client.transaction().unwrap();
    let insert = tx
        .prepare("INSERT INTO journal VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)")
        .unwrap();
    for r in &records {
        tx.execute(
            &insert,
            &[
                &(r.seq as i64),
                &(r.at_ms as i64),
                &r.kind,
                &r.deployment,
                &r.body,
                &r.prev_hash.as_slice(),
                &r.hash.as_slice(),
                &r.key_id.0.as_slice(),
                &r.signature,
            ],
        )
        .unwrap();
    }
    tx.execute(
        "UPDATE journal_head SET seq = $1, hash = $2",
        &[&(last.seq as i64), &last.hash.as_slice()],
    )
    .unwrap();
    tx.commit().unwrap();
    let mut postgres = PostgresStore::open(&url).unwrap();
    let (full, anchored) = checks(&mut postgres, N);
    println!(
        "start-up check, PostgreSQL, {N} records: first start {full:?}, next start {anchored:?}"
    );
}

/// Times `rounds` takes of a full window (32) by one child and the 32 acks
/// of each, with holders and the delivery history written in the same
/// transactions; and, as the reference, one durable commit (an event).
fn mail_cycle(store: &mut dyn Store, rounds: usize) -> [(Duration, Duration); 3] {
    let child = super::Holder {
        channel_id: "9f".repeat(16),
        pid: 4242,
    };
    for i in 0..rounds * 32 {
        store
            .enqueue_mail(
                "billing",
                None,
                format!("{{\"n\":{i}}}").as_bytes(),
                u64::MAX,
                1,
            )
            .expect("enqueue");
    }
    let (mut takes, mut acks, mut commits) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let t = Instant::now();
        let items = store.take_mail("billing", &child, 32, 10).expect("take");
        takes.push(t.elapsed());
        assert_eq!(items.len(), 32, "round {round}");
        for item in items {
            let t = Instant::now();
            assert!(
                store
                    .ack_mail("billing", &child, item.id, "succeeded", 11)
                    .expect("ack")
            );
            acks.push(t.elapsed());
        }
        let t = Instant::now();
        store
            .append_event(
                12,
                Some("billing"),
                "custom",
                &json!({"kind": "x", "bytes": 1}),
            )
            .expect("event");
        commits.push(t.elapsed());
    }
    let done = store.mail_counts("billing").expect("counts").done;
    assert_eq!(done, (rounds * 32) as u64);
    [percentiles(takes), percentiles(acks), percentiles(commits)]
}

#[test]
#[ignore = "a measurement: run by hand"]
fn mail_take_and_ack_with_holders_and_history() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut sqlite = SqliteStore::open(dir.path()).expect("sqlite");
    let pg = PgServer::start_durable();
    let mut postgres = PostgresStore::open(&pg.url("postgres")).expect("postgres");
    for (name, store) in [
        (
            "SQLite (WAL, synchronous=FULL)",
            &mut sqlite as &mut dyn Store,
        ),
        ("PostgreSQL 15 (fsync on, Unix socket)", &mut postgres),
    ] {
        let [take, ack, commit] = mail_cycle(store, 50);
        println!(
            "{name}: take of 32 p50 {:?} p99 {:?}; ack p50 {:?} p99 {:?}; one event commit p50 {:?} p99 {:?}",
            take.0, take.1, ack.0, ack.1, commit.0, commit.1
        );
    }
}
