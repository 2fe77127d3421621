//! The child under test: started exactly as the supervisor starts a
//! deployment's child (through `wfhost-process`: a fresh socketpair with the
//! child's end at fd 3, a cleared environment plus the `WFHOST_*` contract,
//! its own process group, the parent-death signal, stdin from `/dev/null`,
//! stdout and stderr captured), its channel (the supervisor end until it is
//! ready, then a reader task feeding [`Events`] and a writer), and its end.

use std::ffi::OsString;
use std::io::Write;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::process::ExitStatus;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ed25519_dalek::SigningKey;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::UnixStream;
use tokio::process::Child;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use wfhost_ipc::handshake::{
    CONTROL_FD, ENV_CHANNEL_ID, ENV_CONTROL_FD, ENV_DEPLOYMENT, ENV_PROTOCOL, ENV_PROTOCOL_MAX,
    ENV_SUPERVISOR_KEY,
};
use wfhost_ipc::{
    Control, DEFAULT_MAX_FRAME_BYTES, Event, FrameReader, FrameWriter, Grants, Hello, Limits,
    OLDEST_PROTOCOL, PROTOCOL_VERSION, SupervisorEnd, TransportError, Welcome, key, new_channel_id,
};
use wfhost_process::{ChildSpec, Spawner, kill_tree};

use crate::events::{Arrival, Events};
use crate::failure::Failure;

/// How long a child may take to send its Hello (an interpreter starting on
/// a busy machine).
pub const START_WITHIN: Duration = Duration::from_secs(10);
/// How long a child may take to send Ready after the Welcome.
pub const READY_WITHIN: Duration = Duration::from_secs(10);
/// How long one control message may take to write.
const SEND_WITHIN: Duration = Duration::from_secs(2);
/// How long the output readers get to finish after the child is gone (a
/// grandchild may hold the pipes open).
const OUTPUT_WITHIN: Duration = Duration::from_secs(1);
/// How long a killed child gets to be reaped.
const REAP_WITHIN: Duration = Duration::from_secs(2);
/// Most output kept per stream.
const OUTPUT_CAP: usize = 256 * 1024;

/// The `max_mail_bytes` of every Welcome (the supervisor's default).
const MAX_MAIL_BYTES: u32 = 256 * 1024;
/// The drain budget every Welcome announces.
const DRAIN_TIMEOUT_MS: u64 = 10_000;
/// The liveness timeout every Welcome announces.
const LIVENESS_TIMEOUT_MS: u64 = 30_000;

/// How every child of one kit run is started.
#[derive(Debug)]
pub struct Launcher {
    spawner: Spawner,
    program: OsString,
    args: Vec<OsString>,
    /// `PATH` and the `--env` pairs, before the `WFHOST_*` contract.
    env: Vec<(OsString, OsString)>,
    key: SigningKey,
    deployment: String,
    /// The one protocol version the child must speak (`--protocol`), or
    /// `None`: whichever of 2 and 3 it chooses, except where a scenario
    /// needs 3.
    expect: Option<u32>,
}

/// Which supervisor a child is started under: what its environment says
/// the supervisor speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Supervisor {
    /// `WFHOST_PROTOCOL=2`, `WFHOST_PROTOCOL_MAX=3`: today's supervisor.
    Current,
    /// `WFHOST_PROTOCOL=2` and no `WFHOST_PROTOCOL_MAX`: a supervisor of
    /// version 2.
    Version2,
}

impl Launcher {
    /// Starts children of `command` with `extra_env` on top of the kit's
    /// `PATH`; their cancels are signed with `key`.
    pub fn new(
        spawner: Spawner,
        command: &[OsString],
        extra_env: Vec<(OsString, OsString)>,
        key: SigningKey,
        expect: Option<u32>,
    ) -> Result<Self, String> {
        let Some((program, args)) = command.split_first() else {
            return Err("no command given after --".to_owned());
        };
        let mut env = Vec::new();
        if let Some(path) = std::env::var_os("PATH") {
            env.push(("PATH".into(), path));
        }
        env.extend(extra_env);
        Ok(Self {
            spawner,
            program: program.clone(),
            args: args.to_vec(),
            env,
            key,
            deployment: "conformance".to_owned(),
            expect,
        })
    }

    /// The key the children trust.
    pub fn key(&self) -> &SigningKey {
        &self.key
    }

    /// The deployment the children serve.
    pub fn deployment(&self) -> &str {
        &self.deployment
    }

    /// The Welcome a supervisor would send (default limits; its protocol is
    /// set to the Hello's by [`Subject::handshake_with`]).
    pub fn welcome(&self) -> Welcome {
        let read_at_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        Welcome {
            protocol: PROTOCOL_VERSION,
            deployment: self.deployment.clone(),
            grants_snapshot: Grants {
                read_at_ms,
                digest: Sha256::digest(b"").into(),
                body: Vec::new(),
            },
            limits: Limits {
                max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
                max_mail_bytes: MAX_MAIL_BYTES,
                drain_timeout_ms: DRAIN_TIMEOUT_MS,
                liveness_timeout_ms: LIVENESS_TIMEOUT_MS,
            },
        }
    }

    /// Starts a fresh child with a fresh channel id, under `supervisor`.
    pub async fn launch(&self, supervisor: Supervisor) -> Result<Subject, Failure> {
        let cannot = |why: String| {
            Failure::new(
                format!("the child {:?} to start", self.program),
                format!("cannot start it: {why}"),
            )
        };
        let channel_id = new_channel_id().map_err(|e| cannot(format!("no channel id: {e}")))?;
        let mut spec = ChildSpec::new(&self.program, self.args.iter().cloned());
        spec.env = self.env.clone();
        spec.env.extend(
            [
                (ENV_CONTROL_FD, CONTROL_FD.to_string()),
                (ENV_CHANNEL_ID, channel_id.clone()),
                (ENV_PROTOCOL, OLDEST_PROTOCOL.to_string()),
                (ENV_DEPLOYMENT, self.deployment.clone()),
                (
                    ENV_SUPERVISOR_KEY,
                    key::public_hex(&self.key.verifying_key()),
                ),
            ]
            .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        );
        if supervisor == Supervisor::Current {
            spec.env
                .push((ENV_PROTOCOL_MAX.into(), PROTOCOL_VERSION.to_string().into()));
        }
        let mut spawned = self
            .spawner
            .spawn(spec)
            .await
            .map_err(|e| cannot(e.to_string()))?;
        let stdout = Captured::start(spawned.stdout.take());
        let stderr = Captured::start(spawned.stderr.take());
        let std_stream = spawned
            .control
            .into_std()
            .map_err(|e| cannot(format!("control socket: {e}")))?;
        let raw = std_stream
            .try_clone()
            .map_err(|e| cannot(format!("control socket: {e}")))?;
        let stream =
            UnixStream::from_std(std_stream).map_err(|e| cannot(format!("control socket: {e}")))?;
        let (tx, rx) = mpsc::unbounded_channel();
        let expect = match supervisor {
            Supervisor::Current => self.expect.map(|v| (v, Expected::Flag)),
            Supervisor::Version2 => Some((OLDEST_PROTOCOL, Expected::Version2Supervisor)),
        };
        Ok(Subject {
            expect,
            pid: spawned.pid,
            end: Some(SupervisorEnd::new(
                stream,
                channel_id,
                DEFAULT_MAX_FRAME_BYTES,
            )),
            child: spawned.child,
            exit: None,
            writer: None,
            raw: Some(raw),
            tx: Some(tx),
            reader: None,
            events: Events::new(rx),
            protocol: OLDEST_PROTOCOL,
            sent: 0,
            stdout,
            stderr,
        })
    }
}

/// One child under test.
#[derive(Debug)]
pub struct Subject {
    /// Its pid (and process group id).
    pub pid: u32,
    /// The events it sent after its handshake.
    pub events: Events,
    /// The protocol version it speaks: its Hello's, once the handshake
    /// is over.
    pub protocol: u32,
    child: Child,
    exit: Option<ExitStatus>,
    end: Option<SupervisorEnd>,
    writer: Option<FrameWriter<Control>>,
    raw: Option<StdUnixStream>,
    tx: Option<mpsc::UnboundedSender<Arrival>>,
    reader: Option<JoinHandle<()>>,
    /// The protocol version its Hello must say, if only one will do, and
    /// why.
    expect: Option<(u32, Expected)>,
    /// Frames sent so far, so raw frames carry the next sequence number.
    sent: u64,
    stdout: Captured,
    stderr: Captured,
}

impl Subject {
    /// Reads the child's Hello (its first frame, checked against the
    /// channel id minted for it).
    pub async fn read_hello(&mut self) -> Result<Hello, Failure> {
        let expected = "a Hello as the first frame (seq 1, protocol 2 or 3, the minted channel id)";
        let expect = self.expect;
        let end = self.end_mut()?;
        let channel = end.channel_id().to_owned();
        match tokio::time::timeout(START_WITHIN, end.read_hello()).await {
            Ok(Ok(hello)) => match expect {
                Some((version, why)) if hello.protocol != version => Err(Failure::new(
                    format!("a Hello of protocol {version} ({})", why.text(version)),
                    format!("a Hello of protocol {}", hello.protocol),
                )),
                _ => Ok(hello),
            },
            Ok(Err(e)) => Err(Failure::new(
                expected,
                format!("{e} (channel id {channel})"),
            )),
            Err(_) => Err(Failure::new(
                format!("{expected} within {} ms", START_WITHIN.as_millis()),
                "nothing",
            )),
        }
    }

    /// Sends `welcome`.
    pub async fn welcome(&mut self, welcome: Welcome) -> Result<(), Failure> {
        let end = self.end_mut()?;
        match tokio::time::timeout(SEND_WITHIN, end.welcome(welcome)).await {
            Ok(Ok(())) => {
                self.sent += 1;
                Ok(())
            }
            Ok(Err(e)) => Err(Failure::new("to send the Welcome", e.to_string())),
            Err(_) => Err(Failure::new(
                "to send the Welcome",
                "the child does not read its channel",
            )),
        }
    }

    /// Waits for `Ready`, which must follow the Welcome.
    pub async fn await_ready(&mut self) -> Result<(), Failure> {
        let end = self.end_mut()?;
        match tokio::time::timeout(READY_WITHIN, end.await_ready()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Failure::new("Ready after the Welcome", e.to_string())),
            Err(_) => Err(Failure::new(
                format!(
                    "Ready after the Welcome within {} ms",
                    READY_WITHIN.as_millis()
                ),
                "nothing",
            )),
        }
    }

    /// Hello, `welcome` (of the Hello's protocol version, as a supervisor
    /// answers), Ready, then events flow into [`Self::events`].
    pub async fn handshake_with(&mut self, mut welcome: Welcome) -> Result<Hello, Failure> {
        let hello = self.read_hello().await?;
        self.protocol = hello.protocol;
        welcome.protocol = hello.protocol;
        let max_frame_bytes = welcome.limits.max_frame_bytes;
        self.welcome(welcome).await?;
        // The child is held to the Welcome's limit, as by a supervisor.
        self.end_mut()?
            .reader()
            .set_max_frame_bytes(max_frame_bytes);
        self.await_ready().await?;
        self.start_reading();
        Ok(hello)
    }

    /// Hands the reading half to a task that timestamps every event into
    /// [`Self::events`]; controls are sent with [`Self::send`] from now on.
    pub fn start_reading(&mut self) {
        let (Some(end), Some(tx)) = (self.end.take(), self.tx.take()) else {
            return;
        };
        let (reader, writer) = end.into_parts();
        self.writer = Some(writer);
        self.reader = Some(tokio::spawn(read_events(reader, tx)));
    }

    /// Sends one control message.
    pub async fn send(&mut self, control: Control) -> Result<(), Failure> {
        let what = format!("to send {}", control.name());
        let Some(writer) = self.writer.as_mut() else {
            return Err(Failure::new(what, "the channel is already closed"));
        };
        match tokio::time::timeout(SEND_WITHIN, writer.send(control)).await {
            Ok(Ok(())) => {
                self.sent += 1;
                Ok(())
            }
            Ok(Err(e)) => Err(Failure::new(
                what,
                format!("{e}; {}", self.events.summary()),
            )),
            Err(_) => Err(Failure::new(
                what,
                "the child does not read its channel (the write did not finish in 2 s)",
            )),
        }
    }

    /// Delivers mail `id` (delivery `attempt`) with `payload`.
    pub async fn mail(
        &mut self,
        id: u64,
        attempt: u32,
        payload: impl Into<Vec<u8>>,
    ) -> Result<(), Failure> {
        self.send(Control::Mail {
            id,
            attempt,
            payload: payload.into(),
        })
        .await
    }

    /// Fails unless the child speaks protocol 3 (for the scenarios of
    /// version 3).
    pub fn require_v3(&self) -> Result<(), Failure> {
        if self.protocol >= 3 {
            return Ok(());
        }
        Err(Failure::new(
            format!(
                "a child that speaks protocol 3 (a Hello of protocol 3 under {ENV_PROTOCOL}={OLDEST_PROTOCOL}, {ENV_PROTOCOL_MAX}={PROTOCOL_VERSION})"
            ),
            format!(
                "a Hello of protocol {} (a child of version 2 fails every scenario of version 3; run the kit with --protocol 2 to test it as one)",
                self.protocol
            ),
        ))
    }

    /// The event that ends an item in the version the child speaks.
    pub fn done_word(&self) -> &'static str {
        if self.protocol >= 3 {
            "MailDone"
        } else {
            "MailAck"
        }
    }

    /// The sequence number the next frame must carry.
    pub fn next_seq(&self) -> u64 {
        self.sent + 1
    }

    /// Writes `bytes` to the channel as they are (broken frames).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), Failure> {
        let Some(raw) = self.raw.as_mut() else {
            return Err(Failure::new("to write raw bytes", "the channel is closed"));
        };
        raw.write_all(bytes)
            .map_err(|e| Failure::new("to write raw bytes to the channel", e.to_string()))
    }

    /// Closes this side of the channel entirely: the child reads end of
    /// stream.
    pub fn close_channel(&mut self) {
        self.end = None;
        self.writer = None;
        self.raw = None;
        if let Some(reader) = self.reader.take() {
            reader.abort();
        }
    }

    /// Waits up to `within` for the child to exit.
    pub async fn wait_exit(&mut self, within: Duration) -> Result<ExitStatus, Failure> {
        if let Some(status) = self.exit {
            return Ok(status);
        }
        match tokio::time::timeout(within, self.child.wait()).await {
            Ok(Ok(status)) => {
                self.exit = Some(status);
                Ok(status)
            }
            Ok(Err(e)) => Err(Failure::new("to wait for the child", e.to_string())),
            Err(_) => Err(Failure::new(
                format!("the child to exit within {} ms", within.as_millis()),
                format!("it still runs; {}", self.events.summary()),
            )),
        }
    }

    /// Its stderr so far, once the stream ended (or a second passed).
    pub async fn stderr(&mut self) -> String {
        self.stderr.finish(OUTPUT_WITHIN).await
    }

    /// Kills the child's whole tree (unless it already exited) and reaps
    /// it; what it wrote is kept for [`Self::output`].
    pub async fn finish(&mut self) {
        self.close_channel();
        if self.exit.is_none() {
            kill_tree(self.pid);
            if let Ok(Ok(status)) = tokio::time::timeout(REAP_WITHIN, self.child.wait()).await {
                self.exit = Some(status);
            }
        } else {
            // Whatever it left in its group goes with it.
            kill_tree(self.pid);
        }
        self.stdout.finish(OUTPUT_WITHIN).await;
        self.stderr.finish(OUTPUT_WITHIN).await;
    }

    /// What the child wrote to stdout and stderr, for a failure report.
    pub fn output(&self) -> (String, String) {
        (self.stdout.text(), self.stderr.text())
    }

    fn end_mut(&mut self) -> Result<&mut SupervisorEnd, Failure> {
        self.end
            .as_mut()
            .ok_or_else(|| Failure::new("the handshake", "the kit already finished it"))
    }
}

/// Why a child must speak one version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expected {
    /// `--protocol` says it speaks only that one.
    Flag,
    /// It runs under a supervisor of version 2.
    Version2Supervisor,
}

impl Expected {
    /// The reason, as a failure names it.
    fn text(self, version: u32) -> String {
        match self {
            Self::Flag => format!("the kit was told --protocol {version}"),
            Self::Version2Supervisor => format!(
                "{ENV_PROTOCOL}={OLDEST_PROTOCOL} without {ENV_PROTOCOL_MAX}: a supervisor of version 2"
            ),
        }
    }
}

/// A scenario that ends early still leaves nothing running.
impl Drop for Subject {
    fn drop(&mut self) {
        if self.exit.is_none() {
            kill_tree(self.pid);
        }
    }
}

/// Feeds every event, timestamped, to `tx` until the channel ends.
async fn read_events(mut reader: FrameReader<Event>, tx: mpsc::UnboundedSender<Arrival>) {
    loop {
        let arrival = match reader.next().await {
            Ok(Some(event)) => Arrival::Event {
                at: Instant::now(),
                event,
            },
            Ok(None) => Arrival::Ended(None),
            // The child closed with frames of ours unread: an end too.
            Err(TransportError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                Arrival::Ended(None)
            }
            Err(e) => Arrival::Ended(Some(e.to_string())),
        };
        let ended = matches!(arrival, Arrival::Ended(_));
        if tx.send(arrival).is_err() || ended {
            return;
        }
    }
}

/// One output stream, copied into memory (the first [`OUTPUT_CAP`] bytes)
/// by a task of its own.
#[derive(Debug)]
struct Captured {
    bytes: Arc<Mutex<Vec<u8>>>,
    task: Option<JoinHandle<()>>,
}

impl Captured {
    fn start(stream: Option<impl AsyncRead + Unpin + Send + 'static>) -> Self {
        let bytes = Arc::new(Mutex::new(Vec::new()));
        let task = stream.map(|mut stream| {
            let bytes = bytes.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = stream.read(&mut buf).await {
                    let mut kept = bytes.lock().unwrap_or_else(PoisonError::into_inner);
                    let room = OUTPUT_CAP.saturating_sub(kept.len());
                    kept.extend_from_slice(&buf[..n.min(room)]);
                }
            })
        });
        Self { bytes, task }
    }

    /// Waits up to `within` for the stream to end, then returns the text.
    async fn finish(&mut self, within: Duration) -> String {
        if let Some(task) = self.task.as_mut()
            && tokio::time::timeout(within, task).await.is_ok()
        {
            self.task = None;
        }
        self.text()
    }

    fn text(&self) -> String {
        let bytes = self.bytes.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}
