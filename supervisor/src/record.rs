//! The log line of each fact, so every journaled or published fact is
//! also one plain line in the log, with the deployment first.

use std::time::Duration;

use tracing::{debug, error, info, warn};
use wfhost_policy::fact::outcome_text;
use wfhost_policy::life::{ExitCause, RecycleCause};
use wfhost_policy::{Fact, format_duration};

/// Logs `fact` about `deployment` at the level it deserves.
pub fn log(deployment: &str, fact: &Fact) {
    // One arm per fact, each a line or a call: the vocabulary's log lines
    // read as one table.
    match fact {
        Fact::Spawned { pid, channel_id } => {
            info!(deployment, pid, channel = %channel_id, "spawned")
        }
        Fact::Ready { pid, channel_id } => info!(deployment, pid, channel = %channel_id, "ready"),
        Fact::Exited { pid, cause, .. } => exited(deployment, *pid, cause),
        Fact::Restarting { attempt, delay, .. } => {
            info!(deployment, delay = %format_duration(*delay), attempt, "restarting")
        }
        Fact::RecycleDelayed { delay, attempt } => recycle_delayed(deployment, *delay, *attempt),
        Fact::Failed {
            restarts,
            period,
            last,
        } => failed(deployment, *restarts, *period, last),
        Fact::DrainStarted { .. } => {}
        Fact::DrainPaused { used } => {
            debug!(deployment, used = %format_duration(*used), "drain budget paused: only wait steps in flight")
        }
        Fact::DrainResumed { used } => {
            debug!(deployment, used = %format_duration(*used), "drain budget running again")
        }
        Fact::DrainEscalated { .. } => {}
        Fact::DrainEnded { purpose, why, used } => {
            debug!(deployment, purpose = purpose.as_str(), why = why.as_str(), used = %format_duration(*used), "drain ended")
        }
        Fact::ChildDrained { pid } => debug!(deployment, pid, "the child reported Drained"),
        Fact::Drained { .. } => drained(deployment),
        Fact::Resumed { from } => info!(deployment, from, "resumed by an operator"),
        Fact::CancelCommitted { .. } => {}
        Fact::Recycled {
            cause,
            reason,
            old_pid,
            new_pid,
            ..
        } => recycled(deployment, cause, reason, *old_pid, *new_pid),
        Fact::RecycleRefused {
            pid,
            cause,
            reason,
            error,
        } => recycle_refused(deployment, *pid, cause, reason, error),
        Fact::StepStarted { .. } | Fact::StepFinished { .. } | Fact::Custom { .. } => {}
        Fact::RunTerminal { run, outcome } => {
            debug!(deployment, run = %run, outcome = %outcome_text(outcome), "run ended")
        }
        Fact::EventsSuppressed { dropped } => events_suppressed(deployment, *dropped),
        Fact::MailAccepted { .. } | Fact::MailDone { .. } => {}
        Fact::MailDead {
            id,
            failures,
            cause,
            pid,
        } => mail_dead(deployment, *id, *failures, cause, *pid),
        Fact::MailInterrupted { id, cause, pid } => warn!(
            deployment, mail = id, pid, cause = %cause,
            "a started item's child ended before it did: held for an operator (redeliver = \"hold\"); \
             `wfhost mail show {id}`, then `wfhost mail retry {id}` runs it again or `wfhost mail cancel {id}` ends it"
        ),
        Fact::MailRetried { ids, by } => mail_retried(deployment, ids.len(), by),
        Fact::MailDelivered { .. } | Fact::MailProgress { .. } => {}
        Fact::QuestionAsked { id, key, .. } => info!(
            deployment, mail = id, key = %key,
            "a handler asks a person: `wfhost questions` lists it, `wfhost answer {id} {key} VALUE` answers it"
        ),
        Fact::QuestionAnswered { id, key, by, .. } => {
            info!(deployment, mail = id, key = %key, by = %by, "question answered")
        }
        Fact::MailGivenBack { id, pid, .. } => debug!(
            deployment,
            mail = id,
            pid,
            "item given back while its handler waits for an answer; delivered again once answered"
        ),
        Fact::MailPurged { count, by, .. } => {
            info!(deployment, items = count, by = %by, "dead mail purged")
        }
        Fact::LeaseAcquired {
            host,
            epoch,
            how,
            from,
        } => lease_acquired(deployment, host, *epoch, how, from.as_deref()),
        Fact::LeaseLost { host, epoch, why } => lease_lost(deployment, host, *epoch, why),
        Fact::LeaseReleased {
            host,
            epoch,
            why,
            to,
        } => lease_released(deployment, host, *epoch, why, to.as_deref()),
        Fact::HostMaintenance { host, action, by } => {
            info!(host = %host, action, by = %by, "fleet host maintenance")
        }
        Fact::ConfigReloaded { .. } => {}
    }
}

/// A child ended: as asked (stopped, drained), or not.
fn exited(deployment: &str, pid: u32, cause: &ExitCause) {
    match cause {
        ExitCause::Stopped(_) | ExitCause::Drained(_) => {
            info!(deployment, pid, reason = %cause.describe(), "stopped")
        }
        _ => warn!(deployment, pid, reason = %cause.describe(), "child ended"),
    }
}

/// A child that keeps asking to be recycled waits for its successor.
fn recycle_delayed(deployment: &str, delay: Duration, attempt: u32) {
    warn!(deployment, delay = %format_duration(delay), attempt,
        "the child asks to be recycled again and again; its successor waits")
}

/// Too many restarts: the deployment stays down until resumed.
fn failed(deployment: &str, restarts: u32, period: Duration, last: &str) {
    error!(deployment, restarts, period = %format_duration(period), last = %last,
        "too many restarts within the period; deployment failed and will not be restarted until `wfhost resume`")
}

/// Drained for good, until resumed.
fn drained(deployment: &str) {
    info!(
        deployment,
        "drained; it stays drained until `wfhost resume`"
    )
}

/// A recycle went through: which pid replaced which, and why.
fn recycled(
    deployment: &str,
    cause: &RecycleCause,
    reason: &str,
    old_pid: Option<u32>,
    new_pid: u32,
) {
    let old = old_pid.map_or_else(|| "none".to_owned(), |p| p.to_string());
    info!(deployment, origin = cause.origin(), reason = %reason, old_pid = %old, new_pid, "recycled")
}

/// A recycle whose new child could not start: the old one keeps serving.
fn recycle_refused(deployment: &str, pid: u32, cause: &RecycleCause, reason: &str, error: &str) {
    error!(deployment, pid, origin = cause.origin(), reason = %reason, error = %error,
        "recycle refused: a new child could not start; the old one keeps serving")
}

/// The child reports faster than the event log takes.
fn events_suppressed(deployment: &str, dropped: u64) {
    warn!(
        deployment,
        dropped,
        "the child reports faster than the event log takes; some of its step and custom events were left out"
    )
}

/// Mail quarantined as dead, with the commands to see and retry it.
fn mail_dead(deployment: &str, id: u64, failures: u32, cause: &str, pid: u32) {
    warn!(deployment, mail = id, failures, pid, cause = %cause,
        "mail quarantined as dead: every child that took it ended before acknowledging it; \
         see it with `wfhost mail show {id}`, and once the child is fixed deliver it again with `wfhost mail retry {id}`")
}

/// Dead mail put back at the head of the inbox by an operator.
fn mail_retried(deployment: &str, items: usize, by: &str) {
    info!(deployment, items, by = %by, "dead mail retried: back at the head of the inbox")
}

/// This host took a lease and runs its deployment.
fn lease_acquired(deployment: &str, host: &str, epoch: u64, how: &str, from: Option<&str>) {
    info!(deployment, host = %host, epoch, how, from = %from.unwrap_or("-"), "lease acquired; running it here")
}

/// This host lost a lease: nothing more is written for it here.
fn lease_lost(deployment: &str, host: &str, epoch: u64, why: &str) {
    warn!(deployment, host = %host, epoch, why = %why, "lease lost; its children were killed and nothing more is written for it here")
}

/// This host let a lease go, to a named host or to any.
fn lease_released(deployment: &str, host: &str, epoch: u64, why: &str, to: Option<&str>) {
    info!(deployment, host = %host, epoch, why, to = %to.unwrap_or("any host"), "lease released")
}
