//! `ping-during-cancel-step` and `ping-during-wait-step`.

use std::time::Duration;

use tokio::time::Instant;
use wfhost_ipc::{Control, DrainBehavior, Event};

use super::{EVENT_WITHIN, one_step};
use crate::events::{finished, started};
use crate::failure::{Failure, ensure};
use crate::subject::{Launcher, Subject};

/// Pings sent while the step runs.
const PINGS: u64 = 5;
/// The longest median round trip allowed.
const MEDIAN_AT_MOST: Duration = Duration::from_millis(100);
/// How long one Pong may take before the scenario gives up on it.
const PONG_WITHIN: Duration = Duration::from_secs(2);
/// Pause between pings.
const BETWEEN: Duration = Duration::from_millis(20);
/// How long the step runs: longer than the pings take.
const STEP_MS: u64 = 3000;

/// While one step of `drain` behaviour runs, 5 pings are each answered, the
/// median within 100 ms.
pub async fn ping_during_step(
    s: &mut Subject,
    l: &Launcher,
    drain: DrainBehavior,
) -> Result<(), Failure> {
    s.handshake_with(l.welcome()).await?;
    s.mail(1, 1, one_step("ping", "hold", drain, STEP_MS))
        .await?;
    s.events
        .wait_for(
            "StepStarted(ping/hold)",
            EVENT_WITHIN,
            started("ping", "hold"),
        )
        .await?;
    let mut round_trips = Vec::new();
    for nonce in 1..=PINGS {
        let sent = Instant::now();
        s.send(Control::Ping { nonce }).await?;
        let pong = s
            .events
            .wait_for(&format!("Pong({nonce})"), PONG_WITHIN, |e| {
                *e == Event::Pong { nonce }
            })
            .await?;
        round_trips.push(pong.at.saturating_duration_since(sent));
        tokio::time::sleep(BETWEEN).await;
    }
    s.events.poll();
    ensure(
        s.events.count(finished("ping", "hold")) == 0,
        format!(
            "the {} step to run on while the pings were answered",
            drain.as_str()
        ),
        || s.events.summary(),
    )?;
    round_trips.sort_unstable();
    let median = round_trips[round_trips.len() / 2];
    ensure(
        median <= MEDIAN_AT_MOST,
        format!(
            "a median Ping→Pong round trip of at most {} ms",
            MEDIAN_AT_MOST.as_millis()
        ),
        || {
            let all: Vec<String> = round_trips
                .iter()
                .map(|d| format!("{:.1}", d.as_secs_f64() * 1000.0))
                .collect();
            format!(
                "{:.1} ms (all, ms: {})",
                median.as_secs_f64() * 1000.0,
                all.join(", ")
            )
        },
    )
}
