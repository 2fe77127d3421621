//! Calling under stress, on SQLite and on PostgreSQL: `wfhost call` (a
//! keyed send, then a wait for the item's end) returns each caller its
//! own result byte for byte, the work done once, while the deployment is
//! recycled; a keyed call survives its child's SIGKILL and, repeated
//! under the same key, the supervisor's SIGKILL (one item for the key,
//! one result); and on a fleet, a call through one host returns the
//! result of the child its owner runs on another. The children are
//! `wfhost-child conformance` (protocol 3), whose payloads say what their
//! handlers return (docs/conformance.md), and, for binary payloads,
//! `wfh-fleetchild --echo`, whose result is its payload.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use wfhost_tests::postgres::PgServer;
use wfhost_tests::{
    LONG, Supervisor, TempDir, alive, bin, children_of, client, command, deployment, describe,
    json_lines, ok, query, signal, stderr, stdout, wait_for,
};

/// A deployment of the conformance child speaking protocol 3.
fn conformance(id: &str, extra: &str) -> String {
    deployment(
        id,
        &command(&["{bin}/wfhost-child", "conformance", "--protocol", "3"]),
        extra,
    )
}

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Where the supervisor under test keeps its state.
enum Store {
    Sqlite,
    Postgres(PgServer),
}

impl Store {
    fn postgres() -> Self {
        Self::Postgres(PgServer::start())
    }

    /// The config's `[store]` section (nothing for SQLite, the default).
    fn section(&self) -> String {
        match self {
            Self::Sqlite => String::new(),
            Self::Postgres(pg) => format!("[store]\nurl = \"{}\"\n\n", pg.url("postgres")),
        }
    }

    /// `(idempotency key, id)` of every stored item, by id, read from the
    /// store itself.
    fn keyed(&self, sup: &Supervisor) -> Vec<(String, u64)> {
        const SQL: &str = "SELECT idempotency_key, id FROM mail ORDER BY id";
        match self {
            Self::Sqlite => query(&sup.db(), SQL)
                .iter()
                .map(|r| {
                    let key = r[0].as_str().expect("every item has its key");
                    (key.to_owned(), r[1].as_u64().expect("an id"))
                })
                .collect(),
            Self::Postgres(pg) => pg
                .psql("postgres", SQL)
                .lines()
                .filter(|l| !l.is_empty())
                .map(|l| {
                    let (key, id) = l.split_once('|').expect("key|id");
                    (key.to_owned(), id.parse().expect("an id"))
                })
                .collect(),
        }
    }

    /// The ids stored under idempotency key `key`.
    fn ids_for_key(&self, sup: &Supervisor, key: &str) -> Vec<u64> {
        let keyed = self.keyed(sup);
        keyed
            .into_iter()
            .filter(|(k, _)| k == key)
            .map(|(_, id)| id)
            .collect()
    }
}

/// A payload whose handler runs one `wait` step (a drain lets it finish)
/// of `ms` and returns `result`.
fn payload(result: &[u8], ms: u64) -> String {
    format!(
        r#"{{"result_hex":"{}","steps":[{{"name":"w","drain":"wait","ms":{ms}}}]}}"#,
        hex(result)
    )
}

/// A `wfhost` process started in the background, killed if still running
/// when dropped (a failing test leaves no stray client behind).
struct Background(Option<Child>);

impl Background {
    fn start(args: &[&str], config: &Path) -> Self {
        let child = Command::new(bin("wfhost"))
            .args(args)
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn wfhost");
        Self(Some(child))
    }

    /// Waits for it to end (killed and reported after `limit`).
    fn finish(mut self, limit: Duration) -> Output {
        let mut child = self.0.take().expect("running");
        let deadline = Instant::now() + limit;
        while child.try_wait().expect("try_wait").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let out = child.wait_with_output().expect("wait");
                panic!("wfhost did not end within {limit:?}: {}", describe(&out));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        child.wait_with_output().expect("wait for wfhost")
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `wfhost recycle DEPLOYMENT`, which waits for the new child: killed and
/// reported if it takes longer than `limit` (a recycle must never hang).
fn recycle_within(config: &Path, deployment: &str, limit: Duration) -> Output {
    Background::start(&["recycle", deployment, "--reason", "calls test"], config).finish(limit)
}

/// `wfhost mail show ID --json`, parsed.
fn item(sup: &Supervisor, id: u64) -> Value {
    let out = sup.client(&["mail", "show", &id.to_string(), "--json"]);
    serde_json::from_str(&ok("mail show", &out)).expect("mail show JSON")
}

/// Every stored item, as `wfhost mail list --json` lists them.
fn all_items(sup: &Supervisor) -> Vec<Value> {
    let out = sup.client(&["mail", "list", "--json", "--limit", "10000"]);
    json_lines(&ok("mail list", &out))
}

/// How many of an item's deliveries ended with it done (`how`: `done: …`).
fn done_deliveries(shown: &Value) -> usize {
    shown["history"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|h| h["how"].as_str().is_some_and(|s| s.starts_with("done: ")))
        .count()
}

/// Waits until the control socket answers (after a restart the stale
/// socket file of the killed supervisor may still be there).
fn wait_reachable(config: &Path) {
    wait_for("the supervisor to answer", LONG, || {
        client(config, &["status", "--json"])
            .status
            .success()
            .then_some(())
    });
}

/// Waits until the one item stored under `key` is held by a child whose
/// handler started it `attempt` times; returns its id and holder's pid.
fn wait_started(store: &Store, sup: &Supervisor, key: &str, attempt: u64) -> (u64, u32) {
    let id = wait_for("the call's item stored", LONG, || {
        store.ids_for_key(sup, key).first().copied()
    });
    let pid = wait_for("the call's item started", LONG, || {
        let shown = item(sup, id);
        (shown["state"] == "processing" && shown["attempts"] == attempt)
            .then(|| shown["holder"]["pid"].as_u64())
            .flatten()
    });
    (id, pid as u32)
}

#[test]
fn two_hundred_calls_from_eight_callers_during_recycles_each_return_their_result_once() {
    two_hundred_calls(&Store::Sqlite);
}

#[test]
fn two_hundred_calls_on_postgres_each_return_their_result_once() {
    two_hundred_calls(&Store::postgres());
}

/// 8 callers × 25 keyed calls with binary payloads, echoed back by the
/// child, during 5 operator recycles: each call prints its own payload,
/// and each item was run by one handler, once (the child's record).
fn two_hundred_calls(store: &Store) {
    const CALLERS: usize = 8;
    const CALLS: usize = 25;
    const TOTAL: usize = CALLERS * CALLS;
    const RECYCLES: usize = 5;
    let started = Instant::now();
    let dir = TempDir::new();
    let record = dir.join("work.log");
    let echo = command(&[
        "{bin}/wfh-fleetchild",
        "--record",
        record.to_str().expect("utf-8 path"),
        "--work-ms",
        "30",
        "--drain",
        "wait",
        "--echo",
    ]);
    let sup = Supervisor::start(&(store.section() + &deployment("calls", &echo, "")));
    let first_pid = sup.ready_pid("calls", LONG);
    let config = sup.config().to_path_buf();

    let ended = Arc::new(AtomicUsize::new(0));
    let callers: Vec<_> = (0..CALLERS)
        .map(|t| {
            let (config, ended, dir) = (config.clone(), ended.clone(), dir.path().to_owned());
            std::thread::spawn(move || {
                (0..CALLS)
                    .map(|i| {
                        // 8 bytes, unique per call, with NUL, 0xff, a
                        // newline and bytes that are no UTF-8: the
                        // payload, and so the result.
                        let n = (t * CALLS + i) as u8;
                        let bytes = vec![0x00, 0xff, t as u8, i as u8, 0x0a, 0x80, 0x0d, n];
                        let file = dir.join(format!("payload-{t}-{i}"));
                        std::fs::write(&file, &bytes).expect("payload file");
                        let at = format!("@{}", file.display());
                        let key = format!("call-{t}-{i}");
                        let out = client(
                            &config,
                            &["call", "calls", &at, "--key", &key, "--timeout", "45s"],
                        );
                        ended.fetch_add(1, Ordering::SeqCst);
                        (key, bytes, out)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();

    // Five operator recycles spread over the calls: each once a share of
    // them has ended, the next after the previous one's new child is up.
    let (mut recycles, mut held) = (Vec::new(), Vec::new());
    for k in 1..=RECYCLES {
        let at = k * TOTAL / (RECYCLES + 2);
        wait_for("calls to progress", Duration::from_secs(60), || {
            (ended.load(Ordering::SeqCst) >= at).then_some(())
        });
        // Items in the child's hands as it is asked (for the report).
        held.push(wfhost_tests::mail_counts(&sup.deployment("calls")).1);
        let before = ended.load(Ordering::SeqCst);
        let out = recycle_within(&config, "calls", LONG);
        recycles.push((before, ended.load(Ordering::SeqCst), out));
    }
    let results: Vec<_> = callers
        .into_iter()
        .map(|h| h.join().expect("a caller thread panicked"))
        .collect();
    let calls_took = started.elapsed();

    for (before, after, out) in &recycles {
        assert!(
            out.status.success(),
            "recycle (calls ended before it: {before}, after: {after}) failed: {}\n{}",
            describe(out),
            sup.log()
        );
    }
    let during = recycles.iter().filter(|(b, _, _)| *b < TOTAL).count();
    assert_eq!(
        during,
        RECYCLES,
        "every recycle began while calls were in flight: {:?}",
        recycles.iter().map(|(b, a, _)| (b, a)).collect::<Vec<_>>()
    );

    // Every call: exit 0, its own 8 bytes exactly.
    let mut keys = BTreeSet::new();
    let mut wrong = Vec::new();
    for (key, result, out) in results.iter().flatten() {
        keys.insert(key.clone());
        if out.status.code() != Some(0) || out.stdout != *result {
            wrong.push(format!(
                "{key}: expected {} got exit {:?} stdout {} stderr {}",
                hex(result),
                out.status.code(),
                hex(&out.stdout),
                stderr(out)
            ));
        }
    }
    assert_eq!(keys.len(), TOTAL);
    assert!(
        wrong.is_empty(),
        "{} of {TOTAL} calls went wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );

    // The store: one item per key, each done, succeeded, started once.
    let rows = store.keyed(&sup);
    let by_key: BTreeMap<String, u64> = rows.iter().cloned().collect();
    assert_eq!(rows.len(), TOTAL, "one stored item per call: {rows:?}");
    assert_eq!(
        by_key.keys().cloned().collect::<BTreeSet<_>>(),
        keys,
        "the stored keys are the calls' keys"
    );
    let items = all_items(&sup);
    assert_eq!(items.len(), TOTAL, "mail list lists every item");
    let mut returned_unstarted = 0;
    let mut not_once = Vec::new();
    let mut workers = BTreeSet::new();
    for shown in &items {
        let history = shown["history"].as_array().cloned().unwrap_or_default();
        returned_unstarted += history.len().saturating_sub(1);
        workers.extend(history.iter().filter_map(|h| h["pid"].as_u64()));
        if shown["state"] != "done"
            || shown["outcome"] != "succeeded"
            || shown["attempts"] != 1
            || shown["failures"] != 0
            || shown["result_bytes"] != 8
            || done_deliveries(shown) != 1
        {
            not_once.push(shown.to_string());
        }
    }
    assert!(
        not_once.is_empty(),
        "items not done, succeeded and run once ({}):\n{}",
        not_once.len(),
        not_once.join("\n")
    );
    // The work went on through each of the six children.
    assert_eq!(
        workers.len(),
        RECYCLES + 1,
        "children that worked: {workers:?}"
    );
    // The child's own record: each item run by one handler, once.
    let runs = std::fs::read_to_string(&record).expect("the child's record");
    let mut run_by_id: BTreeMap<u64, usize> = BTreeMap::new();
    for line in runs.lines() {
        let id = line.split(' ').nth(2).and_then(|v| v.parse().ok());
        *run_by_id.entry(id.expect("PID DEP ID …")).or_default() += 1;
        assert!(line.ends_with(" done"), "every run ran to its end: {line}");
    }
    let ids: BTreeSet<u64> = by_key.values().copied().collect();
    assert_eq!(run_by_id.keys().copied().collect::<BTreeSet<_>>(), ids);
    assert!(run_by_id.values().all(|n| *n == 1), "{run_by_id:?}");
    let d = sup.deployment("calls");
    assert_eq!(d["recycles"]["operator"], RECYCLES as u64, "{d}");
    assert_ne!(d["pid"].as_u64(), Some(u64::from(first_pid)), "{d}");
    eprintln!(
        "{TOTAL} calls from {CALLERS} callers in {:.1} s with {RECYCLES} recycles \
         (calls ended before/after each: {:?}; items in processing as each was asked: {held:?}); \
         deliveries given back unstarted: {returned_unstarted}",
        calls_took.as_secs_f64(),
        recycles.iter().map(|(b, a, _)| (b, a)).collect::<Vec<_>>(),
    );
    assert!(calls_took < Duration::from_secs(60), "took {calls_took:?}");
}

#[test]
fn a_keyed_call_retried_across_a_child_kill_and_a_supervisor_kill_returns_the_one_result() {
    keyed_call_across_kills(&Store::Sqlite);
}

#[test]
fn a_keyed_call_on_postgres_returns_the_one_result_across_kills() {
    keyed_call_across_kills(&Store::postgres());
}

fn keyed_call_across_kills(store: &Store) {
    let started = Instant::now();
    let sup = Supervisor::start(&(store.section() + &conformance("slow", "")));
    sup.ready_pid("slow", LONG);
    let config = sup.config().to_path_buf();

    // 1. The child is SIGKILLed while the handler runs: the item is
    // delivered again (attempt 2) and the waiting call gets its result.
    let first: [u8; 7] = [0x00, 0xff, 0x01, 0x0a, 0x80, 0x6b, 0x31];
    let first_payload = payload(&first, 1500);
    let call = Background::start(
        &[
            "call",
            "slow",
            &first_payload,
            "--key",
            "K-1",
            "--timeout",
            "60s",
        ],
        &config,
    );
    let (id, pid) = wait_started(store, &sup, "K-1", 1);
    signal(pid, Signal::SIGKILL);
    let out = call.finish(LONG);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        describe(&out),
        sup.log()
    );
    assert_eq!(out.stdout, first, "the result byte for byte");
    let shown = item(&sup, id);
    assert_eq!(shown["outcome"], "succeeded", "{shown}");
    assert_eq!(
        shown["attempts"], 2,
        "started again after the kill: {shown}"
    );
    assert_eq!(shown["failures"], 1, "{shown}");
    assert_eq!(done_deliveries(&shown), 1, "done once: {shown}");
    assert_ne!(
        shown["history"][1]["pid"].as_u64(),
        Some(u64::from(pid)),
        "done by the next child: {shown}"
    );
    assert_eq!(store.ids_for_key(&sup, "K-1"), [id]);
    // Called again: the stored result at once, the same item.
    let again = sup.client(&["call", "slow", &first_payload, "--key", "K-1", "--json"]);
    let json: Value = serde_json::from_str(&stdout(&again)).expect("call --json");
    assert_eq!(
        (json["id"].as_u64(), &json["outcome"]),
        (Some(id), &Value::from("succeeded"))
    );

    // 2. The supervisor is SIGKILLed while the handler of a second keyed
    // call runs: that call fails (its answer is lost); a successor on the
    // same state dir and config runs the item again, and the same call
    // repeated waits on the one item and prints its result.
    let second: [u8; 8] = [0xff, 0x00, 0x02, 0x0a, 0x80, 0x6b, 0x32, 0x00];
    let second_payload = payload(&second, 1500);
    let call = Background::start(
        &[
            "call",
            "slow",
            &second_payload,
            "--key",
            "K-2",
            "--timeout",
            "60s",
        ],
        &config,
    );
    let (id2, child) = wait_started(store, &sup, "K-2", 1);
    let (dir, config_path) = sup.into_parts();
    let lost = call.finish(LONG);
    assert_ne!(lost.status.code(), Some(0), "{}", describe(&lost));
    assert!(lost.stdout.is_empty(), "{}", describe(&lost));
    // The dead supervisor's child dies with it.
    wait_for("the orphaned child to die", LONG, || {
        (!alive(child)).then_some(())
    });
    let sup = Supervisor::start_in(dir, config_path);
    wait_reachable(&config);
    sup.ready_pid("slow", LONG);
    let out = sup.client(&[
        "call",
        "slow",
        &second_payload,
        "--key",
        "K-2",
        "--timeout",
        "60s",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        describe(&out),
        sup.log()
    );
    assert_eq!(out.stdout, second, "the result byte for byte");
    let out = sup.client(&["call", "slow", &second_payload, "--key", "K-2", "--json"]);
    let json: Value = serde_json::from_str(&stdout(&out)).expect("call --json");
    assert_eq!(json["id"].as_u64(), Some(id2), "the one item: {json}");
    assert_eq!(json["outcome"], "succeeded", "{json}");
    assert_eq!(
        store.ids_for_key(&sup, "K-2"),
        [id2],
        "one item for the key"
    );
    let shown = item(&sup, id2);
    assert_eq!(shown["state"], "done", "{shown}");
    assert_eq!(done_deliveries(&shown), 1, "done once: {shown}");
    assert_eq!(
        shown["failures"], 0,
        "the supervisor's death is no failure: {shown}"
    );
    // Two keys, two items: nothing else was enqueued by the repeats.
    assert_eq!(all_items(&sup).len(), 2);
    eprintln!(
        "child kill: item {id} done at attempt 2; supervisor kill: the lost call said \
         (exit {:?}) {:?}; item {id2} done at attempt {} with history {}; {:.1} s",
        lost.status.code(),
        stderr(&lost).trim(),
        shown["attempts"],
        shown["history"],
        started.elapsed().as_secs_f64()
    );
}

/// A fleet host's config body: the shared store, `[fleet]` with the test
/// fleets' lease timing, and the conformance deployment `calls`.
fn fleet_body(url: &str, host: &str) -> String {
    use wfhost_tests::fleet::{RENEW, TTL};
    format!(
        "[store]\nurl = \"{url}\"\n\n[fleet]\nhost_id = \"{host}\"\nlease_ttl = \"{}ms\"\n\
         lease_renew = \"{}ms\"\n\n[defaults]\ndrain_timeout = \"1s\"\ndrain_deadline = \"2s\"\n\
         kill_timeout = \"1s\"\n\n{}",
        TTL.as_millis(),
        RENEW.as_millis(),
        conformance("calls", "")
    )
}

/// `calls` as host `sup` sees it: `(owner, pid)` once its lease is held
/// and it is ready.
fn owner_of(sup: &Supervisor) -> Option<(String, Option<u64>)> {
    let d = sup.deployment("calls");
    let owner = &d["owner"];
    (owner["expired"] == false && d["state"] == "ready")
        .then(|| Some((owner["host"].as_str()?.to_owned(), d["pid"].as_u64())))
        .flatten()
}

#[test]
fn a_call_on_one_fleet_host_returns_the_result_of_the_owner_elsewhere() {
    use wfhost_tests::fleet::{Fleet, WAIT};
    let _lock = Fleet::lock();
    let pg = wfhost_tests::postgres::PgServer::start();
    let url = pg.url("postgres");
    let a = Supervisor::start(&fleet_body(&url, "h1"));
    let b = Supervisor::start(&fleet_body(&url, "h2"));
    let (owner, _) = wait_for("calls owned and ready", WAIT, || owner_of(&a));
    if owner != "h2" {
        let out = a.client(&["move", "calls", "--to", "h2"]);
        assert!(
            ok("move", &out).starts_with(&format!("moved calls from {owner} to h2 (epoch ")),
            "{}",
            describe(&out)
        );
    }
    wait_for("calls ready on h2", WAIT, || {
        owner_of(&a).filter(|(o, _)| o == "h2").map(|_| ())
    });
    let b_pid = wait_for("h2's child", WAIT, || {
        let d = b.deployment("calls");
        (d["owner"]["host"] == "h2" && d["state"] == "ready")
            .then(|| d["pid"].as_u64())
            .flatten()
    }) as u32;
    assert!(
        children_of(b.pid()).contains(&b_pid),
        "h2's supervisor runs the child"
    );
    // h1 runs no conformance child.
    let a_children: Vec<String> = children_of(a.pid())
        .into_iter()
        .map(|p| std::fs::read_to_string(format!("/proc/{p}/cmdline")).unwrap_or_default())
        .filter(|c| c.contains("conformance"))
        .collect();
    assert!(a_children.is_empty(), "h1 runs {a_children:?}");

    let result: [u8; 9] = [0x00, 0xff, 0x80, 0x0a, 0x0d, 0x7f, 0xfe, 0x68, 0x32];
    let body = payload(&result, 300);
    let socket = a.socket();
    let socket = socket.to_str().expect("utf-8 path");
    let call = |extra: &[&str]| {
        let mut args = vec!["call", "calls", body.as_str(), "--key", "fleet-1"];
        args.extend_from_slice(extra);
        args.extend(["--socket", socket]);
        wfhost_tests::wfhost(&args)
    };
    let began = Instant::now();
    let out = call(&["--timeout", "30s"]);
    let took = began.elapsed();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        describe(&out),
        a.log()
    );
    assert_eq!(out.stdout, result, "h2's child's result, byte for byte");
    let out = call(&["--json"]);
    let json: Value = serde_json::from_str(&stdout(&out)).expect("call --json");
    assert_eq!(json["outcome"], "succeeded", "{json}");
    let id = json["id"].as_u64().expect("id");
    // Done by h2's child, once; both hosts show the same item.
    let shown = item(&a, id);
    let on_b = item(&b, id);
    assert_eq!(
        (&shown["state"], &shown["history"]),
        (&on_b["state"], &on_b["history"]),
        "one store: {shown} and {on_b}"
    );
    assert_eq!(shown["attempts"], 1, "{shown}");
    assert_eq!(done_deliveries(&shown), 1, "{shown}");
    assert_eq!(
        shown["history"][0]["pid"].as_u64(),
        Some(u64::from(b_pid)),
        "worked on by h2's child: {shown}"
    );
    let stored = pg.psql(
        "postgres",
        "SELECT count(*) FROM mail WHERE idempotency_key = 'fleet-1'",
    );
    eprintln!(
        "a call through h1 of calls owned by h2 (pid {b_pid}) returned in {took:?}; \
         rows for its key in PostgreSQL: {stored}"
    );
    assert_eq!(stored, "1");
}
