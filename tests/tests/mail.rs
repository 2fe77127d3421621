//! Mail as an operator sees it (DESIGN §6): `wfhost send` accepts a payload
//! (inline, `@file` or `-`) only once it is durable and prints its id;
//! refusals (unknown deployment, payload too big, inbox full) are clear and
//! write nothing; delivery is FIFO; status counts inbox, processing, done.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use wfhost_tests::{
    LONG, Supervisor, bin, demo, deployment, describe, mail_counts, query, stderr, stdout,
    testchild, unhex, wait_for,
};

/// Runs `wfhost send ID PAYLOAD` and returns the accepted id, asserting
/// success and the printed line.
fn send_ok(sup: &Supervisor, id: &str, payload: &str) -> u64 {
    let out = sup.client(&["send", id, payload]);
    accepted_id(&out, id)
}

fn accepted_id(out: &Output, id: &str) -> u64 {
    assert_eq!(out.status.code(), Some(0), "{}", describe(out));
    let stdout = stdout(out);
    let line = stdout.trim();
    line.strip_prefix("accepted mail ")
        .and_then(|rest| rest.strip_suffix(&format!(" for {id}")))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("unexpected output: {}", describe(out)))
}

/// Every row of the `mail` table: `(id, deployment, state, payload, deliveries)`.
fn db_rows(sup: &Supervisor) -> Vec<(u64, String, String, Vec<u8>, u64)> {
    let rows = query(
        &sup.db(),
        "SELECT id, deployment, state, hex(payload), deliveries FROM mail ORDER BY id",
    );
    let rows: Vec<(u64, String, String, String, u64)> =
        serde_json::from_value(Value::Array(rows)).expect("mail rows");
    rows.into_iter()
        .map(|(id, d, s, hex, n)| (id, d, s, unhex(&hex), n))
        .collect()
}

/// Event log entries of `kind`.
fn events(sup: &Supervisor, kind: &str) -> Vec<Value> {
    sup.events()
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

/// Drains `id` and waits until it holds its mail.
fn drain(sup: &Supervisor, id: &str) {
    let out = sup.client(&["drain", id]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    sup.wait_deployment(id, "drained", LONG, |d| d["state"] == "drained");
}

#[test]
fn sent_mail_is_durable_on_return_and_delivered_in_fifo_order() {
    let sup = Supervisor::start(&deployment(
        "orders",
        &demo(&["--step-ms", "1", "--approve-ms", "1"]),
        "",
    ));
    sup.ready_pid("orders", LONG);
    // Drained, the deployment holds its mail in the inbox.
    drain(&sup, "orders");

    let inline = send_ok(&sup, "orders", "alpha");
    let file = sup.dir().join("payload.bin");
    std::fs::write(&file, b"bravo from a file").expect("write payload");
    let from_file = send_ok(&sup, "orders", &format!("@{}", file.display()));
    let mut child = Command::new(bin("wfhost"))
        .args(["send", "orders", "-", "--config"])
        .arg(sup.config())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wfhost send -");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"charlie\n")
        .expect("write stdin");
    let from_stdin = accepted_id(&child.wait_with_output().expect("wait"), "orders");
    assert!(
        inline < from_file && from_file < from_stdin,
        "ids increase: {inline} {from_file} {from_stdin}"
    );

    // Each was in the store, with its exact bytes, when send returned.
    let rows = db_rows(&sup);
    let row = |id: u64| rows.iter().find(|r| r.0 == id).cloned();
    for (id, payload) in [
        (inline, &b"alpha"[..]),
        (from_file, b"bravo from a file"),
        (from_stdin, b"charlie\n"),
    ] {
        let (_, dep, state, stored, deliveries) =
            row(id).unwrap_or_else(|| panic!("mail {id} is not in the store: {rows:?}"));
        assert_eq!(
            (dep.as_str(), state.as_str(), stored.as_slice(), deliveries),
            ("orders", "inbox", payload, 0)
        );
    }

    let mut ids = vec![inline, from_file, from_stdin];
    for i in 3..20 {
        ids.push(send_ok(&sup, "orders", &format!("item-{i}")));
    }
    let d = sup.deployment("orders");
    assert_eq!(mail_counts(&d), (20, 0, 0), "{d}");
    assert_eq!(d["mail"]["buffered"], 20, "held while no child runs: {d}");
    assert_eq!(events(&sup, "mail_accepted").len(), 20);
    assert!(sup.received_mail(None).is_empty(), "nothing delivered yet");

    let out = sup.client(&["resume", "orders"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let d = sup.wait_deployment("orders", "all mail done", LONG, |d| {
        mail_counts(d) == (0, 0, 20)
    });
    assert_eq!(d["state"], "ready", "{d}");

    // FIFO: the child received them in acceptance order, each once, and
    // they were acknowledged in that order.
    let received = wait_for("the child's log lines", LONG, || {
        let r = sup.received_mail(None);
        (r.len() >= 20).then_some(r)
    });
    assert_eq!(received, ids, "delivery order");
    // The event log is written just behind the store's mail table.
    let done: Vec<u64> = wait_for("a mail_done event per item", LONG, || {
        let done = events(&sup, "mail_done");
        (done.len() >= ids.len()).then_some(done)
    })
    .iter()
    .map(|e| e["body"]["id"].as_u64().expect("id"))
    .collect();
    assert_eq!(done, ids, "acknowledgement order");
    for line in [
        format!("mail {inline}: received \"alpha\" (5 bytes)"),
        format!("mail {from_file}: received \"bravo from a file\" (17 bytes)"),
        format!("mail {from_stdin}: received \"charlie\\n\" (8 bytes)"),
        format!("mail {inline}: acknowledged (succeeded)"),
    ] {
        sup.wait_log(&line);
    }
    let rows = db_rows(&sup);
    assert!(
        rows.iter()
            .all(|r| r.2 == "done" && r.4 == 1 && r.3.is_empty()),
        "each delivered once, done, payload dropped: {rows:?}"
    );
}

#[test]
fn mail_a_child_is_working_on_counts_as_processing() {
    // approve takes a minute: the first item sits in a wait step while the
    // rest wait in the child's queue, all sent, none acknowledged.
    let sup = Supervisor::start(&deployment(
        "slow",
        &demo(&["--step-ms", "1", "--approve-ms", "60000"]),
        "",
    ));
    sup.ready_pid("slow", LONG);
    let ids: Vec<u64> = (0..3)
        .map(|i| send_ok(&sup, "slow", &format!("s{i}")))
        .collect();
    let d = sup.wait_deployment("slow", "three items in processing", LONG, |d| {
        mail_counts(d) == (0, 3, 0)
    });
    assert_eq!(d["mail"]["buffered"], 0, "{d}");
    let d = sup.wait_deployment("slow", "the first item's approve step", LONG, |d| {
        d["steps"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["step"] == "approve"))
    });
    assert_eq!(
        d["steps"][0]["run"],
        format!("mail-{}", ids[0]),
        "the oldest is worked on first: {d}"
    );
    let rows = db_rows(&sup);
    assert!(
        rows.iter().all(|r| r.2 == "processing" && r.4 == 1),
        "{rows:?}"
    );
}

#[test]
fn refused_mail_is_a_clear_error_and_writes_nothing() {
    let sup = Supervisor::start(&deployment(
        "picky",
        &demo(&["--step-ms", "1", "--approve-ms", "1"]),
        "max_mail_bytes = \"1KiB\"\nmax_inbox = 3",
    ));
    sup.ready_pid("picky", LONG);
    drain(&sup, "picky");
    let unchanged = |what: &str, inbox: u64, rows: usize, accepted: usize| {
        let d = sup.deployment("picky");
        assert_eq!(mail_counts(&d), (inbox, 0, 0), "after {what}: {d}");
        assert_eq!(db_rows(&sup).len(), rows, "after {what}");
        assert_eq!(
            events(&sup, "mail_accepted").len(),
            accepted,
            "after {what}"
        );
    };

    // An unknown deployment.
    let out = sup.client(&["send", "nope", "hello"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("unknown deployment \"nope\"") && err.contains("picky"),
        "{err}"
    );
    unchanged("an unknown deployment", 0, 0, 0);

    // A payload one byte above max_mail_bytes; exactly the limit is fine.
    let big = sup.dir().join("big.bin");
    std::fs::write(&big, vec![b'x'; 1025]).expect("write payload");
    let out = sup.client(&["send", "picky", &format!("@{}", big.display())]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("1025 bytes")
            && err.contains("max_mail_bytes")
            && err.contains("1024")
            && err.contains("nothing was accepted"),
        "{err}"
    );
    unchanged("an oversized payload", 0, 0, 0);
    std::fs::write(&big, vec![b'x'; 1024]).expect("write payload");
    let mut accepted = vec![send_ok(&sup, "picky", &format!("@{}", big.display()))];

    // A payload file that cannot be read is a usage error.
    let out = sup.client(&["send", "picky", "@/nonexistent/payload"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("/nonexistent/payload"),
        "{}",
        describe(&out)
    );
    unchanged("an unreadable payload file", 1, 1, 1);

    // The inbox holds max_inbox items; the next is refused as busy.
    accepted.push(send_ok(&sup, "picky", "two"));
    accepted.push(send_ok(&sup, "picky", "three"));
    let out = sup.client(&["send", "picky", "four"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("busy") && err.contains("max_inbox") && err.contains('3'),
        "{err}"
    );
    unchanged("a full inbox", 3, 3, 3);

    // Nothing already accepted was lost: resumed, all three are done.
    let out = sup.client(&["resume", "picky"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    sup.wait_deployment("picky", "the accepted mail done", LONG, |d| {
        mail_counts(d) == (0, 0, 3)
    });
    let done: Vec<u64> = db_rows(&sup)
        .iter()
        .filter(|r| r.2 == "done")
        .map(|r| r.0)
        .collect();
    assert_eq!(done, accepted);
    // Done mail no longer counts against the limit.
    send_ok(&sup, "picky", "four again");
}

#[test]
fn a_full_inbox_counts_mail_in_processing_and_says_busy() {
    let sup = Supervisor::start(&deployment(
        "stuck",
        &demo(&["--step-ms", "1", "--approve-ms", "60000"]),
        "max_inbox = 4",
    ));
    sup.ready_pid("stuck", LONG);
    let accepted: Vec<u64> = (0..4)
        .map(|i| send_ok(&sup, "stuck", &format!("m{i}")))
        .collect();
    sup.wait_deployment("stuck", "all four sent to the child", LONG, |d| {
        mail_counts(d) == (0, 4, 0)
    });
    let out = sup.client(&["send", "stuck", "one too many"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = stderr(&out);
    assert!(err.contains("busy") && err.contains("max_inbox"), "{err}");
    let d = sup.deployment("stuck");
    assert_eq!(mail_counts(&d), (0, 4, 0), "{d}");
    let ids: Vec<u64> = db_rows(&sup).iter().map(|r| r.0).collect();
    assert_eq!(ids, accepted, "nothing written, nothing lost");
}

#[test]
fn send_without_a_supervisor_says_it_is_unreachable() {
    let dir = wfhost_tests::TempDir::new();
    let socket = dir.join("wfhost.sock");
    let out = wfhost_tests::wfhost(&[
        "send",
        "x",
        "y",
        "--socket",
        socket.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert!(!stderr(&out).is_empty());
}

/// A child's last frames (a whole run and the mail's ack, written just
/// before it exits) count even when the supervisor learns of the exit
/// first: every item is done after one delivery, never handed to the next
/// child again, and each run's end is in the event log.
#[test]
fn an_ack_written_just_before_the_child_exits_is_not_lost() {
    let sup = Supervisor::start(&deployment(
        "brief",
        &testchild("last-words"),
        "restart = { backoff_initial = \"10ms\", backoff_max = \"50ms\", max_restarts = 1000, period = \"60s\" }",
    ));
    const ITEMS: usize = 12;
    let mut ids = Vec::new();
    for i in 0..ITEMS {
        let pid = sup.ready_pid("brief", LONG);
        let id = send_ok(&sup, "brief", &format!("item {i}"));
        ids.push(id);
        sup.wait_deployment("brief", "a new child after the exit", LONG, |d| {
            d["state"] == "ready" && d["pid"].as_u64().is_some_and(|p| p != u64::from(pid))
        });
    }
    let rows = db_rows(&sup);
    assert_eq!(rows.len(), ITEMS, "{rows:?}");
    for (id, _, state, _, deliveries) in &rows {
        assert_eq!(state, "done", "mail {id}: {rows:?}");
        assert_eq!(*deliveries, 1, "mail {id} was handed out again: {rows:?}");
    }
    let finished = events(&sup, "step_finished");
    let terminal = events(&sup, "run_terminal");
    for id in ids {
        let run = format!("mail-{id}");
        assert!(
            finished.iter().any(|e| e["body"]["run"] == run.as_str()),
            "no step_finished of {run}: {finished:#?}"
        );
        assert!(
            terminal.iter().any(|e| e["body"]["run"] == run.as_str()),
            "no run_terminal of {run}: {terminal:#?}"
        );
    }
}

/// `wfhost send --key`: a retry with the same key and payload (after a lost
/// answer, or a supervisor that died and came back) gets the first item's
/// id and enqueues nothing; the same key with another payload is refused,
/// naming the item; a bad key is a usage error.
#[test]
fn an_idempotency_key_makes_a_retried_send_enqueue_once() {
    let mut sup = Supervisor::start(&deployment(
        "orders",
        &demo(&["--step-ms", "1", "--approve-ms", "1"]),
        "",
    ));
    sup.ready_pid("orders", LONG);
    drain(&sup, "orders");
    let keyed = |sup: &Supervisor, payload: &str| {
        sup.client(&["send", "orders", payload, "--key", "order-7"])
    };
    let first = accepted_id(&keyed(&sup, "seven"), "orders");
    let retried = |sup: &Supervisor| {
        let out = keyed(sup, "seven");
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        assert_eq!(
            stdout(&out).trim(),
            format!(
                "mail {first} for orders was already accepted under key \"order-7\"; nothing new enqueued"
            )
        );
    };
    retried(&sup);

    let out = keyed(&sup, "eight");
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let said = stderr(&out);
    assert!(
        said.contains("\"order-7\"")
            && said.contains(&format!("mail {first} with a different payload"))
            && said.contains("nothing was accepted"),
        "{said}"
    );
    let long = "k".repeat(257);
    let out = sup.client(&["send", "orders", "x", "--key", &long]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("1 to 256 bytes"),
        "{}",
        describe(&out)
    );

    let rows = db_rows(&sup);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!((rows[0].0, rows[0].3.as_slice()), (first, &b"seven"[..]));

    // The supervisor dies; the sender retries against its successor, and
    // again once the item is done.
    sup.signal(nix::sys::signal::Signal::SIGKILL);
    sup.wait_exit(LONG);
    let (dir, config) = sup.into_parts();
    let sup = Supervisor::start_in(dir, config);
    retried(&sup);
    sup.wait_deployment("orders", "the item done", LONG, |d| {
        mail_counts(d) == (0, 0, 1)
    });
    retried(&sup);
    let rows = db_rows(&sup);
    assert_eq!(
        rows.len(),
        1,
        "one item, however often it was sent: {rows:?}"
    );
    assert_eq!(rows[0].0, first);
    assert_eq!(events(&sup, "mail_accepted").len(), 1);
}

/// `mail_retention`: done items older than it are deleted (and their keys
/// with them) while mail waiting in the inbox stays, however old.
#[test]
fn done_mail_past_its_retention_is_pruned_and_waiting_mail_is_not() {
    let sup = Supervisor::start_with_settings(
        "mail_retention = \"1s\"",
        &format!(
            "{}{}",
            deployment(
                "orders",
                &demo(&["--step-ms", "1", "--approve-ms", "1"]),
                ""
            ),
            deployment("held", &demo(&[]), ""),
        ),
    );
    sup.ready_pid("orders", LONG);
    sup.ready_pid("held", LONG);
    drain(&sup, "held");
    let waiting = send_ok(&sup, "held", "waits");
    let done = accepted_id(
        &sup.client(&["send", "orders", "one", "--key", "k1"]),
        "orders",
    );
    wait_for("the done item to be pruned", LONG, || {
        let rows = db_rows(&sup);
        (!rows.iter().any(|r| r.0 == done)).then_some(())
    });
    let rows = db_rows(&sup);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (rows[0].0, rows[0].2.as_str(), rows[0].3.as_slice()),
        (waiting, "inbox", &b"waits"[..])
    );
    assert_eq!(mail_counts(&sup.deployment("orders")), (0, 0, 0));
    sup.wait_log("done mail past mail_retention deleted");
    // Its key is free again: the same send is new mail now.
    let again = accepted_id(
        &sup.client(&["send", "orders", "one", "--key", "k1"]),
        "orders",
    );
    assert!(again > done);
}

/// A plain command under `wfhost-child exec` says in its handshake that it
/// takes no mail: a send is refused, naming the deployment and the way
/// out, and nothing is enqueued.
#[test]
fn a_send_to_a_deployment_whose_child_takes_no_mail_is_refused_and_nothing_is_enqueued() {
    let sup = Supervisor::start(&deployment(
        "plain",
        &wfhost_tests::exec("exec sleep 3600"),
        "",
    ));
    sup.ready_pid("plain", LONG);
    let d = sup.deployment("plain");
    assert_eq!(d["takes_mail"], false, "{d}");
    assert!(
        d["implementation"]
            .as_str()
            .is_some_and(|s| s.starts_with("wfhost-child-rust/")),
        "{d}"
    );
    let out = sup.client(&["send", "plain", "hello"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("plain takes no mail") && err.contains("nothing was accepted"),
        "{err}"
    );
    assert!(db_rows(&sup).is_empty(), "nothing enqueued");
    assert_eq!(mail_counts(&sup.deployment("plain")), (0, 0, 0));
}

/// The payload travels raw after the request, so mail up to the
/// deployment's `max_mail_bytes` goes through however large; a source
/// larger than any deployment could take is refused before it is read
/// whole.
#[test]
fn a_three_mib_mail_is_accepted_and_delivered_and_an_endless_source_is_refused() {
    let sup = Supervisor::start(&deployment(
        "orders",
        &demo(&["--step-ms", "1", "--approve-ms", "1"]),
        "max_mail_bytes = \"3MiB\"\nmax_frame_bytes = \"4MiB\"",
    ));
    sup.ready_pid("orders", LONG);
    let file = sup.dir().join("big.bin");
    let payload: Vec<u8> = (0..3 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(&file, &payload).expect("write payload");
    let id = send_ok(&sup, "orders", &format!("@{}", file.display()));
    sup.wait_deployment("orders", "the big item done", LONG, |d| {
        mail_counts(d).2 == 1
    });
    assert_eq!(sup.received_mail(None), [id]);

    let started = std::time::Instant::now();
    let out = sup.client(&["send", "orders", "@/dev/zero"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("more than any deployment's max_mail_bytes"),
        "{}",
        describe(&out)
    );
    assert!(started.elapsed() < LONG, "refused without reading forever");
    let one_over = sup.dir().join("over.bin");
    std::fs::write(&one_over, vec![0u8; (3 << 20) + 1]).expect("write payload");
    let out = sup.client(&["send", "orders", &format!("@{}", one_over.display())]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        stderr(&out).contains("exceeds max_mail_bytes"),
        "{}",
        describe(&out)
    );
    assert_eq!(mail_counts(&sup.deployment("orders")), (0, 0, 1));
}

/// A send whose answer is lost is repeated under the same idempotency
/// key (one `wfhost send` generates when none is given), so the
/// supervisor enqueues it once; here a stand-in supervisor drops the
/// first connection after reading the request.
#[test]
fn a_send_whose_answer_is_lost_is_retried_under_one_key() {
    use std::io::{Read, Write as _};
    use std::os::unix::net::UnixListener;
    let dir = wfhost_tests::TempDir::new();
    let socket = dir.join("wfhost.sock");
    let listener = UnixListener::bind(&socket).expect("bind");
    let server = std::thread::spawn(move || {
        let mut requests = Vec::new();
        for answer in [false, true] {
            let (mut conn, _) = listener.accept().expect("accept");
            let mut len = [0u8; 4];
            conn.read_exact(&mut len).expect("length");
            let mut json = vec![0u8; u32::from_be_bytes(len) as usize];
            conn.read_exact(&mut json).expect("request");
            let request: Value = serde_json::from_slice(&json).expect("json");
            let mut payload = vec![0u8; request["payload_bytes"].as_u64().expect("size") as usize];
            conn.read_exact(&mut payload).expect("payload");
            assert_eq!(payload, b"hello");
            if answer {
                let reply = br#"{"ok":true,"data":{"deployment":"orders","id":7,"new":true}}"#;
                conn.write_all(&(reply.len() as u32).to_be_bytes())
                    .expect("write");
                conn.write_all(reply).expect("write");
            }
            requests.push(request);
        }
        requests
    });
    let out = wfhost_tests::wfhost(&[
        "send",
        "orders",
        "hello",
        "--socket",
        socket.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_eq!(stdout(&out).trim(), "accepted mail 7 for orders");
    let requests = server.join().expect("server");
    assert_eq!(requests.len(), 2, "retried once");
    let key = requests[0]["key"].as_str().expect("a generated key");
    assert!(key.starts_with("auto-"), "{key}");
    assert_eq!(requests[1]["key"], key, "the retry reuses the key");
    assert_eq!(requests[0]["v"], 2);
}

/// A producer keeps one connection for many requests: sends, a status and
/// a result on one; a refused send (its payload maybe unread) is the
/// connection's last answer, and an unreadable request too.
#[test]
fn one_connection_carries_many_requests_until_a_refusal() {
    use serde_json::json;
    use wfhost_tests::control::Connection;
    let sup = Supervisor::start(&deployment(
        "orders",
        &demo(&["--step-ms", "1", "--approve-ms", "1"]),
        "",
    ));
    sup.ready_pid("orders", LONG);
    let mut conn = Connection::open(&sup.socket()).expect("connect");
    let mut ids = Vec::new();
    for i in 0..20 {
        let payload = format!("{{\"order\":{i}}}");
        let answer = conn
            .ask(
                &json!({"v": 2, "cmd": "send", "deployment": "orders", "payload_bytes": payload.len()}),
                payload.as_bytes(),
            )
            .expect("send on the kept connection");
        ids.push(answer["data"]["id"].as_u64().expect("an id"));
    }
    let status = conn
        .ask(&json!({"v": 2, "cmd": "status"}), b"")
        .expect("status on the kept connection");
    assert_eq!(status["ok"], true, "{status}");
    let last = *ids.last().expect("ids");
    let result = conn
        .ask(
            &json!({"v": 2, "cmd": "mail-result", "id": last, "wait_ms": 30_000}),
            b"",
        )
        .expect("mail-result on the kept connection");
    assert_eq!(result["data"]["outcome"], "succeeded", "{result}");
    // Refused before its payload is read: the answer, then the end.
    let refused = conn
        .ask(
            &json!({"v": 2, "cmd": "send", "deployment": "nowhere", "payload_bytes": 5}),
            b"hello",
        )
        .expect("the refusal");
    assert_eq!(refused["ok"], false, "{refused}");
    assert!(conn.closed(), "a refused send ends its connection");
    // An unreadable request is answered, then the connection ends.
    let mut conn = Connection::open(&sup.socket()).expect("connect");
    let ok = conn
        .ask(&json!({"v": 2, "cmd": "status"}), b"")
        .expect("status");
    assert_eq!(ok["ok"], true);
    let bad = conn
        .ask(&json!({"v": 2, "cmd": "no-such-request"}), b"")
        .expect("the refusal");
    assert_eq!(bad["ok"], false, "{bad}");
    assert!(conn.closed(), "an unreadable request ends its connection");
    let d = sup.wait_deployment("orders", "all twenty done", LONG, |d| {
        mail_counts(d).2 >= 20
    });
    assert_eq!(mail_counts(&d).0, 0, "{d}");
}
