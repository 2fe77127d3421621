//! `examples/node-orders` recycled and killed while it is busy: every
//! order's steps run exactly once, and a redelivered order is finalized
//! only as far as the child's own durable markers prove work done.
//!
//! The supervisor hands a child up to 32 items ahead. A recycle gives back
//! the items the old child was handed but never started, and they come to
//! the next child with `attempt` 2: an attempt above 1 says only that an
//! earlier child held the item without acknowledging it, not that anyone
//! worked on it. A child that finalized every redelivery acknowledged
//! orders nobody had fetched; this test catches that.
//!
//! Needs the SDK built and the example's dependencies installed
//! (`scripts/test` does both):
//!
//! ```text
//! (cd sdk/typescript && npm ci && npm run build)
//! (cd examples/node-orders && npm ci)
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use wfhost_tests::node::{example_dir, node};
use wfhost_tests::{
    LONG, Supervisor, TempDir, command, deployment, describe, mail_counts, query, wait_for,
};

const ORDERS: usize = 20;
const DEP: &str = "orders-node";
const STEPS: [&str; 2] = ["fetch", "approve"];

/// One line the example printed: the child's pid, the mail id, and what
/// follows `mail ID: `.
struct Said {
    pid: u32,
    id: u64,
    what: String,
}

/// Every `node-orders: mail ID: …` line of the supervisor's log, in order.
fn said(log: &str) -> Vec<Said> {
    log.lines()
        .filter_map(|l| {
            let (head, rest) = l.split_once("] stdout: node-orders: mail ")?;
            let pid = head.rsplit_once('[')?.1.parse().ok()?;
            let (id, what) = rest.split_once(": ")?;
            Some(Said {
                pid,
                id: id.parse().ok()?,
                what: what.to_owned(),
            })
        })
        .collect()
}

/// The steps a line claims done without running them: `S already done
/// (marker …): finalizing …` claims S; any other line that finalizes (as
/// the example once did for every redelivery) claims the whole order.
fn finalized_steps(what: &str) -> Vec<&'static str> {
    if let Some(step) = STEPS
        .iter()
        .find(|s| what.starts_with(&format!("{s} already done")))
    {
        return vec![step];
    }
    if what.contains("finaliz") {
        return STEPS.to_vec();
    }
    vec![]
}

/// The run of the `approve` step in flight, if one is.
fn approving(d: &Value) -> Option<String> {
    d["steps"].as_array()?.iter().find_map(|s| {
        (s["step"] == "approve")
            .then(|| s["run"].as_str().map(str::to_owned))
            .flatten()
    })
}

#[test]
fn a_busy_node_child_recycled_and_killed_runs_every_order_exactly_once_and_finalizes_only_marked_steps()
 {
    let markers = TempDir::new();
    let node = node();
    let dir = example_dir();
    let marker_dir = markers.path().display().to_string();
    let sup = Supervisor::start(&deployment(
        DEP,
        &command(&[
            &node,
            "orders.js",
            "--fetch-ms",
            "150",
            "--approve-ms",
            "400",
        ]),
        // The markers directory through the environment (the example's
        // --markers does the same), in a directory of this test's own.
        &format!(
            "working_dir = \"{}\"\ndrain_timeout = \"10s\"\nenv = {{ ORDERS_MARKERS = \"{marker_dir}\" }}",
            dir.display()
        ),
    ));
    let first = sup.ready_pid(DEP, LONG);

    // All the orders at once, through the SDK's producer client: the child
    // is handed them ahead of its work.
    let out = Command::new(&node)
        .arg("produce.js")
        .arg("--config")
        .arg(sup.config())
        .args(["--deployment", DEP, "--count", &ORDERS.to_string()])
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run node produce.js");
    assert!(out.status.success(), "the producer: {}", describe(&out));
    let mut accepted: Vec<u64> = BufReader::new(out.stdout.as_slice())
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
        .collect();
    accepted.sort_unstable();
    accepted.dedup();
    assert_eq!(accepted.len(), ORDERS, "distinct ids: {accepted:?}");

    // A recycle while the first child is busy, with most orders in hand
    // but not started.
    sup.wait_deployment(DEP, "two orders done, more in hand", LONG, |d| {
        let (_, processing, done) = mail_counts(d);
        done >= 2 && processing >= 5
    });
    let out = sup.client(&["recycle", DEP, "--reason", "busy recycle"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let second = sup.ready_pid(DEP, LONG);
    assert_ne!(first, second, "a new child");

    // A kill while the new child has an order's approval in flight: that
    // order's fetch is done and marked, so the next child finalizes it.
    // (A child that finalizes every redelivery may be done before any
    // approval is seen; the checks below then say what it did wrong.)
    let d = sup.wait_deployment(DEP, "an approval in flight", LONG, |d| {
        (d["pid"] == second && approving(d).is_some()) || mail_counts(d).2 == ORDERS as u64
    });
    let killed_run = approving(&d);
    if killed_run.is_some() {
        let out = sup.client(&["kill", DEP]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    }

    let d = sup.wait_deployment(DEP, "every order done", Duration::from_secs(90), |d| {
        mail_counts(d) == (0, 0, ORDERS as u64) && d["state"] == "ready"
    });
    if killed_run.is_some() {
        assert!(
            d["pid"] != second && d["pid"].is_u64(),
            "a third child serves: {d}"
        );
    }

    // The store: every order done and succeeded, some delivered again.
    let rows = query(
        &sup.db(),
        "SELECT id, state, outcome, deliveries, starts FROM mail ORDER BY id",
    );
    let rows: Vec<(u64, String, Option<String>, u64, u64)> =
        serde_json::from_value(Value::Array(rows)).expect("mail rows");
    assert_eq!(
        rows.iter().map(|r| r.0).collect::<Vec<_>>(),
        accepted,
        "the store holds exactly the accepted mail"
    );
    let wrong: Vec<_> = rows
        .iter()
        .filter(|r| r.1 != "done" || r.2.as_deref() != Some("succeeded"))
        .collect();
    assert!(wrong.is_empty(), "not done and succeeded: {wrong:?}");
    let redelivered: BTreeSet<u64> = rows.iter().filter(|r| r.3 > 1).map(|r| r.0).collect();

    // What the children said. Each step of each order ran to its end
    // exactly once, across the three children.
    let log = sup.plain_log();
    let lines = said(&log);
    let mut ran: BTreeMap<(u64, &str), Vec<u32>> = BTreeMap::new();
    for l in &lines {
        for step in STEPS {
            if l.what == format!("{step} done") {
                ran.entry((l.id, step)).or_default().push(l.pid);
            }
        }
    }
    let not_once: Vec<_> = accepted
        .iter()
        .flat_map(|&id| STEPS.map(|s| (id, s)))
        .filter_map(|k| {
            let pids = ran.get(&k).cloned().unwrap_or_default();
            (pids.len() != 1).then_some((k, pids))
        })
        .collect();
    assert!(
        not_once.is_empty(),
        "steps not run exactly once ((mail, step) → the pids that ran it; none means it was \
         acknowledged without being done): {not_once:?}\n{log}"
    );

    // Nothing finalized that no earlier line proves done.
    let mut done_so_far: BTreeSet<(u64, &str)> = BTreeSet::new();
    let mut finalized: Vec<(u64, &str, u32)> = vec![];
    for l in &lines {
        for step in finalized_steps(&l.what) {
            assert!(
                done_so_far.contains(&(l.id, step)),
                "mail {}: child {} finalized {step} that no child had done: {:?}\n{log}",
                l.id,
                l.pid,
                l.what
            );
            finalized.push((l.id, step, l.pid));
        }
        for step in STEPS {
            if l.what == format!("{step} done") {
                done_so_far.insert((l.id, step));
            }
        }
    }

    // The scenario happened: orders handed ahead and given back unstarted
    // were delivered again with the same attempt (protocol 3: an attempt
    // is a start) and run once by the next child; the killed approval's
    // order was started twice and had its fetch finalized from its marker.
    let unstarted_back: BTreeSet<u64> = rows
        .iter()
        .filter(|r| r.3 > 1 && r.4 == 1)
        .map(|r| r.0)
        .collect();
    assert!(
        unstarted_back.len() >= 5,
        "after the recycle, orders handed ahead came back uncounted, as attempt 1: \
         {unstarted_back:?} (redelivered in the store: {redelivered:?})\n{log}"
    );
    let ran_in_full: BTreeSet<u64> = lines
        .iter()
        .filter(|l| {
            l.what
                .contains("no marker: no step of it is known done, running it in full")
        })
        .map(|l| l.id)
        .collect();
    assert!(
        ran_in_full.is_subset(&redelivered),
        "{ran_in_full:?} ⊆ {redelivered:?}"
    );
    let killed_run = killed_run.expect("the kill came while an approval was in flight");
    let killed: u64 = killed_run
        .strip_prefix("order-")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a run order-ID: {killed_run}"));
    assert!(
        finalized
            .iter()
            .any(|&(id, step, _)| id == killed && step == "fetch"),
        "mail {killed} (its approval killed) had its fetch finalized from its marker: {finalized:?}\n{log}"
    );
    assert!(
        finalized.iter().all(|&(_, step, _)| step == "fetch"),
        "approvals are waited for by a drain and never finalized here: {finalized:?}"
    );

    // The killed order's result, as a caller reads it: approved, its fetch
    // finalized from the marker the killed child wrote (and said so), its
    // approval run by the next child, in the same shape as any order's.
    let out = sup.client(&["mail", "result", &killed.to_string(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let end: Value = serde_json::from_slice(&out.stdout).expect("mail result --json");
    let result: Value = serde_json::from_str(end["result_text"].as_str().expect("a UTF-8 result"))
        .unwrap_or_else(|e| panic!("the result is JSON: {e}: {end}"));
    assert_eq!(
        (result["mail"].as_u64(), result["status"].as_str()),
        (Some(killed), Some("approved")),
        "{result}"
    );
    let (fetch, approve) = (&result["steps"][0], &result["steps"][1]);
    // Started again after the kill (and maybe after the recycle too): the
    // approval is the last attempt's, the fetch an earlier one's.
    let attempt = result["attempt"].as_u64().expect("attempt");
    assert!(attempt >= 2, "{result}");
    assert_eq!(approve["attempt"], attempt, "{result}");
    assert!(fetch["attempt"].as_u64() < Some(attempt), "{result}");
    assert_eq!(
        (fetch["step"].as_str(), fetch["finalized"].as_bool()),
        (Some("fetch"), Some(true)),
        "{result}"
    );
    assert_eq!(
        (approve["step"].as_str(), approve["finalized"].as_bool()),
        (Some("approve"), Some(false)),
        "{result}"
    );
    let fetched_by = lines
        .iter()
        .find(|l| l.id == killed && l.what == "fetch done")
        .map(|l| l.pid)
        .expect("a child said it fetched the killed order");
    assert_eq!(fetch["pid"], fetched_by, "{result}");
    assert_eq!(
        approve["pid"], d["pid"],
        "the third child approved: {result}"
    );
    assert_eq!(
        result["steps"].as_array().map(Vec::len),
        Some(2),
        "{result}"
    );
    // Every order ends approved with both steps.
    for row in query(
        &sup.db(),
        "SELECT id, CAST(result AS TEXT) FROM mail ORDER BY id",
    ) {
        let (id, text): (u64, String) = serde_json::from_value(row).expect("a result row");
        let r: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("mail {id}: {e}"));
        let names: Vec<&str> = r["steps"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["step"].as_str())
            .collect();
        assert_eq!(
            (r["mail"].as_u64(), r["status"].as_str(), names),
            (Some(id), Some("approved"), vec!["fetch", "approve"]),
            "{r}"
        );
    }

    // Acknowledged orders leave no markers behind.
    wait_for("the markers of acknowledged orders removed", LONG, || {
        let left: Vec<_> = std::fs::read_dir(markers.path())
            .expect("the markers directory")
            .map_while(Result::ok)
            .map(|e| e.file_name())
            .collect();
        left.is_empty().then_some(())
    });

    eprintln!(
        "node-orders under recycle and kill: {ORDERS} orders, each step run once; {} redelivered, \
         {} of them given back unstarted, {} run in full after the recycle, finalized from \
         markers: {finalized:?}",
        redelivered.len(),
        unstarted_back.len(),
        ran_in_full.len()
    );
}
