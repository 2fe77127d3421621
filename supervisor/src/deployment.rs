//! One deployment's task: keeps exactly one live child, restarts it after
//! unexpected exits under the restart policy, and obeys stop requests.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};
use wfhost_policy::restart::{RestartDecision, RestartPolicy, RestartTracker};

use crate::config::DeploymentConfig;
use crate::live_child::{EndReason, LiveChild};
use crate::shared::Shared;
use crate::status::{State, Status};

/// What the supervisor can ask of a deployment's task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// Stop the child (SIGTERM, SIGKILL after `kill_timeout`) and end.
    Stop,
    /// SIGKILL the child now, even if it is already stopping.
    Kill,
}

/// A cheap handle on a running deployment task: where to send requests and
/// where to read its status.
#[derive(Clone)]
pub struct DeploymentHandle {
    /// Sends requests to the task.
    pub requests: mpsc::Sender<Request>,
    /// The task's live status.
    pub status: Arc<Mutex<Status>>,
}

impl DeploymentHandle {
    /// Starts the task for `cfg`; the join handle ends after a stop.
    pub fn start(cfg: Arc<DeploymentConfig>, shared: Arc<Shared>) -> (Self, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(16);
        let status = Arc::new(Mutex::new(Status::new(&cfg.id)));
        let task = tokio::spawn(run(cfg, shared, rx, status.clone()));
        (
            Self {
                requests: tx,
                status,
            },
            task,
        )
    }

    /// A copy of the current status.
    pub fn snapshot(&self) -> Status {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

fn restart_policy(cfg: &DeploymentConfig) -> RestartPolicy {
    RestartPolicy {
        backoff_initial: cfg.restart.backoff_initial,
        backoff_max: cfg.restart.backoff_max,
        max_restarts: cfg.restart.max_restarts,
        period: cfg.restart.period,
        healthy_after: RestartPolicy::default().healthy_after,
    }
}

async fn run(
    cfg: Arc<DeploymentConfig>,
    shared: Arc<Shared>,
    mut requests: mpsc::Receiver<Request>,
    status: Arc<Mutex<Status>>,
) {
    let update = |f: &dyn Fn(&mut Status)| f(&mut status.lock().unwrap_or_else(|p| p.into_inner()));
    let set_state = |state: State| update(&|s| s.state = state);
    let policy = restart_policy(&cfg);
    let mut tracker = RestartTracker::default();
    loop {
        set_state(State::Starting);
        let spawned_at = Instant::now();
        let end = match LiveChild::spawn(cfg.clone(), shared.clone()).await {
            Err(reason) => reason,
            Ok(mut child) => {
                let (pid, channel) = (child.pid(), child.channel_id().to_owned());
                update(&|s| {
                    s.pid = Some(pid);
                    s.channel_id = Some(channel.clone());
                    s.started_at = Some(child.started_at);
                });
                match child.handshake(&mut requests).await {
                    Err(reason) => reason,
                    Ok(()) => {
                        set_state(State::Ready);
                        info!(deployment = %cfg.id, pid, channel = %channel, "ready");
                        child.run(&mut requests, set_state).await
                    }
                }
            }
        };
        let description = end.describe();
        update(&|s| {
            s.pid = None;
            s.channel_id = None;
            s.started_at = None;
            s.last_exit = Some(description.clone());
        });
        shared.journal(
            "exit",
            Some(&cfg.id),
            serde_json::json!({"reason": description}),
        );
        if !end.is_crash() {
            info!(deployment = %cfg.id, reason = %description, "stopped");
            set_state(State::Exited);
            return;
        }
        if matches!(end, EndReason::Exited(_)) {
            warn!(deployment = %cfg.id, reason = %description, "child ended");
        }
        match tracker.on_exit(&policy, spawned_at, Instant::now()) {
            RestartDecision::Restart { delay, attempt } => {
                update(&|s| s.restarts += 1);
                set_state(State::Backoff);
                info!(deployment = %cfg.id, ?delay, attempt, "restarting");
                shared.journal(
                    "restart",
                    Some(&cfg.id),
                    serde_json::json!({"attempt": attempt, "delay_ms": delay.as_millis() as u64, "after": description}),
                );
                if wait_or_stop(&mut requests, delay).await {
                    set_state(State::Exited);
                    return;
                }
            }
            RestartDecision::GiveUp { restarts, period } => {
                set_state(State::Failed);
                error!(deployment = %cfg.id, restarts, ?period, last = %description,
                    "too many restarts within the period; deployment failed and will not be restarted");
                shared.journal(
                    "failed",
                    Some(&cfg.id),
                    serde_json::json!({"restarts": restarts, "period_ms": period.as_millis() as u64, "last": description}),
                );
                while let Some(request) = requests.recv().await {
                    if request == Request::Stop {
                        break;
                    }
                }
                return;
            }
        }
    }
}

/// Sleeps for `delay` unless a stop arrives first; true when stopped.
async fn wait_or_stop(requests: &mut mpsc::Receiver<Request>, delay: std::time::Duration) -> bool {
    let deadline = tokio::time::Instant::now() + delay;
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => return false,
            request = requests.recv() => match request {
                Some(Request::Stop) | None => return true,
                Some(Request::Kill) => {}
            },
        }
    }
}
