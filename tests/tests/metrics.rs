//! The Prometheus endpoint (`metrics_listen`) as a scraper sees it: every
//! metric family, a deployment's labels, counters that move with what the
//! operator does, and the answers to requests that are not a scrape.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use wfhost_tests::{
    LONG, Supervisor, TempDir, bin, command, deployment, poll, stdout, testchild, wait_for,
    write_config_with_settings,
};

const FAMILIES: [(&str, &str); 26] = [
    ("wfhost_host_cores", "gauge"),
    ("wfhost_host_memory_total_bytes", "gauge"),
    ("wfhost_host_memory_available_bytes", "gauge"),
    ("wfhost_supervisor_rss_bytes", "gauge"),
    ("wfhost_host_load", "gauge"),
    ("wfhost_child_rss_bytes", "gauge"),
    ("wfhost_child_uptime_seconds", "gauge"),
    ("wfhost_deployment_state", "gauge"),
    ("wfhost_restarts_total", "counter"),
    ("wfhost_recycles_total", "counter"),
    ("wfhost_recycles_by_reason_total", "counter"),
    ("wfhost_drain_active", "gauge"),
    ("wfhost_drain_budget_used_seconds", "gauge"),
    ("wfhost_drain_budget_seconds", "gauge"),
    ("wfhost_drain_escalations_total", "counter"),
    ("wfhost_mail", "gauge"),
    ("wfhost_protocol_violations_total", "counter"),
    ("wfhost_cancels_pending", "gauge"),
    ("wfhost_mail_dead", "gauge"),
    ("wfhost_store_takes_writes", "gauge"),
    ("wfhost_store_refusing_seconds", "gauge"),
    ("wfhost_store_waiting", "gauge"),
    ("wfhost_store_group_commits_total", "counter"),
    ("wfhost_store_grouped_writes_total", "counter"),
    ("wfhost_control_connections_total", "counter"),
    ("wfhost_control_requests_total", "counter"),
];

/// A loopback port free right now: bound by us, then released for the
/// supervisor (a tiny race with other processes, acceptable in tests).
fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr")
}

/// A deployment `id` of well-behaved test children.
fn well_behaved(id: &str) -> String {
    deployment(id, &testchild("well-behaved"), "")
}

/// A supervisor serving metrics on a fresh port, checking the policy often
/// so RSS is sampled soon.
fn start(body: &str) -> (Supervisor, SocketAddr) {
    let addr = free_port();
    let settings = format!("metrics_listen = \"{addr}\"\npolicy_interval = \"100ms\"\n");
    let sup = Supervisor::start_with_settings(&settings, body);
    wait_for("the metrics endpoint", LONG, || {
        TcpStream::connect(addr).ok().map(|_| ())
    });
    (sup, addr)
}

/// An HTTP answer: status code, header lines and body.
struct Answer {
    code: u16,
    headers: Vec<String>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find_map(|h| {
            let (n, v) = h.split_once(':')?;
            n.eq_ignore_ascii_case(name).then_some(v.trim())
        })
    }
}

/// Sends `request` as is and reads the answer until the server closes.
fn exchange(addr: SocketAddr, request: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    stream.set_read_timeout(Some(LONG)).expect("read timeout");
    stream.write_all(request).expect("send the request");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).expect("read the answer");
    parse(&raw)
}

fn parse(raw: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of head in {text:?}"));
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    let code = status
        .strip_prefix("HTTP/1.1 ")
        .and_then(|s| s.get(..3))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status:?}"));
    Answer {
        code,
        headers: lines.map(str::to_owned).collect(),
        body: body.to_owned(),
    }
}

fn scrape(addr: SocketAddr) -> String {
    let answer = exchange(
        addr,
        b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: text/plain\r\n\r\n",
    );
    assert_eq!(answer.code, 200, "{}", answer.body);
    answer.body
}

/// The value of the sample `series` (name and labels, exactly as written).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

/// Scrapes until `series` has a value satisfying `pred`.
fn wait_sample(addr: SocketAddr, series: &str, pred: impl Fn(f64) -> bool) -> String {
    poll(LONG, Duration::from_millis(50), || {
        let text = scrape(addr);
        if sample(&text, series).is_some_and(&pred) {
            Ok(text)
        } else {
            Err(text)
        }
    })
    .unwrap_or_else(|text| panic!("timed out waiting for {series}; last scrape:\n{text}"))
}

#[test]
fn scrape_lists_every_family_and_counts_an_operator_recycle() {
    let (sup, addr) = start(&(well_behaved("alpha") + &well_behaved("beta")));
    let old = sup.ready_pid("alpha", LONG);
    sup.ready_pid("beta", LONG);

    let answer = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_eq!(answer.code, 200);
    assert!(
        answer
            .header("Content-Type")
            .is_some_and(|t| t.starts_with("text/plain; version=0.0.4")),
        "{:?}",
        answer.headers
    );
    assert_eq!(
        answer.header("Content-Length"),
        Some(answer.body.len().to_string().as_str())
    );
    assert_eq!(answer.header("Connection"), Some("close"));
    for (family, kind) in FAMILIES {
        for line in [
            format!("# HELP {family} "),
            format!("# TYPE {family} {kind}\n"),
        ] {
            assert!(
                answer.body.contains(&line),
                "no {line:?} in:\n{}",
                answer.body
            );
        }
    }
    let text = &answer.body;
    for id in ["alpha", "beta"] {
        let d = format!("deployment=\"{id}\"");
        assert_eq!(
            sample(
                text,
                &format!("wfhost_deployment_state{{{d},state=\"ready\"}}")
            ),
            Some(1.0),
            "{text}"
        );
        assert_eq!(
            sample(
                text,
                &format!("wfhost_deployment_state{{{d},state=\"failed\"}}")
            ),
            Some(0.0)
        );
        assert_eq!(
            sample(text, &format!("wfhost_restarts_total{{{d}}}")),
            Some(0.0)
        );
        for origin in ["policy", "operator", "self"] {
            assert_eq!(
                sample(
                    text,
                    &format!("wfhost_recycles_total{{{d},origin=\"{origin}\"}}")
                ),
                Some(0.0)
            );
        }
        assert_eq!(
            sample(text, &format!("wfhost_drain_budget_seconds{{{d}}}")),
            Some(60.0)
        );
        assert_eq!(
            sample(text, &format!("wfhost_drain_active{{{d}}}")),
            Some(0.0)
        );
        assert_eq!(
            sample(text, &format!("wfhost_drain_escalations_total{{{d}}}")),
            Some(0.0)
        );
        assert_eq!(
            sample(text, &format!("wfhost_protocol_violations_total{{{d}}}")),
            Some(0.0)
        );
        assert_eq!(
            sample(text, &format!("wfhost_cancels_pending{{{d}}}")),
            Some(0.0)
        );
        assert!(
            sample(text, &format!("wfhost_child_uptime_seconds{{{d}}}")).is_some_and(|s| s >= 0.0)
        );
        for state in ["inbox", "processing", "done"] {
            assert!(sample(text, &format!("wfhost_mail{{{d},state=\"{state}\"}}")).is_some());
        }
    }
    assert!(!text.contains("wfhost_recycles_by_reason_total{"), "{text}");
    // RSS is sampled at the policy tick.
    wait_sample(addr, "wfhost_child_rss_bytes{deployment=\"alpha\"}", |v| {
        v > 0.0
    });

    // Mail accepted and acknowledged shows as done.
    let out = sup.client(&["send", "alpha", "hello"]);
    assert!(
        out.status.success(),
        "send: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_sample(
        addr,
        "wfhost_mail{deployment=\"alpha\",state=\"done\"}",
        |v| v == 1.0,
    );

    // An operator recycle counts once, under origin and reason.
    let out = sup.client(&["recycle", "alpha"]);
    assert!(
        out.status.success(),
        "recycle: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let new = sup.ready_pid("alpha", LONG);
    assert_ne!(new, old);
    let text = wait_sample(
        addr,
        "wfhost_recycles_total{deployment=\"alpha\",origin=\"operator\"}",
        |v| v == 1.0,
    );
    assert_eq!(
        sample(
            &text,
            "wfhost_recycles_by_reason_total{deployment=\"alpha\",reason=\"operator\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "wfhost_recycles_total{deployment=\"alpha\",origin=\"policy\"}"
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            "wfhost_recycles_total{deployment=\"beta\",origin=\"operator\"}"
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "wfhost_restarts_total{deployment=\"alpha\"}"),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &text,
            "wfhost_drain_escalations_total{deployment=\"alpha\"}"
        ),
        Some(0.0)
    );
}

#[test]
fn answers_other_requests_without_metrics_and_survives_silent_clients() {
    let (sup, addr) = start(&well_behaved("solo"));
    sup.ready_pid("solo", LONG);

    // A client that connects and says nothing does not hold up a scrape.
    let silent = TcpStream::connect(addr).expect("connect");
    assert!(scrape(addr).contains("wfhost_deployment_state{deployment=\"solo\""));

    let answer = exchange(addr, b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n");
    assert_eq!(answer.code, 404);
    assert!(!answer.body.contains("wfhost_"));
    assert_eq!(exchange(addr, b"POST /metrics HTTP/1.1\r\n\r\n").code, 404);
    assert_eq!(exchange(addr, b"hello there\r\n\r\n").code, 400);
    assert_eq!(
        exchange(addr, b"GET /metrics HTTP/1.1\r\nno colon\r\n\r\n").code,
        400
    );

    // A head larger than 8 KiB is refused without reading it all.
    let mut huge = b"GET /metrics HTTP/1.1\r\nX-Filler: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 9 * 1024));
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_read_timeout(Some(LONG)).expect("read timeout");
    // The server may close before taking every byte; that is its point.
    let _ = stream.write_all(&huge);
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let answer = parse(&raw);
    assert_eq!(answer.code, 431);

    // A client that closes half-way through gets a 400, and the
    // silent one is let go after the head timeout.
    let mut half = TcpStream::connect(addr).expect("connect");
    half.write_all(b"GET /metrics HTTP/1.1\r\n").expect("send");
    half.shutdown(Shutdown::Write).expect("shut down writing");
    let mut raw = Vec::new();
    half.read_to_end(&mut raw).expect("read");
    assert_eq!(parse(&raw).code, 400);

    let mut silent = silent;
    silent.set_read_timeout(Some(LONG)).expect("read timeout");
    let started = Instant::now();
    let mut raw = Vec::new();
    silent.read_to_end(&mut raw).expect("read");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(parse(&raw).code, 408);
}

#[test]
fn a_taken_port_stops_the_supervisor_with_a_clear_error() {
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("local addr");
    let dir = TempDir::new();
    let config = dir.join("wfhost.toml");
    write_config_with_settings(
        &config,
        &dir.join("state"),
        &format!("metrics_listen = \"{addr}\""),
        &well_behaved("x"),
    );
    let mut child = std::process::Command::new(bin("wfhost"))
        .args(["supervise", "--config"])
        .arg(&config)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn wfhost supervise");
    let status = wait_for("the supervisor to refuse the port", LONG, || {
        child.try_wait().expect("try_wait")
    });
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot bind metrics_listen {addr}")),
        "{stderr}"
    );
    drop(taken);
}

/// The host's facts as /proc has them: logical CPUs and MemTotal.
fn proc_host() -> (f64, f64) {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").expect("cpuinfo");
    let cores = cpuinfo
        .lines()
        .filter(|l| l.starts_with("processor"))
        .count();
    let meminfo = std::fs::read_to_string("/proc/meminfo").expect("meminfo");
    let kib: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("MemTotal");
    (cores as f64, kib * 1024.0)
}

#[test]
fn the_host_is_served_as_status_shows_it() {
    let (sup, addr) = start(&well_behaved("alpha"));
    sup.ready_pid("alpha", LONG);
    let text = scrape(addr);
    let (cores, total) = proc_host();
    assert_eq!(sample(&text, "wfhost_host_cores"), Some(cores), "{text}");
    assert_eq!(
        sample(&text, "wfhost_host_memory_total_bytes"),
        Some(total),
        "{text}"
    );
    let available = sample(&text, "wfhost_host_memory_available_bytes").expect("available");
    assert!(available > 0.0 && available < total, "{text}");
    let rss = sample(&text, "wfhost_supervisor_rss_bytes").expect("our RSS");
    let statm = std::fs::read_to_string(format!("/proc/{}/statm", sup.pid())).expect("statm");
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("pages");
    assert!(
        rss > pages * 4096.0 / 2.0 && rss < pages * 4096.0 * 2.0,
        "{rss} against {pages} pages"
    );
    for window in ["1m", "5m", "15m"] {
        let series = format!("wfhost_host_load{{window=\"{window}\"}}");
        assert!(
            sample(&text, &series).is_some_and(|l| l >= 0.0),
            "{series} in {text}"
        );
    }
    // The same facts in `wfhost status`.
    let host = &sup.status()["host"];
    assert_eq!(host["cores"].as_f64(), Some(cores), "{host}");
    assert_eq!(host["memory_total_bytes"].as_f64(), Some(total), "{host}");
    assert_eq!(host["supervisor_pid"], sup.pid(), "{host}");
    let table = wfhost_tests::ok("status", &sup.client(&["status"]));
    assert!(
        table.starts_with(&format!("host: {cores} cores, load ")),
        "{table}"
    );
    assert!(
        table.contains(&format!("; wfhost pid {}, ", sup.pid())),
        "{table}"
    );
}

/// `wfhost call` sends its mail and waits for the result on one
/// connection: the control socket's counters see one connection carry
/// two requests.
#[test]
fn a_call_sends_and_waits_on_one_connection() {
    let child = command(&["{bin}/wfhost-child", "conformance", "--protocol", "3"]);
    let (sup, addr) = start(&deployment("orders", &child, ""));
    sup.ready_pid("orders", LONG);
    let counts = |text: &str| {
        (
            sample(text, "wfhost_control_connections_total").expect("connections"),
            sample(text, "wfhost_control_requests_total").expect("requests"),
        )
    };
    let before = counts(&scrape(addr));
    let out = sup.client(&["call", "orders", r#"{"result_hex":"6f6b"}"#]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out), "ok");
    let after = counts(&scrape(addr));
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (1.0, 2.0),
        "one connection for the send and the wait"
    );
}
