//! `wfhost-child exec` driven from the supervisor's side of the socketpair:
//! the real binary, a real command, the real protocol.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use ed25519_dalek::SigningKey;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;
use wfhost_ipc::handshake::{
    ENV_CHANNEL_ID, ENV_CONTROL_FD, ENV_DEPLOYMENT, ENV_PROTOCOL, ENV_SUPERVISOR_KEY,
};
use wfhost_ipc::{
    CancelOrigin, CancelRequested, Control, DEFAULT_MAX_FRAME_BYTES, DrainBehavior, Event,
    FrameReader, FrameWriter, Grants, Limits, Outcome, SignedCancel, Welcome, key,
};

const WAIT: Duration = Duration::from_secs(10);
const DEPLOYMENT: &str = "billing";

/// A scratch directory for pid and marker files, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("wfhc-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The command's pid, once it has written it.
    async fn command_pid(&self) -> i32 {
        let file = self.file("pid");
        let deadline = Instant::now() + WAIT;
        loop {
            if let Ok(text) = std::fs::read_to_string(&file)
                && let Ok(pid) = text.trim().parse()
            {
                return pid;
            }
            assert!(Instant::now() < deadline, "the command never wrote its pid");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Ok(text) = std::fs::read_to_string(self.file("pid"))
            && let Ok(pid) = text.trim().parse::<i32>()
        {
            // SAFETY: plain kill(2); a stray test command must not outlive us.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn alive(pid: i32) -> bool {
    // A zombie still answers kill(0); read its state to tell.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// The supervisor's side of one wfhost-child.
struct Supervised {
    child: Child,
    pid: u32,
    reader: Option<FrameReader<Event>>,
    writer: Option<FrameWriter<Control>>,
    key: SigningKey,
    stderr: Option<JoinHandle<String>>,
}

impl Drop for Supervised {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// Spawns `wfhost-child ARGS` with the control channel at fd 3 and the
/// `WFHOST_*` environment, checks its Hello and answers Welcome.
async fn start(args: &[&str]) -> Supervised {
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
        .stdout(Stdio::null())
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
    let mut stderr = child.stderr.take().unwrap();
    let stderr = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    ours.set_nonblocking(true).unwrap();
    let stream = tokio::net::UnixStream::from_std(ours).unwrap();
    let (reader, writer) = wfhost_ipc::split::<Event, Control>(stream, DEFAULT_MAX_FRAME_BYTES);
    let mut s = Supervised {
        child,
        pid,
        reader: Some(reader),
        writer: Some(writer),
        key,
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
    async fn next(&mut self) -> Event {
        let reader = self.reader.as_mut().unwrap();
        match tokio::time::timeout(WAIT, reader.next()).await {
            Ok(Ok(Some(event))) => event,
            Ok(Ok(None)) => panic!("wfhost-child closed the channel"),
            Ok(Err(e)) => panic!("wfhost-child broke the protocol: {e}"),
            Err(_) => panic!("no event from wfhost-child within {WAIT:?}"),
        }
    }

    /// Asserts the channel ends (the child closed or exited).
    async fn expect_eof(&mut self) {
        let reader = self.reader.as_mut().unwrap();
        match tokio::time::timeout(WAIT, reader.next()).await {
            Ok(Ok(None)) => {}
            other => panic!("expected end of stream, got {other:?}"),
        }
    }

    async fn send(&mut self, control: Control) {
        self.writer.as_mut().unwrap().send(control).await.unwrap();
    }

    async fn expect_started(&mut self, run: &str, drain: DrainBehavior) {
        assert_eq!(self.next().await, Event::Ready);
        assert_eq!(
            self.next().await,
            Event::StepStarted {
                run: run.into(),
                step: "command".into(),
                drain
            }
        );
    }

    async fn expect_end(&mut self, run: &str, outcome: Outcome) {
        assert_eq!(
            self.next().await,
            Event::StepFinished {
                run: run.into(),
                step: "command".into(),
                outcome: outcome.clone()
            }
        );
        assert_eq!(
            self.next().await,
            Event::RunTerminal {
                run: run.into(),
                outcome
            }
        );
    }

    async fn ping(&mut self, nonce: u64) {
        self.send(Control::Ping { nonce }).await;
        assert_eq!(self.next().await, Event::Pong { nonce });
    }

    fn default_run(&self) -> String {
        format!("exec-{}", self.pid)
    }

    fn cancel(&self, deployment: &str, run: Option<&str>, key: &SigningKey) -> Control {
        Control::Cancel(SignedCancel::sign(
            CancelRequested {
                origin: CancelOrigin::SupervisorDrain,
                deployment: deployment.into(),
                run: run.map(str::to_owned),
                reason: "drain budget spent".into(),
                at_ms: 1,
            },
            key,
        ))
    }

    async fn exit_code(&mut self) -> Option<i32> {
        let status = tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("wfhost-child did not exit in time")
            .unwrap();
        status.code()
    }

    async fn stderr(&mut self) -> String {
        tokio::time::timeout(WAIT, self.stderr.take().unwrap())
            .await
            .expect("stderr did not close")
            .unwrap()
    }
}

/// A command that records its pid, exits 7 on SIGTERM (leaving a marker),
/// and otherwise runs until killed.
fn stoppable(dir: &Scratch) -> String {
    format!(
        "trap 'echo term > {d}/term; exit 7' TERM; echo $$ > {d}/pid; while :; do sleep 0.05; done",
        d = dir.path().display()
    )
}

#[tokio::test]
async fn handshake_ready_pings_while_running_and_shutdown_passes_the_status_on() {
    let dir = Scratch::new("shutdown");
    let script = stoppable(&dir);
    let mut s = start(&["exec", "--", "sh", "-c", &script]).await;
    let run = s.default_run();
    s.expect_started(&run, DrainBehavior::Cancel).await;
    let pid = dir.command_pid().await;
    for nonce in 1..=5 {
        s.ping(nonce).await;
    }
    assert!(alive(pid));
    s.send(Control::Shutdown).await;
    s.expect_end(&run, Outcome::Failed("exit status 7".into()))
        .await;
    s.expect_eof().await;
    assert_eq!(s.exit_code().await, Some(7));
    assert!(dir.file("term").exists(), "the command got SIGTERM");
}

#[tokio::test]
async fn drain_with_cancel_behaviour_terminates_the_command() {
    let dir = Scratch::new("drain-cancel");
    let script = stoppable(&dir);
    let mut s = start(&["exec", "--drain", "cancel", "--", "sh", "-c", &script]).await;
    let run = s.default_run();
    s.expect_started(&run, DrainBehavior::Cancel).await;
    dir.command_pid().await;
    s.send(Control::Drain { budget_ms: 60_000 }).await;
    s.expect_end(&run, Outcome::Cancelled).await;
    assert_eq!(s.next().await, Event::Drained);
    s.expect_eof().await;
    assert_eq!(s.exit_code().await, Some(7));
    assert!(dir.file("term").exists(), "the command got SIGTERM");
}

#[tokio::test]
async fn drain_with_wait_behaviour_is_drained_at_once_and_the_command_finishes() {
    let dir = Scratch::new("drain-wait");
    let script = format!(
        "echo $$ > {d}/pid; while [ ! -e {d}/go ]; do sleep 0.02; done; exit 0",
        d = dir.path().display()
    );
    let mut s = start(&[
        "exec", "--drain", "wait", "--run", "job-1", "--", "sh", "-c", &script,
    ])
    .await;
    s.expect_started("job-1", DrainBehavior::Wait).await;
    let pid = dir.command_pid().await;
    s.send(Control::Drain { budget_ms: 60_000 }).await;
    assert_eq!(s.next().await, Event::Drained);
    s.ping(9).await;
    assert!(alive(pid), "a wait-behaviour command survives the drain");
    std::fs::write(dir.file("go"), b"").unwrap();
    s.expect_end("job-1", Outcome::Succeeded).await;
    s.expect_eof().await;
    assert_eq!(s.exit_code().await, Some(0));
}

#[tokio::test]
async fn a_signed_cancel_of_the_run_kills_the_command() {
    let dir = Scratch::new("cancel");
    let script = stoppable(&dir);
    let mut s = start(&["exec", "--drain", "wait", "--", "sh", "-c", &script]).await;
    let run = s.default_run();
    s.expect_started(&run, DrainBehavior::Wait).await;
    dir.command_pid().await;
    let cancel = s.cancel(DEPLOYMENT, Some(&run), &s.key);
    s.send(cancel).await;
    s.expect_end(&run, Outcome::Cancelled).await;
    s.expect_eof().await;
    assert_eq!(s.exit_code().await, Some(128 + libc::SIGKILL));
    assert!(!dir.file("term").exists(), "killed, not terminated");
}

#[tokio::test]
async fn a_signed_cancel_of_every_run_kills_the_command() {
    let dir = Scratch::new("cancel-all");
    let script = stoppable(&dir);
    let mut s = start(&["exec", "--", "sh", "-c", &script]).await;
    let run = s.default_run();
    s.expect_started(&run, DrainBehavior::Cancel).await;
    dir.command_pid().await;
    let cancel = s.cancel(DEPLOYMENT, None, &s.key);
    s.send(cancel).await;
    s.expect_end(&run, Outcome::Cancelled).await;
    assert_eq!(s.exit_code().await, Some(128 + libc::SIGKILL));
}

#[tokio::test]
async fn forged_or_misaddressed_cancels_are_refused_and_the_command_runs_on() {
    let dir = Scratch::new("refuse");
    let script = stoppable(&dir);
    let mut s = start(&["exec", "--", "sh", "-c", &script]).await;
    let run = s.default_run();
    s.expect_started(&run, DrainBehavior::Cancel).await;
    let pid = dir.command_pid().await;

    let other_key = key::generate().unwrap();
    let forged = s.cancel(DEPLOYMENT, Some(&run), &other_key);
    let elsewhere = s.cancel("payroll", Some(&run), &s.key);
    let other_run = s.cancel(DEPLOYMENT, Some("exec-1"), &s.key);
    for (nonce, cancel) in [forged, elsewhere, other_run].into_iter().enumerate() {
        s.send(cancel).await;
        // Handled in order: a RunTerminal would come before this Pong.
        s.ping(nonce as u64).await;
        assert!(alive(pid), "the command survives a refused cancel");
    }

    s.send(Control::Shutdown).await;
    s.expect_end(&run, Outcome::Failed("exit status 7".into()))
        .await;
    assert_eq!(s.exit_code().await, Some(7));
    let stderr = s.stderr().await;
    let refusals: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("refused cancel"))
        .collect();
    assert_eq!(refusals.len(), 3, "{stderr}");
    assert!(refusals[0].contains("unknown key"), "{stderr}");
    assert!(refusals[1].contains("payroll"), "{stderr}");
    assert!(refusals[2].contains("does not know"), "{stderr}");
}

#[tokio::test]
async fn eof_terminates_the_command_and_the_child_exits() {
    let dir = Scratch::new("eof");
    let script = stoppable(&dir);
    let mut s = start(&["exec", "--", "sh", "-c", &script]).await;
    let run = s.default_run();
    s.expect_started(&run, DrainBehavior::Cancel).await;
    dir.command_pid().await;
    s.writer.take();
    s.reader.take();
    assert_eq!(s.exit_code().await, Some(7));
    assert!(dir.file("term").exists(), "the command got SIGTERM");
}

#[tokio::test]
async fn eof_kills_a_command_that_ignores_sigterm_after_the_grace_period() {
    let dir = Scratch::new("eof-kill");
    let script = format!(
        "trap '' TERM; echo $$ > {d}/pid; while :; do sleep 0.05; done",
        d = dir.path().display()
    );
    let mut s = start(&["exec", "--", "sh", "-c", &script]).await;
    let run = s.default_run();
    s.expect_started(&run, DrainBehavior::Cancel).await;
    let pid = dir.command_pid().await;
    let closed_at = Instant::now();
    s.writer.take();
    s.reader.take();
    assert_eq!(s.exit_code().await, Some(128 + libc::SIGKILL));
    let waited = closed_at.elapsed();
    assert!(
        waited >= Duration::from_secs(4),
        "SIGKILL came after {waited:?}"
    );
    assert!(!alive(pid));
}

#[tokio::test]
async fn sigterm_to_wfhost_child_is_forwarded_to_the_command() {
    let dir = Scratch::new("sigterm");
    let script = stoppable(&dir);
    let mut s = start(&["exec", "--", "sh", "-c", &script]).await;
    let run = s.default_run();
    s.expect_started(&run, DrainBehavior::Cancel).await;
    dir.command_pid().await;
    // SAFETY: plain kill(2) of the child we spawned.
    assert_eq!(unsafe { libc::kill(s.pid as i32, libc::SIGTERM) }, 0);
    s.expect_end(&run, Outcome::Failed("exit status 7".into()))
        .await;
    assert_eq!(s.exit_code().await, Some(7));
    assert!(dir.file("term").exists());
}

#[tokio::test]
async fn mail_is_acknowledged_as_failed_in_exec_mode() {
    let dir = Scratch::new("mail");
    let script = stoppable(&dir);
    let mut s = start(&["exec", "--", "sh", "-c", &script]).await;
    let run = s.default_run();
    s.expect_started(&run, DrainBehavior::Cancel).await;
    s.send(Control::Mail {
        id: 42,
        payload: b"hello".to_vec(),
    })
    .await;
    assert_eq!(
        s.next().await,
        Event::MailAck {
            id: 42,
            outcome: Outcome::Failed(
                "wfhost-child exec hosts a plain command and takes no mail".into()
            )
        }
    );
    // The trap is set once the pid is written.
    dir.command_pid().await;
    s.send(Control::Shutdown).await;
    assert_eq!(s.exit_code().await, Some(7));
}

#[tokio::test]
async fn exec_never_holds_mail_so_a_drain_is_drained_at_once_and_later_mail_is_not_taken() {
    let dir = Scratch::new("mail-drain");
    let script = format!(
        "echo $$ > {d}/pid; while [ ! -e {d}/go ]; do sleep 0.02; done; exit 0",
        d = dir.path().display()
    );
    let mut s = start(&[
        "exec", "--drain", "wait", "--run", "job-1", "--", "sh", "-c", &script,
    ])
    .await;
    s.expect_started("job-1", DrainBehavior::Wait).await;
    let no_mail =
        Outcome::Failed("wfhost-child exec hosts a plain command and takes no mail".into());
    s.send(Control::Mail {
        id: 1,
        payload: b"a".to_vec(),
    })
    .await;
    assert_eq!(
        s.next().await,
        Event::MailAck {
            id: 1,
            outcome: no_mail.clone()
        }
    );
    s.send(Control::Drain { budget_ms: 60_000 }).await;
    assert_eq!(s.next().await, Event::Drained);
    // During the drain new mail is not taken (left for the next child) and
    // settled mail is acknowledged again.
    s.send(Control::Mail {
        id: 2,
        payload: b"b".to_vec(),
    })
    .await;
    s.send(Control::Mail {
        id: 1,
        payload: b"a".to_vec(),
    })
    .await;
    assert_eq!(
        s.next().await,
        Event::MailAck {
            id: 1,
            outcome: no_mail
        }
    );
    s.ping(3).await;
    std::fs::write(dir.file("go"), b"").unwrap();
    s.expect_end("job-1", Outcome::Succeeded).await;
    s.expect_eof().await;
    assert_eq!(s.exit_code().await, Some(0));
    let stderr = s.stderr().await;
    assert!(stderr.contains("mail 2 arrived after Drain"), "{stderr}");
}

#[tokio::test]
async fn the_exit_status_of_a_failing_command_is_reported_and_passed_on() {
    let mut s = start(&["exec", "--run", "r", "--", "sh", "-c", "exit 3"]).await;
    s.expect_started("r", DrainBehavior::Cancel).await;
    s.expect_end("r", Outcome::Failed("exit status 3".into()))
        .await;
    s.expect_eof().await;
    assert_eq!(s.exit_code().await, Some(3));
}

#[tokio::test]
async fn a_command_that_cannot_start_fails_the_run_and_exits_127() {
    let mut s = start(&[
        "exec",
        "--run",
        "r",
        "--",
        "/nonexistent/wfh-no-such-command",
    ])
    .await;
    match s.next().await {
        Event::RunTerminal {
            run,
            outcome: Outcome::Failed(why),
        } => {
            assert_eq!(run, "r");
            assert!(why.contains("cannot start"), "{why}");
        }
        other => panic!("expected RunTerminal Failed, got {other:?}"),
    }
    assert_eq!(s.exit_code().await, Some(127));
}

#[tokio::test]
async fn outside_wfhost_it_says_so_and_exits_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_wfhost-child"))
        .args(["exec", "--", "true"])
        .env_remove(ENV_CONTROL_FD)
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("WFHOST_CONTROL_FD"), "{stderr}");
    assert!(stderr.contains("wfhost supervise"), "{stderr}");
}
