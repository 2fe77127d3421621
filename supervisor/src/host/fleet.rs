//! The host's side of a fleet (DESIGN §10b): one task, the lease loop,
//! that runs exactly the deployments whose leases this host holds. Every
//! `lease_renew` it heartbeats and renews all its leases in one statement,
//! then reads the fleet and carries out what `wfhost_policy::lease::plan` decides:
//! it takes free leases up to its fair share (starting each deployment's
//! task once the previous owner's unacknowledged mail is back in the
//! inbox) and hands off what is above it. A lease found gone (not
//! renewed, or a write refused by the fence) kills that deployment's
//! children at once; a host that cannot renew stops everything it holds
//! by its monotonic clock before any lease can run out. A graceful stop
//! drains each deployment and releases its lease as soon as its child is
//! gone, so another host takes it at once. Notifications wake it for
//! released leases, new mail, events and requests forwarded to it.

mod acquire;
mod command;
mod facts;
mod heard;
mod release;
mod round;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::sleep_until;
use tracing::{error, info};
use wfhost_policy::Fact;

use crate::clock::unix_ms;
use crate::deployment::policy_tick::Watchlist;
use crate::deployment::{Ask, DeploymentHandle, Registry};
use crate::fleet::db::Db;
use crate::fleet::{Command, Fleet};
use crate::shared::Shared;
use crate::store::postgres::listen::Heard;

/// What the loop does with a lease it holds.
enum State {
    /// Its deployment runs here.
    Running,
    /// Its deployment is being stopped; the lease is released (handed to
    /// `to`, if any) once its task has ended.
    Leaving {
        why: &'static str,
        to: Option<String>,
        reply: Option<oneshot::Sender<Result<i64, String>>>,
    },
    /// The lease is gone: its task is being killed; nothing is released.
    Lost,
}

/// A held lease and its deployment's task.
struct Entry {
    epoch: i64,
    /// When it was taken (database ms).
    acquired_ms: i64,
    handle: DeploymentHandle,
    state: State,
    /// The status snapshot last stored with the lease.
    status_sent: Option<String>,
}

/// The lease loop.
pub struct Leases {
    fleet: Arc<Fleet>,
    shared: Arc<Shared>,
    registry: Registry,
    /// Every live child, for the policy tick.
    watchlist: Arc<Watchlist>,
    db: Db,
    commands: mpsc::UnboundedReceiver<Command>,
    refusals: mpsc::UnboundedReceiver<String>,
    heard: mpsc::UnboundedReceiver<Heard>,
    held: BTreeMap<String, Entry>,
    tasks: JoinSet<String>,
    /// Deployments left alone until then (database ms).
    cooldown: BTreeMap<String, i64>,
    /// The database's clock at the last read, and when that was here.
    clock: (i64, Instant),
    stopping: bool,
    joined: Instant,
    next_round: Instant,
    round_now: bool,
    wake: Option<Instant>,
    renew_failing: bool,
    listening: bool,
    /// Lease facts not yet written (the database was away).
    facts: VecDeque<(String, Fact)>,
    /// Answers the requests other hosts forwarded here.
    answer_forwarded: Arc<dyn Fn() + Send + Sync>,
}

/// What reaches the lease loop: the rest of the supervisor's commands,
/// the fence's refusals, and the database's notifications.
pub struct Inbound {
    /// Commands from the control socket and the reload.
    pub commands: mpsc::UnboundedReceiver<Command>,
    /// Deployments whose write the fence refused.
    pub refusals: mpsc::UnboundedReceiver<String>,
    /// What the fleet's listener heard.
    pub heard: mpsc::UnboundedReceiver<Heard>,
    /// Called when another host forwarded a request here: looks them up
    /// and answers them (`control::forwarded`).
    pub answer_forwarded: Arc<dyn Fn() + Send + Sync>,
}

impl Leases {
    /// The loop of `fleet`, on its lease connection `db`.
    pub fn new(
        fleet: Arc<Fleet>,
        shared: Arc<Shared>,
        registry: Registry,
        watchlist: Arc<Watchlist>,
        db: Db,
        inbound: Inbound,
    ) -> Self {
        let Inbound {
            commands,
            refusals,
            heard,
            answer_forwarded,
        } = inbound;
        let now = Instant::now();
        Self {
            fleet,
            shared,
            registry,
            watchlist,
            answer_forwarded,
            db,
            commands,
            refusals,
            heard,
            held: BTreeMap::new(),
            tasks: JoinSet::new(),
            cooldown: BTreeMap::new(),
            clock: (unix_ms() as i64, now),
            stopping: false,
            joined: now,
            next_round: now,
            round_now: false,
            wake: None,
            renew_failing: false,
            listening: false,
            facts: VecDeque::new(),
        }
    }

    /// Runs until the host has stopped and released everything it held.
    pub async fn run(mut self) {
        info!(host = %self.fleet.host(), ttl = ?self.fleet.timing.ttl, renew = ?self.fleet.timing.renew, "joined the fleet");
        loop {
            let wake = [Some(self.next_round), self.wake, self.first_deadline()]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(self.next_round);
            tokio::select! {
                Some(command) = self.commands.recv() => self.command(command),
                Some(deployment) = self.refusals.recv() => self.refused(deployment),
                Some(ended) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    match ended {
                        Ok(deployment) => self.ended(deployment).await,
                        Err(e) => error!(error = %e, "a deployment task ended abnormally"),
                    }
                }
                Some(heard) = self.heard.recv() => self.hear(heard),
                () = sleep_until(tokio::time::Instant::from_std(wake)) => {}
            }
            self.fence_overdue();
            if self.round_now || Instant::now() >= self.next_round {
                self.round().await;
            }
            if self.stopping && self.held.is_empty() && self.tasks.is_empty() {
                self.leave().await;
                return;
            }
        }
    }

    /// The earliest self-fence deadline of a lease acted on.
    fn first_deadline(&self) -> Option<Instant> {
        self.held
            .iter()
            .filter(|(_, e)| !matches!(e.state, State::Lost))
            .filter_map(|(d, _)| self.fleet.fence.deadline(d))
            .min()
    }

    /// The database's clock now, as estimated from the last read.
    fn db_now(&self) -> i64 {
        let (at_ms, at) = self.clock;
        at_ms.saturating_add(crate::fleet::ms(at.elapsed()))
    }

    /// Runs `f` on the lease connection; while it waits (a partition can
    /// hold it for a whole TTL), every lease past its deadline is still
    /// fenced on time.
    async fn call<T: Send + 'static>(
        &mut self,
        f: impl FnOnce(&mut crate::store::PostgresStore) -> T + Send + 'static,
    ) -> Option<T> {
        let db = self.db.clone();
        self.guarded(db.call(f)).await.ok()
    }

    /// Awaits `work` (a database call) while fencing every lease whose
    /// deadline passes meanwhile.
    async fn guarded<F: std::future::Future>(&mut self, work: F) -> F::Output {
        tokio::pin!(work);
        loop {
            let deadline = self.first_deadline();
            let fence = async {
                match deadline {
                    Some(at) => sleep_until(tokio::time::Instant::from_std(at)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                done = &mut work => return done,
                () = fence => self.fence_overdue(),
            }
        }
    }

    /// Stops acting on every lease past its self-fence deadline.
    fn fence_overdue(&mut self) {
        let now = Instant::now();
        let overdue: Vec<String> = self
            .held
            .iter()
            .filter(|(_, e)| !matches!(e.state, State::Lost))
            .filter(|(d, _)| self.fleet.fence.deadline(d).is_none_or(|at| at <= now))
            .map(|(d, _)| d.clone())
            .collect();
        let after = self.fleet.timing.fence_after();
        for d in overdue {
            self.lose(
                &d,
                format!(
                    "self-fenced: no renewal succeeded within {} (lease_ttl - lease_renew), so it stopped before its lease could run out",
                    wfhost_policy::format_duration(after)
                ),
            );
        }
    }
}

/// Tells a deployment's task without waiting on its queue.
fn tell(handle: &DeploymentHandle, ask: Ask) {
    if let Err(mpsc::error::TrySendError::Full(ask)) = handle.asks.try_send(ask) {
        let handle = handle.clone();
        tokio::spawn(async move { handle.tell(ask).await });
    }
}
