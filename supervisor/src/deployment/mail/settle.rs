//! Settling what children did with their mail, in the store: starts and
//! ends (with results) in one transaction, and, whatever ends a child, its
//! unfinished mail replayed: back at the head of the inbox, each item
//! charged one failure unless the supervisor itself is stopping, held as
//! interrupted under `redeliver = "hold"`, and quarantined as dead once it
//! reaches `max_deliveries` (docs/design.md §6).

use std::collections::HashMap;

use tracing::{debug, info};
use wfhost_policy::Fact;
use wfhost_policy::fact::outcome_text;
use wfhost_policy::life::ExitCause;

use super::writes::{Replay, Report};
use crate::clock::unix_ms;
use crate::deployment::child::LiveChild;
use crate::record;
use crate::shared::Shared;
use crate::store::{AckOf, Ending, Holder, Landed, Settle};

/// Why a result cannot be kept, if it cannot: it is over the
/// deployment's `max_result_bytes` (the item then ends failed, naming it).
pub fn result_too_large(cfg: &crate::config::DeploymentConfig, result: &[u8]) -> Option<String> {
    let (len, max) = (result.len() as u64, cfg.max_result_bytes);
    (len > max).then(|| format!("result of {len} bytes exceeds max_result_bytes {max}"))
}

/// The holder of what `child` is sent: its spawn's channel id and pid.
pub fn holder(child: &LiveChild) -> Holder {
    Holder {
        channel_id: child.channel_id.clone(),
        pid: child.pid,
    }
}

/// How a child's wiring ended, for the replay of what it held: every end
/// counts against its mail but the supervisor's own stop (`stopping`: its
/// SIGTERM, SIGQUIT, or a reload that removed the deployment) and a drain
/// the child completed (a recycle or an operator drain it honoured: what
/// it gave back it was asked to give back, so frequent recycles never
/// quarantine innocent mail).
/// With `hold` (`redeliver = "hold"`), a started item is held for an
/// operator whatever ended its child.
pub fn ending(cause: &ExitCause, stopping: bool, hold: bool) -> Ending {
    Ending {
        cause: cause.describe(),
        counts: !stopping && !matches!(cause, ExitCause::Drained(_)),
        at_ms: unix_ms(),
        hold,
    }
}

/// Writes what children reported of the mail they hold (starts,
/// acknowledged mail moved to done, questions, give-backs) in one
/// transaction: for each, what it came to ([`Landed::Ignored`] for a
/// duplicate, stray or late report), or why the store refused them all.
pub async fn write_reports(
    shared: &Shared,
    deployment: &str,
    reports: &[Report],
) -> Result<Vec<Landed>, String> {
    let owner = deployment.to_owned();
    let implied = implied_starts(reports);
    let batch: Vec<Settle> = reports
        .iter()
        .zip(&implied)
        .filter(|(_, by)| by.is_none())
        .map(|(r, _)| match r {
            Report::Started { holder, id } => Settle::Started {
                holder: holder.clone(),
                id: *id,
            },
            Report::Done(a) => Settle::Done(AckOf {
                holder: a.holder.clone(),
                id: a.id,
                outcome: outcome_text(&a.outcome),
                result: a.result.clone(),
            }),
            Report::Asked(q) => Settle::Asked(q.clone()),
            Report::GivenBack { holder, id } => Settle::GivenBack {
                holder: holder.clone(),
                id: *id,
            },
            Report::Unsent { holder, id } => Settle::Unsent {
                holder: holder.clone(),
                id: *id,
            },
        })
        .collect();
    let at = unix_ms();
    let mut written = shared
        .store
        .call_grouped(move |s| s.settle_mail(&owner, &batch, at))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?
        .into_iter();
    // Each report's own; an implied start came to what its ack did.
    let own: Vec<Option<Landed>> = implied
        .iter()
        .map(|by| {
            by.is_none()
                .then(|| written.next().unwrap_or(Landed::Ignored))
        })
        .collect();
    let landed: Vec<Landed> = implied
        .iter()
        .zip(&own)
        .map(|(by, mine)| match (mine, by) {
            (Some(l), _) => l.clone(),
            (None, Some(ack)) => own.get(*ack).cloned().flatten().unwrap_or(Landed::Ignored),
            (None, None) => Landed::Ignored,
        })
        .collect();
    if landed.iter().any(Landed::held) {
        // The store wrote each `mail_done` event with its ack.
        shared.events_written();
    }
    for (r, _) in reports.iter().zip(&landed).filter(|(_, l)| !l.held()) {
        if let Report::Done(a) = r {
            debug!(
                deployment,
                mail = a.id,
                "ack for mail this child does not hold; ignored"
            );
        }
    }
    Ok(landed)
}

/// For each report, the index of the ack that implies it: a start whose
/// next report of the same item, from the same holder, is its ack in the
/// same write. The ack counts the start it implies, so that start is not
/// written on its own (one statement fewer per item from a protocol-3
/// child).
fn implied_starts(reports: &[Report]) -> Vec<Option<usize>> {
    let mut implied = vec![None; reports.len()];
    // Per item, a start not yet followed by another report of it.
    let mut open: HashMap<(&str, u64), usize> = HashMap::new();
    for (i, r) in reports.iter().enumerate() {
        let (holder, id) = match r {
            Report::Done(a) => (&a.holder, a.id),
            Report::Asked(q) => (&q.holder, q.id),
            Report::Started { holder, id }
            | Report::GivenBack { holder, id }
            | Report::Unsent { holder, id } => (holder, *id),
        };
        let item = (holder.channel_id.as_str(), id);
        match (open.remove(&item), r) {
            (Some(start), Report::Done(_)) => implied[start] = Some(i),
            (_, Report::Started { .. }) => {
                open.insert(item, i);
            }
            _ => {}
        }
    }
    implied
}

/// Returns a gone child's unacknowledged mail to the head of the inbox,
/// or quarantines what reached `max_deliveries`: each such item is
/// journaled and published as `mail_dead` and logged with what to do.
pub async fn replay(
    shared: &Shared,
    deployment: &str,
    replay: &Replay,
    max_deliveries: u32,
) -> Result<(), String> {
    let (owner, r) = (deployment.to_owned(), replay.clone());
    let replayed = shared
        .store
        .call(move |s| s.replay_mail(&owner, &r.holder, &r.ending, max_deliveries))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    if replayed.returned > 0 {
        info!(
            deployment,
            pid = replay.holder.pid,
            items = replayed.returned,
            counted = replay.ending.counts,
            "unacknowledged mail returned to the head of the inbox"
        );
    }
    for id in replayed.interrupted {
        let fact = Fact::MailInterrupted {
            id,
            cause: replay.ending.cause.clone(),
            pid: replay.holder.pid,
        };
        record::log(deployment, &fact);
        shared.record(Some(deployment), &fact);
    }
    for dead in replayed.dead {
        let fact = Fact::MailDead {
            id: dead.id,
            failures: dead.failures,
            cause: dead.cause,
            pid: dead.pid,
        };
        record::log(deployment, &fact);
        shared.record(Some(deployment), &fact);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deployment::mail::writes::Ack;
    use wfhost_ipc::Outcome;

    fn holder(n: u32) -> Holder {
        Holder {
            channel_id: format!("{n:032x}"),
            pid: n,
        }
    }

    fn start(h: u32, id: u64) -> Report {
        Report::Started {
            holder: holder(h),
            id,
        }
    }

    fn done(h: u32, id: u64) -> Report {
        Report::Done(Ack {
            holder: holder(h),
            id,
            outcome: Outcome::Succeeded,
            result: Vec::new(),
        })
    }

    #[test]
    fn a_start_is_implied_only_by_its_own_next_report_being_its_ack() {
        let reports = [
            start(1, 1),
            start(1, 2),
            done(1, 1),
            // Another report of item 2 between its start and its ack.
            Report::GivenBack {
                holder: holder(1),
                id: 2,
            },
            done(1, 2),
            // Acked by another holder: not this start's ack.
            start(2, 3),
            done(1, 3),
            // An ack before the start implies nothing.
            done(1, 4),
            start(1, 4),
        ];
        assert_eq!(
            implied_starts(&reports),
            [Some(2), None, None, None, None, None, None, None, None]
        );
    }
}
