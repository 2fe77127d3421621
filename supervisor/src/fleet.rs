//! A fleet (DESIGN §10b): several hosts share one PostgreSQL store, and
//! each deployment is owned by exactly one of them at a time through a
//! lease with an epoch; every write concerning a deployment is fenced on
//! its epoch (`store::fence`). This folder holds what the rest of the
//! supervisor reaches the fleet through; the rules are pure, in
//! `wfhost_policy::lease`; the host's side, the lease loop that starts and
//! stops deployment tasks as leases come and go, is `host::fleet`; a
//! request carried to another host is `control::forward`.
//!
//! | file | holds |
//! |---|---|
//! | `open.rs` | joining: the store, the fence, the fleet's connections, the host keys |
//! | `db.rs` | a fleet connection on a thread of its own |
//! | `view.rs` | who owns what, for status and metrics |

pub mod db;
pub mod open;
pub mod view;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::config::{DeploymentConfig, FleetSettings};
use crate::store::fence::Fence;
use db::Db;
use wfhost_policy::lease::Timing;

/// What the lease loop is asked by the rest of the supervisor.
#[derive(Debug)]
pub enum Command {
    /// The host stops: drain every held deployment, release each lease as
    /// its child is gone, then leave the fleet.
    Stop,
    /// A reload: the new set of deployments; answered with what changed.
    Reload {
        /// Every deployment of the new config.
        deployments: Vec<DeploymentConfig>,
        /// The answer.
        reply: oneshot::Sender<crate::config::changes::ReloadSummary>,
    },
    /// Hand `deployment` to host `to`: drain it here, release the lease
    /// reserved for `to`; answered with the released epoch.
    Move {
        /// The deployment.
        deployment: String,
        /// The host to hand it to.
        to: String,
        /// The answer.
        reply: oneshot::Sender<Result<i64, String>>,
    },
}

/// What every part of a fleet host shares: who it is, its fence, the
/// configured deployments (every host runs the same), a connection for
/// queries, and the waiters of forwarded requests.
pub struct Fleet {
    /// `[fleet]`.
    pub settings: FleetSettings,
    /// The lease timing.
    pub timing: Timing,
    /// The leases this host holds; the store's writes are fenced on them.
    pub fence: Arc<Fence>,
    /// A connection for status, forwarding and answers (never renewals).
    pub query: Db,
    configs: RwLock<BTreeMap<String, Arc<DeploymentConfig>>>,
    answers: Mutex<HashMap<i64, oneshot::Sender<()>>>,
    commands: mpsc::UnboundedSender<Command>,
}

impl Fleet {
    /// The fleet of this host; commands for its lease loop go to the
    /// returned receiver.
    pub fn new(
        settings: FleetSettings,
        fence: Arc<Fence>,
        query: Db,
        deployments: &[DeploymentConfig],
    ) -> (Self, mpsc::UnboundedReceiver<Command>) {
        let (commands, rx) = mpsc::unbounded_channel();
        let timing = Timing {
            ttl: settings.lease_ttl,
            renew: settings.lease_renew,
        };
        let fleet = Self {
            settings,
            timing,
            fence,
            query,
            configs: RwLock::new(BTreeMap::new()),
            answers: Mutex::default(),
            commands,
        };
        fleet.configure(deployments);
        (fleet, rx)
    }

    /// This host's id.
    pub fn host(&self) -> &str {
        &self.settings.host_id
    }

    /// The lease TTL in milliseconds.
    pub fn ttl_ms(&self) -> i64 {
        ms(self.timing.ttl)
    }

    /// The takeover grace in milliseconds.
    pub fn grace_ms(&self) -> i64 {
        ms(self.timing.grace())
    }

    /// Replaces the configured deployments (a reload).
    pub fn configure(&self, deployments: &[DeploymentConfig]) {
        let map = deployments
            .iter()
            .map(|d| (d.id.clone(), Arc::new(d.clone())))
            .collect();
        *self.configs.write().unwrap_or_else(|p| p.into_inner()) = map;
    }

    /// Deployment `id`'s configuration, if the fleet has it.
    pub fn config(&self, id: &str) -> Option<Arc<DeploymentConfig>> {
        self.configs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    /// Every configured deployment's id, sorted.
    pub fn deployments(&self) -> Vec<String> {
        self.configs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// The deployments that may run only on some hosts (`hosts = [..]`),
    /// with those hosts.
    pub fn placement(&self) -> BTreeMap<String, Vec<String>> {
        self.configs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, c)| !c.hosts.is_empty())
            .map(|(id, c)| (id.clone(), c.hosts.clone()))
            .collect()
    }

    /// Asks the lease loop; false when it is gone.
    pub fn tell(&self, command: Command) -> bool {
        self.commands.send(command).is_ok()
    }

    /// Waits for forwarded request `id` to be answered: woken by its
    /// notification, or after `at_most` (the caller then looks itself).
    pub async fn answered(&self, id: i64, at_most: Duration) {
        let (tx, rx) = oneshot::channel();
        self.answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, tx);
        let _ = tokio::time::timeout(at_most, rx).await;
        self.answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    /// Request `id` was answered (its notification arrived).
    pub fn answer_arrived(&self, id: i64) {
        if let Some(tx) = self
            .answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
        {
            let _ = tx.send(());
        }
    }
}

/// Milliseconds of a duration, as the database's BIGINTs.
pub fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
