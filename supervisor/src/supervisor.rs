//! The running supervisor: one task per deployment, plus clean-up of what
//! a previous supervisor left behind.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::config::Config;
use crate::deployment::{DeploymentHandle, Request};
use crate::procfs;
use crate::shared::Shared;
use crate::store::Store;

/// Live deployments by id, shared with the control socket.
pub type Registry = Arc<RwLock<BTreeMap<String, DeploymentHandle>>>;

/// The deployments under supervision.
pub struct Supervisor {
    registry: Registry,
    tasks: BTreeMap<String, JoinHandle<()>>,
}

impl Supervisor {
    /// Starts a task for every configured deployment.
    pub fn start(config: &Config, shared: &Arc<Shared>) -> Self {
        let mut handles = BTreeMap::new();
        let mut tasks = BTreeMap::new();
        for d in &config.deployments {
            let (handle, task) = DeploymentHandle::start(Arc::new(d.clone()), shared.clone());
            handles.insert(d.id.clone(), handle);
            tasks.insert(d.id.clone(), task);
        }
        Self {
            registry: Arc::new(RwLock::new(handles)),
            tasks,
        }
    }

    /// The live deployments, for the control socket.
    pub fn registry(&self) -> Registry {
        self.registry.clone()
    }

    fn handles(&self) -> Vec<DeploymentHandle> {
        self.registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Stops every child (SIGTERM, SIGKILL after its `kill_timeout`) and
    /// waits until all are reaped.
    pub async fn stop_all(&mut self) {
        for d in self.handles() {
            let _ = d.requests.send(Request::Stop).await;
        }
        self.join_all().await;
    }

    /// SIGKILLs every child now and waits until all are reaped. Safe to call
    /// after an interrupted `stop_all`.
    pub async fn kill_all(&mut self) {
        for d in self.handles() {
            let _ = d.requests.send(Request::Stop).await;
            let _ = d.requests.send(Request::Kill).await;
        }
        self.join_all().await;
    }

    /// Awaits every task; a task already awaited to the end is skipped, so
    /// an interrupted call can be repeated.
    async fn join_all(&mut self) {
        for (id, task) in self.tasks.iter_mut() {
            if task.is_finished() {
                continue;
            }
            if let Err(e) = task.await {
                warn!(deployment = %id, error = %e, "deployment task ended abnormally");
            }
        }
    }
}

/// Kills every child a previous supervisor recorded that is still the same
/// process (pid and start time both match), then forgets them all.
pub fn kill_orphans(shared: &Shared) -> anyhow::Result<usize> {
    let children = shared.with_store(|s| s.children())?;
    let mut killed = 0;
    for c in &children {
        if procfs::is_same_process(c.pid, c.start_time)
            && let Ok(raw) = i32::try_from(c.pid)
        {
            warn!(deployment = %c.deployment, pid = c.pid, channel = %c.channel_id,
                "killing a child left behind by a previous supervisor");
            let _ = killpg(Pid::from_raw(raw), Signal::SIGKILL);
            let _ = kill(Pid::from_raw(raw), Signal::SIGKILL);
            // It is not our child, so it cannot be reaped here; wait until
            // it is gone so its resources are free before respawning.
            let deadline = Instant::now() + Duration::from_secs(5);
            while procfs::is_same_process(c.pid, c.start_time) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            killed += 1;
        }
        shared.forget_child(&c.deployment, c.pid);
    }
    if killed > 0 {
        info!(killed, "cleaned up children of a previous supervisor");
    }
    Ok(killed)
}
