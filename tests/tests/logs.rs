//! Logs people and machines can read: the deployment first on every line
//! it concerns, JSON lines with `log_format = "json"`, and `wfhost logs`
//! serving a deployment's recent child output from the supervisor's
//! bounded buffer, followed live with `--follow`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;
use wfhost_tests::{
    LONG, Supervisor, bin, deployment, exec, ok, stderr, stdout, strip_ansi, wait_for,
};

/// A command printing `line N` every 50 ms.
fn counter() -> String {
    exec("i=0; while :; do i=$((i+1)); echo line $i; sleep 0.05; done")
}

#[test]
fn child_output_lines_start_with_the_deployment_and_pid() {
    let sup = Supervisor::start(&deployment(
        "talker",
        &exec("echo hello there; exec sleep 1000"),
        "",
    ));
    let pid = sup.ready_pid("talker", LONG);
    let want = format!(" INFO talker[{pid}] stdout: hello there");
    let log = wait_for("the child's line", LONG, || {
        let log = sup.plain_log();
        log.contains(&want).then_some(log)
    });
    assert!(
        log.contains(&format!(" INFO talker[{pid}]: ready channel=")),
        "facts lead with the deployment too:\n{log}"
    );
    for line in log.lines().filter(|l| l.contains("talker")) {
        let after_level = line.split_whitespace().nth(2).unwrap_or("");
        assert!(
            after_level.starts_with("talker"),
            "the deployment first: {line}"
        );
    }
}

#[test]
fn logs_prints_the_newest_lines_across_a_recycle() {
    let sup = Supervisor::start(&deployment("count", &counter(), ""));
    let first = sup.ready_pid("count", LONG);
    wait_for("ten lines", LONG, || {
        sup.plain_log().contains("stdout: line 10").then_some(())
    });
    let out = ok("logs", &sup.client(&["logs", "count", "--lines", "3"]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    for l in &lines {
        assert!(l.contains(&format!(" count[{first}] stdout: line ")), "{l}");
    }
    let numbers: Vec<u64> = lines
        .iter()
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert!(
        numbers.windows(2).all(|w| w[1] == w[0] + 1),
        "consecutive, newest last: {numbers:?}"
    );

    ok("recycle", &sup.client(&["recycle", "count"]));
    let second = sup.ready_pid("count", LONG);
    assert_ne!(first, second);
    let out = wait_for("the new child's lines", LONG, || {
        let out = ok(
            "logs",
            &sup.client(&["logs", "count", "-n", "1000", "--json"]),
        );
        out.contains(&format!("\"pid\":{second}")).then_some(out)
    });
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    assert!(
        lines.iter().any(|l| l["pid"] == first),
        "the old child's lines stay"
    );
    let seqs: Vec<u64> = lines
        .iter()
        .map(|l| l["seq"].as_u64().expect("seq"))
        .collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    assert!(lines.iter().all(|l| l["cut"] == false));
    // wfhost-child's own words on stderr are there too.
    assert!(
        lines.iter().any(|l| l["stream"] == "stderr"
            && l["text"]
                .as_str()
                .is_some_and(|t| t.starts_with("wfhost-child: drain"))),
        "{out}"
    );
}

#[test]
fn logs_follow_prints_lines_as_they_come() {
    let sup = Supervisor::start(&deployment("count", &counter(), ""));
    sup.ready_pid("count", LONG);
    let mut follower = Command::new(bin("wfhost"))
        .args(["logs", "count", "--follow", "--lines", "0", "--config"])
        .arg(sup.config())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wfhost logs --follow");
    let (tx, rx) = mpsc::channel();
    let out = follower.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    while seen.len() < 5 {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(line) => seen.push(line),
            Err(e) => panic!("no line followed ({e}); so far {seen:?}"),
        }
    }
    let _ = follower.kill();
    let _ = follower.wait();
    let numbers: Vec<u64> = seen
        .iter()
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(numbers.len(), 5, "{seen:?}");
    assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{seen:?}");
}

#[test]
fn logs_of_an_unknown_deployment_names_the_known_ones() {
    let sup = Supervisor::start(&deployment("count", &counter(), ""));
    let out = sup.client(&["logs", "nope"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("unknown deployment \"nope\"; known deployments: count"));
    assert_eq!(stdout(&out), "");
}

#[test]
fn json_logs_are_one_object_a_line_with_the_fields_at_the_top() {
    let sup = Supervisor::start_with_settings(
        "log_format = \"json\"",
        &deployment("talker", &exec("echo hello there; exec sleep 1000"), ""),
    );
    let pid = sup.ready_pid("talker", LONG);
    let log = wait_for("the child's line", LONG, || {
        let log = sup.log();
        log.contains("hello there").then_some(log)
    });
    let events: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let said = events
        .iter()
        .find(|e| e["message"] == "hello there")
        .expect("the child's line");
    assert_eq!(said["deployment"], "talker", "{said}");
    assert_eq!(said["pid"], pid, "{said}");
    assert_eq!(said["stream"], "stdout", "{said}");
    assert_eq!(said["level"], "INFO", "{said}");
    assert!(said["timestamp"].is_string(), "{said}");
    assert!(
        events
            .iter()
            .any(|e| e["message"] == "ready" && e["deployment"] == "talker"),
        "facts too"
    );
    assert_eq!(strip_ansi(&log), log, "no colour codes");
}
