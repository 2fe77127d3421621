//! One live child: spawn, handshake, the event loop while it runs, liveness,
//! and the stop sequence (SIGTERM to the group, SIGKILL after
//! `kill_timeout`, always reaped).

use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Instant;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Child;
use tokio::sync::mpsc;
use tokio::time::sleep_until;
use tracing::{debug, error, info, warn};
use wfhost_ipc::handshake::{
    ENV_CHANNEL_ID, ENV_CONTROL_FD, ENV_DEPLOYMENT, ENV_PROTOCOL, ENV_SUPERVISOR_KEY,
};
use wfhost_ipc::{
    Control, Event, FrameReader, FrameWriter, Grants, Limits, PROTOCOL_VERSION, ProtocolViolation,
    TransportError, Welcome, handshake::CONTROL_FD, key,
};
use wfhost_policy::kill::KillEscalation;
use wfhost_policy::liveness::Liveness;

use crate::config::DeploymentConfig;
use crate::deployment::Request;
use crate::shared::Shared;
use crate::spawn::{ChildSpec, Spawned};
use crate::status::State;

/// Longest child output line kept in the log; the rest is cut.
const MAX_LOG_LINE: usize = 16 * 1024;

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
    /// The supervisor stopped it on request.
    Stopped(ExitStatus),
}

impl EndReason {
    /// Whether this counts as a crash for the restart policy.
    pub fn is_crash(&self) -> bool {
        !matches!(self, Self::Stopped(_))
    }

    /// One line for logs, status and the journal.
    pub fn describe(&self) -> String {
        match self {
            Self::SpawnFailed(e) => format!("spawn failed: {e}"),
            Self::Exited(s) => format!("exited unexpectedly: {}", describe_status(*s)),
            Self::Violation(v) => format!("protocol violation: {v}"),
            Self::Hung => "hung: no pong within liveness_timeout".to_owned(),
            Self::NotReady => "no Ready within ready_timeout".to_owned(),
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

/// A child while it lives.
pub struct LiveChild {
    cfg: Arc<DeploymentConfig>,
    shared: Arc<Shared>,
    child: Child,
    pid: u32,
    channel_id: String,
    reader: FrameReader<Event>,
    writer: FrameWriter<Control>,
    /// When it was spawned.
    pub started_at: Instant,
}

impl LiveChild {
    /// Spawns a child for `cfg` with a fresh channel id and records it in
    /// the store, so a later supervisor can clean it up after a crash.
    pub async fn spawn(cfg: Arc<DeploymentConfig>, shared: Arc<Shared>) -> Result<Self, EndReason> {
        let channel_id = wfhost_ipc::new_channel_id()
            .map_err(|e| EndReason::SpawnFailed(format!("cannot mint a channel id: {e}")))?;
        let spec = child_spec(
            &cfg,
            &channel_id,
            &key::public_hex(&shared.key.verifying_key()),
        );
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
        shared.journal(
            "spawn",
            Some(&cfg.id),
            serde_json::json!({"pid": pid, "channel_id": channel_id}),
        );
        let (reader, writer) = wfhost_ipc::split(control, cfg.max_frame_bytes);
        Ok(Self {
            cfg,
            shared,
            child,
            pid,
            channel_id,
            reader,
            writer,
            started_at,
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

    /// Hello → Welcome → Ready within `ready_timeout`. On failure the child
    /// is killed and reaped and the reason returned; a stop request during
    /// the handshake stops the child the usual way.
    pub async fn handshake(
        &mut self,
        requests: &mut mpsc::Receiver<Request>,
    ) -> Result<(), EndReason> {
        enum Outcome {
            Reason(EndReason),
            Stop,
        }
        let deadline = tokio::time::Instant::now() + self.cfg.ready_timeout;
        let hello = exchange_hello(
            &mut self.reader,
            &mut self.writer,
            &self.cfg,
            &self.channel_id,
        );
        let outcome = tokio::select! {
            r = tokio::time::timeout_at(deadline, hello) => match r {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(reason)) => Outcome::Reason(reason),
                Err(_) => Outcome::Reason(EndReason::NotReady),
            },
            status = self.child.wait() => Outcome::Reason(match status {
                Ok(s) => EndReason::Exited(s),
                Err(e) => EndReason::Violation(format!("cannot wait for child: {e}")),
            }),
            _ = requests.recv() => Outcome::Stop,
        };
        Err(match outcome {
            Outcome::Reason(reason) => self.kill_for(reason).await,
            Outcome::Stop => self.stop(requests).await,
        })
    }

    /// Runs a ready child until it ends or is stopped on request.
    pub async fn run(
        &mut self,
        requests: &mut mpsc::Receiver<Request>,
        set_state: impl Fn(State),
    ) -> EndReason {
        let mut liveness = Liveness::new(
            self.cfg.liveness_interval,
            self.cfg.liveness_timeout,
            Instant::now(),
        );
        loop {
            let wake = tokio::time::Instant::from_std(liveness.next_wake(Instant::now()));
            tokio::select! {
                event = self.reader.next() => match event {
                    Ok(Some(event)) => {
                        if let Err(reason) = self.on_event(event, &mut liveness) {
                            return self.kill_for(reason).await;
                        }
                    }
                    Ok(None) => {
                        debug!(deployment = %self.cfg.id, pid = self.pid, "child closed its control channel");
                        return self.await_exit_after_close(set_state).await;
                    }
                    Err(e) => return self.kill_for(transport(e)).await,
                },
                status = self.child.wait() => return self.exited(status),
                _ = sleep_until(wake) => {
                    let now = Instant::now();
                    if liveness.hung(now) {
                        return self.kill_for(EndReason::Hung).await;
                    }
                    if let Some(nonce) = liveness.ping_due(now)
                        && let Err(e) = self.writer.send(Control::Ping { nonce }).await
                    {
                        debug!(deployment = %self.cfg.id, pid = self.pid, error = %e, "ping not sent");
                    }
                }
                request = requests.recv() => match request {
                    Some(Request::Stop) | None => {
                        set_state(State::Stopping);
                        return self.stop(requests).await;
                    }
                    Some(Request::Kill) => {
                        warn!(deployment = %self.cfg.id, pid = self.pid, "operator forced SIGKILL");
                        signal_group(self.pid, Signal::SIGKILL);
                    }
                },
            }
        }
    }

    fn on_event(&mut self, event: Event, liveness: &mut Liveness) -> Result<(), EndReason> {
        match event {
            Event::Pong { nonce } => {
                liveness.on_pong(nonce, Instant::now());
            }
            Event::Hello(_) | Event::Ready => return Err(unexpected(event.name(), "ready")),
            other => {
                debug!(deployment = %self.cfg.id, pid = self.pid, event = other.name(), "event")
            }
        }
        Ok(())
    }

    /// The child closed its channel: it is on its way out. Give it
    /// `kill_timeout` to exit, then make sure.
    async fn await_exit_after_close(&mut self, set_state: impl Fn(State)) -> EndReason {
        let deadline = tokio::time::Instant::now() + self.cfg.kill_timeout;
        match tokio::time::timeout_at(deadline, self.child.wait()).await {
            Ok(status) => self.exited(status),
            Err(_) => {
                set_state(State::Stopping);
                self.kill_for(EndReason::Violation(
                    "closed its control channel but did not exit".into(),
                ))
                .await
            }
        }
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
        signal_group(self.pid, Signal::SIGKILL);
        if let Err(e) = self.child.wait().await {
            error!(deployment = %self.cfg.id, pid = self.pid, error = %e, "cannot reap child");
        }
        reason
    }

    /// SIGTERM to the group, SIGKILL after `kill_timeout` (or at once when
    /// an operator forces it), then reap.
    pub async fn stop(&mut self, requests: &mut mpsc::Receiver<Request>) -> EndReason {
        info!(deployment = %self.cfg.id, pid = self.pid, "stopping: SIGTERM to process group");
        let _ = self.writer.send(Control::Shutdown).await;
        signal_group(self.pid, Signal::SIGTERM);
        let mut escalation = KillEscalation::begin(Instant::now(), self.cfg.kill_timeout);
        let mut requests_open = true;
        loop {
            let deadline = tokio::time::Instant::from_std(escalation.deadline());
            tokio::select! {
                status = self.child.wait() => {
                    signal_group(self.pid, Signal::SIGKILL);
                    return match status {
                        Ok(s) => EndReason::Stopped(s),
                        Err(e) => EndReason::Violation(format!("cannot wait for child: {e}")),
                    };
                }
                _ = sleep_until(deadline), if !escalation.has_fired() => {
                    if escalation.poll(Instant::now()) {
                        warn!(deployment = %self.cfg.id, pid = self.pid, kill_timeout = ?self.cfg.kill_timeout,
                            "child did not exit after SIGTERM; sending SIGKILL");
                        signal_group(self.pid, Signal::SIGKILL);
                    }
                }
                request = requests.recv(), if requests_open => match request {
                    Some(Request::Kill) => {
                        escalation.force();
                        if escalation.poll(Instant::now()) {
                            warn!(deployment = %self.cfg.id, pid = self.pid, "operator forced SIGKILL of a stopping child");
                            signal_group(self.pid, Signal::SIGKILL);
                        }
                    }
                    Some(_) => {}
                    None => requests_open = false,
                },
                // Keep reading so a chatty child never blocks on a full socket.
                _ = self.reader.next() => {}
            }
        }
    }
}

impl Drop for LiveChild {
    fn drop(&mut self) {
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
    let welcome = Welcome {
        deployment: cfg.id.clone(),
        grants_snapshot: Grants::default(),
        limits: Limits {
            max_frame_bytes: cfg.max_frame_bytes,
            max_mail_bytes: cfg.max_mail_bytes,
            drain_timeout_ms: cfg.drain_timeout.as_millis() as u64,
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
    let mut reader = BufReader::new(stream);
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
