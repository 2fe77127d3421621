//! Nothing lost when the store refuses writes (issue 13, store faults): a
//! full disk or a read-only store injected into the live supervisor with
//! strace (`-e inject=pwrite64:error=…`: SQLite's writes fail, nothing
//! else does), then taken away again.

use std::process::{Child, Command, Stdio};

use serde_json::Value;
use wfhost_tests::{
    LONG, Supervisor, control, demo, deployment, describe, mail_counts, ok, query, wait_for,
};

/// Makes every `pwrite64` of process `pid` (all its threads) fail with
/// `errno` until dropped.
struct Fault(Child);

impl Fault {
    fn inject(pid: u32, errno: &str) -> Self {
        Self::inject_into(pid, "pwrite64", &format!("error={errno}"))
    }

    /// Fails the `calls` of process `pid` as `how` says (strace's
    /// `inject=` syntax, e.g. `error=EIO:when=2+3`).
    fn inject_into(pid: u32, calls: &str, how: &str) -> Self {
        let strace = Command::new("strace")
            .args(["-f", "-p", &pid.to_string(), "-o", "/dev/null"])
            .args(["-e", &format!("trace={calls}")])
            .args(["-e", &format!("inject={calls}:{how}")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("strace is missing: install it (apt-get install strace); .ci/run does");
        // Attached once strace says so on stderr.
        let mut strace = strace;
        let stderr = strace.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if line.contains("attached") {
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(LONG).expect("strace did not attach");
        Self(strace)
    }
}

impl Drop for Fault {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn send(sup: &Supervisor, payload: &str) {
    let out = sup.client(&["send", "orders", payload]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
}

/// `(id, state, deliveries)` of every mail row.
fn rows(sup: &Supervisor) -> Vec<(u64, String, u64)> {
    let rows = query(
        &sup.db(),
        "SELECT id, state, deliveries FROM mail ORDER BY id",
    );
    serde_json::from_value(Value::Array(rows)).expect("mail rows")
}

fn demo_orders(step_ms: &str) -> String {
    deployment(
        "orders",
        &demo(&["--step-ms", step_ms, "--approve-ms", "1"]),
        "",
    )
}

/// Before: each ack the store refused was logged and forgotten; the item
/// stayed `processing` for good, and 32 of them stopped the deployment's
/// mail. Now refused acks are kept, shown in status, and land once the
/// store takes writes again: every item done once, none delivered twice.
#[test]
fn acks_refused_by_a_full_disk_land_once_it_is_freed() {
    let sup = Supervisor::start(&demo_orders("300"));
    sup.ready_pid("orders", LONG);
    for i in 0..10 {
        send(&sup, &format!("order {i}"));
    }
    let fault = Fault::inject(sup.pid(), "ENOSPC");
    let d = sup.wait_deployment("orders", "refused acks kept", LONG, |d| {
        d["acks_pending"].as_u64() > Some(0) && d["store_error"].is_string()
    });
    assert!(
        d["store_error"].as_str().unwrap_or("").contains("full"),
        "the error says the disk is full: {d}"
    );
    drop(fault);
    let d = sup.wait_deployment("orders", "every item done", LONG, |d| {
        mail_counts(d) == (0, 0, 10) && d["acks_pending"] == 0
    });
    assert!(d["store_error"].is_null(), "{d}");
    for (id, state, deliveries) in rows(&sup) {
        assert_eq!((state.as_str(), deliveries), ("done", 1), "mail {id}");
    }
    assert!(
        sup.plain_log()
            .contains("the store accepts mail writes again")
    );
}

/// Before: a take that hit a full disk was never retried; the inbox waited
/// until someone sent more mail. Now the take is retried on its own.
#[test]
fn a_take_refused_by_a_full_disk_is_retried_without_new_mail() {
    let sup = Supervisor::start(&demo_orders("1"));
    sup.ready_pid("orders", LONG);
    let out = sup.client(&["drain", "orders"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    sup.wait_deployment("orders", "drained", LONG, |d| d["state"] == "drained");
    for i in 0..5 {
        send(&sup, &format!("order {i}"));
    }
    let fault = Fault::inject(sup.pid(), "ENOSPC");
    let out = sup.client(&["resume", "orders"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    sup.wait_deployment("orders", "the take refused", LONG, |d| {
        d["state"] == "ready" && d["store_error"].is_string()
    });
    drop(fault);
    sup.wait_deployment("orders", "the inbox delivered", LONG, |d| {
        mail_counts(d) == (0, 0, 5)
    });
}

/// Before: with the store read-only, SIGTERM ended with exit 0 and the
/// journal silently lacked that window's drain and exit records. Now what
/// the store would not take is kept in a file, the exit is non-zero, and
/// the next start writes it: the journal has the records and verifies.
#[test]
fn records_a_read_only_store_refused_at_stop_are_kept_and_written_by_the_next_start() {
    let mut sup = Supervisor::start(&demo_orders("1"));
    let state = sup.dir().join("state");
    let pid = sup.ready_pid("orders", LONG);
    let fault = Fault::inject(sup.pid(), "EROFS");
    sup.signal(nix::sys::signal::Signal::SIGTERM);
    let status = sup.wait_exit(LONG);
    drop(fault);
    assert_eq!(
        status.code(),
        Some(1),
        "a lossy stop is not a clean exit:\n{}",
        sup.log()
    );
    let log = sup.plain_log();
    assert!(
        log.contains("they are kept in this file and written by the next start"),
        "{log}"
    );
    let kept: Vec<_> = std::fs::read_dir(&state)
        .expect("state dir")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("unwritten-"))
        .collect();
    assert_eq!(kept.len(), 1, "one kept file");

    let (dir, config) = sup.into_parts();
    let next = Supervisor::start_in(dir, config);
    wait_for("the kept records written", LONG, || {
        next.plain_log()
            .contains("the previous supervisor could not write")
            .then_some(())
    });
    let journal = next.journal();
    let of_pid = |kind: &str| {
        journal
            .iter()
            .any(|r| r["kind"] == kind && r["body"]["pid"].as_u64() == Some(u64::from(pid)))
    };
    assert!(of_pid("drain_started") && of_pid("exited"), "{journal:#?}");
    let out = next.client(&["journal", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let kept_after: Vec<_> = std::fs::read_dir(&state)
        .expect("state dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("unwritten-"))
        .collect();
    assert!(
        kept_after.iter().all(|n| n.ends_with(".recovered")),
        "{kept_after:?}"
    );
}

/// The exposition's value of `sample` (a metric name with its labels).
fn metric(text: &str, sample: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

/// `/metrics` of the supervisor listening at `addr`.
fn scrape(addr: std::net::SocketAddr) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("metrics listen");
    s.set_read_timeout(Some(LONG)).expect("timeout");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("answer");
    out
}

/// `wfhost_store_takes_writes`, `wfhost_store_refusing_seconds` and
/// `wfhost_store_waiting{what="acks"}` as scraped now.
fn store_metrics(addr: std::net::SocketAddr) -> (Option<f64>, Option<f64>, Option<f64>) {
    let text = scrape(addr);
    (
        metric(&text, "wfhost_store_takes_writes"),
        metric(&text, "wfhost_store_refusing_seconds"),
        metric(&text, "wfhost_store_waiting{what=\"acks\"}"),
    )
}

/// Before: whether the store took writes showed only per deployment
/// (`store_error`); journal records and events it refused were seen
/// nowhere but the log. Now status says at the top (beside `host`), and
/// metrics say, since when the store refuses, why, and what waits, and
/// both say it is over once it takes writes again.
#[test]
fn a_refusing_store_is_said_at_the_top_of_status_and_in_metrics() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let sup = Supervisor::start_with_settings(
        &format!("metrics_listen = \"{addr}\""),
        &demo_orders("300"),
    );
    sup.ready_pid("orders", LONG);
    let store = sup.status()["store"].clone();
    assert_eq!(store["takes_writes"], true, "{store}");
    assert!(store["refusing_since_ms"].is_null(), "{store}");
    assert_eq!(store_metrics(addr), (Some(1.0), Some(0.0), Some(0.0)));

    for i in 0..10 {
        send(&sup, &format!("order {i}"));
    }
    let fault = Fault::inject(sup.pid(), "ENOSPC");
    let injected = wfhost_tests::unix_ms();
    let status = wait_for("the store's refusal at the top", LONG, || {
        let st = sup.status();
        let s = &st["store"];
        (s["takes_writes"] == false && s["waiting"]["acks"].as_u64() > Some(0)).then_some(st)
    });
    let store = &status["store"];
    assert!(
        store["last_error"].as_str().unwrap_or("").contains("full"),
        "{store}"
    );
    let since = store["refusing_since_ms"].as_u64().unwrap_or(0);
    assert!(since >= injected.saturating_sub(1000), "{store}");
    let refused: Vec<&str> = store["refused"]
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["what"].as_str()).collect())
        .unwrap_or_default();
    assert!(refused.contains(&"mail of orders"), "{store}");
    let waiting = |k: &str| store["waiting"][k].as_u64().unwrap_or(0);
    assert_eq!(
        waiting("acks"),
        status["deployments"][0]["acks_pending"]
            .as_u64()
            .unwrap_or(0),
        "{status}"
    );
    let (takes, refusing, acks) = store_metrics(addr);
    assert_eq!(takes, Some(0.0));
    assert!(
        refusing > Some(0.0) && acks > Some(0.0),
        "{refusing:?} {acks:?}"
    );
    let table = ok("status", &sup.client(&["status"]));
    assert!(
        table.contains("store: REFUSING WRITES for ") && table.contains("mail acks"),
        "{table}"
    );
    eprintln!(
        "store refusing: {} acks, {} journal records, {} events waiting; refused: {refused:?}",
        waiting("acks"),
        waiting("journal_records"),
        waiting("events")
    );

    drop(fault);
    let store = wait_for("the store taking writes again", LONG, || {
        let s = sup.status()["store"].clone();
        let w = &s["waiting"];
        let idle = w["acks"] == 0 && w["journal_records"] == 0 && w["events"] == 0;
        (s["takes_writes"] == true && idle).then_some(s)
    });
    assert!(store["last_error"].is_null(), "{store}");
    assert_eq!(store_metrics(addr), (Some(1.0), Some(0.0), Some(0.0)));
    let table = ok("status", &sup.client(&["status"]));
    assert!(!table.contains("store: REFUSING"), "{table}");
}

/// Before: with the disk failing at the commit, `wfhost send` exited 1
/// ("accepting mail failed") for mail that was stored and later done, and
/// a plain retry enqueued it twice. Now an error while committing is an
/// unknown outcome, said as such, and the CLI settles it under the key it
/// always sends: whatever the disk does, mail reported accepted is stored
/// once, mail reported refused is not stored, and nothing is stored twice.
#[test]
fn a_send_whose_commit_fails_is_an_unknown_outcome_settled_under_its_key() {
    let sup = Supervisor::start(&demo_orders("1"));
    sup.ready_pid("orders", LONG);
    let socket = sup.socket();
    let mut unknown = Vec::new();
    let mut accepted = Vec::new();
    let mut refused = Vec::new();
    let fault = Fault::inject_into(sup.pid(), "fsync,fdatasync", "error=EIO:when=2+3");
    for i in 0..30 {
        // Once, as a client that does not retry sees it.
        let key = format!("raw-{i}");
        let answer = control::send_keyed(&socket, "orders", key.as_bytes(), &key);
        match (answer["ok"].as_bool(), answer["outcome"].as_str()) {
            (Some(true), _) => accepted.push(key),
            (Some(false), Some("unknown")) => {
                let error = answer["error"].as_str().unwrap_or_default();
                assert!(
                    error.contains("may or may not have been accepted")
                        && error.contains("send it again with the same --key"),
                    "{answer}"
                );
                unknown.push(key);
            }
            _ => refused.push(key),
        }
        // And as the CLI sends it: settled under its key.
        let key = format!("cli-{i}");
        let out = sup.client(&["send", "orders", &key, "--key", &key]);
        match out.status.code() {
            Some(0) => accepted.push(key),
            _ => {
                assert!(
                    !describe(&out).contains("outcome is unknown"),
                    "the CLI settles an unknown outcome: {}",
                    describe(&out)
                );
                refused.push(key);
            }
        }
    }
    drop(fault);
    assert!(
        !unknown.is_empty(),
        "some commit failed under the fault: accepted {accepted:?}, refused {refused:?}"
    );
    // A client that was told "unknown" settles it by sending again.
    for key in &unknown {
        let answer = control::send_keyed(&socket, "orders", key.as_bytes(), key);
        assert_eq!(answer["ok"], true, "{answer}");
        accepted.push(key.clone());
    }
    let total = accepted.len() as u64;
    let d = sup.wait_deployment("orders", "every accepted item done", LONG, |d| {
        mail_counts(d) == (0, 0, total)
    });
    assert_eq!(d["mail"]["dead"], 0, "{d}");
    let keys: Vec<String> = query(
        &sup.db(),
        "SELECT idempotency_key FROM mail ORDER BY idempotency_key",
    )
    .into_iter()
    .map(|row| row[0].as_str().unwrap_or_default().to_owned())
    .collect();
    let mut expected = accepted.clone();
    expected.sort();
    assert_eq!(
        keys, expected,
        "each accepted key stored once, no refused one stored (refused: {refused:?})"
    );
}
