//! `mail-acked-once`, `redelivery-processed-once` and `attempt-visible`.

use serde_json::json;
use wfhost_ipc::{DrainBehavior, Event, Outcome};

use super::{EVENT_WITHIN, QUIET_FOR, one_step, payload};
use crate::events::{acked, describe, outcome_of, started, took, took_of};
use crate::failure::{Failure, ensure};
use crate::subject::{Launcher, Subject};

/// A succeeding item gives StepStarted, StepFinished(Succeeded),
/// RunTerminal(Succeeded), MailAck(Succeeded), each once and in that order
/// (in protocol 3: MailStarted first, and MailDone with an empty result in
/// place of MailAck); an item with `fail` is acknowledged
/// `Failed(reason)`; a payload that is not JSON is acknowledged `Failed`.
pub async fn acked_once(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    s.handshake_with(l.welcome()).await?;
    s.mail(1, 1, one_step("ok-1", "work", DrainBehavior::Cancel, 50))
        .await?;
    s.mail(2, 1, payload(json!({"run": "fail-2", "fail": "it broke"})))
        .await?;
    s.mail(3, 1, &b"this is not JSON {"[..]).await?;
    let done = s.done_word();
    for id in 1..=3 {
        s.events
            .wait_for(&format!("{done}({id})"), EVENT_WITHIN, acked(id))
            .await?;
    }
    s.events.settle(QUIET_FOR).await;

    let of_item_1: Vec<Event> = s
        .events
        .seen()
        .iter()
        .map(|seen| &seen.event)
        .filter(|e| match e {
            Event::StepStarted { run, .. }
            | Event::StepFinished { run, .. }
            | Event::RunTerminal { run, .. } => run == "ok-1",
            Event::MailAck { id, .. }
            | Event::MailDone { id, .. }
            | Event::MailStarted { id, .. } => *id == 1,
            _ => false,
        })
        .cloned()
        .collect();
    let v3 = s.protocol >= 3;
    let mut expected = Vec::new();
    if v3 {
        expected.push(Event::MailStarted {
            id: 1,
            cancellable: true,
        });
    }
    expected.extend([
        Event::StepStarted {
            run: "ok-1".into(),
            step: "work".into(),
            drain: DrainBehavior::Cancel,
        },
        Event::StepFinished {
            run: "ok-1".into(),
            step: "work".into(),
            outcome: Outcome::Succeeded,
        },
        Event::RunTerminal {
            run: "ok-1".into(),
            outcome: Outcome::Succeeded,
        },
    ]);
    expected.push(if v3 {
        Event::MailDone {
            id: 1,
            outcome: Outcome::Succeeded,
            result: Vec::new(),
        }
    } else {
        Event::MailAck {
            id: 1,
            outcome: Outcome::Succeeded,
        }
    });
    ensure(
        of_item_1 == expected,
        format!(
            "for mail 1 exactly [{}]",
            expected.iter().map(describe).collect::<Vec<_>>().join(", ")
        ),
        || {
            let got: Vec<String> = of_item_1.iter().map(describe).collect();
            format!("[{}]", got.join(", "))
        },
    )?;
    only_ack(
        s,
        2,
        |o| *o == Outcome::Failed("it broke".into()),
        "Failed(\"it broke\")",
    )?;
    only_ack(
        s,
        3,
        |o| matches!(o, Outcome::Failed(_)),
        "Failed(…) for a payload that is not JSON",
    )
}

/// Fails unless mail `id` was acknowledged exactly once, with an outcome
/// `fits` accepts.
fn only_ack(
    s: &Subject,
    id: u64,
    fits: impl Fn(&Outcome) -> bool,
    expected: &str,
) -> Result<(), Failure> {
    let acks: Vec<&Event> = s
        .events
        .seen()
        .iter()
        .map(|seen| &seen.event)
        .filter(|e| acked(id)(e))
        .collect();
    let ok = acks.len() == 1 && outcome_of(acks[0]).is_some_and(&fits);
    ensure(
        ok,
        format!("one {}({id}, {expected})", s.done_word()),
        || {
            let got: Vec<String> = acks.iter().map(|e| describe(e)).collect();
            format!("[{}]", got.join(", "))
        },
    )
}

/// The same id delivered again after its ack is acknowledged again but not
/// processed again.
pub async fn redelivery_processed_once(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    s.handshake_with(l.welcome()).await?;
    let item = one_step("once", "work", DrainBehavior::Cancel, 20);
    s.mail(7, 1, item.clone()).await?;
    let done = s.done_word();
    let first = s
        .events
        .wait_for(&format!("{done}(7)"), EVENT_WITHIN, acked(7))
        .await?;
    ensure(
        outcome_of(&first.event) == Some(&Outcome::Succeeded),
        format!("{done}(7, Succeeded)"),
        || describe(&first.event),
    )?;
    let after_first = s.events.seen().len();
    s.mail(7, 2, item).await?;
    s.events
        .wait_from(
            after_first,
            &format!("a second {done}(7) for the redelivery"),
            EVENT_WITHIN,
            acked(7),
        )
        .await?;
    s.events.settle(QUIET_FOR).await;
    let taken = s.events.count(took(7));
    let ran = s.events.count(started("once", "work"));
    ensure(
        taken == 1 && ran == 1,
        "mail 7 taken (conformance.took) and run once",
        || {
            format!(
                "taken {taken} times, run {ran} times: {}",
                s.events.summary()
            )
        },
    )
}

/// `Mail.attempt` 3 shows up as attempt 3 in `conformance.took`.
pub async fn attempt_visible(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    s.handshake_with(l.welcome()).await?;
    s.mail(9, 3, payload(json!({}))).await?;
    let seen = s
        .events
        .wait_for(
            "Custom(conformance.took {\"id\":\"9\",\"attempt\":3})",
            EVENT_WITHIN,
            |e| matches!(e, Event::Custom { kind, .. } if kind == "conformance.took"),
        )
        .await?;
    ensure(
        took_of(&seen.event) == Some((9, 3)),
        "conformance.took of {\"id\":\"9\",\"attempt\":3}",
        || describe(&seen.event),
    )?;
    let done = format!("{}(9)", s.done_word());
    s.events
        .wait_for(&done, EVENT_WITHIN, acked(9))
        .await
        .map(|_| ())
}
