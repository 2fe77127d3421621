//! One deployment's task: keeps exactly one live child, restarts it after
//! unexpected exits under the restart policy, replaces it on recycle, and
//! obeys operators (stop, drain, resume, cancel). Whatever ends a child's
//! wiring, its unacknowledged mail goes back to the head of the inbox.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tracing::{error, info, warn};
use wfhost_policy::restart::{RestartDecision, RestartPolicy, RestartTracker};

use crate::cancel;
use crate::config::{DeploymentConfig, format_duration};
use crate::live_child::{EndReason, Ending, LiveChild, refuse_while};
use crate::recycle::{self, Origin, Trigger};
use crate::shared::{Shared, unix_ms};
use crate::status::{LastRecycle, State, Status};

/// A reply owed to an operator: a message, or what went wrong.
pub type Reply = oneshot::Sender<Result<String, String>>;

/// What the supervisor can ask of a deployment's task.
#[derive(Debug)]
pub enum Request {
    /// Drain under the budget, stop the child, and end the task.
    Stop,
    /// SIGKILL the child now, even if it is already stopping.
    Kill,
    /// Drain and stop the child; stay drained until resumed.
    Drain {
        /// Answered once the drain has started.
        reply: Reply,
    },
    /// Start a fresh child after a drain or a failure.
    Resume {
        /// Answered once the task is starting a child.
        reply: Reply,
    },
    /// Replace the child with a fresh one without losing mail.
    Recycle {
        /// Who asked.
        origin: Origin,
        /// Why.
        reason: String,
        /// Answered with the new child's pid once it is ready.
        reply: Option<recycle::Reply>,
    },
    /// A signed operator cancel of one run, or of every run.
    Cancel {
        /// The run, or every run.
        run: Option<String>,
        /// Answered with the journal sequence number once sent.
        reply: cancel::Reply,
    },
    /// Mail was accepted into the inbox.
    MailArrived,
}

/// A cheap handle on a running deployment task: where to send requests and
/// where to read its status.
#[derive(Clone)]
pub struct DeploymentHandle {
    /// Sends requests to the task.
    pub requests: mpsc::Sender<Request>,
    /// The task's live status.
    pub status: Arc<Mutex<Status>>,
    /// The configuration the next child starts with (a reload replaces it).
    pub config: ConfigSlot,
}

/// The configuration a deployment's next child starts with.
pub type ConfigSlot = Arc<Mutex<Arc<DeploymentConfig>>>;

impl DeploymentHandle {
    /// Starts the task for `cfg`; the join handle ends after a stop.
    pub fn start(cfg: Arc<DeploymentConfig>, shared: Arc<Shared>) -> (Self, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(64);
        let budget_ms = cfg.drain_timeout.as_millis() as u64;
        let status = Arc::new(Mutex::new(Status::new(&cfg.id, budget_ms)));
        let slot: ConfigSlot = Arc::new(Mutex::new(cfg.clone()));
        let task = Task {
            cfg,
            slot: slot.clone(),
            shared,
            requests: rx,
            me: tx.downgrade(),
            status: status.clone(),
        };
        let join = tokio::spawn(task.run());
        (
            Self {
                requests: tx,
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
}

/// A recycle whose old child is gone and whose new child is on its way.
struct Recycling {
    trigger: Trigger,
    old_pid: Option<u32>,
    old_channel: Option<String>,
}

/// What a parked deployment (drained or failed) was told to do.
enum Unpark {
    Resume,
    Exit,
}

struct Task {
    cfg: Arc<DeploymentConfig>,
    slot: ConfigSlot,
    shared: Arc<Shared>,
    requests: mpsc::Receiver<Request>,
    /// Its own request channel, for the policy tick to ask for recycles.
    me: mpsc::WeakSender<Request>,
    status: Arc<Mutex<Status>>,
}

impl Task {
    fn update(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.status.lock().unwrap_or_else(|p| p.into_inner()));
    }

    fn set_state(&self, state: State) {
        self.update(|s| s.state = state);
    }

    fn restart_policy(&self) -> RestartPolicy {
        RestartPolicy {
            backoff_initial: self.cfg.restart.backoff_initial,
            backoff_max: self.cfg.restart.backoff_max,
            max_restarts: self.cfg.restart.max_restarts,
            period: self.cfg.restart.period,
            healthy_after: RestartPolicy::default().healthy_after,
        }
    }

    async fn run(mut self) {
        let id = self.cfg.id.clone();
        let mut restarts = RestartTracker::default();
        let mut recycling: Option<Recycling> = None;
        loop {
            // A reload may have replaced the configuration since the last child.
            self.cfg = self.slot.lock().unwrap_or_else(|p| p.into_inner()).clone();
            self.set_state(State::Starting);
            let spawned_at = Instant::now();
            let (ending, pid, channel) = self.live_child(&mut recycling).await;

            let deployment = id.clone();
            match self
                .shared
                .store
                .call(move |s| s.replay_mail(&deployment))
                .await
            {
                Ok(Ok(0)) => {}
                Ok(Ok(n)) => {
                    info!(deployment = %id, items = n, "unacknowledged mail returned to the head of the inbox")
                }
                Ok(Err(e)) => {
                    error!(deployment = %id, error = %e, "cannot return unacknowledged mail to the inbox")
                }
                Err(e) => {
                    error!(deployment = %id, error = %e, "cannot return unacknowledged mail to the inbox")
                }
            }
            let end = match &ending {
                Ending::Crashed(e)
                | Ending::Stopped(e)
                | Ending::Drained(e)
                | Ending::Recycled(_, e) => e,
            };
            let description = end.describe();
            self.update(|s| {
                s.pid = None;
                s.channel_id = None;
                s.started_at = None;
                s.grants_read_at = None;
                s.rss_bytes = None;
                s.last_exit = Some(description.clone());
            });
            if pid.is_some() {
                let body =
                    serde_json::json!({"pid": pid, "channel_id": channel, "reason": description});
                self.shared.journal("exit", Some(&id), body.clone());
                self.shared.event("exited", Some(&id), body);
            }

            match ending {
                Ending::Stopped(_) => {
                    info!(deployment = %id, reason = %description, "stopped");
                    self.set_state(State::Exited);
                    return;
                }
                Ending::Drained(_) => {
                    info!(deployment = %id, "drained; it stays drained until `wfhost resume`");
                    self.shared
                        .journal("drained", Some(&id), serde_json::json!({"pid": pid}));
                    match self.park(State::Drained).await {
                        Unpark::Resume => restarts.reset(),
                        Unpark::Exit => return,
                    }
                }
                Ending::Recycled(trigger, _) => {
                    recycling = Some(Recycling {
                        trigger,
                        old_pid: pid,
                        old_channel: channel,
                    });
                }
                Ending::Crashed(reason) => {
                    if let EndReason::Violation(_) = reason {
                        self.update(|s| s.violations += 1);
                    }
                    if let Some(r) = recycling.take() {
                        r.trigger
                            .answer(Err(format!("the new child of {id} failed: {description}")));
                    }
                    if let EndReason::Exited(_) | EndReason::Killed = reason {
                        warn!(deployment = %id, reason = %description, "child ended");
                    }
                    match restarts.on_exit(&self.restart_policy(), spawned_at, Instant::now()) {
                        RestartDecision::Restart { delay, attempt } => {
                            self.update(|s| s.restarts += 1);
                            self.set_state(State::Backoff);
                            info!(deployment = %id, delay = %format_duration(delay), attempt, "restarting");
                            let body = serde_json::json!({
                                "attempt": attempt, "delay_ms": delay.as_millis() as u64, "after": description,
                            });
                            self.shared.journal("restart", Some(&id), body.clone());
                            self.shared.event("restarting", Some(&id), body);
                            match self.backoff(delay).await {
                                Some(Unpark::Exit) => return,
                                Some(Unpark::Resume) => restarts.reset(),
                                None => {}
                            }
                        }
                        RestartDecision::GiveUp {
                            restarts: n,
                            period,
                        } => {
                            error!(deployment = %id, restarts = n, period = %format_duration(period), last = %description,
                                "too many restarts within the period; deployment failed and will not be restarted \
                                 until `wfhost resume`");
                            let body = serde_json::json!({
                                "restarts": n, "period_ms": period.as_millis() as u64, "last": description,
                            });
                            self.shared.journal("failed", Some(&id), body.clone());
                            self.set_state(State::Failed);
                            self.shared.started.notify_one();
                            self.shared.event("failed", Some(&id), body);
                            match self.park(State::Failed).await {
                                Unpark::Resume => restarts.reset(),
                                Unpark::Exit => return,
                            }
                        }
                    }
                }
            }
        }
    }

    /// Spawns, handshakes and serves one child; returns how it ended with
    /// its pid and channel id (none when it never started).
    async fn live_child(
        &mut self,
        recycling: &mut Option<Recycling>,
    ) -> (Ending, Option<u32>, Option<String>) {
        let checked = recycling.as_mut().and_then(|r| r.trigger.grants.take());
        let mut child = match LiveChild::spawn(
            self.cfg.clone(),
            self.shared.clone(),
            self.status.clone(),
            checked,
        )
        .await
        {
            Ok(child) => child,
            Err(reason) => {
                error!(deployment = %self.cfg.id, reason = %reason.describe(), "cannot start a child");
                return (Ending::Crashed(reason), None, None);
            }
        };
        let (pid, channel) = (child.pid(), child.channel_id().to_owned());
        let (started_at, grants_read_at) = (child.started_at, child.grants_read_at);
        self.update(|s| {
            s.pid = Some(pid);
            s.channel_id = Some(channel.clone());
            s.started_at = Some(started_at);
            s.grants_read_at = grants_read_at;
        });
        let pending = match child.handshake(&mut self.requests).await {
            Ok(pending) => pending,
            Err(reason @ EndReason::Stopped(_)) => {
                return (Ending::Stopped(reason), Some(pid), Some(channel));
            }
            Err(reason) => return (Ending::Crashed(reason), Some(pid), Some(channel)),
        };
        let first = !self
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .ever_ready;
        self.update(|s| {
            s.state = State::Ready;
            s.ever_ready = true;
        });
        if first {
            self.shared.started.notify_one();
        }
        info!(deployment = %self.cfg.id, pid, channel = %channel, "ready");
        self.shared.event(
            "ready",
            Some(&self.cfg.id),
            serde_json::json!({"pid": pid, "channel_id": channel}),
        );
        if let Some(r) = recycling.take() {
            self.recycled(r, pid, &channel);
        }
        let ending = child
            .run(&mut self.requests, self.me.clone(), pending)
            .await;
        (ending, Some(pid), Some(channel))
    }

    /// The new child of a recycle is ready: journal it, count it, answer
    /// the operators waiting for it.
    fn recycled(&self, r: Recycling, new_pid: u32, new_channel: &str) {
        let origin = r.trigger.origin;
        let body = serde_json::json!({
            "origin": origin.as_str(), "reason": r.trigger.reason,
            "old_pid": r.old_pid, "new_pid": new_pid,
            "old_channel_id": r.old_channel, "new_channel_id": new_channel,
        });
        info!(deployment = %self.cfg.id, origin = origin.as_str(), reason = %r.trigger.reason,
            old_pid = ?r.old_pid, new_pid, "recycled");
        self.shared
            .journal("recycle", Some(&self.cfg.id), body.clone());
        self.shared.event("recycled", Some(&self.cfg.id), body);
        self.update(|s| {
            match origin {
                Origin::Policy => s.recycles.policy += 1,
                Origin::Operator => s.recycles.operator += 1,
                Origin::SelfRequest => s.recycles.self_ += 1,
            }
            let reason = match origin {
                Origin::Policy => r
                    .trigger
                    .reason
                    .split(':')
                    .next()
                    .unwrap_or("policy")
                    .to_owned(),
                other => other.as_str().to_owned(),
            };
            *s.recycle_reasons.entry(reason).or_default() += 1;
            s.last_recycle = Some(LastRecycle {
                origin: origin.as_str(),
                reason: r.trigger.reason.clone(),
                at_ms: unix_ms(),
                old_pid: r.old_pid,
                new_pid,
            });
        });
        r.trigger.answer(Ok(new_pid));
    }

    /// Waits out a restart delay; returns what an operator decided
    /// meanwhile, if anything.
    async fn backoff(&mut self, delay: Duration) -> Option<Unpark> {
        let deadline = tokio::time::Instant::now() + delay;
        loop {
            // A zero delay (the first restart after a healthy run) must not
            // wait for the timer's next tick: only requests already queued
            // are looked at.
            let request = if delay.is_zero() {
                match self.requests.try_recv() {
                    Ok(request) => Some(request),
                    Err(mpsc::error::TryRecvError::Empty) => return None,
                    Err(mpsc::error::TryRecvError::Disconnected) => None,
                }
            } else {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => return None,
                    request = self.requests.recv() => request,
                }
            };
            match request {
                None | Some(Request::Stop) => {
                    self.set_state(State::Exited);
                    return Some(Unpark::Exit);
                }
                Some(Request::Drain { reply }) => {
                    let _ = reply.send(Ok(format!(
                        "{} has no live child; it is drained now",
                        self.cfg.id
                    )));
                    return Some(self.park(State::Drained).await);
                }
                Some(Request::Kill | Request::MailArrived) => {}
                Some(other) => {
                    refuse_while(&self.cfg.id, "waiting to restart after a crash", other)
                }
            }
        }
    }

    /// Holds a deployment with no child (drained or failed) until it is
    /// resumed or the supervisor stops. Mail waits in the inbox.
    async fn park(&mut self, state: State) -> Unpark {
        self.set_state(state);
        loop {
            match self.requests.recv().await {
                None | Some(Request::Stop) => {
                    if state != State::Drained {
                        self.set_state(State::Exited);
                    }
                    return Unpark::Exit;
                }
                Some(Request::Resume { reply }) => {
                    info!(deployment = %self.cfg.id, from = state.as_str(), "resumed by an operator");
                    self.shared.journal(
                        "resume",
                        Some(&self.cfg.id),
                        serde_json::json!({"from": state.as_str()}),
                    );
                    let _ = reply.send(Ok(format!("{} is starting a fresh child", self.cfg.id)));
                    return Unpark::Resume;
                }
                Some(Request::Drain { reply }) => {
                    let _ =
                        reply.send(Ok(format!("{} is already {}", self.cfg.id, state.as_str())));
                }
                Some(Request::Kill | Request::MailArrived) => {}
                Some(other) => refuse_while(
                    &self.cfg.id,
                    &format!(
                        "{}; `wfhost resume {}` starts a fresh child",
                        state.as_str(),
                        self.cfg.id
                    ),
                    other,
                ),
            }
        }
    }
}
