//! The words of a deployment's life: its phases, what can happen to it
//! (inputs), what it decides (actions), and the typed reasons behind them
//! (drain purposes and ends are in `crate::drain`, recycle causes in
//! `crate::recycle`, exit causes in `crate::exit`).

use std::time::{Duration, Instant};

use wfhost_ipc::Grants;

use super::Request;
pub use crate::drain::{DrainEnd, DrainPurpose, Escalation};
use crate::exit::{ExitCause, ExitStatus};
use crate::fact::Fact;
pub use crate::recycle::RecycleCause;
use crate::restart::RestartPolicy;

/// Grants read from the deployment's `grants_file`, and when.
pub type Fresh = (Grants, Instant);

/// The default grace between SIGTERM and SIGKILL (`kill_timeout`), 10 s;
/// a closed channel gets as long to turn into an exit.
pub const DEFAULT_KILL_TIMEOUT: Duration = Duration::from_secs(10);

/// The settings the machine decides with (a reload applies them to the
/// next child).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// The drain-timeout budget each drain gets ([`Action::SendDrain`]).
    pub drain_timeout: Duration,
    /// How long a stop or recycle waits for the child to drain.
    pub drain_deadline: Duration,
    /// Spawn to `Ready`, else the spawn failed.
    pub ready_timeout: Duration,
    /// SIGTERM to SIGKILL (and a closed channel to SIGKILL).
    pub kill_timeout: Duration,
    /// Backoff and intensity of restarts after unexpected ends.
    pub restart: RestartPolicy,
}

/// Where a deployment is in its life (DESIGN §3). Everything the machine
/// knows of its state beyond the live child and its restart counts is
/// data of its phase.
#[derive(Debug)]
pub enum Phase<W> {
    /// A child is being spawned or has not sent `Ready` yet; `pending` is a
    /// drain or recycle asked for meanwhile, carried out once it is ready.
    Starting {
        /// When the child must be ready (set once it is spawned).
        ready_by: Option<Instant>,
        /// Asked for while starting.
        pending: Option<Purpose<W>>,
        /// The recycle this child completes, if it is a successor.
        recycling: Option<Recycling<W>>,
    },
    /// The child takes work; `vetting` is a recycle whose successor is
    /// being checked before the child is drained.
    Ready {
        /// A recycle waiting for its check.
        vetting: Option<Trigger<W>>,
    },
    /// The child was told to drain; its budget runs for `purpose`.
    Draining {
        /// Why.
        purpose: Purpose<W>,
        /// When it is stopped even if not drained (none for an operator drain).
        deadline: Option<Instant>,
        /// The child reported `Drained`.
        drained: bool,
    },
    /// SIGTERM (or SIGKILL) was sent; waiting for the exit.
    Stopping {
        /// Why it is stopped (none when it was killed for misbehaving).
        purpose: Option<Purpose<W>>,
        /// When SIGKILL follows (none once it was sent).
        kill_at: Option<Instant>,
        /// What its exit will be recorded as.
        ending: Ending,
        /// A drain whose budget still runs: the child was killed mid-drain.
        open_drain: Option<DrainPurpose>,
        /// What was asked of it while it started (it never became ready).
        pending: Option<Purpose<W>>,
        /// The recycle it was to complete, if it was a successor.
        recycling: Option<Recycling<W>>,
    },
    /// The child closed its channel: it is on its way out by itself.
    Closing {
        /// Why it was being drained, if it was.
        purpose: Option<Purpose<W>>,
        /// When it is killed if it has not exited.
        kill_at: Instant,
        /// A drain whose budget still runs.
        open_drain: Option<DrainPurpose>,
    },
    /// Waiting out a restart delay (or a looping child's recycle delay).
    Backoff {
        /// When the next child is spawned.
        until: Instant,
        /// The recycle whose successor waits.
        recycling: Option<Recycling<W>>,
    },
    /// Drained by an operator: no child, mail waits, until resumed.
    Drained {
        /// A delayed recycle's successor, still owed its `recycled`.
        recycling: Option<Recycling<W>>,
    },
    /// Too many restarts within the period: no child, until resumed.
    Failed,
    /// Stopped for good (the supervisor is stopping).
    Exited,
}

/// Why a child in [`Phase::Stopping`] is stopped: what its exit is
/// recorded as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// SIGTERM on purpose without a completed drain: `stopped`.
    Stopped,
    /// SIGTERM after it drained: `drained`.
    Drained,
    /// SIGKILL, for this cause.
    Killed(ExitCause),
}

/// A recycle whose old child is gone and whose new one is on its way.
#[derive(Debug)]
pub struct Recycling<W> {
    /// The recycle.
    pub trigger: Trigger<W>,
    /// The old child's pid.
    pub old_pid: Option<u32>,
    /// The old child's channel id.
    pub old_channel_id: Option<String>,
}

impl<W> Phase<W> {
    /// The phase's name as operators see it in `status`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Starting { .. } => "starting",
            Self::Ready { .. } => "ready",
            Self::Draining { .. } => "draining",
            Self::Stopping { .. } | Self::Closing { .. } => "stopping",
            Self::Backoff { .. } => "backoff",
            Self::Drained { .. } => "drained",
            Self::Failed => "failed",
            Self::Exited => "exited",
        }
    }

    /// The drain's purpose while one is under way or due.
    pub fn purpose(&self) -> Option<DrainPurpose> {
        match self {
            Self::Draining { purpose, .. } => Some(purpose.kind()),
            Self::Stopping { purpose, .. } | Self::Closing { purpose, .. } => {
                purpose.as_ref().map(Purpose::kind)
            }
            _ => None,
        }
    }
}

/// Why a child is being drained.
#[derive(Debug)]
pub enum Purpose<W> {
    /// The supervisor is stopping: drain, then stop; nothing is respawned.
    Stop,
    /// `wfhost drain`: drain, then stop; the deployment stays drained.
    Operator,
    /// A recycle: drain, then stop and respawn.
    Recycle(Trigger<W>),
}

impl<W> Purpose<W> {
    /// Which purpose, without its waiters.
    pub fn kind(&self) -> DrainPurpose {
        match self {
            Self::Stop => DrainPurpose::Stop,
            Self::Operator => DrainPurpose::Operator,
            Self::Recycle(_) => DrainPurpose::Recycle,
        }
    }
}

/// A recycle under way: its first cause and reason, and every waiter
/// (later triggers are absorbed into it).
#[derive(Debug)]
pub struct Trigger<W> {
    /// Who asked first.
    pub cause: RecycleCause,
    /// Why, in words.
    pub reason: String,
    /// Operators waiting for the new child's pid.
    pub waiters: Vec<W>,
    /// The grants read when the recycle was checked: the new child's,
    /// should the file break while the old one drains.
    pub grants: Option<Fresh>,
}

impl<W> Trigger<W> {
    /// A trigger with an optional waiter.
    pub fn new(cause: RecycleCause, reason: impl Into<String>, waiter: Option<W>) -> Self {
        Self {
            cause,
            reason: reason.into(),
            waiters: waiter.into_iter().collect(),
            grants: None,
        }
    }
}

/// What the supervisor caught a child doing wrong: it is killed at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Misconduct {
    /// It broke the protocol.
    Violation(String),
    /// It stopped answering pings or reading its channel.
    Hung,
}

/// Why the machine has a child SIGKILLed, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KillWhy {
    /// It misbehaved, never became ready, or closed its channel without
    /// exiting: the cause its exit is recorded with.
    Misconduct(ExitCause),
    /// An operator forced it.
    Operator,
    /// It did not exit within `kill_timeout` of SIGTERM.
    Overdue,
}

/// Something that happened to a deployment.
#[derive(Debug)]
pub enum Input<W> {
    /// The child asked for by [`Action::Spawn`] runs.
    Spawned {
        /// Its pid.
        pid: u32,
        /// The channel id minted for it.
        channel_id: String,
    },
    /// The child asked for by [`Action::Spawn`] could not be started.
    SpawnFailed(String),
    /// The child sent its Hello: it speaks the protocol.
    Hello,
    /// The child completed the handshake.
    Ready,
    /// The child reported `Drained`.
    Drained,
    /// Whether the child has any step in flight, when that changes.
    StepsInFlight(bool),
    /// The child asked to be recycled.
    RecycleAsked(String),
    /// The child finished work (a step or a mail item) for the first time
    /// since it was ready: a recycle it asks for from now on is not a loop.
    Worked,
    /// The child misbehaved: it is killed.
    Misbehaved(Misconduct),
    /// The child closed its control channel.
    ChannelClosed,
    /// The child was reaped.
    Reaped(ExitStatus),
    /// An operator asked for something.
    Request(Request<W>),
    /// The check of a recycle's successor ([`Action::Vet`]) ended: its
    /// grants (none without a grants file), or why no child could start.
    Vetted(Result<Option<Fresh>, String>),
    /// The drain budget ran out ([`crate::DrainBudget::poll`]).
    BudgetSpent(Escalation),
    /// Time passed: a deadline of [`crate::life::Life::deadline`] may be due.
    Tick,
}

/// An answer to an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Done; a message to print.
    Said(String),
    /// The recycle completed with this new pid.
    Recycled {
        /// The new child's pid.
        pid: u32,
    },
}

/// What the deployment's driver must do.
#[derive(Debug)]
pub enum Action<W> {
    /// Spawn a child (with the grants a recycle checked, if any) and
    /// report [`Input::Spawned`] or [`Input::SpawnFailed`].
    Spawn {
        /// Grants to fall back on if the file cannot be read now.
        grants: Option<Fresh>,
    },
    /// The child is ready: deliver mail while the phase takes it.
    Dispatch,
    /// Check that a successor could start (program executable, grants
    /// readable) and report [`Input::Vetted`].
    Vet,
    /// Tell the child to drain and start its budget of `budget`.
    SendDrain {
        /// Why.
        purpose: DrainPurpose,
        /// The drain-timeout budget (the machine's `drain_timeout`).
        budget: Duration,
    },
    /// Stop the drain budget and record `drain_ended`.
    EndDrain {
        /// Why the drain had started.
        purpose: DrainPurpose,
        /// How it ended.
        why: DrainEnd,
    },
    /// The budget ran out: sign, journal and send a cancel of every run
    /// named (origin `supervisor-drain`).
    Escalate(Escalation),
    /// `Shutdown`, then SIGTERM to the child's group.
    Terminate,
    /// SIGKILL the child's whole tree now.
    Kill(KillWhy),
    /// Sign, journal and send an operator cancel.
    Cancel {
        /// The run, or every run.
        run: Option<String>,
        /// Who waits.
        to: W,
    },
    /// Return the child's unacknowledged mail to the head of the inbox.
    ReplayMail,
    /// Answer an operator.
    Answer {
        /// Who.
        to: W,
        /// What.
        answer: Result<Answer, String>,
    },
    /// Journal and publish a fact.
    Record(Fact),
    /// A policy recycle was refused: let the next policy tick ask again.
    RearmPolicy,
    /// The deployment has had a first ready child, or failed: systemd's
    /// `READY=1` waits for every deployment to get there.
    Started,
    /// Nothing more will happen: the task ends.
    Finish,
}
