//! The supervisor under systemd `Type=notify` (DESIGN §8), seen from the
//! notification socket: `READY=1` with a status line once every deployment
//! is up, `STATUS=` on change, `WATCHDOG=1` from the control loop,
//! `RELOADING=1` around a reload, `STOPPING=1`, and `EXTEND_TIMEOUT_USEC`
//! while a drain is within its budget.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::Signal;
use wfhost_tests::{
    LONG, Supervisor, TempDir, alive, children_of, deployment, exec, exec_with, unix_ms, wait_for,
};

/// One datagram and when it arrived (Unix ms).
#[derive(Debug, Clone)]
struct Message {
    at_ms: u64,
    text: String,
}

/// A bound notification socket whose datagrams a thread collects.
struct Notifications {
    messages: Arc<Mutex<Vec<Message>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Notifications {
    fn listen(socket: UnixDatagram) -> Self {
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("read timeout");
        let messages = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (sink, stopped) = (messages.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !stopped.load(Ordering::Relaxed) {
                if let Ok(n) = socket.recv(&mut buf) {
                    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                    sink.lock().unwrap().push(Message {
                        at_ms: unix_ms(),
                        text,
                    });
                }
            }
        });
        Self {
            messages,
            stop,
            thread: Some(thread),
        }
    }

    fn all(&self) -> Vec<Message> {
        self.messages.lock().unwrap().clone()
    }

    /// Waits until `pred` finds something in the messages so far.
    fn wait<T>(&self, what: &str, pred: impl Fn(&[Message]) -> Option<T>) -> T {
        wait_for(what, LONG, || pred(&self.all()))
    }

    /// Index and message of the first datagram at or after `from` that
    /// starts with `prefix`.
    fn find(&self, from: usize, prefix: &str) -> Option<(usize, Message)> {
        self.all()
            .into_iter()
            .enumerate()
            .skip(from)
            .find(|(_, m)| m.text.starts_with(prefix))
    }

    fn wait_for_prefix(&self, from: usize, prefix: &str) -> (usize, Message) {
        self.wait(&format!("a {prefix:?} notification"), |_| {
            self.find(from, prefix)
        })
    }
}

impl Drop for Notifications {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn bound(dir: &TempDir) -> (Notifications, String) {
    let path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&path).expect("bind the notification socket");
    (
        Notifications::listen(socket),
        path.to_str().expect("utf-8").to_owned(),
    )
}

fn monotonic_usec() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime");
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

#[test]
fn notify_ready_status_watchdog_reload_stopping_and_extend_timeout() {
    let dir = TempDir::new();
    let (notes, socket) = bound(&dir);
    let body = deployment("quick", &exec("sleep 1000"), "")
        // Its Ready comes half a second late: READY=1 must wait for it.
        + &deployment(
            "late",
            "[\"sh\", \"-c\", \"sleep 0.5; exec {bin}/wfhost-child exec -- sleep 1000\"]",
            "",
        )
        // On stop its drain runs the whole 2 s budget, then escalates.
        + &deployment(
            "stubborn",
            &exec_with(&["--drain", "cancel"], "trap '' TERM; sleep 1000"),
            "drain_timeout = \"2s\"\nkill_timeout = \"1s\"",
        );
    let mut sup = Supervisor::start_with_env(
        &body,
        &[("NOTIFY_SOCKET", &socket), ("WATCHDOG_USEC", "400000")],
    );

    // READY=1 carries the first status line, after every first Ready.
    let (ready_at, ready) = sup_ready(&notes);
    assert!(
        ready.text.starts_with("READY=1\nSTATUS="),
        "{:?}",
        ready.text
    );
    assert!(ready.text.contains("3 ready"), "{:?}", ready.text);
    for m in &notes.all()[..ready_at] {
        assert_eq!(m.text, "WATCHDOG=1", "only pings come before READY=1");
    }
    let evs = sup.events();
    for id in ["quick", "late", "stubborn"] {
        let first = evs
            .iter()
            .find(|e| e["kind"] == "ready" && e["deployment"] == id)
            .unwrap_or_else(|| panic!("no ready event for {id}"));
        let at = first["at_ms"].as_u64().expect("at_ms");
        assert!(
            at <= ready.at_ms,
            "{id} became ready at {at}, after READY=1 at {}",
            ready.at_ms
        );
    }

    // No child can notify in the supervisor's name.
    for id in ["quick", "stubborn"] {
        let pid = sup.ready_pid(id, LONG);
        let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("environ");
        let environ = String::from_utf8_lossy(&environ);
        assert!(!environ.contains("NOTIFY_SOCKET"), "{id}: {environ}");
        assert!(!environ.contains("WATCHDOG_USEC"), "{id}: {environ}");
    }

    // The watchdog keeps being fed.
    notes.wait("three more watchdog pings", |all| {
        let n = all[ready_at..]
            .iter()
            .filter(|m| m.text == "WATCHDOG=1")
            .count();
        (n >= 3).then_some(())
    });

    // A state change shows in STATUS=.
    let out = sup.client(&["drain", "quick"]);
    assert!(out.status.success(), "drain");
    let (i, status) = notes.wait("a STATUS= line naming the drained deployment", |_| {
        notes
            .all()
            .into_iter()
            .enumerate()
            .skip(ready_at + 1)
            .find(|(_, m)| m.text.starts_with("STATUS=") && m.text.contains("1 drained"))
    });
    assert!(status.text.contains("2 ready"), "{:?}", status.text);
    assert!(!status.text.contains('\n'), "one line: {:?}", status.text);
    let out = sup.client(&["resume", "quick"]);
    assert!(out.status.success(), "resume");

    // A reload: RELOADING=1 with the monotonic clock, then READY=1.
    let before = monotonic_usec();
    sup.signal(Signal::SIGHUP);
    let (j, reloading) = notes.wait_for_prefix(i + 1, "RELOADING=1\n");
    let usec: u64 = reloading
        .text
        .strip_prefix("RELOADING=1\nMONOTONIC_USEC=")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{:?}", reloading.text));
    assert!(
        before <= usec && usec <= monotonic_usec(),
        "MONOTONIC_USEC {usec} is now"
    );
    let (j, _) = notes.wait_for_prefix(j + 1, "READY=1");

    // A graceful stop: STOPPING=1, then EXTEND_TIMEOUT_USEC while the
    // stubborn drain is within its budget.
    let stubborn = sup.ready_pid("stubborn", LONG);
    let command = wait_for("stubborn's command", LONG, || {
        children_of(stubborn).first().copied()
    });
    sup.signal(Signal::SIGTERM);
    let status = sup.wait_exit(LONG);
    assert_eq!(status.code(), Some(0), "{}", sup.log());
    assert!(!alive(stubborn) && !alive(command), "nothing left");

    let all = notes.all();
    let stopping = all[j..]
        .iter()
        .position(|m| m.text == "STOPPING=1")
        .map(|k| k + j)
        .unwrap_or_else(|| panic!("no STOPPING=1 in {all:?}"));
    let extends: Vec<u64> = all[stopping..]
        .iter()
        .filter_map(|m| m.text.strip_prefix("EXTEND_TIMEOUT_USEC="))
        .map(|v| v.parse().expect("EXTEND_TIMEOUT_USEC value"))
        .collect();
    assert!(
        extends.len() >= 2,
        "repeated while the 2 s budget runs: {extends:?}"
    );
    // Each one covers the budget left, the kill timeout and a margin.
    let (kill_timeout, budget, margin) = (1_000_000, 2_000_000, 5_000_000);
    for &v in &extends {
        assert!(
            v > kill_timeout + margin && v <= budget + kill_timeout + margin,
            "{v} in {extends:?}"
        );
    }
    assert!(
        extends.windows(2).all(|w| w[1] <= w[0]),
        "the budget left only shrinks: {extends:?}"
    );
    assert!(
        all[..stopping]
            .iter()
            .all(|m| !m.text.starts_with("EXTEND_TIMEOUT_USEC")),
        "no extension before the stop"
    );
    assert!(
        all[stopping..].iter().any(|m| m.text == "WATCHDOG=1"),
        "the watchdog is fed during the stop"
    );
    // The budget ran out: a signed cancel was journaled.
    let out = sup.client(&["journal", "show", "--json"]);
    let journal = String::from_utf8_lossy(&out.stdout);
    assert!(
        journal
            .lines()
            .any(|l| l.contains("supervisor-drain") && l.contains("stubborn")),
        "{journal}"
    );
}

fn sup_ready(notes: &Notifications) -> (usize, Message) {
    notes.wait_for_prefix(0, "READY=1")
}

/// Starts a supervisor with `env`, waits for READY=1, then for a STATUS=
/// caused by a drain (sent from a later control-loop tick), and returns
/// every notification up to it.
fn notifications_until_a_status_change(notes: &Notifications, env: &[(&str, &str)]) -> Vec<String> {
    let body = deployment("a", &exec("sleep 1000"), "") + &deployment("b", &exec("sleep 1000"), "");
    let sup = Supervisor::start_with_env(&body, env);
    let (ready_at, _) = sup_ready(notes);
    let out = sup.client(&["drain", "a"]);
    assert!(out.status.success(), "drain");
    let (i, _) = notes.wait("a STATUS= line after the drain", |_| {
        notes
            .all()
            .into_iter()
            .enumerate()
            .skip(ready_at + 1)
            .find(|(_, m)| m.text.starts_with("STATUS=") && m.text.contains("drained"))
    });
    notes.all()[..=i].iter().map(|m| m.text.clone()).collect()
}

#[test]
fn an_abstract_notify_socket_gets_ready_and_status() {
    let name = format!("wfh-notify-{}", std::process::id());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract name");
    let socket = UnixDatagram::bind_addr(&addr).expect("bind abstract socket");
    let notes = Notifications::listen(socket);
    let seen =
        notifications_until_a_status_change(&notes, &[("NOTIFY_SOCKET", &format!("@{name}"))]);
    let first = seen
        .iter()
        .find(|m| *m != "WATCHDOG=1")
        .expect("a notification");
    assert_eq!(
        first, "READY=1\nSTATUS=2 ready, 0 draining, 0 failed",
        "{seen:?}"
    );
    assert_eq!(
        seen.last().map(String::as_str),
        Some("STATUS=1 ready, 0 draining, 0 failed, 1 drained"),
        "{seen:?}"
    );
}

#[test]
fn no_watchdog_pings_without_watchdog_usec_or_for_another_pid() {
    for env in [
        &[][..],
        &[("WATCHDOG_USEC", "400000"), ("WATCHDOG_PID", "1")][..],
    ] {
        let dir = TempDir::new();
        let (notes, socket) = bound(&dir);
        let mut env = env.to_vec();
        env.push(("NOTIFY_SOCKET", &socket));
        let seen = notifications_until_a_status_change(&notes, &env);
        assert!(!seen.iter().any(|m| m == "WATCHDOG=1"), "{env:?}: {seen:?}");
    }
}
