//! `wfhost-child exec` driven from the supervisor's side of the socketpair:
//! the real binary, a real command, the real protocol.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{DEPLOYMENT, Supervised, WAIT, assert_refuses_outside_wfhost, cancel, start};
use wfhost_ipc::{
    CancelOrigin, CancelVerdict, Control, DrainBehavior, Event, MailCancelRequested, Outcome,
    SignedMailCancel, key,
};

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

/// The run an exec child names after its pid when `--run` is not given.
fn default_run(s: &Supervised) -> String {
    format!("exec-{}", s.pid())
}

/// Expects `Ready`, then the start of the hosted command's step in `run`.
async fn expect_started(s: &mut Supervised, run: &str, drain: DrainBehavior) {
    assert_eq!(s.next().await, Event::Ready);
    s.expect_started(run, "command", drain).await;
}

/// A command that records its pid, exits 7 on SIGTERM (leaving a marker),
/// and otherwise runs until killed.
fn stoppable(dir: &Scratch) -> String {
    format!(
        "trap 'echo term > {d}/term; exit 7' TERM; echo $$ > {d}/pid; while :; do sleep 0.05; done",
        d = dir.path().display()
    )
}

/// A command that records its pid and exits 0 once the file `go` appears.
fn until_go(dir: &Scratch) -> String {
    format!(
        "echo $$ > {d}/pid; while [ ! -e {d}/go ]; do sleep 0.02; done; exit 0",
        d = dir.path().display()
    )
}

/// Starts `wfhost-child exec FLAGS -- sh -c SCRIPT` with the `script` of
/// a fresh scratch dir `name`, and expects its command step to start with
/// `drain`; returns the dir, the child and the run (`--run`'s or the
/// default).
async fn start_exec(
    name: &str,
    flags: &[&str],
    script: impl Fn(&Scratch) -> String,
    drain: DrainBehavior,
) -> (Scratch, Supervised, String) {
    let dir = Scratch::new(name);
    let script = script(&dir);
    let mut args = vec!["exec"];
    args.extend_from_slice(flags);
    args.extend(["--", "sh", "-c", &script]);
    let mut s = start(&args).await;
    let run = match flags.iter().position(|&f| f == "--run") {
        Some(i) => flags[i + 1].to_owned(),
        None => default_run(&s),
    };
    expect_started(&mut s, &run, drain).await;
    (dir, s, run)
}

/// How exec mode answers every mail item.
const NO_MAIL: &str = "wfhost-child exec hosts a plain command and takes no mail";

#[tokio::test]
async fn handshake_ready_pings_while_running_and_shutdown_passes_the_status_on() {
    let (dir, mut s, run) = start_exec("shutdown", &[], stoppable, DrainBehavior::Cancel).await;
    let pid = dir.command_pid().await;
    for nonce in 1..=5 {
        s.ping(nonce).await;
    }
    assert!(alive(pid));
    s.send(Control::Shutdown).await;
    s.expect_run_end(&run, "command", Outcome::Failed("exit status 7".into()))
        .await;
    s.expect_eof().await;
    assert_eq!(s.exit_code().await, Some(7));
    assert!(dir.file("term").exists(), "the command got SIGTERM");
}

#[tokio::test]
async fn drain_with_cancel_behaviour_terminates_the_command() {
    let (dir, mut s, run) = start_exec(
        "drain-cancel",
        &["--drain", "cancel"],
        stoppable,
        DrainBehavior::Cancel,
    )
    .await;
    dir.command_pid().await;
    s.send(Control::Drain { budget_ms: 60_000 }).await;
    s.expect_run_end(&run, "command", Outcome::Cancelled).await;
    assert_eq!(s.next().await, Event::Drained);
    s.expect_eof().await;
    assert_eq!(s.exit_code().await, Some(7));
    assert!(dir.file("term").exists(), "the command got SIGTERM");
}

#[tokio::test]
async fn drain_with_wait_behaviour_is_drained_at_once_and_the_command_finishes() {
    let (dir, mut s, _) = start_exec(
        "drain-wait",
        &["--drain", "wait", "--run", "job-1"],
        until_go,
        DrainBehavior::Wait,
    )
    .await;
    let pid = dir.command_pid().await;
    s.send(Control::Drain { budget_ms: 60_000 }).await;
    assert_eq!(s.next().await, Event::Drained);
    s.ping(9).await;
    assert!(alive(pid), "a wait-behaviour command survives the drain");
    std::fs::write(dir.file("go"), b"").unwrap();
    s.expect_run_end("job-1", "command", Outcome::Succeeded)
        .await;
    s.expect_eof().await;
    assert_eq!(s.exit_code().await, Some(0));
}

#[tokio::test]
async fn a_signed_cancel_of_the_run_kills_the_command() {
    let (dir, mut s, run) = start_exec(
        "cancel",
        &["--drain", "wait"],
        stoppable,
        DrainBehavior::Wait,
    )
    .await;
    dir.command_pid().await;
    let cancel = s.signed_cancel(CancelOrigin::SupervisorDrain, Some(&run));
    s.send(cancel).await;
    s.expect_run_end(&run, "command", Outcome::Cancelled).await;
    s.expect_eof().await;
    assert_eq!(s.exit_code().await, Some(128 + libc::SIGKILL));
    assert!(!dir.file("term").exists(), "killed, not terminated");
}

#[tokio::test]
async fn a_signed_cancel_of_every_run_kills_the_command() {
    let (dir, mut s, run) = start_exec("cancel-all", &[], stoppable, DrainBehavior::Cancel).await;
    dir.command_pid().await;
    let cancel = s.signed_cancel(CancelOrigin::SupervisorDrain, None);
    s.send(cancel).await;
    s.expect_run_end(&run, "command", Outcome::Cancelled).await;
    assert_eq!(s.exit_code().await, Some(128 + libc::SIGKILL));
}

#[tokio::test]
async fn forged_or_misaddressed_cancels_are_refused_and_the_command_runs_on() {
    let (dir, mut s, run) = start_exec("refuse", &[], stoppable, DrainBehavior::Cancel).await;
    let pid = dir.command_pid().await;

    let other_key = key::generate().unwrap();
    let forged = cancel(
        CancelOrigin::SupervisorDrain,
        DEPLOYMENT,
        Some(&run),
        &other_key,
    );
    let elsewhere = cancel(
        CancelOrigin::SupervisorDrain,
        "payroll",
        Some(&run),
        s.key(),
    );
    let other_run = s.signed_cancel(CancelOrigin::SupervisorDrain, Some("exec-1"));
    for (nonce, cancel) in [forged, elsewhere, other_run].into_iter().enumerate() {
        s.send(cancel).await;
        // Handled in order: a RunTerminal would come before this Pong.
        s.ping(nonce as u64).await;
        assert!(alive(pid), "the command survives a refused cancel");
    }

    s.send(Control::Shutdown).await;
    s.expect_run_end(&run, "command", Outcome::Failed("exit status 7".into()))
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
    let (dir, mut s, _) = start_exec("eof", &[], stoppable, DrainBehavior::Cancel).await;
    dir.command_pid().await;
    s.hang_up();
    assert_eq!(s.exit_code().await, Some(7));
    assert!(dir.file("term").exists(), "the command got SIGTERM");
}

#[tokio::test]
async fn eof_kills_a_command_that_ignores_sigterm_after_the_grace_period() {
    let deaf = |dir: &Scratch| {
        format!(
            "trap '' TERM; echo $$ > {d}/pid; while :; do sleep 0.05; done",
            d = dir.path().display()
        )
    };
    let (dir, mut s, _) = start_exec("eof-kill", &[], deaf, DrainBehavior::Cancel).await;
    let pid = dir.command_pid().await;
    let closed_at = Instant::now();
    s.hang_up();
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
    let (dir, mut s, run) = start_exec("sigterm", &[], stoppable, DrainBehavior::Cancel).await;
    dir.command_pid().await;
    // SAFETY: plain kill(2) of the child we spawned.
    assert_eq!(unsafe { libc::kill(s.pid() as i32, libc::SIGTERM) }, 0);
    s.expect_run_end(&run, "command", Outcome::Failed("exit status 7".into()))
        .await;
    assert_eq!(s.exit_code().await, Some(7));
    assert!(dir.file("term").exists());
}

#[tokio::test]
async fn mail_is_acknowledged_as_failed_in_exec_mode() {
    let (dir, mut s, _) = start_exec("mail", &[], stoppable, DrainBehavior::Cancel).await;
    s.send_mail(42, b"hello").await;
    s.expect_ack(42, Outcome::Failed(NO_MAIL.into())).await;
    // The trap is set once the pid is written.
    dir.command_pid().await;
    s.send(Control::Shutdown).await;
    assert_eq!(s.exit_code().await, Some(7));
}

#[tokio::test]
async fn exec_never_holds_mail_so_a_drain_is_drained_at_once_and_later_mail_is_not_taken() {
    let (dir, mut s, _) = start_exec(
        "mail-drain",
        &["--drain", "wait", "--run", "job-1"],
        until_go,
        DrainBehavior::Wait,
    )
    .await;
    let no_mail = Outcome::Failed(NO_MAIL.into());
    s.send_mail(1, b"a").await;
    s.expect_ack(1, no_mail.clone()).await;
    s.send(Control::Drain { budget_ms: 60_000 }).await;
    assert_eq!(s.next().await, Event::Drained);
    // During the drain new mail is not taken (left for the next child) and
    // settled mail is acknowledged again.
    s.send_mail(2, b"b").await;
    s.send_mail(1, b"a").await;
    s.expect_ack(1, no_mail).await;
    s.ping(3).await;
    std::fs::write(dir.file("go"), b"").unwrap();
    s.expect_run_end("job-1", "command", Outcome::Succeeded)
        .await;
    s.expect_eof().await;
    assert_eq!(s.exit_code().await, Some(0));
    let stderr = s.stderr().await;
    assert!(stderr.contains("mail 2 arrived after Drain"), "{stderr}");
}

#[tokio::test]
async fn the_exit_status_of_a_failing_command_is_reported_and_passed_on() {
    let mut s = start(&["exec", "--run", "r", "--", "sh", "-c", "exit 3"]).await;
    expect_started(&mut s, "r", DrainBehavior::Cancel).await;
    s.expect_run_end("r", "command", Outcome::Failed("exit status 3".into()))
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
    assert_refuses_outside_wfhost(&["exec", "--", "true"]).await;
}

#[tokio::test]
async fn a_drain_stops_a_program_that_leaves_its_signal_mask_as_it_found_it() {
    // `sleep` installs no handler and touches no mask: SIGTERM reaches it
    // only if exec (which reads its own signals from a signalfd) did not
    // pass its blocked mask on.
    let mut s = start(&["exec", "--run", "r", "--", "sleep", "1000"]).await;
    expect_started(&mut s, "r", DrainBehavior::Cancel).await;
    s.send(Control::Drain { budget_ms: 60_000 }).await;
    s.expect_run_end("r", "command", Outcome::Cancelled).await;
    assert_eq!(s.next().await, Event::Drained);
    s.expect_eof().await;
    assert_eq!(s.exit_code().await, Some(128 + libc::SIGTERM));
}

#[tokio::test]
async fn sigint_to_wfhost_child_is_forwarded_to_the_command() {
    let mut s = start(&["exec", "--run", "r", "--", "sleep", "1000"]).await;
    expect_started(&mut s, "r", DrainBehavior::Cancel).await;
    // SAFETY: plain kill(2) of the child we spawned.
    assert_eq!(unsafe { libc::kill(s.pid() as i32, libc::SIGINT) }, 0);
    s.expect_run_end(
        "r",
        "command",
        Outcome::Failed("killed by signal SIGINT".into()),
    )
    .await;
    assert_eq!(s.exit_code().await, Some(128 + libc::SIGINT));
}

/// Protocol 3: exec still takes no mail; an item ends `MailDone` `Failed`
/// (never started, no result), and a cancel of one item is refused, as exec
/// holds none.
#[tokio::test]
async fn in_protocol_3_mail_is_done_failed_and_a_cancel_of_an_item_refused() {
    let dir = Scratch::new("mail-v3");
    let script = stoppable(&dir);
    let mut s = common::start_v3(&["exec", "--run", "r", "--", "sh", "-c", &script]).await;
    expect_started(&mut s, "r", DrainBehavior::Cancel).await;
    s.send_mail(42, b"hello").await;
    assert_eq!(
        s.next().await,
        Event::MailDone {
            id: 42,
            outcome: Outcome::Failed(NO_MAIL.into()),
            result: Vec::new()
        }
    );
    let cancel = SignedMailCancel::sign(
        MailCancelRequested {
            origin: CancelOrigin::Operator,
            deployment: common::DEPLOYMENT.into(),
            id: 42,
            reason: "test".into(),
            at_ms: 1,
        },
        &s.key().clone(),
    );
    s.send(Control::CancelMail(cancel)).await;
    assert_eq!(
        s.next().await,
        Event::MailCancelVerdict {
            id: 42,
            verdict: CancelVerdict::Refused(
                "cancel is for mail item 42, which this child does not hold".into()
            )
        }
    );
    s.send(Control::Answer {
        id: 42,
        key: "k".into(),
        value: b"1".to_vec(),
    })
    .await;
    s.ping(7).await;
    dir.command_pid().await;
    s.send(Control::Shutdown).await;
    assert_eq!(s.exit_code().await, Some(7));
}
