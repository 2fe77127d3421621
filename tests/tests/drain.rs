//! Drain under a budget, the signed cancel escalation and the signed journal,
//! as an operator sees them: `wfhost drain`, `resume` and `cancel`, status
//! JSON, the event stream, `wfhost journal show` and `verify`, the child's
//! log lines and /proc.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::Value;
use wfhost_ipc::{CancelOrigin, CancelRequested, KeyId, SignedCancel};
use wfhost_tests::{
    LONG, Supervisor, alive, children_of, demo, deployment, exec_with, ok, python, query, stderr,
    stdout, unhex, unix_ms, wait_for,
};

// --- config -----------------------------------------------------------

/// `wfhost-child exec --drain DRAIN -- sh -c SCRIPT` (no `"` or `\` in SCRIPT).
fn exec(drain: &str, script: &str) -> String {
    exec_with(&["--drain", drain], script)
}

/// A command that ignores SIGTERM, and so ignores drain: `trap ''` sets
/// SIG_IGN, which its `sleep` inherits across exec.
const DEAF: &str = "trap '' TERM; sleep 1000";

// --- what an operator reads ------------------------------------------

/// The event log once it holds an event of `kind`: events are written in
/// batches just after what they describe, so a test that has seen the
/// state change waits for its event.
fn events_with(sup: &Supervisor, kind: &str) -> Vec<Value> {
    wait_for(&format!("a {kind} event"), LONG, || {
        let ev = sup.events();
        ev.iter().any(|e| e["kind"] == kind).then_some(ev)
    })
}

fn of_kind<'a>(records: &'a [Value], kind: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["kind"] == kind).collect()
}

/// The first record of `kind` whose seq is above `after`.
fn first_after<'a>(records: &'a [Value], kind: &str, after: u64) -> &'a Value {
    records
        .iter()
        .find(|r| r["kind"] == kind && r["seq"].as_u64().unwrap_or(0) > after)
        .unwrap_or_else(|| panic!("no {kind} after seq {after} in {records:#?}"))
}

fn seq(r: &Value) -> u64 {
    r["seq"].as_u64().expect("seq")
}

fn at_ms(r: &Value) -> u64 {
    r["at_ms"].as_u64().expect("at_ms")
}

fn steps(d: &Value) -> Vec<(String, String, String)> {
    d["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let f = |k: &str| s[k].as_str().unwrap_or("").to_owned();
            (f("run"), f("step"), f("drain"))
        })
        .collect()
}

fn has_step(d: &Value, run: &str, step: &str) -> bool {
    steps(d).iter().any(|(r, s, _)| r == run && s == step)
}

// --- processes ----------------------------------------------------------

/// The hosted command of an exec child: its `sh` and everything under it.
fn command_tree(child: u32) -> Vec<u32> {
    let sh = wait_for("the hosted command", LONG, || {
        children_of(child).first().copied()
    });
    let mut tree = vec![sh];
    let mut i = 0;
    while i < tree.len() {
        tree.extend(children_of(tree[i]));
        i += 1;
    }
    tree
}

/// The `sleep` under an exec child's `sh` (or the `sh` itself if it exec'd).
fn sleeper(child: u32) -> Vec<u32> {
    wait_for("the command's sleep", LONG, || {
        let tree = command_tree(child);
        tree.iter()
            .any(|&p| comm(p).as_deref() == Some("sleep"))
            .then_some(tree)
    })
}

fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_owned())
}

/// Whether `pid` ignores `sig` (the `SigIgn` mask of /proc/PID/status).
fn ignores(pid: u32, sig: Signal) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (sig as i32 - 1)) != 0)
}

/// A variable of a live process's environment.
fn env_of(pid: u32, name: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0).find_map(|kv| {
        let kv = String::from_utf8_lossy(kv);
        kv.strip_prefix(&format!("{name}=")).map(str::to_owned)
    })
}

/// Rebuilds the signed cancel a journal `cancel` record describes.
fn signed_cancel(record: &Value, deployment: &str) -> SignedCancel {
    let b = &record["body"];
    let origin = match b["origin"].as_str() {
        Some("supervisor-drain") => CancelOrigin::SupervisorDrain,
        Some("operator") => CancelOrigin::Operator,
        other => panic!("unknown origin {other:?} in {record}"),
    };
    let key_id: [u8; 8] = unhex(b["key_id"].as_str().expect("key_id"))
        .try_into()
        .expect("8-byte key id");
    SignedCancel {
        record: CancelRequested {
            origin,
            deployment: deployment.to_owned(),
            run: b["run"].as_str().map(str::to_owned),
            reason: b["reason"].as_str().expect("reason").to_owned(),
            at_ms: b["at_ms"].as_u64().expect("at_ms"),
        },
        key_id: KeyId(key_id),
        signature: unhex(b["signature"].as_str().expect("signature")),
    }
}

// --- the store, from outside -----------------------------------------

/// A python3 process holding `BEGIN EXCLUSIVE` on the store, once
/// `ready_sql` returns true: no one else can write until it is released
/// (or dropped, which kills it).
struct Locker {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

const LOCKER: &str = r#"
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)
deadline = time.time() + 60
while not c.execute(sys.argv[2]).fetchone()[0]:
    if time.time() > deadline:
        print("gave up waiting", flush=True)
        sys.exit(1)
    time.sleep(0.005)
c.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
c.execute("ROLLBACK")
print("released", flush=True)
"#;

impl Locker {
    fn start(db: &Path, ready_sql: &str) -> Self {
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(LOCKER)
            .arg(db)
            .arg(ready_sql)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run python3");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let stdin = child.stdin.take();
        Self {
            child,
            stdin,
            lines,
        }
    }

    fn expect(&self, line: &str) {
        match self.lines.recv_timeout(LONG) {
            Ok(got) => assert_eq!(got, line, "the python3 locker said"),
            Err(e) => panic!("the python3 locker did not say {line:?}: {e}"),
        }
    }

    fn release(&mut self) {
        let stdin = self.stdin.as_mut().expect("locker stdin");
        stdin.write_all(b"go\n").expect("tell the locker");
        stdin.flush().expect("flush");
        self.expect("released");
    }
}

impl Drop for Locker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// --- the tests ------------------------------------------------------------

/// A wait-behaviour step outlives the budget without escalation; the
/// deployment ends drained, stays drained, and resumes with a fresh child.
#[test]
fn wait_step_outlives_the_budget_without_escalation_and_stays_drained_until_resumed() {
    let sup = Supervisor::start(&deployment(
        "waiter",
        &exec("wait", "sleep 4"),
        "drain_timeout = \"1s\"",
    ));
    let pid = sup.ready_pid("waiter", LONG);
    let run = format!("exec-{pid}");
    sup.wait_deployment("waiter", "the wait step in flight", LONG, |d| {
        steps(d) == [(run.clone(), "command".into(), "wait".into())]
    });

    let out = ok("drain", &sup.client(&["drain", "waiter"]));
    assert!(out.contains("1s budget"), "{out}");

    // While draining: the budget never runs and never escalates.
    let polls = std::cell::Cell::new(0u32);
    let d = sup.wait_deployment("waiter", "drained", LONG, |d| {
        if d["state"] == "draining" {
            polls.set(polls.get() + 1);
            assert_eq!(d["drain"]["escalated"], false, "{d}");
            assert_eq!(d["drain"]["purpose"], "operator", "{d}");
            assert!(
                d["drain"]["used_ms"].as_u64() < Some(1000),
                "a wait step spends no budget: {d}"
            );
        }
        d["state"] == "drained"
    });
    assert!(polls.get() > 0, "status was seen while draining");
    assert_eq!(d["drain"]["escalated"], false, "{d}");
    assert_eq!(d["escalations"], 0, "{d}");
    assert!(d["drain"]["used_ms"].as_u64() < Some(1000), "{d}");
    assert!(d["pid"].is_null(), "{d}");

    let ev = events_with(&sup, "drain_ended");
    let started = first_after(&ev, "drain_started", 0);
    let paused = first_after(&ev, "drain_paused", seq(started));
    assert_eq!(paused["body"]["used_ms"], 0, "{paused}");
    let finished = first_after(&ev, "step_finished", seq(started));
    assert_eq!(finished["body"]["outcome"], "succeeded", "{finished}");
    assert!(
        at_ms(finished) > at_ms(started) + 1000,
        "the wait step ran longer than the 1s budget after the drain: {started} {finished}"
    );
    let ended = first_after(&ev, "drain_ended", seq(started));
    assert!(
        ended["body"]["used_ms"].as_u64() < Some(1000),
        "budget used by a wait step: {ended}"
    );
    assert!(of_kind(&ev, "drain_escalated").is_empty(), "{ev:#?}");
    assert!(of_kind(&ev, "cancel_committed").is_empty(), "{ev:#?}");
    let records = sup.journal();
    assert!(
        of_kind(&records, "cancel_committed").is_empty(),
        "{records:#?}"
    );
    assert_eq!(of_kind(&records, "drain_started").len(), 1, "{records:#?}");

    // Stays drained: no restart (a short settle, then look again).
    std::thread::sleep(Duration::from_millis(1500));
    let d = sup.deployment("waiter");
    assert_eq!(
        (d["state"].as_str(), d["restarts"].as_u64()),
        (Some("drained"), Some(0)),
        "{d}"
    );
    assert!(d["pid"].is_null(), "{d}");
    assert_eq!(of_kind(&sup.journal(), "spawned").len(), 1, "no respawn");

    // Resume: a fresh ready child, budget idle again.
    let out = ok("resume", &sup.client(&["resume", "waiter"]));
    assert!(out.contains("fresh child"), "{out}");
    let fresh = sup.ready_pid("waiter", LONG);
    assert_ne!(fresh, pid);
    let d = sup.deployment("waiter");
    assert_eq!(d["drain"]["active"], false, "{d}");
    assert_eq!(d["drain"]["escalated"], false, "{d}");
    assert_eq!(of_kind(&sup.journal(), "resumed").len(), 1);
}

/// A cancel-behaviour step that ignores drain is cancelled by a journaled,
/// signed `supervisor-drain` cancel once the budget is spent.
#[test]
fn a_step_ignoring_drain_is_cancelled_by_a_signed_journaled_cancel_when_the_budget_runs_out() {
    let sup = Supervisor::start(&deployment(
        "deaf",
        &exec("cancel", DEAF),
        "drain_timeout = \"1s\"",
    ));
    let pid = sup.ready_pid("deaf", LONG);
    let run = format!("exec-{pid}");
    let tree = sleeper(pid);
    for &p in &tree {
        assert!(
            ignores(p, Signal::SIGTERM),
            "pid {p} ({:?}) ignores SIGTERM",
            comm(p)
        );
    }
    let public_key = env_of(pid, "WFHOST_SUPERVISOR_KEY").expect("the child's public key");
    sup.wait_deployment("deaf", "the cancel step in flight", LONG, |d| {
        steps(d) == [(run.clone(), "command".into(), "cancel".into())]
    });

    let asked_ms = unix_ms();
    ok("drain", &sup.client(&["drain", "deaf"]));
    let d = sup.wait_deployment("deaf", "drained after escalating", LONG, |d| {
        d["state"] == "drained"
    });
    assert_eq!(d["drain"]["escalated"], true, "{d}");
    assert_eq!(d["escalations"], 1, "{d}");
    assert_eq!(d["drain"]["used_ms"], 1000, "the whole budget: {d}");
    assert_eq!(d["cancels_pending"], 0, "{d}");
    assert!(d["journal_error"].is_null(), "{d}");
    wait_for("the command to be killed", LONG, || {
        tree.iter().all(|&p| !alive(p)).then_some(())
    });

    // The journal: drain, then the signed cancel, then the exit.
    let records = sup.journal();
    let drain = first_after(&records, "drain_started", 0);
    let cancels = of_kind(&records, "cancel_committed");
    assert_eq!(cancels.len(), 1, "{records:#?}");
    let cancel = cancels[0];
    assert!(seq(cancel) > seq(drain));
    assert_eq!(cancel["deployment"], "deaf");
    let body = &cancel["body"];
    assert_eq!(body["origin"], "supervisor-drain", "{cancel}");
    assert_eq!(body["run"], run.as_str(), "{cancel}");
    assert!(
        body["reason"].as_str().unwrap_or("").contains("1s"),
        "{cancel}"
    );
    assert_eq!(
        body["key_id"], cancel["key_id"],
        "signed by the journal's key"
    );
    assert_eq!(
        body["signature"].as_str().map(str::len),
        Some(128),
        "{cancel}"
    );
    let signed_at = body["at_ms"].as_u64().expect("at_ms");
    assert!(
        signed_at >= asked_ms + 1000 && signed_at < at_ms(drain) + 20_000,
        "the cancel came once the 1s budget was spent, not before: asked at {asked_ms}, drained at {}, cancelled at {signed_at}",
        at_ms(drain)
    );
    // The journaled signature is the one the child verifies: it checks out
    // under the key the child was given, and not for another run.
    let key = wfhost_ipc::key::public_from_hex(&public_key).expect("public key");
    let signed = signed_cancel(cancel, "deaf");
    signed.verify(&key).expect("the journaled cancel verifies");
    let mut forged = signed.clone();
    forged.record.run = Some("exec-1".into());
    assert!(
        forged.verify(&key).is_err(),
        "a changed run must not verify"
    );
    let exit = first_after(&records, "exited", seq(cancel));
    assert!(
        exit["body"]["reason"]
            .as_str()
            .unwrap_or("")
            .contains("exit status 137"),
        "wfhost-child passed on the command's SIGKILL: {exit}"
    );

    // The child verified and acted on it.
    let log = sup.wait_log(&format!(
        "run {run} cancelled: killing the command (SIGKILL)"
    ));
    for said in [
        "drain: stopping the command (SIGTERM)".to_owned(),
        format!("cancel of run {run} accepted (origin supervisor-drain"),
    ] {
        assert!(log.contains(&said), "{said}: {log}");
    }

    // The event stream tells it in order.
    let ev = sup.events();
    let started = first_after(&ev, "drain_started", 0);
    let escalated = first_after(&ev, "drain_escalated", seq(started));
    let committed = first_after(&ev, "cancel_committed", seq(escalated));
    assert_eq!(
        escalated["body"]["runs"],
        serde_json::json!([run]),
        "{escalated}"
    );
    assert_eq!(committed["body"]["journal_seq"], seq(cancel), "{committed}");
    assert_eq!(committed["body"]["origin"], "supervisor-drain");
    let finished = first_after(&ev, "step_finished", seq(committed));
    assert_eq!(finished["body"]["outcome"], "cancelled", "{finished}");

    // Still drained: nothing respawned it.
    assert_eq!(of_kind(&records, "spawned").len(), 1);

    let out = sup.client(&["journal", "verify"]);
    let said = ok("journal verify", &out);
    assert!(said.contains("journal ok"), "{said}");
    println!("{}", ok("journal show", &sup.client(&["journal", "show"])));
}

/// The budget ticks only while a cancel-behaviour step is in flight: the
/// demo drained during `approve` (wait) spends nothing however long the
/// approval takes; drained during `fetch` (cancel, winding down) it spends
/// the whole budget and escalates.
#[test]
fn the_budget_counts_only_cancel_behaviour_steps_of_the_demo_workflow() {
    let sup = Supervisor::start(&deployment(
        "orders",
        &demo(&[
            "--step-ms",
            "1200",
            "--approve-ms",
            "3500",
            "--cleanup-ms",
            "60000",
        ]),
        "drain_timeout = \"1500ms\"",
    ));
    sup.ready_pid("orders", LONG);
    ok("send", &sup.client(&["send", "orders", "one"]));

    // Phase 1: drained while a person approves.
    sup.wait_deployment("orders", "approve in flight", LONG, |d| {
        has_step(d, "mail-1", "approve")
    });
    ok("drain", &sup.client(&["drain", "orders"]));
    let d = sup.wait_deployment("orders", "drained after the approval", LONG, |d| {
        if d["state"] == "draining" {
            assert_eq!(d["drain"]["escalated"], false, "{d}");
            assert!(
                d["drain"]["used_ms"].as_u64() < Some(1500),
                "a wait step spends no budget: {d}"
            );
        }
        d["state"] == "drained"
    });
    assert_eq!(d["drain"]["escalated"], false, "{d}");
    assert_eq!(
        (d["mail"]["inbox"].as_u64(), d["mail"]["done"].as_u64()),
        (Some(1), Some(0)),
        "the interrupted run's mail waits in the inbox: {d}"
    );
    let ev = sup.events();
    let started = first_after(&ev, "drain_started", 0);
    let paused = first_after(&ev, "drain_paused", seq(started));
    assert_eq!(paused["body"]["used_ms"], 0, "{paused}");
    let approved = ev
        .iter()
        .find(|e| e["kind"] == "step_finished" && e["body"]["step"] == "approve")
        .unwrap_or_else(|| panic!("approve finished: {ev:#?}"));
    assert!(
        at_ms(approved) > at_ms(started) + 1500,
        "the approval outlived the budget after the drain: {started} {approved}"
    );
    let ended = first_after(&ev, "drain_ended", seq(started));
    let used_waiting = ended["body"]["used_ms"].as_u64().expect("used_ms");
    assert!(used_waiting < 1500, "{ended}");
    assert!(of_kind(&sup.journal(), "cancel_committed").is_empty());

    // Phase 2: resumed, the mail comes again; drained during fetch, which
    // winds down for a minute: the budget runs and escalates.
    let last = seq(ev.last().expect("events"));
    ok("resume", &sup.client(&["resume", "orders"]));
    sup.wait_deployment("orders", "fetch in flight again", LONG, |d| {
        d["state"] == "ready" && has_step(d, "mail-1", "fetch")
    });
    ok("drain", &sup.client(&["drain", "orders"]));
    let d = sup.wait_deployment("orders", "drained after escalating", LONG, |d| {
        d["state"] == "drained"
    });
    assert_eq!(d["drain"]["escalated"], true, "{d}");
    assert_eq!(d["escalations"], 1, "{d}");
    assert_eq!(d["drain"]["used_ms"], 1500, "{d}");
    // (Whether that mail is then done or back in the inbox is the subject
    // of `a_mail_whose_run_a_drain_escalation_cancelled_is_done`.)
    assert_eq!(d["mail"]["processing"], 0, "{d}");
    let ev = sup.events();
    let started = first_after(&ev, "drain_started", last);
    let escalated = first_after(&ev, "drain_escalated", seq(started));
    assert_eq!(escalated["body"]["runs"], serde_json::json!(["mail-1"]));
    let committed = first_after(&ev, "cancel_committed", seq(escalated));
    assert_eq!(committed["body"]["run"], "mail-1");
    let fetched = first_after(&ev, "step_finished", seq(committed));
    assert_eq!(
        (
            fetched["body"]["step"].as_str(),
            fetched["body"]["outcome"].as_str()
        ),
        (Some("fetch"), Some("cancelled")),
        "{fetched}"
    );
    let ended = first_after(&ev, "drain_ended", seq(started));
    assert_eq!(ended["body"]["used_ms"], 1500, "{ended}");
    assert!(
        used_waiting < 1500,
        "waiting spent {used_waiting} ms, cancelling the whole budget"
    );
    let records = sup.journal();
    let cancels = of_kind(&records, "cancel_committed");
    assert_eq!(cancels.len(), 1, "{records:#?}");
    assert_eq!(cancels[0]["body"]["origin"], "supervisor-drain");
    assert_eq!(cancels[0]["body"]["run"], "mail-1");
    ok("journal verify", &sup.client(&["journal", "verify"]));
}

/// `wfhost cancel`: a signed operator cancel of one run, journaled and
/// applied; unknown runs and deployments are refused with what exists.
#[test]
fn operator_cancel_is_journaled_signed_and_kills_the_command() {
    let sup = Supervisor::start(&deployment("job", &exec("cancel", "sleep 1000"), ""));
    let pid = sup.ready_pid("job", LONG);
    let tree = sleeper(pid);
    let public_key = env_of(pid, "WFHOST_SUPERVISOR_KEY").expect("the child's public key");
    let run = wait_for("the run in status", LONG, || {
        steps(&sup.deployment("job")).first().map(|s| s.0.clone())
    });
    assert_eq!(run, format!("exec-{pid}"));

    let out = sup.client(&["cancel", "job", "--run", "nosuch"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("nosuch") && err.contains(&run),
        "names the runs in flight: {err}"
    );

    let out = sup.client(&["cancel", "nosuch"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("nosuch") && err.contains("known deployments: job"),
        "names the known deployments: {err}"
    );
    assert!(
        of_kind(&sup.journal(), "cancel_committed").is_empty(),
        "refusals journal nothing"
    );
    assert!(tree.iter().all(|&p| alive(p)), "refusals touch nothing");

    let said = ok("cancel", &sup.client(&["cancel", "job", "--run", &run]));
    let journal_seq: u64 = said
        .split("journal record ")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the journal seq in {said:?}"));
    wait_for("the command to be killed", LONG, || {
        tree.iter().all(|&p| !alive(p)).then_some(())
    });
    let records = sup.journal();
    let cancel = records
        .iter()
        .find(|r| seq(r) == journal_seq)
        .unwrap_or_else(|| panic!("record {journal_seq} in {records:#?}"));
    assert_eq!(cancel["kind"], "cancel_committed", "{cancel}");
    assert_eq!(cancel["deployment"], "job");
    assert_eq!(cancel["body"]["origin"], "operator", "{cancel}");
    assert_eq!(cancel["body"]["run"], run.as_str(), "{cancel}");
    let key = wfhost_ipc::key::public_from_hex(&public_key).expect("public key");
    signed_cancel(cancel, "job")
        .verify(&key)
        .expect("the journaled operator cancel verifies");
    let ev = sup.events();
    let committed = first_after(&ev, "cancel_committed", 0);
    assert_eq!(committed["body"]["journal_seq"], journal_seq);
    assert_eq!(committed["body"]["origin"], "operator");
    sup.wait_log(&format!("cancel of run {run} accepted (origin operator"));
    ok("journal verify", &sup.client(&["journal", "verify"]));
}

/// `wfhost journal verify` names the record where the journal was edited,
/// cut or reordered, and passes again once it is put back.
#[test]
fn tampering_with_the_journal_is_detected_and_named() {
    let mut sup = Supervisor::start(&deployment("job", &exec("cancel", "sleep 1000"), ""));
    // Real activity: spawn, an operator cancel of every run (and the
    // restart it causes), then a drain.
    let pid = sup.ready_pid("job", LONG);
    sup.wait_deployment("job", "its run", LONG, |d| !steps(d).is_empty());
    ok("cancel", &sup.client(&["cancel", "job"]));
    sup.wait_deployment("job", "a new child", LONG, |d| {
        d["state"] == "ready" && d["pid"].as_u64().is_some_and(|p| p != u64::from(pid))
    });
    sup.wait_deployment("job", "its run", LONG, |d| !steps(d).is_empty());
    ok("drain", &sup.client(&["drain", "job"]));
    sup.wait_deployment("job", "drained", LONG, |d| d["state"] == "drained");
    sup.signal(Signal::SIGTERM);
    assert!(sup.wait_exit(LONG).success());

    let config = sup.config().to_str().expect("utf-8").to_owned();
    let verify = || {
        let out = wfhost_tests::wfhost(&["journal", "verify", "--config", &config]);
        (out.status.code(), stdout(&out), stderr(&out))
    };
    let (code, said, err) = verify();
    assert_eq!(code, Some(0), "{said}{err}");
    let n: u64 = said
        .trim_start_matches("journal ok: ")
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a record count in {said:?}"));
    assert!(n >= 6, "several records: {said}");
    let kinds: Vec<Value> = query(&sup.db(), "SELECT kind FROM journal ORDER BY seq");
    let cancel_seq = kinds
        .iter()
        .position(|k| k[0] == "cancel_committed")
        .expect("a cancel record") as u64
        + 1;
    assert!(cancel_seq > 1 && cancel_seq < n, "{kinds:?}");

    let db = sup.db();
    let backup = db.with_extension("db.orig");
    for side in ["-wal", "-shm"] {
        let mut p = db.clone().into_os_string();
        p.push(side);
        assert!(
            std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0) == 0,
            "the stopped supervisor left a WAL behind"
        );
    }
    std::fs::copy(&db, &backup).expect("keep a copy");
    let restore = || {
        std::fs::copy(&backup, &db).expect("restore");
        let (code, said, err) = verify();
        assert_eq!(code, Some(0), "restored journal verifies: {said}{err}");
    };
    let tamper = |what: &str, script: &str, record: u64, why: &str| {
        let out = python(&db, script);
        ok(what, &out);
        let (code, said, err) = verify();
        assert_eq!(code, Some(1), "{what}: verify must fail: {said}{err}");
        assert!(
            err.contains(&format!("journal broken at record {record}:")) && err.contains(why),
            "{what}: names record {record} ({why}): {err}"
        );
        restore();
    };

    // One byte of a body (the cancel's reason or run).
    let k = cancel_seq;
    tamper(
        "edit a body",
        &format!(
            "import sqlite3, sys\n\
             c = sqlite3.connect(sys.argv[1])\n\
             b = c.execute('SELECT body FROM journal WHERE seq = {k}').fetchone()[0]\n\
             i = b.index('operator')\n\
             c.execute('UPDATE journal SET body = ? WHERE seq = {k}', (b[:i] + 'O' + b[i + 1:],))\n\
             c.commit()\n"
        ),
        k,
        "edited",
    );
    // A record in the middle deleted.
    tamper(
        "delete a record",
        &format!(
            "import sqlite3, sys\n\
             c = sqlite3.connect(sys.argv[1])\n\
             assert c.execute('DELETE FROM journal WHERE seq = {k}').rowcount == 1\n\
             c.commit()\n"
        ),
        k + 1,
        &format!("record {k} is missing"),
    );
    // Two neighbours swapped (each keeps its place in seq order).
    tamper(
        "swap two records",
        &format!(
            "import sqlite3, sys\n\
             c = sqlite3.connect(sys.argv[1])\n\
             c.execute('UPDATE journal SET seq = -1 WHERE seq = {k}')\n\
             c.execute('UPDATE journal SET seq = {k} WHERE seq = {n}')\n\
             c.execute('UPDATE journal SET seq = {n} WHERE seq = -1')\n\
             c.commit()\n",
            n = k + 1
        ),
        k,
        "does not chain",
    );
}

/// A journal that cannot be written delays the cancel, which is reported
/// and not sent until it is committed; released, the cancel goes through.
#[test]
fn a_locked_journal_delays_the_cancel_until_it_is_committed() {
    let sup = Supervisor::start(&deployment(
        "deaf",
        &exec("cancel", DEAF),
        "drain_timeout = \"2s\"",
    ));
    let pid = sup.ready_pid("deaf", LONG);
    let run = format!("exec-{pid}");
    let tree = sleeper(pid);
    sup.wait_deployment("deaf", "the cancel step in flight", LONG, |d| {
        has_step(d, &run, "command")
    });
    let db = sup.db();
    // Take the write lock as soon as the drain is on record, well before
    // the budget runs out.
    let mut locker = Locker::start(
        &db,
        "SELECT EXISTS (SELECT 1 FROM journal WHERE kind = 'drain_started') \
         AND EXISTS (SELECT 1 FROM events WHERE kind = 'drain_started')",
    );
    ok("drain", &sup.client(&["drain", "deaf"]));
    locker.expect("locked");
    assert!(
        query(
            &db,
            "SELECT seq FROM journal WHERE kind = 'cancel_committed'"
        )
        .is_empty(),
        "the budget ran out before the lock was taken; nothing to test"
    );

    // The budget runs out; the commit is refused (after the store's busy
    // timeout), reported, and nothing is sent.
    let d = sup.wait_deployment("deaf", "a refused cancel commit", LONG, |d| {
        d["cancels_pending"].as_u64() > Some(0) && d["journal_error"].is_string()
    });
    assert_eq!(d["state"], "draining", "{d}");
    assert_eq!(d["drain"]["escalated"], true, "{d}");
    let error = d["journal_error"].as_str().unwrap_or("");
    assert!(error.contains("locked"), "{d}");
    assert!(
        tree.iter().all(|&p| alive(p)),
        "the command lives: the cancel is not sent before it is committed"
    );
    assert!(
        query(
            &db,
            "SELECT seq FROM journal WHERE kind = 'cancel_committed'"
        )
        .is_empty()
    );
    let log = sup.wait_log("the journal refused a signed cancel; it is not sent until committed");
    assert!(
        !log.contains(&format!("cancel of run {run} accepted")),
        "the child got no cancel yet: {log}"
    );

    locker.release();
    wait_for("the command to be killed", LONG, || {
        tree.iter().all(|&p| !alive(p)).then_some(())
    });
    let d = sup.wait_deployment("deaf", "drained", LONG, |d| d["state"] == "drained");
    assert_eq!(d["cancels_pending"], 0, "{d}");
    assert!(d["journal_error"].is_null(), "cleared once committed: {d}");
    let records = sup.journal();
    let cancels = of_kind(&records, "cancel_committed");
    assert_eq!(
        cancels.len(),
        1,
        "committed once, not once per attempt: {records:#?}"
    );
    assert_eq!(cancels[0]["body"]["origin"], "supervisor-drain");
    assert_eq!(cancels[0]["body"]["run"], run.as_str());
    let ev = sup.events();
    let escalated = first_after(&ev, "drain_escalated", 0);
    let committed = first_after(&ev, "cancel_committed", seq(escalated));
    assert_eq!(committed["body"]["journal_seq"], seq(cancels[0]));
    sup.wait_log(&format!(
        "cancel of run {run} accepted (origin supervisor-drain"
    ));
    ok("journal verify", &sup.client(&["journal", "verify"]));
}

/// Journal records and events made while the store is briefly locked are
/// kept once it frees up (DESIGN §7: the journal is the audit trail, the
/// event log has no gaps).
#[test]
fn records_made_while_the_store_is_locked_are_not_lost() {
    let sup = Supervisor::start(&deployment("waiter", &exec("wait", "sleep 1000"), ""));
    let pid = sup.ready_pid("waiter", LONG);
    sup.wait_deployment("waiter", "its step", LONG, |d| {
        has_step(d, &format!("exec-{pid}"), "command")
    });
    let db = sup.db();
    let mut locker = Locker::start(
        &db,
        "SELECT EXISTS (SELECT 1 FROM events WHERE kind = 'step_started')",
    );
    locker.expect("locked");
    ok("drain", &sup.client(&["drain", "waiter"]));
    // Held past the store's 5 s busy timeout, so the first write of the
    // drain record fails (the scenario, not a timing assumption).
    std::thread::sleep(Duration::from_secs(7));
    locker.release();
    let d = sup.deployment("waiter");
    assert_eq!(d["state"], "draining", "{d}");
    wait_for("the drain record", LONG, || {
        (!of_kind(&sup.journal(), "drain_started").is_empty()).then_some(())
    });
    wait_for("the drain_started event", LONG, || {
        (!of_kind(&sup.events(), "drain_started").is_empty()).then_some(())
    });
}

/// A run cancelled by a signed cancel is a decision, so the demo
/// acknowledges its mail `Cancelled` (child/src/cli/demo.rs): once the drain
/// that escalated is over, the mail is done, not back in the inbox.
#[test]
fn a_mail_whose_run_a_drain_escalation_cancelled_is_done() {
    let sup = Supervisor::start(&deployment(
        "orders",
        &demo(&["--step-ms", "60000", "--cleanup-ms", "60000"]),
        "drain_timeout = \"500ms\"",
    ));
    sup.ready_pid("orders", LONG);
    ok("send", &sup.client(&["send", "orders", "one"]));
    sup.wait_deployment("orders", "fetch in flight", LONG, |d| {
        has_step(d, "mail-1", "fetch")
    });
    ok("drain", &sup.client(&["drain", "orders"]));
    let d = sup.wait_deployment("orders", "drained", LONG, |d| d["state"] == "drained");
    assert_eq!(d["drain"]["escalated"], true, "{d}");
    let ev = sup.events();
    let terminal = first_after(&ev, "run_terminal", 0);
    assert_eq!(terminal["body"]["outcome"], "cancelled", "{terminal}");
    assert_eq!(
        (d["mail"]["inbox"].as_u64(), d["mail"]["done"].as_u64()),
        (Some(0), Some(1)),
        "the cancelled run's mail is done, not redelivered: {d}\nevents: {ev:#?}"
    );
}
