//! Recycling as an operator sees it (DESIGN §5): every trigger (policy
//! bounds on uptime, RSS and grant age; `wfhost recycle`; the child's own
//! request) replaces the child, is journaled with its origin, reason and
//! old and new pid and channel id, and is counted in status; a recycle
//! under way absorbs further triggers.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use wfhost_tests::{
    LONG, Supervisor, TempDir, alive, bin, demo, deployment, describe, exec, is_channel_id, stderr,
    stdout, testchild, wait_for,
};

/// Policy ticks fast enough for a test to watch bounds being passed.
const FAST_POLICY: &str = "policy_interval = \"100ms\"";

/// Restarts that never give up, for tests that break spawns on purpose.
const PATIENT_RESTART: &str = "restart = { backoff_initial = \"50ms\", backoff_max = \"200ms\", max_restarts = 1000, period = \"60s\" }";

/// The `recycle` records of deployment `id` in `journal`.
fn recycles_in(journal: Vec<Value>, id: &str) -> Vec<Value> {
    journal
        .into_iter()
        .filter(|r| r["kind"] == "recycled" && r["deployment"] == id)
        .collect()
}

/// The journal's `recycle` records of deployment `id`, once it has settled.
fn recycle_records(sup: &Supervisor, id: &str) -> Vec<Value> {
    recycles_in(sup.journal(), id)
}

/// Waits until the journal holds at least `n` recycle records for `id`
/// (without waiting for it to settle: a policy bound may recycle the
/// deployment over and over).
fn wait_recycle_records(sup: &Supervisor, id: &str, n: usize) -> Vec<Value> {
    wait_for(&format!("{n} recycle record(s) of {id}"), LONG, || {
        let recs = recycles_in(sup.journal_so_far(), id);
        (recs.len() >= n).then_some(recs)
    })
}

/// Waits until `id` is ready; returns its pid and channel id.
fn ready_child(sup: &Supervisor, id: &str) -> (u32, String) {
    let pid = sup.ready_pid(id, LONG);
    let channel = sup.deployment(id)["channel_id"]
        .as_str()
        .expect("channel id")
        .to_owned();
    (pid, channel)
}

/// Checks one journaled recycle: its origin, a reason `reason_ok` accepts,
/// the old child's pid and channel id, and a fresh new pid and channel id
/// that the journal's `spawn` record of the new child agrees with.
fn check_record(
    sup: &Supervisor,
    rec: &Value,
    origin: &str,
    reason_ok: impl Fn(&str) -> bool,
    old_pid: u32,
    old_channel: &str,
) -> u32 {
    let b = &rec["body"];
    assert_eq!(b["origin"], origin, "{rec}");
    let reason = b["reason"].as_str().unwrap_or_else(|| panic!("{rec}"));
    assert!(reason_ok(reason), "unexpected reason {reason:?} in {rec}");
    assert_eq!(b["old_pid"].as_u64(), Some(u64::from(old_pid)), "{rec}");
    assert_eq!(b["old_channel_id"], old_channel, "{rec}");
    let new_pid = b["new_pid"].as_u64().unwrap_or_else(|| panic!("{rec}")) as u32;
    assert_ne!(new_pid, old_pid, "{rec}");
    assert!(is_channel_id(&b["new_channel_id"]), "{rec}");
    assert_ne!(
        b["new_channel_id"], old_channel,
        "a fresh channel id: {rec}"
    );
    // Journaled before the recycle record, which is already in.
    let spawn = sup
        .journal_so_far()
        .into_iter()
        .find(|r| r["kind"] == "spawned" && r["body"]["pid"].as_u64() == Some(u64::from(new_pid)))
        .unwrap_or_else(|| panic!("no spawn record for the new pid {new_pid}"));
    assert_eq!(
        spawn["body"]["channel_id"], b["new_channel_id"],
        "the recycle names the channel the new child was spawned with"
    );
    new_pid
}

/// The number in `text` right after `prefix`, e.g. `up 1203 ms` → 1203.
fn number_after(text: &str, prefix: &str) -> Option<u64> {
    let rest = &text[text.find(prefix)? + prefix.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn recycles(d: &Value) -> (u64, u64, u64) {
    let r = &d["recycles"];
    (
        r["policy"].as_u64().unwrap_or(u64::MAX),
        r["operator"].as_u64().unwrap_or(u64::MAX),
        r["self"].as_u64().unwrap_or(u64::MAX),
    )
}

/// Starts `wfhost recycle ID --reason REASON` in the background.
fn spawn_recycle(sup: &Supervisor, id: &str, reason: &str) -> Child {
    Command::new(bin("wfhost"))
        .args(["recycle", id, "--reason", reason, "--config"])
        .arg(sup.config())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wfhost recycle")
}

/// The new pid `wfhost recycle` printed: `recycled ID: pid OLD -> NEW`.
fn printed_new_pid(out: &Output) -> u32 {
    let stdout = stdout(out);
    stdout
        .trim()
        .rsplit("-> ")
        .next()
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no new pid in {}", describe(out)))
}

#[test]
fn max_uptime_recycles_by_policy_and_is_journaled_and_counted() {
    let sup = Supervisor::start_with_settings(
        FAST_POLICY,
        &deployment(
            "aging",
            &exec("exec sleep 1000"),
            "recycle = { max_uptime = \"1s\" }",
        ),
    );
    let (pid0, chan0) = ready_child(&sup, "aging");

    let d = sup.wait_deployment("aging", "a policy recycle", LONG, |d| recycles(d).0 >= 1);
    let (_, operator, self_) = recycles(&d);
    assert_eq!((operator, self_), (0, 0), "only policy recycles: {d}");
    let last = &d["last_recycle"];
    assert_eq!(last["origin"], "policy", "{d}");
    assert!(
        last["reason"]
            .as_str()
            .unwrap_or("")
            .starts_with("max_uptime"),
        "{d}"
    );

    let recs = wait_recycle_records(&sup, "aging", 1);
    let first = &recs[0];
    check_record(
        &sup,
        first,
        "policy",
        |r| r.starts_with("max_uptime:") && number_after(r, "up ").is_some_and(|ms| ms >= 1000),
        pid0,
        &chan0,
    );
    assert!(
        recs.iter().all(|r| r["body"]["origin"] == "policy"),
        "{recs:?}"
    );
    wait_for("the old child to be gone", LONG, || {
        (!alive(pid0)).then_some(())
    });
}

#[test]
fn max_rss_recycles_a_child_whose_process_tree_grows_past_the_bound() {
    // The memory is held by python, a child of `wfhost-child exec`: RSS is
    // measured over the child's whole process tree.
    let command = "[\"{bin}/wfhost-child\", \"exec\", \"--\", \"python3\", \"-c\", \
                   'x = b\"\\x01\" * (200 << 20); import time; time.sleep(1000)']";
    let sup = Supervisor::start_with_settings(
        FAST_POLICY,
        &deployment("hungry", command, "recycle = { max_rss = \"100MiB\" }"),
    );
    // The first child from its spawn record: on a busy machine it can pass
    // its bound and be recycled before status is first read.
    sup.ready_pid("hungry", LONG);
    let first = sup
        .journal_so_far()
        .into_iter()
        .find(|r| r["kind"] == "spawned" && r["deployment"] == "hungry")
        .expect("the first child's spawn record");
    let pid0 = first["body"]["pid"].as_u64().expect("pid") as u32;
    let chan0 = first["body"]["channel_id"]
        .as_str()
        .expect("channel id")
        .to_owned();

    let d = sup.wait_deployment("hungry", "a policy recycle", LONG, |d| recycles(d).0 >= 1);
    assert_eq!(d["last_recycle"]["origin"], "policy", "{d}");
    let recs = wait_recycle_records(&sup, "hungry", 1);
    check_record(
        &sup,
        &recs[0],
        "policy",
        |r| {
            r.starts_with("max_rss:")
                && number_after(r, "max_rss: ").is_some_and(|b| b > 100 << 20)
                && r.ends_with(&format!("bound {} bytes", 100u64 << 20))
        },
        pid0,
        &chan0,
    );
    let (_, operator, self_) = recycles(&sup.deployment("hungry"));
    assert_eq!((operator, self_), (0, 0));
}

#[test]
fn max_grants_age_recycles_and_the_new_child_gets_freshly_read_grants() {
    let dir = TempDir::new();
    let grants = dir.join("grants.json");
    std::fs::write(&grants, br#"{"token":"v1"}"#).expect("write grants");
    let sup = Supervisor::start_with_settings(
        FAST_POLICY,
        &deployment(
            "creds",
            &exec("exec sleep 1000"),
            &format!(
                "grants_file = \"{}\"\nrecycle = {{ max_grants_age = \"1s\" }}\n{PATIENT_RESTART}",
                grants.display()
            ),
        ),
    );
    let pid0 = sup.ready_pid("creds", LONG);
    // Grant age as the first child sees it, and when the sample was taken
    // at the latest.
    let before = sup.deployment("creds");
    let sampled = Instant::now();
    assert_eq!(before["pid"].as_u64(), Some(u64::from(pid0)));
    let chan0 = before["channel_id"].as_str().expect("channel").to_owned();
    let age0 = before["grants_age_ms"].as_u64().expect("grants_age_ms");

    let recs = wait_recycle_records(&sup, "creds", 1);
    let new_pid = check_record(
        &sup,
        &recs[0],
        "policy",
        |r| {
            r.starts_with("max_grants_age:")
                && number_after(r, "grants ").is_some_and(|ms| ms >= 1000)
        },
        pid0,
        &chan0,
    );
    let (d, asked) = wait_for("a ready successor", LONG, || {
        let asked = Instant::now();
        let d = sup.deployment("creds");
        (d["state"] == "ready" && d["pid"].as_u64().is_some_and(|p| p != u64::from(pid0)))
            .then_some((d, asked))
    });
    let between = asked.saturating_duration_since(sampled).as_millis();
    let age1 = d["grants_age_ms"].as_u64().expect("grants_age_ms");
    // Had the grants not been read again, the age would have kept growing:
    // by at least the time between the two samples. A fresh read makes it
    // at least max_grants_age (1 s) younger than that; half is the margin.
    assert!(
        u128::from(age1) + 500 < u128::from(age0) + between,
        "grants_age_ms did not reset: {age0} ms, then {age1} ms {between} ms later (pid {new_pid}: {d})"
    );
    assert_eq!(d["last_recycle"]["origin"], "policy", "{d}");
    assert!(
        d["last_recycle"]["reason"]
            .as_str()
            .unwrap_or("")
            .starts_with("max_grants_age"),
        "{d}"
    );

    // A broken grants file cannot be handed to a new child: every recycle
    // is refused, naming the file, and the child keeps serving: the
    // policy's (asked again each tick) and an operator's alike. (A recycle
    // already under way when the file broke finishes with the grants read
    // as it began.)
    std::fs::write(&grants, br#"{"token":"#).expect("break grants");
    let refused = wait_for("two refused recycles", LONG, || {
        // Refusals come every tick: the log never settles.
        let refused: Vec<Value> = sup
            .events_so_far()
            .into_iter()
            .filter(|e| e["kind"] == "recycle_refused")
            .collect();
        (refused.len() >= 2).then_some(refused)
    });
    let pid1 = refused[0]["body"]["pid"].as_u64().expect("pid");
    for r in &refused {
        assert_eq!(r["body"]["origin"], "policy", "{r}");
        assert_eq!(r["body"]["pid"].as_u64(), Some(pid1), "{r}");
        let error = r["body"]["error"].as_str().unwrap_or("");
        assert!(
            error.contains("not valid JSON") && error.contains("grants.json"),
            "{r}"
        );
    }
    let journaled = recycle_records(&sup, "creds").len();
    let out = sup.client(&["recycle", "creds"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let said = stderr(&out);
    assert!(
        said.contains("grants.json") && said.contains(&format!("keeps running on pid {pid1}")),
        "{said}"
    );
    let d = sup.deployment("creds");
    assert_eq!(d["state"], "ready", "{d}");
    assert_eq!(d["pid"].as_u64(), Some(pid1), "{d}");
    assert_eq!(
        recycle_records(&sup, "creds").len(),
        journaled,
        "a refused recycle is not journaled as one"
    );

    // A crashed child cannot be helped: its replacement waits for the file
    // (the spawn is refused, naming it), and starts once it is fixed.
    wfhost_tests::signal(pid1 as u32, Signal::SIGKILL);
    let d = sup.wait_deployment("creds", "a spawn refused for bad grants", LONG, |d| {
        d["last_exit"]
            .as_str()
            .is_some_and(|e| e.contains("not valid JSON") && e.contains("grants.json"))
    });
    assert_ne!(d["state"], "ready", "{d}");
    std::fs::write(&grants, br#"{"token":"v2"}"#).expect("fix grants");
    let d = sup.wait_deployment("creds", "ready again with the fixed grants", LONG, |d| {
        d["state"] == "ready" && d["grants_age_ms"].is_u64()
    });
    assert!(d["pid"].as_u64().is_some_and(|p| p != pid1), "{d}");
}

/// A recycle checks the grants file as it begins; should the file break
/// while the old child drains, the new child gets the grants read then
/// (their age counts from that read) instead of no child at all.
#[test]
fn grants_broken_during_a_recycle_are_replaced_by_those_read_as_it_began() {
    let dir = TempDir::new();
    let grants = dir.join("grants.json");
    std::fs::write(&grants, br#"{"token":"v1"}"#).expect("write grants");
    // A wait-behaviour step keeps the drain open until drain_deadline.
    let sup = Supervisor::start(&deployment(
        "creds",
        "[\"{bin}/wfhost-child\", \"exec\", \"--drain\", \"wait\", \"--\", \"sleep\", \"1000\"]",
        &format!(
            "grants_file = \"{}\"\ndrain_timeout = \"1s\"\ndrain_deadline = \"1500ms\"\nkill_timeout = \"2s\"",
            grants.display()
        ),
    ));
    let pid0 = sup.ready_pid("creds", LONG);
    let began = Instant::now();
    let recycle = spawn_recycle(&sup, "creds", "rotate");
    sup.wait_deployment("creds", "the recycle's drain", LONG, |d| {
        d["state"] == "draining" && d["drain"]["purpose"] == "recycle"
    });
    std::fs::write(&grants, br#"{"token":"#).expect("break grants");
    let out = recycle.wait_with_output().expect("wait for wfhost recycle");
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let new_pid = printed_new_pid(&out);
    assert_ne!(new_pid, pid0);
    let d = sup.deployment("creds");
    assert_eq!(d["state"], "ready", "{d}");
    assert_eq!(d["pid"].as_u64(), Some(u64::from(new_pid)), "{d}");
    // Read before the drain (1.5 s), not at the spawn after it.
    let age = d["grants_age_ms"].as_u64().expect("grants_age_ms");
    let since = began.elapsed().as_millis() as u64;
    assert!(
        age >= 1400 && age <= since,
        "grants {age} ms old, recycle began {since} ms ago: {d}"
    );
    let log = sup.plain_log();
    assert!(
        log.contains("grants_file broke during the recycle"),
        "{log}"
    );
}

/// A recycle asked for while the child is still starting is carried out
/// once it is ready (drained, replaced, journaled), like any other; if it
/// never becomes ready, the operator is told so.
#[test]
fn a_recycle_asked_for_while_the_child_starts_waits_for_it_then_replaces_it() {
    let sup = Supervisor::start(&format!(
        "{}{}",
        deployment("slow", &testchild("slow-ready"), "ready_timeout = \"10s\""),
        deployment("never", &testchild("no-ready"), "ready_timeout = \"3s\""),
    ));
    let starting = |id: &str| {
        sup.wait_deployment(id, "a child starting", LONG, |d| {
            d["state"] == "starting" && d["pid"].is_u64()
        })["pid"]
            .as_u64()
            .expect("pid")
    };
    let pid0 = starting("slow");
    let never = starting("never");
    let slow = spawn_recycle(&sup, "slow", "while starting");
    let refused = spawn_recycle(&sup, "never", "while starting");

    let out = slow.wait_with_output().expect("wait for wfhost recycle");
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let new_pid = printed_new_pid(&out);
    assert_eq!(
        stdout(&out).trim(),
        format!("recycled slow: pid {pid0} -> {new_pid}")
    );
    assert_ne!(u64::from(new_pid), pid0);
    let recs = recycle_records(&sup, "slow");
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0]["body"]["origin"], "operator");
    assert_eq!(recs[0]["body"]["reason"], "while starting");
    assert_eq!(recs[0]["body"]["old_pid"].as_u64(), Some(pid0));
    assert_eq!(
        recs[0]["body"]["new_pid"].as_u64(),
        Some(u64::from(new_pid))
    );

    let out = refused.wait_with_output().expect("wait for wfhost recycle");
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let said = stderr(&out);
    assert!(
        said.contains(&format!("(pid {never}) of never never became ready")),
        "{said}"
    );
    assert!(recycle_records(&sup, "never").is_empty());
}

/// A recycle whose new child could not start (its program deleted, as in
/// a botched deploy) is refused and the old child keeps serving; once the
/// program is back, the recycle goes through.
#[test]
fn a_recycle_is_refused_while_the_program_cannot_run() {
    let dir = TempDir::new();
    let program = dir.join("deployed-child");
    std::fs::copy(bin("wfh-testchild"), &program).expect("copy the test child");
    let sup = Supervisor::start(&deployment(
        "app",
        &format!("[\"{}\", \"well-behaved\"]", program.display()),
        "",
    ));
    let pid0 = sup.ready_pid("app", LONG);
    std::fs::remove_file(&program).expect("delete the program");

    let out = sup.client(&["recycle", "app", "--reason", "deploy"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let said = stderr(&out);
    assert!(
        said.contains(&format!("command {} cannot be run", program.display()))
            && said.contains(&format!("keeps running on pid {pid0}")),
        "{said}"
    );
    let d = sup.deployment("app");
    assert_eq!(d["state"], "ready", "{d}");
    assert_eq!(d["pid"].as_u64(), Some(u64::from(pid0)), "{d}");
    assert!(alive(pid0));
    let refused: Vec<Value> = sup
        .events()
        .into_iter()
        .filter(|e| e["kind"] == "recycle_refused")
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["body"]["origin"], "operator");
    assert!(recycle_records(&sup, "app").is_empty());

    std::fs::copy(bin("wfh-testchild"), &program).expect("restore the program");
    let out = sup.client(&["recycle", "app", "--reason", "deploy"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert_ne!(printed_new_pid(&out), pid0);
    assert_eq!(recycle_records(&sup, "app").len(), 1);
}

#[test]
fn operator_recycle_reports_the_new_pid_and_is_journaled_and_counted() {
    let sup = Supervisor::start(&deployment(
        "ops",
        &demo(&["--step-ms", "1", "--approve-ms", "1"]),
        "",
    ));
    let (pid0, chan0) = ready_child(&sup, "ops");

    let out = sup.client(&["recycle", "ops", "--reason", "because"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let new_pid = printed_new_pid(&out);
    assert_eq!(
        stdout(&out).trim(),
        format!("recycled ops: pid {pid0} -> {new_pid}")
    );
    // The command returns once the new child is ready, the old one reaped.
    let d = sup.deployment("ops");
    assert_eq!(d["state"], "ready", "{d}");
    assert_eq!(d["pid"].as_u64(), Some(u64::from(new_pid)), "{d}");
    assert!(!alive(pid0), "the old child {pid0} is gone");
    assert_eq!(recycles(&d), (0, 1, 0), "{d}");
    let last = &d["last_recycle"];
    assert_eq!(last["origin"], "operator", "{d}");
    assert_eq!(last["reason"], "because", "{d}");
    assert_eq!(last["old_pid"].as_u64(), Some(u64::from(pid0)), "{d}");
    assert_eq!(last["new_pid"].as_u64(), Some(u64::from(new_pid)), "{d}");
    assert_eq!(d["restarts"], 0, "a recycle is not a restart: {d}");

    let recs = wait_recycle_records(&sup, "ops", 1);
    let journaled = check_record(&sup, &recs[0], "operator", |r| r == "because", pid0, &chan0);
    assert_eq!(journaled, new_pid);
    assert_eq!(recs[0]["body"]["new_channel_id"], d["channel_id"]);

    // Without --reason the journal still says why.
    let out = sup.client(&["recycle", "ops"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let recs = wait_recycle_records(&sup, "ops", 2);
    assert_eq!(recs[1]["body"]["origin"], "operator");
    assert!(
        !recs[1]["body"]["reason"].as_str().unwrap_or("").is_empty(),
        "{:?}",
        recs[1]
    );
    assert_eq!(recycles(&sup.deployment("ops")), (0, 2, 0));

    // An unknown deployment is a clear failure that changes nothing.
    let out = sup.client(&["recycle", "nope"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("unknown deployment") && err.contains("nope") && err.contains("ops"),
        "{err}"
    );
    assert_eq!(recycles(&sup.deployment("ops")), (0, 2, 0));
}

#[test]
fn a_child_asking_to_be_recycled_is_recycled_with_origin_self() {
    let sup = Supervisor::start(&deployment(
        "selfish",
        &demo(&[
            "--recycle-every",
            "3",
            "--step-ms",
            "1",
            "--approve-ms",
            "1",
        ]),
        "",
    ));
    let (pid0, chan0) = ready_child(&sup, "selfish");
    for i in 0..3 {
        let out = sup.client(&["send", "selfish", &format!("job-{i}")]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    }
    let d = sup.wait_deployment("selfish", "a self recycle, all mail done", LONG, |d| {
        recycles(d).2 >= 1 && d["state"] == "ready" && d["mail"]["done"] == 3
    });
    assert_eq!(recycles(&d), (0, 0, 1), "{d}");
    assert_eq!(d["last_recycle"]["origin"], "self", "{d}");
    assert_eq!(d["last_recycle"]["reason"], "processed 3 items", "{d}");
    assert_eq!(
        (
            d["mail"]["inbox"].as_u64(),
            d["mail"]["processing"].as_u64()
        ),
        (Some(0), Some(0)),
        "{d}"
    );
    let recs = wait_recycle_records(&sup, "selfish", 1);
    check_record(
        &sup,
        &recs[0],
        "self",
        |r| r == "processed 3 items",
        pid0,
        &chan0,
    );
    assert!(
        sup.plain_log()
            .contains("demo: processed 3 items: asking to be recycled"),
        "the child says why"
    );
}

#[test]
fn concurrent_recycles_are_absorbed_into_one() {
    // A wait-behaviour step that never ends keeps the drain (and so the
    // recycle) open until drain_deadline: long enough for the later
    // triggers to arrive while it is under way.
    let sup = Supervisor::start(&deployment(
        "busy",
        "[\"{bin}/wfhost-child\", \"exec\", \"--drain\", \"wait\", \"--\", \"sleep\", \"1000\"]",
        "drain_timeout = \"1s\"\ndrain_deadline = \"4s\"\nkill_timeout = \"2s\"",
    ));
    let pid0 = sup.ready_pid("busy", LONG);

    let first = spawn_recycle(&sup, "busy", "first");
    sup.wait_deployment("busy", "the recycle's drain", LONG, |d| {
        d["state"] == "draining" && d["drain"]["purpose"] == "recycle"
    });
    let second = spawn_recycle(&sup, "busy", "second");
    let third = spawn_recycle(&sup, "busy", "third");
    let outs: Vec<Output> = [first, second, third]
        .into_iter()
        .map(|c| c.wait_with_output().expect("wait for wfhost recycle"))
        .collect();
    for out in &outs {
        assert_eq!(out.status.code(), Some(0), "{}", describe(out));
    }
    let pids: Vec<u32> = outs.iter().map(printed_new_pid).collect();
    assert!(
        pids.iter().all(|&p| p == pids[0] && p != pid0),
        "every caller gets the same new pid: {pids:?}"
    );
    let d = sup.deployment("busy");
    assert_eq!(d["pid"].as_u64(), Some(u64::from(pids[0])), "{d}");
    assert_eq!(recycles(&d), (0, 1, 0), "one recycle: {d}");
    assert_eq!(d["last_recycle"]["reason"], "first", "{d}");
    // Nothing else happened after it.
    std::thread::sleep(Duration::from_millis(300));
    let recs = recycle_records(&sup, "busy");
    assert_eq!(recs.len(), 1, "{recs:?}");
    assert_eq!(recs[0]["body"]["reason"], "first");
}

#[test]
fn mail_sent_during_a_recycle_waits_and_reaches_the_new_child_in_order() {
    // approve (a wait step) takes 1 s: the recycle's drain waits for it,
    // and mail sent meanwhile must not go to the draining child.
    let sup = Supervisor::start(&deployment(
        "queue",
        &demo(&["--step-ms", "1", "--approve-ms", "1000"]),
        "drain_timeout = \"10s\"\ndrain_deadline = \"20s\"",
    ));
    let pid0 = sup.ready_pid("queue", LONG);
    let send = |p: &str| {
        let out = sup.client(&["send", "queue", p]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        stdout(&out)
            .split_whitespace()
            .nth(2)
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("{}", describe(&out)))
    };
    let first = send("first");
    sup.wait_deployment("queue", "the first item in approve", LONG, |d| {
        d["steps"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["step"] == "approve"))
    });
    let recycle = spawn_recycle(&sup, "queue", "with mail waiting");
    sup.wait_deployment("queue", "the recycle's drain", LONG, |d| {
        d["state"] == "draining"
    });
    let later = [send("second"), send("third")];
    let d = sup.deployment("queue");
    if d["state"] == "draining" {
        assert_eq!(d["mail"]["inbox"], 2, "held in the inbox: {d}");
        assert_eq!(d["mail"]["buffered"], 2, "{d}");
    }
    let out = recycle.wait_with_output().expect("wait for wfhost recycle");
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let new_pid = printed_new_pid(&out);
    sup.wait_deployment("queue", "all three done", LONG, |d| {
        d["mail"]["done"] == 3 && d["mail"]["inbox"] == 0 && d["mail"]["processing"] == 0
    });
    let old = sup.received_mail(Some(pid0));
    assert_eq!(old, [first], "the draining child got nothing new");
    // The interrupted first item went back to the head of the inbox.
    assert_eq!(
        sup.received_mail(Some(new_pid)),
        [first, later[0], later[1]]
    );
}

/// A supervisor of `stubborn`, a child that ignores Drain and SIGTERM, once
/// `wfhost recycle stubborn --reason first` has it stopping: the recycle
/// spends drain_deadline draining, then `kill_timeout` stopping, before
/// SIGKILL. Returns the supervisor, the old child's pid and the recycle.
fn recycling_a_stubborn_child(kill_timeout: &str) -> (Supervisor, u32, Child) {
    let sup = Supervisor::start(&deployment(
        "stubborn",
        &testchild("ignore-term"),
        &format!(
            "drain_timeout = \"200ms\"\ndrain_deadline = \"200ms\"\nkill_timeout = \"{kill_timeout}\""
        ),
    ));
    let pid0 = sup.ready_pid("stubborn", LONG);
    let recycle = spawn_recycle(&sup, "stubborn", "first");
    sup.wait_deployment("stubborn", "the old child stopping", LONG, |d| {
        d["state"] == "stopping"
    });
    (sup, pid0, recycle)
}

#[test]
fn a_recycle_asked_for_while_the_old_child_is_stopping_is_absorbed() {
    let (sup, pid0, first) = recycling_a_stubborn_child("3s");
    let second = spawn_recycle(&sup, "stubborn", "second");
    let outs: Vec<Output> = [first, second]
        .into_iter()
        .map(|c| c.wait_with_output().expect("wait for wfhost recycle"))
        .collect();
    for out in &outs {
        assert_eq!(
            out.status.code(),
            Some(0),
            "both callers see the recycle complete: {}",
            describe(out)
        );
    }
    let pids: Vec<u32> = outs.iter().map(printed_new_pid).collect();
    assert!(pids[0] == pids[1] && pids[0] != pid0, "{pids:?}");
    assert_eq!(recycles(&sup.deployment("stubborn")), (0, 1, 0));
}

#[test]
fn sigterm_during_a_recycle_still_stops_the_supervisor() {
    let (mut sup, pid0, recycle) = recycling_a_stubborn_child("2s");
    sup.signal(Signal::SIGTERM);
    let status = sup.wait_exit(LONG);
    assert!(status.success(), "graceful stop exits 0: {status:?}");
    // However the recycle is answered, no child may outlive the stop.
    let _ = recycle.wait_with_output();
    assert!(!alive(pid0));
    let left = wfhost_tests::children_of(sup.pid());
    assert!(
        left.is_empty(),
        "children of the stopped supervisor remain: {left:?}"
    );
}

#[test]
fn recycling_an_idle_child_time_to_ready_is_measured() {
    const ROUNDS: usize = 20;
    let sup = Supervisor::start(&deployment(
        "idle",
        &demo(&["--step-ms", "1", "--approve-ms", "1"]),
        "",
    ));
    let mut pid = sup.ready_pid("idle", LONG);
    let mut cli_ms = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let out = sup.client(&["recycle", "idle"]);
        let took = t.elapsed();
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let new_pid = printed_new_pid(&out);
        assert_ne!(new_pid, pid);
        pid = new_pid;
        cli_ms.push(took.as_secs_f64() * 1000.0);
    }
    let d = sup.deployment("idle");
    assert_eq!(recycles(&d), (0, ROUNDS as u64, 0), "{d}");
    assert_eq!(d["pid"].as_u64(), Some(u64::from(pid)));

    // The supervisor's own view: drain_started to the new child's ready
    // event, from the event log (millisecond timestamps; the log is
    // written behind the replies, so wait for the last one).
    let mut server_ms = wait_for("every recycle's events", LONG, || {
        let ms = drain_to_ready_ms(&sup);
        (ms.len() >= ROUNDS).then_some(ms)
    });
    assert_eq!(server_ms.len(), ROUNDS, "{server_ms:?}");
    eprintln!(
        "recycle of an idle child to the new child's Ready over {ROUNDS} rounds: \
         `wfhost recycle` wall time {}; supervisor drain_started→ready {}",
        summary(&mut cli_ms),
        summary(&mut server_ms)
    );
}

/// `min/median/p90/max` in milliseconds.
fn summary(ms: &mut [f64]) -> String {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    format!(
        "min {:.1} ms, median {:.1} ms, p90 {:.1} ms, max {:.1} ms",
        at(0.0),
        at(0.5),
        at(0.9),
        at(1.0)
    )
}

/// For each drain in the event log, the milliseconds from `drain_started`
/// to the next `ready`.
fn drain_to_ready_ms(sup: &Supervisor) -> Vec<f64> {
    let mut ms = Vec::new();
    let mut started = None;
    for e in sup.events() {
        match e["kind"].as_str() {
            Some("drain_started") => started = e["at_ms"].as_u64(),
            Some("ready") => {
                if let (Some(s), Some(r)) = (started.take(), e["at_ms"].as_u64()) {
                    ms.push(r.saturating_sub(s) as f64);
                }
            }
            _ => {}
        }
    }
    ms
}

#[test]
fn max_mail_recycles_each_child_after_that_many_items_and_loses_none() {
    let sup = Supervisor::start(&deployment(
        "batch",
        &demo(&["--step-ms", "1", "--approve-ms", "1"]),
        "recycle = { max_mail = 10 }",
    ));
    sup.ready_pid("batch", LONG);
    // One item at a time, each done before the next is sent, so every
    // child has acknowledged exactly its 10 when it is recycled.
    let sent: Vec<u64> = (0..35)
        .map(|i| {
            let out = sup.client(&["send", "batch", &format!("item-{i}")]);
            assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
            sup.wait_deployment("batch", "the item done", LONG, |d| {
                d["mail"]["done"] == i + 1 && d["state"] == "ready"
            });
            stdout(&out)
                .split_whitespace()
                .nth(2)
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{}", describe(&out)))
        })
        .collect();
    // 10 per child: 35 items take three recycles.
    let recs = recycle_records(&sup, "batch");
    assert_eq!(recs.len(), 3, "{recs:#?}");
    for r in &recs {
        assert_eq!(r["body"]["origin"], "policy", "{r}");
        let reason = r["body"]["reason"].as_str().unwrap_or("");
        assert!(
            reason.starts_with("max_mail: 10 items acknowledged since ready, bound 10"),
            "{r}"
        );
    }
    let mut done: Vec<u64> = sup
        .events()
        .iter()
        .filter(|e| e["kind"] == "mail_done")
        .filter_map(|e| e["body"]["id"].as_u64())
        .collect();
    done.sort_unstable();
    assert_eq!(done, sent, "every item done exactly once");
}

#[test]
fn a_schedule_a_few_seconds_ahead_recycles_once_with_its_reason() {
    // The supervisor reads local time as this test does (same TZ).
    let out = Command::new("date")
        .args(["-d", "+5 seconds", "+%H:%M:%S"])
        .output()
        .expect("date");
    let at = stdout(&out).trim().to_owned();
    let sup = Supervisor::start_with_settings(
        FAST_POLICY,
        &deployment(
            "nightly",
            &exec("exec sleep 1000"),
            &format!("recycle = {{ at = [\"{at}\"] }}"),
        ),
    );
    let (pid0, chan0) = ready_child(&sup, "nightly");
    let recs = wait_recycle_records(&sup, "nightly", 1);
    let new_pid = check_record(
        &sup,
        &recs[0],
        "policy",
        |r| r.starts_with("schedule: recycle.at came at ") && r.contains(&at),
        pid0,
        &chan0,
    );
    // The new child's next scheduled time is tomorrow's.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(recycle_records(&sup, "nightly").len(), 1);
    assert_eq!(sup.deployment("nightly")["pid"], new_pid);
    let last = &sup.deployment("nightly")["last_recycle"];
    assert!(
        last["reason"]
            .as_str()
            .unwrap_or("")
            .starts_with("schedule"),
        "{last}"
    );
}
