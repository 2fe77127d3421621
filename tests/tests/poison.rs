//! Poison mail as an operator meets it (issue 14, item 4; DESIGN §6): an
//! item that makes every child exit is delivered `max_deliveries` times
//! (the child sees attempts 1 to 5), then quarantined as dead, journaled
//! as `mail_dead`, while the 50 items sent with it are each done once and
//! the deployment never fails; `wfhost mail list|show|retry|purge` show
//! it and act on it. A recycle the child drains for charges held mail no
//! failure, nor do the supervisor's own stop (SIGTERM) and crash (SIGKILL).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use nix::sys::signal::Signal;
use serde_json::Value;
use wfhost_tests::postgres::PgServer;
use wfhost_tests::{LONG, Supervisor, deployment, describe, json_lines, stderr, stdout, testchild};

/// The cause the store keeps when `wfh-testchild poison` meets poison.
const POISONED: &str = "exited unexpectedly: exit status 3";

/// How the supervisor words the same end when the child exits with frames
/// it never read (the first crash, with a window of mail queued): the
/// kernel resets the socket, and the read error is taken for a protocol
/// violation before the exit is seen.
const RESET: &str = "protocol violation: control channel I/O: Connection reset by peer";

/// Whether `how` is the poisoned child's end, in either wording.
fn poisoned(how: &Value) -> bool {
    how.as_str()
        .is_some_and(|h| h == POISONED || h.starts_with(RESET))
}

/// A deployment `id` of `wfh-testchild poison`, cured once `cured` exists.
fn poison_deployment(id: &str, cured: &Path, extra: &str) -> String {
    deployment(
        id,
        &testchild("poison"),
        &format!("env = {{ WFH_CURED = \"{}\" }}\n{extra}", cured.display()),
    )
}

/// `wfhost send DEPLOYMENT PAYLOAD`; returns the id.
fn send(sup: &Supervisor, id: &str, payload: &str) -> u64 {
    let out = sup.client(&["send", id, payload]);
    stdout(&out)
        .trim()
        .strip_prefix("accepted mail ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("send failed: {}", describe(&out)))
}

/// Runs a client command that must succeed; returns its stdout.
fn ok(sup: &Supervisor, args: &[&str]) -> String {
    let out = sup.client(args);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", describe(&out));
    stdout(&out)
}

/// Runs a client command that must fail with `code`; returns its stderr.
fn refused(sup: &Supervisor, args: &[&str], code: i32) -> String {
    let out = sup.client(args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "{args:?}: {}",
        describe(&out)
    );
    stderr(&out)
}

/// `wfhost mail show ID --json`.
fn item(sup: &Supervisor, id: u64) -> Value {
    let text = ok(sup, &["mail", "show", &id.to_string(), "--json"]);
    serde_json::from_str(&text).expect("mail show JSON")
}

/// An item's `(attempts, failures)`.
fn tries(v: &Value) -> (Option<u64>, Option<u64>) {
    (v["attempts"].as_u64(), v["failures"].as_u64())
}

/// `(inbox, processing, done, dead)` of a deployment's status.
fn counts(d: &Value) -> (u64, u64, u64, u64) {
    let n = |k: &str| d["mail"][k].as_u64().unwrap_or(u64::MAX);
    (n("inbox"), n("processing"), n("done"), n("dead"))
}

/// Every delivery the poison children printed: id → attempts, ascending
/// (children's output is logged by a task each, so lines of a child that
/// just exited and of its successor may interleave).
fn attempts(sup: &Supervisor) -> BTreeMap<u64, Vec<u64>> {
    let mut seen: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for line in sup.plain_log().lines() {
        let Some(rest) = line.split("wfh-testchild poison mail ").nth(1) else {
            continue;
        };
        let field = |name: &str| -> Option<u64> {
            rest.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .and_then(|v| v.parse().ok())
        };
        if let (Some(id), Some(attempt)) = (field("id="), field("attempt=")) {
            seen.entry(id).or_default().push(attempt);
        }
    }
    for a in seen.values_mut() {
        a.sort_unstable();
    }
    seen
}

/// The poison run on a supervisor whose `orders` is a poison deployment
/// cured by `cured`: prints and returns the time from the poison's first
/// crash to its quarantine.
fn poison_run(sup: &Supervisor, cured: &Path, backend: &str) -> u64 {
    sup.ready_pid("orders", LONG);
    // One burst: everything waits in the inbox while drained, and the
    // resumed child takes a full window of 32, the poison first.
    ok(sup, &["drain", "orders"]);
    sup.wait_deployment("orders", "drained", LONG, |d| d["state"] == "drained");
    let poison = send(sup, "orders", "poison");
    let others: Vec<u64> = (0..50)
        .map(|i| send(sup, "orders", &format!("m{i}")))
        .collect();
    // `resume` waits for a Ready that lasts; the poisoned child crashes at
    // once, so its answer is not what this test looks at.
    let _ = sup.client(&["resume", "orders"]);
    let d = sup.wait_deployment("orders", "the poison dead, the rest done", LONG, |d| {
        assert_ne!(d["state"], "failed", "the deployment failed: {d}");
        counts(d) == (0, 0, 50, 1)
    });
    assert_eq!(d["restarts"], 5, "one restart per poisoned child: {d}");

    // The children saw attempts 1 to 5 of the poison. The 31 sent with it
    // in the first window were charged one failure for its crash (the
    // child exited before reading them) and came again alone, as attempt
    // 2; the other 19 came once. Each was done once.
    let seen = attempts(sup);
    assert_eq!(seen[&poison], [1, 2, 3, 4, 5], "{seen:?}");
    for (i, id) in others.iter().enumerate() {
        let want: &[u64] = if i < 31 { &[2] } else { &[1] };
        assert_eq!(seen[id], want, "item {i} ({id})");
    }
    let charged = item(sup, others[0]);
    assert_eq!(tries(&charged), (Some(2), Some(1)));
    assert!(poisoned(&charged["history"][0]["how"]), "{charged}");
    assert_eq!(charged["history"][1]["how"], "done: succeeded");
    let spared = item(sup, others[31]);
    assert_eq!(tries(&spared), (Some(1), Some(0)));
    let events = sup.events();
    let mut done: BTreeMap<u64, usize> = BTreeMap::new();
    for e in events.iter().filter(|e| e["kind"] == "mail_done") {
        *done
            .entry(e["body"]["id"].as_u64().expect("id"))
            .or_default() += 1;
    }
    assert_eq!(done.keys().copied().collect::<Vec<_>>(), others);
    assert!(done.values().all(|&n| n == 1), "{done:?}");

    // Journaled and published with its last failure; never `failed`.
    let journal = sup.journal();
    assert!(
        !journal.iter().any(|r| r["kind"] == "failed"),
        "the deployment was marked failed"
    );
    let dead: Vec<&Value> = journal
        .iter()
        .filter(|r| r["kind"] == "mail_dead")
        .collect();
    assert_eq!(dead.len(), 1, "{dead:?}");
    let body = &dead[0]["body"];
    assert_eq!(
        (body["id"].as_u64(), body["failures"].as_u64()),
        (Some(poison), Some(5))
    );
    assert_eq!(body["cause"], POISONED);
    let crashes: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "exited" && poisoned(&e["body"]["reason"]))
        .collect();
    assert_eq!(crashes.len(), 5);
    assert_eq!(body["pid"], crashes[4]["body"]["pid"], "the last holder");
    let first_crash = crashes[0]["at_ms"].as_u64().expect("at_ms");
    let quarantined = events
        .iter()
        .find(|e| e["kind"] == "mail_dead")
        .and_then(|e| e["at_ms"].as_u64())
        .expect("mail_dead event");
    let took = quarantined - first_crash;
    println!(
        "poison mail ({backend}): first crash to quarantine {took} ms (5 deliveries, restart backoff 0+100+200+400 ms)"
    );
    // What isolation costs: the 31 charged items go one at a time.
    let done_at = |id: u64| {
        events
            .iter()
            .find(|e| e["kind"] == "mail_done" && e["body"]["id"] == id)
            .and_then(|e| e["at_ms"].as_u64())
            .expect("mail_done")
    };
    let alone = done_at(others[30]).saturating_sub(done_at(others[0]));
    println!(
        "poison mail ({backend}): the 31 charged items, one at a time: {alone} ms from the first done to the 31st ({:.1} ms each)",
        alone as f64 / 30.0
    );
    let log = sup.plain_log();
    assert!(
        log.contains("mail quarantined as dead")
            && log.contains(&format!("wfhost mail retry {poison}")),
        "the log says what to do"
    );

    // `mail list --state dead --json` shows it with its history.
    let listed = json_lines(&ok(sup, &["mail", "list", "--state", "dead", "--json"]));
    assert_eq!(listed.len(), 1, "{listed:?}");
    let it = &listed[0];
    assert_eq!(
        (it["id"].as_u64(), it["deployment"].as_str()),
        (Some(poison), Some("orders"))
    );
    assert_eq!(tries(it), (Some(5), Some(5)));
    assert_eq!(it["last_failure"]["cause"], POISONED);
    assert_eq!(it["last_failure"]["pid"], body["pid"]);
    let history = it["history"].as_array().expect("history");
    let pids: Vec<&Value> = crashes.iter().map(|c| &c["body"]["pid"]).collect();
    assert_eq!(history.len(), 5);
    for (n, h) in history.iter().enumerate() {
        assert_eq!(h["attempt"], n as u64 + 1, "{h}");
        assert_eq!(&h["pid"], pids[n], "{h}");
        assert!(poisoned(&h["how"]), "{h}");
        assert!(
            h["ended_at_ms"].as_u64() >= h["taken_at_ms"].as_u64(),
            "{h}"
        );
    }
    let text = ok(sup, &["mail", "show", &poison.to_string()]);
    assert!(
        text.contains(&format!("mail {poison} of orders: dead")),
        "{text}"
    );
    assert!(
        text.contains(&format!("wfhost mail retry {poison}")),
        "{text}"
    );
    let raw = sup.client(&["mail", "show", &poison.to_string(), "--payload"]);
    assert_eq!(raw.stdout, b"poison", "{}", describe(&raw));

    // Fixed, retried: delivered at once, as attempt 1, and done.
    std::fs::write(cured, "").expect("cure");
    let out = ok(sup, &["mail", "retry", &poison.to_string()]);
    assert!(
        out.contains(&format!("retried mail {poison} of orders")),
        "{out}"
    );
    sup.wait_deployment("orders", "the retried mail done", LONG, |d| {
        counts(d) == (0, 0, 51, 0)
    });
    assert_eq!(attempts(sup)[&poison], [1, 1, 2, 3, 4, 5]);
    let retried: Vec<Value> = sup
        .journal()
        .into_iter()
        .filter(|r| r["kind"] == "mail_retried")
        .collect();
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0]["body"]["ids"], serde_json::json!([poison]));
    assert!(
        retried[0]["body"]["by"]
            .as_str()
            .unwrap_or("")
            .contains("uid"),
        "{}",
        retried[0]
    );
    let after = item(sup, poison);
    assert_eq!(
        (after["state"].as_str(), after["attempts"].as_u64()),
        (Some("done"), Some(1))
    );
    let hows: Vec<&str> = after["history"]
        .as_array()
        .expect("history")
        .iter()
        .filter_map(|h| h["how"].as_str())
        .collect();
    assert_eq!(hows.len(), 7, "{hows:?}");
    assert!(hows[5].starts_with("retried by"), "{hows:?}");
    assert_eq!(hows[6], "done: succeeded");
    took
}

#[test]
fn a_poison_item_is_quarantined_after_max_deliveries_and_the_rest_is_done_once() {
    let dir = wfhost_tests::TempDir::new();
    let cured = dir.join("cured");
    let sup = Supervisor::start(&poison_deployment("orders", &cured, ""));
    poison_run(&sup, &cured, "SQLite");
}

#[test]
fn a_poison_item_is_quarantined_on_postgres_too() {
    let pg = PgServer::start();
    let dir = wfhost_tests::TempDir::new();
    let cured = dir.join("cured");
    let body = format!(
        "[store]\nurl = \"{}\"\n\n{}",
        pg.url("postgres"),
        poison_deployment("orders", &cured, "")
    );
    let sup = Supervisor::start(&body);
    poison_run(&sup, &cured, "PostgreSQL");
    // The store is PostgreSQL's: 32 deliveries ended by the first crash,
    // one by each of the four after it.
    assert_eq!(
        pg.psql(
            "postgres",
            &format!(
                "SELECT count(*) FROM mail_history WHERE how = '{POISONED}' OR how LIKE '{RESET}%'"
            )
        ),
        "36"
    );
}

/// Waits until `orders` holds its one `hold` item; returns the holder's pid.
fn held(sup: &Supervisor, id: u64) -> u64 {
    let d = sup.wait_deployment("orders", "the item held", LONG, |d| {
        counts(d).1 == 1 && d["state"] == "ready"
    });
    let v = item(sup, id);
    assert_eq!(v["holder"]["pid"], d["pid"], "{v}");
    v["holder"]["pid"].as_u64().expect("pid")
}

#[test]
fn a_recycle_the_child_drains_for_counts_no_failure() {
    let dir = wfhost_tests::TempDir::new();
    let sup = Supervisor::start(&poison_deployment("orders", &dir.join("cured"), ""));
    sup.ready_pid("orders", LONG);
    let id = send(&sup, "orders", "hold-1");
    let first = held(&sup, id);
    ok(&sup, &["recycle", "orders"]);
    let second = held(&sup, id);
    assert_ne!(first, second);
    let v = item(&sup, id);
    assert_eq!(tries(&v), (Some(2), Some(0)), "{v}");
    let history = v["history"].as_array().expect("history");
    assert_eq!(history.len(), 2, "{v}");
    assert_eq!(history[0]["pid"], first);
    let how = history[0]["how"].as_str().unwrap_or("");
    assert!(
        how.starts_with("returned, not counted: drained"),
        "the recycle's drain returned it uncounted: {how}"
    );
    assert!(
        history[1]["how"].is_null() && history[1]["pid"] == second,
        "{v}"
    );
    assert_eq!(attempts(&sup)[&id], [1, 2]);
}

#[test]
fn the_supervisors_own_stop_and_crash_count_no_failure() {
    let dir = wfhost_tests::TempDir::new();
    let cured = dir.join("cured");
    let mut sup = Supervisor::start(&poison_deployment("orders", &cured, ""));
    sup.ready_pid("orders", LONG);
    let id = send(&sup, "orders", "hold-1");
    held(&sup, id);
    sup.signal(Signal::SIGTERM);
    let status = sup.wait_exit(LONG);
    assert!(status.success(), "{status}\n{}", sup.log());
    let (state, config) = sup.into_parts();
    // Started again on the same store: returned uncounted, taken again.
    let sup = Supervisor::start_in(state, config);
    held(&sup, id);
    let v = item(&sup, id);
    assert_eq!(tries(&v), (Some(2), Some(0)), "{v}");
    let how = v["history"][0]["how"].as_str().unwrap_or("");
    assert!(how.starts_with("returned, not counted: drained"), "{how}");
    // A supervisor SIGKILLed with the item in flight: the next start
    // returns it, uncounted too.
    let (state, config) = sup.into_parts();
    let sup = Supervisor::start_in(state, config);
    held(&sup, id);
    let v = item(&sup, id);
    assert_eq!(tries(&v), (Some(3), Some(0)), "{v}");
    let how = v["history"][1]["how"].as_str().unwrap_or("");
    assert!(
        how.contains("not counted: the supervisor that sent it stopped or died"),
        "{how}"
    );
    assert!(v["last_failure"].is_null(), "{v}");
}

#[test]
fn mail_commands_name_what_is_wrong_and_bound_what_they_list() {
    let dir = wfhost_tests::TempDir::new();
    let cured = dir.join("cured");
    let body = poison_deployment("orders", &cured, "")
        + &poison_deployment("fragile", &cured, "max_deliveries = 1");
    let sup = Supervisor::start(&body);
    sup.ready_pid("orders", LONG);
    sup.ready_pid("fragile", LONG);
    let started = Instant::now();

    // Unknown ids and deployments are named, with the next step.
    let err = refused(&sup, &["mail", "show", "999"], 1);
    assert!(
        err.contains("no mail item 999") && err.contains("wfhost mail list"),
        "{err}"
    );
    let err = refused(&sup, &["mail", "retry", "999"], 1);
    assert!(err.contains("no mail item 999"), "{err}");
    let err = refused(&sup, &["mail", "retry", "--dead", "nosuch"], 1);
    assert!(
        err.contains("unknown deployment \"nosuch\"; known deployments: fragile, orders"),
        "{err}"
    );
    let err = refused(&sup, &["mail", "list", "nosuch"], 1);
    assert!(err.contains("unknown deployment \"nosuch\""), "{err}");
    // Usage mistakes.
    let err = refused(&sup, &["mail", "retry"], 2);
    assert!(err.contains("say which mail to retry"), "{err}");
    let err = refused(&sup, &["mail", "retry", "orders"], 2);
    assert!(err.contains("`wfhost mail retry --dead orders`"), "{err}");
    refused(&sup, &["mail", "list", "--state", "lost"], 2);
    let err = refused(&sup, &["mail", "list", "--limit", "0"], 2);
    assert!(err.contains("limit 0 is out of range"), "{err}");
    refused(&sup, &["mail", "purge"], 2);
    let err = refused(&sup, &["mail", "purge", "--dead", "--older-than", "5"], 2);
    assert!(err.contains("has no unit"), "{err}");
    let out = ok(&sup, &["mail", "purge", "--dead"]);
    assert_eq!(out.trim(), "no dead mail to purge");
    let out = ok(&sup, &["mail", "retry", "--dead"]);
    assert_eq!(out.trim(), "no dead mail to retry");

    // Only dead mail is retried.
    let done = send(&sup, "orders", "fine");
    sup.wait_deployment("orders", "done", LONG, |d| counts(d).2 == 1);
    let err = refused(&sup, &["mail", "retry", &done.to_string()], 1);
    assert!(
        err.contains(&format!("mail {done} of orders is done, not dead"))
            && err.contains("nothing was changed"),
        "{err}"
    );
    let out = sup.client(&["mail", "show", &done.to_string(), "--payload"]);
    assert!(
        out.stdout.is_empty() && stderr(&out).contains("payload was cleared"),
        "{}",
        describe(&out)
    );

    // A page is bounded and says how many more there are.
    for i in 0..5 {
        send(&sup, "orders", &format!("hold-{i}"));
    }
    let out = sup.client(&["mail", "list", "orders", "--limit", "2"]);
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 3, "a header and two items: {text}");
    let note = stderr(&out);
    assert!(
        note.contains("… and 4 more: `wfhost mail list --after"),
        "{note}"
    );

    // With max_deliveries = 1 one crash quarantines; purge deletes it.
    let dead = send(&sup, "fragile", "poison");
    sup.wait_deployment("fragile", "dead", LONG, |d| counts(d).3 == 1);
    assert_eq!(sup.deployment("fragile")["state"], "ready");
    let out = ok(
        &sup,
        &["mail", "purge", "--dead", "fragile", "--older-than", "1h"],
    );
    assert_eq!(
        out.trim(),
        "no dead mail to purge",
        "it has not been dead an hour"
    );
    let out = ok(&sup, &["mail", "purge", "--dead", "fragile"]);
    assert_eq!(out.trim(), "purged 1 dead items of fragile");
    assert_eq!(counts(&sup.deployment("fragile")).3, 0);
    refused(&sup, &["mail", "show", &dead.to_string()], 1);
    let purged: Vec<Value> = sup
        .journal()
        .into_iter()
        .filter(|r| r["kind"] == "mail_purged")
        .collect();
    assert_eq!(purged.len(), 1);
    assert_eq!(purged[0]["deployment"], "fragile");
    assert_eq!(purged[0]["body"]["count"], 1);
    println!("mail command checks took {:?}", started.elapsed());
}
