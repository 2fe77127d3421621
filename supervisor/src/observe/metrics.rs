//! The optional Prometheus endpoint (DESIGN §8, `metrics_listen`): a tiny
//! HTTP/1.1 server answering `GET /metrics` with the text exposition format
//! (version 0.0.4), rendered from the same snapshots as `wfhost status`.
//!
//! The endpoint has no authentication, so it is meant for a loopback
//! address; any other configured address is bound as asked, with a warning
//! in the log. A client gets at most [`MAX_HEAD`] bytes of request head and
//! [`HEAD_TIMEOUT`] to send it, each connection runs on its own task, and at
//! most [`MAX_CONNECTIONS`] are served at once (more are closed at once), so
//! slow or hostile clients cannot hold the supervisor's resources.
//!
//! Answers: `GET /metrics` (query ignored) → 200; any other well-formed
//! request → 404; a malformed one → 400; a head over [`MAX_HEAD`] → 431;
//! the store unreachable → 500. Every answer closes the connection.

use std::fmt::{Display, Write as _};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::{debug, warn};

use crate::host::Registry;
use crate::observe::status::{State, Status};
use crate::shared::Shared;
use crate::store::MailCounts;

/// The most request-head bytes read from a client.
pub const MAX_HEAD: usize = 8 * 1024;

/// How long a client has to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one connection may last in all, answer included.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(15);

/// How long, and how much, a refused client's input is drained before closing.
const LINGER_TIME: Duration = Duration::from_secs(2);
/// See [`LINGER_TIME`].
const LINGER_BYTES: usize = 64 * 1024;

/// Connections served at once; more are closed without an answer.
pub const MAX_CONNECTIONS: usize = 64;

/// The exposition format's content type.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Binds the endpoint on `addr`, warning when it is not a loopback address
/// (the endpoint has no authentication).
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    if !addr.ip().is_loopback() {
        warn!(%addr, "metrics_listen is not a loopback address: anyone who can reach it can read the metrics");
    }
    TcpListener::bind(addr).await.with_context(|| {
        format!("cannot bind metrics_listen {addr}; choose a free port or remove the setting")
    })
}

/// Accepts and answers scrapers until the task is aborted.
pub async fn serve(listener: TcpListener, registry: Registry, shared: Arc<Shared>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    debug!(%peer, "metrics: too many connections; closing this one");
                    continue;
                };
                let (registry, shared) = (registry.clone(), shared.clone());
                tokio::spawn(async move {
                    let answered = tokio::time::timeout(
                        CONNECTION_TIMEOUT,
                        serve_connection(stream, &registry, &shared),
                    )
                    .await;
                    match answered {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => debug!(%peer, error = %e, "metrics: connection failed"),
                        Err(_) => debug!(%peer, "metrics: connection timed out"),
                    }
                    drop(slot);
                });
            }
            Err(e) => {
                warn!(error = %e, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Reads one request, answers it and closes.
async fn serve_connection(
    mut stream: TcpStream,
    registry: &Registry,
    shared: &Shared,
) -> std::io::Result<()> {
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await {
        Ok(head) => head?,
        Err(_) => Head::TimedOut,
    };
    let answer = match head {
        Head::Closed => return Ok(()),
        Head::TimedOut => response("408 Request Timeout", "text/plain", "request timed out\n"),
        Head::TooLarge => response(
            "431 Request Header Fields Too Large",
            "text/plain",
            "request head too large\n",
        ),
        Head::Truncated => response("400 Bad Request", "text/plain", "bad request\n"),
        Head::Complete(head) => match route(&head) {
            Route::BadRequest => response("400 Bad Request", "text/plain", "bad request\n"),
            Route::NotFound => response("404 Not Found", "text/plain", "not found; try /metrics\n"),
            Route::Metrics => match collect(registry, shared).await {
                Ok(snapshots) => {
                    response("200 OK", CONTENT_TYPE, &render(&snapshots, Instant::now()))
                }
                Err(e) => {
                    warn!(error = %e, "metrics: cannot read the mail counts");
                    response(
                        "500 Internal Server Error",
                        "text/plain",
                        "the store is unavailable\n",
                    )
                }
            },
        },
    };
    stream.write_all(&answer).await?;
    stream.shutdown().await?;
    if !answer.starts_with(b"HTTP/1.1 200 ") {
        linger(&mut stream).await;
    }
    Ok(())
}

/// Reads and drops what a refused client still sends, for a moment: closing
/// with unread input would reset the connection, and the client could lose
/// the answer before reading it.
async fn linger(stream: &mut TcpStream) {
    let mut sink = [0u8; 1024];
    let mut left = LINGER_BYTES;
    let _ = tokio::time::timeout(LINGER_TIME, async {
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

/// Every deployment's snapshot with its mail counts, in id order.
async fn collect(
    registry: &Registry,
    shared: &Shared,
) -> anyhow::Result<Vec<(Status, MailCounts)>> {
    let snapshots: Vec<Status> = registry
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .map(|h| h.snapshot())
        .collect();
    let ids: Vec<String> = snapshots.iter().map(|s| s.id.clone()).collect();
    let counts = shared
        .reader
        .call(move |s| {
            ids.iter()
                .map(|id| s.mail_counts(id))
                .collect::<Result<Vec<_>, _>>()
        })
        .await??;
    Ok(snapshots.into_iter().zip(counts).collect())
}

/// How reading a request head ended.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    /// The head, up to and including the blank line.
    Complete(Vec<u8>),
    /// No blank line within [`MAX_HEAD`] bytes.
    TooLarge,
    /// The client closed before sending anything.
    Closed,
    /// The client closed in the middle of the head.
    Truncated,
    /// The client was too slow.
    TimedOut,
}

/// Reads until the blank line ending the head, at most [`MAX_HEAD`] bytes.
async fn read_head<R: AsyncRead + Unpin>(reader: &mut R) -> std::io::Result<Head> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let room = (MAX_HEAD - buf.len()).min(chunk.len());
        if room == 0 {
            return Ok(Head::TooLarge);
        }
        let n = reader.read(&mut chunk[..room]).await?;
        if n == 0 {
            return Ok(if buf.is_empty() {
                Head::Closed
            } else {
                Head::Truncated
            });
        }
        // A blank line may straddle two reads: look a little back.
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = head_end(&buf[from..]) {
            buf.truncate(from + end);
            return Ok(Head::Complete(buf));
        }
    }
}

/// The length of the head in `buf` (through `\r\n\r\n` or a bare `\n\n`).
fn head_end(buf: &[u8]) -> Option<usize> {
    (0..buf.len()).find_map(|i| {
        if buf[i..].starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if buf[i..].starts_with(b"\n\n") {
            Some(i + 2)
        } else {
            None
        }
    })
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    /// `GET /metrics`.
    Metrics,
    /// A well-formed request for anything else.
    NotFound,
    /// Not an HTTP/1.x request.
    BadRequest,
}

/// Routes a complete request head.
fn route(head: &[u8]) -> Route {
    let Ok(text) = std::str::from_utf8(head) else {
        return Route::BadRequest;
    };
    let mut lines = text.lines();
    let mut parts = lines.next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    let is_token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    let version_ok = version.len() == 8
        && version.starts_with("HTTP/1.")
        && version.as_bytes()[7].is_ascii_digit();
    if !is_token(method) || !target.starts_with('/') || !version_ok {
        return Route::BadRequest;
    }
    // Header fields: `name: value`; folded lines are obsolete and refused.
    for line in lines.take_while(|l| !l.is_empty()) {
        match line.split_once(':') {
            Some((name, _)) if is_token(name) => {}
            _ => return Route::BadRequest,
        }
    }
    let path = target.split('?').next().unwrap_or(target);
    if method == "GET" && path == "/metrics" {
        Route::Metrics
    } else {
        Route::NotFound
    }
}

/// A whole response that closes the connection.
fn response(status: &str, content_type: &str, body: &str) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// Every state, in the order the `wfhost_deployment_state` family lists them.
const STATES: [State; 8] = [
    State::Starting,
    State::Ready,
    State::Draining,
    State::Stopping,
    State::Exited,
    State::Backoff,
    State::Failed,
    State::Drained,
];

/// Builds the exposition text family by family.
#[derive(Default)]
struct Exposition {
    out: String,
}

impl Exposition {
    /// Starts a family: its `# HELP` and `# TYPE` lines.
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    /// One sample of the current family.
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (label, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{label}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

/// A label value escaped per the exposition format: `\`, `"` and newline.
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Milliseconds as seconds, exactly as far as f64 allows.
fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// The exposition text for `snapshots` (each deployment with its mail
/// counts) as of `now`. Gauges with nothing to measure (no child, no RSS
/// sample yet) are left out rather than reported as zero.
pub fn render(snapshots: &[(Status, MailCounts)], now: Instant) -> String {
    let mut e = Exposition::default();

    let name = "wfhost_child_rss_bytes";
    e.family(
        name,
        "gauge",
        "Resident memory of the child's process tree at the last policy check.",
    );
    for (s, _) in snapshots {
        if let Some(rss) = s.rss_bytes {
            e.sample(name, &[("deployment", &s.id)], rss);
        }
    }

    let name = "wfhost_child_uptime_seconds";
    e.family(name, "gauge", "Time since the live child was spawned.");
    for (s, _) in snapshots {
        if let Some(started) = s.started_at {
            let ms = now.saturating_duration_since(started).as_millis() as u64;
            e.sample(name, &[("deployment", &s.id)], seconds(ms));
        }
    }

    let name = "wfhost_deployment_state";
    e.family(
        name,
        "gauge",
        "1 for the deployment's current state, 0 for the others.",
    );
    for (s, _) in snapshots {
        for state in STATES {
            let value = u8::from(s.state == state);
            e.sample(
                name,
                &[("deployment", &s.id), ("state", state.as_str())],
                value,
            );
        }
    }

    let name = "wfhost_restarts_total";
    e.family(
        name,
        "counter",
        "Restarts after unexpected child exits since the supervisor started.",
    );
    for (s, _) in snapshots {
        e.sample(name, &[("deployment", &s.id)], s.restarts);
    }

    let name = "wfhost_recycles_total";
    e.family(
        name,
        "counter",
        "Completed recycles by origin (policy, operator, self).",
    );
    for (s, _) in snapshots {
        let r = s.recycles;
        for (origin, n) in [
            ("policy", r.policy),
            ("operator", r.operator),
            ("self", r.self_),
        ] {
            e.sample(name, &[("deployment", &s.id), ("origin", origin)], n);
        }
    }

    let name = "wfhost_recycles_by_reason_total";
    e.family(
        name,
        "counter",
        "Completed recycles by reason: the bound passed for policy recycles, else the origin.",
    );
    for (s, _) in snapshots {
        for (reason, n) in &s.recycle_reasons {
            e.sample(name, &[("deployment", &s.id), ("reason", reason)], n);
        }
    }

    let name = "wfhost_drain_active";
    e.family(name, "gauge", "1 while a drain is under way.");
    for (s, _) in snapshots {
        e.sample(name, &[("deployment", &s.id)], u8::from(s.drain.active));
    }

    let name = "wfhost_drain_budget_used_seconds";
    e.family(
        name,
        "gauge",
        "Drain budget used by the current or last drain.",
    );
    for (s, _) in snapshots {
        e.sample(
            name,
            &[("deployment", &s.id)],
            seconds(s.drain.used_ms(now)),
        );
    }

    let name = "wfhost_drain_budget_seconds";
    e.family(name, "gauge", "The drain budget in force.");
    for (s, _) in snapshots {
        e.sample(name, &[("deployment", &s.id)], seconds(s.drain.budget_ms()));
    }

    let name = "wfhost_drain_escalations_total";
    e.family(
        name,
        "counter",
        "Drain budgets that ran out and escalated to a signed cancel.",
    );
    for (s, _) in snapshots {
        e.sample(name, &[("deployment", &s.id)], s.escalations);
    }

    let name = "wfhost_mail";
    e.family(
        name,
        "gauge",
        "Mail items in the durable store by state (inbox, processing, done).",
    );
    for (s, mail) in snapshots {
        for (state, n) in [
            ("inbox", mail.inbox),
            ("processing", mail.processing),
            ("done", mail.done),
        ] {
            e.sample(name, &[("deployment", &s.id), ("state", state)], n);
        }
    }

    let name = "wfhost_protocol_violations_total";
    e.family(
        name,
        "counter",
        "Children killed for breaking the control protocol.",
    );
    for (s, _) in snapshots {
        e.sample(name, &[("deployment", &s.id)], s.violations);
    }

    let name = "wfhost_cancels_pending";
    e.family(
        name,
        "gauge",
        "Signed cancels waiting for the journal to accept them.",
    );
    for (s, _) in snapshots {
        e.sample(name, &[("deployment", &s.id)], s.cancels_pending);
    }

    e.out
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(
            matches!(read_head(&mut r).await.ok(), Some(Head::Complete(h)) if h.len() == MAX_HEAD)
        );
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
        s.rss_bytes = Some(10_485_760);
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
        let mut budget = wfhost_policy::DrainBudget::new(Duration::from_secs(60));
        budget.start(start + Duration::from_millis(3000), true);
        s.drain.budget = Some(budget);
        let mail = MailCounts {
            inbox: 5,
            processing: 1,
            done: 17,
        };
        let text = render(&[(s, mail)], now);
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
# HELP wfhost_mail Mail items in the durable store by state (inbox, processing, done).
# TYPE wfhost_mail gauge
wfhost_mail{deployment="billing",state="inbox"} 5
wfhost_mail{deployment="billing",state="processing"} 1
wfhost_mail{deployment="billing",state="done"} 17
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
            now,
        );
        assert!(!text.contains("wfhost_child_rss_bytes{"), "{text}");
        assert!(!text.contains("wfhost_child_uptime_seconds{"), "{text}");
        assert!(!text.contains("wfhost_recycles_by_reason_total{"), "{text}");
        assert!(text.contains("wfhost_drain_budget_seconds{deployment=\"idle\"} 1.5\n"));
        assert!(text.contains("wfhost_drain_budget_used_seconds{deployment=\"idle\"} 0\n"));
        assert!(
            text.contains("wfhost_deployment_state{deployment=\"idle\",state=\"starting\"} 1\n")
        );
        // With no deployments every family is still described.
        let empty = render(&[], now);
        assert_eq!(empty.lines().count(), 2 * 13, "{empty}");
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
        let text = render(&[a, b], now);
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
        let text = render(&[(s, MailCounts::default())], Instant::now());
        assert!(
            text.contains(
                "wfhost_recycles_by_reason_total{deployment=\"d\",reason=\"we\\\"ird\\\\\\n\"} 1\n"
            ),
            "{text}"
        );
    }
}
