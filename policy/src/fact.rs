//! The vocabulary of facts: everything the supervisor journals or publishes
//! on the event log, each with its one name and its body, in one place.
//! `wfhost events` and `wfhost journal show` users depend on these names
//! and bodies (docs/design.md lists each with an example): add to them,
//! never rename.
//!
//! A fact is *journaled* (a signed, chained journal record) when it is a
//! decision an auditor must be able to prove afterwards: spawns and exits,
//! restarts and failures, drains, cancels, recycles, resumes, reloads,
//! quarantined mail and what operators did with it.
//! Every fact, journaled or not, is also published on the event log under
//! the same name.

mod body;

use std::time::Duration;

use serde_json::{Value, json};
use wfhost_ipc::{DrainBehavior, Outcome};

use crate::drain::{BudgetTurn, DrainEnd, DrainPurpose};
use crate::exit::ExitCause;
use crate::recycle::RecycleCause;
use body::{cancel_committed, config_reloaded, drain_started, exited, ms, recycled};

/// One thing that happened, with what an observer needs to know of it.
#[derive(Debug, Clone, PartialEq)]
pub enum Fact {
    /// A child was spawned.
    Spawned {
        /// Its pid.
        pid: u32,
        /// Its channel id.
        channel_id: String,
    },
    /// A child completed its handshake and takes work.
    Ready {
        /// Its pid.
        pid: u32,
        /// Its channel id.
        channel_id: String,
    },
    /// A child's wiring ended (it was reaped, or never started).
    Exited {
        /// Its pid.
        pid: u32,
        /// Its channel id.
        channel_id: String,
        /// Why.
        cause: ExitCause,
    },
    /// A child that ended unexpectedly is restarted after a delay.
    Restarting {
        /// Which restart of the current crash streak, from 1.
        attempt: u32,
        /// The delay before the spawn.
        delay: Duration,
        /// How the last child ended.
        after: String,
    },
    /// A child that keeps asking to be recycled gets its successor after a
    /// delay, as a crashing child would.
    RecycleDelayed {
        /// The delay before the successor is spawned.
        delay: Duration,
        /// Which quick self-recycle in a row this is, from 1.
        attempt: u32,
    },
    /// Too many restarts within the period: not restarted until resumed.
    Failed {
        /// Restarts within the period, had this one been granted.
        restarts: u32,
        /// The period.
        period: Duration,
        /// How the last child ended.
        last: String,
    },
    /// A child was told to drain.
    DrainStarted {
        /// The child.
        pid: u32,
        /// Why.
        purpose: DrainPurpose,
        /// Its budget.
        budget: Duration,
        /// For a recycle: who asked and why.
        recycle: Option<(RecycleCause, String)>,
    },
    /// The drain budget paused: no cancel-behaviour step is in flight (only
    /// wait-behaviour steps, or none).
    DrainPaused {
        /// Budget used so far.
        used: Duration,
    },
    /// The drain budget runs again: a cancel-behaviour step is in flight.
    DrainResumed {
        /// Budget used so far.
        used: Duration,
    },
    /// The budget ran out: these runs get a signed cancel.
    DrainEscalated {
        /// The runs with cancel-behaviour work when it ran out.
        runs: Vec<String>,
        /// The budget.
        budget: Duration,
    },
    /// A drain ended, however it ended.
    DrainEnded {
        /// Why it had started.
        purpose: DrainPurpose,
        /// How it ended.
        why: DrainEnd,
        /// Budget used.
        used: Duration,
    },
    /// The child reported `Drained`: nothing is left the drain waits for.
    ChildDrained {
        /// The child.
        pid: u32,
    },
    /// The deployment stays drained (an operator drain completed).
    Drained {
        /// The child that drained, if there was one.
        pid: Option<u32>,
    },
    /// An operator resumed a drained or failed deployment.
    Resumed {
        /// The phase it was in.
        from: &'static str,
    },
    /// A signed cancel was committed to the journal (and is then sent).
    CancelCommitted {
        /// The signed request, as journaled.
        cancel: Value,
        /// Its journal record, once known (the published event has it).
        journal_seq: Option<u64>,
    },
    /// A recycle completed: the new child is ready.
    Recycled {
        /// Who asked.
        cause: RecycleCause,
        /// Why.
        reason: String,
        /// The old child.
        old_pid: Option<u32>,
        /// The new child.
        new_pid: u32,
        /// The old child's channel.
        old_channel_id: Option<String>,
        /// The new child's channel.
        new_channel_id: String,
    },
    /// A recycle was refused: no new child could start now, the old one
    /// keeps serving.
    RecycleRefused {
        /// The child that keeps serving.
        pid: u32,
        /// Who asked.
        cause: RecycleCause,
        /// Why they asked.
        reason: String,
        /// Why it was refused.
        error: String,
    },
    /// A step of a run began.
    StepStarted {
        /// The run.
        run: String,
        /// The step.
        step: String,
        /// Its drain behaviour.
        drain: DrainBehavior,
    },
    /// A step of a run ended.
    StepFinished {
        /// The run.
        run: String,
        /// The step.
        step: String,
        /// How.
        outcome: Outcome,
    },
    /// A run reached a terminal state.
    RunTerminal {
        /// The run.
        run: String,
        /// How.
        outcome: Outcome,
    },
    /// An application-defined event from the child.
    Custom {
        /// Its kind.
        kind: String,
        /// How many bytes it carried.
        bytes: usize,
    },
    /// A child published more steps, runs and custom events than the rate
    /// allows: this many were left out of the event log (counted, not lost
    /// from the child's bookkeeping).
    EventsSuppressed {
        /// How many.
        dropped: u64,
    },
    /// Mail was accepted into the inbox (written with the mail itself).
    MailAccepted {
        /// The mail's id.
        id: u64,
    },
    /// Mail was acknowledged (written with the acknowledgement).
    MailDone {
        /// The mail's id.
        id: u64,
        /// How processing ended.
        outcome: String,
    },
    /// Mail that failed `max_deliveries` deliveries was quarantined: moved
    /// to the dead state instead of being delivered again.
    MailDead {
        /// The mail's id.
        id: u64,
        /// How many deliveries failed.
        failures: u32,
        /// How the last holder ended (an exit cause, e.g. "killed by signal 9").
        cause: String,
        /// The last holder's pid.
        pid: u32,
    },
    /// A started item whose child ended before it did was held for an
    /// operator (`redeliver = "hold"`) instead of delivered again.
    MailInterrupted {
        /// The mail's id.
        id: u64,
        /// How its holder ended.
        cause: String,
        /// The holder's pid.
        pid: u32,
    },
    /// An item was handed to a child (its `attempt` if its handler starts
    /// it).
    MailDelivered {
        /// The mail's id.
        id: u64,
        /// The attempt it is, or becomes once its handler starts it.
        attempt: u32,
        /// The child's pid.
        pid: u32,
    },
    /// An item's handler asked a person a question (first asked: a
    /// redelivered item asking again opens none).
    QuestionAsked {
        /// The mail's id.
        id: u64,
        /// The question's key within the item.
        key: String,
        /// What it asked (JSON).
        prompt: Value,
    },
    /// A person answered an item's question.
    QuestionAnswered {
        /// The mail's id.
        id: u64,
        /// The question's key.
        key: String,
        /// The answer (JSON).
        value: Value,
        /// Who answered: `uid`, `user` (peer credentials), `label` (`--by`).
        by: Value,
    },
    /// An item's handler reported progress.
    MailProgress {
        /// The mail's id.
        id: u64,
        /// What it reported (JSON).
        data: Value,
    },
    /// A child gave an item back while its handler waited for an answer:
    /// back in the inbox, uncounted, delivered again once answered.
    MailGivenBack {
        /// The mail's id.
        id: u64,
        /// The child's pid.
        pid: u32,
    },
    /// An operator put dead mail back in the inbox (`wfhost mail retry`),
    /// its failures and attempts reset.
    MailRetried {
        /// The items, ascending.
        ids: Vec<u64>,
        /// Who asked: the control-socket peer's user.
        by: String,
    },
    /// An operator deleted dead mail (`wfhost mail purge --dead`).
    MailPurged {
        /// How many items went.
        count: u64,
        /// Only mail dead for longer than this went (none: all of it).
        older_than: Option<Duration>,
        /// Who asked: the control-socket peer's user.
        by: String,
    },
    /// A fleet host took a deployment's lease (DESIGN §10b): it runs the
    /// deployment from now on, and writes for it at this epoch.
    LeaseAcquired {
        /// The host.
        host: String,
        /// The lease's new epoch.
        epoch: u64,
        /// How it was free: `unowned`, `released`, `expired`, `stale`.
        how: &'static str,
        /// Who held it before, if anyone.
        from: Option<String>,
    },
    /// A fleet host lost a deployment's lease: its children were killed at
    /// once and it writes nothing more for it.
    LeaseLost {
        /// The host.
        host: String,
        /// The epoch it held.
        epoch: u64,
        /// Why.
        why: String,
    },
    /// A fleet host released a deployment's lease once its child was
    /// stopped (a graceful stop, a shed, a move), so another takes it at once.
    LeaseReleased {
        /// The host.
        host: String,
        /// The epoch it held.
        epoch: u64,
        /// Why: `stop`, `shed`, `move`, `removed`, `drain` (`host drain`).
        why: &'static str,
        /// The host it was handed to (`wfhost move`), if any.
        to: Option<String>,
    },
    /// An operator drained a fleet host (it hands every deployment to the
    /// others and takes none) or resumed it (`wfhost host drain|resume`).
    HostMaintenance {
        /// The host drained or resumed.
        host: String,
        /// `drain` or `resume`.
        action: &'static str,
        /// Who asked: the client's uid and user, and the host it asked.
        by: String,
    },
    /// The configuration was reloaded, or a reload refused.
    ConfigReloaded {
        /// Whether the new file was taken.
        accepted: bool,
        /// Deployments started.
        added: Vec<String>,
        /// Deployments stopped.
        removed: Vec<String>,
        /// Deployments recycled onto their new settings.
        changed: Vec<String>,
        /// `[supervisor]` settings applied, each `key old → new`.
        settings: Vec<String>,
        /// Why the file was refused.
        error: Option<String>,
    },
}

/// The outcome as bodies and done mail show it.
pub fn outcome_text(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Succeeded => "succeeded".into(),
        Outcome::Failed(why) => format!("failed: {why}"),
        Outcome::Cancelled => "cancelled".into(),
    }
}

impl Fact {
    /// The fact's one name, in the journal and on the event log.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Spawned { .. } => "spawned",
            Self::Ready { .. } => "ready",
            Self::Exited { .. } => "exited",
            Self::Restarting { .. } => "restarting",
            Self::RecycleDelayed { .. } => "recycle_delayed",
            Self::Failed { .. } => "failed",
            Self::DrainStarted { .. } => "drain_started",
            Self::DrainPaused { .. } => "drain_paused",
            Self::DrainResumed { .. } => "drain_resumed",
            Self::DrainEscalated { .. } => "drain_escalated",
            Self::DrainEnded { .. } => "drain_ended",
            Self::ChildDrained { .. } => "child_drained",
            Self::Drained { .. } => "drained",
            Self::Resumed { .. } => "resumed",
            Self::CancelCommitted { .. } => "cancel_committed",
            Self::Recycled { .. } => "recycled",
            Self::RecycleRefused { .. } => "recycle_refused",
            Self::StepStarted { .. } => "step_started",
            Self::StepFinished { .. } => "step_finished",
            Self::RunTerminal { .. } => "run_terminal",
            Self::Custom { .. } => "custom",
            Self::EventsSuppressed { .. } => "events_suppressed",
            Self::MailAccepted { .. } => "mail_accepted",
            Self::MailDone { .. } => "mail_done",
            Self::MailDead { .. } => "mail_dead",
            Self::MailInterrupted { .. } => "mail_interrupted",
            Self::LeaseAcquired { .. } => "lease_acquired",
            Self::LeaseLost { .. } => "lease_lost",
            Self::LeaseReleased { .. } => "lease_released",
            Self::HostMaintenance { .. } => "host_maintenance",
            Self::MailRetried { .. } => "mail_retried",
            Self::MailDelivered { .. } => "mail_delivered",
            Self::QuestionAsked { .. } => "question_asked",
            Self::QuestionAnswered { .. } => "question_answered",
            Self::MailProgress { .. } => "mail_progress",
            Self::MailGivenBack { .. } => "mail_given_back",
            Self::MailPurged { .. } => "mail_purged",
            Self::ConfigReloaded { .. } => "config_reloaded",
        }
    }

    /// Whether the fact is also a signed journal record.
    pub fn journaled(&self) -> bool {
        matches!(
            self,
            Self::Spawned { .. }
                | Self::Exited { .. }
                | Self::Restarting { .. }
                | Self::Failed { .. }
                | Self::DrainStarted { .. }
                | Self::Drained { .. }
                | Self::Resumed { .. }
                | Self::CancelCommitted { .. }
                | Self::Recycled { .. }
                | Self::MailDead { .. }
                | Self::MailInterrupted { .. }
                | Self::QuestionAsked { .. }
                | Self::QuestionAnswered { .. }
                | Self::LeaseAcquired { .. }
                | Self::LeaseLost { .. }
                | Self::LeaseReleased { .. }
                | Self::HostMaintenance { .. }
                | Self::MailRetried { .. }
                | Self::MailPurged { .. }
                | Self::ConfigReloaded { .. }
        )
    }

    /// The body, as journaled and published.
    pub fn body(&self) -> Value {
        // One arm per fact, each a `json!` or a call: the vocabulary's
        // bodies read as one table.
        match self {
            Self::Spawned { pid, channel_id } | Self::Ready { pid, channel_id } => {
                json!({"pid": pid, "channel_id": channel_id})
            }
            Self::Exited {
                pid,
                channel_id,
                cause,
            } => exited(*pid, channel_id, cause),
            Self::Restarting {
                attempt,
                delay,
                after,
            } => json!({"attempt": attempt, "delay_ms": ms(*delay), "after": after}),
            Self::RecycleDelayed { delay, attempt } => {
                json!({"delay_ms": ms(*delay), "attempt": attempt})
            }
            Self::Failed {
                restarts,
                period,
                last,
            } => json!({"restarts": restarts, "period_ms": ms(*period), "last": last}),
            Self::DrainStarted {
                pid,
                purpose,
                budget,
                recycle,
            } => drain_started(*pid, *purpose, *budget, recycle.as_ref()),
            Self::DrainPaused { used } | Self::DrainResumed { used } => {
                json!({"used_ms": ms(*used)})
            }
            Self::DrainEscalated { runs, budget } => {
                json!({"runs": runs, "budget_ms": ms(*budget)})
            }
            Self::DrainEnded { purpose, why, used } => {
                json!({"purpose": purpose.as_str(), "why": why.as_str(), "used_ms": ms(*used)})
            }
            Self::ChildDrained { pid } => json!({"pid": pid}),
            Self::Drained { pid } => json!({"pid": pid}),
            Self::Resumed { from } => json!({"from": from}),
            Self::CancelCommitted {
                cancel,
                journal_seq,
            } => cancel_committed(cancel, *journal_seq),
            Self::Recycled {
                cause,
                reason,
                old_pid,
                new_pid,
                old_channel_id,
                new_channel_id,
            } => recycled(
                cause,
                reason,
                *old_pid,
                *new_pid,
                old_channel_id.as_deref(),
                new_channel_id,
            ),
            Self::RecycleRefused {
                pid,
                cause,
                reason,
                error,
            } => json!({"pid": pid, "origin": cause.origin(), "reason": reason, "error": error}),
            Self::StepStarted { run, step, drain } => {
                json!({"run": run, "step": step, "drain": drain.as_str()})
            }
            Self::StepFinished { run, step, outcome } => {
                json!({"run": run, "step": step, "outcome": outcome_text(outcome)})
            }
            Self::RunTerminal { run, outcome } => {
                json!({"run": run, "outcome": outcome_text(outcome)})
            }
            Self::Custom { kind, bytes } => json!({"kind": kind, "bytes": bytes}),
            Self::EventsSuppressed { dropped } => json!({"dropped": dropped}),
            Self::MailAccepted { id } => json!({"id": id}),
            Self::MailDone { id, outcome } => json!({"id": id, "outcome": outcome}),
            Self::MailDead {
                id,
                failures,
                cause,
                pid,
            } => json!({"id": id, "failures": failures, "cause": cause, "pid": pid}),
            Self::MailInterrupted { id, cause, pid } => {
                json!({"id": id, "cause": cause, "pid": pid})
            }
            Self::MailRetried { ids, by } => json!({"ids": ids, "by": by}),
            Self::MailDelivered { id, attempt, pid } => {
                json!({"id": id, "attempt": attempt, "pid": pid})
            }
            Self::QuestionAsked { id, key, prompt } => {
                json!({"id": id, "key": key, "prompt": prompt})
            }
            Self::QuestionAnswered { id, key, value, by } => {
                json!({"id": id, "key": key, "value": value, "by": by})
            }
            Self::MailProgress { id, data } => json!({"id": id, "data": data}),
            Self::MailGivenBack { id, pid } => json!({"id": id, "pid": pid}),
            Self::MailPurged {
                count,
                older_than,
                by,
            } => json!({"count": count, "older_than_ms": older_than.map(ms), "by": by}),
            Self::LeaseAcquired {
                host,
                epoch,
                how,
                from,
            } => json!({"host": host, "epoch": epoch, "how": how, "from": from}),
            Self::LeaseLost { host, epoch, why } => {
                json!({"host": host, "epoch": epoch, "why": why})
            }
            Self::LeaseReleased {
                host,
                epoch,
                why,
                to,
            } => json!({"host": host, "epoch": epoch, "why": why, "to": to}),
            Self::HostMaintenance { host, action, by } => {
                json!({"host": host, "action": action, "by": by})
            }
            Self::ConfigReloaded {
                accepted,
                added,
                removed,
                changed,
                settings,
                error,
            } => config_reloaded(
                *accepted,
                added,
                removed,
                changed,
                settings,
                error.as_deref(),
            ),
        }
    }
}

impl From<BudgetTurn> for Fact {
    fn from(turn: BudgetTurn) -> Self {
        match turn {
            BudgetTurn::Paused { used } => Self::DrainPaused { used },
            BudgetTurn::Resumed { used } => Self::DrainResumed { used },
        }
    }
}
