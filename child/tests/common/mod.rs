//! The supervisor's side of a real `wfhost-child` process: the control
//! channel at fd 3, the `WFHOST_*` environment, the handshake, and the
//! child's stdout and stderr captured for assertions.

use std::os::fd::{AsRawFd, OwnedFd};
use std::process::Stdio;
use std::time::Duration;

use ed25519_dalek::SigningKey;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use wfhost_ipc::handshake::{
    ENV_CHANNEL_ID, ENV_CONTROL_FD, ENV_DEPLOYMENT, ENV_PROTOCOL, ENV_SUPERVISOR_KEY,
};
use wfhost_ipc::{
    CancelOrigin, CancelRequested, Control, DEFAULT_MAX_FRAME_BYTES, Event, FrameReader,
    FrameWriter, Grants, Limits, SignedCancel, Welcome, key,
};

/// How long any one expected thing may take.
pub const WAIT: Duration = Duration::from_secs(10);
/// The deployment every test child serves.
pub const DEPLOYMENT: &str = "billing";

/// The supervisor's side of one wfhost-child.
pub struct Supervised {
    child: Child,
    reader: Option<FrameReader<Event>>,
    writer: Option<FrameWriter<Control>>,
    key: SigningKey,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
}

impl Drop for Supervised {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
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
/// `WFHOST_*` environment, checks its Hello and answers Welcome.
pub async fn start(args: &[&str]) -> Supervised {
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
        .env(ENV_PROTOCOL, "1")
        .env(ENV_DEPLOYMENT, DEPLOYMENT)
        .env(ENV_SUPERVISOR_KEY, key::public_hex(&key.verifying_key()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
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
    let stream = tokio::net::UnixStream::from_std(ours).unwrap();
    let (reader, writer) = wfhost_ipc::split::<Event, Control>(stream, DEFAULT_MAX_FRAME_BYTES);
    let mut s = Supervised {
        child,
        reader: Some(reader),
        writer: Some(writer),
        key,
        stdout: Some(stdout),
        stderr: Some(stderr),
    };
    match s.next().await {
        Event::Hello(hello) => {
            hello.check(&channel).unwrap();
            assert_eq!(hello.pid, pid);
        }
        other => panic!("expected Hello, got {other:?}"),
    }
    s.send(Control::Welcome(Welcome {
        deployment: DEPLOYMENT.into(),
        grants_snapshot: Grants::default(),
        limits: Limits {
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_mail_bytes: 256 << 10,
            drain_timeout_ms: 60_000,
        },
    }))
    .await;
    s
}

impl Supervised {
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

    /// Sends one control message.
    pub async fn send(&mut self, control: Control) {
        self.writer.as_mut().unwrap().send(control).await.unwrap();
    }

    /// Pings and expects the Pong next: proof that nothing else was sent
    /// in between.
    pub async fn ping(&mut self, nonce: u64) {
        self.send(Control::Ping { nonce }).await;
        assert_eq!(self.next().await, Event::Pong { nonce });
    }

    /// A cancel of `run` (every run when `None`), signed with the
    /// supervisor key the child trusts.
    pub fn signed_cancel(&self, origin: CancelOrigin, run: Option<&str>) -> Control {
        Control::Cancel(SignedCancel::sign(
            CancelRequested {
                origin,
                deployment: DEPLOYMENT.into(),
                run: run.map(str::to_owned),
                reason: "test".into(),
                at_ms: 1,
            },
            &self.key,
        ))
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
