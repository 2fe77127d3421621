//! A person in the loop (docs/protocol.md §4.12), against an in-process
//! fake supervisor: `Mail::ask` and its answer memory, `Mail::progress`,
//! the checks made before sending, give-back on a drain or a lease expiry,
//! a cancel while asking, and protocol 2.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Channel, DEPLOYMENT, WAIT};
use serde_json::{Value, json};
use tokio::net::UnixStream;
use wfhost_child::{AskError, CancelCause, ChildEnv, Mail, MailStream, Options, Outcome, Runtime};
use wfhost_ipc::{
    CancelOrigin, CancelVerdict, Control, DrainBehavior, Event, MailCancelRequested,
    SignedMailCancel, key,
};

/// A runtime speaking `protocol` (2 or 3) under a Welcome of
/// `max_frame_bytes`, and its fake supervisor.
async fn connect(protocol: u32, max_frame_bytes: u32) -> (Runtime, Channel) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let key = key::generate().unwrap();
    let env = ChildEnv {
        control_fd: 3,
        channel_id: wfhost_ipc::new_channel_id().unwrap(),
        protocol,
        supervisor_protocols: 2..=protocol,
        deployment: DEPLOYMENT.into(),
        supervisor_key: key.verifying_key(),
    };
    let channel = env.channel_id.clone();
    let connecting = tokio::spawn(Runtime::connect_with(env, theirs, Options::default()));
    let mut sup = Channel::new(ours, key);
    sup.expect_hello(&channel).await;
    sup.send(common::welcome(
        protocol,
        DEPLOYMENT,
        max_frame_bytes,
        1 << 16,
    ))
    .await;
    let rt = tokio::time::timeout(WAIT, connecting)
        .await
        .expect("connect hung")
        .unwrap()
        .unwrap();
    assert_eq!(rt.protocol(), protocol);
    (rt, sup)
}

/// Protocol 3 with 1 MiB frames.
async fn connect_v3() -> (Runtime, Channel) {
    connect(3, 1 << 20).await
}

/// Delivers item `id` (attempt 1), takes it and expects its `MailStarted`.
async fn take(sup: &mut Channel, inbox: &mut MailStream, id: u64) -> Mail {
    sup.send_mail(id, b"{}".to_vec()).await;
    let mail = tokio::time::timeout(WAIT, inbox.next())
        .await
        .expect("the mail stream hung")
        .expect("an item");
    assert_eq!(mail.id(), id);
    assert_eq!(
        sup.next().await,
        Event::MailStarted {
            id,
            cancellable: true
        }
    );
    mail
}

/// The `Ask` the supervisor reads next.
async fn expect_ask(sup: &mut Channel, id: u64, key: &str, prompt: &[u8]) {
    assert_eq!(
        sup.next().await,
        Event::Ask {
            id,
            key: key.into(),
            prompt: prompt.to_vec()
        }
    );
}

async fn answer(sup: &mut Channel, id: u64, key: &str, value: &[u8]) {
    sup.send(Control::Answer {
        id,
        key: key.into(),
        value: value.to_vec(),
    })
    .await;
}

/// Spawns `mail.ask(key, prompt)` on a task of its own, keeping the item
/// with the task (returned with the answer).
fn spawn_ask(
    mail: Mail,
    key: &'static str,
    prompt: Value,
) -> tokio::task::JoinHandle<(Mail, Result<Value, AskError>)> {
    tokio::spawn(async move {
        let answer = mail.ask(key, &prompt).await;
        (mail, answer)
    })
}

async fn join<T>(task: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(WAIT, task)
        .await
        .expect("task hung")
        .unwrap()
}

fn mail_cancel(id: u64, key: &ed25519_dalek::SigningKey) -> Control {
    Control::CancelMail(SignedMailCancel::sign(
        MailCancelRequested {
            origin: CancelOrigin::Operator,
            deployment: DEPLOYMENT.into(),
            id,
            reason: "test".into(),
            at_ms: 1,
        },
        key,
    ))
}

#[tokio::test]
async fn an_answer_is_returned_remembered_and_shared_by_every_ask_of_its_key() {
    let (rt, mut sup) = connect_v3().await;
    let mut inbox = rt.mail();
    let mail = take(&mut sup, &mut inbox, 1).await;
    let prompt = json!({"amount": 12, "order": "A-1"});
    // Two asks of one key waiting together, and the supervisor: one Ask
    // frame, one Answer, both resolved.
    let (first, second, ()) = tokio::join!(
        mail.ask("approve", &prompt),
        mail.ask("approve", &prompt),
        async {
            expect_ask(&mut sup, 1, "approve", br#"{"amount":12,"order":"A-1"}"#).await;
            // Answers nobody waits for are ignored.
            answer(&mut sup, 99, "approve", b"false").await;
            answer(&mut sup, 1, "other", b"false").await;
            answer(&mut sup, 1, "approve", br#"{"approved":true}"#).await;
        }
    );
    assert_eq!(first.unwrap(), json!({"approved": true}));
    assert_eq!(second.unwrap(), json!({"approved": true}));
    // Remembered: no frame.
    assert_eq!(
        mail.ask("approve", "again?").await.unwrap(),
        json!({"approved": true})
    );
    // A later answer of the same key changes nothing.
    answer(&mut sup, 1, "approve", b"false").await;
    sup.ping(1).await;
    assert_eq!(
        mail.ask("approve", &1).await.unwrap(),
        json!({"approved": true})
    );
    // Another key is another question.
    let ((), size) = tokio::join!(
        async {
            expect_ask(&mut sup, 1, "size", b"null").await;
            answer(&mut sup, 1, "size", b"3").await;
        },
        mail.ask("size", &Value::Null)
    );
    assert_eq!(size.unwrap(), json!(3));
    mail.done(Outcome::Succeeded, b"ok".to_vec()).await.unwrap();
    assert_eq!(
        sup.next().await,
        Event::MailDone {
            id: 1,
            outcome: Outcome::Succeeded,
            result: b"ok".to_vec()
        }
    );
    // The item is done: its answers are forgotten, a late one ignored.
    answer(&mut sup, 1, "size", b"4").await;
    sup.ping(2).await;
}

#[tokio::test]
async fn progress_is_sent_as_compact_json_in_order() {
    let (rt, mut sup) = connect_v3().await;
    let mut inbox = rt.mail();
    let mail = take(&mut sup, &mut inbox, 5).await;
    mail.progress(&json!({"done": 1, "of": 3})).unwrap();
    mail.progress("half way").unwrap();
    let exact = "p".repeat(65_536 - 2);
    mail.progress(&exact).unwrap();
    for data in [
        br#"{"done":1,"of":3}"#.to_vec(),
        br#""half way""#.to_vec(),
        format!("\"{exact}\"").into_bytes(),
    ] {
        assert_eq!(sup.next().await, Event::Progress { id: 5, data });
    }
    let over = "p".repeat(65_536 - 1);
    assert_eq!(
        mail.progress(&over),
        Err(AskError::TooLarge {
            what: "progress data",
            bytes: 65_537
        })
    );
    sup.ping(1).await; // nothing was sent
}

#[tokio::test]
async fn what_the_supervisor_would_take_for_a_violation_is_refused_before_sending() {
    let (rt, mut sup) = connect(3, 1 << 16).await;
    let mut inbox = rt.mail();
    let mail = take(&mut sup, &mut inbox, 1).await;
    assert_eq!(mail.ask("", &1).await, Err(AskError::BadKey(0)));
    let long = "k".repeat(300);
    let err = mail.ask(&long, &1).await.unwrap_err();
    assert_eq!(err, AskError::BadKey(300));
    assert!(err.to_string().contains("1 to 256 bytes"), "{err}");
    let big = "p".repeat(70_000);
    assert!(matches!(
        mail.ask("k", &big).await,
        Err(AskError::TooLarge {
            what: "prompt",
            bytes: 70_002
        })
    ));
    // 64 KiB of prompt fits the rule but not a frame of 64 KiB.
    let fits_rule = "p".repeat(65_536 - 2);
    assert!(matches!(
        mail.ask("k", &fits_rule).await,
        Err(AskError::FrameTooLarge {
            event: "Ask",
            max_frame_bytes: 65_536,
            ..
        })
    ));
    assert!(matches!(
        mail.progress(&fits_rule),
        Err(AskError::FrameTooLarge {
            event: "Progress",
            ..
        })
    ));
    sup.ping(1).await; // nothing was sent
    // The item still works.
    let ((), answered) = tokio::join!(
        async {
            expect_ask(&mut sup, 1, "k", b"1").await;
            answer(&mut sup, 1, "k", b"2").await;
        },
        mail.ask("k", &1)
    );
    assert_eq!(answered.unwrap(), json!(2));
}

#[tokio::test]
async fn a_drain_gives_back_the_items_waiting_for_answers_and_waits_for_the_rest() {
    let (rt, mut sup) = connect_v3().await;
    let mut inbox = rt.mail();
    let one = take(&mut sup, &mut inbox, 1).await;
    let two = take(&mut sup, &mut inbox, 2).await;
    let three = take(&mut sup, &mut inbox, 3).await;
    let one = spawn_ask(one, "approve", json!("one?"));
    expect_ask(&mut sup, 1, "approve", br#""one?""#).await;
    let two = spawn_ask(two, "approve", json!("two?"));
    expect_ask(&mut sup, 2, "approve", br#""two?""#).await;
    let step = rt
        .start_step("mail-3", "work", DrainBehavior::Wait)
        .await
        .unwrap();
    sup.expect_started("mail-3", "work", DrainBehavior::Wait)
        .await;

    sup.send(Control::Drain { budget_ms: 10_000 }).await;
    for id in [1, 2] {
        assert_eq!(
            sup.next().await,
            Event::GiveBack {
                id,
                awaiting_answer: true
            }
        );
    }
    for task in [one, two] {
        let (mail, answer) = join(task).await;
        assert_eq!(answer, Err(AskError::GivenBack(mail.id())));
        assert_eq!(
            mail.token().cause(),
            Some(CancelCause::Drain),
            "work outside steps is told to stop"
        );
        // No longer this child's: asking again, progress and the end send
        // nothing.
        assert_eq!(
            mail.ask("approve", &1).await,
            Err(AskError::GivenBack(mail.id()))
        );
        assert_eq!(mail.progress(&1), Err(AskError::GivenBack(mail.id())));
        mail.done(Outcome::Succeeded, b"late".to_vec())
            .await
            .unwrap();
    }
    // An answer for a given-back item is ignored.
    answer(&mut sup, 1, "approve", b"true").await;
    sup.ping(1).await; // item 3 still holds the drain
    step.finish(Outcome::Succeeded).await.unwrap();
    sup.expect_finished("mail-3", "work", Outcome::Succeeded)
        .await;
    three.done(Outcome::Succeeded, Vec::new()).await.unwrap();
    assert_eq!(
        sup.next().await,
        Event::MailDone {
            id: 3,
            outcome: Outcome::Succeeded,
            result: Vec::new()
        }
    );
    assert_eq!(sup.next().await, Event::Drained);
    sup.ping(2).await;
    // A cancel of a given-back item: not held.
    let key = sup.key().clone();
    sup.send(mail_cancel(1, &key)).await;
    assert!(matches!(
        sup.next().await,
        Event::MailCancelVerdict {
            id: 1,
            verdict: CancelVerdict::Refused(_)
        }
    ));
}

#[tokio::test]
async fn when_every_item_in_hand_waits_for_an_answer_drained_follows_the_give_backs() {
    let (rt, mut sup) = connect_v3().await;
    let mut inbox = rt.mail();
    let one = take(&mut sup, &mut inbox, 1).await;
    let one = spawn_ask(one, "k", json!(1));
    expect_ask(&mut sup, 1, "k", b"1").await;
    sup.send(Control::Drain { budget_ms: 10_000 }).await;
    assert_eq!(
        sup.next().await,
        Event::GiveBack {
            id: 1,
            awaiting_answer: true
        }
    );
    assert_eq!(sup.next().await, Event::Drained);
    let (mail, answer) = join(one).await;
    assert_eq!(answer, Err(AskError::GivenBack(1)));
    drop(mail); // dropping a given-back item sends nothing either
    sup.ping(1).await;
}

#[tokio::test]
async fn an_ask_after_the_drain_began_gives_its_item_back_at_once() {
    let (rt, mut sup) = connect_v3().await;
    let mut inbox = rt.mail();
    let one = take(&mut sup, &mut inbox, 1).await;
    let two = take(&mut sup, &mut inbox, 2).await;
    // Item 1's answer is remembered before the drain.
    let ((), first) = tokio::join!(
        async {
            expect_ask(&mut sup, 1, "k", b"1").await;
            answer(&mut sup, 1, "k", b"true").await;
        },
        one.ask("k", &1)
    );
    assert_eq!(first.unwrap(), json!(true));
    sup.send(Control::Drain { budget_ms: 10_000 }).await;
    tokio::time::timeout(WAIT, rt.draining()).await.unwrap();
    sup.ping(1).await; // two items held: no Drained
    // A remembered answer needs no wait: no give-back.
    assert_eq!(one.ask("k", &1).await.unwrap(), json!(true));
    // A new question would: item 1 goes back, no Ask sent.
    assert_eq!(one.ask("other", &1).await, Err(AskError::GivenBack(1)));
    assert_eq!(
        sup.next().await,
        Event::GiveBack {
            id: 1,
            awaiting_answer: true
        }
    );
    assert_eq!(two.ask("k", &2).await, Err(AskError::GivenBack(2)));
    assert_eq!(
        sup.next().await,
        Event::GiveBack {
            id: 2,
            awaiting_answer: true
        }
    );
    assert_eq!(sup.next().await, Event::Drained, "nothing is held now");
    one.done(Outcome::Succeeded, Vec::new()).await.unwrap();
    two.ack(Outcome::Succeeded).await.unwrap();
    sup.ping(2).await;
}

#[tokio::test]
async fn an_expired_lease_gives_back_like_a_drain() {
    let (rt, mut sup) = connect_v3().await;
    let mut inbox = rt.mail();
    let one = take(&mut sup, &mut inbox, 1).await;
    let one = spawn_ask(one, "k", json!(1));
    expect_ask(&mut sup, 1, "k", b"1").await;
    sup.send(Control::Lease { valid_ms: 50 }).await;
    assert_eq!(
        sup.next().await,
        Event::GiveBack {
            id: 1,
            awaiting_answer: true
        }
    );
    assert_eq!(sup.next().await, Event::Drained);
    let (mail, answer) = join(one).await;
    assert_eq!(answer, Err(AskError::GivenBack(1)));
    assert_eq!(mail.token().cause(), Some(CancelCause::LeaseExpired));
}

#[tokio::test]
async fn a_cancel_while_asking_fails_the_ask_as_cancelled_and_the_item_ends_cancelled() {
    let (rt, mut sup) = connect_v3().await;
    let mut inbox = rt.mail();
    let one = take(&mut sup, &mut inbox, 1).await;
    let one = spawn_ask(one, "approve", json!({"amount": 1}));
    expect_ask(&mut sup, 1, "approve", br#"{"amount":1}"#).await;
    let key = sup.key().clone();
    sup.send(mail_cancel(1, &key)).await;
    assert_eq!(
        sup.next().await,
        Event::MailCancelVerdict {
            id: 1,
            verdict: CancelVerdict::Acknowledged
        }
    );
    let (mail, answer) = join(one).await;
    assert_eq!(
        answer,
        Err(AskError::Cancelled {
            id: 1,
            cause: CancelCause::Cancel
        })
    );
    // Cancelled already: a new ask fails at once, nothing sent.
    assert!(matches!(
        mail.ask("again", &1).await,
        Err(AskError::Cancelled { .. })
    ));
    // Not waiting any more: a drain does not give it back, it holds it.
    sup.send(Control::Drain { budget_ms: 10_000 }).await;
    sup.ping(1).await;
    mail.ack(Outcome::Cancelled).await.unwrap();
    assert_eq!(
        sup.next().await,
        Event::MailDone {
            id: 1,
            outcome: Outcome::Cancelled,
            result: Vec::new()
        }
    );
    assert_eq!(sup.next().await, Event::Drained);
}

#[tokio::test]
async fn an_ask_given_up_by_its_handler_does_not_count_as_waiting() {
    let (rt, mut sup) = connect_v3().await;
    let mut inbox = rt.mail();
    let mail = take(&mut sup, &mut inbox, 1).await;
    let gave_up = tokio::time::timeout(Duration::from_millis(50), mail.ask("k", &1)).await;
    assert!(gave_up.is_err(), "no answer yet");
    expect_ask(&mut sup, 1, "k", b"1").await;
    sup.send(Control::Drain { budget_ms: 10_000 }).await;
    sup.ping(1).await; // held, not given back
    // The answer is remembered for the item all the same.
    answer(&mut sup, 1, "k", b"7").await;
    sup.ping(2).await;
    assert_eq!(mail.ask("k", &1).await.unwrap(), json!(7));
    mail.ack(Outcome::Succeeded).await.unwrap();
    assert!(matches!(sup.next().await, Event::MailDone { id: 1, .. }));
    assert_eq!(sup.next().await, Event::Drained);
}

#[tokio::test]
async fn a_shutdown_while_asking_fails_the_ask() {
    let (rt, mut sup) = connect_v3().await;
    let mut inbox = rt.mail();
    let mail = Arc::new(take(&mut sup, &mut inbox, 1).await);
    let asking = {
        let mail = mail.clone();
        tokio::spawn(async move { mail.ask("k", &1).await })
    };
    expect_ask(&mut sup, 1, "k", b"1").await;
    sup.send(Control::Shutdown).await;
    assert_eq!(
        join(asking).await,
        Err(AskError::Cancelled {
            id: 1,
            cause: CancelCause::Shutdown
        })
    );
}

#[tokio::test]
async fn under_protocol_2_ask_and_progress_fail_at_once_naming_it() {
    let (rt, mut sup) = connect(2, 1 << 20).await;
    let mut inbox = rt.mail();
    sup.send_mail(1, b"{}".to_vec()).await;
    let mail = tokio::time::timeout(WAIT, inbox.next())
        .await
        .unwrap()
        .unwrap();
    let err = mail.ask("k", &1).await.unwrap_err();
    assert_eq!(
        err,
        AskError::Unsupported {
            what: "ask",
            protocol: 2
        }
    );
    assert!(err.to_string().contains("protocol 2"), "{err}");
    let err = mail.progress(&1).unwrap_err();
    assert!(
        err.to_string().starts_with("progress needs protocol 3")
            && err.to_string().contains("protocol 2"),
        "{err}"
    );
    sup.ping(1).await; // nothing was sent
    mail.ack(Outcome::Succeeded).await.unwrap();
    sup.expect_ack(1, Outcome::Succeeded).await;
}
