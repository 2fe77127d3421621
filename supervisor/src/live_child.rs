//! One live child: spawn, handshake, the event loop while it runs, liveness,
//! and the stop sequence (SIGTERM to the group, SIGKILL after
//! `kill_timeout`, always reaped).

use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Child;
use tokio::sync::mpsc;
use tokio::time::sleep_until;
use tracing::{debug, error, info, warn};
use wfhost_ipc::handshake::{
    CONTROL_FD, ENV_CHANNEL_ID, ENV_CONTROL_FD, ENV_DEPLOYMENT, ENV_PROTOCOL, ENV_SUPERVISOR_KEY,
};
use wfhost_ipc::{
    CancelOrigin, Control, Event, FrameReader, FrameWriter, Grants, Limits, PROTOCOL_VERSION,
    ProtocolViolation, TransportError, Welcome, key,
};
use wfhost_policy::drain::BudgetState;
use wfhost_policy::kill::KillEscalation;
use wfhost_policy::liveness::Liveness;
use wfhost_policy::steps::{DrainTracker, Escalation};

use crate::cancel::{self, CancelQueue};
use crate::config::{DeploymentConfig, format_duration};
use crate::deployment::Request;
use crate::drain::{self, Purpose};
use crate::grants;
use crate::mail::{self, Dispatch};
use crate::policy_tick::Watched;
use crate::procfs::RssReader;
use crate::recycle::{self, Origin, Trigger};
use crate::shared::{Shared, unix_ms};
use crate::spawn::{ChildSpec, Spawned};
use crate::status::{DrainView, State, Status, StepView};

/// Most steps a child may have in flight; more is a protocol violation
/// (every size is bounded, DESIGN §9).
const MAX_STEPS_IN_FLIGHT: usize = 10_000;

/// How long a stop waits to hand `Shutdown` to a child before signalling.
const SHUTDOWN_SEND_TIMEOUT: Duration = Duration::from_millis(100);

/// How long to read what an exited child wrote last: it is already in the
/// socket, but a grandchild that inherited the channel could hold it open.
const LEFTOVER_WAIT: Duration = Duration::from_millis(250);

/// Longest reason or kind text taken from a child.
const MAX_REASON_CHARS: usize = 512;

/// Longest child output line kept in the log; the rest is cut.
const MAX_LOG_LINE: usize = 16 * 1024;

/// Read buffer of each output stream. tokio's `BufReader` default is
/// 8 KiB, zero-filled up front: two streams a child made it 1.6 MiB of an
/// idle 100-child supervisor (DESIGN §10). Lines longer than this are
/// gathered over several reads; each line costs a log write anyway.
const LOG_READ_BYTES: usize = 1024;

/// PATH given to children that configure none (as systemd does).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Why a child's wiring ended.
#[derive(Debug)]
pub enum EndReason {
    /// It could not be started at all.
    SpawnFailed(String),
    /// It exited without being asked to.
    Exited(ExitStatus),
    /// It broke the protocol and was killed.
    Violation(String),
    /// It stopped answering pings and was killed.
    Hung,
    /// It sent no `Ready` within `ready_timeout` and was killed.
    NotReady,
    /// An operator killed it (`wfhost kill`).
    Killed,
    /// The supervisor stopped it on request.
    Stopped(ExitStatus),
}

impl EndReason {
    /// One line for logs, status and the journal.
    pub fn describe(&self) -> String {
        match self {
            Self::SpawnFailed(e) => format!("spawn failed: {e}"),
            Self::Exited(s) => format!("exited unexpectedly: {}", describe_status(*s)),
            Self::Violation(v) => format!("protocol violation: {v}"),
            Self::Hung => "hung: no pong (or no reading) within liveness_timeout".to_owned(),
            Self::NotReady => "no Ready within ready_timeout".to_owned(),
            Self::Killed => "killed by an operator".to_owned(),
            Self::Stopped(s) => format!("stopped: {}", describe_status(*s)),
        }
    }
}

/// "status 3" or "signal 9 (SIGKILL)".
pub fn describe_status(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => match Signal::try_from(sig) {
            Ok(s) => format!("killed by signal {sig} ({})", s.as_str()),
            Err(_) => format!("killed by signal {sig}"),
        },
        _ => "unknown exit status".to_owned(),
    }
}

/// How a ready child's wiring ended.
#[derive(Debug)]
pub enum Ending {
    /// It ended on its own or was killed for misbehaving: the restart policy
    /// decides what follows.
    Crashed(EndReason),
    /// The supervisor is stopping and the child is stopped.
    Stopped(EndReason),
    /// An operator drain completed and the child is stopped.
    Drained(EndReason),
    /// A recycle drained and stopped the child; a new one is due.
    Recycled(Trigger, EndReason),
}

/// A child while it lives.
pub struct LiveChild {
    cfg: Arc<DeploymentConfig>,
    shared: Arc<Shared>,
    status: Arc<Mutex<Status>>,
    child: Child,
    pid: u32,
    channel_id: String,
    reader: FrameReader<Event>,
    writer: FrameWriter<Control>,
    grants: Grants,
    /// When it was spawned.
    pub started_at: Instant,
    /// When its grants were read, if it has a grants file.
    pub grants_read_at: Option<Instant>,
    /// The budget's state at the last status update, to log transitions.
    budget_state: BudgetState,
    /// A send timed out: the child no longer reads its channel.
    stalled: bool,
}

impl LiveChild {
    /// Spawns a child for `cfg` with a fresh channel id and freshly read
    /// grants (or, if the file cannot be read, the `checked` ones a recycle
    /// read as it began), and records it in the store so a later
    /// supervisor can clean it up after a crash.
    pub async fn spawn(
        cfg: Arc<DeploymentConfig>,
        shared: Arc<Shared>,
        status: Arc<Mutex<Status>>,
        checked: Option<grants::Fresh>,
    ) -> Result<Self, EndReason> {
        let (grants, grants_read_at) = match &cfg.grants_file {
            Some(path) => {
                let (g, at) = match (grants::read(path), checked) {
                    (Ok(fresh), _) => fresh,
                    (Err(e), Some(checked)) => {
                        warn!(deployment = %cfg.id, error = %e,
                            "grants_file broke during the recycle; the new child gets the grants read when it began");
                        checked
                    }
                    (Err(e), None) => return Err(EndReason::SpawnFailed(e)),
                };
                (g, Some(at))
            }
            None => (Grants::default(), None),
        };
        let channel_id = wfhost_ipc::new_channel_id()
            .map_err(|e| EndReason::SpawnFailed(format!("cannot mint a channel id: {e}")))?;
        let spec = child_spec(
            &cfg,
            &channel_id,
            &key::public_hex(&shared.key.verifying_key()),
        );
        debug!(deployment = %cfg.id, channel = %channel_id, "spawning");
        let Spawned {
            child,
            pid,
            control,
            stdout,
            stderr,
        } = shared
            .spawner
            .spawn(spec)
            .await
            .map_err(|e| EndReason::SpawnFailed(format!("{}: {e}", cfg.command[0])))?;
        let started_at = Instant::now();
        if let Some(out) = stdout {
            tokio::spawn(log_lines(out, cfg.id.clone(), pid, "stdout"));
        }
        if let Some(err) = stderr {
            tokio::spawn(log_lines(err, cfg.id.clone(), pid, "stderr"));
        }
        shared.remember_child(&cfg.id, pid, &channel_id);
        info!(deployment = %cfg.id, pid, channel = %channel_id, "spawned");
        let body = serde_json::json!({"pid": pid, "channel_id": channel_id});
        shared.journal("spawn", Some(&cfg.id), body.clone());
        shared.event("spawned", Some(&cfg.id), body);
        let (reader, writer) = wfhost_ipc::split(control, cfg.max_frame_bytes);
        Ok(Self {
            cfg,
            shared,
            status,
            child,
            pid,
            channel_id,
            reader,
            writer,
            grants,
            started_at,
            grants_read_at,
            budget_state: BudgetState::Idle,
            stalled: false,
        })
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The channel id minted for this spawn.
    pub fn channel_id(&self) -> &str {
        &self.channel_id
    }

    fn update(&self, f: impl FnOnce(&mut Status)) {
        f(&mut self.status.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Sends one message, giving up after `liveness_timeout`: a child that
    /// stops reading its channel must not wedge its deployment's task. A
    /// send that times out marks the child stalled (a half-written frame
    /// leaves the channel unusable), and the loop kills it as hung.
    async fn send(&mut self, message: Control) -> Result<(), String> {
        match tokio::time::timeout(self.cfg.liveness_timeout, self.writer.send(message)).await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => {
                self.stalled = true;
                Err("the child has not read its control channel within liveness_timeout".into())
            }
        }
    }

    /// Hello → Welcome → Ready within `ready_timeout`. On failure the child
    /// is killed and reaped and the reason returned; a stop request during
    /// the handshake stops the child the usual way. A drain asked for in the
    /// meantime is returned, to start as soon as the child is ready.
    pub async fn handshake(
        &mut self,
        requests: &mut mpsc::Receiver<Request>,
    ) -> Result<Option<Purpose>, EndReason> {
        enum Outcome {
            Reason(EndReason),
            Stop,
        }
        let mut pending = None;
        let deadline = tokio::time::Instant::now() + self.cfg.ready_timeout;
        let outcome = {
            let hello = exchange_hello(
                &mut self.reader,
                &mut self.writer,
                &self.cfg,
                &self.channel_id,
                &self.grants,
                &self.status,
            );
            tokio::pin!(hello);
            loop {
                tokio::select! {
                    r = tokio::time::timeout_at(deadline, &mut hello) => break match r {
                        Ok(Ok(())) => return Ok(pending),
                        Ok(Err(reason)) => Outcome::Reason(reason),
                        Err(_) => Outcome::Reason(EndReason::NotReady),
                    },
                    status = self.child.wait() => break Outcome::Reason(match status {
                        Ok(s) => EndReason::Exited(s),
                        Err(e) => EndReason::Violation(format!("cannot wait for child: {e}")),
                    }),
                    request = requests.recv() => match request {
                        None | Some(Request::Stop) => break Outcome::Stop,
                        Some(Request::Kill) => break Outcome::Reason(EndReason::Killed),
                        Some(Request::Drain { reply }) => {
                            if let Some(Purpose::Recycle(trigger)) = pending.replace(Purpose::Operator) {
                                trigger.answer(Err(format!("not recycled: {} is being drained", self.cfg.id)));
                            }
                            let _ = reply.send(Ok(format!("{} will drain as soon as its new child is ready", self.cfg.id)));
                        }
                        // Carried out once the child is ready, like any
                        // other: drained, replaced, journaled.
                        Some(Request::Recycle { origin, reason, reply }) => match &mut pending {
                            None => pending = Some(Purpose::Recycle(Trigger::new(origin, reason, reply))),
                            Some(Purpose::Recycle(trigger)) => trigger.replies.extend(reply),
                            Some(_) => {
                                if let Some(reply) = reply {
                                    let _ = reply.send(Err(format!("not recycled: {} will drain as soon as its new child is ready", self.cfg.id)));
                                }
                            }
                        },
                        Some(Request::MailArrived) => {}
                        Some(other) => refuse_while(&self.cfg.id, "starting", other),
                    },
                }
            }
        };
        let end = match outcome {
            Outcome::Reason(reason) => self.kill_for(reason).await,
            Outcome::Stop => self.stop(requests, None).await,
        };
        if let Some(Purpose::Recycle(trigger)) = pending {
            trigger.answer(Err(format!(
                "not recycled: the new child (pid {}) of {} never became ready: {}",
                self.pid,
                self.cfg.id,
                end.describe()
            )));
        }
        Err(end)
    }

    /// Serves a ready child until it ends, is stopped, drained or recycled.
    /// `pending` is a drain or recycle asked for while it was starting.
    pub async fn run(
        &mut self,
        requests: &mut mpsc::Receiver<Request>,
        me: mpsc::WeakSender<Request>,
        pending: Option<Purpose>,
    ) -> Ending {
        let now = Instant::now();
        let mut session = None;
        let mut liveness =
            Liveness::new(self.cfg.liveness_interval, self.cfg.liveness_timeout, now);
        let mut tracker = DrainTracker::new();
        let mut cancels = CancelQueue::default();
        let mut dispatch = Dispatch::default();
        let mut commit: Option<Commit> = None;
        self.publish_drain(&tracker, session.as_ref(), now);
        self.shared.watchlist.add(Watched {
            deployment: self.cfg.id.clone(),
            pid: self.pid,
            started_at: self.started_at,
            grants_read_at: self.grants_read_at,
            bounds: recycle::bounds(&self.cfg),
            jitter: recycle::jitter(&self.channel_id),
            rss: std::sync::Mutex::new(RssReader::open(self.pid).ok()),
            status: self.status.clone(),
            requests: me,
            asked: Default::default(),
        });
        if let Some(purpose) = pending {
            self.drain_for(purpose, &mut session, &mut tracker, now)
                .await;
            self.publish_drain(&tracker, session.as_ref(), now);
        }
        loop {
            let now = Instant::now();
            if self.stalled {
                let end = self.kill_for(EndReason::Hung).await;
                return self.conclude(session.map(|s| s.purpose), end, &mut cancels);
            }
            if let Some(s) = &session
                && s.complete(tracker.steps().is_empty())
            {
                let mut purpose = self.end_drain(&mut tracker, session.take(), now, "drained");
                let end = self.stop(requests, purpose.as_mut()).await;
                return self.conclude(purpose, end, &mut cancels);
            }
            if session.is_none()
                && let Some(n) = dispatch.to_take()
            {
                self.deliver_mail(&mut dispatch, n).await;
            }
            if commit.is_none() {
                commit = self.start_commit(&cancels);
            }

            let wakes = [
                Some(coalesced(
                    liveness.next_wake(now),
                    self.cfg.liveness_interval,
                )),
                tracker.deadline(),
                session.as_ref().and_then(|s| s.deadline),
                if commit.is_none() {
                    cancels.wake()
                } else {
                    None
                },
            ];
            let wake = wakes
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(now + Duration::from_secs(3600));
            tokio::select! {
                event = self.reader.next() => match event {
                    Ok(Some(event)) => {
                        let now = Instant::now();
                        match self.on_event(event, &mut liveness, &mut tracker, &mut dispatch, now).await {
                            Ok(Reaction::Nothing) => {}
                            Ok(Reaction::Drained) => {
                                if let Some(s) = session.as_mut() {
                                    s.drained = true;
                                }
                            }
                            Ok(Reaction::Recycle(trigger)) => {
                                let purpose = Purpose::Recycle(trigger);
                                self.drain_for(purpose, &mut session, &mut tracker, now).await;
                            }
                            Err(reason) => {
                                let end = self.kill_for(reason).await;
                                return self.conclude(session.map(|s| s.purpose), end, &mut cancels);
                            }
                        }
                        self.publish_drain(&tracker, session.as_ref(), now);
                    }
                    Ok(None) => {
                        debug!(deployment = %self.cfg.id, pid = self.pid, "child closed its control channel");
                        let end = self.await_exit_after_close().await;
                        let purpose = self.end_drain(&mut tracker, session.take(), Instant::now(), "child exited");
                        return self.conclude(purpose, end, &mut cancels);
                    }
                    Err(e) => {
                        let end = self.kill_for(transport(e)).await;
                        return self.conclude(session.map(|s| s.purpose), end, &mut cancels);
                    }
                },
                status = self.child.wait() => {
                    let end = self.exited(status);
                    for event in self.leftover_events().await {
                        // Only its record matters now: the child is gone.
                        let _ = self.on_event(event, &mut liveness, &mut tracker, &mut dispatch, Instant::now()).await;
                    }
                    let purpose = self.end_drain(&mut tracker, session.take(), Instant::now(), "child exited");
                    return self.conclude(purpose, end, &mut cancels);
                }
                _ = sleep_until(tokio::time::Instant::from_std(wake)) => {
                    let now = Instant::now();
                    if liveness.hung(now) {
                        let end = self.kill_for(EndReason::Hung).await;
                        return self.conclude(session.map(|s| s.purpose), end, &mut cancels);
                    }
                    if let Some(nonce) = liveness.ping_due(now)
                        && let Err(e) = self.send(Control::Ping { nonce }).await
                    {
                        debug!(deployment = %self.cfg.id, pid = self.pid, error = %e, "ping not sent");
                    }
                    if let Some(escalation) = tracker.poll(now) {
                        self.escalate(escalation, &mut cancels);
                        self.publish_drain(&tracker, session.as_ref(), now);
                    }
                    if let Some(s) = &session
                        && s.deadline.is_some_and(|d| now >= d)
                    {
                        warn!(deployment = %self.cfg.id, pid = self.pid, purpose = s.purpose.as_str(),
                            "drain_deadline passed before the child drained; stopping it");
                        let mut purpose = self.end_drain(&mut tracker, session.take(), now, "drain_deadline passed");
                        let end = self.stop(requests, purpose.as_mut()).await;
                        return self.conclude(purpose, end, &mut cancels);
                    }
                }
                result = wait_commit(&mut commit) => {
                    commit = None;
                    self.commit_done(result, &mut cancels).await;
                }
                request = requests.recv() => {
                    let now = Instant::now();
                    match request {
                        None | Some(Request::Stop) => {
                            self.drain_for(Purpose::Stop, &mut session, &mut tracker, now).await;
                        }
                        Some(Request::Kill) => {
                            warn!(deployment = %self.cfg.id, pid = self.pid, "operator forced SIGKILL");
                            kill_tree(self.pid);
                        }
                        Some(Request::Drain { reply }) => {
                            let budget = self.cfg.drain_timeout;
                            self.drain_for(Purpose::Operator, &mut session, &mut tracker, now).await;
                            let _ = reply.send(Ok(format!(
                                "draining {} (pid {}) under a {} budget; it stays drained until `wfhost resume`",
                                self.cfg.id, self.pid, format_duration(budget)
                            )));
                        }
                        Some(Request::Resume { reply }) => {
                            let _ = reply.send(Err(format!("{} is not drained (pid {} is live)", self.cfg.id, self.pid)));
                        }
                        Some(Request::Recycle { origin, reason, reply }) => {
                            let trigger = Trigger::new(origin, reason, reply);
                            self.drain_for(Purpose::Recycle(trigger), &mut session, &mut tracker, now).await;
                        }
                        Some(Request::Cancel { run, reply }) => self.operator_cancel(run, reply, &tracker, &mut cancels),
                        Some(Request::MailArrived) => dispatch.want(),
                    }
                    self.publish_drain(&tracker, session.as_ref(), now);
                }
            }
        }
    }

    /// Reacts to one event from a ready child.
    async fn on_event(
        &mut self,
        event: Event,
        liveness: &mut Liveness,
        tracker: &mut DrainTracker,
        dispatch: &mut Dispatch,
        now: Instant,
    ) -> Result<Reaction, EndReason> {
        let id = &self.cfg.id;
        match event {
            Event::Pong { nonce } => {
                liveness.on_pong(nonce, now);
            }
            Event::Hello(_) | Event::Ready => return Err(unexpected(event.name(), "ready")),
            Event::StepStarted { run, step, drain } => {
                if tracker.steps().len() >= MAX_STEPS_IN_FLIGHT {
                    return Err(EndReason::Violation(format!(
                        "more than {MAX_STEPS_IN_FLIGHT} steps in flight"
                    )));
                }
                self.shared.event(
                    "step_started",
                    Some(id),
                    serde_json::json!({"run": run, "step": step, "drain": drain.as_str()}),
                );
                tracker.on_step_started(run, step, drain, now);
            }
            Event::StepFinished { run, step, outcome } => {
                tracker.on_step_finished(&run, &step, now);
                self.shared.event(
                    "step_finished",
                    Some(id),
                    serde_json::json!({"run": run, "step": step, "outcome": mail::outcome_text(&outcome)}),
                );
            }
            Event::RunTerminal { run, outcome } => {
                tracker.on_run_terminal(&run, now);
                self.shared.event(
                    "run_terminal",
                    Some(id),
                    serde_json::json!({"run": run, "outcome": mail::outcome_text(&outcome)}),
                );
            }
            Event::MailAck {
                id: mail_id,
                outcome,
            } => {
                if self.record_ack(mail_id, &outcome).await {
                    dispatch.acked();
                }
            }
            Event::Drained => {
                self.shared
                    .event("drained", Some(id), serde_json::json!({"pid": self.pid}));
                return Ok(Reaction::Drained);
            }
            Event::RecycleRequest { reason } => {
                let reason: String = reason.chars().take(MAX_REASON_CHARS).collect();
                info!(deployment = %id, pid = self.pid, reason = %reason, "the child asked to be recycled");
                return Ok(Reaction::Recycle(Trigger::new(
                    Origin::SelfRequest,
                    reason,
                    None,
                )));
            }
            Event::Custom { kind, bytes } => {
                let kind: String = kind.chars().take(MAX_REASON_CHARS).collect();
                self.shared.event(
                    "custom",
                    Some(id),
                    serde_json::json!({"kind": kind, "bytes": bytes.len()}),
                );
            }
        }
        Ok(Reaction::Nothing)
    }

    /// Moves acknowledged mail to done; true when it was in processing.
    async fn record_ack(&self, mail_id: u64, outcome: &wfhost_ipc::Outcome) -> bool {
        let id = &self.cfg.id;
        let (deployment, text, at) = (id.clone(), mail::outcome_text(outcome), unix_ms());
        match self
            .shared
            .store
            .call(move |s| s.ack_mail(&deployment, mail_id, &text, at))
            .await
        {
            Ok(Ok(true)) => {
                // The store wrote the `mail_done` event with the ack.
                self.shared.events_written();
                true
            }
            Ok(Ok(false)) => {
                debug!(deployment = %id, mail = mail_id, "ack for mail not in processing; ignored");
                false
            }
            Ok(Err(e)) => {
                error!(deployment = %id, mail = mail_id, error = %e, "cannot record a mail ack");
                false
            }
            Err(e) => {
                error!(deployment = %id, mail = mail_id, error = %e, "cannot record a mail ack");
                false
            }
        }
    }

    /// Starts a drain for `purpose`, or merges it into the drain under way.
    async fn drain_for(
        &mut self,
        purpose: Purpose,
        session: &mut Option<drain::Session>,
        tracker: &mut DrainTracker,
        now: Instant,
    ) {
        match session {
            Some(s) => {
                let lost = s.merge(purpose, now, self.cfg.drain_deadline);
                if let Some(Purpose::Recycle(trigger)) = lost {
                    trigger.answer(Err(format!(
                        "not recycled: {} is being {} ({})",
                        self.cfg.id,
                        if matches!(s.purpose, Purpose::Stop) {
                            "stopped"
                        } else {
                            "drained"
                        },
                        s.purpose.as_str()
                    )));
                }
            }
            None => {
                let Some(purpose) = self.check_successor(purpose) else {
                    return;
                };
                let s = drain::Session::new(purpose, now, self.cfg.drain_deadline);
                self.send_drain(tracker, &s, now).await;
                *session = Some(s);
            }
        }
    }

    /// A recycle replaces this child with a new one: if that one could not
    /// start now (its program gone or not executable, its grants file
    /// unreadable), the recycle is refused and this child keeps serving,
    /// rather than being replaced by none. The grants read here go with the
    /// recycle, for the new child should the file break while this one
    /// drains.
    fn check_successor(&self, purpose: Purpose) -> Option<Purpose> {
        let mut trigger = match purpose {
            Purpose::Recycle(trigger) => trigger,
            other => return Some(other),
        };
        let e = match self.successor_needs() {
            Ok(grants) => {
                trigger.grants = grants;
                return Some(Purpose::Recycle(trigger));
            }
            Err(e) => e,
        };
        let (id, pid) = (&self.cfg.id, self.pid);
        let (origin, reason) = (trigger.origin, &trigger.reason);
        error!(deployment = %id, pid, origin = origin.as_str(), reason = %reason, error = %e,
            "recycle refused: a new child could not start; the old one keeps serving");
        self.shared.event(
            "recycle_refused",
            Some(id),
            serde_json::json!({"pid": pid, "origin": origin.as_str(), "reason": reason, "error": e}),
        );
        if origin == Origin::Policy {
            // The bound is still passed: ask again at the next tick.
            self.shared.watchlist.rearm(pid);
        }
        trigger.answer(Err(format!(
            "not recycled: {e}; {id} keeps running on pid {pid}"
        )));
        None
    }

    /// What a new child needs that can be checked before this one drains:
    /// an executable program, and grants (read, if the deployment has a
    /// grants file).
    fn successor_needs(&self) -> Result<Option<grants::Fresh>, String> {
        if let Some(program) = self.cfg.command.first() {
            nix::unistd::access(program.as_str(), nix::unistd::AccessFlags::X_OK).map_err(|e| {
                format!("command {program} cannot be run ({e}); restore it or fix the config")
            })?;
        }
        self.cfg
            .grants_file
            .as_deref()
            .map(grants::read)
            .transpose()
    }

    /// Tells the child to drain and starts the budget.
    async fn send_drain(&mut self, tracker: &mut DrainTracker, s: &drain::Session, now: Instant) {
        let budget = self.cfg.drain_timeout;
        tracker.begin_drain(now, budget);
        let budget_ms = budget.as_millis() as u64;
        let mut body = serde_json::json!({"pid": self.pid, "purpose": s.purpose.as_str(), "budget_ms": budget_ms});
        if let Purpose::Recycle(t) = &s.purpose {
            body["origin"] = t.origin.as_str().into();
            body["reason"] = t.reason.clone().into();
        }
        info!(deployment = %self.cfg.id, pid = self.pid, purpose = s.purpose.as_str(), budget = %format_duration(budget), "draining");
        self.shared
            .journal("drain", Some(&self.cfg.id), body.clone());
        self.shared.event("drain_started", Some(&self.cfg.id), body);
        self.update(|st| st.state = State::Draining);
        if let Err(e) = self.send(Control::Drain { budget_ms }).await {
            debug!(deployment = %self.cfg.id, pid = self.pid, error = %e, "drain not sent");
        }
    }

    /// Ends the budget of a drain that is over, for whatever reason.
    fn end_drain(
        &mut self,
        tracker: &mut DrainTracker,
        session: Option<drain::Session>,
        now: Instant,
        why: &str,
    ) -> Option<Purpose> {
        let s = session?;
        let used = tracker.used(now);
        tracker.end_drain(now);
        self.shared.event(
            "drain_ended",
            Some(&self.cfg.id),
            serde_json::json!({"purpose": s.purpose.as_str(), "why": why, "used_ms": used.as_millis() as u64}),
        );
        self.publish_drain(tracker, None, now);
        Some(s.purpose)
    }

    /// Copies the drain budget and the steps in flight into the status, and
    /// logs the budget pausing and resuming.
    fn publish_drain(
        &mut self,
        tracker: &DrainTracker,
        session: Option<&drain::Session>,
        now: Instant,
    ) {
        let d = tracker.status(now);
        if d.active && d.state != self.budget_state {
            let kind = match d.state {
                BudgetState::Paused => Some("drain_paused"),
                BudgetState::Running if self.budget_state == BudgetState::Paused => {
                    Some("drain_resumed")
                }
                _ => None,
            };
            if let Some(kind) = kind {
                debug!(deployment = %self.cfg.id, pid = self.pid, used = ?d.used, "{kind}");
                self.shared.event(
                    kind,
                    Some(&self.cfg.id),
                    serde_json::json!({"used_ms": d.used.as_millis() as u64}),
                );
            }
        }
        self.budget_state = d.state;
        let steps: Vec<StepView> = tracker
            .steps()
            .iter()
            .map(|(run, step, b)| StepView {
                run: run.to_owned(),
                step: step.to_owned(),
                drain: b.as_str(),
            })
            .collect();
        let purpose = session.map(|s| s.purpose.as_str().to_owned());
        let budget_ms = d.budget.unwrap_or(self.cfg.drain_timeout).as_millis() as u64;
        self.update(|st| {
            st.drain = DrainView {
                active: d.active,
                budget_ms,
                used_ms: d.used.as_millis() as u64,
                running_since: (d.state == BudgetState::Running).then_some(now),
                escalated: d.escalated || (st.drain.escalated && d.active),
                purpose,
            };
            st.steps = steps;
        });
    }

    /// The budget ran out: a signed cancel for every run that still had
    /// cancel-behaviour work, each committed before it is sent.
    fn escalate(&mut self, escalation: Escalation, cancels: &mut CancelQueue) {
        let reason = format!(
            "drain budget of {} spent",
            format_duration(escalation.budget)
        );
        warn!(deployment = %self.cfg.id, pid = self.pid, runs = ?escalation.runs, "{reason}; cancelling");
        self.shared.event(
            "drain_escalated",
            Some(&self.cfg.id),
            serde_json::json!({"runs": escalation.runs, "budget_ms": escalation.budget.as_millis() as u64}),
        );
        for run in escalation.runs {
            let signed = cancel::sign(
                &self.shared.key,
                CancelOrigin::SupervisorDrain,
                &self.cfg.id,
                Some(run),
                reason.clone(),
            );
            cancels.push(signed, None);
        }
        self.update(|st| {
            st.drain.escalated = true;
            st.escalations += 1;
            st.cancels_pending = cancels.len();
        });
    }

    /// An operator's signed cancel of one run, or of every run.
    fn operator_cancel(
        &mut self,
        run: Option<String>,
        reply: cancel::Reply,
        tracker: &DrainTracker,
        cancels: &mut CancelQueue,
    ) {
        if let Some(r) = &run
            && !tracker.steps().runs().any(|x| x == r)
        {
            let in_flight: Vec<&str> = tracker.steps().runs().collect();
            let _ = reply.send(Err(format!(
                "run {r:?} has no step in flight in {}; runs in flight: {}",
                self.cfg.id,
                if in_flight.is_empty() {
                    "none".to_owned()
                } else {
                    in_flight.join(", ")
                }
            )));
            return;
        }
        let signed = cancel::sign(
            &self.shared.key,
            CancelOrigin::Operator,
            &self.cfg.id,
            run,
            "operator cancel".into(),
        );
        cancels.push(signed, Some(reply));
        self.update(|st| st.cancels_pending = cancels.len());
    }

    /// Starts committing the next due cancel to the journal, on its own
    /// task so the loop keeps serving while SQLite waits on a lock.
    fn start_commit(&self, cancels: &CancelQueue) -> Option<Commit> {
        let pending = cancels.due(Instant::now())?;
        let body = cancel::journal_body(&pending.signed);
        let (shared, id) = (self.shared.clone(), self.cfg.id.clone());
        Some(tokio::spawn(async move {
            shared.journal_durably("cancel", &id, body).await
        }))
    }

    /// A commit finished: only once it is durable is the cancel sent. A
    /// refusal is retried with backoff and shown in status.
    async fn commit_done(&mut self, result: Result<u64, String>, cancels: &mut CancelQueue) {
        match result {
            Ok(seq) => {
                if let Some(p) = cancels.committed() {
                    info!(deployment = %self.cfg.id, pid = self.pid, journal_seq = seq, run = ?p.signed.record.run,
                        origin = p.signed.record.origin.as_str(), "cancel committed to the journal; sending it");
                    let mut event = cancel::journal_body(&p.signed);
                    event["journal_seq"] = seq.into();
                    self.shared
                        .event("cancel_committed", Some(&self.cfg.id), event);
                    let sent = self.send(Control::Cancel(p.signed)).await;
                    if let Some(reply) = p.reply {
                        let _ = reply.send(sent.map(|()| seq).map_err(|e| {
                            format!("committed as journal record {seq}, but not delivered: {e}")
                        }));
                    }
                }
                self.update(|st| {
                    st.journal_error = None;
                    st.cancels_pending = cancels.len();
                });
            }
            Err(e) => {
                let (attempt, delay) = cancels.refused(Instant::now());
                error!(deployment = %self.cfg.id, pid = self.pid, attempt, retry_in = ?delay, error = %e,
                    "the journal refused a signed cancel; it is not sent until committed; retrying");
                self.update(|st| {
                    st.journal_error = Some(e);
                    st.cancels_pending = cancels.len();
                });
            }
        }
    }

    /// Sends up to `n` items from the head of the inbox.
    async fn deliver_mail(&mut self, dispatch: &mut Dispatch, n: usize) {
        let deployment = self.cfg.id.clone();
        let items = match self
            .shared
            .store
            .call(move |s| s.take_mail(&deployment, n))
            .await
        {
            Ok(Ok(items)) => items,
            Ok(Err(e)) => {
                error!(deployment = %self.cfg.id, error = %e, "cannot take mail from the inbox");
                dispatch.took(0, n);
                return;
            }
            Err(e) => {
                error!(deployment = %self.cfg.id, error = %e, "cannot take mail from the inbox");
                dispatch.took(0, n);
                return;
            }
        };
        let got = items.len();
        for item in items {
            // A failed send ends the wiring soon; the item is in processing
            // and goes back to the inbox then.
            if let Err(e) = self
                .send(Control::Mail {
                    id: item.id,
                    attempt: item.attempt,
                    payload: item.payload,
                })
                .await
            {
                debug!(deployment = %self.cfg.id, pid = self.pid, error = %e, "mail not sent");
                break;
            }
        }
        dispatch.took(got, n);
    }

    /// Maps how the wiring ended and why it was being drained to what the
    /// deployment does next. Cancels not yet committed die with the child.
    fn conclude(
        &mut self,
        purpose: Option<Purpose>,
        end: EndReason,
        cancels: &mut CancelQueue,
    ) -> Ending {
        cancels.abandon("the child ended before the cancel was committed");
        self.update(|st| {
            st.cancels_pending = 0;
            st.steps.clear();
            st.drain.active = false;
            st.drain.running_since = None;
        });
        match purpose {
            None => Ending::Crashed(end),
            Some(Purpose::Stop) => Ending::Stopped(end),
            Some(Purpose::Operator) => Ending::Drained(end),
            Some(Purpose::Recycle(trigger)) => Ending::Recycled(trigger, end),
        }
    }

    /// The child closed its channel: it is on its way out. Give it
    /// `kill_timeout` to exit, then make sure.
    async fn await_exit_after_close(&mut self) -> EndReason {
        let deadline = tokio::time::Instant::now() + self.cfg.kill_timeout;
        match tokio::time::timeout_at(deadline, self.child.wait()).await {
            Ok(status) => self.exited(status),
            Err(_) => {
                self.update(|st| st.state = State::Stopping);
                self.kill_for(EndReason::Violation(
                    "closed its control channel but did not exit".into(),
                ))
                .await
            }
        }
    }

    /// What the exited child wrote before it went (its last acks and step
    /// reports), read to the end of the channel; the exit and the bytes
    /// before it reach us in either order.
    async fn leftover_events(&mut self) -> Vec<Event> {
        let deadline = tokio::time::Instant::now() + LEFTOVER_WAIT;
        let mut events = Vec::new();
        while let Ok(Ok(Some(event))) = tokio::time::timeout_at(deadline, self.reader.next()).await
        {
            events.push(event);
        }
        events
    }

    fn exited(&mut self, status: std::io::Result<ExitStatus>) -> EndReason {
        // Stray grandchildren in its group die with it.
        signal_group(self.pid, Signal::SIGKILL);
        match status {
            Ok(s) => EndReason::Exited(s),
            Err(e) => EndReason::Violation(format!("cannot wait for child: {e}")),
        }
    }

    /// Kills the group at once, reaps, and hands back `reason`.
    async fn kill_for(&mut self, reason: EndReason) -> EndReason {
        match &reason {
            EndReason::Violation(v) => {
                error!(deployment = %self.cfg.id, pid = self.pid, reason = %v, "protocol violation; killing child")
            }
            EndReason::Hung | EndReason::NotReady => {
                error!(deployment = %self.cfg.id, pid = self.pid, reason = %reason.describe(), "killing child")
            }
            _ => {}
        }
        kill_tree(self.pid);
        if let Err(e) = self.child.wait().await {
            error!(deployment = %self.cfg.id, pid = self.pid, error = %e, "cannot reap child");
        }
        reason
    }

    /// SIGTERM to the group, SIGKILL after `kill_timeout` (or at once when
    /// an operator forces it), then reap. Acks that arrive meanwhile still
    /// count. Requests are merged into `purpose`: a further recycle joins
    /// the one under way, a stop or drain takes it over, so nothing an
    /// operator or a signal asked for is lost.
    pub async fn stop(
        &mut self,
        requests: &mut mpsc::Receiver<Request>,
        mut purpose: Option<&mut Purpose>,
    ) -> EndReason {
        self.update(|st| st.state = State::Stopping);
        info!(deployment = %self.cfg.id, pid = self.pid, "stopping: SIGTERM to process group");
        // Best effort: a child that does not read must not delay SIGTERM.
        let _ =
            tokio::time::timeout(SHUTDOWN_SEND_TIMEOUT, self.writer.send(Control::Shutdown)).await;
        signal_group(self.pid, Signal::SIGTERM);
        let mut escalation = KillEscalation::begin(Instant::now(), self.cfg.kill_timeout);
        let mut requests_open = true;
        let mut reader_open = true;
        loop {
            let deadline = tokio::time::Instant::from_std(escalation.deadline());
            tokio::select! {
                status = self.child.wait() => {
                    signal_group(self.pid, Signal::SIGKILL);
                    if reader_open {
                        for event in self.leftover_events().await {
                            if let Event::MailAck { id, outcome } = event {
                                self.record_ack(id, &outcome).await;
                            }
                        }
                    }
                    return match status {
                        Ok(s) => EndReason::Stopped(s),
                        Err(e) => EndReason::Violation(format!("cannot wait for child: {e}")),
                    };
                }
                _ = sleep_until(deadline), if !escalation.has_fired() => {
                    if escalation.poll(Instant::now()) {
                        warn!(deployment = %self.cfg.id, pid = self.pid, kill_timeout = %format_duration(self.cfg.kill_timeout),
                            "child did not exit after SIGTERM; sending SIGKILL");
                        kill_tree(self.pid);
                    }
                }
                request = requests.recv(), if requests_open => match request {
                    Some(Request::Kill) => {
                        escalation.force();
                        if escalation.poll(Instant::now()) {
                            warn!(deployment = %self.cfg.id, pid = self.pid, "operator forced SIGKILL of a stopping child");
                            kill_tree(self.pid);
                        }
                    }
                    None => {
                        requests_open = false;
                        self.merge_while_stopping(Request::Stop, purpose.as_deref_mut());
                    }
                    Some(other) => self.merge_while_stopping(other, purpose.as_deref_mut()),
                },
                // Keep reading: acks still count, and a chatty child must
                // never block on a full socket.
                event = self.reader.next(), if reader_open => match event {
                    Ok(Some(Event::MailAck { id, outcome })) => {
                        self.record_ack(id, &outcome).await;
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => reader_open = false,
                },
            }
        }
    }

    /// A request that arrives while the child is being stopped.
    fn merge_while_stopping(&self, request: Request, purpose: Option<&mut Purpose>) {
        let id = &self.cfg.id;
        match (request, purpose) {
            (Request::Recycle { reply, .. }, Some(Purpose::Recycle(trigger))) => {
                // The new child this recycle is about to start serves it too.
                trigger.replies.extend(reply);
            }
            (Request::Stop, Some(p)) => {
                if let Purpose::Recycle(trigger) = std::mem::replace(p, Purpose::Stop) {
                    trigger.answer(Err(format!("not recycled: {id} is being stopped")));
                }
            }
            (Request::Drain { reply }, Some(p)) if !matches!(p, Purpose::Stop) => {
                if let Purpose::Recycle(trigger) = std::mem::replace(p, Purpose::Operator) {
                    trigger.answer(Err(format!("not recycled: {id} is being drained")));
                }
                let _ = reply.send(Ok(format!("{id} stays drained once its child has stopped")));
            }
            (Request::MailArrived | Request::Stop, _) => {}
            (other, _) => refuse_while(id, "stopping", other),
        }
    }
}

/// `at` rounded up to the next tenth of `interval` counted from one
/// process-wide origin, so the pings of children that share an interval
/// fall due together and go out in one wake-up (their pongs then come back
/// together too): an idle supervisor wakes a few times a second instead of
/// twice per child per interval. A ping or a hung verdict is at most a
/// tenth of the interval late.
fn coalesced(at: Instant, interval: Duration) -> Instant {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    let slot = (interval / 10).as_nanos().max(1);
    let since = at.saturating_duration_since(origin).as_nanos();
    let rounded = since.div_ceil(slot) * slot;
    let late = u64::try_from(rounded - since).unwrap_or(u64::MAX);
    at + Duration::from_nanos(late)
}

/// A cancel's journal commit running on its own task.
type Commit = tokio::task::JoinHandle<Result<u64, String>>;

/// The running commit's result; never resolves when none runs.
async fn wait_commit(commit: &mut Option<Commit>) -> Result<u64, String> {
    match commit {
        Some(task) => task
            .await
            .unwrap_or_else(|e| Err(format!("journal task failed: {e}"))),
        None => std::future::pending().await,
    }
}

/// What an event asks of the loop beyond bookkeeping.
enum Reaction {
    Nothing,
    Drained,
    Recycle(Trigger),
}

/// Answers a request that cannot be served in `state`.
pub fn refuse_while(id: &str, state: &str, request: Request) {
    let why = format!("{id} is {state}; try again once it is ready");
    match request {
        Request::Drain { reply } | Request::Resume { reply } => {
            let _ = reply.send(Err(why));
        }
        Request::Recycle { reply, .. } => {
            if let Some(reply) = reply {
                let _ = reply.send(Err(why));
            }
        }
        Request::Cancel { reply, .. } => {
            let _ = reply.send(Err(why));
        }
        Request::Stop | Request::Kill | Request::MailArrived => {}
    }
}

impl Drop for LiveChild {
    fn drop(&mut self) {
        self.shared.watchlist.remove(self.pid);
        self.shared.forget_child(&self.cfg.id, self.pid);
    }
}

/// The handshake proper: Hello checked against the minted channel id,
/// Welcome sent, Ready awaited.
async fn exchange_hello(
    reader: &mut FrameReader<Event>,
    writer: &mut FrameWriter<Control>,
    cfg: &DeploymentConfig,
    channel_id: &str,
    grants: &Grants,
    status: &Mutex<Status>,
) -> Result<(), EndReason> {
    let hello = match reader.next().await {
        Ok(Some(Event::Hello(h))) => h,
        Ok(Some(other)) => return Err(unexpected(other.name(), "waiting for Hello")),
        Ok(None) => return Err(EndReason::Violation("channel closed before Hello".into())),
        Err(e) => return Err(transport(e)),
    };
    hello
        .check(channel_id)
        .map_err(|v| EndReason::Violation(v.to_string()))?;
    {
        let mut st = status.lock().unwrap_or_else(|p| p.into_inner());
        st.takes_mail = Some(hello.takes_mail);
        st.implementation = Some(hello.implementation);
    }
    let welcome = Welcome {
        protocol: PROTOCOL_VERSION,
        deployment: cfg.id.clone(),
        grants_snapshot: grants.clone(),
        limits: Limits {
            max_frame_bytes: cfg.max_frame_bytes,
            max_mail_bytes: cfg.max_mail_bytes,
            drain_timeout_ms: cfg.drain_timeout.as_millis() as u64,
            liveness_timeout_ms: cfg.liveness_timeout.as_millis() as u64,
        },
    };
    writer
        .send(Control::Welcome(welcome))
        .await
        .map_err(transport)?;
    match reader.next().await {
        Ok(Some(Event::Ready)) => Ok(()),
        Ok(Some(other)) => Err(unexpected(other.name(), "waiting for Ready")),
        Ok(None) => Err(EndReason::Violation("channel closed before Ready".into())),
        Err(e) => Err(transport(e)),
    }
}

fn unexpected(message: &str, state: &str) -> EndReason {
    EndReason::Violation(
        ProtocolViolation::Unexpected {
            message: message.to_owned(),
            state: state.to_owned(),
        }
        .to_string(),
    )
}

fn transport(e: TransportError) -> EndReason {
    match e {
        TransportError::Violation(v) => EndReason::Violation(v.to_string()),
        TransportError::Io(e) => EndReason::Violation(format!("control channel I/O: {e}")),
    }
}

/// Sends `signal` to the process group led by `pid`; a group that is
/// already gone is fine.
pub fn signal_group(pid: u32, signal: Signal) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = killpg(Pid::from_raw(pid), signal);
    }
}

/// SIGKILLs a live child's whole tree: its process group, and every
/// descendant and the group each leads. A command hosted by
/// `wfhost-child exec` runs in a group of its own, and its children would
/// otherwise outlive it.
pub fn kill_tree(pid: u32) {
    let descendants = crate::procfs::descendants(pid);
    signal_group(pid, Signal::SIGKILL);
    for d in descendants {
        if let Ok(raw) = i32::try_from(d) {
            let _ = nix::sys::signal::kill(Pid::from_raw(raw), Signal::SIGKILL);
            let _ = killpg(Pid::from_raw(raw), Signal::SIGKILL);
        }
    }
}

/// The child's environment: configured variables, a default PATH, then the
/// `WFHOST_*` contract (which configuration cannot override).
fn child_spec(cfg: &DeploymentConfig, channel_id: &str, public_key: &str) -> ChildSpec {
    let mut env: Vec<(String, String)> = cfg
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !cfg.env.contains_key("PATH") {
        env.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    env.push((ENV_CONTROL_FD.into(), CONTROL_FD.to_string()));
    env.push((ENV_CHANNEL_ID.into(), channel_id.into()));
    env.push((ENV_PROTOCOL.into(), PROTOCOL_VERSION.to_string()));
    env.push((ENV_DEPLOYMENT.into(), cfg.id.clone()));
    env.push((ENV_SUPERVISOR_KEY.into(), public_key.into()));
    ChildSpec {
        program: cfg.command[0].clone().into(),
        args: cfg.command[1..].to_vec(),
        env,
        uid: cfg.uid,
        gid: cfg.gid,
        working_dir: cfg.working_dir.clone(),
    }
}

/// Copies a child's output into the log line by line, with the deployment
/// and pid, cutting lines longer than [`MAX_LOG_LINE`].
async fn log_lines(
    stream: impl AsyncRead + Unpin,
    deployment: String,
    pid: u32,
    which: &'static str,
) {
    let mut reader = BufReader::with_capacity(LOG_READ_BYTES, stream);
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        let mut cut = false;
        loop {
            let available = match reader.fill_buf().await {
                Ok(b) => b,
                Err(_) => return,
            };
            if available.is_empty() {
                if line.is_empty() {
                    return;
                }
                break;
            }
            let (take, done) = match available.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (available.len(), false),
            };
            let room = MAX_LOG_LINE.saturating_sub(line.len());
            line.extend_from_slice(&available[..take.min(room)]);
            cut |= take > room;
            reader.consume(take);
            if done {
                break;
            }
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        info!(deployment = %deployment, pid, stream = which, truncated = cut, "{text}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakes_are_coalesced_into_tenths_of_the_interval() {
        let interval = Duration::from_secs(10);
        let now = Instant::now();
        let mut slots = std::collections::BTreeSet::new();
        for ms in (0..1000).step_by(7) {
            let at = now + Duration::from_millis(ms);
            let woken = coalesced(at, interval);
            assert!(woken >= at, "never early");
            assert!(woken - at <= interval / 10, "at most a tenth late");
            slots.insert(woken);
        }
        // 143 wakes within one second fall into at most two slots.
        assert!(slots.len() <= 2, "{slots:?}");
        assert_eq!(coalesced(now, Duration::ZERO), now, "no interval, no delay");
    }
}
