//! Requests only the supervisor's control loop can carry out, because it
//! owns the set of deployments and the config file: reload the config
//! (SIGHUP's effect, with its outcome) and stop gracefully (SIGTERM's).
//! The control socket's handlers hand them over and wait for the answer.

use tokio::sync::{mpsc, oneshot};

/// What became of a reload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reloaded {
    /// The file read.
    pub path: String,
    /// Deployments started.
    pub added: Vec<String>,
    /// Deployments stopped (drained under their budgets).
    pub removed: Vec<String>,
    /// Deployments recycled onto their new settings.
    pub changed: Vec<String>,
    /// Deployments left as they were.
    pub unchanged: Vec<String>,
    /// `[supervisor]` settings applied, each `key old → new`.
    pub settings: Vec<String>,
}

/// A graceful stop that has begun.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stopping {
    /// The supervisor's pid, to wait for.
    pub pid: u32,
    /// Deployments being drained and stopped.
    pub deployments: usize,
}

/// A request for the control loop.
#[derive(Debug)]
pub enum HostAsk {
    /// Re-read the config file: the outcome, or why the file was refused
    /// (the running configuration is kept).
    Reload(oneshot::Sender<Result<Reloaded, String>>),
    /// Drain every deployment under its budget, stop, exit 0; answered
    /// once the stop has begun, or refused when one is under way already.
    Stop(oneshot::Sender<Result<Stopping, String>>),
}

/// Where handlers send host requests.
pub type HostAsks = mpsc::Sender<HostAsk>;

impl HostAsk {
    /// Refuses the request: the control loop is no longer taking any. A
    /// reload's answer is dropped (its error is a config file's problem;
    /// its handler says the supervisor is stopping).
    pub fn refuse(self, why: &str) {
        match self {
            Self::Reload(tx) => drop(tx),
            Self::Stop(tx) => drop(tx.send(Err(why.to_owned()))),
        }
    }
}
