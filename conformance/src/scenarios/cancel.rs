//! `signed-cancel` and the `forged-cancel-*` scenarios.

use std::time::Duration;

use wfhost_ipc::{Control, DrainBehavior, Event, Outcome};

use super::{EVENT_WITHIN, QUIET_FOR, one_step};
use crate::events::{acked, describe, finished, outcome_of, started, terminal};
use crate::failure::{Failure, ensure};
use crate::forgery::{self, Forgery, RUN_IN_FLIGHT};
use crate::subject::{Launcher, Subject};

/// How soon after a valid cancel its run must be over.
const CANCELLED_WITHIN: Duration = Duration::from_secs(2);
/// How long the step under a forged cancel runs.
const GUARDED_MS: u64 = 1500;

/// Waits for the event `wanted` matches and fails unless it carries
/// `outcome`.
pub(super) async fn expect_outcome(
    s: &mut Subject,
    what: &str,
    within: Duration,
    wanted: impl Fn(&Event) -> bool,
    outcome: &Outcome,
) -> Result<(), Failure> {
    let seen = s.events.wait_for(what, within, wanted).await?;
    ensure(
        outcome_of(&seen.event) == Some(outcome),
        format!("{what} with outcome {outcome:?}"),
        || describe(&seen.event),
    )
}

/// Expects the whole end of an item's run: its step, its run and its mail,
/// all with `outcome`.
pub(super) async fn expect_item_end(
    s: &mut Subject,
    id: u64,
    run: &str,
    step: &str,
    within: Duration,
    outcome: &Outcome,
) -> Result<(), Failure> {
    expect_outcome(
        s,
        &format!("StepFinished({run}/{step})"),
        within,
        finished(run, step),
        outcome,
    )
    .await?;
    expect_outcome(
        s,
        &format!("RunTerminal({run})"),
        EVENT_WITHIN,
        terminal(run),
        outcome,
    )
    .await?;
    let done = format!("{}({id})", s.done_word());
    expect_outcome(s, &done, EVENT_WITHIN, acked(id), outcome).await
}

/// A valid signed cancel of the run in flight cancels it (its step, then
/// one RunTerminal, then the ack, all Cancelled); so does a cancel of every
/// run, whatever the steps' drain behaviour.
pub async fn signed_cancel(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    s.handshake_with(l.welcome()).await?;
    s.mail(
        1,
        1,
        one_step("victim", "long", DrainBehavior::Cancel, 5000),
    )
    .await?;
    s.events
        .wait_for(
            "StepStarted(victim/long)",
            EVENT_WITHIN,
            started("victim", "long"),
        )
        .await?;
    let cancel = forgery::honest(l.key(), l.deployment(), Some("victim"));
    s.send(Control::Cancel(cancel)).await?;
    expect_item_end(
        s,
        1,
        "victim",
        "long",
        CANCELLED_WITHIN,
        &Outcome::Cancelled,
    )
    .await?;

    s.mail(
        2,
        1,
        one_step("all-a", "approve", DrainBehavior::Wait, 5000),
    )
    .await?;
    s.mail(
        3,
        1,
        one_step("all-b", "fetch", DrainBehavior::Cancel, 5000),
    )
    .await?;
    for (run, step) in [("all-a", "approve"), ("all-b", "fetch")] {
        s.events
            .wait_for(
                &format!("StepStarted({run}/{step})"),
                EVENT_WITHIN,
                started(run, step),
            )
            .await?;
    }
    let every_run = forgery::honest(l.key(), l.deployment(), None);
    s.send(Control::Cancel(every_run)).await?;
    expect_item_end(
        s,
        2,
        "all-a",
        "approve",
        CANCELLED_WITHIN,
        &Outcome::Cancelled,
    )
    .await?;
    expect_item_end(
        s,
        3,
        "all-b",
        "fetch",
        CANCELLED_WITHIN,
        &Outcome::Cancelled,
    )
    .await?;
    s.events.settle(QUIET_FOR).await;
    for run in ["victim", "all-a", "all-b"] {
        ensure(
            s.events.count(terminal(run)) == 1,
            format!("one RunTerminal({run})"),
            || s.events.summary(),
        )?;
    }
    Ok(())
}

/// A forged cancel sent while a 1.5 s cancel step runs is refused: the step
/// finishes Succeeded and nothing is cancelled.
pub async fn forged_cancel(s: &mut Subject, l: &Launcher, forgery: Forgery) -> Result<(), Failure> {
    s.handshake_with(l.welcome()).await?;
    s.mail(
        1,
        1,
        one_step(RUN_IN_FLIGHT, "guarded", DrainBehavior::Cancel, GUARDED_MS),
    )
    .await?;
    s.events
        .wait_for(
            "StepStarted(target/guarded)",
            EVENT_WITHIN,
            started(RUN_IN_FLIGHT, "guarded"),
        )
        .await?;
    s.send(Control::Cancel(forgery.build(l.key(), l.deployment())))
        .await?;
    let within = Duration::from_millis(GUARDED_MS) + EVENT_WITHIN;
    let refused =
        expect_item_end(s, 1, RUN_IN_FLIGHT, "guarded", within, &Outcome::Succeeded).await;
    refused.map_err(|f| {
        Failure::new(
            format!("{} to be refused: {}", forgery.describe(), f.expected),
            f.got,
        )
    })?;
    s.events.settle(QUIET_FOR).await;
    ensure(
        s.events
            .count(|e| outcome_of(e) == Some(&Outcome::Cancelled))
            == 0,
        format!("nothing cancelled by {}", forgery.describe()),
        || s.events.summary(),
    )
}
