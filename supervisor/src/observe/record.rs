//! The log line of each fact, so every journaled or published fact is
//! also one plain line in the log, with the deployment first.

use tracing::{debug, error, info, warn};
use wfhost_policy::fact::outcome_text;
use wfhost_policy::life::ExitCause;
use wfhost_policy::{Fact, format_duration};

/// Logs `fact` about `deployment` at the level it deserves.
pub fn log(deployment: &str, fact: &Fact) {
    match fact {
        Fact::Spawned { pid, channel_id } => {
            info!(deployment, pid, channel = %channel_id, "spawned")
        }
        Fact::Ready { pid, channel_id } => info!(deployment, pid, channel = %channel_id, "ready"),
        Fact::Exited { pid, cause, .. } => match cause {
            ExitCause::Stopped(_) | ExitCause::Drained(_) => {
                info!(deployment, pid, reason = %cause.describe(), "stopped")
            }
            _ => warn!(deployment, pid, reason = %cause.describe(), "child ended"),
        },
        Fact::Restarting { attempt, delay, .. } => {
            info!(deployment, delay = %format_duration(*delay), attempt, "restarting")
        }
        Fact::RecycleDelayed { delay, attempt } => {
            warn!(deployment, delay = %format_duration(*delay), attempt,
                "the child asks to be recycled again and again; its successor waits")
        }
        Fact::Failed {
            restarts,
            period,
            last,
        } => error!(deployment, restarts, period = %format_duration(*period), last = %last,
            "too many restarts within the period; deployment failed and will not be restarted until `wfhost resume`"),
        Fact::DrainStarted { .. } => {}
        Fact::DrainPaused { used } => {
            debug!(deployment, used = %format_duration(*used), "drain budget paused: only wait steps in flight")
        }
        Fact::DrainResumed { used } => {
            debug!(deployment, used = %format_duration(*used), "drain budget running again")
        }
        Fact::DrainEscalated { .. } => {}
        Fact::DrainEnded { purpose, why, used } => {
            debug!(deployment, purpose = purpose.as_str(), why, used = %format_duration(*used), "drain ended")
        }
        Fact::ChildDrained { pid } => debug!(deployment, pid, "the child reported Drained"),
        Fact::Drained { .. } => info!(
            deployment,
            "drained; it stays drained until `wfhost resume`"
        ),
        Fact::Resumed { from } => info!(deployment, from, "resumed by an operator"),
        Fact::CancelCommitted { .. } => {}
        Fact::Recycled {
            cause,
            reason,
            old_pid,
            new_pid,
            ..
        } => {
            let old = old_pid.map_or_else(|| "none".to_owned(), |p| p.to_string());
            info!(deployment, origin = cause.origin(), reason = %reason, old_pid = %old, new_pid, "recycled")
        }
        Fact::RecycleRefused {
            pid,
            cause,
            reason,
            error,
        } => error!(deployment, pid, origin = cause.origin(), reason = %reason, error = %error,
            "recycle refused: a new child could not start; the old one keeps serving"),
        Fact::StepStarted { .. } | Fact::StepFinished { .. } | Fact::Custom { .. } => {}
        Fact::RunTerminal { run, outcome } => {
            debug!(deployment, run = %run, outcome = %outcome_text(outcome), "run ended")
        }
        Fact::EventsSuppressed { dropped } => {
            warn!(
                deployment,
                dropped,
                "the child reports faster than the event log takes; some of its step and custom events were left out"
            )
        }
        Fact::MailAccepted { .. } | Fact::MailDone { .. } => {}
        Fact::MailDead {
            id,
            failures,
            cause,
            pid,
        } => warn!(deployment, mail = id, failures, pid, cause = %cause,
            "mail quarantined as dead: every child that took it ended before acknowledging it; \
             see it with `wfhost mail show {id}`, and once the child is fixed deliver it again with `wfhost mail retry {id}`"),
        Fact::MailRetried { ids, by } => {
            info!(deployment, items = ids.len(), by = %by, "dead mail retried: back at the head of the inbox")
        }
        Fact::MailPurged { count, by, .. } => {
            info!(deployment, items = count, by = %by, "dead mail purged")
        }
        Fact::LeaseAcquired {
            host,
            epoch,
            how,
            from,
        } => {
            info!(deployment, host = %host, epoch, how, from = %from.as_deref().unwrap_or("-"), "lease acquired; running it here")
        }
        Fact::LeaseLost { host, epoch, why } => {
            warn!(deployment, host = %host, epoch, why = %why, "lease lost; its children were killed and nothing more is written for it here")
        }
        Fact::LeaseReleased {
            host,
            epoch,
            why,
            to,
        } => {
            info!(deployment, host = %host, epoch, why, to = %to.as_deref().unwrap_or("any host"), "lease released")
        }
        Fact::ConfigReloaded { .. } => {}
    }
}
