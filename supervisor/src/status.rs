//! What operators see of each deployment: a projection of its life (the
//! phase, the live child, the drain) and of the facts recorded about it
//! (restarts, recycles, exits), kept current by the deployment's task and
//! read by `wfhost status`, metrics and the signal dump.

use std::time::{Duration, Instant};

use wfhost_policy::life::DrainPurpose;

mod drain_view;
mod history;
mod json;
mod replica;
mod state;
mod why;

pub use drain_view::{DrainView, StepView};
pub use history::{LastRecycle, RecycleCounts};
pub use replica::{ReplicaView, Role, RssCell};
pub use state::State;

/// Whole milliseconds, saturating (a status field never wraps).
fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
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
    /// The pid of the last child that ended without being asked to (its
    /// last stderr lines are shown beside `last_exit`).
    pub last_exit_pid: Option<u32>,
    /// How the `exited` fact described the last exit (before status added
    /// to it), so a restart repeating it keeps status's fuller words.
    pub exit_described: Option<String>,
    /// A program or script of the deployment that could not be found when
    /// its last child ended without a word on its channel: said instead
    /// of the advice to wrap a plain program.
    pub missing_program: Option<String>,
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
    /// The child protocol version its child speaks, from its Hello (2
    /// for a child deployed before version 3).
    pub protocol: Option<u32>,
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
            last_exit_pid: None,
            exit_described: None,
            missing_program: None,
            state_since: None,
            deadline: None,
            takes_mail: None,
            implementation: None,
            protocol: None,
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
}
