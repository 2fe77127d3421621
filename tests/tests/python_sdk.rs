//! Python workflows as an operator sees them: the Python SDK's example
//! (`examples/python-orders`) and small Python children hosted by the real
//! `wfhost supervise`, run by the virtual environment's real python, with
//! mail sent through the SDK's own producer client (`wfhost.Client`).
//!
//! The python comes from `WFHOST_PYTHON`, by default
//! `<repo>/target/venv/bin/python`, which `scripts/test` creates and
//! fills with `pip install './sdk/python[test]'`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;
use wfhost_ipc::{CancelOrigin, CancelRequested, KeyId, SignedCancel};
use wfhost_tests::{
    LONG, Supervisor, alive, command, deployment, describe, example_steps, mail_result_json, ok,
    signal, unhex,
};

// --- where things are -------------------------------------------------------

/// The keys of each step in the example's result.
const STEP_KEYS: [&str; 8] = [
    "at",
    "attempt",
    "finalized",
    "ms",
    "pid",
    "rounds",
    "sha256",
    "step",
];

/// The repository root (the tests crate lives in `<repo>/tests`).
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repository root")
        .to_path_buf()
}

/// The python that has the SDK installed; panics with the command that
/// makes it when it is missing.
fn python() -> String {
    let path = std::env::var("WFHOST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|_| repo().join("target/venv/bin/python"));
    assert!(
        path.exists(),
        "{} is missing: run `scripts/test` (it creates target/venv and installs sdk/python into it), \
         or set WFHOST_PYTHON to a python that has the wfhost package",
        path.display()
    );
    path.display().to_string()
}

/// The example's script.
fn orders_py() -> String {
    repo()
        .join("examples/python-orders/orders.py")
        .display()
        .to_string()
}

// --- what an operator reads --------------------------------------------------

fn of_kind<'a>(records: &'a [Value], kind: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["kind"] == kind).collect()
}

fn seq(r: &Value) -> u64 {
    r["seq"].as_u64().expect("seq")
}

/// The first record of `kind` whose seq is above `after`.
fn first_after<'a>(records: &'a [Value], kind: &str, after: u64) -> &'a Value {
    records
        .iter()
        .find(|r| r["kind"] == kind && seq(r) > after)
        .unwrap_or_else(|| panic!("no {kind} after seq {after} in {records:#?}"))
}

fn has_step(d: &Value, run: &str, step: &str) -> bool {
    d["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|s| s["run"] == run && s["step"] == step)
}

/// The example's own lines (`orders: …`) in the supervisor's log.
fn story(sup: &Supervisor) -> Vec<String> {
    sup.plain_log()
        .lines()
        .filter_map(|l| l.find("orders: ").map(|i| l[i..].to_owned()))
        .collect()
}

/// Sends `n` items `item-0` … through `wfhost.Client` in one python
/// process; returns the ids it printed.
fn send_with_the_python_client(sup: &Supervisor, id: &str, n: usize) -> Vec<u64> {
    let script = "import sys, wfhost\n\
                  client = wfhost.Client(config=sys.argv[1])\n\
                  for i in range(int(sys.argv[3])):\n\
                  \x20   print(client.send(sys.argv[2], f'item-{i}').id, flush=True)\n";
    let out = Command::new(python())
        .arg("-c")
        .arg(script)
        .arg(sup.config())
        .arg(id)
        .arg(n.to_string())
        .output()
        .expect("run python");
    ok("python wfhost.Client sends", &out)
        .lines()
        .map(|l| {
            l.trim()
                .parse()
                .unwrap_or_else(|_| panic!("an id, not {l:?}"))
        })
        .collect()
}

/// The example as a deployment, with markers in the supervisor's temp dir.
fn orders_deployment(markers: &str, args: &[&str], extra: &str) -> String {
    let python = python();
    let script = orders_py();
    let mut parts = vec![python.as_str(), script.as_str()];
    parts.extend_from_slice(args);
    deployment(
        "orders-py",
        &command(&parts),
        &format!("env = {{ ORDERS_MARKERS = \"{markers}\" }}\n{extra}"),
    )
}

/// A fresh markers directory (outside the supervisor's temp dir, which
/// only exists once the supervisor starts).
struct Markers(wfhost_tests::TempDir);

impl Markers {
    fn new() -> Self {
        Self(wfhost_tests::TempDir::new())
    }
    fn path(&self) -> String {
        self.0.path().display().to_string()
    }
}

// --- the tests ----------------------------------------------------------------

/// 200 items sent while the example recycles itself every 35 items: five
/// self recycles, and every accepted id is done exactly once (one
/// `mail_done` event, one "done" line of the example), however the drains
/// of the recycles cut into the items in hand.
#[test]
fn the_python_example_serves_200_items_across_5_self_recycles_each_done_once() {
    let markers = Markers::new();
    let sup = Supervisor::start(&orders_deployment(
        &markers.path(),
        &[
            "--recycle-every",
            "35",
            "--fetch-ms",
            "5",
            "--approve-ms",
            "5",
        ],
        "drain_timeout = \"5s\"",
    ));
    let first = sup.ready_pid("orders-py", LONG);
    let ids = send_with_the_python_client(&sup, "orders-py", 200);
    assert_eq!(ids.len(), 200);
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), 200, "200 distinct ids: {ids:?}");

    // Each child asks after serving 35 and serves what it holds while it
    // drains, so 200 items take 4 or 5 recycles (5 when the supervisor
    // keeps up with every ack, 4 when a busy disk lets a child finish
    // more of its window before the ask is read).
    let d = sup.wait_deployment(
        "orders-py",
        "200 done after 4 or 5 self recycles",
        LONG * 4,
        |d| {
            d["mail"]["done"] == 200
                && d["recycles"]["self"]
                    .as_u64()
                    .is_some_and(|n| (4..=5).contains(&n))
                && d["state"] == "ready"
        },
    );
    assert_eq!(d["implementation"], "wfhost-python/0.1.0", "{d}");
    assert_eq!(d["takes_mail"], true, "{d}");
    assert_eq!(
        (
            d["mail"]["inbox"].as_u64(),
            d["mail"]["processing"].as_u64()
        ),
        (Some(0), Some(0)),
        "{d}"
    );
    assert_eq!(d["restarts"], 0, "recycles, not crashes: {d}");
    assert_ne!(d["pid"].as_u64(), Some(u64::from(first)));

    // Exactly once, by the store's count.
    let events = sup.events();
    let mut done: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for e in of_kind(&events, "mail_done") {
        let id = e["body"]["id"].as_u64().expect("id");
        let outcome = e["body"]["outcome"].as_str().unwrap_or("").to_owned();
        done.entry(id).or_default().push(outcome);
    }
    assert_eq!(done.keys().copied().collect::<Vec<_>>(), unique);
    for (id, outcomes) in &done {
        assert_eq!(outcomes, &["succeeded"], "mail {id} done once, succeeded");
    }
    // And by the example's own story: one "done" line per id.
    let lines = story(&sup);
    for id in &unique {
        let n = lines
            .iter()
            .filter(|l| {
                l.starts_with(&format!("orders: mail {id}: order item-"))
                    && l.contains(" done (attempt ")
            })
            .count();
        assert_eq!(
            n,
            1,
            "mail {id} done once in the log:\n{}",
            lines.join("\n")
        );
    }
    // One ask per self recycle (4 or 5 of them, as above).
    let self_recycles = d["recycles"]["self"].as_u64().expect("self recycles") as usize;
    let asked = lines
        .iter()
        .filter(|l| l.contains("asking to be recycled"))
        .count();
    assert_eq!(asked, self_recycles, "{}", lines.join("\n"));
    let journal = sup.journal();
    let recycles: Vec<&Value> = of_kind(&journal, "recycled")
        .into_iter()
        .filter(|r| r["body"]["origin"] == "self")
        .collect();
    assert_eq!(recycles.len(), self_recycles, "{journal:#?}");
    assert!(
        recycles
            .iter()
            .all(|r| r["body"]["reason"] == "served 35 items"),
        "{recycles:#?}"
    );
    // Each item's result, as the store keeps it: approved, both steps, the
    // item the client sent (`item-0` … `item-199`).
    let mut orders = std::collections::BTreeSet::new();
    for row in wfhost_tests::query(
        &sup.db(),
        "SELECT id, CAST(result AS TEXT) FROM mail ORDER BY id",
    ) {
        let (id, text): (u64, String) = serde_json::from_value(row).expect("a result row");
        let result: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("mail {id}: {e}: {text}"));
        assert_eq!(
            example_steps(&result, &STEP_KEYS),
            ["fetch", "approve"],
            "{result}"
        );
        assert_eq!(
            (result["mail"].as_u64(), result["status"].as_str()),
            (Some(id), Some("approved")),
            "{result}"
        );
        orders.insert(result["order"].as_str().expect("order").to_owned());
    }
    assert_eq!(
        orders,
        (0..200).map(|i| format!("item-{i}")).collect(),
        "one result per item sent"
    );
    ok("journal verify", &sup.client(&["journal", "verify"]));
}

/// A Python child SIGKILLed in the middle of an item: the item comes back
/// to the next child with attempt 2, and the example finalizes the step the
/// first attempt finished instead of running it again.
#[test]
fn a_sigkilled_python_child_redelivers_its_item_with_attempt_2_and_the_example_finalizes() {
    let markers = Markers::new();
    let sup = Supervisor::start(&orders_deployment(&markers.path(), &[], ""));
    let pid = sup.ready_pid("orders-py", LONG);
    let out = sup.client(&[
        "send",
        "orders-py",
        "{\"order\": \"K-1\", \"fetch_ms\": 50, \"approve_ms\": 3000}",
    ]);
    assert!(
        ok("send", &out).contains("accepted mail 1 "),
        "{}",
        describe(&out)
    );
    let run = "order-1".to_owned();
    sup.wait_deployment("orders-py", "approve in flight", LONG, |d| {
        has_step(d, &run, "approve")
    });
    assert!(
        std::path::Path::new(&format!("{}/1.fetch", markers.path())).exists(),
        "fetch left its marker"
    );
    signal(pid, Signal::SIGKILL);

    let d = sup.wait_deployment("orders-py", "the item done by the next child", LONG, |d| {
        d["mail"]["done"] == 1 && d["pid"].as_u64().is_some_and(|p| p != u64::from(pid))
    });
    assert_eq!(d["restarts"], 1, "{d}");
    assert!(
        d["last_exit"]
            .as_str()
            .unwrap_or("")
            .contains("killed by signal 9 (SIGKILL)"),
        "{d}"
    );
    let lines = story(&sup);
    let has = |text: &str| lines.iter().any(|l| l.contains(text));
    assert!(has("mail 1: order K-1 received (attempt 1)"), "{lines:#?}");
    assert!(has("mail 1: order K-1 received (attempt 2)"), "{lines:#?}");
    assert!(
        has("mail 1: attempt 2: redelivered (an earlier child held it); finalizing fetch"),
        "{lines:#?}"
    );
    assert!(
        has("mail 1: fetch already ran on an earlier attempt; finalizing instead of re-running it"),
        "{lines:#?}"
    );
    assert!(has("mail 1: order K-1 done (attempt 2)"), "{lines:#?}");

    let events = sup.events();
    let started = |step: &str| {
        of_kind(&events, "step_started")
            .into_iter()
            .filter(|e| e["body"]["run"] == run.as_str() && e["body"]["step"] == step)
            .count()
    };
    assert_eq!(started("fetch"), 1, "fetch is not run again: {events:#?}");
    assert_eq!(
        started("approve"),
        2,
        "approve was cut short, so it runs again"
    );
    let done = of_kind(&events, "mail_done");
    assert_eq!(done.len(), 1, "{done:#?}");
    assert_eq!(done[0]["body"]["outcome"], "succeeded");

    // The result, as a caller reads it: the fetch finalized from the
    // killed child's marker (its record: that child's pid, attempt 1), the
    // approval run by the next child, in the same shape.
    let (end, result) = mail_result_json(&sup, 1);
    assert_eq!(end["outcome"], "succeeded", "{end}");
    assert_eq!(
        example_steps(&result, &STEP_KEYS),
        ["fetch", "approve"],
        "{result}"
    );
    assert_eq!(
        (
            result["order"].as_str(),
            result["status"].as_str(),
            result["attempt"].as_u64()
        ),
        (Some("K-1"), Some("approved"), Some(2)),
        "{result}"
    );
    let (fetch, approve) = (&result["steps"][0], &result["steps"][1]);
    assert_eq!(
        (fetch["finalized"].as_bool(), fetch["attempt"].as_u64()),
        (Some(true), Some(1)),
        "{result}"
    );
    assert_eq!(fetch["pid"], pid, "{result}");
    assert_eq!(
        (approve["finalized"].as_bool(), approve["attempt"].as_u64()),
        (Some(false), Some(2)),
        "{result}"
    );
    assert_eq!(approve["pid"], d["pid"], "{result}");
}

/// A drain while a blocking wait-behaviour step runs: the budget stays
/// paused however long the step takes, the step finishes, its mail is
/// acknowledged, then `Drained`.
#[test]
fn a_drain_during_a_blocking_wait_step_keeps_the_budget_paused_until_drained() {
    let markers = Markers::new();
    let sup = Supervisor::start(&orders_deployment(
        &markers.path(),
        &[],
        "drain_timeout = \"1s\"",
    ));
    sup.ready_pid("orders-py", LONG);
    ok(
        "send",
        &sup.client(&[
            "send",
            "orders-py",
            "{\"order\": \"W-1\", \"fetch_ms\": 50, \"approve_ms\": 3000}",
        ]),
    );
    sup.wait_deployment("orders-py", "approve in flight", LONG, |d| {
        has_step(d, "order-1", "approve")
    });
    ok("drain", &sup.client(&["drain", "orders-py"]));

    let before = sup.deployment("orders-py");
    assert_eq!(before["state"], "draining", "{before}");
    std::thread::sleep(Duration::from_secs(1));
    let after = sup.deployment("orders-py");
    assert_eq!(
        after["state"], "draining",
        "the wait step still runs: {after}"
    );
    assert_eq!(
        before["drain"]["used_ms"], after["drain"]["used_ms"],
        "the budget did not grow across 1 s: {before} {after}"
    );
    assert_eq!(after["drain"]["used_ms"], 0, "{after}");
    assert!(has_step(&after, "order-1", "approve"), "{after}");

    let d = sup.wait_deployment("orders-py", "drained", LONG, |d| d["state"] == "drained");
    assert_eq!(d["drain"]["escalated"], false, "{d}");
    assert_eq!(d["drain"]["used_ms"], 0, "{d}");
    assert_eq!(
        d["mail"]["done"], 1,
        "the step finished and its item was acked: {d}"
    );

    let ev = sup.events();
    let started = first_after(&ev, "drain_started", 0);
    let approved = ev
        .iter()
        .find(|e| e["kind"] == "step_finished" && e["body"]["step"] == "approve")
        .unwrap_or_else(|| panic!("approve finished: {ev:#?}"));
    assert_eq!(approved["body"]["outcome"], "succeeded", "{approved}");
    assert!(seq(approved) > seq(started), "it finished during the drain");
    let acked = first_after(&ev, "mail_done", seq(started));
    let drained = first_after(&ev, "drained", seq(started));
    assert!(seq(acked) < seq(drained), "the ack comes before Drained");
    assert!(of_kind(&ev, "drain_escalated").is_empty(), "{ev:#?}");
    assert!(of_kind(&sup.journal(), "cancel_committed").is_empty());
    let lines = story(&sup);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("mail 1: order W-1 done (attempt 1)")),
        "{lines:#?}"
    );
    let (_, result) = mail_result_json(&sup, 1);
    assert_eq!(
        example_steps(&result, &STEP_KEYS),
        ["fetch", "approve"],
        "{result}"
    );
    assert_eq!(
        (result["order"].as_str(), result["status"].as_str()),
        (Some("W-1"), Some("approved")),
        "{result}"
    );
}

/// `wfhost call` of an order prints its result (with the digest `crunch`
/// computed); `wfhost mail cancel` of an order waiting for its approval (a
/// wait step, which a drain waits for) is acknowledged by the child, stops
/// the approval at once, and the order ends cancelled with a result naming
/// the step it stopped.
#[test]
fn a_python_order_called_returns_its_result_and_one_cancelled_in_approval_ends_cancelled() {
    let markers = Markers::new();
    let sup = Supervisor::start(&orders_deployment(&markers.path(), &[], ""));
    let pid = sup.ready_pid("orders-py", LONG);
    let payload = "{\"order\": \"C-1\", \"crunch\": 3000, \"approve_ms\": 10}";
    let out = sup.client(&["call", "orders-py", payload, "--key", "C-1"]);
    let result: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("wfhost call prints the result: {e}: {}", describe(&out)));
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(
        example_steps(&result, &STEP_KEYS),
        ["fetch", "approve"],
        "{result}"
    );
    assert_eq!(
        (result["order"].as_str(), result["status"].as_str()),
        (Some("C-1"), Some("approved")),
        "{result}"
    );
    // 3,000 chained SHA-256 rounds from b"wfhost", by python3's hashlib
    // (the tests have no hash crate).
    let hex = ok(
        "python3 hashlib",
        &Command::new("python3")
            .args([
                "-c",
                "import hashlib\nd = b'wfhost'\nfor _ in range(3000): d = hashlib.sha256(d).digest()\nprint(d.hex())",
            ])
            .output()
            .expect("run python3"),
    );
    let hex = hex.trim();
    assert_eq!(
        (
            result["steps"][0]["rounds"].as_u64(),
            result["steps"][0]["sha256"].as_str()
        ),
        (Some(3000), Some(hex)),
        "{result}"
    );
    // The same key again: the stored result, not a second order.
    let again = sup.client(&["call", "orders-py", payload, "--key", "C-1"]);
    assert_eq!(again.stdout, out.stdout, "{}", describe(&again));

    ok(
        "send",
        &sup.client(&[
            "send",
            "orders-py",
            "{\"order\": \"C-2\", \"fetch_ms\": 10, \"approve_ms\": 60000}",
        ]),
    );
    sup.wait_deployment("orders-py", "approve in flight", LONG, |d| {
        has_step(d, "order-2", "approve")
    });
    let asked = std::time::Instant::now();
    let out = sup.client(&[
        "mail",
        "cancel",
        "2",
        "--reason",
        "changed my mind",
        "--wait",
    ]);
    assert_eq!(out.status.code(), Some(0), "stopped: {}", describe(&out));
    assert!(
        describe(&out).contains(": acknowledged ("),
        "the child's verdict: {}",
        describe(&out)
    );
    assert!(
        asked.elapsed() < Duration::from_secs(30),
        "the approval stopped, not waited for: {:?}",
        asked.elapsed()
    );
    let (end, result) = mail_result_json(&sup, 2);
    assert_eq!(end["outcome"], "cancelled", "{end}");
    assert_eq!(example_steps(&result, &STEP_KEYS), ["fetch"], "{result}");
    assert_eq!(result["status"], "cancelled", "{result}");
    assert_eq!(result["stopped"]["step"], "approve", "{result}");
    assert!(
        result["stopped"]["reason"]
            .as_str()
            .is_some_and(|r| r.ends_with("changed my mind")),
        "{result}"
    );
    assert_eq!(
        sup.deployment("orders-py")["pid"],
        pid,
        "the same child serves on"
    );
}

/// A blocking cancel-behaviour step that never looks at `step.cancelled`,
/// in a child that ignores SIGTERM, drained by a recycle: `step.cancelled`
/// is set by the drain (cause drain), the budget runs out, the signed cancel
/// is journaled, sent and verified, the step's cause becomes the cancel
/// (the child says both), and since the step still does not end, the
/// recycle's drain deadline passes and the kill timeout ends the child with
/// SIGKILL before the new one starts.
#[test]
fn a_spent_budget_on_a_stubborn_blocking_step_is_cancelled_signed_then_killed() {
    let dir = wfhost_tests::TempDir::new();
    let script = dir.join("stubborn.py");
    std::fs::write(
        &script,
        "import signal, sys, threading, time, wfhost\n\
         signal.signal(signal.SIGTERM, signal.SIG_IGN)  # it ignores the stop too\n\
         rt = wfhost.connect()\n\
         rt.ready()\n\
         for mail in rt.mail():\n\
         \x20   with rt.step(f'job-{mail.id}', 'crunch', drain='cancel') as step:\n\
         \x20       def watch(step=step):\n\
         \x20           step.cancelled.wait()\n\
         \x20           seen = None\n\
         \x20           while seen != 'cancel':\n\
         \x20               if step.cause != seen:\n\
         \x20                   seen = step.cause\n\
         \x20                   print(f'stubborn: step.cancelled is set (cause {seen}: {step.reason}); crunch does not check it', flush=True)\n\
         \x20               time.sleep(0.02)\n\
         \x20       threading.Thread(target=watch, daemon=True).start()\n\
         \x20       time.sleep(600)  # never checks step.cancelled\n",
    )
    .expect("write the child");
    let python = python();
    let sup = Supervisor::start(&deployment(
        "stubborn",
        &command(&[python.as_str(), script.to_str().expect("utf-8 path")]),
        "drain_timeout = \"1s\"\ndrain_deadline = \"3s\"\nkill_timeout = \"1s\"",
    ));
    let old = sup.ready_pid("stubborn", LONG);
    ok("send", &sup.client(&["send", "stubborn", "work"]));
    sup.wait_deployment("stubborn", "the cancel step in flight", LONG, |d| {
        has_step(d, "job-1", "crunch")
    });

    let recycle = Command::new(wfhost_tests::bin("wfhost"))
        .args(["recycle", "stubborn", "--reason", "test", "--config"])
        .arg(sup.config())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wfhost recycle");

    // Stage 1: the budget runs out and the signed cancel is committed.
    let d = sup.wait_deployment("stubborn", "the escalation", LONG, |d| {
        d["drain"]["escalated"] == true
    });
    assert_eq!(d["state"], "draining", "{d}");
    assert_eq!(d["drain"]["used_ms"], 1000, "the whole budget: {d}");
    // Stage 2: the child verified it and the step's event is set.
    let seen = wfhost_tests::poll(LONG, Duration::from_millis(50), || {
        let log = sup.plain_log();
        (log.contains("stubborn: step.cancelled is set (cause drain: the supervisor is draining this child (budget 1000 ms))")
            && log.contains("wfhost: cancel of run job-1 accepted (origin supervisor-drain")
            && log.contains("stubborn: step.cancelled is set (cause cancel: cancelled by a verified supervisor-drain cancel: drain budget of 1s spent)"))
        .then_some(())
        .ok_or(log)
    });
    if let Err(log) = seen {
        panic!("the child never said it verified the cancel and saw step.cancelled:\n{log}");
    }
    let d = sup.deployment("stubborn");
    assert!(
        has_step(&d, "job-1", "crunch"),
        "the step ignores its event and goes on: {d}"
    );
    assert_eq!(d["pid"].as_u64(), Some(u64::from(old)), "{d}");
    // Stage 3: the drain deadline passes; SIGTERM is ignored; SIGKILL.
    sup.wait_deployment("stubborn", "the old child stopping", LONG, |d| {
        d["state"] == "stopping"
    });
    let out = recycle.wait_with_output().expect("wait for wfhost recycle");
    assert!(out.status.success(), "{}", describe(&out));
    let d = sup.wait_deployment("stubborn", "the new child ready", LONG, |d| {
        d["state"] == "ready" && d["pid"].as_u64().is_some_and(|p| p != u64::from(old))
    });
    assert!(!alive(old), "the old child is gone");
    assert!(
        d["last_exit"]
            .as_str()
            .unwrap_or("")
            .contains("killed by signal 9 (SIGKILL)"),
        "the kill timeout ended it: {d}"
    );

    // The journal tells each stage, in order, and the cancel's signature
    // is the supervisor's.
    let journal = sup.journal();
    let drain = first_after(&journal, "drain_started", 0);
    let cancel = first_after(&journal, "cancel_committed", seq(drain));
    let exit = first_after(&journal, "exited", seq(cancel));
    let recycled = first_after(&journal, "recycled", seq(exit));
    let b = &cancel["body"];
    assert_eq!(b["origin"], "supervisor-drain", "{cancel}");
    assert_eq!(b["run"], "job-1", "{cancel}");
    assert_eq!(b["reason"], "drain budget of 1s spent", "{cancel}");
    assert!(
        exit["body"]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("SIGKILL"),
        "{exit}"
    );
    assert_eq!(recycled["body"]["origin"], "operator", "{recycled}");
    assert_eq!(recycled["body"]["old_pid"].as_u64(), Some(u64::from(old)));
    let pem = std::fs::read_to_string(sup.dir().join("state/supervisor.key")).expect("signing key");
    let key = wfhost_ipc::key::from_pem(&pem).expect("PEM key");
    let key_id: [u8; 8] = unhex(b["key_id"].as_str().expect("key_id"))
        .try_into()
        .expect("8-byte key id");
    let signed = SignedCancel {
        record: CancelRequested {
            origin: CancelOrigin::SupervisorDrain,
            deployment: "stubborn".into(),
            run: Some("job-1".into()),
            reason: b["reason"].as_str().expect("reason").to_owned(),
            at_ms: b["at_ms"].as_u64().expect("at_ms"),
        },
        key_id: KeyId(key_id),
        signature: unhex(b["signature"].as_str().expect("signature")),
    };
    signed
        .verify(&key.verifying_key())
        .expect("the journaled cancel verifies under the supervisor's key");
    let ev = sup.events();
    let escalated = first_after(&ev, "drain_escalated", 0);
    let committed = first_after(&ev, "cancel_committed", seq(escalated));
    assert_eq!(committed["body"]["journal_seq"], seq(cancel), "{committed}");
    ok("journal verify", &sup.client(&["journal", "verify"]));
}

/// `wfhost questions --json`, one object per open question.
fn open_questions(sup: &Supervisor) -> Vec<Value> {
    wfhost_tests::json_lines(&ok("questions", &sup.client(&["questions", "--json"])))
}

#[test]
fn a_python_order_asks_a_person_and_the_answer_reaches_it_after_a_recycle() {
    let markers = Markers::new();
    let sup = Supervisor::start(&orders_deployment(
        &markers.path(),
        &["--fetch-ms", "10", "--approval", "ask"],
        "drain_timeout = \"60s\"",
    ));
    let first = sup.ready_pid("orders-py", LONG);
    ok(
        "send",
        &sup.client(&["send", "orders-py", r#"{"order":"P-1"}"#]),
    );
    let open = wfhost_tests::wait_for("the question", LONG, || {
        let open = open_questions(&sup);
        (open.len() == 1).then_some(open)
    });
    assert_eq!(
        (open[0]["key"].as_str(), open[0]["prompt"]["order"].as_str()),
        (Some("approve"), Some("P-1"))
    );
    let id = open[0]["id"].as_u64().expect("id");
    ok("recycle", &sup.client(&["recycle", "orders-py"]));
    let second = sup.ready_pid("orders-py", LONG);
    assert_ne!(first, second);
    ok(
        "answer",
        &sup.client(&["answer", &id.to_string(), "approve", r#"{"approved":true}"#]),
    );
    ok(
        "mail result",
        &sup.client(&[
            "mail",
            "result",
            &id.to_string(),
            "--wait",
            "--timeout",
            "60s",
        ]),
    );
    let (end, result) = mail_result_json(&sup, id);
    assert_eq!(end["outcome"], "succeeded", "{end}");
    assert_eq!(result["status"], "approved", "{result}");
    assert_eq!(result["approval"]["approved"], true, "{result}");
    assert_eq!(of_kind(&sup.events(), "mail_given_back").len(), 1);
}
