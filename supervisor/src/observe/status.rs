//! What operators see of each deployment: a projection of its life (the
//! phase, the live child, the drain) and of the facts recorded about it
//! (restarts, recycles, exits), kept current by the deployment's task and
//! read by `wfhost status`, metrics and the signal dump.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::human;
use wfhost_ipc::DrainBehavior;
use wfhost_policy::DrainBudget;
use wfhost_policy::drain::BudgetState;
use wfhost_policy::fact::Fact;
use wfhost_policy::format_duration;
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
        ms(self.budget())
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

/// Resident memory of one child's process tree, written by the policy
/// tick and read by status and metrics without waking the deployment.
#[derive(Debug, Clone)]
pub struct RssCell(Arc<AtomicU64>);

/// What the cell holds before the first read.
const UNREAD: u64 = u64::MAX;

impl Default for RssCell {
    fn default() -> Self {
        Self(Arc::new(AtomicU64::new(UNREAD)))
    }
}

impl RssCell {
    /// The last reading, if any.
    pub fn get(&self) -> Option<u64> {
        Some(self.0.load(Ordering::Relaxed)).filter(|&b| b != UNREAD)
    }

    /// A new reading (`None`: the read failed).
    pub fn set(&self, bytes: Option<u64>) {
        self.0.store(bytes.unwrap_or(UNREAD), Ordering::Relaxed);
    }
}

/// What a replica is to its deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Takes mail.
    Serving,
    /// Started to replace another (an overlapping recycle), not ready yet.
    Successor,
    /// Being drained and stopped for good (replaced, or scaled away).
    Retiring,
}

/// One replica as `status` lists it.
#[derive(Debug, Clone)]
pub struct ReplicaView {
    /// Its index (`DEP/INDEX`).
    pub index: u32,
    /// Serving, successor or retiring.
    pub role: Role,
    /// Its life's state.
    pub state: State,
    /// Its live child's pid.
    pub pid: Option<u32>,
    /// Its live child's channel id.
    pub channel_id: Option<String>,
    /// When its child was spawned.
    pub started_at: Option<Instant>,
    /// Its child's resident memory.
    pub rss: Option<RssCell>,
    /// Mail items its child holds.
    pub in_hand: usize,
    /// Mail its child acknowledged.
    pub mail_done: u64,
    /// Steps in flight in its child.
    pub steps_in_flight: usize,
    /// Its child is draining.
    pub draining: bool,
}

impl ReplicaView {
    fn to_json(&self, now: Instant) -> serde_json::Value {
        serde_json::json!({
            "index": self.index,
            "role": self.role,
            "state": self.state,
            "pid": self.pid,
            "channel_id": self.channel_id,
            "uptime_ms": self.started_at.map(|t| now.saturating_duration_since(t).as_millis() as u64),
            "rss_bytes": self.rss.as_ref().and_then(RssCell::get),
            "in_hand": self.in_hand,
            "mail_done": self.mail_done,
            "steps_in_flight": self.steps_in_flight,
            "draining": self.draining,
        })
    }
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
    /// The same in a few words, for the status table.
    pub last_exit_brief: Option<String>,
    /// Unix time in milliseconds of the last exit.
    pub last_exit_at_ms: Option<u64>,
    /// When the deployment entered its current state.
    pub state_since: Option<Instant>,
    /// The next deadline of its life (ready_timeout, drain_deadline, the
    /// SIGKILL after kill_timeout, the end of a backoff), if one is set.
    pub deadline: Option<Instant>,
    /// Whether the last child to say Hello takes mail (`None` before any):
    /// `wfhost send` is refused while it does not.
    pub takes_mail: Option<bool>,
    /// The child side's implementation, from its Hello.
    pub implementation: Option<String>,
    /// A child of this deployment has been ready at least once (systemd's
    /// `READY=1` waits for every deployment to get there or fail).
    pub ever_ready: bool,
    /// Every replica, by index (one, unless `replicas` is more or an
    /// overlapping recycle runs a successor beside the child it replaces).
    pub replicas: Vec<ReplicaView>,
    /// What holds its last child and all it started: `cgroup` or
    /// `process-tree` (`None` before the first spawn).
    pub containment: Option<&'static str>,
    /// The last child's cgroup.
    pub cgroup: Option<String>,
    /// The deployment's limits the last child does not get, and why.
    pub limits_not_applied: Vec<crate::contain::NotApplied>,
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
            last_exit_brief: None,
            last_exit_at_ms: None,
            state_since: None,
            deadline: None,
            takes_mail: None,
            implementation: None,
            ever_ready: false,
            replicas: Vec::new(),
            containment: None,
            cgroup: None,
            limits_not_applied: Vec::new(),
        }
    }

    /// Memory of every live child at the last policy tick, summed over
    /// the replicas: its cgroup's `memory.current` where the memory
    /// controller is on, else the resident memory of its process tree;
    /// `None` before any reading.
    pub fn rss_bytes(&self) -> Option<u64> {
        self.replicas
            .iter()
            .filter_map(|r| r.rss.as_ref()?.get())
            .reduce(u64::saturating_add)
    }

    /// Shows how a freshly spawned child is contained.
    pub fn contained(
        &mut self,
        (kind, cgroup, not_applied): (
            &'static str,
            Option<String>,
            Vec<crate::contain::NotApplied>,
        ),
    ) {
        self.containment = Some(kind);
        self.cgroup = cgroup;
        self.limits_not_applied = not_applied;
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
                if after.starts_with("spawn failed") {
                    self.last_exit_brief = Some("spawn failed".into());
                    self.last_exit_at_ms = Some(at_ms);
                }
                self.last_exit = Some(after.clone());
            }
            Fact::Failed { last, .. } => self.last_exit = Some(last.clone()),
            Fact::Exited { cause, .. } => {
                if cause.is_violation() {
                    self.violations += 1;
                }
                self.last_exit = Some(cause.describe());
                self.last_exit_brief = Some(cause.brief());
                self.last_exit_at_ms = Some(at_ms);
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
        let until = |t: Option<Instant>| t.map(|t| ms(t.saturating_duration_since(now)));
        serde_json::json!({
            "id": self.id,
            "state": self.state,
            "pid": self.pid,
            "channel_id": self.channel_id,
            "uptime_ms": since(self.started_at),
            "rss_bytes": self.rss_bytes(),
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
                "budget": self.drain.budget_state(now).as_str(),
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
            "last_exit_brief": self.last_exit_brief,
            "last_exit_at_ms": self.last_exit_at_ms,
            "implementation": self.implementation,
            "takes_mail": self.takes_mail,
            "replicas": self.replicas.iter().map(|r| r.to_json(now)).collect::<Vec<_>>(),
            "containment": self.containment,
            "cgroup": self.cgroup,
            "limits_not_applied": self.limits_not_applied,
            "since_ms": since(self.state_since),
            "next_in_ms": until(self.deadline),
            "why": self.why(now),
        })
    }

    /// Why the deployment is in its state and what happens next, in one
    /// or two sentences (`wfhost status DEP`).
    pub fn why(&self, now: Instant) -> String {
        let id = &self.id;
        let pid = self.pid.map_or_else(|| "?".to_owned(), |p| p.to_string());
        let next = self
            .deadline
            .map(|t| human::ms(ms(t.saturating_duration_since(now))));
        let last = self
            .last_exit
            .as_deref()
            .unwrap_or("no child has ended yet");
        match self.state {
            State::Starting if self.pid.is_none() => "a child is being spawned".to_owned(),
            State::Starting => format!(
                "its child (pid {pid}) was spawned and has not sent Ready yet{}",
                next.map_or_else(String::new, |n| format!(
                    "; it is killed if not ready within {n}"
                ))
            ),
            State::Ready => match self.takes_mail {
                Some(false) => {
                    format!("its child (pid {pid}) is running; it takes no mail (a plain command)")
                }
                _ => format!("its child (pid {pid}) is ready and takes mail"),
            },
            State::Draining => {
                let purpose = match self.drain_purpose {
                    Some(DrainPurpose::Recycle) => "for a recycle",
                    Some(DrainPurpose::Operator) => "by an operator",
                    Some(DrainPurpose::Stop) => "because the supervisor is stopping",
                    None => "",
                };
                let budget = match self.drain.budget_state(now) {
                    BudgetState::Escalated => {
                        "the budget ran out and a signed cancel was sent".to_owned()
                    }
                    BudgetState::Paused => format!(
                        "the budget is paused at {} of {}: only wait steps are in flight",
                        human::ms(self.drain.used_ms(now)),
                        format_duration(self.drain.budget())
                    ),
                    _ => format!(
                        "{} of its {} budget used",
                        human::ms(self.drain.used_ms(now)),
                        format_duration(self.drain.budget())
                    ),
                };
                let waits = match self.steps_in_flight {
                    0 => "for the child to report Drained".to_owned(),
                    1 => "for 1 step in flight".to_owned(),
                    n => format!("for {n} steps in flight"),
                };
                let deadline = next.map_or_else(String::new, |n| {
                    format!("; stopped anyway in {n} (drain_deadline)")
                });
                format!("draining {purpose}: waiting {waits}; {budget}{deadline}")
            }
            State::Stopping => match next {
                Some(n) => {
                    format!("SIGTERM was sent to its child (pid {pid}); SIGKILL follows in {n}")
                }
                None => {
                    format!("its child (pid {pid}) is being killed; waiting for it to be reaped")
                }
            },
            State::Backoff => format!(
                "its child ended ({last}); it is restarted in {}",
                next.unwrap_or_else(|| "a moment".into())
            ),
            State::Failed => format!(
                "too many restarts within the period; last: {last}; `wfhost resume {id}` starts a fresh child"
            ),
            State::Drained => format!(
                "drained by an operator: no child runs and mail waits in the inbox until `wfhost resume {id}`"
            ),
            State::Exited => "stopped with the supervisor".to_owned(),
        }
    }
}

impl DrainView {
    /// The budget in force.
    pub fn budget(&self) -> Duration {
        self.budget
            .as_ref()
            .map_or(self.configured, DrainBudget::budget)
    }

    /// Where the budget is as of `now`.
    pub fn budget_state(&self, now: Instant) -> BudgetState {
        self.budget
            .as_ref()
            .map_or(BudgetState::Idle, |b| b.state_at(now))
    }
}
