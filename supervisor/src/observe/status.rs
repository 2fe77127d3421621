//! What operators see of each deployment: a projection of its life (the
//! phase, the live child, the drain) and of the facts recorded about it
//! (restarts, recycles, exits), kept current by the deployment's task and
//! read by `wfhost status`, metrics and the signal dump.

use std::time::{Duration, Instant};

use serde::Serialize;
use wfhost_ipc::DrainBehavior;
use wfhost_policy::DrainBudget;
use wfhost_policy::fact::Fact;
use wfhost_policy::life::{DrainPurpose, Phase};

/// A deployment's place in its life (DESIGN §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// A child was spawned and has not sent `Ready` yet.
    Starting,
    /// The child is taking work.
    Ready,
    /// The child was asked to wind down.
    Draining,
    /// The child is being stopped (SIGTERM sent, SIGKILL pending).
    Stopping,
    /// No child, and none will be started (supervisor stopping).
    Exited,
    /// Waiting before the next restart.
    Backoff,
    /// Too many restarts within the period; not restarted.
    Failed,
    /// Drained by an operator; not restarted until resumed.
    Drained,
}

impl State {
    /// The state operators see for a phase of a deployment's life.
    pub fn of<W>(phase: &Phase<W>) -> Self {
        match phase {
            Phase::Starting { .. } => Self::Starting,
            Phase::Ready { .. } => Self::Ready,
            Phase::Draining { .. } => Self::Draining,
            Phase::Stopping { .. } | Phase::Closing { .. } => Self::Stopping,
            Phase::Backoff { .. } => Self::Backoff,
            Phase::Drained => Self::Drained,
            Phase::Failed => Self::Failed,
            Phase::Exited => Self::Exited,
        }
    }

    /// The lower-case name shown to operators.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Ready => "ready",
            Self::Draining => "draining",
            Self::Stopping => "stopping",
            Self::Exited => "exited",
            Self::Backoff => "backoff",
            Self::Failed => "failed",
            Self::Drained => "drained",
        }
    }
}

/// The drain budget as last reported by the deployment's task: a copy of
/// the budget itself, so readers get the time used as of their own `now`
/// without waking the task.
#[derive(Debug, Clone, Default)]
pub struct DrainView {
    /// A drain is under way.
    pub active: bool,
    /// The current or last drain's budget, if the child was drained.
    pub budget: Option<DrainBudget>,
    /// The configured budget, shown while the child was never drained.
    pub configured: Duration,
    /// The budget ran out and a cancel was issued.
    pub escalated: bool,
}

impl DrainView {
    /// The budget in force, in milliseconds.
    pub fn budget_ms(&self) -> u64 {
        ms(self
            .budget
            .as_ref()
            .map_or(self.configured, DrainBudget::budget))
    }

    /// The budget used as of `now`, in milliseconds.
    pub fn used_ms(&self, now: Instant) -> u64 {
        self.budget.as_ref().map_or(0, |b| ms(b.accumulated(now)))
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The last recycle, for operators asking "why was it replaced?".
#[derive(Debug, Clone, Serialize)]
pub struct LastRecycle {
    /// Who asked.
    pub origin: &'static str,
    /// Why.
    pub reason: String,
    /// Unix time in milliseconds when it completed.
    pub at_ms: u64,
    /// The replaced child's pid.
    pub old_pid: Option<u32>,
    /// The new child's pid.
    pub new_pid: u32,
}

/// One step in flight, as shown in status.
#[derive(Debug, Clone, Serialize)]
pub struct StepView {
    /// The run.
    pub run: String,
    /// The step.
    pub step: String,
    /// `cancel` or `wait`.
    pub drain: &'static str,
}

impl StepView {
    /// A step of `run` with its behaviour.
    pub fn new(run: &str, step: &str, drain: DrainBehavior) -> Self {
        Self {
            run: run.to_owned(),
            step: step.to_owned(),
            drain: drain.as_str(),
        }
    }
}

/// Recycles by origin.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct RecycleCounts {
    /// Bounds passed.
    pub policy: u64,
    /// Operator, signal or reload.
    pub operator: u64,
    /// The child asked.
    #[serde(rename = "self")]
    pub self_: u64,
}

/// The live facts of one deployment.
#[derive(Debug, Clone)]
pub struct Status {
    /// Deployment id.
    pub id: String,
    /// Current state.
    pub state: State,
    /// Pid of the live child, if any.
    pub pid: Option<u32>,
    /// Channel id of the live child, if any.
    pub channel_id: Option<String>,
    /// When the live child was spawned.
    pub started_at: Option<Instant>,
    /// When the live child's grants were read.
    pub grants_read_at: Option<Instant>,
    /// Resident memory of the child's process tree at the last policy tick.
    pub rss_bytes: Option<u64>,
    /// Restarts after unexpected exits, over the supervisor's life.
    pub restarts: u32,
    /// Recycles by origin.
    pub recycles: RecycleCounts,
    /// Recycles by reason: the bound's name for policy recycles
    /// (`max_rss`, …), else the origin (`operator`, `self`).
    pub recycle_reasons: std::collections::BTreeMap<String, u64>,
    /// Drain budgets that ran out and escalated to a signed cancel.
    pub escalations: u64,
    /// Children killed for breaking the protocol.
    pub violations: u64,
    /// The last recycle.
    pub last_recycle: Option<LastRecycle>,
    /// The drain budget.
    pub drain: DrainView,
    /// Why the drain under way started.
    pub drain_purpose: Option<DrainPurpose>,
    /// Signed cancels waiting for the journal to accept them.
    pub cancels_pending: usize,
    /// Why the journal refused the last cancel commit, while it refuses.
    pub journal_error: Option<String>,
    /// Why the store refused the last mail write, while it refuses.
    pub store_error: Option<String>,
    /// Mail acknowledgements waiting for the store to take them.
    pub acks_pending: usize,
    /// Steps in flight (the first of them, when there are many).
    pub steps: Vec<StepView>,
    /// How many steps are in flight.
    pub steps_in_flight: usize,
    /// Why the last child ended, for operators asking "why".
    pub last_exit: Option<String>,
    /// Whether the last child to say Hello takes mail (`None` before any):
    /// `wfhost send` is refused while it does not.
    pub takes_mail: Option<bool>,
    /// The child side's implementation, from its Hello.
    pub implementation: Option<String>,
    /// A child of this deployment has been ready at least once (systemd's
    /// `READY=1` waits for every deployment to get there or fail).
    pub ever_ready: bool,
}

impl Status {
    /// A deployment that has not spawned anything yet.
    pub fn new(id: &str, drain_budget: Duration) -> Self {
        Self {
            id: id.to_owned(),
            state: State::Starting,
            pid: None,
            channel_id: None,
            started_at: None,
            grants_read_at: None,
            rss_bytes: None,
            restarts: 0,
            recycles: RecycleCounts::default(),
            recycle_reasons: Default::default(),
            escalations: 0,
            violations: 0,
            last_recycle: None,
            drain: DrainView {
                configured: drain_budget,
                ..DrainView::default()
            },
            drain_purpose: None,
            cancels_pending: 0,
            journal_error: None,
            store_error: None,
            acks_pending: 0,
            steps: Vec::new(),
            steps_in_flight: 0,
            last_exit: None,
            takes_mail: None,
            implementation: None,
            ever_ready: false,
        }
    }

    /// Counts what a recorded fact adds to the deployment's history
    /// (restarts, recycles, violations, the last exit): status is a
    /// projection of the facts, so nothing is counted twice or missed.
    pub fn count(&mut self, fact: &Fact, at_ms: u64) {
        match fact {
            // A child that never started has no `exited` fact: its
            // restart or failure says how it ended.
            Fact::Restarting { after, .. } => {
                self.restarts += 1;
                self.last_exit = Some(after.clone());
            }
            Fact::Failed { last, .. } => self.last_exit = Some(last.clone()),
            Fact::Exited { cause, .. } => {
                if let wfhost_policy::life::ExitCause::Violation(_) = cause {
                    self.violations += 1;
                }
                self.last_exit = Some(cause.describe());
            }
            Fact::Recycled {
                cause,
                reason,
                old_pid,
                new_pid,
                ..
            } => {
                match cause.origin() {
                    "policy" => self.recycles.policy += 1,
                    "operator" => self.recycles.operator += 1,
                    _ => self.recycles.self_ += 1,
                }
                *self
                    .recycle_reasons
                    .entry(cause.key().to_owned())
                    .or_default() += 1;
                self.last_recycle = Some(LastRecycle {
                    origin: cause.origin(),
                    reason: reason.clone(),
                    at_ms,
                    old_pid: *old_pid,
                    new_pid: *new_pid,
                });
            }
            Fact::DrainEscalated { .. } => self.escalations += 1,
            _ => {}
        }
    }

    /// The stable JSON shape of `wfhost status --json` (DESIGN §8), with
    /// `mail` counts supplied from the store.
    pub fn to_json(&self, now: Instant, mail: &crate::store::MailCounts) -> serde_json::Value {
        // Mail waiting for a child that is being replaced: delivered in
        // order once the new child is installed.
        let buffered = if self.state == State::Ready {
            0
        } else {
            mail.inbox
        };
        let since =
            |t: Option<Instant>| t.map(|t| now.saturating_duration_since(t).as_millis() as u64);
        serde_json::json!({
            "id": self.id,
            "state": self.state,
            "pid": self.pid,
            "channel_id": self.channel_id,
            "uptime_ms": since(self.started_at),
            "rss_bytes": self.rss_bytes,
            "grants_age_ms": since(self.grants_read_at),
            "restarts": self.restarts,
            "recycles": self.recycles,
            "escalations": self.escalations,
            "violations": self.violations,
            "last_recycle": self.last_recycle,
            "drain": {
                "active": self.drain.active,
                "budget_ms": self.drain.budget_ms(),
                "used_ms": self.drain.used_ms(now),
                "escalated": self.drain.escalated,
                "purpose": self.drain_purpose.map(DrainPurpose::as_str),
            },
            "cancels_pending": self.cancels_pending,
            "journal_error": self.journal_error,
            "store_error": self.store_error,
            "acks_pending": self.acks_pending,
            "steps": self.steps,
            "steps_in_flight": self.steps_in_flight,
            "mail": {
                "inbox": mail.inbox,
                "processing": mail.processing,
                "buffered": buffered,
                "done": mail.done,
                "dead": mail.dead,
            },
            "last_exit": self.last_exit,
            "implementation": self.implementation,
            "takes_mail": self.takes_mail,
        })
    }
}
