//! `wfhost-child demo` driven from the supervisor's side of the socketpair:
//! mail in order, both drain behaviours, self-recycle, drain, signed
//! cancels, shutdown, EOF and redelivery, with the real binary.

mod common;

use common::{Supervised, assert_refuses_outside_wfhost, start};
use wfhost_ipc::{CancelOrigin, Control, DrainBehavior, Event, Outcome};

/// The demo's steps, in order, with their drain behaviours.
const STEPS: [(&str, DrainBehavior); 3] = [
    ("fetch", DrainBehavior::Cancel),
    ("approve", DrainBehavior::Wait),
    ("apply", DrainBehavior::Cancel),
];

/// A demo child past `Ready`, with quick steps unless `extra` sets them.
async fn demo(extra: &[&str]) -> Supervised {
    let mut args = vec!["demo"];
    for (flag, quick) in [("--step-ms", "5"), ("--approve-ms", "10")] {
        if !extra.contains(&flag) {
            args.extend([flag, quick]);
        }
    }
    args.extend_from_slice(extra);
    let mut s = start(&args).await;
    assert_eq!(s.next().await, Event::Ready);
    s
}

/// Sends mail `id` with the payload `order ID`.
async fn mail(s: &mut Supervised, id: u64) {
    s.send_mail(id, format!("order {id}")).await;
}

/// The whole event sequence of one mail item that succeeds.
async fn expect_processed(s: &mut Supervised, id: u64) {
    let run = format!("mail-{id}");
    for (step, drain) in STEPS {
        s.expect_started(&run, step, drain).await;
        s.expect_finished(&run, step, Outcome::Succeeded).await;
    }
    s.expect_terminal(&run, Outcome::Succeeded).await;
    s.expect_ack(id, Outcome::Succeeded).await;
}

/// Expects `run` to get through fetch and start approve (a wait step).
async fn expect_approving(s: &mut Supervised, run: &str) {
    s.expect_started(run, "fetch", DrainBehavior::Cancel).await;
    s.expect_finished(run, "fetch", Outcome::Succeeded).await;
    s.expect_started(run, "approve", DrainBehavior::Wait).await;
}

/// Sends mail 1 and, once its fetch (a cancel step) has started, a Drain.
async fn drain_in_fetch(s: &mut Supervised) {
    mail(s, 1).await;
    s.expect_started("mail-1", "fetch", DrainBehavior::Cancel)
        .await;
    s.send(Control::Drain { budget_ms: 60_000 }).await;
}

/// Cancels mail 1, held in `step` during a drain, and expects the step and
/// run to end cancelled, then the ack, then `Drained`. The cancel is a
/// decision: the mail is done, as cancelled, and its ack comes before
/// Drained, so a supervisor that stops at Drained keeps it.
async fn cancel_ends_the_drain(s: &mut Supervised, origin: CancelOrigin, step: &str) {
    let cancel = s.signed_cancel(origin, Some("mail-1"));
    s.send(cancel).await;
    s.expect_run_end("mail-1", step, Outcome::Cancelled).await;
    s.expect_ack(1, Outcome::Cancelled).await;
    assert_eq!(s.next().await, Event::Drained);
}

/// Shuts the child down and checks it closes the channel and exits 0.
async fn shut_down(s: &mut Supervised) {
    s.send(Control::Shutdown).await;
    s.expect_eof().await;
    assert_eq!(s.exit_code().await, Some(0));
}

#[tokio::test]
async fn three_mail_items_are_processed_in_order_and_acknowledged() {
    let mut s = demo(&[]).await;
    for id in [7, 8, 9] {
        mail(&mut s, id).await;
    }
    for id in [7, 8, 9] {
        expect_processed(&mut s, id).await;
    }
    s.ping(1).await;
    shut_down(&mut s).await;

    let stdout = s.stdout().await;
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("mail ")).collect();
    let mut expected = Vec::new();
    for id in [7, 8, 9] {
        expected.push(format!("mail {id}: received \"order {id}\" (7 bytes)"));
        for (step, _) in STEPS {
            expected.push(format!("mail {id}: {step} done"));
        }
        expected.push(format!("mail {id}: acknowledged (succeeded)"));
    }
    assert_eq!(lines, expected, "{stdout}");
    assert!(stdout.contains("shutdown requested"), "{stdout}");
}

#[tokio::test]
async fn recycle_every_two_asks_for_a_recycle_after_the_second_item() {
    let mut s = demo(&["--recycle-every", "2"]).await;
    for id in 1..=3 {
        mail(&mut s, id).await;
    }
    expect_processed(&mut s, 1).await;
    expect_processed(&mut s, 2).await;
    assert_eq!(
        s.next().await,
        Event::RecycleRequest {
            reason: "processed 2 items".into()
        }
    );
    expect_processed(&mut s, 3).await;
    // No second request after an odd count.
    s.ping(1).await;
    shut_down(&mut s).await;
}

#[tokio::test]
async fn drain_during_approve_lets_it_finish_and_leaves_the_mail_unacknowledged() {
    let mut s = demo(&["--approve-ms", "1500"]).await;
    mail(&mut s, 1).await;
    mail(&mut s, 2).await;
    expect_approving(&mut s, "mail-1").await;
    s.send(Control::Drain { budget_ms: 60_000 }).await;
    // Only a wait step is in flight, but the demo holds mail 1: no Drained
    // yet (the Pong comes next), so the run is not stopped half-way.
    s.ping(1).await;
    s.expect_finished("mail-1", "approve", Outcome::Succeeded)
        .await;
    // New cancel-behaviour work does not begin during a drain.
    s.expect_started("mail-1", "apply", DrainBehavior::Cancel)
        .await;
    s.expect_run_end("mail-1", "apply", Outcome::Cancelled)
        .await;
    // No MailAck for mail 1: it is dropped, which ends the drain.
    assert_eq!(s.next().await, Event::Drained);
    // Mail 2 (queued) and 3 (new) are not taken.
    mail(&mut s, 3).await;
    s.ping(2).await;
    shut_down(&mut s).await;

    let stdout = s.stdout().await;
    assert!(stdout.contains("mail 1: approve done"), "{stdout}");
    assert!(
        stdout.contains("mail 1: apply cancelled (drain)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("mail 1: not acknowledged: it goes back to the inbox"),
        "{stdout}"
    );
    assert!(stdout.contains("taking no more mail"), "{stdout}");
    assert!(!stdout.contains("mail 2:"), "{stdout}");
    assert!(!stdout.contains("mail 3:"), "{stdout}");
}

#[tokio::test]
async fn drain_during_fetch_cancels_it_and_the_child_exits_0_on_eof() {
    let mut s = demo(&["--step-ms", "30000"]).await;
    drain_in_fetch(&mut s).await;
    s.expect_run_end("mail-1", "fetch", Outcome::Cancelled)
        .await;
    // Drained once the demo let go of mail 1 (unacknowledged), after the run.
    assert_eq!(s.next().await, Event::Drained);
    s.ping(1).await;
    s.hang_up();
    assert_eq!(s.exit_code().await, Some(0));
    let stdout = s.stdout().await;
    assert!(
        stdout.contains("mail 1: fetch cancelled (drain)"),
        "{stdout}"
    );
    assert!(!stdout.contains("mail 1: approve"), "{stdout}");
    assert!(stdout.contains("closed the channel"), "{stdout}");
}

#[tokio::test]
async fn drain_cleanup_that_outlasts_the_budget_ends_with_the_escalated_cancel() {
    let mut s = demo(&["--step-ms", "30000", "--cleanup-ms", "30000"]).await;
    drain_in_fetch(&mut s).await;
    // Still winding down: no StepFinished, no Drained.
    s.ping(1).await;
    cancel_ends_the_drain(&mut s, CancelOrigin::SupervisorDrain, "fetch").await;
    s.ping(2).await;
    shut_down(&mut s).await;
    let stdout = s.stdout().await;
    assert!(stdout.contains("fetch: drained, winding down"), "{stdout}");
    assert!(
        stdout.contains("mail 1: fetch cancelled (cancel)"),
        "{stdout}"
    );
}

#[tokio::test]
async fn drain_cleanup_within_the_budget_leaves_the_mail_unacknowledged() {
    let mut s = demo(&["--step-ms", "30000", "--cleanup-ms", "20"]).await;
    drain_in_fetch(&mut s).await;
    s.expect_run_end("mail-1", "fetch", Outcome::Cancelled)
        .await;
    assert_eq!(s.next().await, Event::Drained);
    s.ping(1).await;
    shut_down(&mut s).await;
}

#[tokio::test]
async fn a_signed_cancel_during_a_drain_escalation_is_acknowledged_before_drained() {
    let mut s = demo(&["--step-ms", "30000", "--cleanup-ms", "30000"]).await;
    mail(&mut s, 1).await;
    mail(&mut s, 2).await;
    s.expect_started("mail-1", "fetch", DrainBehavior::Cancel)
        .await;
    s.send(Control::Drain { budget_ms: 60_000 }).await;
    s.ping(1).await;
    // The budget ran out: the supervisor's escalation cancels every run.
    let cancel = s.signed_cancel(CancelOrigin::SupervisorDrain, None);
    s.send(cancel).await;
    let mut seen = Vec::new();
    loop {
        let event = s.next().await;
        let drained = event == Event::Drained;
        seen.push(event);
        if drained {
            break;
        }
    }
    assert_eq!(
        seen,
        [
            Event::StepFinished {
                run: "mail-1".into(),
                step: "fetch".into(),
                outcome: Outcome::Cancelled
            },
            Event::RunTerminal {
                run: "mail-1".into(),
                outcome: Outcome::Cancelled
            },
            Event::MailAck {
                id: 1,
                outcome: Outcome::Cancelled
            },
            Event::Drained,
        ],
        "MailAck before Drained: the drain ends with the mail settled"
    );
    // Mail 2 was queued at the drain: never taken, left for the next child.
    s.ping(2).await;
    shut_down(&mut s).await;
    let stdout = s.stdout().await;
    assert!(
        stdout.contains("mail 1: acknowledged (cancelled)"),
        "{stdout}"
    );
    assert!(!stdout.contains("mail 2:"), "{stdout}");
}

#[tokio::test]
async fn an_operator_cancel_of_a_waited_for_run_during_a_drain_acks_before_drained() {
    let mut s = demo(&["--approve-ms", "30000"]).await;
    mail(&mut s, 1).await;
    expect_approving(&mut s, "mail-1").await;
    s.send(Control::Drain { budget_ms: 60_000 }).await;
    // Waiting for a person, holding mail 1: the drain is not over.
    s.ping(1).await;
    cancel_ends_the_drain(&mut s, CancelOrigin::Operator, "approve").await;
    s.ping(2).await;
    shut_down(&mut s).await;
}

#[tokio::test]
async fn drain_of_an_idle_demo_is_drained_at_once_and_later_mail_is_not_taken() {
    let mut s = demo(&[]).await;
    mail(&mut s, 1).await;
    expect_processed(&mut s, 1).await;
    s.send(Control::Drain { budget_ms: 60_000 }).await;
    assert_eq!(s.next().await, Event::Drained);
    mail(&mut s, 2).await;
    // Settled mail redelivered during the drain is still acknowledged again.
    mail(&mut s, 1).await;
    s.expect_ack(1, Outcome::Succeeded).await;
    s.ping(1).await;
    shut_down(&mut s).await;
    let stdout = s.stdout().await;
    assert!(!stdout.contains("mail 2:"), "{stdout}");
    let stderr = s.stderr().await;
    assert!(stderr.contains("mail 2 arrived after Drain"), "{stderr}");
}

#[tokio::test]
async fn a_signed_cancel_is_acknowledged_cancelled_and_shutdown_mid_step_is_not() {
    let mut s = demo(&["--approve-ms", "30000"]).await;
    mail(&mut s, 1).await;
    mail(&mut s, 2).await;
    expect_approving(&mut s, "mail-1").await;
    // An operator cancel stops even a wait step, at once.
    let cancel = s.signed_cancel(CancelOrigin::Operator, Some("mail-1"));
    s.send(cancel).await;
    s.expect_run_end("mail-1", "approve", Outcome::Cancelled)
        .await;
    s.expect_ack(1, Outcome::Cancelled).await;

    // The next item goes on; Shutdown cuts its approval short, unacked.
    expect_approving(&mut s, "mail-2").await;
    s.send(Control::Shutdown).await;
    s.expect_run_end("mail-2", "approve", Outcome::Cancelled)
        .await;
    s.expect_eof().await;
    assert_eq!(s.exit_code().await, Some(0));
    let stdout = s.stdout().await;
    assert!(
        stdout.contains("mail 1: acknowledged (cancelled)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("mail 2: approve cancelled (shutdown)"),
        "{stdout}"
    );
    assert!(stdout.contains("mail 2: not acknowledged"), "{stdout}");
}

#[tokio::test]
async fn a_redelivered_mail_already_acknowledged_is_not_processed_again() {
    let mut s = demo(&[]).await;
    mail(&mut s, 1).await;
    expect_processed(&mut s, 1).await;
    mail(&mut s, 1).await;
    // Answered from the runtime's memory: no step runs.
    s.expect_ack(1, Outcome::Succeeded).await;
    mail(&mut s, 2).await;
    expect_processed(&mut s, 2).await;
    shut_down(&mut s).await;
    let stdout = s.stdout().await;
    assert_eq!(stdout.matches("mail 1: fetch done").count(), 1, "{stdout}");
    assert_eq!(
        stdout.matches("mail 1: acknowledged").count(),
        1,
        "{stdout}"
    );
    let stderr = s.stderr().await;
    assert!(stderr.contains("mail 1 redelivered"), "{stderr}");
}

#[tokio::test]
async fn outside_wfhost_it_says_so_and_exits_2() {
    assert_refuses_outside_wfhost(&["demo"]).await;
}
