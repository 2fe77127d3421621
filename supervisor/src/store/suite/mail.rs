//! Mail on every backend: FIFO takes, acks counted once, replay in
//! order, idempotency keys, the inbox limit, retention, and a random
//! history of two children sharing a deployment, checked against a model.
//! (What holders, failures and quarantine add is in `poison`.)

use std::collections::{BTreeSet, HashMap};

use super::Fixture;
use crate::store::{
    Accepted, Ending, Holder, Landed, MailCounts, MailItem, Settle, Store, StoreError,
};

const MAX: u64 = 1_000;

/// The `n`th child, as a holder.
pub fn holder(n: u32) -> Holder {
    Holder {
        channel_id: format!("{n:032x}"),
        pid: 1000 + n,
    }
}

/// The one child of the tests that need only one.
pub fn one() -> Holder {
    holder(1)
}

/// A child's end during the supervisor's stop: counts nothing.
pub fn stopped() -> Ending {
    Ending {
        cause: "stopped: killed by signal 15 (SIGTERM)".into(),
        counts: false,
        at_ms: 1,
        hold: false,
    }
}

pub fn send(store: &mut dyn Store, deployment: &str, payload: &str) -> u64 {
    store
        .enqueue_mail(deployment, None, payload.as_bytes(), MAX, 1_700_000_000_000)
        .unwrap()
        .id
}

pub fn ids(items: &[MailItem]) -> Vec<u64> {
    items.iter().map(|m| m.id).collect()
}

/// Counts of mail a protocol-2 holder took (each take a start).
fn counts(inbox: u64, processing: u64, done: u64) -> MailCounts {
    MailCounts {
        inbox,
        processing,
        working: processing,
        done,
        dead: 0,
        interrupted: 0,
        awaiting: 0,
        questions_open: 0,
        oldest_question_at_ms: None,
    }
}

/// Counts recomputed from the rows, to check the kept counts.
pub fn recount(f: &dyn Fixture, deployment: &str) -> MailCounts {
    let n = |state: &str| -> u64 {
        let sql = format!(
            "SELECT count(*) FROM mail WHERE deployment = '{deployment}' AND state = '{state}'"
        );
        f.count(&sql) as u64
    };
    let working = f.count(&format!(
        "SELECT count(*) FROM mail WHERE deployment = '{deployment}' AND state = 'processing' \
         AND started"
    )) as u64;
    MailCounts {
        dead: n("dead"),
        working,
        ..counts(n("inbox"), n("processing"), n("done"))
    }
}

pub fn acceptance_and_completion_write_their_events_with_the_mail(f: &dyn Fixture) {
    let mut store = f.open();
    let id = send(&mut *store, "d", "x");
    store.take_mail("d", &one(), 1, 0).unwrap();
    assert!(store.ack_mail("d", &one(), id, "succeeded", 7).unwrap());
    assert!(
        !store.ack_mail("d", &one(), id, "succeeded", 8).unwrap(),
        "a duplicate ack writes no event"
    );
    let events = store.events_after(0, 10).unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["mail_accepted", "mail_done"]);
    // Each body is its fact's, to the byte (PostgreSQL writes the
    // accept's in SQL).
    let accepted = wfhost_policy::Fact::MailAccepted { id };
    assert_eq!(events[0].body, accepted.body());
    assert_eq!(events[0].deployment.as_deref(), Some("d"));
    let text = accepted.body().to_string().replace('\'', "''");
    assert_eq!(
        f.count(&format!(
            "SELECT count(*) FROM events WHERE body = '{text}'"
        )),
        1,
        "the body is stored as {text}"
    );
    assert_eq!(events[1].body["id"], id);
    assert_eq!(events[1].body["outcome"], "succeeded");
    assert_eq!(events[1].deployment.as_deref(), Some("d"));
}

pub fn mail_is_taken_in_fifo_order_and_moves_to_processing(f: &dyn Fixture) {
    let mut store = f.open();
    let a = send(&mut *store, "d", "a");
    let b = send(&mut *store, "d", "b");
    let c = send(&mut *store, "d", "c");
    assert!(a < b && b < c);
    assert_eq!(store.mail_counts("d").unwrap(), counts(3, 0, 0));

    let first = store.take_mail("d", &one(), 2, 0).unwrap();
    assert_eq!(
        first,
        [
            MailItem {
                id: a,
                payload: b"a".to_vec(),
                attempt: 1,
                deadline_ms: None,
                first_taken_at_ms: 0,
            },
            MailItem {
                id: b,
                payload: b"b".to_vec(),
                attempt: 1,
                deadline_ms: None,
                first_taken_at_ms: 0,
            }
        ]
    );
    assert_eq!(store.mail_counts("d").unwrap(), counts(1, 2, 0));
    // Processing items are not handed out again.
    assert_eq!(ids(&store.take_mail("d", &one(), 10, 0).unwrap()), [c]);
    assert!(store.take_mail("d", &one(), 10, 0).unwrap().is_empty());
    assert!(store.take_mail("d", &one(), 0, 0).unwrap().is_empty());
    assert_eq!(store.mail_counts("d").unwrap(), counts(0, 3, 0));
    assert_eq!(recount(f, "d"), counts(0, 3, 0));
}

pub fn an_unsent_item_goes_back_to_the_head_with_its_take_undone(f: &dyn Fixture) {
    let mut store = f.open();
    let a = send(&mut *store, "d", "a");
    let b = send(&mut *store, "d", "b");
    // A protocol-2 holder's take is a start: undone with the take.
    assert_eq!(ids(&store.take_mail("d", &one(), 2, 10).unwrap()), [a, b]);
    let unsent = |id| Settle::Unsent { holder: one(), id };
    let landed = store
        .settle_mail("d", &[unsent(b), unsent(a), unsent(a)], 20)
        .unwrap();
    assert_eq!(landed, [Landed::Written, Landed::Written, Landed::Ignored]);
    assert_eq!(store.mail_counts("d").unwrap(), counts(2, 0, 0));
    // Another holder's report changes nothing.
    let taken = store.take_mail("d", &holder(2), 2, 30).unwrap();
    assert_eq!(ids(&taken), [a, b], "back at the head, in order");
    assert!(
        taken.iter().all(|m| m.attempt == 1),
        "not counted: {taken:?}"
    );
    let other = store.settle_mail("d", &[unsent(a)], 40).unwrap();
    assert_eq!(other, [Landed::Ignored]);
    let view = store.mail_item(a).unwrap().unwrap();
    assert_eq!(view.attempts, 1, "{view:?}");
    assert_eq!(
        view.history.first().and_then(|h| h.how.as_deref()),
        Some(crate::store::held::UNSENT),
        "{view:?}"
    );
    assert_eq!(recount(f, "d"), counts(0, 2, 0));
}

pub fn an_ack_counts_once_and_a_duplicate_or_unknown_ack_changes_nothing(f: &dyn Fixture) {
    let mut store = f.open();
    let a = send(&mut *store, "d", "a");
    let b = send(&mut *store, "d", "b");
    // Not yet sent to a child: nothing to acknowledge.
    assert!(!store.ack_mail("d", &one(), a, "ok", 5).unwrap());
    store.take_mail("d", &one(), 2, 0).unwrap();
    // The wrong deployment cannot acknowledge it.
    assert!(!store.ack_mail("other", &one(), a, "ok", 5).unwrap());
    assert!(store.ack_mail("d", &one(), a, "ok", 5).unwrap());
    assert!(!store.ack_mail("d", &one(), a, "again", 6).unwrap());
    assert!(!store.ack_mail("d", &one(), 999, "ok", 5).unwrap());
    assert!(!store.ack_mail("d", &one(), u64::MAX, "ok", 5).unwrap());
    assert_eq!(store.mail_counts("d").unwrap(), counts(0, 1, 1));
    assert_eq!(store.mail_done_ids("d").unwrap(), [a]);
    // The first outcome stays; the payload is dropped once done.
    let row = |column: &str| f.count(&format!("SELECT {column} FROM mail WHERE id = {a}"));
    assert_eq!(row("count(*)"), 1);
    assert_eq!(row("CASE WHEN outcome = 'ok' THEN 1 ELSE 0 END"), 1);
    assert_eq!(row("done_at_ms"), 5);
    assert_eq!(row("length(payload)"), 0);
    // A done item is never replayed.
    assert_eq!(
        store
            .replay_mail("d", &one(), &stopped(), 5)
            .unwrap()
            .returned,
        1
    );
    assert_eq!(ids(&store.take_mail("d", &one(), 10, 0).unwrap()), [b]);
}

pub fn replay_puts_processing_back_at_the_head_in_original_order(f: &dyn Fixture) {
    let mut store = f.open();
    let sent: Vec<u64> = (0..5)
        .map(|i| send(&mut *store, "d", &format!("m{i}")))
        .collect();
    assert_eq!(ids(&store.take_mail("d", &one(), 3, 0).unwrap()), sent[..3]);
    // One of the three is acknowledged before the child dies.
    assert!(store.ack_mail("d", &one(), sent[1], "ok", 1).unwrap());
    // Newer mail arrives meanwhile.
    let later = send(&mut *store, "d", "later");
    assert_eq!(
        store
            .replay_mail("d", &one(), &stopped(), 5)
            .unwrap()
            .returned,
        2
    );
    assert_eq!(
        store
            .replay_mail("d", &one(), &stopped(), 5)
            .unwrap()
            .returned,
        0
    );
    assert_eq!(store.mail_counts("d").unwrap(), counts(5, 0, 1));
    let again = store.take_mail("d", &one(), 10, 0).unwrap();
    assert_eq!(ids(&again), [sent[0], sent[2], sent[3], sent[4], later]);
    assert_eq!(again[1].payload, b"m2");
}

pub fn replay_after_a_partial_retake_keeps_order(f: &dyn Fixture) {
    let mut store = f.open();
    let sent: Vec<u64> = (0..6).map(|_| send(&mut *store, "d", "x")).collect();
    store.take_mail("d", &one(), 4, 0).unwrap();
    store.replay_mail("d", &one(), &stopped(), 5).unwrap();
    // The new child takes two, dies, and the rest are still behind.
    assert_eq!(ids(&store.take_mail("d", &one(), 2, 0).unwrap()), sent[..2]);
    store.replay_mail("d", &one(), &stopped(), 5).unwrap();
    assert_eq!(ids(&store.take_mail("d", &one(), 10, 0).unwrap()), sent);
}

pub fn an_idempotency_key_accepts_once_per_deployment(f: &dyn Fixture) {
    let mut store = f.open();
    let first = store.enqueue_mail("d", Some("k1"), b"a", 2, 1).unwrap();
    assert!(first.new);
    store.enqueue_mail("d", None, b"b", 2, 1).unwrap();
    // The inbox is full now, and a retry still gets its answer.
    let again = Accepted {
        id: first.id,
        new: false,
    };
    assert_eq!(
        store.enqueue_mail("d", Some("k1"), b"a", 2, 1).unwrap(),
        again
    );
    // Whatever state the item is in.
    store.take_mail("d", &one(), 1, 0).unwrap();
    assert!(store.ack_mail("d", &one(), first.id, "ok", 2).unwrap());
    assert_eq!(
        store.enqueue_mail("d", Some("k1"), b"a", 2, 1).unwrap(),
        again
    );
    // The same key with another payload is a mistake, named.
    let err = store
        .enqueue_mail("d", Some("k1"), b"other", 2, 1)
        .unwrap_err();
    let StoreError::KeyReused { id, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(*id, first.id);
    let msg = err.to_string();
    assert!(
        msg.contains("\"k1\"")
            && msg.contains("different payload")
            && msg.contains("nothing was accepted"),
        "{msg}"
    );
    // Keys belong to one deployment.
    let other = store.enqueue_mail("e", Some("k1"), b"a", 2, 1).unwrap();
    assert!(other.new && other.id != first.id);
    let count = |sql: &str| f.count(sql);
    assert_eq!(count("SELECT count(*) FROM mail"), 3);
    assert_eq!(
        count("SELECT count(*) FROM events WHERE kind = 'mail_accepted'"),
        3
    );
}

pub fn pruning_deletes_only_done_mail_older_than_the_cut_and_frees_its_key(f: &dyn Fixture) {
    let mut store = f.open();
    let old = store.enqueue_mail("d", Some("k"), b"a", 9, 1).unwrap().id;
    let recent = send(&mut *store, "d", "b");
    let waiting = send(&mut *store, "d", "c");
    store.take_mail("d", &one(), 2, 0).unwrap();
    assert!(store.ack_mail("d", &one(), old, "ok", 100).unwrap());
    assert!(store.ack_mail("d", &one(), recent, "ok", 200).unwrap());
    assert_eq!(
        store.prune_done_mail(100).unwrap(),
        0,
        "the cut is exclusive"
    );
    assert_eq!(store.prune_done_mail(150).unwrap(), 1);
    assert_eq!(store.mail_done_ids("d").unwrap(), [recent]);
    assert_eq!(store.mail_counts("d").unwrap(), counts(1, 0, 1));
    // Inbox and processing are never pruned, however old.
    assert_eq!(store.prune_done_mail(u64::MAX).unwrap(), 1);
    assert_eq!(ids(&store.take_mail("d", &one(), 9, 0).unwrap()), [waiting]);
    // The pruned item's key may be used again.
    assert!(store.enqueue_mail("d", Some("k"), b"z", 9, 1).unwrap().new);
}

pub fn a_full_inbox_refuses_and_writes_nothing(f: &dyn Fixture) {
    let mut store = f.open();
    let a = store.enqueue_mail("d", None, b"a", 2, 1).unwrap().id;
    store.enqueue_mail("d", None, b"b", 2, 1).unwrap();
    store.take_mail("d", &one(), 1, 0).unwrap();
    // Processing counts against the limit too.
    let err = store.enqueue_mail("d", None, b"c", 2, 1).unwrap_err();
    let StoreError::InboxFull { deployment, limit } = &err else {
        panic!("{err}");
    };
    assert_eq!((deployment.as_str(), *limit), ("d", 2));
    let msg = err.to_string();
    assert!(
        msg.contains("deployment d is busy") && msg.contains("2 mail items"),
        "{msg}"
    );
    assert!(
        msg.contains("retry later") && msg.contains("raise max_inbox"),
        "{msg}"
    );
    assert_eq!(f.count("SELECT count(*) FROM mail"), 2);
    assert_eq!(store.mail_counts("d").unwrap(), counts(1, 1, 0));
    // Other deployments have their own limit.
    store.enqueue_mail("e", None, b"e", 2, 1).unwrap();
    // Done mail does not count: acking frees a slot.
    assert!(store.ack_mail("d", &one(), a, "ok", 2).unwrap());
    store.enqueue_mail("d", None, b"c", 2, 1).unwrap();
    // A zero limit accepts nothing.
    assert!(matches!(
        store.enqueue_mail("z", None, b"", 0, 1),
        Err(StoreError::InboxFull { limit: 0, .. })
    ));
    assert_eq!(store.mail_counts("z").unwrap(), MailCounts::default());
}

pub fn ids_increase_across_deployments_and_are_never_reused(f: &dyn Fixture) {
    let mut store = f.open();
    let mut all = Vec::new();
    for i in 0..9 {
        all.push(send(&mut *store, ["a", "b", "c"][i % 3], "x"));
    }
    // Even when the newest rows are pruned (a retention job).
    f.exec("DELETE FROM mail");
    assert_eq!(store.mail_counts("a").unwrap(), MailCounts::default());
    drop(store);
    let mut store = f.open();
    all.push(send(&mut *store, "b", "x"));
    assert!(all.windows(2).all(|w| w[0] < w[1]), "{all:?}");
}

pub fn replay_all_covers_every_deployment(f: &dyn Fixture) {
    let mut store = f.open();
    let a1 = send(&mut *store, "a", "1");
    let b1 = send(&mut *store, "b", "1");
    let a2 = send(&mut *store, "a", "2");
    let b2 = send(&mut *store, "b", "2");
    store.take_mail("a", &one(), 10, 0).unwrap();
    store.take_mail("b", &one(), 1, 0).unwrap();
    assert_eq!(store.replay_all_mail(0).unwrap(), 3);
    assert_eq!(store.replay_all_mail(0).unwrap(), 0);
    assert_eq!(store.mail_counts("a").unwrap(), counts(2, 0, 0));
    assert_eq!(store.mail_counts("b").unwrap(), counts(2, 0, 0));
    assert_eq!(ids(&store.take_mail("a", &one(), 10, 0).unwrap()), [a1, a2]);
    assert_eq!(ids(&store.take_mail("b", &one(), 10, 0).unwrap()), [b1, b2]);
    // Replaying one deployment leaves the other's in processing.
    assert_eq!(
        store
            .replay_mail("a", &one(), &stopped(), 5)
            .unwrap()
            .returned,
        2
    );
    assert_eq!(store.mail_counts("b").unwrap(), counts(0, 2, 0));
}

pub fn mail_in_flight_survives_a_supervisor_crash(f: &dyn Fixture) {
    let mut store = f.open();
    let sent: Vec<u64> = (0..4).map(|_| send(&mut *store, "d", "x")).collect();
    store.take_mail("d", &one(), 3, 0).unwrap();
    assert!(store.ack_mail("d", &one(), sent[0], "ok", 1).unwrap());
    drop(store);
    let mut store = f.open();
    assert_eq!(store.mail_counts("d").unwrap(), counts(1, 2, 1));
    assert_eq!(store.replay_all_mail(0).unwrap(), 2);
    assert_eq!(
        ids(&store.take_mail("d", &one(), 10, 0).unwrap()),
        sent[1..]
    );
    assert_eq!(store.mail_done_ids("d").unwrap(), [sent[0]]);
}

/// A tiny deterministic generator (xorshift64*), so the random test
/// replays exactly from its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// What the store should hold for one deployment.
#[derive(Default)]
struct Model {
    inbox: BTreeSet<u64>,
    /// What each of two children holds.
    processing: [Vec<u64>; 2],
    done: BTreeSet<u64>,
    accepted: Vec<u64>,
}

impl Model {
    fn held(&self) -> usize {
        self.processing.iter().map(Vec::len).sum()
    }

    fn counts(&self) -> MailCounts {
        counts(
            self.inbox.len() as u64,
            self.held() as u64,
            self.done.len() as u64,
        )
    }

    /// Child `c`'s mail back in the inbox, which stays ordered by id.
    fn replay(&mut self, c: usize) -> u64 {
        let n = self.processing[c].len() as u64;
        self.inbox.extend(self.processing[c].drain(..));
        n
    }

    fn replay_all(&mut self) -> u64 {
        self.replay(0) + self.replay(1)
    }
}

pub fn random_histories_end_with_every_accepted_id_done_exactly_once(f: &dyn Fixture) {
    const DEPLOYMENTS: [&str; 3] = ["a", "b", "c"];
    // How often the interesting cases happened, so the test cannot
    // pass by never reaching them.
    let (mut full, mut replayed, mut stray_acks, mut foreign_acks, mut restarts) = (0, 0, 0, 0, 0);
    for seed in 1..=10u64 {
        // One store for every seed: each seed has deployments of its own.
        let names: Vec<String> = DEPLOYMENTS.iter().map(|d| format!("{d}{seed}")).collect();
        let mut store = f.open();
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut models: HashMap<&str, Model> = HashMap::new();
        // Two children per deployment share its inbox (replicas).
        let children = [holder(1), holder(2)];
        let mut last_id = 0;
        for step in 0..400 {
            let d = names[rng.below(3) as usize].as_str();
            let c = rng.below(2) as usize;
            let child = &children[c];
            let ctx = format!("seed {seed} step {step} deployment {d} child {c}");
            let m = models.entry(d).or_default();
            match rng.below(100) {
                0..40 => {
                    let max_inbox = 1 + rng.below(12);
                    let pending = (m.inbox.len() + m.held()) as u64;
                    match store.enqueue_mail(
                        d,
                        None,
                        &step.to_string().into_bytes(),
                        max_inbox,
                        step,
                    ) {
                        Ok(Accepted { id, new }) => {
                            assert!(new && pending < max_inbox, "{ctx}");
                            assert!(id > last_id, "{ctx}");
                            last_id = id;
                            m.inbox.insert(id);
                            m.accepted.push(id);
                        }
                        Err(StoreError::InboxFull { .. }) => {
                            assert!(pending >= max_inbox, "{ctx}");
                            full += 1;
                        }
                        Err(e) => panic!("{ctx}: {e}"),
                    }
                }
                40..65 => {
                    let limit = rng.below(5) as usize;
                    let got = store.take_mail(d, child, limit, step).unwrap();
                    let want: Vec<u64> = m.inbox.iter().copied().take(limit).collect();
                    assert_eq!(ids(&got), want, "{ctx}");
                    for id in &want {
                        m.inbox.remove(id);
                    }
                    m.processing[c].extend(want);
                }
                65..90 => {
                    // Mostly a real ack; sometimes a duplicate, a stray
                    // one, or one for the other child's mail.
                    let other = &m.processing[1 - c];
                    let id = match (m.processing[c].len(), rng.below(5)) {
                        (_, 0) if !other.is_empty() => {
                            foreign_acks += 1;
                            other[0]
                        }
                        (0, _) | (_, 1) => m.accepted.first().copied().unwrap_or(1),
                        (n, _) => m.processing[c][rng.below(n as u64) as usize],
                    };
                    let expect = m.processing[c].contains(&id);
                    let landed = store.ack_mail(d, child, id, "ok", step).unwrap();
                    assert_eq!(landed, expect, "{ctx}: ack of {id}");
                    if !expect {
                        stray_acks += 1;
                    } else {
                        m.processing[c].retain(|&p| p != id);
                        assert!(m.done.insert(id), "{ctx}");
                    }
                }
                90..96 => {
                    let want = m.replay(c);
                    replayed += want;
                    let got = store.replay_mail(d, child, &stopped(), 5).unwrap();
                    assert_eq!(got.returned, want, "{ctx}");
                    assert!(got.dead.is_empty(), "{ctx}");
                }
                96..98 => {
                    let want: u64 = models.values_mut().map(Model::replay_all).sum();
                    replayed += want;
                    assert_eq!(store.replay_all_mail(step).unwrap(), want, "{ctx}");
                }
                _ => {
                    // The supervisor dies and restarts.
                    drop(store);
                    store = f.open();
                    restarts += 1;
                    let want: u64 = models.values_mut().map(Model::replay_all).sum();
                    replayed += want;
                    assert_eq!(store.replay_all_mail(step).unwrap(), want, "{ctx}");
                }
            }
            for (d, m) in &models {
                assert_eq!(store.mail_counts(d).unwrap(), m.counts(), "{ctx}: {d}");
            }
        }
        // Drain everything: replay, take all, ack all.
        for d in names.iter().map(String::as_str) {
            for child in &children {
                store.replay_mail(d, child, &stopped(), 5).unwrap();
            }
            for item in store.take_mail(d, &one(), usize::MAX, 0).unwrap() {
                assert!(store.ack_mail(d, &one(), item.id, "ok", 0).unwrap());
            }
            let m = models.remove(d).unwrap_or_default();
            assert_eq!(
                store.mail_done_ids(d).unwrap(),
                m.accepted,
                "seed {seed} {d}"
            );
            let n = m.accepted.len() as u64;
            assert_eq!(store.mail_counts(d).unwrap(), counts(0, 0, n));
            assert_eq!(recount(f, d), counts(0, 0, n));
        }
    }
    assert!(full > 20, "the inbox limit was hit {full} times");
    assert!(replayed > 50, "{replayed} items replayed");
    assert!(stray_acks > 50, "{stray_acks} stray acks");
    assert!(
        foreign_acks > 20,
        "{foreign_acks} acks of the other child's mail"
    );
    assert!(restarts > 5, "{restarts} restarts");
}
