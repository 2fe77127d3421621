//! A deployment: one task that lives the deployment's life (the pure state
//! machine `wfhost_policy::life::Life`) and drives its one live child. The
//! task turns what arrives (frames, exits, operator requests, timers,
//! commit results) into the machine's inputs and carries out its actions.
//!
//! | file | holds |
//! |---|---|
//! | `driver/` | the task: what arrives in (`arrive.rs`), the machine's actions out (`act.rs`) |
//! | `child.rs` | the live child's I/O: process, channel, handshake |
//! | `drain.rs` | steps in flight and the drain budget |
//! | `cancel.rs` | signed cancels on their way through the journal |
//! | `mail.rs` | mail delivery, acknowledgement and replay |
//! | `recycle.rs` | the recycle sequence and its checks |
//! | `spawn.rs` | the spawner thread and a child's environment |
//! | `grants.rs` | the grants file |
//! | `output.rs` | a child's stdout and stderr into the log |

mod cancel;
mod child;
mod drain;
mod driver;
pub mod grants;
mod mail;
pub mod output;
pub mod recycle;
pub mod spawn;

use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use wfhost_policy::life::{self, Answer};

use crate::config::DeploymentConfig;
use crate::observe::status::Status;
use crate::shared::Shared;

/// What a deployment's task can be asked.
#[derive(Debug)]
pub enum Ask {
    /// A request of its life (stop, kill, drain, resume, recycle, cancel).
    Life(life::Request<Waiter>),
    /// Mail was accepted into its inbox.
    MailArrived,
}

/// Someone waiting for the answer to a request.
#[derive(Debug)]
pub enum Waiter {
    /// A drain or resume: a message to print.
    Said(oneshot::Sender<Result<String, String>>),
    /// A recycle: the new child's pid.
    Pid(oneshot::Sender<Result<u32, String>>),
    /// A cancel: its journal record, once committed and sent.
    Journaled(oneshot::Sender<Result<u64, String>>),
}

impl Waiter {
    /// Delivers the machine's answer in the form this waiter expects.
    pub fn answer(self, answer: Result<Answer, String>) {
        match (self, answer) {
            (Self::Said(tx), Ok(Answer::Said(text))) => drop(tx.send(Ok(text))),
            (Self::Pid(tx), Ok(Answer::Recycled { pid })) => drop(tx.send(Ok(pid))),
            (waiter, Ok(other)) => waiter.fail(format!("unexpected answer {other:?}")),
            (waiter, Err(e)) => waiter.fail(e),
        }
    }

    /// Tells the waiter what went wrong.
    pub fn fail(self, error: String) {
        match self {
            Self::Said(tx) => drop(tx.send(Err(error))),
            Self::Pid(tx) => drop(tx.send(Err(error))),
            Self::Journaled(tx) => drop(tx.send(Err(error))),
        }
    }
}

/// The configuration a deployment's next child starts with.
pub type ConfigSlot = Arc<Mutex<Arc<DeploymentConfig>>>;

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
    pub fn start(cfg: Arc<DeploymentConfig>, shared: Arc<Shared>) -> (Self, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(64);
        let status = Arc::new(Mutex::new(Status::new(&cfg.id, cfg.drain_timeout)));
        let slot: ConfigSlot = Arc::new(Mutex::new(cfg.clone()));
        let driver = driver::Driver::new(
            cfg,
            slot.clone(),
            shared,
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
