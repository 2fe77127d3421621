//! The scenarios of protocol 3 (`docs/protocol.md` §4.12, "Version 3
//! scenarios"): the version a child chooses, `MailStarted` and `MailDone`
//! with a result, a result too large for a frame, the cancel of one item
//! and its verdict, and a redelivery after `MailDone`. Questions and
//! progress are `asking.rs`'s.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;
use wfhost_ipc::{CancelVerdict, Control, Event, Outcome, PROTOCOL_VERSION, SignedMailCancel};

use super::cancel::expect_item_end;
use super::{EVENT_WITHIN, QUIET_FOR, payload};
use crate::events::{
    Seen, acked, describe, mail_started, outcome_of, outcome_text, started, took, verdict,
};
use crate::failure::{Failure, ensure};
use crate::forgery;
use crate::subject::{Launcher, Subject};

/// How soon after a `CancelMail` its verdict must come (§4.12: once,
/// within 1 s).
const VERDICT_WITHIN: Duration = Duration::from_secs(1);
/// How long the kit waits for a verdict before it says none came (longer
/// than [`VERDICT_WITHIN`], so a late verdict is reported as late).
const VERDICT_WAIT: Duration = Duration::from_secs(3);
/// How soon after an acknowledged cancel the item's run must be over.
const CANCELLED_WITHIN: Duration = Duration::from_secs(2);
/// How long the step of an item that must survive a cancel runs.
const GUARDED_MS: u64 = 1500;
/// The result of `mail-started-and-done`: binary, not UTF-8.
const RESULT: [u8; 4] = [0x00, 0xff, 0x80, 0x0a];
/// The `max_frame_bytes` of `result-too-large`'s Welcome.
const SMALL_FRAME_LIMIT: u32 = 64 * 1024;
/// The result size asked for in `result-too-large`: more than a frame holds.
const LARGE_RESULT: usize = 100_000;

/// The payload of an item of run `run` with one step and the extra keys of
/// `extra` (an object).
fn item(run: &str, step: &str, drain: &str, ms: u64, extra: Value) -> Vec<u8> {
    let mut value = json!({
        "run": run,
        "steps": [{"name": step, "drain": drain, "ms": ms}],
    });
    if let (Some(obj), Value::Object(more)) = (value.as_object_mut(), extra) {
        obj.extend(more);
    }
    payload(value)
}

/// The handshake with the kit's Welcome, then a check that the child
/// speaks protocol 3.
pub(super) async fn ready_v3(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    s.handshake_with(l.welcome()).await?;
    s.require_v3()
}

/// `handshake-v3`: with `WFHOST_PROTOCOL=2` and `WFHOST_PROTOCOL_MAX=3`
/// the Hello says 3, the newest version both sides speak; Ready follows a
/// Welcome of 3.
pub async fn handshake_v3(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    let hello = s.read_hello().await?;
    ensure(
        hello.protocol == PROTOCOL_VERSION,
        format!(
            "a Hello of protocol {PROTOCOL_VERSION} under WFHOST_PROTOCOL=2 and WFHOST_PROTOCOL_MAX={PROTOCOL_VERSION} (the newest version both sides speak)"
        ),
        || format!("a Hello of protocol {}", hello.protocol),
    )?;
    let mut welcome = l.welcome();
    welcome.protocol = hello.protocol;
    s.welcome(welcome).await?;
    s.await_ready().await
}

/// `handshake-v2-supervisor`: without `WFHOST_PROTOCOL_MAX` the Hello says
/// 2 (checked as the Hello is read); an item then ends with `MailAck`, and
/// nothing of version 3 is sent (checked after every scenario).
pub async fn handshake_v2_supervisor(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    s.handshake_with(l.welcome()).await?;
    s.mail(1, 1, payload(json!({"run": "v2-1"}))).await?;
    let end = s
        .events
        .wait_for("MailAck(1)", EVENT_WITHIN, acked(1))
        .await?;
    let expected = Event::MailAck {
        id: 1,
        outcome: Outcome::Succeeded,
    };
    ensure(end.event == expected, describe(&expected), || {
        describe(&end.event)
    })?;
    s.events.settle(QUIET_FOR).await;
    Ok(())
}

/// `mail-started-and-done`: `MailStarted { 1, cancellable: true }` before
/// any other event of the item (its `conformance.took`, its step, its run),
/// once; then `MailDone(1, Succeeded)` whose result is the handler's bytes
/// exactly, once, and no `MailAck`.
pub async fn mail_started_and_done(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    ready_v3(s, l).await?;
    s.mail(
        1,
        1,
        item(
            "sd-1",
            "work",
            "cancel",
            50,
            json!({"result_hex": hex::encode(RESULT)}),
        ),
    )
    .await?;
    let done = s
        .events
        .wait_for("MailDone(1)", EVENT_WITHIN, acked(1))
        .await?;
    s.events.settle(QUIET_FOR).await;

    let of_item = |e: &Event| {
        took(1)(e)
            || acked(1)(e)
            || matches!(e,
                Event::StepStarted { run, .. }
                | Event::StepFinished { run, .. }
                | Event::RunTerminal { run, .. } if run == "sd-1")
    };
    let first_other = s.events.position(of_item);
    let start = s.events.position(mail_started(1));
    ensure(
        start.is_some() && start < first_other,
        "MailStarted(1) before any other event of item 1",
        || s.events.summary(),
    )?;
    let expected = Event::MailStarted {
        id: 1,
        cancellable: true,
    };
    let starts: Vec<&Seen> = s
        .events
        .seen()
        .iter()
        .filter(|seen| mail_started(1)(&seen.event))
        .collect();
    ensure(
        starts.len() == 1 && starts[0].event == expected,
        format!("one {}", describe(&expected)),
        || s.events.summary(),
    )?;
    let expected = Event::MailDone {
        id: 1,
        outcome: Outcome::Succeeded,
        result: RESULT.to_vec(),
    };
    ensure(done.event == expected, describe(&expected), || {
        describe(&done.event)
    })?;
    ensure(
        s.events.count(acked(1)) == 1,
        "one MailDone(1) and no MailAck(1)",
        || s.events.summary(),
    )
}

/// `result-too-large`: with a Welcome of `max_frame_bytes` 65,536, a result
/// of 100,000 bytes ends the item `MailDone(Failed(…max_frame_bytes…))`
/// with an empty result, in a frame within the limit (the kit holds the
/// child to it); the next item succeeds.
pub async fn result_too_large(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    let mut welcome = l.welcome();
    welcome.limits.max_frame_bytes = SMALL_FRAME_LIMIT;
    s.handshake_with(welcome).await?;
    s.require_v3()?;
    s.mail(
        1,
        1,
        payload(json!({"run": "big-1", "result_size": LARGE_RESULT})),
    )
    .await?;
    let done = s
        .events
        .wait_for("MailDone(1)", EVENT_WITHIN, acked(1))
        .await?;
    let fits = matches!(
        &done.event,
        Event::MailDone { outcome: Outcome::Failed(reason), result, .. }
            if reason.contains("max_frame_bytes") && result.is_empty()
    );
    ensure(
        fits,
        format!(
            "MailDone(1, Failed(a reason naming max_frame_bytes), an empty result) for a result of {LARGE_RESULT} bytes under max_frame_bytes {SMALL_FRAME_LIMIT}"
        ),
        || describe(&done.event),
    )?;
    s.mail(2, 1, payload(json!({"run": "big-2"}))).await?;
    let next = s
        .events
        .wait_for(
            "MailDone(2) (the child keeps working)",
            EVENT_WITHIN,
            acked(2),
        )
        .await?;
    ensure(
        outcome_of(&next.event) == Some(&Outcome::Succeeded),
        "MailDone(2, Succeeded) (the child keeps working)",
        || describe(&next.event),
    )
}

/// Sends `cancel` and expects one `MailCancelVerdict` of its item within
/// 1 s, which `fits` accepts (`expected` names it).
pub(super) async fn expect_verdict(
    s: &mut Subject,
    cancel: SignedMailCancel,
    fits: impl Fn(&CancelVerdict) -> bool,
    expected: &str,
) -> Result<(), Failure> {
    let id = cancel.record.id;
    s.send(Control::CancelMail(cancel)).await?;
    let sent = Instant::now();
    let what = format!("MailCancelVerdict({id}, {expected})");
    let seen = s.events.wait_for(&what, VERDICT_WAIT, verdict(id)).await?;
    let ok = matches!(&seen.event, Event::MailCancelVerdict { verdict, .. } if fits(verdict));
    ensure(ok, what.clone(), || describe(&seen.event))?;
    let took_ms = seen.at.saturating_duration_since(sent);
    ensure(
        took_ms <= VERDICT_WITHIN,
        format!("{what} within {} ms", VERDICT_WITHIN.as_millis()),
        || format!("it took {} ms", took_ms.as_millis()),
    )
}

/// After the scenario: exactly one verdict for `id`, and nothing
/// cancelled of `runs`.
async fn verdict_once_and_nothing_cancelled(
    s: &mut Subject,
    id: u64,
    runs: &[&str],
) -> Result<(), Failure> {
    s.events.settle(QUIET_FOR).await;
    ensure(
        s.events.count(verdict(id)) == 1,
        format!("one MailCancelVerdict({id})"),
        || s.events.summary(),
    )?;
    for run in runs {
        let cancelled = s
            .events
            .count(|e| run_of(e) == Some(run) && outcome_of(e) == Some(&Outcome::Cancelled));
        ensure(
            cancelled == 0,
            format!("nothing of run {run} cancelled"),
            || s.events.summary(),
        )?;
    }
    Ok(())
}

/// The run of a step or run event.
fn run_of(event: &Event) -> Option<&str> {
    match event {
        Event::StepStarted { run, .. }
        | Event::StepFinished { run, .. }
        | Event::RunTerminal { run, .. } => Some(run),
        _ => None,
    }
}

/// Waits for `StepStarted` of `step` in `run`.
async fn await_step(s: &mut Subject, run: &str, step: &str) -> Result<(), Failure> {
    s.events
        .wait_for(
            &format!("StepStarted({run}/{step})"),
            EVENT_WITHIN,
            started(run, step),
        )
        .await
        .map(|_| ())
}

/// Fails unless the first `MailStarted` of `id` says `cancellable`.
async fn expect_started(s: &mut Subject, id: u64, cancellable: bool) -> Result<(), Failure> {
    let expected = Event::MailStarted { id, cancellable };
    let seen = s
        .events
        .wait_for(&describe(&expected), EVENT_WITHIN, mail_started(id))
        .await?;
    ensure(seen.event == expected, describe(&expected), || {
        describe(&seen.event)
    })
}

/// `cancel-mail-acknowledged`: item 1 (a 5 s wait-behaviour step: an item's
/// cancel reaches every step of its run) and item 2 (a 1.5 s step) run; a
/// valid `CancelMail` of item 1 gets `Acknowledged` within 1 s, item 1's
/// step, run and `MailDone` end `Cancelled`; item 2 is untouched and
/// succeeds.
pub async fn cancel_mail_acknowledged(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    ready_v3(s, l).await?;
    s.mail(1, 1, item("cm-1", "long", "wait", 5000, json!({})))
        .await?;
    s.mail(2, 1, item("cm-2", "other", "cancel", GUARDED_MS, json!({})))
        .await?;
    await_step(s, "cm-1", "long").await?;
    await_step(s, "cm-2", "other").await?;
    expect_started(s, 1, true).await?;
    let cancel = forgery::honest_mail(l.key(), l.deployment(), 1);
    expect_verdict(
        s,
        cancel,
        |v| *v == CancelVerdict::Acknowledged,
        "Acknowledged",
    )
    .await?;
    expect_item_end(s, 1, "cm-1", "long", CANCELLED_WITHIN, &Outcome::Cancelled).await?;
    let within = Duration::from_millis(GUARDED_MS) + EVENT_WITHIN;
    expect_item_end(s, 2, "cm-2", "other", within, &Outcome::Succeeded)
        .await
        .map_err(|f| {
            Failure::new(
                format!("{} (a cancel of item 1 leaves item 2 alone)", f.expected),
                f.got,
            )
        })?;
    verdict_once_and_nothing_cancelled(s, 1, &["cm-2"]).await?;
    ensure(s.events.count(acked(1)) == 1, "one MailDone(1)", || {
        s.events.summary()
    })
}

/// `cancel-mail-not-supported`: an item whose payload says `"cancellable":
/// false` starts with `MailStarted(cancellable false)`; a valid
/// `CancelMail` of it gets `NotSupported` within 1 s, and it runs to its
/// end and succeeds.
pub async fn cancel_mail_not_supported(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    ready_v3(s, l).await?;
    s.mail(
        1,
        1,
        item(
            "ns-1",
            "hold",
            "cancel",
            GUARDED_MS,
            json!({"cancellable": false}),
        ),
    )
    .await?;
    await_step(s, "ns-1", "hold").await?;
    expect_started(s, 1, false).await?;
    let cancel = forgery::honest_mail(l.key(), l.deployment(), 1);
    expect_verdict(
        s,
        cancel,
        |v| *v == CancelVerdict::NotSupported,
        "NotSupported",
    )
    .await?;
    let within = Duration::from_millis(GUARDED_MS) + EVENT_WITHIN;
    expect_item_end(s, 1, "ns-1", "hold", within, &Outcome::Succeeded).await?;
    verdict_once_and_nothing_cancelled(s, 1, &["ns-1"]).await
}

/// `cancel-mail-unknown-item`: while item 1 runs, a valid `CancelMail` of
/// item 99, which the child never had, gets `Refused` naming 99 within
/// 1 s; item 1 succeeds.
pub async fn cancel_mail_unknown_item(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    ready_v3(s, l).await?;
    s.mail(1, 1, item("uk-1", "hold", "cancel", GUARDED_MS, json!({})))
        .await?;
    await_step(s, "uk-1", "hold").await?;
    let cancel = forgery::honest_mail(l.key(), l.deployment(), 99);
    expect_verdict(
        s,
        cancel,
        |v| matches!(v, CancelVerdict::Refused(reason) if reason.contains("99")),
        "Refused(a reason naming item 99)",
    )
    .await?;
    let within = Duration::from_millis(GUARDED_MS) + EVENT_WITHIN;
    expect_item_end(s, 1, "uk-1", "hold", within, &Outcome::Succeeded).await?;
    verdict_once_and_nothing_cancelled(s, 99, &["uk-1"]).await
}

/// `cancel-mail-forged`: a `CancelMail` of the running item 1 whose
/// signature has one bit flipped gets `Refused` within 1 s; item 1 goes on
/// and succeeds.
pub async fn cancel_mail_forged(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    ready_v3(s, l).await?;
    s.mail(1, 1, item("fg-1", "hold", "cancel", GUARDED_MS, json!({})))
        .await?;
    await_step(s, "fg-1", "hold").await?;
    let cancel = forgery::forged_mail(l.key(), l.deployment(), 1);
    expect_verdict(
        s,
        cancel,
        |v| matches!(v, CancelVerdict::Refused(_)),
        "Refused(…) for a signature with one bit flipped",
    )
    .await?;
    let within = Duration::from_millis(GUARDED_MS) + EVENT_WITHIN;
    expect_item_end(s, 1, "fg-1", "hold", within, &Outcome::Succeeded).await?;
    verdict_once_and_nothing_cancelled(s, 1, &["fg-1"]).await
}

/// `redelivery-done-again`: items 7 (succeeds with result `0102`) and 8
/// (fails) delivered again after their `MailDone` get `MailDone` again with
/// the same outcome (any result), and neither is started or run again.
pub async fn redelivery_done_again(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    ready_v3(s, l).await?;
    let seven = item(
        "again-7",
        "work",
        "cancel",
        20,
        json!({"result_hex": "0102"}),
    );
    let eight = payload(json!({"run": "again-8", "fail": "nope"}));
    s.mail(7, 1, seven.clone()).await?;
    s.mail(8, 1, eight.clone()).await?;
    let expected = [
        (7, Outcome::Succeeded, vec![1, 2]),
        (8, Outcome::Failed("nope".into()), Vec::new()),
    ];
    for (id, outcome, result) in &expected {
        let done = s
            .events
            .wait_for(&format!("MailDone({id})"), EVENT_WITHIN, acked(*id))
            .await?;
        let want = Event::MailDone {
            id: *id,
            outcome: outcome.clone(),
            result: result.clone(),
        };
        ensure(done.event == want, describe(&want), || {
            describe(&done.event)
        })?;
    }
    let after_first = s.events.seen().len();
    s.mail(7, 2, seven).await?;
    s.mail(8, 2, eight).await?;
    for (id, outcome, _) in &expected {
        let again = s
            .events
            .wait_from(
                after_first,
                &format!("a second MailDone({id}) for the redelivery"),
                EVENT_WITHIN,
                acked(*id),
            )
            .await?;
        let fits = matches!(&again.event,
            Event::MailDone { outcome: o, .. } if o == outcome);
        // Any result will do: the supervisor keeps the first.
        ensure(
            fits,
            format!(
                "MailDone({id}, {}, any result) again",
                outcome_text(outcome)
            ),
            || describe(&again.event),
        )?;
    }
    s.events.settle(QUIET_FOR).await;
    for id in [7, 8] {
        let starts = s.events.count(mail_started(id));
        let taken = s.events.count(took(id));
        ensure(
            starts == 1 && taken == 1,
            format!("item {id} started (MailStarted, conformance.took) once"),
            || {
                format!(
                    "started {starts}, taken {taken} times: {}",
                    s.events.summary()
                )
            },
        )?;
    }
    let ran = s.events.count(started("again-7", "work"));
    ensure(ran == 1, "item 7's step run once", || {
        format!("run {ran} times: {}", s.events.summary())
    })
}
