//! Writes in one group (`store::handle`'s group commit): nothing of them
//! is seen before the group commits, all of it after, and a write that
//! fails inside the group rolls back only its own part.

use super::Fixture;
use crate::store::{AckOf, Offer, Settle, StoreError};

fn offer(payload: &str, at_ms: u64) -> Offer {
    Offer {
        deadline_ms: None,
        deployment: "g".into(),
        key: None,
        payload: payload.as_bytes().to_vec(),
        max_inbox: 100,
        at_ms,
    }
}

fn accept(store: &mut dyn crate::store::Store, o: Offer) -> Result<u64, StoreError> {
    let mut answers = store.enqueue_mail_many(std::slice::from_ref(&o))?;
    answers.pop().expect("one answer per offer").map(|a| a.id)
}

pub fn a_group_commits_together_and_a_failed_write_rolls_back_alone(f: &dyn Fixture) {
    let mut store = f.open();
    // A second offer at the same instant breaks this index: a database
    // error in the middle of the group.
    f.exec("CREATE UNIQUE INDEX one_per_instant ON mail (enqueued_at_ms)");
    assert!(store.begin_group().unwrap(), "both backends group writes");
    let first = accept(&mut *store, offer("1", 1)).unwrap();
    let refused = accept(&mut *store, offer("2", 1));
    assert!(refused.is_err(), "the unique index refuses: {refused:?}");
    assert!(
        store.group_lost().is_none(),
        "a failed write leaves the group open"
    );
    let third = accept(&mut *store, offer("3", 2)).unwrap();
    let holder = super::mail::holder(7);
    let taken = store.take_mail_for("g", &holder, 1, 3, false).unwrap();
    assert_eq!(taken.iter().map(|m| m.id).collect::<Vec<_>>(), [first]);
    let landed = store
        .settle_mail(
            "g",
            &[Settle::Done(AckOf {
                holder: holder.clone(),
                id: first,
                outcome: "ok".into(),
                result: b"r".to_vec(),
            })],
            4,
        )
        .unwrap();
    assert_eq!(landed.len(), 1);
    assert_eq!(
        f.count("SELECT count(*) FROM mail"),
        0,
        "nothing is seen before the group commits"
    );
    store.end_group().unwrap();
    assert_eq!(f.count("SELECT count(*) FROM mail"), 2);
    assert_eq!(
        f.count("SELECT count(*) FROM mail WHERE state = 'done'"),
        1,
        "the ack landed with its accept"
    );
    assert_eq!(
        f.count(&format!(
            "SELECT count(*) FROM mail WHERE id = {third} AND state = 'inbox'"
        )),
        1
    );
    assert_eq!(
        f.count("SELECT count(*) FROM events WHERE kind = 'mail_accepted'"),
        2,
        "the refused offer wrote no event"
    );
    let counts = store.mail_counts("g").unwrap();
    assert_eq!((counts.inbox, counts.done), (1, 1));
    // Outside a group each write commits on its own again.
    accept(&mut *store, offer("4", 5)).unwrap();
    assert_eq!(f.count("SELECT count(*) FROM mail"), 3);
}

pub fn a_group_that_never_commits_leaves_nothing(f: &dyn Fixture) {
    let mut store = f.open();
    assert!(store.begin_group().unwrap());
    accept(&mut *store, offer("1", 1)).unwrap();
    // The supervisor dies before the commit: its connection goes.
    drop(store);
    assert_eq!(f.count("SELECT count(*) FROM mail"), 0);
    let mut store = f.open();
    assert_eq!(store.mail_counts("g").unwrap().inbox, 0);
    accept(&mut *store, offer("2", 2)).unwrap();
    assert_eq!(f.count("SELECT count(*) FROM mail"), 1);
}
