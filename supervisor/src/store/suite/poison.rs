//! Mail held per child, failures and quarantine on every backend: a child
//! acknowledges and gets back only what it holds; a counted end charges
//! each held item one failure and keeps its last failure, the
//! supervisor's own stop charges nothing; a suspect is taken alone, so a
//! poison item among 32 in flight dies alone after `max_deliveries` and
//! the rest are done once; the history of each delivery; an operator's
//! list, show, retry and purge; and random histories of two children
//! against a model.

use std::collections::{BTreeMap, BTreeSet};

use super::Fixture;
use super::mail::{Rng, holder, ids, one, recount, send, stopped};
use crate::store::{DeadMail, Ending, Holder, MailCounts, MailQuery, MailState, Store, StoreError};

const CRASH: &str = "exited unexpectedly: exit status 3";

/// A crash at `at_ms`: counts against what the child held.
fn crash(at_ms: u64) -> Ending {
    Ending {
        cause: CRASH.into(),
        counts: true,
        at_ms,
        hold: false,
    }
}

fn counts(inbox: u64, processing: u64, done: u64, dead: u64) -> MailCounts {
    MailCounts {
        inbox,
        processing,
        working: processing,
        done,
        dead,
        interrupted: 0,
        awaiting: 0,
        questions_open: 0,
        oldest_question_at_ms: None,
    }
}

/// The item's `(state, attempts, failures)`.
fn where_is(store: &mut dyn Store, id: u64) -> (MailState, u32, u32) {
    let v = store.mail_item(id).unwrap().expect("stored");
    (v.state, v.attempts, v.failures)
}

pub fn a_child_acknowledges_and_gets_back_only_what_it_holds(f: &dyn Fixture) {
    let mut store = f.open();
    let (a, b) = (holder(1), holder(2));
    let sent: Vec<u64> = (0..4)
        .map(|i| send(&mut *store, "d", &i.to_string()))
        .collect();
    assert_eq!(ids(&store.take_mail("d", &a, 2, 10).unwrap()), sent[..2]);
    // Replicas share the inbox: the next child takes what follows.
    assert_eq!(ids(&store.take_mail("d", &b, 2, 11).unwrap()), sent[2..]);
    // An ack from the child that does not hold the item changes nothing.
    assert!(!store.ack_mail("d", &b, sent[0], "ok", 12).unwrap());
    assert!(store.ack_mail("d", &b, sent[2], "ok", 12).unwrap());
    let held = store.mail_item(sent[3]).unwrap().unwrap();
    assert_eq!(held.holder, Some(b.clone()));
    assert_eq!(held.taken_at_ms, Some(11));
    // A's end returns A's mail only; B still holds its own.
    let back = store.replay_mail("d", &a, &crash(13), 5).unwrap();
    assert_eq!((back.returned, back.dead.len()), (2, 0));
    assert_eq!(store.mail_counts("d").unwrap(), counts(2, 1, 1, 0));
    assert_eq!(
        store.replay_mail("d", &a, &crash(14), 5).unwrap().returned,
        0
    );
    assert!(store.ack_mail("d", &b, sent[3], "ok", 15).unwrap());
    // A late ack from A, after its end, is stray.
    assert!(!store.ack_mail("d", &a, sent[0], "ok", 16).unwrap());
    assert_eq!(store.mail_item(sent[3]).unwrap().unwrap().holder, None);
    assert_eq!(recount(f, "d"), counts(2, 0, 2, 0));
}

pub fn a_counted_end_charges_each_held_item_and_keeps_its_last_failure(f: &dyn Fixture) {
    let mut store = f.open();
    let child = one();
    let sent: Vec<u64> = (0..3).map(|_| send(&mut *store, "d", "x")).collect();
    store.take_mail("d", &child, 3, 100).unwrap();
    assert!(
        store
            .ack_mail("d", &child, sent[0], "succeeded", 150)
            .unwrap()
    );
    let back = store.replay_mail("d", &child, &crash(200), 5).unwrap();
    assert_eq!((back.returned, back.dead.len()), (2, 0));
    assert_eq!(where_is(&mut *store, sent[0]), (MailState::Done, 1, 0));
    for &id in &sent[1..] {
        let v = store.mail_item(id).unwrap().unwrap();
        assert_eq!((v.state, v.attempts, v.failures), (MailState::Inbox, 1, 1));
        let last = v.last_failure.expect("kept");
        assert_eq!(
            (last.cause.as_str(), last.pid, last.at_ms),
            (CRASH, child.pid, 200)
        );
        assert_eq!(v.history.len(), 1);
        let h = &v.history[0];
        assert_eq!(
            (h.attempt, h.pid, h.taken_at_ms, h.ended_at_ms),
            (Some(1), Some(child.pid), Some(100), Some(200))
        );
        assert_eq!(h.channel_id.as_deref(), Some(child.channel_id.as_str()));
        assert_eq!(h.how.as_deref(), Some(CRASH));
    }
    let done = store.mail_item(sent[0]).unwrap().unwrap();
    assert_eq!(done.history[0].how.as_deref(), Some("done: succeeded"));
    assert_eq!(done.history[0].ended_at_ms, Some(150));
    assert_eq!(done.outcome.as_deref(), Some("succeeded"));
    assert_eq!(done.last_failure, None);
}

pub fn the_supervisors_own_stop_charges_nothing(f: &dyn Fixture) {
    let mut store = f.open();
    let id = send(&mut *store, "d", "x");
    for attempt in 1..=7 {
        let got = store.take_mail("d", &holder(attempt), 1, 0).unwrap();
        assert_eq!(got[0].attempt, attempt);
        let back = store
            .replay_mail("d", &holder(attempt), &stopped(), 2)
            .unwrap();
        assert_eq!((back.returned, back.dead.len()), (1, 0));
    }
    let v = store.mail_item(id).unwrap().unwrap();
    assert_eq!((v.state, v.attempts, v.failures), (MailState::Inbox, 7, 0));
    assert_eq!(v.last_failure, None);
    let how = v.history[6].how.clone().unwrap_or_default();
    assert!(how.starts_with("returned, not counted: stopped"), "{how}");
    // A supervisor that died: its children's mail comes back, uncounted.
    store.take_mail("d", &one(), 1, 0).unwrap();
    assert_eq!(store.replay_all_mail(50).unwrap(), 1);
    let v = store.mail_item(id).unwrap().unwrap();
    assert_eq!((v.failures, v.holder.clone()), (0, None));
    let last = v.history.last().unwrap();
    assert_eq!(last.ended_at_ms, Some(50));
    assert!(last.how.as_deref().unwrap_or("").contains("not counted"));
}

pub fn a_suspect_is_taken_alone_and_nothing_follows_it(f: &dyn Fixture) {
    let mut store = f.open();
    let a = send(&mut *store, "d", "a");
    let s = send(&mut *store, "d", "s");
    let b = send(&mut *store, "d", "b");
    let c = send(&mut *store, "d", "c");
    // One child takes `a` and is stopped (no charge); another takes `s`
    // and crashes: `s` is a suspect behind a fresh `a`.
    store.take_mail("d", &holder(8), 1, 0).unwrap();
    assert_eq!(ids(&store.take_mail("d", &holder(9), 1, 0).unwrap()), [s]);
    store.replay_mail("d", &holder(9), &crash(1), 5).unwrap();
    store.replay_mail("d", &holder(8), &stopped(), 5).unwrap();
    let (x, y) = (holder(1), holder(2));
    // The take stops before the suspect...
    assert_eq!(ids(&store.take_mail("d", &x, 10, 2).unwrap()), [a]);
    // ...and it is not taken by a child that holds anything.
    assert!(store.take_mail("d", &x, 10, 2).unwrap().is_empty());
    // A child that holds nothing takes it, alone, as attempt 2.
    let alone = store.take_mail("d", &y, 10, 3).unwrap();
    assert_eq!((ids(&alone), alone[0].attempt), (vec![s], 2));
    // While it tries the suspect it takes nothing more.
    assert!(store.take_mail("d", &y, 10, 3).unwrap().is_empty());
    // Others go on behind it.
    assert_eq!(ids(&store.take_mail("d", &x, 10, 4).unwrap()), [b, c]);
    // A crash of the child trying it is attributed to it alone.
    store.replay_mail("d", &y, &crash(5), 5).unwrap();
    assert_eq!(where_is(&mut *store, s), (MailState::Inbox, 2, 2));
    for id in [a, b, c] {
        assert_eq!(where_is(&mut *store, id).2, 0, "{id}");
    }
    // Once it is acknowledged the child takes mail again.
    assert_eq!(ids(&store.take_mail("d", &y, 10, 6).unwrap()), [s]);
    assert!(store.ack_mail("d", &y, s, "ok", 7).unwrap());
    let later = send(&mut *store, "d", "later");
    assert_eq!(ids(&store.take_mail("d", &y, 10, 8).unwrap()), [later]);
}

/// One child's share of the work: it handles what it holds in order,
/// acknowledging everything but `poison`, which crashes it. Returns
/// whether it crashed, and what the crash quarantined.
fn work(
    store: &mut dyn Store,
    deployment: &str,
    child: &Holder,
    held: &mut Vec<u64>,
    poison: &BTreeSet<u64>,
    max: u32,
    at: u64,
) -> Option<Vec<DeadMail>> {
    while let Some(&id) = held.first() {
        if poison.contains(&id) {
            let back = store
                .replay_mail(deployment, child, &crash(at), max)
                .unwrap();
            assert_eq!(back.returned + back.dead.len() as u64, held.len() as u64);
            held.clear();
            return Some(back.dead);
        }
        assert!(
            store.ack_mail(deployment, child, id, "ok", at).unwrap(),
            "{id}"
        );
        held.remove(0);
    }
    None
}

pub fn a_poison_item_among_32_in_flight_dies_alone_and_the_rest_are_done_once(f: &dyn Fixture) {
    let mut store = f.open();
    let poison = send(&mut *store, "d", "poison");
    let others: Vec<u64> = (0..50)
        .map(|i| send(&mut *store, "d", &format!("m{i}")))
        .collect();
    let mut attempts: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    let (mut spawn, mut crashes, mut dead) = (1, 0, Vec::new());
    let mut child = holder(spawn);
    let mut held = Vec::new();
    for round in 0..200u64 {
        let got = store.take_mail("d", &child, 32, round).unwrap();
        if got.is_empty() && held.is_empty() {
            break;
        }
        if round == 0 {
            assert_eq!(got.len(), 32, "a full window: the poison and 31 others");
        }
        for item in &got {
            attempts.entry(item.id).or_default().push(item.attempt);
        }
        held.extend(ids(&got));
        let poisoned = BTreeSet::from([poison]);
        if let Some(d) = work(&mut *store, "d", &child, &mut held, &poisoned, 5, round) {
            crashes += 1;
            dead.extend(d);
            spawn += 1;
            child = holder(spawn);
        }
    }
    assert_eq!(crashes, 5);
    assert_eq!(
        dead,
        [DeadMail {
            id: poison,
            failures: 5,
            cause: CRASH.into(),
            pid: holder(5).pid,
        }]
    );
    assert_eq!(attempts[&poison], [1, 2, 3, 4, 5]);
    for (i, id) in others.iter().enumerate() {
        let want: &[u32] = if i < 31 { &[1, 2] } else { &[1] };
        assert_eq!(attempts[id], want, "item {i} ({id})");
    }
    assert_eq!(store.mail_done_ids("d").unwrap(), others);
    assert_eq!(store.mail_counts("d").unwrap(), counts(0, 0, 50, 1));
    assert_eq!(recount(f, "d"), counts(0, 0, 50, 1));
    let v = store.mail_item(poison).unwrap().unwrap();
    assert_eq!((v.state, v.attempts, v.failures), (MailState::Dead, 5, 5));
    assert!(v.dead_at_ms.is_some() && v.holder.is_none());
    let history: Vec<(Option<u32>, Option<u32>, Option<&str>)> = v
        .history
        .iter()
        .map(|h| (h.attempt, h.pid, h.how.as_deref()))
        .collect();
    let want: Vec<_> = (1..=5)
        .map(|n| (Some(n), Some(holder(n).pid), Some(CRASH)))
        .collect();
    assert_eq!(history, want);
    // An innocent item held during the first crash: charged once, then
    // delivered alone and done.
    let first = store.mail_item(others[0]).unwrap().unwrap();
    assert_eq!((first.attempts, first.failures), (2, 1));
    let hows: Vec<_> = first.history.iter().map(|h| h.how.clone()).collect();
    assert_eq!(hows, [Some(CRASH.to_owned()), Some("done: ok".to_owned())]);
}

pub fn dead_mail_is_retried_from_attempt_one_and_only_dead_mail_is(f: &dyn Fixture) {
    let mut store = f.open();
    let id = send(&mut *store, "d", "p");
    let live = send(&mut *store, "d", "q");
    store.take_mail("d", &holder(1), 1, 10).unwrap();
    let back = store.replay_mail("d", &holder(1), &crash(20), 1).unwrap();
    assert_eq!(
        back.dead.len(),
        1,
        "max_deliveries 1: dead at the first failure"
    );
    assert_eq!(where_is(&mut *store, id), (MailState::Dead, 1, 1));
    // Dead mail is not delivered.
    assert_eq!(
        ids(&store.take_mail("d", &holder(2), 10, 30).unwrap()),
        [live]
    );
    // Refusals change nothing and say why.
    let err = store
        .retry_dead_mail("d", Some(live), "uid 0", 40)
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NotDead {
                state: MailState::Processing,
                ..
            }
        ),
        "{err}"
    );
    let err = store
        .retry_dead_mail("d", Some(9_999), "uid 0", 40)
        .unwrap_err();
    assert!(
        matches!(err, StoreError::UnknownMail { id: 9_999 }),
        "{err}"
    );
    let err = store
        .retry_dead_mail("other", Some(id), "uid 0", 40)
        .unwrap_err();
    assert!(matches!(err, StoreError::UnknownMail { .. }), "{err}");
    assert_eq!(store.mail_counts("d").unwrap(), counts(0, 1, 0, 1));
    // The retry: back at the head of the inbox, from attempt 1.
    let retried = store.retry_dead_mail("d", Some(id), "uid 0", 50).unwrap();
    assert_eq!((retried.ids, retried.left), (vec![id], 0));
    assert_eq!(where_is(&mut *store, id), (MailState::Inbox, 0, 0));
    let again = store.take_mail("d", &holder(3), 10, 60).unwrap();
    assert_eq!((ids(&again), again[0].attempt), (vec![id], 1));
    let v = store.mail_item(id).unwrap().unwrap();
    let hows: Vec<_> = v.history.iter().map(|h| h.how.clone()).collect();
    assert_eq!(hows.len(), 3, "{hows:?}");
    assert_eq!(hows[0].as_deref(), Some(CRASH));
    assert!(
        hows[1]
            .as_deref()
            .unwrap_or("")
            .starts_with("retried by uid 0"),
        "{hows:?}"
    );
    assert_eq!(hows[2], None, "in flight");
    assert_eq!(v.history[1].attempt, None);
    // Retrying a deployment's dead mail: its oldest first, all of them.
    assert!(store.ack_mail("d", &holder(3), id, "ok", 70).unwrap());
    let many: Vec<u64> = (0..3).map(|_| send(&mut *store, "d", "z")).collect();
    store.take_mail("d", &holder(4), 3, 80).unwrap();
    store.replay_mail("d", &holder(4), &crash(90), 1).unwrap();
    let all = store.retry_dead_mail("d", None, "uid 0", 100).unwrap();
    assert_eq!((all.ids, all.left), (many, 0));
    assert!(
        store
            .retry_dead_mail("d", None, "uid 0", 100)
            .unwrap()
            .ids
            .is_empty()
    );
    assert_eq!(store.mail_counts("d").unwrap(), counts(3, 1, 1, 0));
    assert_eq!(recount(f, "d"), counts(3, 1, 1, 0));
}

pub fn purging_deletes_only_dead_mail_older_than_the_cut_with_its_history(f: &dyn Fixture) {
    let mut store = f.open();
    let mut dead = Vec::new();
    for (d, at) in [("d", 100), ("d", 200), ("e", 100)] {
        let id = send(&mut *store, d, "p");
        store.take_mail(d, &one(), 1, at).unwrap();
        store.replay_mail(d, &one(), &crash(at), 1).unwrap();
        dead.push(id);
    }
    let kept = send(&mut *store, "d", "fresh");
    assert_eq!(
        store.purge_dead_mail(Some("d"), 100).unwrap(),
        [],
        "the cut is exclusive"
    );
    assert_eq!(
        store.purge_dead_mail(Some("d"), 150).unwrap(),
        [("d".to_owned(), 1)]
    );
    assert_eq!(store.mail_item(dead[0]).unwrap(), None);
    assert_eq!(
        f.count(&format!(
            "SELECT count(*) FROM mail_history WHERE mail_id = {}",
            dead[0]
        )),
        0
    );
    assert_eq!(
        store.purge_dead_mail(None, u64::MAX).unwrap(),
        [("d".to_owned(), 1), ("e".to_owned(), 1)]
    );
    assert_eq!(store.mail_counts("d").unwrap(), counts(1, 0, 0, 0));
    assert_eq!(store.mail_counts("e").unwrap(), counts(0, 0, 0, 0));
    assert!(store.mail_item(kept).unwrap().is_some());
    assert_eq!(f.count("SELECT count(*) FROM mail_history"), 0);
}

pub fn pruning_done_mail_deletes_its_history_too(f: &dyn Fixture) {
    let mut store = f.open();
    let a = send(&mut *store, "d", "a");
    let b = send(&mut *store, "d", "b");
    store.take_mail("d", &one(), 2, 1).unwrap();
    store.ack_mail("d", &one(), a, "ok", 10).unwrap();
    store.replay_mail("d", &one(), &crash(11), 5).unwrap();
    assert_eq!(f.count("SELECT count(*) FROM mail_history"), 2);
    assert_eq!(store.prune_done_mail(20).unwrap(), 1);
    assert_eq!(
        f.count(&format!(
            "SELECT count(*) FROM mail_history WHERE mail_id = {a}"
        )),
        0
    );
    assert_eq!(store.mail_item(b).unwrap().unwrap().history.len(), 1);
}

pub fn a_list_filters_pages_and_says_how_many_more(f: &dyn Fixture) {
    let mut store = f.open();
    let d: Vec<u64> = (0..5).map(|_| send(&mut *store, "d", "x")).collect();
    let e = send(&mut *store, "e", "yy");
    store.take_mail("d", &one(), 2, 7).unwrap();
    store.replay_mail("d", &one(), &crash(8), 1).unwrap();
    let query = |deployment: Option<&str>, state, after, limit| MailQuery {
        deployment: deployment.map(str::to_owned),
        state,
        after,
        limit,
    };
    let all = store.list_mail(&query(None, None, 0, 100)).unwrap();
    assert_eq!(all.items.len(), 6);
    assert_eq!(all.more, 0);
    let dead = store
        .list_mail(&query(Some("d"), Some(MailState::Dead), 0, 1))
        .unwrap();
    assert_eq!((dead.items.len(), dead.more), (1, 1));
    let first = &dead.items[0];
    assert_eq!(
        (first.id, first.state, first.failures),
        (d[0], MailState::Dead, 1)
    );
    assert_eq!(first.history.len(), 1, "a page carries each item's history");
    assert_eq!(first.payload_bytes, 1);
    let next = store
        .list_mail(&query(Some("d"), Some(MailState::Dead), first.id, 1))
        .unwrap();
    assert_eq!((next.items[0].id, next.more), (d[1], 0));
    let inbox = store
        .list_mail(&query(None, Some(MailState::Inbox), 0, 2))
        .unwrap();
    assert_eq!(
        (
            inbox.items.iter().map(|v| v.id).collect::<Vec<_>>(),
            inbox.more
        ),
        (vec![d[2], d[3]], 2)
    );
    let other = store.list_mail(&query(Some("e"), None, 0, 10)).unwrap();
    assert_eq!(other.items[0].id, e);
    assert_eq!(other.items[0].payload_bytes, 2);
    assert!(
        store
            .list_mail(&query(Some("nobody"), None, 0, 10))
            .unwrap()
            .items
            .is_empty()
    );
    assert_eq!(store.mail_item(u64::MAX).unwrap(), None);
}

pub fn a_payload_reads_back_in_pieces(f: &dyn Fixture) {
    let mut store = f.open();
    let bytes: Vec<u8> = (0..=255u8).cycle().take(1000).collect();
    let id = store.enqueue_mail("d", None, &bytes, 9, 1).unwrap().id;
    let mut read = Vec::new();
    loop {
        let piece = store
            .mail_payload(id, read.len() as u64, 300)
            .unwrap()
            .unwrap();
        if piece.is_empty() {
            break;
        }
        assert!(piece.len() <= 300);
        read.extend(piece);
    }
    assert_eq!(read, bytes);
    assert_eq!(store.mail_payload(id, 5_000, 10).unwrap(), Some(Vec::new()));
    assert_eq!(store.mail_payload(id + 1, 0, 10).unwrap(), None);
}

pub fn random_poison_histories_quarantine_only_the_poison(f: &dyn Fixture) {
    let mut store = f.open();
    let (mut quarantined, mut charged_innocents) = (0, 0);
    for seed in 1..=6u64 {
        // A deployment per seed, so each seed's counts stand alone.
        let d = format!("d{seed}");
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let max = 2 + rng.below(4) as u32;
        let mut poison = BTreeSet::new();
        let mut accepted = Vec::new();
        let mut attempts: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
        let mut dead = BTreeSet::new();
        // Two replicas sharing the inbox; each crash spawns a new one.
        let mut spawned = seed as u32 * 100_000;
        let mut spawn = || {
            spawned += 1;
            holder(spawned)
        };
        let mut children = [spawn(), spawn()];
        let mut held: [Vec<u64>; 2] = Default::default();
        let steps = 400;
        for step in 0..steps * 2 {
            let c = rng.below(2) as usize;
            let draining = step >= steps;
            let roll = if draining {
                40 + rng.below(60)
            } else {
                rng.below(100)
            };
            match roll {
                0..40 => {
                    let bad = rng.below(10) == 0;
                    let id = send(&mut *store, &d, if bad { "poison" } else { "ok" });
                    accepted.push(id);
                    if bad {
                        poison.insert(id);
                    }
                }
                40..70 => {
                    let limit = 1 + rng.below(32) as usize;
                    let got = store.take_mail(&d, &children[c], limit, step).unwrap();
                    for item in &got {
                        attempts.entry(item.id).or_default().push(item.attempt);
                    }
                    held[c].extend(ids(&got));
                }
                _ => {
                    // The child works on its first item: poison crashes it.
                    let Some(&id) = held[c].first() else { continue };
                    if poison.contains(&id) {
                        let back = store
                            .replay_mail(&d, &children[c], &crash(step), max)
                            .unwrap();
                        for m in back.dead {
                            assert!(
                                poison.contains(&m.id),
                                "seed {seed}: innocent {} died",
                                m.id
                            );
                            assert_eq!(m.failures, max);
                            dead.insert(m.id);
                        }
                        held[c].clear();
                        children[c] = spawn();
                    } else {
                        assert!(store.ack_mail(&d, &children[c], id, "ok", step).unwrap());
                        held[c].remove(0);
                    }
                }
            }
        }
        // Whatever is left: each replica takes and works until all is settled.
        for round in 0..10_000u64 {
            let n = store.mail_counts(&d).unwrap();
            if n.inbox + n.processing == 0 {
                break;
            }
            assert!(round < 9_999, "seed {seed}: never settled: {n:?}");
            let c = (round % 2) as usize;
            let got = store.take_mail(&d, &children[c], 32, round).unwrap();
            for item in &got {
                attempts.entry(item.id).or_default().push(item.attempt);
            }
            held[c].extend(ids(&got));
            let at = 10_000 + round;
            if let Some(gone) = work(
                &mut *store,
                &d,
                &children[c],
                &mut held[c],
                &poison,
                max,
                at,
            ) {
                dead.extend(gone.into_iter().map(|m| m.id));
                children[c] = spawn();
            }
        }
        assert_eq!(dead, poison, "seed {seed}: exactly the poison died");
        for id in &poison {
            let want: Vec<u32> = (1..=max).collect();
            assert_eq!(attempts[id], want, "seed {seed}: poison {id}");
        }
        let done: BTreeSet<u64> = store.mail_done_ids(&d).unwrap().into_iter().collect();
        for id in accepted.iter().filter(|id| !poison.contains(id)) {
            assert!(done.contains(id), "seed {seed}: {id} not done");
            let a = &attempts[id];
            assert!(a.len() <= 2, "seed {seed}: {id} delivered {a:?}");
            let failures = where_is(&mut *store, *id).2;
            assert!(failures <= 1, "seed {seed}: {id} failed {failures} times");
            charged_innocents += u32::from(failures == 1);
        }
        quarantined += poison.len();
        let n = store.mail_counts(&d).unwrap();
        assert_eq!(n, recount(f, &d), "seed {seed}");
        assert_eq!((n.dead, n.done), (poison.len() as u64, done.len() as u64));
    }
    assert!(quarantined > 20, "{quarantined} poison items quarantined");
    assert!(
        charged_innocents > 20,
        "{charged_innocents} innocents held by a crashing child"
    );
}
