//! The live child's I/O: the process (spawned into its enclosure,
//! signalled, killed with everything it started, reaped), its control
//! channel (frames in, messages out with a bound on how long a
//! send may wait), and the handshake, read frame by frame like everything
//! else so the deployment's loop never waits on the child alone.

use std::process::ExitStatus as OsExitStatus;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::process::Child;
use tracing::{debug, warn};
use wfhost_ipc::channel::{HandshakeError, SupervisorEnd};
use wfhost_ipc::{
    Control, Event, Grants, Hello, Limits, ProtocolViolation, TransportError, Welcome, key,
};
use wfhost_policy::life::{ExitStatus, Fresh};
use wfhost_process::Signal;

use super::grants;
use super::output;
use super::spawn::{self, Spawned};
use crate::config::DeploymentConfig;
use crate::contain::{Enclosure, NotApplied};
use crate::procfs::RssReader;
use crate::shared::Shared;

/// How long a stop waits to hand `Shutdown` to a child before signalling.
const SHUTDOWN_SEND_TIMEOUT: Duration = Duration::from_millis(100);

/// How long to read what an exited child wrote last: it is already in the
/// socket, but a grandchild that inherited the channel could hold it open.
const LEFTOVER_WAIT: Duration = Duration::from_millis(250);

/// Where the handshake is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Hello,
    Ready,
    Live,
}

/// What came from the child process.
pub enum Arrived {
    /// Its Hello (checked against the minted channel), or why not.
    Hello(Result<Hello, HandshakeError>),
    /// Its Ready, or why not.
    Ready(Result<(), HandshakeError>),
    /// A frame of a live child (or the channel's end or breakage).
    Frame(Result<Option<Event>, TransportError>),
    /// Its exit.
    Exit(std::io::Result<OsExitStatus>),
}

/// What a frame from the child amounts to.
#[derive(Debug)]
pub enum Frame {
    /// The child is ready (its handshake is complete).
    Ready,
    /// An event of a live child.
    Event(Event),
    /// The child closed its channel.
    Closed,
    /// The child broke the protocol.
    Violation(String),
    /// A handshake frame, answered; nothing for the deployment to do.
    Handshake,
}

/// A child while it lives.
pub struct LiveChild {
    process: Child,
    /// Its pid.
    pub pid: u32,
    /// What holds it and everything it starts.
    enclosure: Enclosure,
    /// The channel id minted for this spawn.
    pub channel_id: String,
    end: SupervisorEnd,
    grants: Grants,
    /// When its grants were read, if it has a grants file.
    pub grants_read_at: Option<Instant>,
    /// When it was spawned.
    pub started_at: Instant,
    stage: Stage,
    /// The channel still yields frames (it ended, or broke, otherwise).
    reading: bool,
    /// A send timed out: the child no longer reads its channel.
    pub stalled: bool,
    /// What its Hello said: whether it takes mail, and who implements it.
    pub hello: Option<Hello>,
    /// It wrote on its channel (a Hello, even one refused): it speaks the
    /// protocol, whatever version.
    pub spoke: bool,
}

impl LiveChild {
    /// Spawns a child for `cfg` with a fresh channel id and freshly read
    /// grants (or, if the file cannot be read, the `checked` ones a recycle
    /// read as it began), in an enclosure of its own (its cgroup, its
    /// rlimits), and records it in the store so a later supervisor can
    /// clean it up after a crash.
    pub async fn spawn(
        cfg: &DeploymentConfig,
        shared: &Arc<Shared>,
        checked: Option<Fresh>,
    ) -> Result<Self, String> {
        let (grants, grants_read_at) = match &cfg.grants_file {
            Some(path) => {
                let (g, at) = match (grants::read(cfg, path).await, checked) {
                    (Ok(fresh), _) => fresh,
                    (Err(e), Some(checked)) => {
                        warn!(deployment = %cfg.id, error = %e,
                            "grants_file broke during the recycle; the new child gets the grants read when it began");
                        checked
                    }
                    (Err(e), None) => return Err(e),
                };
                (g, Some(at))
            }
            None => (Grants::default(), None),
        };
        let channel_id =
            wfhost_ipc::new_channel_id().map_err(|e| format!("cannot mint a channel id: {e}"))?;
        let mut spec = spawn::child_spec(
            cfg,
            &channel_id,
            &key::public_hex(&shared.key.verifying_key()),
        );
        let mut enclosure = Enclosure::prepare(cfg, &channel_id, &shared.spawner);
        enclosure.place(&mut spec);
        debug!(deployment = %cfg.id, channel = %channel_id, containment = enclosure.kind(), "spawning");
        let program = cfg.command.first().map_or("", String::as_str);
        let spawned = shared.spawner.spawn(spec).await;
        enclosure.spawned(spawned.as_ref().ok().map(|s| s.pid));
        let Spawned {
            child,
            pid,
            control,
            stdout,
            stderr,
        } = spawned.map_err(|e| format!("{program}: {e}"))?;
        let started_at = Instant::now();
        output::spawn(stdout, stderr, &cfg.id, pid);
        shared.remember_child(&cfg.id, pid, &channel_id);
        let end = SupervisorEnd::new(control, channel_id.clone(), cfg.max_frame_bytes);
        Ok(Self {
            process: child,
            pid,
            enclosure,
            channel_id,
            end,
            grants,
            grants_read_at,
            started_at,
            stage: Stage::Hello,
            reading: true,
            stalled: false,
            hello: None,
            spoke: false,
        })
    }

    /// What the child sends next (its handshake's frames, then its events),
    /// or its exit, whichever comes first. Cancel-safe.
    pub async fn next(&mut self) -> Arrived {
        let (reading, stage, end) = (self.reading, self.stage, &mut self.end);
        let read = async move {
            match stage {
                Stage::Hello => Arrived::Hello(end.read_hello().await),
                Stage::Ready => Arrived::Ready(end.await_ready().await),
                Stage::Live => Arrived::Frame(end.reader().next().await),
            }
        };
        tokio::select! {
            arrived = read, if reading => arrived,
            status = self.process.wait() => Arrived::Exit(status),
        }
    }

    /// Turns what the child sent into what it means, answering the Hello
    /// with the Welcome on the way.
    pub async fn frame(&mut self, cfg: &DeploymentConfig, arrived: Arrived) -> Frame {
        match arrived {
            Arrived::Hello(Ok(hello)) => self.welcome(cfg, hello).await,
            Arrived::Ready(Ok(())) => {
                self.stage = Stage::Live;
                Frame::Ready
            }
            Arrived::Hello(Err(e)) | Arrived::Ready(Err(e)) => {
                self.reading = false;
                self.spoke |= e.child_wrote();
                Frame::Violation(match e {
                    // Said once: the exit cause already reads "protocol violation".
                    HandshakeError::Transport(t) => transport(t),
                    other => other.to_string(),
                })
            }
            Arrived::Frame(Ok(Some(event @ (Event::Hello(_) | Event::Ready)))) => {
                Frame::Violation(unexpected_in(event.name(), "ready"))
            }
            Arrived::Frame(Ok(Some(event))) if event.since() > self.protocol() => {
                Frame::Violation(format!(
                    "{} is a protocol-{} message, and this child speaks protocol {}",
                    event.name(),
                    event.since(),
                    self.protocol()
                ))
            }
            Arrived::Frame(Ok(Some(event))) => Frame::Event(event),
            Arrived::Frame(Ok(None)) => {
                self.reading = false;
                Frame::Closed
            }
            // A child that exits with frames of ours unread resets the
            // socket: that is its end, not a broken protocol (its exit
            // says how it ended).
            Arrived::Frame(Err(TransportError::Io(e)))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                ) =>
            {
                self.reading = false;
                Frame::Closed
            }
            Arrived::Frame(Err(e)) => {
                self.reading = false;
                Frame::Violation(transport(e))
            }
            // Exits are the driver's to handle.
            Arrived::Exit(_) => Frame::Handshake,
        }
    }

    /// The protocol version the child speaks: its Hello's (the oldest this
    /// side speaks until the Hello came).
    pub fn protocol(&self) -> u32 {
        self.hello
            .as_ref()
            .map_or(wfhost_ipc::OLDEST_PROTOCOL, |h| h.protocol)
    }

    /// Answers a Hello that fits this channel.
    async fn welcome(&mut self, cfg: &DeploymentConfig, hello: Hello) -> Frame {
        self.hello = Some(hello);
        self.spoke = true;
        // `Hello::check` found the child's version one this side speaks.
        let welcome = Welcome {
            protocol: self.protocol(),
            deployment: cfg.id.clone(),
            grants_snapshot: self.grants.clone(),
            limits: Limits {
                max_frame_bytes: cfg.max_frame_bytes,
                max_mail_bytes: cfg.max_mail_bytes,
                drain_timeout_ms: millis(cfg.drain_timeout),
                liveness_timeout_ms: millis(cfg.liveness_timeout),
            },
        };
        match self.send(cfg, Control::Welcome(welcome)).await {
            Ok(()) => {
                self.stage = Stage::Ready;
                Frame::Handshake
            }
            Err(e) => Frame::Violation(e),
        }
    }

    /// Sends one message, giving up after `liveness_timeout`: a child that
    /// stops reading its channel must not wedge its deployment's task. A
    /// send that times out marks the child stalled (a half-written frame
    /// leaves the channel unusable), and it is killed as hung.
    pub async fn send(&mut self, cfg: &DeploymentConfig, message: Control) -> Result<(), String> {
        match tokio::time::timeout(cfg.liveness_timeout, self.end.writer().send(message)).await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => {
                self.stalled = true;
                Err("the child has not read its control channel within liveness_timeout".into())
            }
        }
    }

    /// `Shutdown` (best effort: a child that does not read must not delay
    /// the signal), then SIGTERM to the process group.
    pub async fn terminate(&mut self) {
        let _ = tokio::time::timeout(
            SHUTDOWN_SEND_TIMEOUT,
            self.end.writer().send(Control::Shutdown),
        )
        .await;
        let _ = wfhost_process::signal_group(self.pid, Signal::SIGTERM);
    }

    /// SIGKILLs it and everything it started: its cgroup (`cgroup.kill`),
    /// its tree, and what the supervisor adopted from it.
    pub fn kill(&self) {
        self.enclosure.kill(self.pid);
    }

    /// How it is contained: `cgroup` or `process-tree`, its cgroup, and
    /// the deployment's limits it does not get.
    pub fn containment(&self) -> (&'static str, Option<String>, Vec<NotApplied>) {
        (
            self.enclosure.kind(),
            self.enclosure.cgroup_path(),
            self.enclosure.not_applied().to_vec(),
        )
    }

    /// A reader of its memory for the recycle bound: its cgroup's
    /// `memory.current` where the memory controller is on (one read per
    /// tick), else the resident pages of its process tree.
    pub fn rss_reader(&self) -> Option<RssReader> {
        match self.enclosure.memory_current() {
            Some(counter) => Some(RssReader::cgroup(counter)),
            None => RssReader::open(self.pid).ok(),
        }
    }

    /// What the exited child wrote before it went (its last acks and step
    /// reports), read to the end of the channel; the exit and the bytes
    /// before it reach us in either order.
    pub async fn leftover_events(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        if !self.reading || self.stage != Stage::Live {
            return events;
        }
        let deadline = tokio::time::Instant::now() + LEFTOVER_WAIT;
        while let Ok(Ok(Some(event))) =
            tokio::time::timeout_at(deadline, self.end.reader().next()).await
        {
            events.push(event);
        }
        self.reading = false;
        events
    }

    /// After the exit: whatever it left behind (its group, its cgroup,
    /// the orphans adopted from it) dies with it.
    pub fn reap_group(&self) {
        self.enclosure.release(self.pid);
    }
}

/// An exit status in the machine's terms.
pub fn exit_status(status: std::io::Result<OsExitStatus>) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => ExitStatus::Code(code),
            (None, Some(sig)) => ExitStatus::Signal(sig),
            _ => ExitStatus::Unknown,
        },
        Err(_) => ExitStatus::Unknown,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn unexpected_in(message: &str, state: &str) -> String {
    ProtocolViolation::Unexpected {
        message: message.to_owned(),
        state: state.to_owned(),
    }
    .to_string()
}

fn transport(e: TransportError) -> String {
    match e {
        TransportError::Violation(v) => v.to_string(),
        TransportError::Io(e) => format!("control channel I/O: {e}"),
    }
}
