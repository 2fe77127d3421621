//! Questions a handler asked a person: stored once per (item, key),
//! answered once, outliving the child that asked; an item given back (or
//! whose child died) while it waited is not taken until answered, and is
//! charged nothing.

use super::Fixture;
use super::mail::{holder, send};
use crate::store::{Answering, Asking, Ending, Landed, MailState, Settle, Store};

/// Takes item `id` for `h` and starts it.
fn take_and_start(store: &mut dyn Store, h: u32, id: u64) -> u32 {
    let taken = store.take_mail_for("d", &holder(h), 1, 10, false).unwrap();
    assert_eq!(taken.iter().map(|m| m.id).collect::<Vec<_>>(), [id]);
    let start = Settle::Started {
        holder: holder(h),
        id,
    };
    assert_eq!(
        store.settle_mail("d", &[start], 11).unwrap(),
        [Landed::Written]
    );
    taken[0].attempt
}

fn ask(h: u32, id: u64, key: &str) -> Settle {
    Settle::Asked(Asking {
        holder: holder(h),
        id,
        key: key.into(),
        prompt: br#"{"order":"A-1"}"#.to_vec(),
    })
}

pub fn a_question_is_asked_once_answered_once_and_outlives_its_child(f: &dyn Fixture) {
    let mut store = f.open();
    let id = send(&mut *store, "d", "x");
    assert_eq!(take_and_start(&mut *store, 1, id), 1);
    // Asked: stored once; asked again, still open.
    assert_eq!(
        store
            .settle_mail("d", &[ask(1, id, "approve")], 12)
            .unwrap(),
        [Landed::Opened]
    );
    assert_eq!(
        store
            .settle_mail("d", &[ask(1, id, "approve")], 13)
            .unwrap(),
        [Landed::Written]
    );
    // Only its holder asks.
    assert_eq!(
        store.settle_mail("d", &[ask(2, id, "other")], 13).unwrap(),
        [Landed::Ignored]
    );
    let open = store.open_questions(None, 10).unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(
        (open[0].id, open[0].key.as_str(), open[0].attempt),
        (id, "approve", 1)
    );
    assert_eq!(open[0].prompt, br#"{"order":"A-1"}"#);
    let counts = store.mail_counts("d").unwrap();
    assert_eq!(
        (counts.questions_open, counts.oldest_question_at_ms),
        (1, Some(12))
    );
    assert!(store.mail_item(id).unwrap().unwrap().waiting_for_answer);
    // Unknown items and keys are refused.
    assert_eq!(
        store
            .answer_question(id + 9, "approve", b"true", "{}", 20)
            .unwrap(),
        None
    );
    match store
        .answer_question(id, "nope", b"true", "{}", 20)
        .unwrap()
    {
        Some(Answering::UnknownKey { keys, .. }) => assert_eq!(keys, ["approve"]),
        other => panic!("{other:?}"),
    }
    // Answered: the holder is named, to be sent the answer.
    match store
        .answer_question(id, "approve", b"true", r#"{"label":"ana"}"#, 21)
        .unwrap()
    {
        Some(Answering::New {
            deployment,
            holder: h,
        }) => {
            assert_eq!((deployment.as_str(), h), ("d", Some(holder(1))));
        }
        other => panic!("{other:?}"),
    }
    // The same answer again: nothing changes; another: refused, naming the first.
    match store
        .answer_question(id, "approve", b"true", "{}", 22)
        .unwrap()
    {
        Some(Answering::Same { first, .. }) => {
            assert_eq!((first.at_ms, first.by.as_str()), (21, r#"{"label":"ana"}"#));
        }
        other => panic!("{other:?}"),
    }
    match store
        .answer_question(id, "approve", b"false", "{}", 23)
        .unwrap()
    {
        Some(Answering::Different { first, .. }) => assert_eq!(first.value, b"true"),
        other => panic!("{other:?}"),
    }
    assert!(store.open_questions(Some("d"), 10).unwrap().is_empty());
    // Its child dies; the next attempt asks again and gets the answer.
    let crash = Ending {
        cause: "exited unexpectedly: exit status 3".into(),
        counts: true,
        at_ms: 30,
        hold: false,
    };
    store.replay_mail("d", &holder(1), &crash, 5).unwrap();
    assert_eq!(take_and_start(&mut *store, 2, id), 2);
    assert_eq!(
        store
            .settle_mail("d", &[ask(2, id, "approve")], 31)
            .unwrap(),
        [Landed::Answered(b"true".to_vec())]
    );
    let all = store.questions_of(id).unwrap();
    assert_eq!(all.len(), 1, "never a second question: {all:?}");
    assert_eq!(
        all[0].answer.as_ref().map(|a| a.value.clone()),
        Some(b"true".to_vec())
    );
}

pub fn an_item_waiting_for_an_answer_holds_no_child_and_is_charged_nothing(f: &dyn Fixture) {
    let mut store = f.open();
    let given = send(&mut *store, "d", "given back");
    let crashed = send(&mut *store, "d", "its child crashed");
    let taken = store.take_mail_for("d", &holder(1), 2, 10, false).unwrap();
    assert_eq!(taken.len(), 2);
    for id in [given, crashed] {
        let start = Settle::Started {
            holder: holder(1),
            id,
        };
        store
            .settle_mail("d", &[start, ask(1, id, "approve")], 11)
            .unwrap();
    }
    // A drain: the child gives one back.
    let back = Settle::GivenBack {
        holder: holder(1),
        id: given,
    };
    assert_eq!(
        store
            .settle_mail("d", std::slice::from_ref(&back), 12)
            .unwrap(),
        [Landed::Written]
    );
    assert_eq!(
        store.settle_mail("d", &[back], 12).unwrap(),
        [Landed::Ignored],
        "once"
    );
    // The child crashes holding the other: charged nothing, awaiting too.
    let crash = Ending {
        cause: "exited unexpectedly: exit status 3".into(),
        counts: true,
        at_ms: 13,
        hold: true,
    };
    store.replay_mail("d", &holder(1), &crash, 1).unwrap();
    for id in [given, crashed] {
        let item = store.mail_item(id).unwrap().unwrap();
        assert_eq!(
            (item.state, item.failures),
            (MailState::Inbox, 0),
            "{item:?}"
        );
        assert!(item.waiting_for_answer);
    }
    let counts = store.mail_counts("d").unwrap();
    assert_eq!(
        (counts.inbox, counts.awaiting, counts.questions_open),
        (2, 2, 2)
    );
    // Not taken while the questions are open.
    assert!(
        store
            .take_mail_for("d", &holder(2), 5, 14, false)
            .unwrap()
            .is_empty()
    );
    // Answered: taken at its next attempt; the other still waits.
    let answered = store
        .answer_question(crashed, "approve", b"1", "{}", 15)
        .unwrap();
    assert!(
        matches!(answered, Some(Answering::New { holder: None, .. })),
        "{answered:?}"
    );
    let next = store.take_mail_for("d", &holder(2), 5, 16, false).unwrap();
    assert_eq!(
        next.iter().map(|m| (m.id, m.attempt)).collect::<Vec<_>>(),
        [(crashed, 2)]
    );
    assert_eq!(store.mail_counts("d").unwrap().awaiting, 1);
    // An answer to an ended item is refused.
    store.cancel_mail(given, "not needed", "test", 17).unwrap();
    assert!(matches!(
        store
            .answer_question(given, "approve", b"1", "{}", 18)
            .unwrap(),
        Some(Answering::Ended { .. })
    ));
    assert!(
        store.open_questions(None, 10).unwrap().is_empty(),
        "an ended item asks nothing"
    );
}
