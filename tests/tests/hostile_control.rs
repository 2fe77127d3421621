//! Control-socket clients against everyone (issue 13, finding 10): many
//! clients that stall mid-request must not hold the supervisor's memory or
//! keep its socket from answering others, and connections are capped with
//! a refusal that says so.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;
use wfhost_tests::{LONG, Supervisor, deployment, describe, testchild, wfhost};

mod hostile_support;
use hostile_support::kib;

/// Clients that stall at once.
const CLIENTS: usize = 40;

/// What each stalled client announces.
const BIG: usize = 4 << 20;

fn socket(sup: &Supervisor) -> PathBuf {
    sup.dir().join("state/wfhost.sock")
}

/// One control message: its `u32` length, then the bytes.
fn framed(json: &Value) -> Vec<u8> {
    let body = serde_json::to_vec(json).expect("json");
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend(body);
    out
}

/// A client that writes `head`, then `body_len` bytes of `fill`, one
/// short of what it announced, and stalls until `release` says go; then
/// returns the answer the supervisor wrote meanwhile, if any.
fn stalled_client(
    socket: &Path,
    head: Vec<u8>,
    body_len: usize,
    release: mpsc::Receiver<()>,
) -> JoinHandle<Option<Value>> {
    let socket = socket.to_path_buf();
    std::thread::spawn(move || {
        let mut s = UnixStream::connect(&socket).ok()?;
        let _ = s.write_all(&head);
        let chunk = vec![b' '; 64 << 10];
        let mut left = body_len;
        while left > 0 {
            let n = left.min(chunk.len());
            if s.write_all(&chunk[..n]).is_err() {
                break;
            }
            left -= n;
        }
        let _ = release.recv();
        s.set_read_timeout(Some(Duration::from_millis(300))).ok()?;
        let mut len = [0u8; 4];
        s.read_exact(&mut len).ok()?;
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        s.read_exact(&mut body).ok()?;
        serde_json::from_slice(&body).ok()
    })
}

/// What the supervisor looked like during an attack.
struct Attack {
    /// Growth of its peak RSS, in MiB.
    grew_mib: f64,
    /// The slowest `wfhost status` of a neighbour meanwhile.
    slowest_status: Duration,
    /// The answers the stalled clients got.
    answers: Vec<Option<Value>>,
}

/// Starts `CLIENTS` stalled clients, each sending `head` and then all but
/// one byte of `body_len`; times a neighbour's `status` and samples the
/// supervisor's memory for `hold` (running `midway` once, half way), then
/// lets them go.
fn attack(
    sup: &Supervisor,
    head: &[u8],
    body_len: usize,
    hold: Duration,
    mut midway: impl FnMut(),
) -> Attack {
    let pid = sup.pid();
    let before = kib(pid, "VmRSS");
    let mut releases = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (tx, rx) = mpsc::channel();
        releases.push(tx);
        clients.push(stalled_client(&socket(sup), head.to_vec(), body_len, rx));
    }
    let sock = socket(sup);
    let sock = sock.to_str().expect("utf-8");
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut peak = before;
    let mut ran = false;
    while started.elapsed() < hold {
        if !ran && started.elapsed() > hold / 2 {
            midway();
            ran = true;
        }
        let t = Instant::now();
        let out = wfhost(&["status", "--json", "--socket", sock]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        slowest = slowest.max(t.elapsed());
        peak = peak.max(kib(pid, "VmRSS")).max(kib(pid, "VmHWM"));
        std::thread::sleep(Duration::from_millis(100));
    }
    for tx in releases {
        let _ = tx.send(());
    }
    let answers = clients
        .into_iter()
        .map(|c| c.join().expect("client thread"))
        .collect();
    Attack {
        grew_mib: peak.saturating_sub(before) as f64 / 1024.0,
        slowest_status: slowest,
        answers,
    }
}

fn error_of(answer: &Option<Value>) -> &str {
    answer
        .as_ref()
        .and_then(|a| a["error"].as_str())
        .unwrap_or_default()
}

/// Before: 40 clients announcing 4 MiB requests and stalling held 167 MiB
/// until their timeouts. Now a request is at most 64 KiB of JSON, read as
/// it arrives: each is refused at its length, nothing is held, and status
/// answers as usual.
#[test]
fn forty_stalled_four_mib_requests_hold_nothing() {
    let sup = Supervisor::start(&deployment("steady", &testchild("well-behaved"), ""));
    sup.ready_pid("steady", LONG);
    let head = (BIG as u32).to_be_bytes().to_vec();
    let a = attack(&sup, &head, BIG - 1, Duration::from_secs(3), || {});
    eprintln!(
        "40 stalled 4 MiB requests: supervisor peak RSS +{:.1} MiB, slowest neighbour status {:?}",
        a.grew_mib, a.slowest_status
    );
    let refused = a
        .answers
        .iter()
        .filter(|r| error_of(r).contains("a request is 1 to 65536 bytes"))
        .count();
    assert_eq!(refused, CLIENTS, "every one told why: {:?}", a.answers);
    assert!(a.grew_mib < 16.0, "RSS grew {:.1} MiB", a.grew_mib);
    assert!(
        a.slowest_status < Duration::from_secs(2),
        "{:?}",
        a.slowest_status
    );
}

/// The same with 4 MiB `send` payloads a deployment does accept
/// (`max_mail_bytes = "4MiB"`): what all clients hold together stays
/// within the socket's 32 MiB budget, the clients past it are told so,
/// a neighbour's status is not delayed, and once they are gone a 4 MiB
/// mail goes through.
#[test]
fn forty_stalled_four_mib_sends_stay_within_the_budget() {
    let sup = Supervisor::start(&deployment(
        "big",
        &testchild("well-behaved"),
        "max_mail_bytes = \"4MiB\"\nmax_frame_bytes = \"5MiB\"",
    ));
    sup.ready_pid("big", LONG);
    let head = framed(&serde_json::json!({
        "v": 2, "cmd": "send", "deployment": "big", "payload_bytes": BIG, "key": "stalled"
    }));
    let file = sup.dir().join("payload");
    std::fs::write(&file, vec![b'x'; BIG]).expect("payload");
    let arg = format!("@{}", file.display());
    // An operator's own 4 MiB send meanwhile is told why, and what to do.
    let mut told = String::new();
    let a = attack(&sup, &head, BIG - 1, Duration::from_secs(3), || {
        let out = sup.client(&["send", "big", &arg, "--key", "operator"]);
        assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
        told = wfhost_tests::stderr(&out);
    });
    assert!(
        told.contains("its limit is 32MiB") && told.contains("try again in a moment"),
        "{told}"
    );
    let refused = a
        .answers
        .iter()
        .filter(|r| error_of(r).contains("its limit is 32MiB"))
        .count();
    eprintln!(
        "40 stalled 4 MiB sends: supervisor peak RSS +{:.1} MiB, slowest neighbour status {:?}, {refused} told the budget is spent",
        a.grew_mib, a.slowest_status
    );
    assert!(refused >= CLIENTS - 9, "{refused} refused: {:?}", a.answers);
    assert!(
        a.answers
            .iter()
            .filter_map(|r| r.as_ref())
            .all(|r| r["ok"] == false && r["code"] == 1),
        "{:?}",
        a.answers
    );
    assert!(a.grew_mib < 48.0, "RSS grew {:.1} MiB", a.grew_mib);
    assert!(
        a.slowest_status < Duration::from_secs(2),
        "{:?}",
        a.slowest_status
    );
    // Nothing was accepted from them; a real 4 MiB mail now goes through.
    let out = sup.client(&["send", "big", &arg]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let d = sup.deployment("big");
    assert_eq!(
        d["mail"]["inbox"].as_u64().unwrap_or(0)
            + d["mail"]["processing"].as_u64().unwrap_or(0)
            + d["mail"]["done"].as_u64().unwrap_or(0),
        1,
        "{d}"
    );
}

/// Before: connections were not capped at all. Now past 256 a client is
/// told so at once, and served again once others leave.
#[test]
fn connections_past_the_cap_are_refused_with_the_cap_named() {
    let sup = Supervisor::start(&deployment("steady", &testchild("well-behaved"), ""));
    sup.ready_pid("steady", LONG);
    let sock = socket(&sup);
    let idle: Vec<UnixStream> = (0..256)
        .map(|_| UnixStream::connect(&sock).expect("connect"))
        .collect();
    // Every one is accepted before the next client comes.
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let out = wfhost(&["status", "--socket", sock.to_str().expect("utf-8")]);
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let err = wfhost_tests::stderr(&out);
    assert!(
        err.contains("its limit of 256 connections") && err.contains("try again"),
        "{err}"
    );
    assert!(
        took < Duration::from_secs(2),
        "refused at once, not after {took:?}"
    );
    drop(idle);
    wfhost_tests::wait_for("status served again", LONG, || {
        let out = wfhost(&["status", "--socket", sock.to_str().expect("utf-8")]);
        (out.status.code() == Some(0)).then_some(())
    });
    sup.wait_log("the connection limit is reached");
}
