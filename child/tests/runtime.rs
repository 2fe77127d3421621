//! The runtime library against an in-process fake supervisor on a
//! socketpair: handshake, pings during long steps, drain (and `Drained`
//! waiting for held mail), the cancel cascade, refused cancels, mail,
//! shutdown and EOF.

mod common;

use std::convert::Infallible;
use std::time::Duration;

use common::{Channel, DEPLOYMENT, WAIT, cancel};
use ed25519_dalek::SigningKey;
use tokio::net::UnixStream;
use tokio::sync::oneshot;
use wfhost_child::{
    CancelCause, ChildEnv, CloseReason, ConnectError, DrainBehavior, Mail, MailStream, Outcome,
    Runtime, RuntimeError, StepError,
};
use wfhost_ipc::{
    CancelOrigin, CancelVerdict, Control, DEFAULT_MAX_FRAME_BYTES, Event, MailCancelRequested,
    SignedMailCancel, key,
};

/// A Welcome of protocol 2 for `deployment` with a 64 KiB mail limit.
fn welcome(deployment: &str, max_frame_bytes: u32) -> Control {
    common::welcome(V2, deployment, max_frame_bytes, 1 << 16)
}

/// Protocol 2: most tests here hold the runtime to it (the supervisor of
/// version 2); those of version 3 say so.
const V2: u32 = 2;
const V3: u32 = 3;

/// Connects a runtime to a fake supervisor of version 2 that answers Hello
/// with `answer` (or closes its sending side when `None`).
async fn connect_answering(answer: Option<Control>) -> (Result<Runtime, ConnectError>, Channel) {
    connect_speaking(V2, wfhost_child::Options::default(), answer).await
}

/// Connects a runtime with `options` to a fake supervisor that speaks 2 to
/// `newest` and answers Hello with `answer` (or closes its sending side
/// when `None`).
async fn connect_speaking(
    newest: u32,
    options: wfhost_child::Options,
    answer: Option<Control>,
) -> (Result<Runtime, ConnectError>, Channel) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let key = key::generate().unwrap();
    let env = ChildEnv {
        control_fd: 3,
        channel_id: wfhost_ipc::new_channel_id().unwrap(),
        protocol: newest,
        supervisor_protocols: V2..=newest,
        deployment: DEPLOYMENT.into(),
        supervisor_key: key.verifying_key(),
    };
    let channel = env.channel_id.clone();
    let connecting = tokio::spawn(Runtime::connect_with(env, theirs, options));
    let mut sup = Channel::new(ours, key);
    sup.expect_hello(&channel).await;
    match answer {
        Some(control) => sup.send(control).await,
        None => sup.close_writer().await,
    }
    let rt = tokio::time::timeout(WAIT, connecting)
        .await
        .expect("connect hung")
        .unwrap();
    (rt, sup)
}

async fn connect() -> (Runtime, Channel) {
    let (rt, sup) = connect_answering(Some(welcome(DEPLOYMENT, DEFAULT_MAX_FRAME_BYTES))).await;
    (rt.unwrap(), sup)
}

/// A cancel with the operator as its origin.
fn operator_cancel(deployment: &str, run: Option<&str>, key: &SigningKey) -> Control {
    cancel(CancelOrigin::Operator, deployment, run, key)
}

/// Sends mail `id` with its id as the payload.
async fn mail(sup: &mut Channel, id: u64) {
    sup.send_mail(id, id.to_be_bytes()).await;
}

/// Spawns a step whose body waits for `release` (or runs until cancelled)
/// and expects its `StepStarted`.
async fn spawn_step(
    rt: &Runtime,
    sup: &mut Channel,
    run: &'static str,
    name: &'static str,
    drain: DrainBehavior,
) -> (
    oneshot::Sender<u32>,
    tokio::task::JoinHandle<Result<u32, StepError<Infallible>>>,
) {
    let (tx, rx) = oneshot::channel::<u32>();
    let rt = rt.clone();
    let task = tokio::spawn(async move {
        rt.step(run, name, drain, |_token| async move {
            Ok(rx.await.unwrap_or(0))
        })
        .await
    });
    sup.expect_started(run, name, drain).await;
    (tx, task)
}

async fn join<T>(task: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(WAIT, task)
        .await
        .expect("task hung")
        .unwrap()
}

#[tokio::test]
async fn handshake_then_ready_custom_and_recycle_requests() {
    let (rt, mut sup) = connect().await;
    assert_eq!(rt.deployment(), DEPLOYMENT);
    assert_eq!(rt.welcome().limits.max_mail_bytes, 1 << 16);
    rt.ready().await.unwrap();
    assert_eq!(sup.next().await, Event::Ready);
    rt.custom("progress", vec![1, 2, 3]).await.unwrap();
    assert_eq!(
        sup.next().await,
        Event::Custom {
            kind: "progress".into(),
            bytes: vec![1, 2, 3]
        }
    );
    rt.request_recycle("cache bloated").await.unwrap();
    assert_eq!(
        sup.next().await,
        Event::RecycleRequest {
            reason: "cache bloated".into()
        }
    );
}

#[tokio::test]
async fn handshake_refuses_anything_but_a_fitting_welcome() {
    let (rt, _sup) = connect_answering(Some(Control::Ping { nonce: 1 })).await;
    assert!(
        matches!(&rt, Err(e @ ConnectError::Handshake(_)) if e.to_string().contains("unexpected Ping while waiting for Welcome"))
    );
    let (rt, _sup) = connect_answering(Some(welcome("payroll", DEFAULT_MAX_FRAME_BYTES))).await;
    assert!(
        matches!(&rt, Err(e @ ConnectError::WrongDeployment { .. }) if e.to_string().contains("payroll"))
    );
    let (rt, _sup) = connect_answering(None).await;
    assert!(matches!(&rt, Err(e @ ConnectError::Handshake(_)) if e.to_string().contains("closed")));
}

#[tokio::test]
async fn pings_are_answered_while_a_long_step_runs() {
    let (rt, mut sup) = connect().await;
    let (release, task) = spawn_step(&rt, &mut sup, "r1", "slow", DrainBehavior::Wait).await;
    for nonce in 0..20 {
        sup.ping(nonce).await;
    }
    release.send(5).unwrap();
    assert_eq!(join(task).await.unwrap(), 5);
    sup.expect_finished("r1", "slow", Outcome::Succeeded).await;
}

#[tokio::test]
async fn failing_steps_report_failed() {
    let (rt, mut sup) = connect().await;
    let result = rt
        .step("r1", "parse", DrainBehavior::Cancel, |_| async {
            Err::<(), _>("bad input")
        })
        .await;
    assert!(matches!(result, Err(StepError::Failed("bad input"))));
    sup.expect_started("r1", "parse", DrainBehavior::Cancel)
        .await;
    sup.expect_finished("r1", "parse", Outcome::Failed("bad input".into()))
        .await;
}

#[tokio::test]
async fn drain_cancels_cancel_steps_lets_wait_steps_finish_and_reports_drained_once() {
    let (rt, mut sup) = connect().await;
    let (_keep, fetch) = spawn_step(&rt, &mut sup, "r1", "fetch", DrainBehavior::Cancel).await;
    let (approve_go, approve) =
        spawn_step(&rt, &mut sup, "r2", "approve", DrainBehavior::Wait).await;
    assert!(!rt.is_draining());

    sup.send(Control::Drain { budget_ms: 1000 }).await;
    assert!(matches!(
        join(fetch).await,
        Err(StepError::Cancelled(CancelCause::Drain))
    ));
    sup.expect_finished("r1", "fetch", Outcome::Cancelled).await;
    assert_eq!(sup.next().await, Event::Drained);
    tokio::time::timeout(WAIT, rt.draining()).await.unwrap();
    assert!(rt.is_draining());

    // New cancel-behaviour work does not start during a drain.
    let late = rt
        .step("r3", "fetch", DrainBehavior::Cancel, |_| async {
            Ok::<_, Infallible>(())
        })
        .await;
    assert!(matches!(
        late,
        Err(StepError::Cancelled(CancelCause::Drain))
    ));
    sup.expect_started("r3", "fetch", DrainBehavior::Cancel)
        .await;
    sup.expect_finished("r3", "fetch", Outcome::Cancelled).await;

    sup.send(Control::Drain { budget_ms: 1000 }).await;
    sup.ping(1).await; // no second Drained
    approve_go.send(1).unwrap();
    assert_eq!(join(approve).await.unwrap(), 1);
    sup.expect_finished("r2", "approve", Outcome::Succeeded)
        .await;
}

#[tokio::test]
async fn drain_with_only_wait_steps_is_drained_at_once() {
    let (rt, mut sup) = connect().await;
    let (go, task) = spawn_step(&rt, &mut sup, "r1", "approve", DrainBehavior::Wait).await;
    sup.send(Control::Drain { budget_ms: 1000 }).await;
    assert_eq!(sup.next().await, Event::Drained);
    go.send(2).unwrap();
    assert_eq!(join(task).await.unwrap(), 2);
}

#[tokio::test]
async fn a_verified_cancel_cascades_over_every_step_of_its_run_only() {
    let (rt, mut sup) = connect().await;
    let (_a, approve) = spawn_step(&rt, &mut sup, "r1", "approve", DrainBehavior::Wait).await;
    let (_b, fetch) = spawn_step(&rt, &mut sup, "r1", "fetch", DrainBehavior::Cancel).await;
    let (other_go, other) = spawn_step(&rt, &mut sup, "r2", "fetch", DrainBehavior::Cancel).await;

    let cancel = operator_cancel(DEPLOYMENT, Some("r1"), sup.key());
    sup.send(cancel).await;
    assert!(matches!(
        join(approve).await,
        Err(StepError::Cancelled(CancelCause::Cancel))
    ));
    assert!(matches!(
        join(fetch).await,
        Err(StepError::Cancelled(CancelCause::Cancel))
    ));
    let mut seen = vec![sup.next().await, sup.next().await, sup.next().await];
    assert_eq!(
        seen.pop(),
        Some(Event::RunTerminal {
            run: "r1".into(),
            outcome: Outcome::Cancelled
        }),
        "the run ends after its last step"
    );
    assert!(seen.iter().all(
        |e| matches!(e, Event::StepFinished { run, outcome: Outcome::Cancelled, .. } if run == "r1")
    ));

    // The application's own report of r1 is not sent twice.
    rt.run_terminal("r1", Outcome::Succeeded).await.unwrap();
    sup.ping(3).await;

    other_go.send(4).unwrap();
    assert_eq!(join(other).await.unwrap(), 4);
    sup.expect_finished("r2", "fetch", Outcome::Succeeded).await;
    rt.run_terminal("r2", Outcome::Succeeded).await.unwrap();
    assert_eq!(
        sup.next().await,
        Event::RunTerminal {
            run: "r2".into(),
            outcome: Outcome::Succeeded
        }
    );
}

#[tokio::test]
async fn refused_cancels_change_nothing() {
    let (rt, mut sup) = connect().await;
    let (go, task) = spawn_step(&rt, &mut sup, "r1", "fetch", DrainBehavior::Cancel).await;
    let stranger = key::generate().unwrap();
    let refused = [
        operator_cancel(DEPLOYMENT, Some("r1"), &stranger),
        operator_cancel("payroll", Some("r1"), sup.key()),
        operator_cancel(DEPLOYMENT, Some("r9"), sup.key()),
        operator_cancel("payroll", None, sup.key()),
    ];
    for (nonce, cancel) in refused.into_iter().enumerate() {
        sup.send(cancel).await;
        sup.ping(nonce as u64).await;
    }
    assert!(!task.is_finished());
    go.send(8).unwrap();
    assert_eq!(join(task).await.unwrap(), 8);
    sup.expect_finished("r1", "fetch", Outcome::Succeeded).await;
}

#[tokio::test]
async fn mail_is_delivered_once_acked_and_reacked_on_redelivery() {
    let (rt, mut sup) = connect().await;
    let mut inbox = rt.mail();
    sup.send_mail(1, b"a").await;
    sup.send_mail(1, b"a").await;
    sup.send_mail(2, b"b").await;
    let first = tokio::time::timeout(WAIT, inbox.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((first.id(), first.payload()), (1, &b"a"[..]));
    let second = tokio::time::timeout(WAIT, inbox.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.id(), 2, "the in-flight duplicate of 1 is skipped");
    first.ack(Outcome::Succeeded).await.unwrap();
    sup.expect_ack(1, Outcome::Succeeded).await;
    // Redelivery of acknowledged mail is answered without the application.
    sup.send_mail(1, b"a").await;
    sup.expect_ack(1, Outcome::Succeeded).await;
    second.ack(Outcome::Failed("no".into())).await.unwrap();
    sup.expect_ack(2, Outcome::Failed("no".into())).await;
}

#[tokio::test]
async fn shutdown_closes_the_runtime_cancels_steps_and_ends_the_mail_stream() {
    let (rt, mut sup) = connect().await;
    let (_go, task) = spawn_step(&rt, &mut sup, "r1", "approve", DrainBehavior::Wait).await;
    let mut inbox = rt.mail();
    let waiting = tokio::spawn(async move { inbox.next().await.map(|m| m.id()) });
    sup.send(Control::Shutdown).await;
    assert_eq!(
        tokio::time::timeout(WAIT, rt.closed()).await.unwrap(),
        CloseReason::Shutdown
    );
    assert!(matches!(
        join(task).await,
        Err(StepError::Cancelled(CancelCause::Shutdown))
    ));
    assert_eq!(join(waiting).await, None);
    // Pings are still answered until the supervisor hangs up.
    sup.expect_finished("r1", "approve", Outcome::Cancelled)
        .await;
    sup.ping(5).await;
}

#[tokio::test]
async fn eof_closes_the_runtime_and_later_sends_fail() {
    let (rt, sup) = connect().await;
    drop(sup);
    assert_eq!(
        tokio::time::timeout(WAIT, rt.closed()).await.unwrap(),
        CloseReason::Disconnected
    );
    assert_eq!(rt.close_reason(), Some(CloseReason::Disconnected));
    let mut inbox = rt.mail();
    assert!(inbox.next().await.is_none());
    // Writing to a peer that is gone fails (possibly after one buffered write).
    let mut failed = false;
    for _ in 0..10 {
        if let Err(RuntimeError::Closed(_)) = rt.custom("x", vec![0; 64]).await {
            failed = true;
            break;
        }
    }
    assert!(failed, "sends to a vanished supervisor must fail");
}

#[tokio::test]
async fn an_event_over_the_supervisors_frame_limit_is_refused_not_sent() {
    let (rt, mut sup) = connect_answering(Some(welcome(DEPLOYMENT, 1024))).await;
    let rt = rt.unwrap();
    let err = rt.custom("blob", vec![0; 4096]).await.unwrap_err();
    assert!(
        matches!(
            err,
            RuntimeError::TooLarge {
                event: "Custom",
                ..
            }
        ),
        "{err}"
    );
    rt.custom("small", vec![0; 16]).await.unwrap();
    assert_eq!(
        sup.next().await,
        Event::Custom {
            kind: "small".into(),
            bytes: vec![0; 16]
        }
    );
}

async fn next_mail(inbox: &mut MailStream) -> Option<Mail> {
    tokio::time::timeout(WAIT, inbox.next())
        .await
        .expect("the mail stream hung")
}

#[tokio::test]
async fn held_mail_delays_drained_until_it_is_acknowledged() {
    let (rt, mut sup) = connect().await;
    let mut inbox = rt.mail();
    mail(&mut sup, 1).await;
    let held = next_mail(&mut inbox).await.unwrap();
    sup.send(Control::Drain { budget_ms: 1000 }).await;
    tokio::time::timeout(WAIT, rt.draining()).await.unwrap();
    // No step in flight, but the application holds mail 1: not drained.
    sup.ping(1).await;
    held.ack(Outcome::Cancelled).await.unwrap();
    assert_eq!(
        sup.next().await,
        Event::MailAck {
            id: 1,
            outcome: Outcome::Cancelled
        },
        "the ack comes before Drained"
    );
    assert_eq!(sup.next().await, Event::Drained);
    assert!(
        next_mail(&mut inbox).await.is_none(),
        "drain ends the stream"
    );
    sup.ping(2).await; // Drained is sent once
}

#[tokio::test]
async fn held_mail_delays_drained_until_it_is_dropped() {
    let (rt, mut sup) = connect().await;
    let mut inbox = rt.mail();
    mail(&mut sup, 1).await;
    let held = next_mail(&mut inbox).await.unwrap();
    sup.send(Control::Drain { budget_ms: 1000 }).await;
    sup.ping(1).await;
    drop(held);
    assert_eq!(sup.next().await, Event::Drained);
    sup.ping(2).await; // no MailAck: the mail goes back to the inbox
}

#[tokio::test]
async fn drained_waits_for_both_a_cancel_step_and_held_mail() {
    let (rt, mut sup) = connect().await;
    let mut inbox = rt.mail();
    mail(&mut sup, 1).await;
    let held = next_mail(&mut inbox).await.unwrap();
    let step = rt
        .start_step("mail-1", "fetch", DrainBehavior::Cancel)
        .await
        .unwrap();
    sup.expect_started("mail-1", "fetch", DrainBehavior::Cancel)
        .await;
    sup.send(Control::Drain { budget_ms: 1000 }).await;
    let cause = tokio::time::timeout(WAIT, step.token().cancelled())
        .await
        .unwrap();
    assert_eq!(cause, CancelCause::Drain);
    // The mail is settled first: the cancel step still holds the drain.
    held.ack(Outcome::Failed("gave up".into())).await.unwrap();
    sup.expect_ack(1, Outcome::Failed("gave up".into())).await;
    sup.ping(1).await;
    step.finish(Outcome::Cancelled).await.unwrap();
    sup.expect_finished("mail-1", "fetch", Outcome::Cancelled)
        .await;
    assert_eq!(sup.next().await, Event::Drained);
}

#[tokio::test]
async fn queued_mail_is_not_handed_out_after_drain_and_acked_mail_is_reacked() {
    let (rt, mut sup) = connect().await;
    let mut inbox = rt.mail();
    mail(&mut sup, 1).await;
    let first = next_mail(&mut inbox).await.unwrap();
    first.ack(Outcome::Succeeded).await.unwrap();
    sup.expect_ack(1, Outcome::Succeeded).await;
    // 2 and 3 are queued, never taken: nothing held, so drained at once.
    mail(&mut sup, 2).await;
    mail(&mut sup, 3).await;
    sup.ping(1).await; // both reached the queue
    sup.send(Control::Drain { budget_ms: 1000 }).await;
    assert_eq!(sup.next().await, Event::Drained);
    assert!(next_mail(&mut inbox).await.is_none());
    // Mail during the drain is not taken; settled mail is acked again.
    mail(&mut sup, 4).await;
    mail(&mut sup, 1).await;
    sup.expect_ack(1, Outcome::Succeeded).await;
    assert!(next_mail(&mut inbox).await.is_none());
    sup.ping(2).await;
}

#[tokio::test]
async fn a_waiting_next_returns_none_when_a_drain_starts() {
    let (rt, mut sup) = connect().await;
    let mut inbox = rt.mail();
    let waiting = tokio::spawn(async move { inbox.next().await.map(|m| m.id()) });
    sup.ping(1).await;
    sup.send(Control::Drain { budget_ms: 1000 }).await;
    assert_eq!(sup.next().await, Event::Drained);
    assert_eq!(join(waiting).await, None);
}

#[tokio::test]
async fn an_expired_lease_drains_like_a_drain() {
    let (rt, mut sup) = connect().await;
    let (_keep, fetch) = spawn_step(&rt, &mut sup, "r1", "fetch", DrainBehavior::Cancel).await;
    let (approve_go, approve) =
        spawn_step(&rt, &mut sup, "r2", "approve", DrainBehavior::Wait).await;
    let sent = std::time::Instant::now();
    sup.send(Control::Lease { valid_ms: 200 }).await;
    assert!(matches!(
        join(fetch).await,
        Err(StepError::Cancelled(CancelCause::LeaseExpired))
    ));
    let waited = sent.elapsed();
    assert!(
        waited >= Duration::from_millis(190),
        "cancelled {waited:?} after the lease, before it ran out"
    );
    sup.expect_finished("r1", "fetch", Outcome::Cancelled).await;
    assert_eq!(sup.next().await, Event::Drained);
    assert!(rt.is_draining());
    assert!(
        next_mail(&mut rt.mail()).await.is_none(),
        "no mail after the lease ran out"
    );
    // A lease after the expiry brings nothing back.
    sup.send(Control::Lease { valid_ms: 60_000 }).await;
    mail(&mut sup, 5).await;
    assert!(next_mail(&mut rt.mail()).await.is_none());
    approve_go.send(3).unwrap();
    assert_eq!(join(approve).await.unwrap(), 3);
    sup.expect_finished("r2", "approve", Outcome::Succeeded)
        .await;
    sup.ping(1).await; // mail 5 was not acknowledged
}

#[tokio::test]
async fn a_renewed_lease_keeps_the_child_working() {
    let (rt, mut sup) = connect().await;
    let (go, fetch) = spawn_step(&rt, &mut sup, "r1", "fetch", DrainBehavior::Cancel).await;
    for _ in 0..8 {
        sup.send(Control::Lease { valid_ms: 150 }).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!rt.is_draining(), "renewed in time, 8 times");
    go.send(4).unwrap();
    assert_eq!(join(fetch).await.unwrap(), 4);
    sup.expect_finished("r1", "fetch", Outcome::Succeeded).await;
    // A lease too long to count in never runs out.
    sup.send(Control::Lease { valid_ms: u64::MAX }).await;
    sup.ping(2).await;
    assert!(!rt.is_draining());
}

// Protocol 3 (docs/protocol.md §4.12): items start, end with a result, and
// can be cancelled one by one.

/// A runtime of protocol 3 and its fake supervisor (64 KiB frames).
async fn connect_v3() -> (Runtime, Channel) {
    let answer = common::welcome(V3, DEPLOYMENT, 1 << 16, 1 << 16);
    let (rt, sup) = connect_speaking(V3, wfhost_child::Options::default(), Some(answer)).await;
    let rt = rt.unwrap();
    assert_eq!(rt.protocol(), V3);
    (rt, sup)
}

/// A cancel of mail item `id` in `deployment`, signed with `key`.
fn mail_cancel(deployment: &str, id: u64, key: &SigningKey) -> Control {
    Control::CancelMail(SignedMailCancel::sign(
        MailCancelRequested {
            origin: CancelOrigin::Deadline,
            deployment: deployment.into(),
            id,
            reason: "test".into(),
            at_ms: 1,
        },
        key,
    ))
}

/// Expects `MailStarted` of `id` next.
async fn expect_mail_started(sup: &mut Channel, id: u64, cancellable: bool) {
    assert_eq!(sup.next().await, Event::MailStarted { id, cancellable });
}

/// Expects the verdict of a cancel of `id` next.
async fn expect_verdict(sup: &mut Channel, id: u64, verdict: CancelVerdict) {
    assert_eq!(sup.next().await, Event::MailCancelVerdict { id, verdict });
}

#[tokio::test]
async fn the_newest_shared_version_is_spoken_unless_the_options_hold_the_child_to_2() {
    let (rt, _sup) = connect_v3().await;
    assert_eq!(rt.protocol(), 3);
    let held = wfhost_child::Options::default().speaking_at_most(V2);
    let (rt, _sup) = connect_speaking(V3, held, Some(welcome(DEPLOYMENT, 1 << 16))).await;
    assert_eq!(rt.unwrap().protocol(), V2, "Hello and Welcome said 2");
    let (rt, _sup) = connect_speaking(
        V3,
        wfhost_child::Options::default(),
        Some(welcome(DEPLOYMENT, 1 << 16)),
    )
    .await;
    assert!(
        matches!(&rt, Err(e @ ConnectError::Handshake(_)) if e.to_string().contains("protocol 2")),
        "a Welcome of 2 to a Hello of 3 is refused: {:?}",
        rt.err()
    );
}

#[tokio::test]
async fn a_cancel_of_a_running_item_fires_its_token_and_cancels_its_run_alone() {
    let (rt, mut sup) = connect_v3().await;
    let mut inbox = rt.mail();
    mail(&mut sup, 1).await;
    mail(&mut sup, 2).await;
    let one = next_mail(&mut inbox).await.unwrap();
    expect_mail_started(&mut sup, 1, true).await;
    let two = next_mail(&mut inbox).await.unwrap();
    expect_mail_started(&mut sup, 2, true).await;
    let (_go1, step1) = spawn_step(&rt, &mut sup, "mail-1", "approve", DrainBehavior::Wait).await;
    let (go2, step2) = spawn_step(&rt, &mut sup, "mail-2", "fetch", DrainBehavior::Cancel).await;
    let key = sup.key().clone();
    sup.send(mail_cancel(DEPLOYMENT, 1, &key)).await;
    expect_verdict(&mut sup, 1, CancelVerdict::Acknowledged).await;
    assert!(matches!(
        join(step1).await,
        Err(StepError::Cancelled(CancelCause::Cancel))
    ));
    sup.expect_run_end("mail-1", "approve", Outcome::Cancelled)
        .await;
    assert_eq!(one.token().cause(), Some(CancelCause::Cancel));
    assert!(!two.token().is_cancelled(), "only that item's token");
    one.ack(Outcome::Cancelled).await.unwrap();
    assert_eq!(
        sup.next().await,
        Event::MailDone {
            id: 1,
            outcome: Outcome::Cancelled,
            result: Vec::new()
        }
    );
    go2.send(2).unwrap();
    assert_eq!(join(step2).await.unwrap(), 2);
    sup.expect_finished("mail-2", "fetch", Outcome::Succeeded)
        .await;
    two.done(Outcome::Succeeded, b"ok".to_vec()).await.unwrap();
    assert_eq!(
        sup.next().await,
        Event::MailDone {
            id: 2,
            outcome: Outcome::Succeeded,
            result: b"ok".to_vec()
        }
    );
    // Done: a cancel now names an item this child does not hold.
    sup.send(mail_cancel(DEPLOYMENT, 2, &key)).await;
    expect_verdict(
        &mut sup,
        2,
        CancelVerdict::Refused("cancel is for mail item 2, which this child does not hold".into()),
    )
    .await;
}

#[tokio::test]
async fn a_cancel_of_an_item_not_started_ends_it_at_once_and_it_is_never_handed_out() {
    let (rt, mut sup) = connect_v3().await;
    mail(&mut sup, 1).await;
    mail(&mut sup, 2).await;
    sup.ping(1).await;
    let key = sup.key().clone();
    sup.send(mail_cancel(DEPLOYMENT, 1, &key)).await;
    expect_verdict(&mut sup, 1, CancelVerdict::Acknowledged).await;
    assert_eq!(
        sup.next().await,
        Event::MailDone {
            id: 1,
            outcome: Outcome::Cancelled,
            result: Vec::new()
        }
    );
    let mut inbox = rt.mail();
    let next = next_mail(&mut inbox).await.unwrap();
    assert_eq!(next.id(), 2, "item 1 is never handed out");
    expect_mail_started(&mut sup, 2, true).await;
}

#[tokio::test]
async fn a_handler_declared_not_cancellable_runs_on_and_refusals_name_their_reason() {
    let (rt, mut sup) = connect_v3().await;
    let mut inbox = rt.mail();
    mail(&mut sup, 1).await;
    let held = tokio::time::timeout(
        WAIT,
        inbox.next_with(|_| wfhost_child::Start::new().not_cancellable()),
    )
    .await
    .unwrap()
    .unwrap();
    expect_mail_started(&mut sup, 1, false).await;
    let key = sup.key().clone();
    sup.send(mail_cancel(DEPLOYMENT, 1, &key)).await;
    expect_verdict(&mut sup, 1, CancelVerdict::NotSupported).await;
    assert!(!held.token().is_cancelled());

    let other = key::generate().unwrap();
    sup.send(mail_cancel(DEPLOYMENT, 1, &other)).await;
    match sup.next().await {
        Event::MailCancelVerdict {
            id: 1,
            verdict: CancelVerdict::Refused(reason),
        } => assert!(reason.contains("unknown key"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    sup.send(mail_cancel("payroll", 1, &key)).await;
    match sup.next().await {
        Event::MailCancelVerdict {
            id: 1,
            verdict: CancelVerdict::Refused(reason),
        } => assert!(reason.contains("payroll"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    sup.send(Control::Answer {
        id: 1,
        key: "approve?".into(),
        value: b"true".to_vec(),
    })
    .await;
    sup.ping(2).await; // the Answer is ignored
    held.ack(Outcome::Succeeded).await.unwrap();
    assert!(matches!(sup.next().await, Event::MailDone { id: 1, .. }));
}

#[tokio::test]
async fn a_child_of_protocol_2_takes_a_message_of_protocol_3_as_a_broken_channel() {
    let (rt, mut sup) = connect().await;
    let key = sup.key().clone();
    sup.send(mail_cancel(DEPLOYMENT, 1, &key)).await;
    let reason = tokio::time::timeout(WAIT, rt.closed()).await.unwrap();
    assert!(
        matches!(&reason, CloseReason::Failed(r) if r.contains("CancelMail is a protocol-3 message")),
        "{reason:?}"
    );
}
