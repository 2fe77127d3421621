//! One child against everyone (issue 13): a child that asks to be
//! recycled after every start, floods its channel with steps or custom
//! events, or reports steps with long names must not stall the other
//! deployments or the control socket, grow the supervisor without bound,
//! or break `wfhost status`.

use std::time::{Duration, Instant};

use serde_json::Value;
use wfhost_tests::{LONG, Supervisor, demo, deployment, describe, testchild, wait_for};

mod hostile_support;
use hostile_support::kib;

/// The supervisor's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    kib(pid, "VmRSS")
}

/// How long `f` takes, and its result.
fn timed<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let t = Instant::now();
    let out = f();
    (t.elapsed(), out)
}

fn events_of(sup: &Supervisor, kind: &str) -> Vec<Value> {
    sup.events_so_far()
        .into_iter()
        .filter(|e| e["kind"] == kind)
        .collect()
}

/// Before: 80–100 recycles in 8 s, each with signed journal records, and
/// never failed. Now a child that asks at once after every start is held
/// to the restart policy: growing delays, then `failed`.
#[test]
fn a_child_asking_to_be_recycled_after_every_start_is_slowed_then_failed() {
    let sup = Supervisor::start(&deployment("looper", &testchild("recycle-loop"), ""));
    let d = sup.wait_deployment("looper", "failed", LONG, |d| d["state"] == "failed");
    let recycles = d["recycles"]["self"].as_u64().unwrap_or(0);
    assert!(recycles <= 6, "at most max_restarts + 1 recycles: {d}");
    assert!(
        d["last_exit"]
            .as_str()
            .unwrap_or("")
            .contains("asked to be recycled 6 times within 1m"),
        "{d}"
    );
    let delayed = events_of(&sup, "recycle_delayed");
    let delays: Vec<u64> = delayed
        .iter()
        .filter_map(|e| e["body"]["delay_ms"].as_u64())
        .collect();
    assert_eq!(delays, [100, 200, 400, 800], "growing delays: {delayed:?}");
    // It stays failed: no more recycles.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        sup.deployment("looper")["recycles"]["self"].as_u64(),
        Some(recycles)
    );
}

/// A child that works between its requests is never slowed: the example
/// workflow recycles itself every 2 items.
#[test]
fn a_child_that_works_between_its_recycle_requests_is_not_slowed() {
    let sup = Supervisor::start(&deployment(
        "orders",
        &demo(&[
            "--recycle-every",
            "2",
            "--step-ms",
            "1",
            "--approve-ms",
            "1",
        ]),
        "",
    ));
    sup.ready_pid("orders", LONG);
    for i in 0..16 {
        let out = sup.client(&["send", "orders", &format!("item {i}")]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    }
    let d = sup.wait_deployment("orders", "16 items done", LONG, |d| {
        d["mail"]["done"] == 16 && d["state"] == "ready"
    });
    assert!(d["recycles"]["self"].as_u64() >= Some(4), "{d}");
    assert!(events_of(&sup, "recycle_delayed").is_empty());
}

/// Before: 9,000 valid `StepStarted` frames stalled the whole supervisor
/// for 7–34 s (every event re-copied the step list). Now each event costs
/// the same however many steps are in flight, a flood yields to the
/// others, and status lists the first steps and counts the rest.
#[test]
fn a_step_flood_stalls_no_neighbour_and_status_stays_small() {
    let sup = Supervisor::start(&format!(
        "{}{}",
        deployment(
            "flood",
            &testchild("step-flood"),
            "env = { WFH_FLOOD = \"9000\" }"
        ),
        deployment("neighbour", &testchild("well-behaved"), ""),
    ));
    sup.ready_pid("neighbour", LONG);
    let mut slowest = Duration::ZERO;
    let d = wait_for("9000 steps in flight", LONG, || {
        let (took, out) = timed(|| sup.client(&["status", "--json"]));
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        slowest = slowest.max(took);
        let (took, out) = timed(|| sup.client(&["send", "neighbour", "x"]));
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        slowest = slowest.max(took);
        let d = sup.deployment("flood");
        (d["steps_in_flight"] == 9000).then_some(d)
    });
    assert_eq!(d["steps"].as_array().map(Vec::len), Some(64), "{d}");
    // Generous: each client command is a process start too.
    assert!(
        slowest < Duration::from_secs(3),
        "a status or send took {slowest:?} during the flood"
    );
    eprintln!("step flood: slowest status or neighbour send {slowest:?}");
}

/// Before: 4,000 steps with ≈600-character names made every `wfhost
/// status` exit 3 (the answer passed the 4 MiB message cap). Now status
/// lists the first 64 steps and counts the rest, and always answers.
#[test]
fn long_step_names_do_not_break_status() {
    let sup = Supervisor::start(&deployment(
        "verbose",
        &testchild("step-flood"),
        "env = { WFH_FLOOD = \"4000\", WFH_NAME_CHARS = \"600\" }",
    ));
    let d = sup.wait_deployment("verbose", "4000 steps", LONG, |d| {
        d["steps_in_flight"] == 4000
    });
    let steps = d["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 64);
    assert!(
        steps
            .iter()
            .all(|s| s["step"].as_str().is_some_and(|n| n.chars().count() == 257)),
        "names cut to 256 characters and marked: {d}"
    );
    let out = sup.client(&["status"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
}

/// Before: 200,000 small `Custom` frames pushed the supervisor from 6 MiB
/// to 124–155 MiB, and it stayed there (the event backlog was unbounded).
/// Now a child's reports are rate-limited, what is left out is counted and
/// said, and memory stays flat.
#[test]
fn a_custom_event_flood_is_counted_not_buffered() {
    let sup = Supervisor::start(&deployment(
        "chatty",
        &testchild("custom-flood"),
        "env = { WFH_FLOOD = \"200000\" }",
    ));
    let pid = sup.pid();
    let before = rss_kib(pid);
    let started = std::time::Instant::now();
    sup.ready_pid("chatty", LONG);
    let mut peak = before;
    let suppressed = wait_for("the flood counted", LONG, || {
        peak = peak.max(rss_kib(pid));
        let dropped: u64 = events_of(&sup, "events_suppressed")
            .iter()
            .filter_map(|e| e["body"]["dropped"].as_u64())
            .sum();
        let published = events_of(&sup, "custom").len() as u64;
        (dropped + published >= 200_000).then_some((dropped, published))
    });
    let (dropped, published) = suppressed;
    // Every report is either published or counted, and no more are
    // published than the rate allows (a burst of 2,000, then 500 a second)
    // in however long the flood took on this machine.
    let allowed = 2_000 + 500 * (started.elapsed().as_secs() + 1);
    assert_eq!(
        dropped + published,
        200_000,
        "{dropped} dropped, {published} published"
    );
    assert!(
        published <= allowed && dropped >= 200_000 - allowed,
        "{dropped} dropped, {published} published, at most {allowed} allowed"
    );
    eprintln!(
        "custom flood: {published} published, {dropped} counted and left out; supervisor RSS {} KiB before, {} KiB at peak",
        before, peak
    );
    assert!(
        peak < before + 40 * 1024,
        "RSS grew from {before} KiB to {peak} KiB"
    );
}
