//! A person in the loop, as a workflow author and an operator see it, on
//! SQLite and on PostgreSQL: a handler asks (`wfhost-child conformance`,
//! whose payload `ask` makes it ask and return the answer as its result),
//! `wfhost questions` lists the question, `wfhost answer` answers it once
//! (the same answer again changes nothing, another is refused), the
//! handler gets it; items waiting for answers hold no child (a recycle
//! finishes at once, nothing is delivered again before its answer, nothing
//! is asked twice); and `wfhost events --mail ID --follow` follows one item
//! to its end.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use wfhost_tests::postgres::PgServer;
use wfhost_tests::{
    LONG, Supervisor, command, deployment, json_lines, ok, signal, stderr, stdout, wait_for,
};

/// A deployment of the conformance child (protocol 3), eight items at a
/// time per child.
fn asking(id: &str, extra: &str) -> String {
    deployment(
        id,
        &command(&["{bin}/wfhost-child", "conformance", "--protocol", "3"]),
        extra,
    )
}

/// The `[store]` section for `pg`.
fn on(pg: &PgServer) -> String {
    format!("[store]\nurl = \"{}\"\n\n", pg.url("postgres"))
}

/// A payload whose handler asks `key` about `order`, then returns the
/// answer.
fn asks(key: &str, order: &str) -> String {
    format!(r#"{{"ask":{{"key":"{key}","prompt":{{"order":"{order}","amount":120}}}}}}"#)
}

/// Sends `payload`, returning the item's id.
fn send(sup: &Supervisor, deployment: &str, payload: &str) -> u64 {
    let out = ok("send", &sup.client(&["send", deployment, payload]));
    out.split_whitespace()
        .nth(2)
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no id in {out:?}"))
}

/// `wfhost questions --json`, one object per open question.
fn questions(sup: &Supervisor) -> Vec<Value> {
    json_lines(&ok("questions", &sup.client(&["questions", "--json"])))
}

/// Waits until `n` questions are open.
fn wait_questions(sup: &Supervisor, n: usize) -> Vec<Value> {
    wait_for(&format!("{n} open questions"), LONG, || {
        let open = questions(sup);
        (open.len() == n).then_some(open)
    })
}

fn item(sup: &Supervisor, id: u64) -> Value {
    let out = sup.client(&["mail", "show", &id.to_string(), "--json"]);
    serde_json::from_str(&ok("mail show", &out)).expect("mail show JSON")
}

/// The current user's uid.
fn uid() -> u64 {
    u64::from(nix::unistd::getuid().as_raw())
}

#[test]
fn a_handler_asks_a_person_and_gets_the_one_answer() {
    answered("");
}

#[test]
fn on_postgres_a_handler_asks_a_person_and_gets_the_one_answer() {
    let pg = PgServer::start();
    answered(&on(&pg));
}

fn answered(store: &str) {
    let sup = Supervisor::start(&(store.to_owned() + &asking("orders", "")));
    sup.ready_pid("orders", LONG);
    let id = send(&sup, "orders", &asks("approve", "A-17"));
    let open = wait_questions(&sup, 1);
    let q = &open[0];
    assert_eq!(
        (q["id"].as_u64(), q["key"].as_str()),
        (Some(id), Some("approve")),
        "{q}"
    );
    assert_eq!(q["prompt"]["order"], "A-17", "{q}");
    assert_eq!(
        (q["deployment"].as_str(), q["attempt"].as_u64()),
        (Some("orders"), Some(1))
    );
    // The operator sees the item waiting for an answer.
    let shown = item(&sup, id);
    assert_eq!(shown["waiting_for_answer"], true, "{shown}");
    let list = ok("mail list", &sup.client(&["mail", "list", "orders"]));
    assert!(list.contains("waiting for an answer"), "{list}");
    let d = sup.deployment("orders");
    assert_eq!(d["mail"]["questions_open"], 1, "{d}");
    let detail = ok("status orders", &sup.client(&["status", "orders"]));
    assert!(detail.contains("1 waiting for an answer"), "{detail}");
    let table = ok("questions", &sup.client(&["questions"]));
    assert!(
        table.contains("approve") && table.contains("A-17"),
        "{table}"
    );
    // Refusals: an unknown item, an unknown key, a value that is not JSON.
    let unknown = sup.client(&["answer", "999999", "approve", "true"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr(&unknown).contains("no mail item 999999"),
        "{}",
        stderr(&unknown)
    );
    let wrong_key = sup.client(&["answer", &id.to_string(), "nope", "true"]);
    assert_eq!(wrong_key.status.code(), Some(1));
    assert!(
        stderr(&wrong_key).contains("its questions: approve"),
        "{}",
        stderr(&wrong_key)
    );
    let not_json = sup.client(&["answer", &id.to_string(), "approve", "yes please"]);
    assert_eq!(not_json.status.code(), Some(2));
    assert!(
        stderr(&not_json).contains("not JSON"),
        "{}",
        stderr(&not_json)
    );
    // The answer reaches the waiting handler, whose result it is.
    let given = sup.client(&[
        "answer",
        &id.to_string(),
        "approve",
        r#"{"approved": true, "note": "ok by ana"}"#,
        "--by",
        "ana",
    ]);
    assert_eq!(given.status.code(), Some(0), "{}", stderr(&given));
    assert!(
        stdout(&given).contains("answered question \"approve\""),
        "{}",
        stdout(&given)
    );
    let result = sup.client(&["mail", "result", &id.to_string(), "--wait"]);
    assert_eq!(result.status.code(), Some(0), "{}", stderr(&result));
    let value: Value = serde_json::from_slice(&result.stdout).expect("the result is the answer");
    assert_eq!(
        value,
        serde_json::json!({"approved": true, "note": "ok by ana"})
    );
    // Again with the same value: nothing changes. Another: refused.
    let same = sup.client(&[
        "answer",
        &id.to_string(),
        "approve",
        r#"{"note":"ok by ana","approved":true}"#,
    ]);
    assert_eq!(
        same.status.code(),
        Some(1),
        "the item has ended: {}",
        stdout(&same)
    );
    assert!(
        stderr(&same).contains("has already ended (done: succeeded)"),
        "{}",
        stderr(&same)
    );
    // One question, asked once, answered once, both journaled with who.
    let journal = sup.journal();
    let asked: Vec<&Value> = journal
        .iter()
        .filter(|r| r["kind"] == "question_asked")
        .collect();
    let answers: Vec<&Value> = journal
        .iter()
        .filter(|r| r["kind"] == "question_answered")
        .collect();
    assert_eq!((asked.len(), answers.len()), (1, 1), "{journal:?}");
    assert_eq!(asked[0]["body"]["prompt"]["order"], "A-17");
    let by = &answers[0]["body"]["by"];
    assert_eq!(
        (by["label"].as_str(), by["uid"].as_u64()),
        (Some("ana"), Some(uid())),
        "{by}"
    );
    ok("journal verify", &sup.client(&["journal", "verify"]));
    // Its events, followed from the start: once each, in order, and the
    // follower exits 0 on its end.
    let follow = sup.client(&["events", "--mail", &id.to_string(), "--follow", "--json"]);
    assert_eq!(follow.status.code(), Some(0), "{}", stderr(&follow));
    let events = json_lines(&stdout(&follow));
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["kind"].as_str()).collect();
    for kind in [
        "mail_accepted",
        "mail_delivered",
        "question_asked",
        "question_answered",
        "mail_done",
    ] {
        assert_eq!(
            kinds.iter().filter(|k| **k == kind).count(),
            1,
            "{kind} once: {kinds:?}"
        );
    }
    assert_eq!(kinds.first(), Some(&"mail_accepted"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"mail_done"), "{kinds:?}");
    let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    // From a cursor: only what came after it.
    let after = seqs[1].to_string();
    let rest = sup.client(&[
        "events",
        "--mail",
        &id.to_string(),
        "--follow",
        "--after",
        &after,
        "--json",
    ]);
    assert_eq!(json_lines(&stdout(&rest)).len(), events.len() - 2);
    // An unknown item is refused, not followed forever.
    let none = sup.client(&["events", "--mail", "999999", "--follow"]);
    assert_eq!(none.status.code(), Some(1));
    assert!(
        stderr(&none).contains("no mail item 999999"),
        "{}",
        stderr(&none)
    );
}

#[test]
fn a_second_different_answer_is_refused_naming_the_first() {
    let sup = Supervisor::start(&asking("orders", ""));
    sup.ready_pid("orders", LONG);
    // Two questions: the item waits on the second after the first.
    let payload = r#"{"ask":[{"key":"approve","prompt":1},{"key":"confirm","prompt":2}]}"#;
    let id = send(&sup, "orders", payload);
    wait_questions(&sup, 1);
    ok(
        "answer",
        &sup.client(&["answer", &id.to_string(), "approve", "true", "--by", "ana"]),
    );
    let open = wait_questions(&sup, 1);
    assert_eq!(open[0]["key"], "confirm", "{open:?}");
    let same = sup.client(&["answer", &id.to_string(), "approve", "true"]);
    assert_eq!(same.status.code(), Some(0), "{}", stderr(&same));
    assert!(
        stdout(&same).contains("already had this answer"),
        "{}",
        stdout(&same)
    );
    let other = sup.client(&["answer", &id.to_string(), "approve", "false"]);
    assert_eq!(other.status.code(), Some(1));
    let said = stderr(&other);
    assert!(
        said.contains("was already answered true at ") && said.contains("by ana"),
        "{said}"
    );
    ok(
        "answer",
        &sup.client(&["answer", &id.to_string(), "confirm", r#""yes""#]),
    );
    let result = sup.client(&["mail", "result", &id.to_string(), "--wait"]);
    assert_eq!(result.stdout, br#""yes""#, "{}", stderr(&result));
    let answered: Vec<Value> = sup
        .journal()
        .into_iter()
        .filter(|r| r["kind"] == "question_answered")
        .collect();
    assert_eq!(
        answered.len(),
        2,
        "the repeat journals nothing: {answered:?}"
    );
}

#[test]
fn twenty_items_waiting_for_answers_let_a_recycle_finish_at_once() {
    waiting_items_hold_nothing("");
}

#[test]
fn on_postgres_items_waiting_for_answers_hold_no_child() {
    let pg = PgServer::start();
    waiting_items_hold_nothing(&on(&pg));
}

fn waiting_items_hold_nothing(store: &str) {
    const N: usize = 20;
    let sup = Supervisor::start(
        &(store.to_owned()
            + &asking(
                "orders",
                "drain_timeout = \"60s\"\ndrain_deadline = \"90s\"",
            )),
    );
    let first = sup.ready_pid("orders", LONG);
    let ids: Vec<u64> = (0..N)
        .map(|i| send(&sup, "orders", &asks("approve", &format!("O-{i}"))))
        .collect();
    wait_questions(&sup, N);
    // The recycle does not wait for people: well under its drain budget.
    let began = Instant::now();
    let out = sup.client(&["recycle", "orders", "--reason", "upgrade"]);
    let took = began.elapsed();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        stderr(&out),
        sup.log()
    );
    assert!(took < Duration::from_secs(20), "the recycle took {took:?}");
    eprintln!("a recycle with {N} items waiting for answers took {took:?} (drain_timeout 60 s)");
    let second = sup.ready_pid("orders", LONG);
    assert_ne!(first, second);
    // Nothing delivered again before its answer, nothing charged.
    std::thread::sleep(Duration::from_millis(500));
    for id in &ids {
        let shown = item(&sup, *id);
        assert_eq!(
            (
                shown["state"].as_str(),
                shown["failures"].as_u64(),
                shown["waiting_for_answer"].as_bool()
            ),
            (Some("inbox"), Some(0), Some(true)),
            "{shown}"
        );
        assert_eq!(
            shown["history"].as_array().map(Vec::len),
            Some(1),
            "{shown}"
        );
    }
    assert_eq!(sup.deployment("orders")["mail"]["awaiting"], N as u64);
    assert_eq!(
        questions(&sup).len(),
        N,
        "the same questions, none opened twice"
    );
    // Each answer reaches a handler of the new child: every item done once.
    for (i, id) in ids.iter().enumerate() {
        let value = format!(r#"{{"approved":true,"n":{i}}}"#);
        ok(
            "answer",
            &sup.client(&["answer", &id.to_string(), "approve", &value]),
        );
    }
    for (i, id) in ids.iter().enumerate() {
        let out = sup.client(&[
            "mail",
            "result",
            &id.to_string(),
            "--wait",
            "--timeout",
            "60s",
        ]);
        let value: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("item {id}: {}", stderr(&out)));
        assert_eq!(value["n"], i, "{value}");
        let shown = item(&sup, *id);
        assert_eq!(
            shown["attempts"], 2,
            "started twice: asked, then answered: {shown}"
        );
        assert_eq!(
            shown["history"][1]["pid"].as_u64(),
            Some(u64::from(second)),
            "{shown}"
        );
        assert_eq!(
            shown["questions"].as_array().map(Vec::len),
            Some(1),
            "{shown}"
        );
    }
    let events = sup.events();
    let given_back = events
        .iter()
        .filter(|e| e["kind"] == "mail_given_back")
        .count();
    assert_eq!(given_back, N, "each given back once at the recycle");
    let asked = sup
        .journal()
        .iter()
        .filter(|r| r["kind"] == "question_asked")
        .count();
    assert_eq!(asked, N, "nothing asked twice");
}

#[test]
fn a_killed_childs_waiting_items_are_not_asked_twice_and_answers_given_meanwhile_land() {
    let sup = Supervisor::start(&asking("orders", ""));
    let pid = sup.ready_pid("orders", LONG);
    let ids: Vec<u64> = (0..3)
        .map(|i| send(&sup, "orders", &asks("approve", &format!("K-{i}"))))
        .collect();
    wait_questions(&sup, 3);
    signal(pid, Signal::SIGKILL);
    sup.wait_deployment("orders", "a new child ready", LONG, |d| {
        d["state"] == "ready" && d["pid"].as_u64().is_some_and(|p| p != u64::from(pid))
    });
    // Back in the inbox, charged nothing, waiting.
    wait_for("the items back, waiting", LONG, || {
        ids.iter()
            .all(|id| {
                let s = item(&sup, *id);
                s["state"] == "inbox" && s["failures"] == 0 && s["waiting_for_answer"] == true
            })
            .then_some(())
    });
    // Drained: no child runs; an answer given now waits for one.
    ok("drain", &sup.client(&["drain", "orders", "--wait"]));
    ok(
        "answer",
        &sup.client(&["answer", &ids[0].to_string(), "approve", "1"]),
    );
    ok("resume", &sup.client(&["resume", "orders"]));
    let out = sup.client(&[
        "mail",
        "result",
        &ids[0].to_string(),
        "--wait",
        "--timeout",
        "30s",
    ]);
    assert_eq!(out.stdout, b"1", "{}", stderr(&out));
    for (n, id) in ids.iter().enumerate().skip(1) {
        let value = (n + 1).to_string();
        ok(
            "answer",
            &sup.client(&["answer", &id.to_string(), "approve", &value]),
        );
        let out = sup.client(&[
            "mail",
            "result",
            &id.to_string(),
            "--wait",
            "--timeout",
            "30s",
        ]);
        assert_eq!(out.stdout, value.as_bytes(), "{}", stderr(&out));
    }
    let mut asked: BTreeMap<u64, usize> = BTreeMap::new();
    for r in sup
        .journal()
        .iter()
        .filter(|r| r["kind"] == "question_asked")
    {
        *asked
            .entry(r["body"]["id"].as_u64().unwrap_or(0))
            .or_default() += 1;
    }
    assert!(
        asked.values().all(|n| *n == 1) && asked.len() == 3,
        "{asked:?}"
    );
}

/// A fleet host's config body: the shared store, `[fleet]` with the test
/// fleets' lease timing, and the asking deployment `orders`.
fn fleet_body(url: &str, host: &str) -> String {
    use wfhost_tests::fleet::{RENEW, TTL};
    format!(
        "[store]\nurl = \"{url}\"\n\n[fleet]\nhost_id = \"{host}\"\nlease_ttl = \"{}ms\"\n\
         lease_renew = \"{}ms\"\n\n[defaults]\ndrain_timeout = \"1s\"\ndrain_deadline = \"2s\"\n\
         kill_timeout = \"1s\"\n\n{}",
        TTL.as_millis(),
        RENEW.as_millis(),
        asking("orders", "")
    )
}

/// `orders` as `sup` sees it: its owner once ready.
fn owner(sup: &Supervisor) -> Option<String> {
    let d = sup.deployment("orders");
    (d["owner"]["expired"] == false && d["state"] == "ready")
        .then(|| d["owner"]["host"].as_str().map(str::to_owned))
        .flatten()
}

#[test]
fn on_a_fleet_an_answer_given_anywhere_lands_even_after_the_owner_dies() {
    use wfhost_tests::fleet::{Fleet, WAIT};
    let _lock = Fleet::lock();
    let pg = PgServer::start();
    let url = pg.url("postgres");
    let a = Supervisor::start(&fleet_body(&url, "h1"));
    let b = Supervisor::start(&fleet_body(&url, "h2"));
    let first = wait_for("orders owned", WAIT, || owner(&a));
    if first != "h2" {
        ok("move", &a.client(&["move", "orders", "--to", "h2"]));
    }
    wait_for("orders on h2", WAIT, || owner(&a).filter(|o| o == "h2"));
    let ids: Vec<u64> = (0..3)
        .map(|i| send(&a, "orders", &asks("approve", &format!("F-{i}"))))
        .collect();
    // h1 lists the questions h2's child asked.
    wait_questions(&a, 3);
    // Answered on h1: carried to h2, whose child's handler gets it.
    let out = a.client(&["answer", &ids[0].to_string(), "approve", r#""first""#]);
    assert!(
        stdout(&out).contains("handed to its deployment"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let done = a.client(&[
        "mail",
        "result",
        &ids[0].to_string(),
        "--wait",
        "--timeout",
        "30s",
    ]);
    assert_eq!(done.stdout, br#""first""#, "{}", stderr(&done));
    let shown = item(&a, ids[0]);
    assert_eq!(
        shown["attempts"], 1,
        "answered in the child that asked: {shown}"
    );
    // h2 dies while two items wait; one is answered while nobody owns it.
    let (_dir, _config) = b.into_parts();
    ok(
        "answer",
        &a.client(&["answer", &ids[1].to_string(), "approve", r#""second""#]),
    );
    wait_for("h1 owns orders", WAIT, || owner(&a).filter(|o| o == "h1"));
    ok(
        "answer",
        &a.client(&["answer", &ids[2].to_string(), "approve", r#""third""#]),
    );
    for (id, want) in [(ids[1], "\"second\""), (ids[2], "\"third\"")] {
        let out = a.client(&[
            "mail",
            "result",
            &id.to_string(),
            "--wait",
            "--timeout",
            "30s",
        ]);
        assert_eq!(out.stdout, want.as_bytes(), "{}\n{}", stderr(&out), a.log());
        let shown = item(&a, id);
        assert_eq!(
            shown["questions"].as_array().map(Vec::len),
            Some(1),
            "{shown}"
        );
        assert_eq!(shown["failures"], 0, "{shown}");
    }
    let asked = pg.psql("postgres", "SELECT count(*) FROM questions");
    assert_eq!(asked, "3", "one question per item, whoever asked");
}

#[test]
fn a_hostile_child_asking_too_much_is_stopped_and_its_neighbour_never_waits() {
    use wfhost_tests::testchild;
    let body =
        deployment("hostile", &testchild("asker"), "max_deliveries = 2") + &asking("neighbour", "");
    let sup = Supervisor::start(&body);
    sup.ready_pid("hostile", LONG);
    sup.ready_pid("neighbour", LONG);
    let rss_before = rss_kib(sup.pid());
    let neighbour_answers = |what: &str| {
        let began = Instant::now();
        let out = sup.client(&[
            "call",
            "neighbour",
            r#"{"result_hex":"6f6b"}"#,
            "--timeout",
            "10s",
        ]);
        assert_eq!(out.stdout, b"ok", "{what}: {}", stderr(&out));
        began.elapsed()
    };
    // 10,000 questions for one item: a violation at the 65th, named.
    let flood = send(&sup, "hostile", "ask-flood");
    let d = sup.wait_deployment("hostile", "the flood's violation", LONG, |d| {
        d["violations"].as_u64().unwrap_or(0) >= 1
    });
    let last = d["last_exit"].to_string();
    assert!(
        last.contains(&format!("more than 64 questions for mail {flood}")),
        "{d}"
    );
    let during_flood = neighbour_answers("after the flood");
    // The flood's item keeps its 64 questions and waits for answers;
    // nothing more was stored.
    assert_eq!(d["mail"]["questions_open"], 64, "{d}");
    // A 512 KiB prompt: a violation naming the bound, each time its item
    // is delivered, until it is quarantined as poison.
    let huge = send(&sup, "hostile", "ask-huge");
    let d = sup.wait_deployment("hostile", "the huge prompt's violation", LONG, |d| {
        d["last_exit"]
            .to_string()
            .contains("prompt of 524288 bytes is over the 65536-byte bound")
    });
    assert!(d["violations"].as_u64().unwrap_or(0) >= 2, "{d}");
    wait_for("the huge prompt's item quarantined", LONG, || {
        (item(&sup, huge)["state"] == "dead").then_some(())
    });
    sup.ready_pid("hostile", LONG);
    // 10,000 progress reports: kept as far as the rate admits, the rest
    // counted; the item still ends.
    let progressed = send(&sup, "hostile", "progress-flood");
    let out = sup.client(&[
        "mail",
        "result",
        &progressed.to_string(),
        "--wait",
        "--timeout",
        "30s",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let events = sup.events_so_far();
    let kept = events
        .iter()
        .filter(|e| e["kind"] == "mail_progress" && e["body"]["id"] == progressed)
        .count();
    let dropped: u64 = events
        .iter()
        .filter(|e| e["kind"] == "events_suppressed" && e["deployment"] == "hostile")
        .filter_map(|e| e["body"]["dropped"].as_u64())
        .sum();
    assert!((1..10_000).contains(&kept), "kept {kept}");
    assert!(
        dropped >= 1,
        "the excess is counted: kept {kept}, dropped {dropped}"
    );
    let after_progress = neighbour_answers("after the progress flood");
    // The supervisor stayed small.
    assert_eq!(questions(&sup).len(), 64);
    let grown = rss_kib(sup.pid()).saturating_sub(rss_before);
    eprintln!(
        "neighbour's call after the ask flood {during_flood:?}, after the progress flood {after_progress:?}; \
         progress kept {kept}, dropped {dropped}; supervisor RSS grew {grown} KiB"
    );
    assert!(grown < 64 * 1024, "the supervisor grew {grown} KiB");
}

/// A process's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}
