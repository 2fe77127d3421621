//! The commands an operator waits on and the ones that replace signals:
//! `status DEP` for one deployment in detail, `reload` with its outcome,
//! `stop` and `stop --wait`, `drain --wait`, `resume` waiting for Ready,
//! progress lines while they wait, the supervisor's own drain progress in
//! its log, and exits a stop causes read as what they are.

use nix::sys::signal::Signal;
use wfhost_tests::{
    LONG, Supervisor, alive, bin_dir, demo, deployment, exec, exec_with, ok, stderr, stdout,
};

/// The demo workflow whose `approve` (a wait step) takes `approve_ms`.
fn approvals(approve_ms: &str) -> String {
    demo(&["--step-ms", "50", "--approve-ms", approve_ms])
}

#[test]
fn status_of_one_deployment_says_why_it_is_in_its_state() {
    let sup = Supervisor::start(&format!(
        "{}{}",
        deployment("orders", &approvals("50"), "drain_timeout = \"3s\""),
        deployment(
            "broken",
            &exec("exit 3"),
            "restart = { backoff_initial = \"50ms\", max_restarts = 1, period = \"60s\" }"
        ),
    ));
    let pid = sup.ready_pid("orders", LONG);
    ok("send", &sup.client(&["send", "orders", "hello"]));
    sup.wait_deployment("orders", "the mail done", LONG, |d| d["mail"]["done"] == 1);
    let text = ok("status orders", &sup.client(&["status", "orders"]));
    for line in [
        "deployment   orders\n".to_owned(),
        format!("why          its child (pid {pid}) is ready and takes mail\n"),
        "runs         wfhost-child-rust/".to_owned(),
        "drain        none under way; budget 3s (drain_timeout)\n".to_owned(),
        "mail         0 waiting, 0 in its child (0 being worked on, 0 sent ahead, not started), 1 done, 0 dead\n"
            .to_owned(),
        "last exit    none yet\n".to_owned(),
    ] {
        assert!(text.contains(&line), "missing {line:?} in\n{text}");
    }
    sup.wait_deployment("broken", "failed", LONG, |d| d["state"] == "failed");
    let text = ok("status broken", &sup.client(&["status", "broken"]));
    assert!(
        text.contains("why          too many restarts within the period; last: exited unexpectedly: exit status 3; `wfhost resume broken` starts a fresh child"),
        "{text}"
    );
    assert!(text.contains("restarts     1\n"), "{text}");
    // The JSON of one deployment is its status object.
    let json = ok(
        "status --json",
        &sup.client(&["status", "orders", "--json"]),
    );
    let d: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(d["id"], "orders");
    assert!(
        d["why"].as_str().is_some_and(|w| w.contains("ready")),
        "{d}"
    );
    assert!(d["since_ms"].is_u64(), "{d}");
    // An unknown one is refused, naming the known ones.
    let out = sup.client(&["status", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("known deployments: broken, orders"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_wait_step_outlasts_the_drain_with_the_budget_paused_and_drain_wait_shows_it() {
    let sup = Supervisor::start(&deployment(
        "orders",
        &approvals("2500"),
        "drain_timeout = \"1s\"",
    ));
    let pid = sup.ready_pid("orders", LONG);
    ok("send", &sup.client(&["send", "orders", "approve me"]));
    sup.wait_deployment("orders", "approve in flight", LONG, |d| {
        d["steps"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["step"] == "approve"))
    });
    let out = sup.client(&["drain", "orders", "--wait"]);
    let text = ok("drain --wait", &out);
    assert!(
        text.starts_with(&format!("draining orders (pid {pid}) under a 1s budget")),
        "{text}"
    );
    assert!(text.contains("orders is drained after"), "{text}");
    assert!(text.contains("(its child's end: drained)"), "{text}");
    // Progress went to stderr as plain lines (not a terminal here).
    let progress = stderr(&out);
    assert!(
        progress.contains(
            "orders: draining: budget 0.0s used, 1.0s left, paused; steps: approve (wait)"
        ),
        "{progress}"
    );
    assert!(
        !progress.contains('\r') && !progress.contains('\u{1b}'),
        "{progress:?}"
    );
    // The wait step ran past the 1 s budget without using any of it.
    let d = sup.deployment("orders");
    assert_eq!(d["state"], "drained", "{d}");
    assert_eq!(d["drain"]["used_ms"], 0, "{d}");
    assert_eq!(d["drain"]["escalated"], false, "{d}");
    assert!(!alive(pid));

    // Resume waits for the new child to be ready.
    let text = ok("resume", &sup.client(&["resume", "orders"]));
    let new = sup.deployment("orders")["pid"].as_u64().expect("a new pid");
    assert!(
        text.ends_with(&format!("orders is ready: pid {new}\n")),
        "{text}"
    );
}

#[test]
fn recycle_shows_its_stages_while_it_waits() {
    let sup = Supervisor::start(&deployment(
        "orders",
        &approvals("1500"),
        "drain_timeout = \"5s\"",
    ));
    let old = sup.ready_pid("orders", LONG);
    ok("send", &sup.client(&["send", "orders", "x"]));
    sup.wait_deployment("orders", "approve in flight", LONG, |d| {
        d["steps"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["step"] == "approve"))
    });
    let out = sup.client(&["recycle", "orders", "--reason", "new build"]);
    let text = ok("recycle", &out);
    let new = sup.ready_pid("orders", LONG);
    assert_eq!(text, format!("recycled orders: pid {old} -> {new}\n"));
    let progress = stderr(&out);
    assert!(
        progress.contains(
            "recycling orders: draining: budget 0.0s used, 5.0s left, paused; steps: approve (wait)"
        ),
        "{progress}"
    );
}

#[test]
fn reload_says_what_it_started_stopped_and_recycled_or_why_it_refused() {
    let sup = Supervisor::start(&format!(
        "{}{}",
        deployment("keep", &exec("sleep 1000"), ""),
        deployment("gone", &exec("sleep 1000"), ""),
    ));
    sup.ready_pid("keep", LONG);
    sup.ready_pid("gone", LONG);
    let good = std::fs::read_to_string(sup.config()).expect("config");
    let bin = bin_dir().display().to_string();
    let next = good.replace("id = \"gone\"", "id = \"fresh\"")
        + &deployment("changed", &exec("sleep 1000"), "").replace("{bin}", &bin);
    std::fs::write(sup.config(), &next).expect("config");
    let text = ok("reload", &sup.client(&["reload"]));
    assert!(text.starts_with("reloaded "), "{text}");
    assert!(text.contains("  started: fresh, changed\n"), "{text}");
    assert!(
        text.contains("  stopped (drained under its budget): gone\n"),
        "{text}"
    );
    assert!(text.contains("  unchanged: keep\n"), "{text}");
    sup.ready_pid("fresh", LONG);
    // A changed deployment is recycled onto its settings.
    let keep = sup.ready_pid("keep", LONG);
    std::fs::write(sup.config(), next.replacen("sleep 1000", "sleep 999", 1)).expect("config");
    let text = ok("reload", &sup.client(&["reload"]));
    assert!(
        text.contains("  recycled onto its new settings: keep\n"),
        "{text}"
    );
    sup.wait_deployment("keep", "recycled", LONG, |d| {
        d["state"] == "ready" && d["pid"].as_u64() != Some(u64::from(keep))
    });
    let text = ok("reload", &sup.client(&["reload"]));
    assert!(text.contains("nothing to do"), "{text}");

    // A broken file is refused with its problem; the running config stays.
    let head = next
        .split("[[deployment]]")
        .next()
        .unwrap_or_default()
        .to_owned();
    let lines = head.lines().count();
    std::fs::write(sup.config(), head + "[[deployment]]\nid = \"x\"\n").expect("config");
    let socket = sup.dir().join("state/wfhost.sock");
    let out = wfhost_tests::wfhost(&["reload", "--socket", socket.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("the new config is refused and the running one kept"),
        "{err}"
    );
    assert!(
        err.contains(&format!(":{}:1: missing field `command`", lines + 1)),
        "{err}"
    );
    assert_eq!(sup.deployment("fresh")["state"], "ready");
}

#[test]
fn stop_wait_drains_every_deployment_and_returns_once_the_supervisor_is_gone() {
    let mut sup = Supervisor::start(&format!(
        "{}{}",
        deployment("quick", &exec("sleep 1000"), ""),
        deployment(
            "stubborn",
            &exec_with(&["--drain", "cancel"], "trap '' TERM; sleep 1000"),
            "drain_timeout = \"3s\"\nkill_timeout = \"1s\""
        ),
    ));
    let quick = sup.ready_pid("quick", LONG);
    let stubborn = sup.ready_pid("stubborn", LONG);
    let out = sup.client(&["stop", "--wait"]);
    let text = ok("stop --wait", &out);
    assert!(
        text.starts_with(&format!(
            "stopping the supervisor (pid {}): draining 2 deployments",
            sup.pid()
        )),
        "{text}"
    );
    assert!(text.contains("stopped: the supervisor"), "{text}");
    assert!(
        stderr(&out).contains("stopping: stubborn: draining: budget"),
        "progress: {}",
        stderr(&out)
    );
    let status = sup.wait_exit(LONG);
    assert_eq!(status.code(), Some(0), "{}", sup.log());
    assert!(!alive(quick) && !alive(stubborn));
    let log = sup.plain_log();
    assert!(log.contains("stop asked over the control socket"), "{log}");
    // The supervisor said how the drain went while it ran.
    assert!(
        log.contains(&format!("stubborn[{stubborn}]: draining for stop: budget ")),
        "drain progress in the log:\n{log}"
    );
    // A stop's exits are no crash.
    assert!(!log.contains("exited unexpectedly"), "{log}");
    assert!(
        log.contains(&format!("quick[{quick}]: stopped reason=drained")),
        "{log}"
    );
}

#[test]
fn a_stop_without_wait_answers_at_once_and_a_second_is_refused() {
    let mut sup = Supervisor::start(&deployment(
        "slow",
        &approvals("3000"),
        "drain_timeout = \"5s\"",
    ));
    sup.ready_pid("slow", LONG);
    ok("send", &sup.client(&["send", "slow", "x"]));
    sup.wait_deployment("slow", "approve in flight", LONG, |d| {
        d["steps"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["step"] == "approve"))
    });
    let text = ok("stop", &sup.client(&["stop"]));
    assert!(
        text.contains("draining 1 deployment under their budgets"),
        "{text}"
    );
    let out = sup.client(&["stop"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("already stopping"),
        "{}",
        stderr(&out)
    );
    let out = sup.client(&["reload"]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("is stopping; nothing was reloaded"),
        "{}",
        stderr(&out)
    );
    assert_eq!(sup.wait_exit(LONG).code(), Some(0));
}

#[test]
fn ctrl_c_drains_and_no_exit_reads_as_unexpected() {
    let mut sup = Supervisor::start(&format!(
        "{}{}",
        deployment(
            "ticker",
            &exec("while true; do echo tick; sleep 0.1; done"),
            ""
        ),
        deployment("orders", &approvals("50"), ""),
    ));
    sup.ready_pid("ticker", LONG);
    sup.ready_pid("orders", LONG);
    sup.signal(Signal::SIGINT);
    assert_eq!(sup.wait_exit(LONG).code(), Some(0));
    let log = sup.plain_log();
    assert!(!log.contains("exited unexpectedly"), "{log}");
    let exits: Vec<_> = sup
        .journal()
        .into_iter()
        .filter(|r| r["kind"] == "exited")
        .collect();
    assert_eq!(exits.len(), 2, "{exits:?}");
    for e in exits {
        assert_eq!(e["body"]["reason"], "drained", "{e}");
        assert_eq!(e["body"]["cause"], "drained", "{e}");
    }
}
