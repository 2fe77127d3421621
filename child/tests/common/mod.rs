//! The supervisor's side of the control channel, for the child's tests: a
//! [`Channel`] (send controls, expect events, sign cancels) over any
//! socketpair, and [`start`] for a real `wfhost-child` process with the
//! channel at fd 3, the `WFHOST_*` environment, the handshake, and the
//! child's stdout and stderr captured for assertions.

// Each test crate that includes this module uses a different part of it.
#![allow(dead_code)]

use std::ops::{Deref, DerefMut};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::time::Duration;

use ed25519_dalek::SigningKey;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::UnixStream;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use wfhost_ipc::handshake::{
    ENV_CHANNEL_ID, ENV_CONTROL_FD, ENV_DEPLOYMENT, ENV_PROTOCOL, ENV_PROTOCOL_MAX,
    ENV_SUPERVISOR_KEY,
};
use wfhost_ipc::{
    CancelOrigin, CancelRequested, Control, DEFAULT_MAX_FRAME_BYTES, DrainBehavior, Event,
    FrameReader, FrameWriter, Grants, Limits, Outcome, SignedCancel, Welcome, key,
};

/// How long any one expected thing may take.
pub const WAIT: Duration = Duration::from_secs(10);
/// The deployment every test child serves.
pub const DEPLOYMENT: &str = "billing";

/// A Welcome of `protocol` for `deployment` with the given frame and mail
/// limits.
pub fn welcome(
    protocol: u32,
    deployment: &str,
    max_frame_bytes: u32,
    max_mail_bytes: u32,
) -> Control {
    Control::Welcome(Welcome {
        protocol,
        deployment: deployment.into(),
        grants_snapshot: Grants::default(),
        limits: Limits {
            max_frame_bytes,
            max_mail_bytes,
            drain_timeout_ms: 60_000,
            liveness_timeout_ms: 30_000,
        },
    })
}

/// A cancel of `run` (every run when `None`) in `deployment`, signed with
/// `key`: with a key or deployment the child does not trust, a forgery.
pub fn cancel(
    origin: CancelOrigin,
    deployment: &str,
    run: Option<&str>,
    key: &SigningKey,
) -> Control {
    Control::Cancel(SignedCancel::sign(
        CancelRequested {
            origin,
            deployment: deployment.into(),
            run: run.map(str::to_owned),
            reason: "test".into(),
            at_ms: 1,
        },
        key,
    ))
}

/// The supervisor's end of one control channel, holding the key the child
/// trusts.
pub struct Channel {
    reader: Option<FrameReader<Event>>,
    writer: Option<FrameWriter<Control>>,
    key: SigningKey,
}

impl Channel {
    /// The supervisor's end of `stream`, signing with `key`.
    pub fn new(stream: UnixStream, key: SigningKey) -> Self {
        let (reader, writer) = wfhost_ipc::split::<Event, Control>(stream, DEFAULT_MAX_FRAME_BYTES);
        Self {
            reader: Some(reader),
            writer: Some(writer),
            key,
        }
    }

    /// The supervisor key the child trusts.
    pub fn key(&self) -> &SigningKey {
        &self.key
    }

    /// The next event, failing the test if none comes in time.
    pub async fn next(&mut self) -> Event {
        let reader = self.reader.as_mut().unwrap();
        match tokio::time::timeout(WAIT, reader.next()).await {
            Ok(Ok(Some(event))) => event,
            Ok(Ok(None)) => panic!("wfhost-child closed the channel"),
            Ok(Err(e)) => panic!("wfhost-child broke the protocol: {e}"),
            Err(_) => panic!("no event from wfhost-child within {WAIT:?}"),
        }
    }

    /// Expects the child's Hello on `channel`; returns the pid it gives.
    pub async fn expect_hello(&mut self, channel: &str) -> u32 {
        self.expect_hello_of(channel).await.pid
    }

    /// Expects the child's Hello on `channel` and returns it.
    pub async fn expect_hello_of(&mut self, channel: &str) -> wfhost_ipc::Hello {
        match self.next().await {
            Event::Hello(hello) => {
                hello.check(channel).unwrap();
                hello
            }
            other => panic!("expected Hello, got {other:?}"),
        }
    }

    /// Asserts the channel ends (the child closed or exited).
    pub async fn expect_eof(&mut self) {
        let reader = self.reader.as_mut().unwrap();
        match tokio::time::timeout(WAIT, reader.next()).await {
            Ok(Ok(None)) => {}
            other => panic!("expected end of stream, got {other:?}"),
        }
    }

    /// Closes both directions, as a supervisor that went away.
    pub fn hang_up(&mut self) {
        self.writer.take();
        self.reader.take();
    }

    /// Closes the sending direction only; events can still be read.
    pub async fn close_writer(&mut self) {
        self.writer.as_mut().unwrap().close().await.unwrap();
    }

    /// Sends one control message.
    pub async fn send(&mut self, control: Control) {
        self.writer.as_mut().unwrap().send(control).await.unwrap();
    }

    /// Sends mail item `id` with `payload`.
    pub async fn send_mail(&mut self, id: u64, payload: impl Into<Vec<u8>>) {
        self.send(Control::Mail {
            id,
            attempt: 1,
            payload: payload.into(),
        })
        .await;
    }

    /// Pings and expects the Pong next: proof that nothing else was sent
    /// in between.
    pub async fn ping(&mut self, nonce: u64) {
        self.send(Control::Ping { nonce }).await;
        assert_eq!(self.next().await, Event::Pong { nonce });
    }

    /// A cancel of `run` (every run when `None`) in [`DEPLOYMENT`], signed
    /// with the supervisor key the child trusts.
    pub fn signed_cancel(&self, origin: CancelOrigin, run: Option<&str>) -> Control {
        cancel(origin, DEPLOYMENT, run, &self.key)
    }

    /// Expects `StepStarted` of `step` in `run` next.
    pub async fn expect_started(&mut self, run: &str, step: &str, drain: DrainBehavior) {
        assert_eq!(
            self.next().await,
            Event::StepStarted {
                run: run.into(),
                step: step.into(),
                drain
            }
        );
    }

    /// Expects `StepFinished` of `step` in `run` next.
    pub async fn expect_finished(&mut self, run: &str, step: &str, outcome: Outcome) {
        assert_eq!(
            self.next().await,
            Event::StepFinished {
                run: run.into(),
                step: step.into(),
                outcome
            }
        );
    }

    /// Expects `RunTerminal` of `run` next.
    pub async fn expect_terminal(&mut self, run: &str, outcome: Outcome) {
        assert_eq!(
            self.next().await,
            Event::RunTerminal {
                run: run.into(),
                outcome
            }
        );
    }

    /// Expects `step`, the last step of `run`, to finish and then the run
    /// to end, both with `outcome`.
    pub async fn expect_run_end(&mut self, run: &str, step: &str, outcome: Outcome) {
        self.expect_finished(run, step, outcome.clone()).await;
        self.expect_terminal(run, outcome).await;
    }

    /// Expects `MailAck` of mail `id` next.
    pub async fn expect_ack(&mut self, id: u64, outcome: Outcome) {
        assert_eq!(self.next().await, Event::MailAck { id, outcome });
    }
}

/// The supervisor's side of one wfhost-child process: its [`Channel`]
/// (which it derefs to) and the process.
pub struct Supervised {
    child: Child,
    pid: u32,
    channel: Channel,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
}

impl Drop for Supervised {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

impl Deref for Supervised {
    type Target = Channel;

    fn deref(&self) -> &Channel {
        &self.channel
    }
}

impl DerefMut for Supervised {
    fn deref_mut(&mut self) -> &mut Channel {
        &mut self.channel
    }
}

fn collect(mut pipe: impl AsyncRead + Unpin + Send + 'static) -> JoinHandle<String> {
    tokio::spawn(async move {
        let mut text = String::new();
        let _ = pipe.read_to_string(&mut text).await;
        text
    })
}

/// Spawns `wfhost-child ARGS` with the control channel at fd 3 and the
/// `WFHOST_*` environment of a supervisor of version 2, checks its Hello
/// (of protocol 2) and answers Welcome.
pub async fn start(args: &[&str]) -> Supervised {
    start_under(args, None).await
}

/// [`start`] under a supervisor of version 3 (`WFHOST_PROTOCOL_MAX=3`):
/// the child speaks the version of its Hello, which is answered.
pub async fn start_v3(args: &[&str]) -> Supervised {
    start_under(args, Some(wfhost_ipc::PROTOCOL_VERSION)).await
}

/// [`start`] with `WFHOST_PROTOCOL_MAX=max` (none when `None`).
pub async fn start_under(args: &[&str], max: Option<u32>) -> Supervised {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let key = key::generate().unwrap();
    let channel = wfhost_ipc::new_channel_id().unwrap();
    let theirs: OwnedFd = theirs.into();
    let fd = theirs.as_raw_fd();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_wfhost-child"));
    cmd.args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env(ENV_CONTROL_FD, "3")
        .env(ENV_CHANNEL_ID, &channel)
        .env(ENV_PROTOCOL, wfhost_ipc::OLDEST_PROTOCOL.to_string())
        .env(ENV_DEPLOYMENT, DEPLOYMENT)
        .env(ENV_SUPERVISOR_KEY, key::public_hex(&key.verifying_key()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(max) = max {
        cmd.env(ENV_PROTOCOL_MAX, max.to_string());
    }
    // SAFETY: only dup2 and fcntl between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if fd == 3 {
                if libc::fcntl(3, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    drop(theirs);
    let pid = child.id().unwrap();
    let stdout = collect(child.stdout.take().unwrap());
    let stderr = collect(child.stderr.take().unwrap());
    ours.set_nonblocking(true).unwrap();
    let stream = UnixStream::from_std(ours).unwrap();
    let mut s = Supervised {
        child,
        pid,
        channel: Channel::new(stream, key),
        stdout: Some(stdout),
        stderr: Some(stderr),
    };
    let hello = s.expect_hello_of(&channel).await;
    assert_eq!(hello.pid, pid);
    assert_eq!(hello.protocol, max.unwrap_or(wfhost_ipc::OLDEST_PROTOCOL));
    s.send(welcome(
        hello.protocol,
        DEPLOYMENT,
        DEFAULT_MAX_FRAME_BYTES,
        256 << 10,
    ))
    .await;
    s
}

impl Supervised {
    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The child's exit code, once it exits.
    pub async fn exit_code(&mut self) -> Option<i32> {
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("wfhost-child did not exit in time")
            .unwrap();
        status.code()
    }

    /// Everything the child wrote to stdout (after it exited).
    pub async fn stdout(&mut self) -> String {
        tokio::time::timeout(WAIT, self.stdout.take().unwrap())
            .await
            .expect("stdout did not close")
            .unwrap()
    }

    /// Everything the child wrote to stderr (after it exited).
    pub async fn stderr(&mut self) -> String {
        tokio::time::timeout(WAIT, self.stderr.take().unwrap())
            .await
            .expect("stderr did not close")
            .unwrap()
    }
}

/// Runs `wfhost-child ARGS` without `WFHOST_CONTROL_FD` and asserts it
/// exits 2, saying it must run under `wfhost supervise`.
pub async fn assert_refuses_outside_wfhost(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_wfhost-child"))
        .args(args)
        .env_remove(ENV_CONTROL_FD)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("WFHOST_CONTROL_FD"), "{stderr}");
    assert!(stderr.contains("wfhost supervise"), "{stderr}");
}
