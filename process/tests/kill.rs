//! Signalling groups and killing whole trees of real processes.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use wfhost_process::{ChildSetup, Signal, descendants, kill_tree, signal_group};

/// Whether `pid` is gone or a zombie (reaped by nobody yet).
fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

fn poll(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn start(script: &str) -> std::process::Child {
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args([OsString::from("-c"), script.into()]);
    ChildSetup::new().expect("setup").install(&mut cmd);
    cmd.spawn().expect("spawn")
}

#[test]
fn kill_tree_kills_the_group_and_descendants_that_left_it() {
    // One sleep in the group, one in a session (and group) of its own.
    let mut sh = start("setsid sleep 60 & sleep 60 & wait");
    let pid = sh.id();
    let mut found = Vec::new();
    poll("both sleeps", || {
        found = descendants(pid);
        found.len() == 2
    });
    assert_eq!(kill_tree(pid), 2);
    let status = sh.wait().expect("wait");
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    for d in found {
        poll("a descendant to die", || dead(d));
    }
}

#[test]
fn descendants_lists_parents_before_children() {
    let mut sh = start("sh -c 'sleep 60 & wait' & wait");
    let pid = sh.id();
    let mut found = Vec::new();
    poll("the nested sleep", || {
        found = descendants(pid);
        found.len() == 2
    });
    let inner = std::fs::read_to_string(format!("/proc/{}/stat", found[1])).expect("stat");
    let ppid: u32 = inner[inner.rfind(')').unwrap() + 1..]
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(ppid, found[0], "{found:?}");
    kill_tree(pid);
    sh.wait().expect("wait");
}

#[test]
fn signal_group_reaches_the_group_and_reports_one_that_is_gone() {
    let mut sh = start("sleep 60 & wait");
    let pid = sh.id();
    assert!(signal_group(pid, Signal::SIGTERM).expect("signal"));
    let status = sh.wait().expect("wait");
    assert_eq!(status.signal(), Some(libc::SIGTERM));
    poll("the group to empty", || {
        !signal_group(pid, Signal::SIGKILL).expect("signal")
    });
}

#[test]
fn signal_group_refuses_our_own_group_and_init() {
    for pgid in [0, 1, u32::MAX] {
        let err = signal_group(pgid, Signal::SIGTERM).expect_err("refused");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains(&pgid.to_string()), "{err}");
    }
    assert_eq!(kill_tree(0), 0);
}
