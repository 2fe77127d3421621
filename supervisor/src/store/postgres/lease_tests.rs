//! Leases and the fence on a throwaway server: acquisition as
//! compare-and-set, renewal in one statement, release and hand-off,
//! takeover only after expiry plus grace by the database's clock, and
//! every kind of fenced write refused with its own kind while the holder's
//! writes go through; a takeover waits for a write already past its check.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ed25519_dalek::SigningKey;
use serde_json::json;
use wfhost_tests::postgres::PgServer;

use super::PostgresStore;
use crate::journal::NewJournalEntry;
use crate::store::fence::{Fence, Held};
use crate::store::{
    AckOf, ChildRecord, ChildrenStore, Ending, EventStore, Holder, JournalStore, MailAdmin,
    MailStore, NewEvent,
};
use wfhost_policy::lease::Claim;

const TTL: i64 = 60_000;
const GRACE: i64 = 1_000;

struct Host {
    store: PostgresStore,
    fence: Arc<Fence>,
    refused: tokio::sync::mpsc::UnboundedReceiver<String>,
}

/// A child of host `h` holding mail.
fn holder(h: &str) -> Holder {
    Holder {
        channel_id: format!("{h:0>32}"),
        pid: 42,
    }
}

fn ack_of(h: &str, id: u64) -> AckOf {
    AckOf {
        holder: holder(h),
        id,
        outcome: "succeeded".into(),
        result: Vec::new(),
    }
}

/// A crash, counted.
fn ending() -> Ending {
    Ending {
        cause: "exited unexpectedly: exit status 3".into(),
        counts: true,
        at_ms: 2,
        hold: false,
    }
}

fn host(url: &str, id: &str) -> Host {
    let (fence, refused) = Fence::new(id);
    let fence = Arc::new(fence);
    let store = PostgresStore::open_fleet(url, &|_| {}, Some(fence.clone())).expect("open");
    Host {
        store,
        fence,
        refused,
    }
}

impl Host {
    /// Takes `d` by `claim` and holds it in the fence.
    fn take(&mut self, d: &str, claim: &Claim) -> Option<i64> {
        let got = self
            .store
            .fleet_acquire(self.fence.host(), d, claim, TTL, GRACE)
            .expect("acquire")?;
        let until = Instant::now() + Duration::from_secs(60);
        self.fence.hold(
            d,
            Held {
                epoch: got.epoch,
                until,
            },
        );
        Some(got.epoch)
    }

    fn refusals(&mut self) -> Vec<String> {
        let mut all = Vec::new();
        while let Ok(d) = self.refused.try_recv() {
            all.push(d);
        }
        all
    }
}

fn event(d: Option<&str>) -> NewEvent {
    NewEvent {
        at_ms: 1,
        deployment: d.map(str::to_owned),
        kind: "custom".into(),
        body: json!({}),
    }
}

fn entry(d: &str) -> NewJournalEntry {
    NewJournalEntry {
        at_ms: 1,
        kind: "spawned".into(),
        deployment: Some(d.into()),
        body: json!({}),
    }
}

#[test]
fn a_lease_is_taken_once_renewed_by_its_holder_and_taken_over_after_expiry_and_grace() {
    let pg = PgServer::start();
    let url = pg.url("postgres");
    let (mut a, mut b) = (host(&url, "a"), host(&url, "b"));
    assert_eq!(a.take("orders", &Claim::New), Some(1));
    assert_eq!(b.take("orders", &Claim::New), None, "only one creates it");
    // b's stale read of the row changes nothing while a holds it.
    let stale = Claim::Expired {
        epoch: 1,
        holder: "a".into(),
    };
    assert_eq!(b.take("orders", &stale), None);

    let held = vec![(
        "orders".to_owned(),
        1,
        Some("{\"state\":\"ready\"}".to_owned()),
    )];
    let renewed = a.store.fleet_renew("a", TTL, &held, false).expect("renew");
    assert_eq!(renewed, vec![("orders".to_owned(), 1)]);
    assert!(
        b.store
            .fleet_renew("b", TTL, &held, false)
            .expect("renew")
            .is_empty()
    );
    let owners = b.store.fleet_owners().expect("owners");
    assert_eq!(owners[0].holder.as_deref(), Some("a"));
    assert_eq!(owners[0].status, Some(json!({"state": "ready"})));
    let view = b.store.fleet_view().expect("view");
    let hosts: Vec<&str> = view.hosts.iter().map(|h| h.host.as_str()).collect();
    assert_eq!(hosts.len(), 2, "both heartbeat: {hosts:?}");

    // Expired, but within the grace: still a's.
    pg.psql(
        "postgres",
        "UPDATE fleet_leases SET expires_at = now() - interval '500 ms'",
    );
    assert_eq!(b.take("orders", &stale), None);
    assert!(
        a.store
            .fleet_renew("a", TTL, &held, false)
            .expect("renew")
            .is_empty(),
        "a cannot renew an expired lease"
    );
    pg.psql(
        "postgres",
        "UPDATE fleet_leases SET expires_at = now() - interval '2 s'",
    );
    assert_eq!(
        b.take("orders", &stale),
        Some(2),
        "taken over at the next epoch"
    );
    let owners = b.store.fleet_owners().expect("owners");
    assert_eq!(
        (owners[0].holder.as_deref(), owners[0].epoch),
        (Some("b"), 2)
    );
}

#[test]
fn a_release_frees_a_lease_at_once_and_a_hand_off_reserves_it() {
    let pg = PgServer::start();
    let url = pg.url("postgres");
    let (mut a, mut b, mut c) = (host(&url, "a"), host(&url, "b"), host(&url, "c"));
    assert_eq!(a.take("d", &Claim::New), Some(1));
    assert!(
        !b.store
            .fleet_release("b", "d", 1, None, TTL)
            .expect("release"),
        "not b's"
    );
    assert!(
        a.store
            .fleet_release("a", "d", 1, None, TTL)
            .expect("release")
    );
    assert_eq!(b.take("d", &Claim::Released { epoch: 1 }), Some(2));
    // Handed to c: a may not take it, c may.
    assert!(
        b.store
            .fleet_release("b", "d", 2, Some("c"), TTL)
            .expect("release")
    );
    assert_eq!(a.take("d", &Claim::Released { epoch: 2 }), None);
    assert_eq!(c.take("d", &Claim::Released { epoch: 2 }), Some(3));
    let owners = c.store.fleet_owners().expect("owners");
    assert_eq!(owners[0].holder.as_deref(), Some("c"));
}

#[test]
fn every_write_of_a_host_that_lost_its_lease_is_fenced_and_the_holders_go_through() {
    let pg = PgServer::start();
    let url = pg.url("postgres");
    let (mut a, mut b) = (host(&url, "a"), host(&url, "b"));
    let key = SigningKey::from_bytes(&[7; 32]);
    let id = a
        .store
        .enqueue_mail("d", None, b"x", 10, 1)
        .expect("anyone enqueues")
        .id;
    assert_eq!(a.take("d", &Claim::New), Some(1));
    let taken = a
        .store
        .take_mail("d", &holder("a"), 10, 1)
        .expect("the holder takes");
    assert_eq!(taken.len(), 1);
    a.store
        .append_journal(&key, entry("d"))
        .expect("the holder journals");

    // b takes the lease over; a still believes in epoch 1.
    pg.psql(
        "postgres",
        "UPDATE fleet_leases SET expires_at = now() - interval '10 s'",
    );
    let stale = Claim::Expired {
        epoch: 1,
        holder: "a".into(),
    };
    assert_eq!(b.take("d", &stale), Some(2));

    let child = ChildRecord {
        deployment: "d".into(),
        pid: 42,
        start_time: 1,
        channel_id: "c".into(),
        spawned_at_ms: 1,
    };
    let fenced = [
        (
            "ack",
            a.store
                .ack_mail("d", &holder("a"), id, "succeeded", 2)
                .map(drop),
        ),
        (
            "ack many",
            a.store.ack_mail_many("d", &[ack_of("a", id)], 2).map(drop),
        ),
        (
            "take",
            a.store.take_mail("d", &holder("a"), 10, 2).map(drop),
        ),
        (
            "replay",
            a.store
                .replay_mail("d", &holder("a"), &ending(), 5)
                .map(drop),
        ),
        (
            "takeover replay",
            a.store.fleet_return_mail(&a.fence, "d", 2).map(drop),
        ),
        (
            "journal",
            a.store.append_journal(&key, entry("d")).map(drop),
        ),
        ("child", a.store.record_child(&child)),
    ];
    for (what, result) in fenced {
        let err = result
            .err()
            .unwrap_or_else(|| panic!("{what} went through"));
        assert!(err.is_fenced(), "{what}: {err}");
        let msg = err.to_string();
        assert!(
            msg.contains("fenced") && msg.contains("no longer holds"),
            "{what}: {msg}"
        );
    }
    assert_eq!(a.refusals().len(), 7);
    // Events: a's for d are left out, the rest of its batch is written.
    let seqs = a
        .store
        .append_events(&[event(Some("d")), event(None)])
        .expect("events");
    assert_eq!(seqs.len(), 1);
    assert_eq!(a.refusals(), vec!["d".to_owned()]);
    // The ack did not count; the new holder replays and finishes it.
    assert_eq!(
        b.store
            .fleet_return_mail(&b.fence, "d", 3)
            .expect("takeover replay"),
        1
    );
    // Returned uncounted, its delivery ended in the history in words.
    let view = b.store.mail_item(id).expect("read").expect("stored");
    assert_eq!(view.failures, 0, "a lost lease is no item's fault");
    let how = view.history[0].how.as_deref().unwrap_or_default();
    assert!(how.contains("lost the lease"), "{how}");
    let again = b.store.take_mail("d", &holder("b"), 10, 3).expect("take");
    assert_eq!(again[0].attempt, 2);
    assert!(
        b.store
            .ack_mail("d", &holder("b"), id, "succeeded", 3)
            .expect("ack")
    );
    let done: Vec<String> = pg
        .psql(
            "postgres",
            "SELECT count(*) FROM events WHERE kind = 'mail_done'",
        )
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(done, vec!["1".to_owned()], "done once, by the holder");
    b.store
        .append_journal(&key, entry("d"))
        .expect("b journals");
    assert_eq!(
        b.store.journal(None).expect("journal").len(),
        2,
        "one chain"
    );
    // Children rows are each host's own.
    b.store.record_child(&child).expect("b records");
    assert!(a.store.children().expect("children").is_empty());
    assert_eq!(b.store.children().expect("children").len(), 1);
    a.store
        .forget_child("d", 42)
        .expect("a forgets only its own");
    assert_eq!(b.store.children().expect("children").len(), 1);
}

#[test]
fn a_takeover_waits_for_a_write_already_past_its_check() {
    let pg = PgServer::start();
    let url = pg.url("postgres");
    let mut a = host(&url, "a");
    assert_eq!(a.take("d", &Claim::New), Some(1));
    pg.psql(
        "postgres",
        "UPDATE fleet_leases SET expires_at = now() + interval '300 ms'",
    );
    let mut writer = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
    let mut tx = writer.transaction().expect("begin");
    tx.execute("SELECT wfhost_fence('d', 'a', 1)", &[])
        .expect("a's write passes its check");
    let taker = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        let mut b = host(&url, "b");
        let stale = Claim::Expired {
            epoch: 1,
            holder: "a".into(),
        };
        let started = Instant::now();
        let got = b.take("d", &stale);
        (got, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(2500));
    tx.commit().expect("a's write commits");
    let (got, waited) = taker.join().expect("taker");
    assert_eq!(got, Some(2));
    assert!(
        waited >= Duration::from_millis(700),
        "the takeover waited for the write: {waited:?}"
    );
}

#[test]
fn a_host_registers_its_key_once_and_another_hosts_key_is_refused() {
    let pg = PgServer::start();
    let url = pg.url("postgres");
    let mut a = host(&url, "a");
    let mut b = host(&url, "b");
    let ka = SigningKey::from_bytes(&[1; 32]).verifying_key();
    let kb = SigningKey::from_bytes(&[2; 32]).verifying_key();
    a.store.fleet_join("a", &ka, 1).expect("join");
    a.store.fleet_join("a", &ka, 1).expect("again");
    b.store.fleet_join("b", &kb, 1).expect("join");
    let keys = a.store.fleet_keys().expect("keys");
    assert_eq!(keys.len(), 2);
    assert_eq!((keys[0].host.as_str(), keys[0].key), ("a", ka));
    let err = b.store.fleet_join("b", &ka, 1).expect_err("a's key");
    assert!(
        err.to_string().contains("registered to host \"a\""),
        "{err}"
    );
    a.store.fleet_leave("a").expect("leave");
    let view = b.store.fleet_view().expect("view");
    assert_eq!(view.hosts.len(), 1);
}

#[test]
fn forwarded_requests_are_answered_once() {
    let pg = PgServer::start();
    let url = pg.url("postgres");
    let mut a = host(&url, "a");
    let id = a
        .store
        .fleet_ask("b", "a", "d", "{\"cmd\":\"kill\"}")
        .expect("ask");
    let asked = a.store.fleet_asked("a").expect("asked");
    assert_eq!(asked.len(), 1);
    assert_eq!((asked[0].id, asked[0].from.as_str()), (id, "b"));
    assert_eq!(a.store.fleet_answer_of(id).expect("answer"), None);
    a.store.fleet_answer(id, "{\"ok\":true}").expect("answer");
    a.store
        .fleet_answer(id, "{\"ok\":false}")
        .expect("a second answer is ignored");
    assert!(a.store.fleet_asked("a").expect("asked").is_empty());
    assert_eq!(
        a.store.fleet_answer_of(id).expect("answer").as_deref(),
        Some("{\"ok\":true}")
    );
}
