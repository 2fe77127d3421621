//! A child that floods its stdout (issue 13, finding 12): its lines are
//! logged within a rate per child and the rest counted, so 100 MB of
//! output neither stalls its neighbours nor grows the supervisor's
//! memory or log.

use std::time::{Duration, Instant};

use wfhost_tests::{LONG, Supervisor, deployment, describe, exec, ok, testchild, wait_for};

mod hostile_support;
use hostile_support::kib;

/// The supervisor's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    kib(pid, "VmRSS")
}

/// Before: each of a child's lines was written to the log on the runtime
/// thread, with no bound. Now a child writing 100 MB of lines gets 2000
/// at once and 500 a second logged, the rest counted and said; its
/// neighbour's sends and status stay prompt and memory stays flat.
#[test]
fn a_hundred_megabytes_of_output_stall_no_neighbour_and_are_counted() {
    // 1,000,000 lines of 100 bytes, a pause, then one last line.
    let line = "x".repeat(99);
    let flood = exec(&format!(
        "yes {line} | head -c 100000000; sleep 1; echo flood done; exec sleep 1000"
    ));
    let sup = Supervisor::start(&format!(
        "{}{}",
        deployment("loud", &flood, ""),
        deployment("neighbour", &testchild("well-behaved"), ""),
    ));
    let pid = sup.pid();
    sup.ready_pid("neighbour", LONG);
    let before = rss_kib(pid);
    let log_before = sup.log().len();
    let started = Instant::now();
    let mut peak = before;
    let mut slowest = Duration::ZERO;
    let mut sends = 0;
    while !sup.plain_log().contains("stdout: flood done") {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the flood did not end within 2 minutes"
        );
        let t = Instant::now();
        let out = sup.client(&["send", "neighbour", "ping"]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        let out = sup.client(&["status", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        slowest = slowest.max(t.elapsed());
        sends += 1;
        peak = peak.max(rss_kib(pid));
        std::thread::sleep(Duration::from_millis(100));
    }
    let took = started.elapsed();
    let log = sup.plain_log();
    let flood_lines = log.lines().filter(|l| l.contains(&line)).count();
    let said: u64 = log
        .lines()
        .filter(|l| l.contains("lines of output suppressed"))
        .filter_map(|l| {
            l.split("suppressed=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    let grew = (sup.log().len() - log_before) as f64 / 1e6;
    eprintln!(
        "100 MB of output in {took:?}: {flood_lines} lines logged, {said} counted as suppressed, log +{grew:.1} MB; \
         supervisor RSS {before} KiB before, {peak} KiB at peak; slowest neighbour send+status {slowest:?} over {sends} rounds"
    );
    assert_eq!(
        flood_lines as u64 + said,
        1_000_000,
        "every line logged or counted"
    );
    let allowed = 2000.0 + 500.0 * took.as_secs_f64() + 500.0;
    assert!(
        (flood_lines as f64) < allowed,
        "{flood_lines} lines logged in {took:?}"
    );
    assert!(
        peak < before + 20 * 1024,
        "RSS grew from {before} to {peak} KiB"
    );
    assert!(
        slowest < Duration::from_secs(2),
        "a neighbour's send and status took {slowest:?}"
    );
    // `wfhost logs` shows the count where the lines were left out.
    let logs = ok("logs", &sup.client(&["logs", "loud", "--lines", "1000"]));
    assert!(
        logs.contains("lines of output suppressed: more than 2000 at once or 500 a second"),
        "{}",
        logs.lines().rev().take(5).collect::<Vec<_>>().join("\n")
    );
    wait_for("the neighbour's mail done", LONG, || {
        let d = sup.deployment("neighbour");
        (d["mail"]["done"].as_u64() == Some(sends)).then_some(())
    });
}
