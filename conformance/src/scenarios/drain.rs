//! `drain` and `lease-expiry`: a child told to wind down, or whose lease
//! ran out, cancels its cancel-behaviour steps, lets wait-behaviour steps
//! finish, and takes no more mail.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;
use wfhost_ipc::{Control, DrainBehavior, Event, Outcome};

use super::{EVENT_WITHIN, QUIET_FOR, one_step, payload};
use crate::events::{Seen, acked, describe, finished, mail_started, outcome_of, started, took};
use crate::failure::{Failure, ensure};
use crate::subject::{Launcher, Subject};

/// How soon after the Drain a cancel-behaviour step must end.
const CANCEL_WITHIN: Duration = Duration::from_secs(1);
/// How long the wait-behaviour step of the drain scenario takes.
const WAIT_STEP_MS: u64 = 1500;
/// A step that finishes this much before its time did not wait it out.
const EARLY_SLACK: Duration = Duration::from_millis(100);

/// The lease of the lease scenario, and how often it is renewed.
const LEASE_MS: u64 = 300;
const RENEW_EVERY: Duration = Duration::from_millis(150);
const RENEWALS: usize = 6;
/// When the step must end after the last lease: ≈300 ms, within bounds.
const EXPIRY_AT_LEAST: Duration = Duration::from_millis(250);
const EXPIRY_AT_MOST: Duration = Duration::from_secs(2);

/// Fails unless `seen` carries `outcome`.
fn with_outcome(seen: &Seen, outcome: &Outcome) -> Result<(), Failure> {
    let expected = describe(&match &seen.event {
        Event::StepFinished { run, step, .. } => Event::StepFinished {
            run: run.clone(),
            step: step.clone(),
            outcome: outcome.clone(),
        },
        Event::RunTerminal { run, .. } => Event::RunTerminal {
            run: run.clone(),
            outcome: outcome.clone(),
        },
        Event::MailAck { id, .. } => Event::MailAck {
            id: *id,
            outcome: outcome.clone(),
        },
        Event::MailDone { id, result, .. } => Event::MailDone {
            id: *id,
            outcome: outcome.clone(),
            result: result.clone(),
        },
        other => other.clone(),
    });
    ensure(outcome_of(&seen.event) == Some(outcome), expected, || {
        describe(&seen.event)
    })
}

/// With one item in a 5 s cancel step and one in a 1.5 s wait step, `Drain`
/// ends the cancel step at once (< 1 s), lets the wait step finish, both
/// items are acknowledged, `Drained` comes after the wait step's end and
/// both acks, and mail sent after the Drain is not taken.
pub async fn drain(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    s.handshake_with(l.welcome()).await?;
    s.mail(
        1,
        1,
        one_step("drain-c", "slow", DrainBehavior::Cancel, 5000),
    )
    .await?;
    s.mail(
        2,
        1,
        one_step("drain-w", "approve", DrainBehavior::Wait, WAIT_STEP_MS),
    )
    .await?;
    s.events
        .wait_for(
            "StepStarted(drain-c/slow)",
            EVENT_WITHIN,
            started("drain-c", "slow"),
        )
        .await?;
    let wait_started = s
        .events
        .wait_for(
            "StepStarted(drain-w/approve)",
            EVENT_WITHIN,
            started("drain-w", "approve"),
        )
        .await?;
    s.send(Control::Drain { budget_ms: 10_000 }).await?;
    let drain_sent = Instant::now();
    s.mail(3, 1, payload(json!({"run": "late"}))).await?;

    let cancelled = s
        .events
        .wait_for(
            "StepFinished(drain-c/slow) after the Drain",
            CANCEL_WITHIN + Duration::from_secs(2),
            finished("drain-c", "slow"),
        )
        .await?;
    with_outcome(&cancelled, &Outcome::Cancelled)?;
    let took_ms = cancelled.at.saturating_duration_since(drain_sent);
    ensure(
        took_ms < CANCEL_WITHIN,
        format!(
            "the cancel step to end within {} ms of the Drain",
            CANCEL_WITHIN.as_millis()
        ),
        || format!("{} ms", took_ms.as_millis()),
    )?;

    let waited = s
        .events
        .wait_for(
            "StepFinished(drain-w/approve) (the wait step finishing its time)",
            Duration::from_millis(WAIT_STEP_MS) + EVENT_WITHIN,
            finished("drain-w", "approve"),
        )
        .await?;
    with_outcome(&waited, &Outcome::Succeeded)?;
    let ran = waited.at.saturating_duration_since(wait_started.at);
    ensure(
        ran + EARLY_SLACK >= Duration::from_millis(WAIT_STEP_MS),
        format!("the wait step to run its {WAIT_STEP_MS} ms despite the Drain"),
        || format!("it finished after {} ms", ran.as_millis()),
    )?;
    let done = s.done_word();
    let ack_c = s
        .events
        .wait_for(&format!("{done}(1)"), EVENT_WITHIN, acked(1))
        .await?;
    with_outcome(&ack_c, &Outcome::Cancelled)?;
    let ack_w = s
        .events
        .wait_for(&format!("{done}(2)"), EVENT_WITHIN, acked(2))
        .await?;
    with_outcome(&ack_w, &Outcome::Succeeded)?;
    s.events
        .wait_for("Drained", EVENT_WITHIN, |e| *e == Event::Drained)
        .await?;
    s.events.settle(QUIET_FOR).await;

    let at = |wanted: &dyn Fn(&Event) -> bool| s.events.position(wanted);
    let drained = at(&|e| *e == Event::Drained);
    let last_needed = [
        at(&finished("drain-w", "approve")),
        at(&acked(1)),
        at(&acked(2)),
    ]
    .into_iter()
    .max()
    .flatten();
    ensure(
        drained > last_needed,
        format!("Drained only after StepFinished(drain-w/approve), {done}(1) and {done}(2)"),
        || s.events.summary(),
    )?;
    ensure(
        s.events.count(|e| *e == Event::Drained) == 1,
        "Drained once",
        || s.events.summary(),
    )?;
    ensure(
        s.events.count(took(3)) == 0
            && s.events.count(acked(3)) == 0
            && s.events.count(mail_started(3)) == 0,
        format!(
            "mail 3, sent after the Drain, not taken (no MailStarted, no conformance.took, no {done})"
        ),
        || s.events.summary(),
    )
}

/// A lease renewed before it runs out keeps a cancel step running; once
/// renewals stop, the step is cancelled ≈300 ms after the last lease and
/// mail sent afterwards is not taken.
pub async fn lease_expiry(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    s.handshake_with(l.welcome()).await?;
    s.mail(
        1,
        1,
        one_step("leased", "hold", DrainBehavior::Cancel, 5000),
    )
    .await?;
    s.events
        .wait_for(
            "StepStarted(leased/hold)",
            EVENT_WITHIN,
            started("leased", "hold"),
        )
        .await?;
    for renewal in 1..=RENEWALS {
        s.send(Control::Lease { valid_ms: LEASE_MS }).await?;
        tokio::time::sleep(RENEW_EVERY).await;
        s.events.poll();
        ensure(
            s.events.count(finished("leased", "hold")) == 0,
            format!(
                "a lease of {LEASE_MS} ms renewed every {} ms to keep the step running",
                RENEW_EVERY.as_millis()
            ),
            || format!("after {renewal} leases: {}", s.events.summary()),
        )?;
    }
    s.send(Control::Lease { valid_ms: LEASE_MS }).await?;
    let last_lease = Instant::now();
    let ended = s
        .events
        .wait_for(
            "StepFinished(leased/hold) once the lease ran out",
            EXPIRY_AT_MOST + Duration::from_secs(1),
            finished("leased", "hold"),
        )
        .await?;
    with_outcome(&ended, &Outcome::Cancelled)?;
    let after = ended.at.saturating_duration_since(last_lease);
    ensure(
        (EXPIRY_AT_LEAST..=EXPIRY_AT_MOST).contains(&after),
        format!(
            "the step cancelled {}–{} ms after the last {LEASE_MS} ms lease",
            EXPIRY_AT_LEAST.as_millis(),
            EXPIRY_AT_MOST.as_millis()
        ),
        || format!("{} ms", after.as_millis()),
    )?;
    s.mail(2, 1, payload(json!({"run": "after-lease"}))).await?;
    s.events.settle(QUIET_FOR).await;
    ensure(
        s.events.count(took(2)) == 0
            && s.events.count(acked(2)) == 0
            && s.events.count(mail_started(2)) == 0,
        format!(
            "mail 2, sent after the lease ran out, not taken (no MailStarted, no conformance.took, no {})",
            s.done_word()
        ),
        || s.events.summary(),
    )
}
