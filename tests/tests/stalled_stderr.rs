//! A supervisor whose stderr nobody reads (journald under pressure, a
//! terminal paused with Ctrl-S, a pipe its parent forgot): its log lines
//! wait in a bounded queue and the overflow is counted, so the
//! deployments keep taking mail and the control socket keeps answering.
//! Before, a full pipe blocked the one runtime thread on its next log
//! line, and everything froze with it.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wfhost_tests::{LONG, TempDir, bin, deployment, exec, testchild, wait_for, write_config};

/// Runs `wfhost ARGS --config CONFIG`, killed after `within`: its exit
/// code and how long it took, or `None` if it did not finish.
fn client_within(
    config: &std::path::Path,
    args: &[&str],
    within: Duration,
) -> Option<(i32, Duration)> {
    let t = Instant::now();
    let mut child = Command::new(bin("wfhost"))
        .args(args)
        .arg("--config")
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the wfhost CLI");
    while t.elapsed() < within {
        if let Ok(Some(status)) = child.try_wait() {
            return Some((status.code().unwrap_or(-1), t.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_stderr_nobody_reads_freezes_nothing_and_the_lines_left_out_are_counted() {
    let dir = TempDir::new();
    let config = dir.join("wfhost.toml");
    // A child writing ten lines every millisecond or so (a shell forking
    // `sleep` manages a few hundred loops a second on a busy machine): the
    // log gets the 500 of its lines a second it lets through, far more
    // than a 64 KiB pipe and the 4,096-line queue hold for the test's 10 s.
    let loud = exec(
        "while :; do for i in 0 1 2 3 4 5 6 7 8 9; do echo chatter chatter chatter chatter; done; sleep 0.001; done",
    );
    write_config(
        &config,
        &dir.join("state"),
        &format!(
            "{}{}",
            deployment("loud", &loud, ""),
            deployment("neighbour", &testchild("well-behaved"), ""),
        ),
    );
    let mut sup = Killed(
        Command::new(bin("wfhost"))
            .args(["supervise", "--config"])
            .arg(&config)
            .env("RUST_LOG", "debug")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn wfhost supervise"),
    );
    let socket = dir.join("state/wfhost.sock");
    wait_for("the control socket", LONG, || {
        std::os::unix::net::UnixStream::connect(&socket).ok()
    });
    // Nobody reads the pipe for 12 s: it fills within the first second or
    // two, and from then on every log line would block.
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut rounds = 0;
    while started.elapsed() < Duration::from_secs(12) {
        for args in [
            &["send", "neighbour", "ping"][..],
            &["status", "--json"][..],
        ] {
            let answered = client_within(&config, args, Duration::from_secs(10));
            let Some((code, took)) = answered else {
                panic!(
                    "`wfhost {}` got no answer within 10 s while stderr was not read",
                    args.join(" ")
                );
            };
            assert_eq!(code, 0, "`wfhost {}` exited {code}", args.join(" "));
            slowest = slowest.max(took);
        }
        rounds += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!("{rounds} sends and statuses with stderr unread; slowest {slowest:?}");
    // Every send was delivered and done while the log was stuck.
    wait_for("the neighbour's mail done", LONG, || {
        let out = Command::new(bin("wfhost"))
            .args(["status", "--json", "--config"])
            .arg(&config)
            .output()
            .ok()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let d = v["deployments"]
            .as_array()?
            .iter()
            .find(|d| d["id"] == "neighbour")?;
        (d["mail"]["done"].as_u64() == Some(rounds)).then_some(())
    });
    // Reading again: the gap is said, and a graceful stop still ends with
    // its last line on stderr.
    let mut stderr = sup.0.stderr.take().expect("the stderr pipe");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    std::thread::sleep(Duration::from_millis(500));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(sup.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM the supervisor");
    let status = sup.0.wait().expect("wait for the supervisor");
    let text = reader.join().expect("the reader thread");
    assert!(status.success(), "the supervisor exited {status}");
    assert!(
        text.contains("log lines left out here: stderr was not being read fast enough"),
        "no count of the lines left out in:\n{}",
        text.lines().rev().take(20).collect::<Vec<_>>().join("\n")
    );
    assert!(
        text.lines().rev().take(5).any(|l| l.contains("exiting")),
        "the last lines of a stop reached stderr:\n{}",
        text.lines().rev().take(5).collect::<Vec<_>>().join("\n")
    );
}
