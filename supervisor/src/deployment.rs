//! A deployment: one task that drives its replicas (each a child living
//! its own pure `wfhost_policy::life::Life`, `replicas = N`, with
//! `wfhost_policy::crew::Crew` deciding what spans them: rolling and
//! overlapping recycles, scaling) and shares its inbox among them. The
//! task turns what arrives (frames, exits, operator requests, timers,
//! commit results) into the machines' inputs and carries out their actions.
//!
//! | file | holds |
//! |---|---|
//! | `driver/` | the task: its replicas (`replica.rs`), what arrives in (`arrive.rs`), the machine's actions out (`act.rs`), answers gathered from several replicas (`gather.rs`) |
//! | `child.rs` | the live child's I/O: process, channel, handshake |
//! | `cancel.rs` | signed cancels (an operator's, a spent drain budget's, a deadline's; of runs or of one item) on their way through the journal |
//! | `mail/` | an item's life on this side: spread, window, deadlines, cancel verdicts, the writes owed the store and their settling |
//! | `recycle.rs` | the recycle sequence and its checks |
//! | `spawn.rs` | the spawner thread and a child's environment |
//! | `grants.rs` | the grants file |
//! | `output.rs` | a child's stdout and stderr into the log |
//! | `throttle.rs` | how many observational facts a child may publish |
//! | `timer.rs` | sleeps that end within a fraction of a millisecond |

mod cancel;
mod child;
mod driver;
pub mod grants;
mod mail;
pub mod output;
pub mod policy_tick;
pub mod recycle;
pub mod spawn;
mod throttle;
mod timer;

use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use wfhost_policy::crew::Which;
use wfhost_policy::life::{self, Answer};

use crate::config::DeploymentConfig;
use crate::shared::Shared;
use crate::status::Status;

/// What a deployment's task can be asked.
#[derive(Debug)]
pub enum Ask {
    /// A request of every replica's life (stop, kill, drain, resume,
    /// cancel), or a recycle of them all (rolling, one at a time).
    Life(life::Request<Waiter>),
    /// A request about the child with this pid only (a recycle bound it
    /// passed).
    ForChild {
        /// The child.
        pid: u32,
        /// What of it.
        request: life::Request<Waiter>,
    },
    /// A recycle of one replica (`DEP/N`) or of all.
    Recycle {
        /// Which.
        which: Which,
        /// Who asked.
        cause: life::RecycleCause,
        /// Why.
        reason: String,
        /// Who waits for the new pids.
        waiter: Option<Waiter>,
    },
    /// The configuration was replaced (a reload): the replica count and
    /// overlap apply now; `recycle` when anything else changed, so every
    /// child is replaced (rolling) to pick it up.
    Reconfigured {
        /// Replace every child.
        recycle: bool,
    },
    /// A cancel of mail item `id`, held by the child of channel
    /// `holder` (the store has recorded it): journaled, sent, and its
    /// verdict awaited.
    CancelMail {
        /// The holder's channel id.
        holder: String,
        /// The item.
        id: u64,
        /// Why, for the journal and the child.
        reason: String,
        /// Who waits for the verdict.
        waiter: Waiter,
    },
    /// Mail was accepted into its inbox.
    MailArrived,
    /// A person answered question `key` of item `id` (stored): sent to
    /// its holder, or, waiting in the inbox, the item may now be taken.
    Answer {
        /// The child holding the item, if one does.
        holder: Option<crate::store::Holder>,
        /// The item.
        id: u64,
        /// The question's key.
        key: String,
        /// The answer (JSON).
        value: Vec<u8>,
    },
    /// A fleet host renewed the deployment's lease: its children hear the
    /// new deadline (`Lease`).
    LeaseRenewed,
    /// A fleet host lost the deployment's lease: every child is killed at
    /// once, nothing is retried, and what it still owed the store is
    /// dropped (no acknowledgement of a fenced host counts).
    LeaseLost,
}

/// What came of a cancel of one mail item its child holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailCancelAnswer {
    /// `acknowledged`, `not-supported`, `refused`, `not-acknowledged`, or
    /// `ended` (the child ended first).
    pub verdict: String,
    /// What that means for the item, in words.
    pub detail: String,
    /// The cancel's journal record, when it was committed.
    pub journal_seq: Option<u64>,
}

/// Someone waiting for the answer to a request.
#[derive(Debug)]
pub enum Waiter {
    /// A drain or resume: a message to print.
    Said(oneshot::Sender<Result<String, String>>),
    /// A recycle: the new children's pids, in the order they came up.
    Pids(oneshot::Sender<Result<Vec<u32>, String>>),
    /// A cancel: its journal record, once committed and sent.
    Journaled(oneshot::Sender<Result<u64, String>>),
    /// A cancel of one mail item: the child's verdict.
    Verdict(oneshot::Sender<Result<MailCancelAnswer, String>>),
    /// The deployment's crew, waiting for replica `index` to finish the
    /// recycle it was asked for (the answer never leaves the task).
    Crew(u32),
}

impl Waiter {
    /// Delivers the machine's answer in the form this waiter expects.
    pub fn answer(self, answer: Result<Answer, String>) {
        match (self, answer) {
            (Self::Said(tx), Ok(Answer::Said(text))) => drop(tx.send(Ok(text))),
            (Self::Pids(tx), Ok(Answer::Recycled { pid })) => drop(tx.send(Ok(vec![pid]))),
            (waiter, Ok(other)) => waiter.fail(format!("unexpected answer {other:?}")),
            (waiter, Err(e)) => waiter.fail(e),
        }
    }

    /// Delivers a rolling recycle's answer: the new pids, in the order
    /// they came up.
    pub fn recycled(self, answer: Result<Vec<u32>, String>) {
        match (self, answer) {
            (Self::Pids(tx), answer) => drop(tx.send(answer)),
            (waiter, Ok(pids)) => waiter.fail(format!("unexpected answer {pids:?}")),
            (waiter, Err(e)) => waiter.fail(e),
        }
    }

    /// Delivers a child's verdict on a cancel of one of its items.
    pub fn verdict(self, answer: MailCancelAnswer) {
        match self {
            Self::Verdict(tx) => drop(tx.send(Ok(answer))),
            other => other.fail(format!("unexpected verdict {}", answer.verdict)),
        }
    }

    /// Tells the waiter what went wrong.
    pub fn fail(self, error: String) {
        match self {
            Self::Said(tx) => drop(tx.send(Err(error))),
            Self::Pids(tx) => drop(tx.send(Err(error))),
            Self::Journaled(tx) => drop(tx.send(Err(error))),
            Self::Verdict(tx) => drop(tx.send(Err(error))),
            Self::Crew(_) => {}
        }
    }
}

/// The configuration a deployment's next child starts with.
pub type ConfigSlot = Arc<Mutex<Arc<DeploymentConfig>>>;

/// Live deployments by id, shared by the host, the control socket and
/// metrics.
pub type Registry = Arc<std::sync::RwLock<std::collections::BTreeMap<String, DeploymentHandle>>>;

/// A cheap handle on a running deployment task: where to send requests and
/// where to read its status.
#[derive(Clone)]
pub struct DeploymentHandle {
    /// Sends requests to the task.
    pub asks: mpsc::Sender<Ask>,
    /// The task's live status.
    pub status: Arc<Mutex<Status>>,
    /// The configuration the next child starts with (a reload replaces it).
    pub config: ConfigSlot,
}

impl DeploymentHandle {
    /// Starts the task for `cfg`; the join handle ends after a stop.
    pub fn start(
        cfg: Arc<DeploymentConfig>,
        shared: Arc<Shared>,
        watchlist: Arc<policy_tick::Watchlist>,
    ) -> (Self, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(64);
        let status = Arc::new(Mutex::new(Status::new(&cfg.id, cfg.drain_timeout)));
        let slot: ConfigSlot = Arc::new(Mutex::new(cfg.clone()));
        let driver = driver::Driver::new(
            cfg,
            slot.clone(),
            shared,
            watchlist,
            rx,
            tx.downgrade(),
            status.clone(),
        );
        let join = tokio::spawn(driver.run());
        (
            Self {
                asks: tx,
                status,
                config: slot,
            },
            join,
        )
    }

    /// A copy of the current status.
    pub fn snapshot(&self) -> Status {
        self.with_status(Status::clone)
    }

    /// Looks at the status in place, for callers that need a field or two
    /// of every deployment every second (a snapshot clones its strings).
    pub fn with_status<T>(&self, f: impl FnOnce(&Status) -> T) -> T {
        f(&self.status.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The configuration in force for the next child.
    pub fn config(&self) -> Arc<DeploymentConfig> {
        self.config
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces the configuration; the next child starts with it.
    pub fn reconfigure(&self, cfg: Arc<DeploymentConfig>) {
        *self.config.lock().unwrap_or_else(|p| p.into_inner()) = cfg;
    }

    /// Asks the task, without waiting for an answer; false when the task
    /// is gone.
    pub async fn tell(&self, ask: Ask) -> bool {
        self.asks.send(ask).await.is_ok()
    }

    /// Asks the task and waits for its answer; `gone` when the task ended
    /// before answering.
    pub async fn ask<T>(
        &self,
        request: impl FnOnce(oneshot::Sender<Result<T, String>>) -> life::Request<Waiter>,
    ) -> Result<T, Asked> {
        let (tx, rx) = oneshot::channel();
        if !self.tell(Ask::Life(request(tx))).await {
            return Err(Asked::Gone);
        }
        match rx.await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(Asked::Refused(e)),
            Err(_) => Err(Asked::Gone),
        }
    }
}

/// Why an asked request was not done.
#[derive(Debug)]
pub enum Asked {
    /// The deployment said no, and why.
    Refused(String),
    /// The task ended before answering (the supervisor is stopping).
    Gone,
}
