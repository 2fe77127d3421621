//! The endpoint's HTTP handling and its exposition text.

use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use super::MAX_HEAD;
use super::http::*;
use super::render::*;
use crate::status::{ReplicaView, Role, RssCell, State, Status};
use crate::store::MailCounts;

fn head(text: &str) -> Route {
    route(text.as_bytes())
}

#[test]
fn routes_get_metrics_and_nothing_else() {
    assert_eq!(
        head("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9464\r\nAccept: */*\r\n\r\n"),
        Route::Metrics
    );
    assert_eq!(head("GET /metrics?x=1 HTTP/1.0\r\n\r\n"), Route::Metrics);
    assert_eq!(head("GET /metrics HTTP/1.1\n\n"), Route::Metrics);
    assert_eq!(head("GET / HTTP/1.1\r\n\r\n"), Route::NotFound);
    assert_eq!(head("GET /metrics/ HTTP/1.1\r\n\r\n"), Route::NotFound);
    assert_eq!(head("POST /metrics HTTP/1.1\r\n\r\n"), Route::NotFound);
    assert_eq!(head("HEAD /metrics HTTP/1.1\r\n\r\n"), Route::NotFound);
}

#[test]
fn refuses_malformed_requests() {
    for bad in [
        "\r\n\r\n",
        "GARBAGE\r\n\r\n",
        "GET /metrics\r\n\r\n",
        "GET  /metrics HTTP/1.1\r\n\r\n",
        "GET /metrics HTTP/1.1 extra\r\n\r\n",
        "GET /metrics HTTP/2.0\r\n\r\n",
        "GET /metrics HTTP/1.x\r\n\r\n",
        "GET metrics HTTP/1.1\r\n\r\n",
        "G(T /metrics HTTP/1.1\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nNoColon\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
        "GET /metrics HTTP/1.1\r\nBad Name: a\r\n\r\n",
    ] {
        assert_eq!(head(bad), Route::BadRequest, "{bad:?}");
    }
    assert_eq!(
        route(b"GET /metrics HTTP/1.1\r\nX: \xff\r\n\r\n"),
        Route::BadRequest
    );
}

#[tokio::test]
async fn reads_the_head_and_no_further() {
    let mut r = &b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nbody"[..];
    assert_eq!(
        read_head(&mut r).await.ok(),
        Some(Head::Complete(
            b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()
        ))
    );
    // The blank line split across two reads.
    let mut r = (&b"GET /metrics HTTP/1.1\r\n\r"[..]).chain(&b"\nrest"[..]);
    assert_eq!(
        read_head(&mut r).await.ok(),
        Some(Head::Complete(b"GET /metrics HTTP/1.1\r\n\r\n".to_vec()))
    );
    let mut r = &b""[..];
    assert_eq!(read_head(&mut r).await.ok(), Some(Head::Closed));
    let mut r = &b"GET /metrics HTTP/1.1\r\n"[..];
    assert_eq!(read_head(&mut r).await.ok(), Some(Head::Truncated));
}

#[tokio::test]
async fn refuses_heads_over_the_limit() {
    // Exactly at the limit is fine.
    let line = "GET /metrics HTTP/1.1\r\nX: ";
    let fill = MAX_HEAD - line.len() - 4;
    let exact = format!("{line}{}\r\n\r\n", "a".repeat(fill));
    assert_eq!(exact.len(), MAX_HEAD);
    let mut r = exact.as_bytes();
    assert!(matches!(read_head(&mut r).await.ok(), Some(Head::Complete(h)) if h.len() == MAX_HEAD));
    // One byte more is not, and nothing past the limit is read.
    let over = format!("{line}{}\r\n\r\n", "a".repeat(fill + 1));
    let mut r = over.as_bytes();
    assert_eq!(read_head(&mut r).await.ok(), Some(Head::TooLarge));
    assert_eq!(r.len(), over.len() - MAX_HEAD);
    let endless = vec![b'a'; 1 << 20];
    let mut r = &endless[..];
    assert_eq!(read_head(&mut r).await.ok(), Some(Head::TooLarge));
}

#[test]
fn responses_carry_length_type_and_close() {
    let r = response("404 Not Found", "text/plain", "nope\n");
    assert_eq!(
        String::from_utf8_lossy(&r),
        "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nConnection: close\r\n\r\nnope\n"
    );
}

#[test]
fn every_state_is_listed_once() {
    for s in STATES {
        // Fails to compile when a state is added, as a reminder.
        match s {
            State::Starting
            | State::Ready
            | State::Draining
            | State::Stopping
            | State::Exited
            | State::Backoff
            | State::Failed
            | State::Drained => {}
        }
        assert_eq!(STATES.iter().filter(|&&t| t == s).count(), 1);
    }
}

#[test]
fn renders_every_family_for_a_deployment() {
    let start = Instant::now();
    let now = start + Duration::from_millis(5123);
    let mut s = Status::new("billing", Duration::from_millis(60000));
    s.state = State::Draining;
    s.pid = Some(4242);
    s.started_at = Some(start);
    let rss = RssCell::default();
    rss.set(Some(10_485_760));
    s.replicas = vec![ReplicaView {
        index: 1,
        role: Role::Serving,
        state: State::Draining,
        pid: Some(4242),
        channel_id: None,
        started_at: Some(start),
        rss: Some(rss),
        in_hand: 0,
        mail_done: 0,
        steps_in_flight: 0,
        draining: true,
    }];
    s.restarts = 2;
    s.recycles.policy = 3;
    s.recycles.operator = 1;
    s.recycle_reasons.insert("max_rss".into(), 2);
    s.recycle_reasons.insert("max_uptime".into(), 1);
    s.recycle_reasons.insert("operator".into(), 1);
    s.escalations = 1;
    s.violations = 4;
    s.cancels_pending = 1;
    s.drain.active = true;
    // 2,123 ms of cancel-behaviour time by `now`.
    let mut budget = wfhost_policy::BudgetMeter::new(Duration::from_secs(60));
    budget.start(start + Duration::from_millis(3000), true);
    s.drain.budget = Some(budget);
    let mail = MailCounts {
        inbox: 5,
        processing: 1,
        working: 1,
        interrupted: 0,
        awaiting: 0,
        questions_open: 0,
        oldest_question_at_ms: None,
        done: 17,
        dead: 2,
    };
    let text = render(&[(s, mail)], None, now);
    let expected = r#"# HELP wfhost_child_rss_bytes Resident memory of the child's process tree at the last policy check.
# TYPE wfhost_child_rss_bytes gauge
wfhost_child_rss_bytes{deployment="billing"} 10485760
# HELP wfhost_child_uptime_seconds Time since the live child was spawned.
# TYPE wfhost_child_uptime_seconds gauge
wfhost_child_uptime_seconds{deployment="billing"} 5.123
# HELP wfhost_deployment_state 1 for the deployment's current state, 0 for the others.
# TYPE wfhost_deployment_state gauge
wfhost_deployment_state{deployment="billing",state="starting"} 0
wfhost_deployment_state{deployment="billing",state="ready"} 0
wfhost_deployment_state{deployment="billing",state="draining"} 1
wfhost_deployment_state{deployment="billing",state="stopping"} 0
wfhost_deployment_state{deployment="billing",state="exited"} 0
wfhost_deployment_state{deployment="billing",state="backoff"} 0
wfhost_deployment_state{deployment="billing",state="failed"} 0
wfhost_deployment_state{deployment="billing",state="drained"} 0
# HELP wfhost_restarts_total Restarts after unexpected child exits since the supervisor started.
# TYPE wfhost_restarts_total counter
wfhost_restarts_total{deployment="billing"} 2
# HELP wfhost_recycles_total Completed recycles by origin (policy, operator, self).
# TYPE wfhost_recycles_total counter
wfhost_recycles_total{deployment="billing",origin="policy"} 3
wfhost_recycles_total{deployment="billing",origin="operator"} 1
wfhost_recycles_total{deployment="billing",origin="self"} 0
# HELP wfhost_recycles_by_reason_total Completed recycles by reason: the bound passed for policy recycles, else the origin.
# TYPE wfhost_recycles_by_reason_total counter
wfhost_recycles_by_reason_total{deployment="billing",reason="max_rss"} 2
wfhost_recycles_by_reason_total{deployment="billing",reason="max_uptime"} 1
wfhost_recycles_by_reason_total{deployment="billing",reason="operator"} 1
# HELP wfhost_drain_active 1 while a drain is under way.
# TYPE wfhost_drain_active gauge
wfhost_drain_active{deployment="billing"} 1
# HELP wfhost_drain_budget_used_seconds Drain budget used by the current or last drain.
# TYPE wfhost_drain_budget_used_seconds gauge
wfhost_drain_budget_used_seconds{deployment="billing"} 2.123
# HELP wfhost_drain_budget_seconds The drain budget in force.
# TYPE wfhost_drain_budget_seconds gauge
wfhost_drain_budget_seconds{deployment="billing"} 60
# HELP wfhost_drain_escalations_total Drain budgets that ran out and escalated to a signed cancel.
# TYPE wfhost_drain_escalations_total counter
wfhost_drain_escalations_total{deployment="billing"} 1
# HELP wfhost_mail Mail items in the durable store by state (inbox, processing, done, interrupted).
# TYPE wfhost_mail gauge
wfhost_mail{deployment="billing",state="inbox"} 5
wfhost_mail{deployment="billing",state="processing"} 1
wfhost_mail{deployment="billing",state="done"} 17
wfhost_mail{deployment="billing",state="interrupted"} 0
# HELP wfhost_mail_working Mail items a child's handler has started and not finished (the rest of processing waits in the child).
# TYPE wfhost_mail_working gauge
wfhost_mail_working{deployment="billing"} 1
# HELP wfhost_questions_open Questions items' handlers asked a person, waiting for an answer.
# TYPE wfhost_questions_open gauge
wfhost_questions_open{deployment="billing"} 0
# HELP wfhost_question_oldest_age_seconds How long the oldest open question has waited for an answer (0: none open).
# TYPE wfhost_question_oldest_age_seconds gauge
wfhost_question_oldest_age_seconds{deployment="billing"} 0
# HELP wfhost_mail_dead Mail quarantined after max_deliveries failed deliveries, waiting for `wfhost mail retry` or `purge`.
# TYPE wfhost_mail_dead gauge
wfhost_mail_dead{deployment="billing"} 2
# HELP wfhost_protocol_violations_total Children killed for breaking the control protocol.
# TYPE wfhost_protocol_violations_total counter
wfhost_protocol_violations_total{deployment="billing"} 4
# HELP wfhost_cancels_pending Signed cancels waiting for the journal to accept them.
# TYPE wfhost_cancels_pending gauge
wfhost_cancels_pending{deployment="billing"} 1
"#;
    assert_eq!(text, expected);
}

#[test]
fn leaves_out_what_cannot_be_measured() {
    let now = Instant::now();
    let text = render(
        &[(
            Status::new("idle", Duration::from_millis(1500)),
            MailCounts::default(),
        )],
        None,
        now,
    );
    assert!(!text.contains("wfhost_child_rss_bytes{"), "{text}");
    assert!(
        !text.contains("wfhost_host_"),
        "no host facts, no host families: {text}"
    );
    assert!(!text.contains("wfhost_child_uptime_seconds{"), "{text}");
    assert!(!text.contains("wfhost_recycles_by_reason_total{"), "{text}");
    assert!(text.contains("wfhost_drain_budget_seconds{deployment=\"idle\"} 1.5\n"));
    assert!(text.contains("wfhost_drain_budget_used_seconds{deployment=\"idle\"} 0\n"));
    assert!(text.contains("wfhost_deployment_state{deployment=\"idle\",state=\"starting\"} 1\n"));
    // With no deployments every family is still described.
    let empty = render(&[], None, now);
    assert_eq!(empty.lines().count(), 2 * 17, "{empty}");
    assert!(empty.lines().all(|l| l.starts_with("# ")));
}

#[test]
fn groups_samples_by_family_across_deployments() {
    let now = Instant::now();
    let a = (
        Status::new("a", Duration::from_millis(1000)),
        MailCounts::default(),
    );
    let b = (
        Status::new("b", Duration::from_millis(1000)),
        MailCounts::default(),
    );
    let text = render(&[a, b], None, now);
    let restarts: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("wfhost_restarts_total"))
        .collect();
    assert_eq!(
        restarts,
        [
            "wfhost_restarts_total{deployment=\"a\"} 0",
            "wfhost_restarts_total{deployment=\"b\"} 0"
        ]
    );
    // Each family's HELP appears once, before its samples.
    let helps = text
        .lines()
        .filter(|l| l.starts_with("# HELP wfhost_restarts_total "))
        .count();
    assert_eq!(helps, 1);
}

#[test]
fn escapes_label_values() {
    assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
    assert_eq!(escape_label("x\ny"), r"x\ny");
    assert_eq!(escape_label("max_rss"), "max_rss");
    let mut s = Status::new("d", Duration::from_millis(1000));
    s.recycle_reasons.insert("we\"ird\\\n".into(), 1);
    let text = render(&[(s, MailCounts::default())], None, Instant::now());
    assert!(
        text.contains(
            "wfhost_recycles_by_reason_total{deployment=\"d\",reason=\"we\\\"ird\\\\\\n\"} 1\n"
        ),
        "{text}"
    );
}

#[test]
fn the_host_is_described_once_with_its_load_by_window() {
    let host = crate::observe::host::Host {
        cores: 2,
        memory_total_bytes: 8 << 30,
        memory_available_bytes: 5 << 30,
        load: [0.5, 0.25, 1.0],
        supervisor_pid: 42,
        supervisor_rss_bytes: 6 << 20,
    };
    let text = render(&[], Some(&host), Instant::now());
    for sample in [
        "wfhost_host_cores 2\n",
        "wfhost_host_memory_total_bytes 8589934592\n",
        "wfhost_host_memory_available_bytes 5368709120\n",
        "wfhost_supervisor_rss_bytes 6291456\n",
        "wfhost_host_load{window=\"1m\"} 0.5\n",
        "wfhost_host_load{window=\"5m\"} 0.25\n",
        "wfhost_host_load{window=\"15m\"} 1\n",
    ] {
        assert!(text.contains(sample), "no {sample:?} in\n{text}");
    }
    assert_eq!(text.matches("# TYPE wfhost_host_load gauge").count(), 1);
}
