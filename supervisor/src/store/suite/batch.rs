//! Offers and acknowledgements written many in one transaction: each
//! answered as it would be alone, in order, a refusal touching nothing
//! else.

use super::Fixture;
use super::mail::{holder, recount};
use crate::store::{AckOf, CancelFound, Ending, Landed, MailCounts, Offer, Settle, StoreError};

fn offer(deployment: &str, key: Option<&str>, payload: &str, max_inbox: u64) -> Offer {
    Offer {
        deadline_ms: None,
        deployment: deployment.into(),
        key: key.map(str::to_owned),
        payload: payload.as_bytes().to_vec(),
        max_inbox,
        at_ms: 1_700_000_000_000,
    }
}

pub fn offers_in_one_write_are_each_admitted_on_their_own(f: &dyn Fixture) {
    let mut store = f.open();
    let answers = store
        .enqueue_mail_many(&[
            offer("a", None, "1", 2),
            offer("b", Some("k"), "2", 10),
            offer("a", None, "3", 2),
            // The inbox of `a` is full now: refused, nothing written.
            offer("a", None, "4", 2),
            // A retry under the same key: the earlier id, nothing written.
            offer("b", Some("k"), "2", 10),
            // The same key with another payload: refused.
            offer("b", Some("k"), "other", 10),
        ])
        .unwrap();
    assert_eq!(answers.len(), 6);
    let id = |i: usize| answers[i].as_ref().map(|a| (a.id, a.new)).ok();
    let (first, second, third) = (id(0).unwrap(), id(1).unwrap(), id(2).unwrap());
    assert!(first.1 && second.1 && third.1);
    assert!(
        first.0 < second.0 && second.0 < third.0,
        "ids in offer order"
    );
    assert!(matches!(
        answers[3],
        Err(StoreError::InboxFull { limit: 2, .. })
    ));
    assert_eq!(id(4), Some((second.0, false)));
    assert!(matches!(answers[5], Err(StoreError::KeyReused { .. })));
    let counts = store.mail_counts("a").unwrap();
    assert_eq!((counts.inbox, counts.processing), (2, 0));
    assert_eq!(store.mail_counts("a").unwrap(), recount(f, "a"));
    let accepted = f.count("SELECT count(*) FROM events WHERE kind = 'mail_accepted'");
    assert_eq!(accepted, 3, "one event per accepted item");
}

pub fn acks_in_one_write_each_land_or_not(f: &dyn Fixture) {
    let mut store = f.open();
    let ids: Vec<u64> = (0..4)
        .map(|i| {
            store
                .enqueue_mail_many(&[offer("d", None, &format!("m{i}"), 100)])
                .unwrap()[0]
                .as_ref()
                .unwrap()
                .id
        })
        .collect();
    let (one, two) = (holder(1), holder(2));
    store.take_mail("d", &one, 3, 1).unwrap();
    store.take_mail("d", &two, 1, 1).unwrap();
    let ack = |h: &crate::store::Holder, id: u64| AckOf {
        holder: h.clone(),
        id,
        outcome: "succeeded".into(),
        result: Vec::new(),
    };
    let landed = store
        .ack_mail_many(
            "d",
            &[
                ack(&one, ids[0]),
                // Not its item: another child holds it.
                ack(&one, ids[3]),
                ack(&one, ids[1]),
                // A duplicate.
                ack(&one, ids[0]),
                ack(&two, ids[3]),
            ],
            2,
        )
        .unwrap();
    assert_eq!(landed, [true, false, true, false, true]);
    assert_eq!(
        store.mail_counts("d").unwrap(),
        MailCounts {
            inbox: 0,
            processing: 1,
            working: 1,
            done: 3,
            dead: 0,
            interrupted: 0,
            awaiting: 0,
            questions_open: 0,
            oldest_question_at_ms: None,
        }
    );
    let done = f.count("SELECT count(*) FROM events WHERE kind = 'mail_done'");
    assert_eq!(done, 3, "one event per landed ack");
    // Nothing to do: no transaction, nothing changes.
    assert_eq!(
        store.ack_mail_many("d", &[ack(&two, ids[0])], 3).unwrap(),
        [false]
    );
}

/// An item's result is stored with its outcome, byte for byte (NUL and
/// bytes that are no UTF-8 included), and read back whole; an item not
/// done has an empty result, and an unknown item none.
pub fn a_result_lands_with_its_ack_byte_for_byte(f: &dyn Fixture) {
    let mut store = f.open();
    let offer = |p: &str| offer("d", None, p, 100);
    let accepted = store.enqueue_mail_many(&[offer("a"), offer("b")]).unwrap();
    let ids: Vec<u64> = accepted.iter().map(|a| a.as_ref().unwrap().id).collect();
    let one = holder(1);
    store.take_mail("d", &one, 2, 1).unwrap();
    let result = vec![0x00, 0xff, 0x80, b'\n', 0x00];
    let landed = store
        .ack_mail_many(
            "d",
            &[AckOf {
                holder: one.clone(),
                id: ids[0],
                outcome: "succeeded".into(),
                result: result.clone(),
            }],
            2,
        )
        .unwrap();
    assert_eq!(landed, [true]);
    assert_eq!(store.mail_result(ids[0]).unwrap(), Some(result));
    assert_eq!(store.mail_item(ids[0]).unwrap().unwrap().result_bytes, 5);
    assert_eq!(store.mail_result(ids[1]).unwrap(), Some(Vec::new()));
    assert_eq!(store.mail_item(ids[1]).unwrap().unwrap().result_bytes, 0);
    assert_eq!(store.mail_result(u64::MAX).unwrap(), None);
    assert_eq!(store.mail_result(ids[1] + 1000).unwrap(), None);
}

/// Protocol 3: a delivery counts as an attempt once its handler starts
/// it. An item given back unstarted keeps its attempt and is charged no
/// failure; a started one, crashed, is charged one and comes back as the
/// next attempt; a done item that was never reported started counts its
/// delivery as a start.
pub fn attempts_count_starts_and_an_unstarted_item_is_never_charged(f: &dyn Fixture) {
    let mut store = f.open();
    let id = store
        .enqueue_mail_many(&[offer("d", None, "work", 100)])
        .unwrap()[0]
        .as_ref()
        .unwrap()
        .id;
    let crash = Ending {
        cause: "exited unexpectedly: exit status 3".into(),
        counts: true,
        at_ms: 5,
        hold: false,
    };
    let view = |store: &mut Box<dyn crate::store::Store>| store.mail_item(id).unwrap().unwrap();
    // Delivered, never started, its child crashes: no failure, no start.
    let first = store.take_mail_for("d", &holder(1), 1, 1, false).unwrap();
    assert_eq!(first[0].attempt, 1);
    store.replay_mail("d", &holder(1), &crash, 5).unwrap();
    let item = view(&mut store);
    assert_eq!((item.attempts, item.failures), (0, 0));
    assert_eq!(
        item.history[0].how.as_deref(),
        Some("returned unstarted, not counted: exited unexpectedly: exit status 3")
    );
    // Delivered again as attempt 1, started, crashed: one failure.
    let again = store.take_mail_for("d", &holder(2), 1, 2, false).unwrap();
    assert_eq!(again[0].attempt, 1);
    let start = Settle::Started {
        holder: holder(2),
        id,
    };
    assert_eq!(
        store
            .settle_mail("d", std::slice::from_ref(&start), 3)
            .unwrap(),
        [Landed::Written]
    );
    // A second start report of the same delivery changes nothing.
    assert_eq!(
        store.settle_mail("d", &[start], 3).unwrap(),
        [Landed::Ignored]
    );
    store.replay_mail("d", &holder(2), &crash, 5).unwrap();
    let item = view(&mut store);
    assert_eq!((item.attempts, item.failures), (1, 1));
    // The next delivery is attempt 2; done without a start report, it
    // counts as one.
    let third = store.take_mail_for("d", &holder(3), 1, 6, false).unwrap();
    assert_eq!(third[0].attempt, 2);
    let done = AckOf {
        holder: holder(3),
        id,
        outcome: "succeeded".into(),
        result: b"ok".to_vec(),
    };
    assert_eq!(
        store.settle_mail("d", &[Settle::Done(done)], 7).unwrap(),
        [Landed::Written]
    );
    let item = view(&mut store);
    assert_eq!((item.attempts, item.failures), (2, 1));
    // A protocol-2 holder's take is its start.
    let id2 = store
        .enqueue_mail_many(&[offer("d", None, "two", 100)])
        .unwrap()[0]
        .as_ref()
        .unwrap()
        .id;
    store.take_mail_for("d", &holder(4), 1, 8, true).unwrap();
    store.replay_mail("d", &holder(4), &crash, 5).unwrap();
    let item = store.mail_item(id2).unwrap().unwrap();
    assert_eq!((item.attempts, item.failures), (1, 1));
}

/// A cancel of one item: in the inbox it ends cancelled at once and is
/// never taken; held, it is recorded, and its holder's end (or the next
/// start-up's replay) cancels it instead of returning it; an ended item
/// is left as it was; an unknown one is none.
pub fn a_cancel_ends_a_queued_item_and_outlives_a_held_ones_holder(f: &dyn Fixture) {
    let mut store = f.open();
    let offers: Vec<Offer> = ["a", "b", "c", "d"]
        .iter()
        .map(|p| offer("d", None, p, 100))
        .collect();
    let ids: Vec<u64> = store
        .enqueue_mail_many(&offers)
        .unwrap()
        .iter()
        .map(|a| a.as_ref().unwrap().id)
        .collect();
    // Take the first two; the last two wait in the inbox.
    store.take_mail_for("d", &holder(1), 2, 1, false).unwrap();
    let queued = store
        .cancel_mail(ids[3], "wrong address", "ana", 2)
        .unwrap();
    assert_eq!(
        queued,
        Some(CancelFound::Queued {
            deployment: "d".into()
        })
    );
    let held = store.cancel_mail(ids[0], "too slow", "ana", 3).unwrap();
    assert_eq!(
        held,
        Some(CancelFound::Held {
            deployment: "d".into(),
            holder: holder(1)
        })
    );
    // The holder crashes: the held, cancelled item ends cancelled; its
    // neighbour goes back (unstarted, uncounted).
    let crash = Ending {
        cause: "exited unexpectedly: exit status 3".into(),
        counts: true,
        at_ms: 4,
        hold: false,
    };
    let replayed = store.replay_mail("d", &holder(1), &crash, 5).unwrap();
    assert_eq!((replayed.returned, replayed.cancelled), (1, 1));
    let item = store.mail_item(ids[0]).unwrap().unwrap();
    assert_eq!(item.outcome.as_deref(), Some("cancelled"));
    // Only the returned item and the other queued one are taken again.
    let next = store.take_mail_for("d", &holder(2), 10, 5, false).unwrap();
    let next: Vec<u64> = next.iter().map(|m| m.id).collect();
    assert_eq!(next, [ids[1], ids[2]]);
    // Held when the supervisor died: the next start-up cancels it.
    store
        .cancel_mail(ids[2], "changed my mind", "ana", 6)
        .unwrap();
    store.replay_all_mail(7).unwrap();
    let item = store.mail_item(ids[2]).unwrap().unwrap();
    assert_eq!(item.outcome.as_deref(), Some("cancelled"));
    assert_eq!(
        store.mail_item(ids[1]).unwrap().unwrap().state.as_str(),
        "inbox"
    );
    // An ended item stays as it was.
    assert_eq!(
        store.cancel_mail(ids[0], "again", "ana", 8).unwrap(),
        Some(CancelFound::Ended {
            deployment: "d".into(),
            how: "done: cancelled".into()
        })
    );
    assert_eq!(
        store.cancel_mail(ids[3] + 100, "x", "ana", 9).unwrap(),
        None
    );
    // One mail_done event per cancelled item.
    let done = f.count("SELECT count(*) FROM events WHERE kind = 'mail_done'");
    assert_eq!(done, 3);
}

/// `redeliver = "hold"`: a started item whose holder ends waits as
/// interrupted (whatever ended it, the supervisor's stop and start-up
/// included), an unstarted one goes back; a retry runs it again as its
/// next attempt, a cancel ends it.
pub fn a_held_deployment_keeps_a_started_item_for_an_operator(f: &dyn Fixture) {
    let mut store = f.open();
    let offers: Vec<Offer> = ["a", "b", "c"]
        .iter()
        .map(|p| offer("d", None, p, 100))
        .collect();
    let ids: Vec<u64> = store
        .enqueue_mail_many(&offers)
        .unwrap()
        .iter()
        .map(|a| a.as_ref().unwrap().id)
        .collect();
    store.take_mail_for("d", &holder(1), 3, 1, false).unwrap();
    for id in [ids[0], ids[2]] {
        let start = Settle::Started {
            holder: holder(1),
            id,
        };
        assert_eq!(
            store.settle_mail("d", &[start], 2).unwrap(),
            [Landed::Written]
        );
    }
    let killed = Ending {
        cause: "killed by signal 9 (SIGKILL)".into(),
        counts: true,
        at_ms: 3,
        hold: true,
    };
    let replayed = store.replay_mail("d", &holder(1), &killed, 5).unwrap();
    assert_eq!(replayed.interrupted, [ids[0], ids[2]]);
    assert_eq!(replayed.returned, 1, "the unstarted one");
    let counts = store.mail_counts("d").unwrap();
    assert_eq!((counts.inbox, counts.interrupted), (1, 2), "{counts:?}");
    let item = store.mail_item(ids[0]).unwrap().unwrap();
    assert_eq!(item.state.as_str(), "interrupted");
    assert_eq!((item.attempts, item.failures), (1, 0), "{item:?}");
    assert!(
        item.history[0]
            .how
            .as_deref()
            .is_some_and(|h| h.starts_with("interrupted: held for an operator")),
        "{item:?}"
    );
    // Only the unstarted item is taken again.
    let next = store.take_mail_for("d", &holder(2), 10, 4, false).unwrap();
    assert_eq!(next.iter().map(|m| m.id).collect::<Vec<_>>(), [ids[1]]);
    // A retry puts it back as its next attempt.
    let retried = store.retry_dead_mail("d", Some(ids[0]), "ana", 5).unwrap();
    assert_eq!(retried.ids, [ids[0]]);
    let again = store.take_mail_for("d", &holder(2), 10, 6, false).unwrap();
    assert_eq!((again[0].id, again[0].attempt), (ids[0], 2));
    // A cancel ends the other.
    assert_eq!(
        store.cancel_mail(ids[2], "not needed", "ana", 7).unwrap(),
        Some(CancelFound::Queued {
            deployment: "d".into()
        })
    );
    assert_eq!(store.mail_counts("d").unwrap().interrupted, 0);
    // At start-up, a holding deployment's started items are held too.
    let start = Settle::Started {
        holder: holder(2),
        id: ids[1],
    };
    assert_eq!(
        store.settle_mail("d", &[start], 8).unwrap(),
        [Landed::Written]
    );
    store.replay_all_mail_holding(9, &["d".to_owned()]).unwrap();
    let started = store.mail_item(ids[1]).unwrap().unwrap();
    assert_eq!(started.state.as_str(), "interrupted");
    let taken = store.mail_item(ids[0]).unwrap().unwrap();
    assert_eq!(taken.state.as_str(), "inbox", "unstarted: back");
}
