//! The running supervisor: one task per deployment, configuration reloads,
//! fleet-wide requests (recycle all, stop all), the containment of every
//! child (set up before the first spawn, swept while running, emptied at
//! the end), and clean-up of what a previous supervisor left behind.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use wfhost_policy::life::{RecycleCause, Request};

use crate::config::Config;
use crate::config::changes::ReloadSummary;
use crate::contain;
use crate::deployment::policy_tick::Watchlist;
use crate::deployment::{Ask, DeploymentHandle, Registry};
use crate::procfs;
use crate::shared::Shared;
use crate::status::State;

pub mod fleet;

/// The deployments under supervision.
pub struct Supervisor {
    shared: Arc<Shared>,
    registry: Registry,
    /// Every live child of every deployment, for the policy tick.
    watchlist: Arc<Watchlist>,
    tasks: Vec<(String, JoinHandle<()>)>,
    /// Reaps and kills the orphans the supervisor adopts.
    sweeper: Option<JoinHandle<()>>,
    /// In a fleet, the lease loop runs the deployments this host holds.
    fleet: Option<FleetHost>,
}

/// A fleet host's lease loop, before and after it starts.
struct FleetHost {
    fleet: Arc<crate::fleet::Fleet>,
    waiting: Option<fleet::Leases>,
    task: Option<JoinHandle<()>>,
}

impl Supervisor {
    /// Every live child of every deployment, for the policy tick.
    pub fn watchlist(&self) -> Arc<Watchlist> {
        self.watchlist.clone()
    }

    /// A supervisor with no deployments yet.
    pub fn new(shared: &Arc<Shared>) -> Self {
        Self {
            shared: shared.clone(),
            registry: Arc::new(RwLock::new(BTreeMap::new())),
            watchlist: Arc::default(),
            tasks: Vec::new(),
            sweeper: None,
            fleet: None,
        }
    }

    /// Makes this supervisor a fleet host: from `start_all` on, the lease
    /// loop on `db` runs exactly the deployments whose leases it holds.
    pub fn join_fleet(&mut self, db: crate::fleet::db::Db, inbound: fleet::Inbound) {
        let Some(fleet) = self.shared.fleet.clone() else {
            return;
        };
        let leases = fleet::Leases::new(
            fleet.clone(),
            self.shared.clone(),
            self.registry.clone(),
            self.watchlist.clone(),
            db,
            inbound,
        );
        self.fleet = Some(FleetHost {
            fleet,
            waiting: Some(leases),
            task: None,
        });
    }

    /// Sets up containment (a subreaper, the cgroup root; what a previous
    /// supervisor left in its cgroups is killed), then starts a task for
    /// every configured deployment.
    pub fn start_all(&mut self, config: &Config) {
        let containment = contain::init(&config.supervisor);
        containment.clean_up_after_crash();
        if self.sweeper.is_none() {
            let spawner = self.shared.spawner.clone();
            self.sweeper = Some(tokio::spawn(contain::orphans::watch(spawner)));
        }
        if let Some(f) = &mut self.fleet {
            if let Some(leases) = f.waiting.take() {
                f.task = Some(tokio::spawn(leases.run()));
            }
            return;
        }
        for d in &config.deployments {
            self.add(d);
        }
    }

    fn add(&mut self, cfg: &crate::config::DeploymentConfig) {
        let (handle, task) = DeploymentHandle::start(
            Arc::new(cfg.clone()),
            self.shared.clone(),
            self.watchlist.clone(),
        );
        self.registry
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(cfg.id.clone(), handle);
        self.tasks.push((cfg.id.clone(), task));
    }

    /// The live deployments, for the control socket.
    pub fn registry(&self) -> Registry {
        self.registry.clone()
    }

    /// Every live deployment's handle.
    pub fn handles(&self) -> Vec<DeploymentHandle> {
        self.registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Applies a new configuration: starts added deployments, stops removed
    /// ones (drained under their budget), and recycles changed ones onto
    /// their new settings (origin operator). The `[supervisor]` settings
    /// are the reload's to apply or refuse (`commands/supervise/reload.rs`)
    /// before this is called.
    pub async fn reload(&mut self, config: &Config) -> ReloadSummary {
        if let Some(f) = &self.fleet {
            let (reply, answer) = tokio::sync::oneshot::channel();
            let deployments = config.deployments.clone();
            f.fleet
                .tell(crate::fleet::Command::Reload { deployments, reply });
            return answer.await.unwrap_or_default();
        }
        let mut summary = ReloadSummary::default();
        let current: BTreeMap<String, DeploymentHandle> = self
            .registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for (id, handle) in &current {
            if !config.deployments.iter().any(|d| &d.id == id) {
                self.registry
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(id);
                handle.tell(Ask::Life(Request::Stop)).await;
                summary.removed.push(id.clone());
            }
        }
        for d in &config.deployments {
            match current.get(&d.id) {
                None => {
                    self.add(d);
                    summary.added.push(d.id.clone());
                }
                Some(handle) if *handle.config() != *d => {
                    // Only the replica count or overlap changed: scale,
                    // and leave the running children alone.
                    let mut same = (*handle.config()).clone();
                    same.replicas = d.replicas;
                    same.recycle.overlap = d.recycle.overlap;
                    let recycle = same != *d;
                    handle.reconfigure(Arc::new(d.clone()));
                    handle.tell(Ask::Reconfigured { recycle }).await;
                    summary.changed.push(d.id.clone());
                }
                Some(_) => {}
            }
        }
        self.tasks.retain(|(_, t)| !t.is_finished());
        summary
    }

    /// Asks every deployment for a recycle (SIGUSR1).
    pub async fn recycle_all(&self, reason: &str) {
        for h in self.handles() {
            let request = Request::Recycle {
                cause: RecycleCause::Operator,
                reason: reason.to_owned(),
                waiter: None,
            };
            h.tell(Ask::Life(request)).await;
        }
    }

    /// Whether every deployment has had a first Ready or has failed.
    pub fn all_started(&self) -> bool {
        self.handles()
            .iter()
            .all(|h| h.with_status(|s| s.ever_ready || s.state == State::Failed))
    }

    /// The one-line summary for systemd's `STATUS=` and the SIGUSR2 dump,
    /// e.g. `3 ready, 1 draining, 0 failed`.
    pub fn summary(&self) -> String {
        let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
        for h in self.handles() {
            *counts
                .entry(h.with_status(|s| s.state.as_str()))
                .or_default() += 1;
        }
        let ready = counts.remove("ready").unwrap_or(0);
        let draining = counts.remove("draining").unwrap_or(0);
        let failed = counts.remove("failed").unwrap_or(0);
        let mut line = format!("{ready} ready, {draining} draining, {failed} failed");
        for (state, n) in counts {
            line.push_str(&format!(", {n} {state}"));
        }
        line
    }

    /// The longest a running drain may still need: the budget left plus the
    /// kill timeout, for systemd's `EXTEND_TIMEOUT_USEC`. None when no drain
    /// is within its budget.
    pub fn drain_time_needed(registry: &Registry) -> Option<Duration> {
        let now = Instant::now();
        registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter_map(|h| {
                let left = h.with_status(|s| {
                    let left = s.drain.budget_ms().saturating_sub(s.drain.used_ms(now));
                    (s.drain.active && !s.drain.escalated && left > 0).then_some(left)
                })?;
                Some(Duration::from_millis(left) + h.config().kill_timeout)
            })
            .max()
    }

    /// Asks every deployment to drain under its budget and stop; `join_all`
    /// then waits until every child is reaped.
    pub async fn request_stop(&self) {
        if let Some(f) = &self.fleet {
            // The lease loop drains each and releases its lease.
            f.fleet.tell(crate::fleet::Command::Stop);
            return;
        }
        for d in self.handles() {
            d.tell(Ask::Life(Request::Stop)).await;
        }
    }

    /// SIGKILLs every child now (SIGQUIT); `join_all` then waits for the
    /// reaping. Safe to send after `request_stop`.
    pub async fn request_kill(registry: &Registry) {
        let handles: Vec<DeploymentHandle> = registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for d in handles {
            d.tell(Ask::Life(Request::Stop)).await;
            d.tell(Ask::Life(Request::Kill)).await;
        }
    }

    /// Awaits every task; a task already awaited to the end is skipped, so
    /// an interrupted call can be repeated. Then nothing any child started
    /// is left: every cgroup is emptied and removed, every adopted orphan
    /// killed and reaped.
    pub async fn join_all(&mut self) {
        if let Some(f) = &mut self.fleet {
            f.fleet.tell(crate::fleet::Command::Stop);
            if let Some(task) = f.task.as_mut()
                && !task.is_finished()
                && let Err(e) = task.await
            {
                warn!(error = %e, "the lease loop ended abnormally");
            }
        }
        for (id, task) in self.tasks.iter_mut() {
            if task.is_finished() {
                continue;
            }
            if let Err(e) = task.await {
                warn!(deployment = %id, error = %e, "deployment task ended abnormally");
            }
        }
        contain::host().finish(&self.shared.spawner).await;
        if let Some(sweeper) = self.sweeper.take() {
            sweeper.abort();
        }
    }
}

/// Kills every child a previous supervisor recorded that is still the same
/// process (pid and start time both match), and every process that
/// descends from one of them (by its `WFHOST_ORIGIN`: what left the
/// child's group and outlived it), then forgets them all.
pub async fn kill_orphans(shared: &Shared) -> anyhow::Result<usize> {
    let children = shared.store.call(|s| s.children()).await??;
    let channels: std::collections::HashSet<String> =
        children.iter().map(|c| c.channel_id.clone()).collect();
    let mut killed = 0;
    for c in &children {
        if procfs::is_same_process(c.pid, c.start_time)
            && let Ok(raw) = i32::try_from(c.pid)
        {
            warn!(deployment = %c.deployment, pid = c.pid, channel = %c.channel_id,
                "killing a child left behind by a previous supervisor");
            let _ = wfhost_process::signal_group(c.pid, Signal::SIGKILL);
            let _ = kill(Pid::from_raw(raw), Signal::SIGKILL);
            // It is not our child, so it cannot be reaped here; wait until
            // it is gone so its resources are free before respawning.
            let deadline = Instant::now() + Duration::from_secs(5);
            while procfs::is_same_process(c.pid, c.start_time) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            killed += 1;
        }
        shared.forget_child(&c.deployment, c.pid);
    }
    let strays = contain::orphans::kill_left_behind(&channels).await;
    if killed + strays > 0 {
        info!(
            killed,
            strays, "cleaned up children of a previous supervisor and what they left behind"
        );
    }
    Ok(killed)
}
