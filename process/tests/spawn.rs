//! Children started with their channel at fd 3: what they inherit (fds,
//! environment, limits, process group) and what happens when the thread
//! that forked them ends.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wfhost_process::{
    ChildSetup, ChildSpec, Spawned, Spawner, raise_nofile_limit, spawn_with_channel,
};

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

fn spec(program: &str, args: &[&str]) -> ChildSpec {
    let mut spec = ChildSpec::new(program, args.iter().map(OsString::from));
    spec.env = vec![("PATH".into(), PATH.into())];
    spec
}

async fn output(mut spawned: Spawned) -> (String, std::process::ExitStatus) {
    let mut out = String::new();
    if let Some(mut stdout) = spawned.stdout.take() {
        stdout.read_to_string(&mut out).await.expect("stdout");
    }
    let status = tokio::time::timeout(Duration::from_secs(10), spawned.child.wait())
        .await
        .expect("child exits")
        .expect("wait");
    (out, status)
}

/// An fd open without close-on-exec in this process, which no child may
/// inherit.
fn leaky_fd() -> std::os::fd::OwnedFd {
    // SAFETY: dup returns a new fd we then own (checked below).
    let fd = unsafe { libc::dup(1) };
    assert!(fd > 2, "dup: {}", std::io::Error::last_os_error());
    // SAFETY: `fd` is open and owned by nobody else.
    unsafe { std::os::fd::FromRawFd::from_raw_fd(fd) }
}

/// The fd numbers in an `ls -l /proc/self/fd` listing, with their targets.
fn fds(listing: &str) -> Vec<(u32, String)> {
    listing
        .lines()
        .filter_map(|line| {
            let (name, target) = line.split_once(" -> ")?;
            let fd = name.split_whitespace().last()?.parse().ok()?;
            Some((fd, target.to_owned()))
        })
        .collect()
}

#[tokio::test]
async fn the_channel_is_at_fd_3_and_nothing_else_is_inherited() {
    let leak = leaky_fd();
    let spawned = spawn_with_channel(&spec("/bin/ls", &["-l", "/proc/self/fd"])).expect("spawn");
    let (out, status) = output(spawned).await;
    drop(leak);
    assert!(status.success(), "{status:?}\n{out}");
    let fds = fds(&out);
    let numbers: Vec<u32> = fds.iter().map(|(fd, _)| *fd).collect();
    // 0–2, the channel, and the directory ls reads.
    assert_eq!(numbers, [0, 1, 2, 3, 4], "{out}");
    assert_eq!(fds[0].1, "/dev/null");
    assert!(fds[3].1.starts_with("socket:"), "{out}");
    assert!(fds[4].1.starts_with("/proc/"), "{out}");
}

#[tokio::test]
async fn the_channel_carries_bytes_both_ways_and_ends_when_the_child_exits() {
    let mut spawned = spawn_with_channel(&spec(
        "/bin/sh",
        &["-c", "printf hello >&3; head -c 4 <&3 >&2"],
    ))
    .expect("spawn");
    let mut got = [0u8; 5];
    spawned.control.read_exact(&mut got).await.expect("read");
    assert_eq!(&got, b"hello");
    spawned.control.write_all(b"ping").await.expect("write");
    let mut err = String::new();
    let mut stderr = spawned.stderr.take().expect("stderr");
    stderr.read_to_string(&mut err).await.expect("stderr");
    assert_eq!(err, "ping");
    let mut rest = Vec::new();
    let n = tokio::time::timeout(
        Duration::from_secs(10),
        spawned.control.read_to_end(&mut rest),
    )
    .await
    .expect("end of stream once the child is gone")
    .expect("read");
    assert_eq!(n, 0, "this side holds no copy of the child's end");
    assert!(spawned.child.wait().await.expect("wait").success());
}

#[tokio::test]
async fn the_environment_is_exactly_the_one_given() {
    let mut s = spec("env", &[]);
    s.env.push(("WFHOST_TEST".into(), "1".into()));
    let (out, status) = output(spawn_with_channel(&s).expect("spawn")).await;
    assert!(status.success());
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, [format!("PATH={PATH}").as_str(), "WFHOST_TEST=1"]);
}

#[tokio::test]
async fn a_missing_program_is_an_error_not_a_child() {
    let err = spawn_with_channel(&spec("wfhost-no-such-program", &[])).expect_err("no child");
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
}

#[tokio::test]
async fn children_start_at_the_usual_fd_limit_whatever_the_parent_raised() {
    let raised = raise_nofile_limit().expect("raise");
    let (out, status) =
        output(spawn_with_channel(&spec("/bin/sh", &["-c", "ulimit -n"])).expect("spawn")).await;
    assert!(status.success());
    let expected = raised.min(1024);
    assert_eq!(out.trim(), expected.to_string());
}

#[tokio::test]
async fn each_child_leads_its_own_process_group() {
    let mut spawned = spawn_with_channel(&spec("sleep", &["5"])).expect("spawn");
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", spawned.pid)).expect("stat");
    let after_comm = &stat[stat.rfind(')').expect("comm") + 1..];
    // Field 5 (pgrp) is the third after the command name.
    let pgrp: u32 = after_comm
        .split_whitespace()
        .nth(2)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(pgrp, spawned.pid);
    wfhost_process::kill_tree(spawned.pid);
    spawned.child.wait().await.expect("wait");
}

#[tokio::test]
async fn the_spawner_thread_forks_children_that_outlive_the_calling_task() {
    let spawner = Spawner::start(tokio::runtime::Handle::current()).expect("spawner");
    let spawned = tokio::spawn({
        let spawner = spawner.clone();
        async move {
            spawner
                .spawn(spec("/bin/sh", &["-c", "sleep 0.3; echo alive"]))
                .await
        }
    })
    .await
    .expect("task")
    .expect("spawn");
    let (out, status) = output(spawned).await;
    assert!(status.success());
    assert_eq!(out.trim(), "alive");
}

/// PR_SET_PDEATHSIG fires when the forking thread ends: the reason every
/// long-lived child is forked from a thread that lives as long as its
/// parent.
#[test]
fn a_child_dies_with_the_thread_that_forked_it() {
    let mut child = std::thread::spawn(|| {
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("30");
        ChildSetup::new().expect("setup").install(&mut cmd);
        cmd.spawn().expect("spawn")
    })
    .join()
    .expect("thread");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "the child outlived its thread");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.signal(), Some(libc::SIGKILL));
}

#[test]
fn a_setup_without_channel_marks_every_fd_above_2_close_on_exec() {
    let leak = leaky_fd();
    let mut cmd = std::process::Command::new("/bin/ls");
    cmd.args(["-l", "/proc/self/fd"])
        .stdout(std::process::Stdio::piped());
    ChildSetup::new().expect("setup").install(&mut cmd);
    let mut child = cmd.spawn().expect("spawn");
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut out)
        .expect("read");
    assert!(child.wait().expect("wait").success());
    drop(leak);
    let numbers: Vec<u32> = fds(&out).iter().map(|(fd, _)| *fd).collect();
    // 0–2 and the directory ls reads.
    assert_eq!(numbers, [0, 1, 2, 3], "{out}");
}
