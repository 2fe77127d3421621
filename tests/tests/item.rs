//! One item of work, start to end, as a caller and an operator see it:
//! `wfhost call` prints the result byte for byte, a key returns the one
//! item, a result over `max_result_bytes` fails its item, a protocol-2
//! child still works (empty results), and `wfhost mail cancel` stops a
//! queued item, a running one (with each verdict), and outlives a child
//! killed before it answers; a deadline fails a hung item and
//! `redeliver = "hold"` keeps an interrupted one for an operator. Cancels,
//! deadlines and holds run on SQLite and on PostgreSQL. The children are
//! `wfhost-child conformance`,
//! whose payloads say what their handlers do (docs/conformance.md).

use std::io::Write;
use std::process::{Command, Stdio};

use nix::sys::signal::Signal;
use serde_json::Value;
use wfhost_tests::postgres::PgServer;
use wfhost_tests::{LONG, Supervisor, bin, command, deployment, ok, signal, stderr, stdout};

/// A deployment of the conformance child (protocol 3 unless `protocol`
/// says 2), two items at a time per replica.
fn conformance(id: &str, protocol: u32, extra: &str) -> String {
    let protocol = protocol.to_string();
    deployment(
        id,
        &command(&["{bin}/wfhost-child", "conformance", "--protocol", &protocol]),
        extra,
    )
}

/// `wfhost ARGS` against `sup` with `stdin` piped in.
fn with_stdin(sup: &Supervisor, args: &[&str], stdin: &[u8]) -> std::process::Output {
    let mut child = Command::new(bin("wfhost"))
        .args(args)
        .arg("--config")
        .arg(sup.config())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("wfhost runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin)
        .expect("payload written");
    child.wait_with_output().expect("wfhost ends")
}

/// The `[store]` section for `pg` (the tests run without it on SQLite).
fn on(pg: &PgServer) -> String {
    format!("[store]\nurl = \"{}\"\n\n", pg.url("postgres"))
}

fn item(sup: &Supervisor, id: u64) -> Value {
    let out = sup.client(&["mail", "show", &id.to_string(), "--json"]);
    serde_json::from_str(&ok("mail show", &out)).expect("json")
}

#[test]
fn a_call_prints_the_result_byte_for_byte_and_a_key_returns_the_one_item() {
    let sup = Supervisor::start(&conformance("calls", 3, ""));
    sup.ready_pid("calls", LONG);
    // A result with NUL, bytes that are no UTF-8 and a newline.
    let payload = br#"{"result_hex":"00ff800a7a"}"#;
    let out = with_stdin(&sup, &["call", "calls", "-", "--key", "order-1"], payload);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(out.stdout, [0x00, 0xff, 0x80, 0x0a, 0x7a]);
    // The same key and payload: the same item, its stored result, the
    // work not done again.
    let again = with_stdin(
        &sup,
        &["call", "calls", "-", "--key", "order-1", "--json"],
        payload,
    );
    let json: Value = serde_json::from_str(&stdout(&again)).expect("json");
    assert_eq!(json["outcome"], "succeeded", "{json}");
    assert_eq!(json["result"], "AP+ACno=", "{json}");
    assert_eq!(json["result_text"], Value::Null, "not UTF-8: {json}");
    let id = json["id"].as_u64().expect("id");
    let shown = item(&sup, id);
    assert_eq!(shown["attempts"], 1, "run once: {shown}");
    assert_eq!(shown["result_bytes"], 5, "{shown}");
    assert_eq!(
        shown["history"].as_array().map(Vec::len),
        Some(1),
        "{shown}"
    );
    // `mail result` prints it the same way.
    let result = sup.client(&["mail", "result", &id.to_string()]);
    assert_eq!(result.stdout, [0x00, 0xff, 0x80, 0x0a, 0x7a]);
    // A failure: exit 1, its reason on stderr, nothing on stdout.
    let failed = sup.client(&["call", "calls", r#"{"fail":"card declined"}"#]);
    assert_eq!(failed.status.code(), Some(1));
    assert!(failed.stdout.is_empty());
    assert!(
        stderr(&failed).contains("failed: card declined"),
        "{}",
        stderr(&failed)
    );
    // A timeout first: exit 1 naming the item, which goes on.
    let slow = r#"{"steps":[{"name":"slow","drain":"cancel","ms":3000}],"result_hex":"6f6b"}"#;
    let timed_out = sup.client(&["call", "calls", slow, "--timeout", "200ms"]);
    assert_eq!(timed_out.status.code(), Some(1));
    let said = stderr(&timed_out);
    assert!(said.contains("has not ended: it is in a child"), "{said}");
    let slow_id: u64 = said
        .split_whitespace()
        .nth(2)
        .and_then(|w| w.parse().ok())
        .expect("the item's id in the message");
    let waited = sup.client(&["mail", "result", &slow_id.to_string(), "--wait"]);
    assert_eq!(waited.status.code(), Some(0), "{}", stderr(&waited));
    assert_eq!(waited.stdout, b"ok");
}

#[test]
fn a_result_over_the_bound_fails_its_item_and_a_protocol_2_child_gets_empty_results() {
    let body =
        conformance("bounded", 3, "max_result_bytes = \"1KiB\"") + &conformance("older", 2, "");
    let sup = Supervisor::start(&body);
    sup.ready_pid("bounded", LONG);
    sup.ready_pid("older", LONG);
    let big = sup.client(&["call", "bounded", r#"{"result_size":2000}"#]);
    assert_eq!(big.status.code(), Some(1));
    assert!(
        stderr(&big).contains("failed: result of 2000 bytes exceeds max_result_bytes 1024"),
        "{}",
        stderr(&big)
    );
    // The next item of the same child succeeds.
    let fits = sup.client(&["call", "bounded", r#"{"result_size":1000}"#]);
    assert_eq!(fits.status.code(), Some(0), "{}", stderr(&fits));
    assert_eq!(fits.stdout.len(), 1000);
    // A child of protocol 2 runs as before: its items end, empty-handed.
    let d = sup.deployment("older");
    assert_eq!(d["protocol"], 2, "{d}");
    assert_eq!(sup.deployment("bounded")["protocol"], 3);
    let old = sup.client(&["call", "older", r#"{"result_hex":"6f6b"}"#, "--json"]);
    let json: Value = serde_json::from_str(&stdout(&old)).expect("json");
    assert_eq!(
        (json["outcome"].as_str(), json["result"].as_str()),
        (Some("succeeded"), Some("")),
        "{json}"
    );
    let detail = ok("status older", &sup.client(&["status", "older"]));
    assert!(detail.contains(", protocol 2; takes mail"), "{detail}");
}

/// Sends `payload` to `deployment`, returning the item's id.
fn send(sup: &Supervisor, deployment: &str, payload: &str) -> u64 {
    let out = ok("send", &sup.client(&["send", deployment, payload]));
    out.split_whitespace()
        .nth(2)
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no id in {out:?}"))
}

/// Waits until item `id` is in a child and its handler has started it.
fn wait_started(sup: &Supervisor, id: u64) {
    wfhost_tests::wait_for("the item started", LONG, || {
        let shown = item(sup, id);
        (shown["state"] == "processing" && shown["attempts"] == 1).then_some(())
    });
}

#[test]
fn a_cancel_stops_a_queued_item_and_a_running_one_with_the_childs_verdict() {
    cancel_verdicts("");
}

#[test]
fn on_postgres_a_running_items_cancel_names_the_childs_verdict() {
    let pg = PgServer::start();
    cancel_verdicts(&on(&pg));
}

fn cancel_verdicts(store: &str) {
    let body = conformance("work", 3, "") + &conformance("older", 2, "");
    let sup = Supervisor::start(&(store.to_owned() + &body));
    sup.ready_pid("work", LONG);
    sup.ready_pid("older", LONG);
    let long = r#"{"steps":[{"name":"work","drain":"cancel","ms":20000}]}"#;
    // Acknowledged: the running item ends cancelled; its neighbour goes on.
    let running = send(&sup, "work", long);
    let neighbour = send(
        &sup,
        "work",
        r#"{"steps":[{"name":"work","drain":"cancel","ms":300}],"result_hex":"6f6b"}"#,
    );
    wait_started(&sup, running);
    let out = sup.client(&["mail", "cancel", &running.to_string(), "--wait"]);
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{said}{}", stderr(&out));
    assert!(said.contains(": acknowledged (journal record "), "{said}");
    assert!(
        said.contains(&format!("mail {running} ended: cancelled")),
        "{said}"
    );
    let n = sup.client(&["mail", "result", &neighbour.to_string(), "--wait"]);
    assert_eq!(n.stdout, b"ok", "{}", stderr(&n));
    // Not supported: the handler runs to its end.
    let stubborn = send(
        &sup,
        "work",
        r#"{"cancellable":false,"steps":[{"name":"s","drain":"wait","ms":800}]}"#,
    );
    wait_started(&sup, stubborn);
    let out = sup.client(&["mail", "cancel", &stubborn.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(": not-supported"), "{}", stderr(&out));
    let end = sup.client(&["mail", "result", &stubborn.to_string(), "--wait"]);
    assert_eq!(
        end.status.code(),
        Some(0),
        "it ran to its end: {}",
        stderr(&end)
    );
    // A protocol-2 child has no such message: not acknowledged.
    let old = send(&sup, "older", long);
    wait_started(&sup, old);
    let out = sup.client(&["mail", "cancel", &old.to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("not-acknowledged") && stderr(&out).contains("protocol 2"),
        "{}",
        stderr(&out)
    );
    // A done item: refused, naming its outcome.
    let done = sup.client(&["mail", "cancel", &neighbour.to_string()]);
    assert_eq!(done.status.code(), Some(1));
    assert!(
        stderr(&done).contains("has already ended (done: succeeded)"),
        "{}",
        stderr(&done)
    );
    // Each sent cancel is in the journal, which verifies.
    let journal = sup.journal();
    let mail_cancels = journal
        .iter()
        .filter(|r| r["kind"] == "cancel_committed" && r["body"]["mail"].is_u64())
        .count();
    assert_eq!(
        mail_cancels, 2,
        "acknowledged and not-supported: {journal:?}"
    );
    ok("journal verify", &sup.client(&["journal", "verify"]));
}

#[test]
fn a_queued_item_is_never_delivered_and_a_cancel_outlives_a_killed_child() {
    cancel_outlives_a_kill("");
}

#[test]
fn on_postgres_a_cancel_outlives_a_killed_child_and_a_queued_one_never_runs() {
    let pg = PgServer::start();
    cancel_outlives_a_kill(&on(&pg));
}

fn cancel_outlives_a_kill(store: &str) {
    let sup = Supervisor::start(&(store.to_owned() + &conformance("one", 3, "")));
    let pid = sup.ready_pid("one", LONG);
    let long = r#"{"steps":[{"name":"work","drain":"cancel","ms":20000}]}"#;
    let held = send(&sup, "one", long);
    wait_started(&sup, held);
    // Stop the child reading mail before the cancel reaches it: SIGSTOP
    // it, so it can give no verdict, cancel, then SIGKILL it.
    signal(pid, Signal::SIGSTOP);
    let cancel = Command::new(bin("wfhost"))
        .args(["mail", "cancel", &held.to_string(), "--config"])
        .arg(sup.config())
        .output()
        .expect("wfhost runs");
    let said = stderr(&cancel);
    assert!(said.contains("not-acknowledged"), "{said}");
    signal(pid, Signal::SIGKILL);
    let end = sup.client(&["mail", "result", &held.to_string(), "--wait", "--json"]);
    let json: Value = serde_json::from_str(&stdout(&end)).expect("json");
    assert_eq!(json["outcome"], "cancelled", "not run again: {json}");
    let shown = item(&sup, held);
    assert_eq!(
        shown["history"].as_array().map(Vec::len),
        Some(1),
        "{shown}"
    );
    // A queued item, cancelled, never reaches a child.
    let new_pid = sup.ready_pid("one", LONG);
    assert_ne!(new_pid, pid);
    // The window (32 items in a child) full of long work: the next item
    // waits in the inbox.
    for _ in 0..32 {
        send(&sup, "one", long);
    }
    let queued = send(&sup, "one", r#"{"result_hex":"00"}"#);
    let out = sup.client(&["mail", "cancel", &queued.to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(": cancelled: it waited (in the inbox, or interrupted)"),
        "{}",
        stdout(&out)
    );
    let shown = item(&sup, queued);
    assert_eq!(shown["outcome"], "cancelled", "{shown}");
    assert_eq!(shown["attempts"], 0, "never started: {shown}");
    assert_eq!(
        shown["history"][0]["attempt"],
        Value::Null,
        "never delivered: {shown}"
    );
}

#[test]
fn a_hung_item_is_cancelled_at_its_deadline_then_failed_and_its_neighbours_go_back_uncounted() {
    deadline("");
}

#[test]
fn on_postgres_a_hung_item_fails_at_its_deadline() {
    let pg = PgServer::start();
    deadline(&on(&pg));
}

fn deadline(store: &str) {
    let sup = Supervisor::start(
        &(store.to_owned()
            + &conformance(
                "hangs",
                3,
                "drain_timeout = \"1s\"\ndrain_deadline = \"2s\"",
            )),
    );
    let first = sup.ready_pid("hangs", LONG);
    // A handler that cannot be cancelled and keeps answering pings, and a
    // neighbour on the same child whose wait step outlasts any drain.
    let stuck = r#"{"cancellable":false,"steps":[{"name":"stuck","drain":"wait","ms":60000}]}"#;
    let started = std::time::Instant::now();
    let out = sup.client(&["send", "hangs", stuck, "--deadline", "1s"]);
    let hung: u64 = stdout(&out)
        .split_whitespace()
        .nth(2)
        .and_then(|w| w.parse().ok())
        .expect("id");
    let neighbour = send(
        &sup,
        "hangs",
        r#"{"steps":[{"name":"long","drain":"wait","ms":60000}]}"#,
    );
    let end = sup.client(&["mail", "result", &hung.to_string(), "--wait", "--json"]);
    let took = started.elapsed();
    let json: Value = serde_json::from_str(&stdout(&end)).expect("json");
    assert_eq!(json["outcome"], "failed", "{json}");
    assert_eq!(json["reason"], "deadline of 1s passed", "{json}");
    // About its deadline plus drain_timeout (1 s + 1 s), far from the
    // minute its handler would take.
    assert!(took < std::time::Duration::from_secs(20), "took {took:?}");
    // Its cancel was signed and journaled with origin deadline.
    let journal = sup.journal_so_far();
    assert!(
        journal.iter().any(|r| r["kind"] == "cancel_committed"
            && r["body"]["mail"] == hung
            && r["body"]["origin"] == "deadline"),
        "{journal:?}"
    );
    // Its child was recycled; the neighbour went back uncounted and runs
    // on the new child.
    // The recycle stops the old child gracefully: it gives the neighbour
    // back (then a new child holds it) or ends it itself as its handler's
    // steps are cancelled at the stop; either way it is charged nothing.
    let shown = wfhost_tests::poll(LONG, std::time::Duration::from_millis(100), || {
        let shown = item(&sup, neighbour);
        let moved = shown["holder"]["pid"]
            .as_u64()
            .is_some_and(|p| p != u64::from(first));
        let ended_by_child = shown["state"] == "done" && shown["outcome"] == "cancelled";
        if moved || ended_by_child {
            Ok(shown)
        } else {
            Err(shown)
        }
    })
    .unwrap_or_else(|shown| {
        panic!(
            "the neighbour was neither given back nor ended by its child: {shown}\n{}",
            sup.log()
        )
    });
    assert_eq!(shown["failures"], 0, "uncounted: {shown}");
    let recycles = sup.journal_so_far();
    assert!(
        recycles.iter().any(|r| r["kind"] == "recycled"
            && r["body"]["reason"]
                .as_str()
                .is_some_and(|s| s.contains(&format!("mail_deadline: mail {hung}")))),
        "{recycles:?}"
    );
}

#[test]
fn with_redeliver_hold_a_killed_childs_started_item_waits_for_an_operator() {
    held("");
}

#[test]
fn on_postgres_a_held_item_waits_for_an_operator() {
    let pg = PgServer::start();
    held(&on(&pg));
}

fn held(store: &str) {
    let sup =
        Supervisor::start(&(store.to_owned() + &conformance("pays", 3, "redeliver = \"hold\"")));
    let pid = sup.ready_pid("pays", LONG);
    let id = send(
        &sup,
        "pays",
        r#"{"steps":[{"name":"charge","drain":"cancel","ms":2500}],"result_hex":"70616964"}"#,
    );
    wait_started(&sup, id);
    signal(pid, Signal::SIGKILL);
    let shown = wfhost_tests::wait_for("the item interrupted", LONG, || {
        let shown = item(&sup, id);
        (shown["state"] == "interrupted").then_some(shown)
    });
    assert_eq!(shown["failures"], 0, "{shown}");
    // Not delivered again: a new child runs, and the item stays put.
    let second = sup.ready_pid("pays", LONG);
    assert_ne!(second, pid);
    std::thread::sleep(std::time::Duration::from_millis(500));
    let still = item(&sup, id);
    assert_eq!(still["state"], "interrupted", "{still}");
    assert_eq!(
        still["history"].as_array().map(Vec::len),
        Some(1),
        "{still}"
    );
    let d = sup.deployment("pays");
    assert_eq!(d["mail"]["interrupted"], 1, "{d}");
    let table = ok("status", &sup.client(&["status"]));
    assert!(
        table
            .replace("\n    ", " ")
            .contains("pays: 1 interrupted mail item waits for an operator"),
        "{table}"
    );
    let events = sup.events_so_far();
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "mail_interrupted" && e["body"]["id"] == id),
        "{events:?}"
    );
    // An operator runs it again: its next attempt.
    ok(
        "mail retry",
        &sup.client(&["mail", "retry", &id.to_string()]),
    );
    let end = sup.client(&["mail", "result", &id.to_string(), "--wait"]);
    assert_eq!(end.stdout, b"paid", "{}", stderr(&end));
    let shown = item(&sup, id);
    assert_eq!(shown["attempts"], 2, "{shown}");
    let attempts: Vec<&Value> = shown["history"]
        .as_array()
        .expect("history")
        .iter()
        .map(|h| &h["attempt"])
        .collect();
    assert_eq!(
        attempts,
        [&Value::from(1), &Value::Null, &Value::from(2)],
        "{shown}"
    );
}
