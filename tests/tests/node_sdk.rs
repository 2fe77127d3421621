//! The Node SDK (`sdk/typescript`, `@wfhost/child`) as an operator meets
//! it: the `examples/node-orders` workflow hosted by `wfhost supervise` on
//! real `node`, fed by the SDK's producer client, recycled by operators
//! and by itself, drained during a wait step, and cancelled by a signed
//! cancel when a cancel step outlives the drain budget.
//!
//! These tests need the SDK built and the example's dependencies
//! installed (`scripts/test` does both):
//!
//! ```text
//! (cd sdk/typescript && npm ci && npm run build)
//! (cd examples/node-orders && npm ci)
//! ```

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use wfhost_tests::node::{example_dir, node};
use wfhost_tests::{
    LONG, Supervisor, command, deployment, describe, example_steps, mail_counts, mail_result_json,
    ok, query, wait_for,
};

// --- finding node, the SDK and the example ------------------------------

/// The keys of each step in the example's result.
const STEP_KEYS: [&str; 6] = ["at", "attempt", "finalized", "ms", "pid", "step"];

/// A deployment running `node orders.js ARGS` in the example's directory,
/// its step markers in a directory of its own under the temp dir (out of
/// the source tree; the example removes each marker once its item is done).
fn orders(id: &str, args: &[&str], extra: &str) -> String {
    let dir = example_dir();
    let node = node();
    let mut parts = vec![node.as_str(), "orders.js"];
    parts.extend_from_slice(args);
    let markers = std::env::temp_dir().join(format!("wfh-markers-{}-{id}", std::process::id()));
    deployment(
        id,
        &command(&parts),
        &format!(
            "working_dir = \"{}\"\nenv = {{ ORDERS_MARKERS = \"{}\" }}\n{extra}",
            dir.display(),
            markers.display()
        ),
    )
}

// --- what an operator reads ---------------------------------------------

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

fn of_kind<'a>(records: &'a [Value], kind: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["kind"] == kind).collect()
}

fn seq(r: &Value) -> u64 {
    r["seq"].as_u64().expect("seq")
}

/// The first record of `kind` after seq `after` that `pred` accepts.
fn first_after<'a>(
    records: &'a [Value],
    kind: &str,
    after: u64,
    pred: impl Fn(&Value) -> bool,
) -> &'a Value {
    records
        .iter()
        .find(|r| r["kind"] == kind && seq(r) > after && pred(r))
        .unwrap_or_else(|| panic!("no matching {kind} after seq {after} in {records:#?}"))
}

/// The log once it holds `line`.
fn log_with(sup: &Supervisor, line: &str) -> String {
    wait_for(&format!("the log line {line:?}"), LONG, || {
        let log = sup.plain_log();
        log.contains(line).then_some(log)
    })
}

/// Every row of the `mail` table: `(id, state, outcome, deliveries)`.
fn mail_rows(sup: &Supervisor) -> Vec<(u64, String, Option<String>, u64)> {
    let rows = query(
        &sup.db(),
        "SELECT id, state, outcome, deliveries FROM mail ORDER BY id",
    );
    serde_json::from_value(Value::Array(rows)).expect("mail rows")
}

// --- the producer ---------------------------------------------------------

/// `node produce.js` (the SDK's producer client) sending `count` orders,
/// one every `interval_ms`, in the background.
fn producer(sup: &Supervisor, id: &str, count: usize, interval_ms: u64) -> Child {
    Command::new(node())
        .arg("produce.js")
        .arg("--config")
        .arg(sup.config())
        .args(["--deployment", id, "--count", &count.to_string()])
        .args(["--interval-ms", &interval_ms.to_string()])
        .current_dir(example_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run node produce.js")
}

/// The ids the producer printed, one JSON line per accepted order, once
/// it has exited successfully.
fn produced_ids(child: Child) -> Vec<u64> {
    let out = child.wait_with_output().expect("wait for the producer");
    assert!(
        out.status.success(),
        "the producer failed: {}",
        describe(&out)
    );
    BufReader::new(out.stdout.as_slice())
        .lines()
        .map_while(Result::ok)
        .map(|l| {
            let v: Value = serde_json::from_str(&l).unwrap_or_else(|e| panic!("{l:?}: {e}"));
            assert_eq!(v["new"], true, "{l}");
            v["id"]
                .as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| panic!("no id in {l}"))
        })
        .collect()
}

// --- the tests --------------------------------------------------------------

/// 200 orders sent by the SDK's client while the Node child is recycled by
/// operators and by itself: every id is done exactly once, none lost or
/// repeated, and status names the SDK.
#[test]
fn the_node_example_processes_200_orders_exactly_once_across_operator_and_self_recycles() {
    const ITEMS: usize = 200;
    let sup = Supervisor::start(&orders(
        "orders-node",
        &[
            "--recycle-every",
            "25",
            "--fetch-ms",
            "5",
            "--approve-ms",
            "5",
        ],
        "drain_timeout = \"5s\"",
    ));
    sup.ready_pid("orders-node", LONG);
    let d = sup.deployment("orders-node");
    assert_eq!(d["implementation"], "@wfhost/child/0.1.0", "{d}");
    assert_eq!(d["takes_mail"], true, "{d}");

    let started = Instant::now();
    let sending = producer(&sup, "orders-node", ITEMS, 8);
    // Operator recycles while the orders flow, until two have counted (one
    // asked for while a self recycle is under way joins it instead).
    let operator =
        |sup: &Supervisor| sup.deployment("orders-node")["recycles"]["operator"].as_u64();
    while operator(&sup) < Some(2) {
        assert!(
            started.elapsed() < LONG,
            "two operator recycles in {LONG:?}"
        );
        std::thread::sleep(Duration::from_millis(400));
        let out = sup.client(&["recycle", "orders-node", "--reason", "node test"]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    }
    let mut accepted = produced_ids(sending);
    assert_eq!(accepted.len(), ITEMS, "every send printed an id");
    accepted.sort_unstable();
    accepted.dedup();
    assert_eq!(accepted.len(), ITEMS, "distinct ids");

    let d = sup.wait_deployment(
        "orders-node",
        "every order done, and 5 recycles",
        Duration::from_secs(90),
        |d| {
            let r = &d["recycles"];
            let total = r["operator"].as_u64().unwrap_or(0) + r["self"].as_u64().unwrap_or(0);
            mail_counts(d) == (0, 0, ITEMS as u64) && total >= 5 && d["state"] == "ready"
        },
    );
    let elapsed = started.elapsed();
    let r = &d["recycles"];
    assert!(
        r["operator"].as_u64() >= Some(2) && r["self"].as_u64() >= Some(3),
        "recycles of both origins: {d}"
    );
    assert_eq!(d["implementation"], "@wfhost/child/0.1.0", "{d}");

    // The store: exactly the accepted ids, each done.
    let rows = mail_rows(&sup);
    let ids: Vec<u64> = rows.iter().map(|r| r.0).collect();
    assert_eq!(ids, accepted, "the store holds exactly the accepted mail");
    let not_done: Vec<_> = rows.iter().filter(|r| r.1 != "done").collect();
    assert!(not_done.is_empty(), "not done: {not_done:?}");
    let not_succeeded: Vec<_> = rows
        .iter()
        .filter(|r| r.2.as_deref() != Some("succeeded"))
        .collect();
    assert!(not_succeeded.is_empty(), "{not_succeeded:?}");

    // Each order's result, as the store keeps it: approved, both steps,
    // the order the producer sent (`order-1` … `order-200`), with the same
    // shape whether a step ran or was finalized from its marker.
    let results = query(
        &sup.db(),
        "SELECT id, CAST(result AS TEXT) FROM mail ORDER BY id",
    );
    let mut orders = std::collections::BTreeSet::new();
    let mut finalized_in_results = 0;
    for row in &results {
        let (id, text): (u64, String) = serde_json::from_value(row.clone()).expect("a result row");
        let result: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("mail {id}: {e}: {text}"));
        assert_eq!(
            example_steps(&result, &STEP_KEYS),
            ["fetch", "approve"],
            "{result}"
        );
        assert_eq!(result["status"], "approved", "{result}");
        assert_eq!(result["mail"], id, "{result}");
        assert!(result["stopped"].is_null(), "{result}");
        finalized_in_results += result["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|s| s["finalized"] == true)
            .count();
        orders.insert(result["order"].as_str().expect("order").to_owned());
    }
    assert_eq!(
        orders,
        (1..=ITEMS).map(|n| format!("order-{n}")).collect(),
        "one result per order sent"
    );
    // And as a caller reads it.
    let (end, result) = mail_result_json(&sup, accepted[0]);
    assert_eq!(
        (end["outcome"].as_str(), end["state"].as_str()),
        (Some("succeeded"), Some("done")),
        "{end}"
    );
    assert_eq!(result["status"], "approved", "{result}");

    // The event log: one mail_done per id.
    let events = sup.events();
    let mut done: BTreeMap<u64, u32> = BTreeMap::new();
    for e in of_kind(&events, "mail_done") {
        *done
            .entry(e["body"]["id"].as_u64().expect("id"))
            .or_default() += 1;
    }
    let wrong: Vec<_> = accepted
        .iter()
        .filter(|id| done.get(id) != Some(&1))
        .map(|id| (id, done.get(id).copied().unwrap_or(0)))
        .collect();
    assert!(wrong.is_empty(), "ids not done exactly once: {wrong:?}");
    assert_eq!(done.len(), ITEMS, "no mail_done for an unknown id");

    // What the children said: each step of each order was done once, and
    // a step was finalized instead of re-run only where an earlier child
    // had said it was done (its marker proves it).
    let log = sup.plain_log();
    let mut done: BTreeMap<(u64, String), u32> = BTreeMap::new();
    let mut redelivered = std::collections::BTreeSet::new();
    for line in log.lines() {
        let Some((_, rest)) = line.split_once("node-orders: mail ") else {
            continue;
        };
        let Some((id, what)) = rest.split_once(": ") else {
            continue;
        };
        let Ok(id) = id.parse::<u64>() else { continue };
        let words: Vec<&str> = what.split_whitespace().collect();
        match words.as_slice() {
            [step, "done"] => *done.entry((id, (*step).to_owned())).or_default() += 1,
            [step, "already", "done", ..] => {
                redelivered.insert(id);
                assert!(
                    done.contains_key(&(id, (*step).to_owned())),
                    "mail {id}: {step} finalized before any child did it:\n{log}"
                );
            }
            _ => {}
        }
    }
    for id in &accepted {
        for step in ["fetch", "approve"] {
            assert_eq!(
                done.get(&(*id, step.to_owned())),
                Some(&1),
                "mail {id}: {step} not done exactly once:\n{log}"
            );
        }
    }
    assert!(
        log.contains("node-orders: processed 25 items: asking to be recycled"),
        "{log}"
    );

    // Spawn → Ready of each Node child, from the event log.
    let mut spawn_ready: Vec<u64> = of_kind(&events, "ready")
        .iter()
        .filter_map(|ready| {
            let pid = &ready["body"]["pid"];
            let spawned = events
                .iter()
                .find(|e| e["kind"] == "spawned" && e["body"]["pid"] == *pid)?;
            Some(ready["at_ms"].as_u64()? - spawned["at_ms"].as_u64()?)
        })
        .collect();
    spawn_ready.sort_unstable();
    eprintln!(
        "node-orders: {ITEMS} orders done exactly once in {:.1} s; recycles: operator {}, self {}; \
         {} redelivered and finalized ({finalized_in_results} steps finalized in results); \
         spawn→Ready of {} Node children: min {} ms, median {} ms, max {} ms",
        elapsed.as_secs_f64(),
        r["operator"],
        r["self"],
        redelivered.len(),
        spawn_ready.len(),
        spawn_ready.first().copied().unwrap_or(0),
        spawn_ready.get(spawn_ready.len() / 2).copied().unwrap_or(0),
        spawn_ready.last().copied().unwrap_or(0),
    );
}

/// Drained while a person approves (a wait step): the budget stays paused,
/// the approval finishes and its order is acknowledged, then `Drained`,
/// and the child exits cleanly.
#[test]
fn a_drain_during_a_node_wait_step_pauses_the_budget_until_the_step_ends() {
    let sup = Supervisor::start(&orders(
        "approvals",
        &["--fetch-ms", "10", "--approve-ms", "3000"],
        "drain_timeout = \"1s\"",
    ));
    let pid = sup.ready_pid("approvals", LONG);
    let out = sup.client(&["send", "approvals", "{\"order\":\"A-1\"}"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    sup.wait_deployment("approvals", "approve in flight", LONG, |d| {
        steps(d) == [("order-1".into(), "approve".into(), "wait".into())]
    });

    let out = sup.client(&["drain", "approvals"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let first = sup.wait_deployment("approvals", "draining", LONG, |d| d["state"] == "draining");
    let used_before = first["drain"]["used_ms"].as_u64().expect("used_ms");
    std::thread::sleep(Duration::from_secs(1));
    let later = sup.deployment("approvals");
    assert_eq!(later["state"], "draining", "still approving: {later}");
    assert_eq!(
        later["drain"]["used_ms"].as_u64(),
        Some(used_before),
        "the budget did not grow across 1 s of a wait step: {first} then {later}"
    );
    assert!(used_before < 1000, "{first}");
    assert_eq!(later["drain"]["escalated"], false, "{later}");

    let d = sup.wait_deployment("approvals", "drained", LONG, |d| d["state"] == "drained");
    assert_eq!(d["drain"]["escalated"], false, "{d}");
    assert!(d["drain"]["used_ms"].as_u64() < Some(1000), "{d}");
    assert!(d["pid"].is_null(), "the child is gone: {d}");
    assert_eq!(
        mail_counts(&d),
        (0, 0, 1),
        "the approved order is done: {d}"
    );

    let ev = sup.events();
    let started = first_after(&ev, "drain_started", 0, |_| true);
    let paused = first_after(&ev, "drain_paused", seq(started), |_| true);
    assert_eq!(paused["body"]["used_ms"], 0, "{paused}");
    let approved = first_after(&ev, "step_finished", seq(started), |e| {
        e["body"]["step"] == "approve"
    });
    assert_eq!(approved["body"]["outcome"], "succeeded", "{approved}");
    let acked = first_after(&ev, "mail_done", seq(started), |_| true);
    let drained = first_after(&ev, "child_drained", seq(approved), |_| true);
    assert!(
        seq(acked) < seq(drained),
        "the ack came before Drained: {acked} {drained}"
    );
    let exited = first_after(&ev, "exited", seq(drained), |_| true);
    assert_eq!(exited["body"]["pid"], pid, "{exited}");
    assert_eq!(
        exited["body"]["reason"], "drained",
        "a clean exit at the drain's end: {exited}"
    );
    assert!(of_kind(&ev, "drain_escalated").is_empty(), "{ev:#?}");
    assert!(of_kind(&sup.journal(), "cancel_committed").is_empty());
    log_with(&sup, "@wfhost/child: drain requested (budget 1000 ms)");

    // The approved order's result, as a caller reads it.
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
            result["mail"].as_u64(),
            result["status"].as_str(),
            result["attempt"].as_u64()
        ),
        (Some("A-1"), Some(1), Some("approved"), Some(1)),
        "{result}"
    );
    let approve = &result["steps"][1];
    assert_eq!(approve["pid"], pid, "{result}");
    assert_eq!(approve["finalized"], false, "{result}");
    assert!(
        approve["ms"].as_u64().is_some_and(|ms| ms >= 3000),
        "approve took its 3 s: {result}"
    );
}

/// A Node cancel step that ignores the drain outlives the budget: the
/// supervisor journals a signed cancel, the SDK verifies it, the step's
/// signal aborts with the cancel's reason, and the step ends cancelled.
#[test]
fn a_node_cancel_step_ignoring_the_drain_is_cancelled_by_a_verified_signed_cancel() {
    let sup = Supervisor::start(&orders(
        "stubborn",
        &["--fetch-ms", "60000", "--fetch-ignores-drain"],
        "drain_timeout = \"1s\"",
    ));
    sup.ready_pid("stubborn", LONG);
    let out = sup.client(&["send", "stubborn", "{\"order\":\"S-1\"}"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    sup.wait_deployment("stubborn", "fetch in flight", LONG, |d| {
        steps(d) == [("order-1".into(), "fetch".into(), "cancel".into())]
    });

    let out = sup.client(&["drain", "stubborn"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let d = sup.wait_deployment("stubborn", "drained after escalating", LONG, |d| {
        d["state"] == "drained"
    });
    assert_eq!(d["drain"]["escalated"], true, "{d}");
    assert_eq!(d["drain"]["used_ms"], 1000, "the whole budget: {d}");
    assert_eq!(d["escalations"], 1, "{d}");

    // The journal holds the signed cancel, committed before it was sent.
    let records = sup.journal();
    let cancels = of_kind(&records, "cancel_committed");
    assert_eq!(cancels.len(), 1, "{records:#?}");
    let body = &cancels[0]["body"];
    assert_eq!(body["origin"], "supervisor-drain", "{body}");
    assert_eq!(body["run"], "order-1", "{body}");
    assert_eq!(body["reason"], "drain budget of 1s spent", "{body}");
    assert_eq!(
        body["signature"].as_str().map(str::len),
        Some(128),
        "{body}"
    );

    // The SDK verified it, and the step's signal carried its reason.
    log_with(
        &sup,
        "@wfhost/child: cancel of run order-1 accepted (origin supervisor-drain, reason \"drain budget of 1s spent\")",
    );
    log_with(
        &sup,
        "node-orders: mail 1: fetch stopped: cancelled by a verified cancel (origin supervisor-drain): drain budget of 1s spent",
    );

    let ev = sup.events();
    let committed = first_after(&ev, "cancel_committed", 0, |_| true);
    assert_eq!(committed["body"]["run"], "order-1", "{committed}");
    let finished = first_after(&ev, "step_finished", seq(committed), |_| true);
    assert_eq!(
        (
            finished["body"]["step"].as_str(),
            finished["body"]["outcome"].as_str()
        ),
        (Some("fetch"), Some("cancelled")),
        "{finished}"
    );
    let terminal = first_after(&ev, "run_terminal", seq(committed), |_| true);
    assert_eq!(terminal["body"]["outcome"], "cancelled", "{terminal}");
    // A verified cancel is a decision: the order is done, cancelled.
    let rows = mail_rows(&sup);
    assert_eq!(
        rows,
        [(1, "done".to_owned(), Some("cancelled".to_owned()), 1)],
        "{rows:?}"
    );
    // Its result says so: no step done, fetch stopped by the signed cancel.
    let (end, result) = mail_result_json(&sup, 1);
    assert_eq!(end["outcome"], "cancelled", "{end}");
    assert_eq!(
        example_steps(&result, &STEP_KEYS),
        Vec::<String>::new(),
        "{result}"
    );
    assert_eq!(
        (result["order"].as_str(), result["status"].as_str()),
        (Some("S-1"), Some("cancelled")),
        "{result}"
    );
    assert_eq!(result["stopped"]["step"], "fetch", "{result}");
    assert!(
        result["stopped"]["reason"]
            .as_str()
            .is_some_and(|r| r.ends_with("drain budget of 1s spent")),
        "{result}"
    );
    let out = sup.client(&["journal", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
}

/// `wfhost call` of an order prints its result; `wfhost mail cancel` of an
/// order waiting for its approval (a wait step, which a drain waits for)
/// is acknowledged by the child, stops the approval at once, and the order
/// ends cancelled with a result naming the step it stopped.
#[test]
fn a_node_order_called_returns_its_result_and_one_cancelled_in_approval_ends_cancelled() {
    let sup = Supervisor::start(&orders(
        "calls",
        &["--fetch-ms", "10", "--approve-ms", "10"],
        "",
    ));
    let pid = sup.ready_pid("calls", LONG);
    let out = sup.client(&["call", "calls", "{\"order\":\"C-1\"}", "--key", "C-1"]);
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
    // The same key again: the stored result, not a second order.
    let again = sup.client(&["call", "calls", "{\"order\":\"C-1\"}", "--key", "C-1"]);
    assert_eq!(again.stdout, out.stdout, "{}", describe(&again));

    let out = sup.client(&["send", "calls", "{\"order\":\"C-2\",\"approve_ms\":60000}"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    sup.wait_deployment("calls", "approve in flight", LONG, |d| {
        steps(d) == [("order-2".into(), "approve".into(), "wait".into())]
    });
    let asked = Instant::now();
    let out = sup.client(&[
        "mail",
        "cancel",
        "2",
        "--reason",
        "changed my mind",
        "--wait",
    ]);
    assert_eq!(out.status.code(), Some(0), "stopped: {}", describe(&out));
    let said = wfhost_tests::stdout(&out) + &wfhost_tests::stderr(&out);
    assert!(
        said.contains(": acknowledged ("),
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
    log_with(&sup, "node-orders: mail 2: acknowledged (cancelled)");
    assert_eq!(
        sup.deployment("calls")["pid"],
        pid,
        "the same child serves on"
    );
}

/// `wfhost questions --json`, one object per open question.
fn open_questions(sup: &Supervisor) -> Vec<Value> {
    wfhost_tests::json_lines(&ok("questions", &sup.client(&["questions", "--json"])))
}

#[test]
fn a_node_order_asks_a_person_who_approves_one_and_rejects_another_across_a_recycle() {
    let sup = Supervisor::start(&orders(
        "asks",
        &["--fetch-ms", "10", "--approval", "ask"],
        "drain_timeout = \"60s\"",
    ));
    let first = sup.ready_pid("asks", LONG);
    for order in ["A-1", "A-2"] {
        let payload = format!("{{\"order\":\"{order}\"}}");
        ok("send", &sup.client(&["send", "asks", &payload]));
    }
    let mut open = wait_for("two questions", LONG, || {
        let open = open_questions(&sup);
        (open.len() == 2).then_some(open)
    });
    // Asked concurrently: listed oldest first, in either order.
    open.sort_by_key(|q| q["id"].as_u64());
    assert!(open.iter().all(|q| q["key"] == "approve"), "{open:?}");
    assert_eq!(open[0]["prompt"]["order"], "A-1", "{open:?}");
    // A recycle while both wait: it does not wait for the people.
    let began = Instant::now();
    ok("recycle", &sup.client(&["recycle", "asks"]));
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "{:?}",
        began.elapsed()
    );
    let second = sup.ready_pid("asks", LONG);
    assert_ne!(first, second);
    let ids: Vec<u64> = open.iter().filter_map(|q| q["id"].as_u64()).collect();
    ok(
        "answer",
        &sup.client(&[
            "answer",
            &ids[0].to_string(),
            "approve",
            r#"{"approved":true}"#,
            "--by",
            "ana",
        ]),
    );
    ok(
        "answer",
        &sup.client(&[
            "answer",
            &ids[1].to_string(),
            "approve",
            r#"{"approved":false,"note":"over budget"}"#,
        ]),
    );
    for id in &ids {
        let out = sup.client(&[
            "mail",
            "result",
            &id.to_string(),
            "--wait",
            "--timeout",
            "60s",
        ]);
        ok("mail result", &out);
    }
    let (end, approved) = mail_result_json(&sup, ids[0]);
    assert_eq!(end["outcome"], "succeeded", "{end}");
    assert_eq!(approved["status"], "approved", "{approved}");
    assert_eq!(
        approved["attempt"], 2,
        "run again after the recycle: {approved}"
    );
    let (_, rejected) = mail_result_json(&sup, ids[1]);
    assert_eq!(rejected["status"], "rejected", "{rejected}");
    assert!(rejected.to_string().contains("over budget"), "{rejected}");
    // Given back at the recycle, not charged, asked once each.
    let events = sup.events();
    assert_eq!(of_kind(&events, "mail_given_back").len(), 2, "{events:?}");
    assert_eq!(of_kind(&sup.journal(), "question_asked").len(), 2);
}
