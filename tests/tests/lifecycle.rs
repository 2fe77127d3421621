//! A deployment's life as an operator sees it: spawn on the control channel,
//! handshake, crash restart with backoff, intensity limit, SIGKILL after
//! `kill_timeout`, protocol violations, hung children, and a supervisor that
//! dies or stops.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use wfhost_tests::{
    LONG, Supervisor, alive, children_of, deployment, exec, parent_of, signal, testchild, wait_for,
    wfhost,
};

#[test]
fn ready_child_is_ours_and_inherits_only_the_control_fd() {
    let sup = Supervisor::start(&deployment("fds", &testchild("well-behaved"), ""));
    let pid = sup.ready_pid("fds", LONG);
    assert_eq!(
        parent_of(pid),
        Some(sup.pid()),
        "the child's parent is the supervisor"
    );
    // The child printed its fds before opening any of its own.
    let log = wait_for("the child's fd report", LONG, || {
        let log = sup.log();
        log.contains("fds at start").then_some(log)
    });
    assert!(
        log.contains("wfh-testchild fds at start: 0,1,2,3"),
        "inherited fds:\n{log}"
    );
    // fd 3 is a socket; the log names the deployment on the child's lines.
    let fd3 = std::fs::read_link(format!("/proc/{pid}/fd/3")).expect("fd 3");
    assert!(
        fd3.to_string_lossy().starts_with("socket:"),
        "fd 3 is {fd3:?}"
    );
    let d = sup.deployment("fds");
    assert_eq!(d["channel_id"].as_str().map(str::len), Some(32));
    assert_eq!(d["restarts"], 0);
}

#[test]
fn killed_child_is_replaced_at_once_then_with_growing_backoff_until_failed() {
    let body = deployment("steady", &testchild("well-behaved"), "")
        + &deployment(
            "crashy",
            &exec("sleep 0.2; exit 3"),
            "restart = { backoff_initial = \"100ms\", backoff_max = \"10s\", max_restarts = 4, period = \"60s\" }",
        );
    let sup = Supervisor::start(&body);
    let steady = sup.ready_pid("steady", LONG);

    let failed = sup.wait_deployment("crashy", "failed", LONG, |d| d["state"] == "failed");
    assert_eq!(failed["restarts"], 4, "{failed}");
    assert!(
        failed["last_exit"]
            .as_str()
            .unwrap_or("")
            .contains("exit status 3"),
        "{failed}"
    );
    sup.wait_log("too many restarts");

    // The restart delays grew across the streak.
    let delays: Vec<u64> = sup
        .journal()
        .iter()
        .filter(|r| r["kind"] == "restarting" && r["deployment"] == "crashy")
        .map(|r| r["body"]["delay_ms"].as_u64().expect("delay_ms"))
        .collect();
    assert_eq!(delays.len(), 4, "{delays:?}");
    assert!(
        delays.windows(2).all(|w| w[1] > w[0]),
        "delays grow: {delays:?}"
    );
    assert_eq!(delays[0], 0, "the first restart is immediate: {delays:?}");

    // The other deployment was never disturbed.
    let d = sup.deployment("steady");
    assert_eq!(
        (d["state"].as_str(), d["pid"].as_u64()),
        (Some("ready"), Some(u64::from(steady)))
    );

    // SIGKILL of a healthy child: a new pid becomes ready, restarts grows.
    signal(steady, Signal::SIGKILL);
    let d = sup.wait_deployment("steady", "a new ready child", LONG, |d| {
        d["state"] == "ready" && d["pid"].as_u64().is_some_and(|p| p != u64::from(steady))
    });
    assert_eq!(d["restarts"], 1, "{d}");
    assert!(
        d["last_exit"].as_str().unwrap_or("").contains("SIGKILL"),
        "{d}"
    );
}

#[test]
fn child_ignoring_sigterm_is_killed_after_kill_timeout_and_nothing_remains() {
    let body = deployment(
        "stubborn",
        &testchild("ignore-term"),
        // It ignores Drain too: the stop waits drain_deadline, then SIGTERM,
        // then SIGKILL after kill_timeout.
        "kill_timeout = \"1s\"\ndrain_timeout = \"200ms\"\ndrain_deadline = \"200ms\"",
    ) + &deployment("hosted", &exec("sleep 1000"), "");
    let mut sup = Supervisor::start(&body);
    let stubborn = sup.ready_pid("stubborn", LONG);
    let hosted = sup.ready_pid("hosted", LONG);
    let command = wait_for("the hosted command", LONG, || {
        children_of(hosted).first().copied()
    });

    let asked = Instant::now();
    sup.signal(Signal::SIGTERM);
    let status = sup.wait_exit(LONG);
    let took = asked.elapsed();
    assert!(
        status.success(),
        "graceful stop exits 0: {status:?}\n{}",
        sup.log()
    );
    assert!(
        took >= Duration::from_secs(1),
        "SIGKILL came only after kill_timeout: {took:?}"
    );
    assert!(
        sup.log().contains("sending SIGKILL"),
        "the escalation is logged:\n{}",
        sup.log()
    );
    for pid in [stubborn, hosted, command] {
        assert!(!alive(pid), "pid {pid} outlived the supervisor");
    }
    assert!(
        children_of(sup.pid()).is_empty(),
        "no zombie of the supervisor remains"
    );
}

#[test]
fn misbehaving_children_are_killed_and_reported_while_others_keep_serving() {
    let fast =
        "ready_timeout = \"1s\"\nrestart = { backoff_initial = \"200ms\", max_restarts = 100 }";
    let body = deployment("good", &testchild("well-behaved"), "")
        + &deployment("garbage", &testchild("garbage"), fast)
        + &deployment("stranger", &testchild("wrong-channel"), fast)
        + &deployment("silent", &testchild("no-ready"), fast)
        + &deployment("old", &testchild("protocol-1"), fast);
    let sup = Supervisor::start(&body);
    let good = sup.ready_pid("good", LONG);
    for (id, reason) in [
        ("garbage", "undecodable frame body"),
        ("stranger", "wrong channel id"),
        ("silent", "no Ready within ready_timeout"),
        (
            "old",
            "the child speaks protocol 1, this supervisor speaks 2",
        ),
    ] {
        let d = sup.wait_deployment(id, "a restart after misbehaving", LONG, |d| {
            d["restarts"].as_u64().unwrap_or(0) >= 1 && d["last_exit"].is_string()
        });
        let last = d["last_exit"].as_str().unwrap_or("");
        assert!(last.contains(reason), "{id}: {last}");
        // Each of these wrote on fd 3 (a Hello, or a frame): the advice to
        // wrap a plain program is for children that never did.
        assert!(!last.contains("never sent a Hello"), "{id}: {last}");
        assert_ne!(d["last_exit_brief"], "not a wfhost child", "{id}: {d}");
        let log = sup.log();
        assert!(
            log.lines().any(|l| l.contains(reason) && l.contains(id)),
            "{id} reason logged:\n{log}"
        );
    }
    let d = sup.deployment("good");
    assert_eq!(
        (d["state"].as_str(), d["pid"].as_u64()),
        (Some("ready"), Some(u64::from(good)))
    );
}

#[test]
fn stopped_child_is_detected_as_hung_and_restarted() {
    let body = deployment(
        "sleepy",
        &testchild("well-behaved"),
        "liveness_interval = \"100ms\"\nliveness_timeout = \"1s\"",
    );
    let sup = Supervisor::start(&body);
    let pid = sup.ready_pid("sleepy", LONG);
    signal(pid, Signal::SIGSTOP);
    let d = sup.wait_deployment("sleepy", "a replacement after hanging", LONG, |d| {
        d["state"] == "ready" && d["pid"].as_u64().is_some_and(|p| p != u64::from(pid))
    });
    assert!(
        d["last_exit"].as_str().unwrap_or("").contains("hung"),
        "{d}"
    );
    assert!(!alive(pid), "the hung child was killed");
}

#[test]
fn killed_supervisor_takes_its_children_and_a_successor_cleans_up_and_restarts() {
    let body = deployment("plain", &testchild("well-behaved"), "")
        + &deployment("survivor", &testchild("outlive"), "");
    let sup = Supervisor::start(&body);
    let plain = sup.ready_pid("plain", LONG);
    let survivor = sup.ready_pid("survivor", LONG);
    let sup_log = sup.log();
    sup.signal(Signal::SIGKILL);
    wait_for("the plain child to die with its supervisor", LONG, || {
        (!alive(plain)).then_some(())
    });
    assert!(
        alive(survivor),
        "the survivor cleared its death signal and lives on:\n{}",
        sup_log
    );

    let (dir, config) = sup.into_parts();
    let next = Supervisor::start_in(dir, config);
    wait_for("the successor to kill the survivor", LONG, || {
        (!alive(survivor)).then_some(())
    });
    assert!(
        next.log().contains("left behind by a previous supervisor"),
        "{}",
        next.log()
    );
    let new_plain = next.ready_pid("plain", LONG);
    let new_survivor = next.ready_pid("survivor", LONG);
    assert!(new_plain != plain && new_survivor != survivor);
}

#[test]
fn operator_can_force_sigkill_of_a_stopping_child() {
    let body = deployment(
        "stubborn",
        &testchild("ignore-term"),
        "kill_timeout = \"1h\"\ndrain_timeout = \"200ms\"\ndrain_deadline = \"200ms\"",
    );
    let mut sup = Supervisor::start(&body);
    let pid = sup.ready_pid("stubborn", LONG);
    sup.signal(Signal::SIGTERM);
    sup.wait_deployment("stubborn", "stopping", LONG, |d| d["state"] == "stopping");
    let out = sup.client(&["kill", "stubborn"]);
    assert!(
        out.status.success(),
        "kill: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = sup.wait_exit(LONG);
    assert!(status.success(), "{status:?}");
    assert!(!alive(pid));
}

#[test]
fn client_commands_against_no_supervisor_exit_3_naming_the_socket() {
    let dir = wfhost_tests::TempDir::new();
    let socket = dir.join("nobody-home.sock");
    let out = wfhost(&["status", "--socket", socket.to_str().expect("utf-8")]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nobody-home.sock"));
}

#[test]
fn a_second_supervisor_on_the_same_state_dir_refuses_and_touches_nothing() {
    let sup = Supervisor::start(&deployment("only", &testchild("well-behaved"), ""));
    let pid = sup.ready_pid("only", LONG);
    let config = sup.config().to_str().expect("utf-8 path").to_owned();
    let out = wfhost(&["supervise", "--config", &config]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("pid {}", sup.pid())),
        "names the holder: {stderr}"
    );
    let d = sup.deployment("only");
    assert_eq!(
        d["pid"].as_u64(),
        Some(u64::from(pid)),
        "the first supervisor's child is untouched"
    );
    assert!(alive(pid));
}
