//! Containment of real processes: a cgroup a child enters before its
//! program runs and that `kill` empties whatever forked inside it; a
//! subreaper that adopts what escaped the process group and reaps it by
//! pid; rlimits set before exec. Each test runs in a process of its own
//! (cargo-nextest), so becoming a subreaper here changes no other test.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use wfhost_process::{
    Cgroup, ChildSetup, Rlimits, become_subreaper, is_subreaper, is_zombie, kill_tree, origin_of,
    own_children, try_reap,
};

fn poll(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether `pid` is gone or a zombie.
fn dead(pid: u32) -> bool {
    is_zombie(pid) || !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn sh(script: &str, setup: ChildSetup) -> std::process::Child {
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.args([OsString::from("-c"), script.into()]);
    setup.install(&mut cmd);
    cmd.spawn().expect("spawn sh")
}

/// A fresh cgroup below this process's own one, removed on drop; `None`
/// (after saying why) where none can be made.
struct TestCgroup(Cgroup);

impl TestCgroup {
    fn new(test: &str) -> Option<Self> {
        let made = wfhost_process::own_cgroup()
            .and_then(|own| own.create_child(&format!("wfh-ptest-{}", std::process::id())));
        match made {
            Ok(cg) => Some(Self(cg)),
            Err(e) => {
                println!("SKIPPED {test}: no writable cgroup v2 hierarchy here ({e})");
                None
            }
        }
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.0.remove().is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

#[test]
fn a_child_starts_in_its_cgroup_and_kill_empties_it_however_it_forked() {
    let Some(cg) = TestCgroup::new("a_child_starts_in_its_cgroup") else {
        return;
    };
    let procs: File = cg.0.procs_for_spawn().expect("open cgroup.procs");
    let setup = ChildSetup::new().expect("setup").cgroup(procs.as_raw_fd());
    // A daemon that double-forks into a session of its own.
    let mut child = sh("( setsid sleep 600 & ) ; sleep 600", setup);
    drop(procs);
    poll("the child and its daemon in the cgroup", || {
        cg.0.pids().is_ok_and(|p| p.len() == 3)
    });
    let members = cg.0.pids().expect("pids");
    assert!(members.contains(&child.id()), "{members:?}");
    assert!(cg.0.populated().expect("events"));
    assert!(cg.0.kill().expect("kill") >= 2);
    child.wait().expect("reap");
    poll("every member to die", || members.iter().all(|&p| dead(p)));
    poll("the cgroup to be empty", || {
        cg.0.populated().is_ok_and(|p| !p)
    });
}

#[test]
fn a_subreaper_adopts_what_escapes_and_reaps_it_by_pid() {
    become_subreaper().expect("PR_SET_CHILD_SUBREAPER");
    assert!(is_subreaper());
    let mut setup_env = std::process::Command::new("/bin/sh");
    setup_env
        .args(["-c", "( setsid sleep 600 & ) ; exit 0"])
        .env(
            wfhost_process::ENV_ORIGIN,
            "0123456789abcdef0123456789abcdef",
        );
    ChildSetup::new().expect("setup").install(&mut setup_env);
    let mut sh = setup_env.spawn().expect("spawn");
    let sh_pid = sh.id();
    sh.wait().expect("reap sh");
    // The daemon's parents are gone: it is ours now. (The subshell that
    // forked it may be adopted too if sh exits first: reaped here, it is
    // not what this test looks for.)
    let mut adopted = Vec::new();
    // A subshell adopted on its way out has no environment left to read:
    // wait until it is reaped and the one left is the daemon.
    poll("the daemon to be adopted", || {
        adopted = own_children();
        adopted.retain(|&p| p != sh_pid && !try_reap(p));
        adopted.len() == 1 && origin_of(adopted[0]).is_some()
    });
    let daemon = adopted[0];
    assert_eq!(
        origin_of(daemon).as_deref(),
        Some("0123456789abcdef0123456789abcdef"),
        "it carries its origin"
    );
    assert!(!try_reap(daemon), "alive: nothing to reap");
    kill_tree(daemon);
    poll("the daemon to be reaped", || try_reap(daemon));
    assert!(!own_children().contains(&daemon));
}

#[test]
fn rlimits_are_set_before_the_program_runs() {
    let (limits, capped) = Rlimits {
        nofile: Some(200),
        core: Some(0),
        address_space: Some(1 << 31),
    }
    .fitted()
    .expect("fitted");
    assert!(capped.is_empty(), "{capped:?}");
    let out_path = PathBuf::from(format!("/tmp/wfh-rlimits-{}", std::process::id()));
    let setup = ChildSetup::new().expect("setup").rlimits(limits);
    let mut child = sh(
        &format!("cat /proc/self/limits > {}", out_path.display()),
        setup,
    );
    assert!(child.wait().expect("wait").success());
    let text = std::fs::read_to_string(&out_path).expect("limits");
    let _ = std::fs::remove_file(&out_path);
    let row = |name: &str| -> Vec<String> {
        text.lines()
            .find(|l| l.starts_with(name))
            .map(|l| {
                l[name.len()..]
                    .split_whitespace()
                    .take(2)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(row("Max open files"), ["200", "200"], "{text}");
    assert_eq!(row("Max core file size"), ["0", "0"], "{text}");
    assert_eq!(
        row("Max address space"),
        ["2147483648", "2147483648"],
        "{text}"
    );
}

#[test]
fn the_program_starts_with_no_signal_blocked_whatever_its_parent_blocks() {
    // SAFETY: plain sigset manipulation of this test's own thread (each
    // test is a process of its own).
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        assert_eq!(
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()),
            0
        );
    }
    let out_path = PathBuf::from(format!("/tmp/wfh-sigmask-{}", std::process::id()));
    let setup = ChildSetup::new().expect("setup");
    let mut child = sh(
        &format!("grep SigBlk /proc/self/status > {}", out_path.display()),
        setup,
    );
    assert!(child.wait().expect("wait").success());
    let text = std::fs::read_to_string(&out_path).expect("status");
    let _ = std::fs::remove_file(&out_path);
    assert_eq!(text.trim(), "SigBlk:\t0000000000000000", "{text}");
}
