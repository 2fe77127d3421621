//! Hostile config files (issue 13, findings 13 to 15): a reload onto an
//! empty file, a reload that changes `[supervisor]`, a config or grants
//! file that is a FIFO, a filesystem that stops answering mid-read, and
//! durations too small for any child to meet.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use wfhost_tests::{
    LONG, Supervisor, bin, deployment, describe, exec, stderr, stdout, testchild, wait_for,
    write_config_with_settings,
};

/// Runs `wfhost ARGS` with a deadline: a command that hangs (as
/// `check-config` on a FIFO did) is killed and reported as `None`.
fn wfhost_within(args: &[&str], deadline: Duration) -> Option<Output> {
    let mut child = Command::new(bin("wfhost"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run wfhost");
    let until = Instant::now() + deadline;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Some(child.wait_with_output().expect("output"))
}

/// A client command by socket (the config file may be a FIFO by then),
/// with its duration.
fn by_socket(sup: &Supervisor, args: &[&str]) -> (Duration, Output) {
    let socket = sup.dir().join("state/wfhost.sock");
    let mut full = args.to_vec();
    full.extend(["--socket", socket.to_str().expect("utf-8")]);
    let started = Instant::now();
    let out = wfhost_within(&full, LONG).unwrap_or_else(|| panic!("`wfhost {args:?}` hung"));
    (started.elapsed(), out)
}

fn ids(status: &Value) -> Vec<String> {
    status["deployments"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["id"].as_str().map(str::to_owned))
        .collect()
}

/// The bodies of every `config_reloaded` event (read by socket: the
/// config file may not name the state dir by then).
fn reloads(sup: &Supervisor) -> Vec<Value> {
    let (_, out) = by_socket(sup, &["events", "--json"]);
    wfhost_tests::json_lines(&stdout(&out))
        .into_iter()
        .filter(|e| e["kind"] == "config_reloaded")
        .map(|e| e["body"].clone())
        .collect()
}

fn two_deployments() -> String {
    format!(
        "{}{}",
        deployment("second", &exec("sleep 1000"), ""),
        deployment("steady", &testchild("well-behaved"), "")
    )
}

/// Before: SIGHUP onto an empty file stopped every deployment
/// (`removed=["second","steady"]`). Now an empty file, or one with no
/// deployment, is refused while deployments run, unless it says
/// `allow_empty = true`.
#[test]
fn a_reload_onto_an_empty_file_is_refused_unless_the_file_allows_it() {
    let sup = Supervisor::start(&two_deployments());
    let second = sup.ready_pid("second", LONG);
    let steady = sup.ready_pid("steady", LONG);
    let good = std::fs::read_to_string(sup.config()).expect("config");

    std::fs::write(sup.config(), "").expect("empty the config");
    sup.signal(Signal::SIGHUP);
    let refused = wait_for("the SIGHUP refused", LONG, || {
        reloads(&sup).into_iter().find(|b| b["accepted"] == false)
    });
    let why = refused["error"].as_str().unwrap_or_default();
    assert!(
        why.contains("is empty") && why.contains("second, steady") && why.contains("allow_empty"),
        "{refused}"
    );
    let (_, out) = by_socket(&sup, &["reload"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("would stop every running deployment"),
        "{}",
        describe(&out)
    );

    // A file with a [supervisor] table and no deployment: the same.
    std::fs::write(
        sup.config(),
        good.split("[[deployment]]").next().unwrap_or(""),
    )
    .expect("config");
    let out = sup.client(&["reload"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("has no [[deployment]]"),
        "{}",
        describe(&out)
    );
    for (id, pid) in [("second", second), ("steady", steady)] {
        let d = sup.deployment(id);
        assert_eq!(
            (d["state"].as_str(), d["pid"].as_u64()),
            (Some("ready"), Some(u64::from(pid))),
            "{d}"
        );
    }

    // Said explicitly: every deployment is stopped.
    let state = sup.dir().join("state");
    write_config_with_settings(sup.config(), &state, "allow_empty = true", "");
    let text = wfhost_tests::ok("reload", &sup.client(&["reload"]));
    assert!(
        text.contains("stopped (drained under its budget): second, steady"),
        "{text}"
    );
    wait_for("no deployment left", LONG, || {
        ids(&sup.status()).is_empty().then_some(())
    });
}

/// A free loopback port, released for the supervisor.
fn free_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr")
}

fn scrape(addr: SocketAddr) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(LONG)).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

fn socket_mode(sup: &Supervisor) -> u32 {
    let meta = std::fs::metadata(sup.dir().join("state/wfhost.sock")).expect("socket");
    meta.permissions().mode() & 0o777
}

/// Before: reload ignored `[supervisor]` entirely while the log said
/// "config reloaded". Now its settings are applied (and said), and one
/// only a restart can apply refuses the reload, naming the key.
#[test]
fn a_reload_applies_supervisor_settings_and_refuses_what_needs_a_restart() {
    let body = deployment(
        "aging",
        &testchild("well-behaved"),
        "recycle = { max_uptime = \"1s\" }",
    );
    let sup = Supervisor::start_with_settings("policy_interval = \"1d\"", &body);
    sup.ready_pid("aging", LONG);
    let state = sup.dir().join("state");
    assert_eq!(socket_mode(&sup), 0o600);

    // The policy tick is a day away: max_uptime is not checked yet.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(sup.deployment("aging")["recycles"]["policy"], 0);

    let addr = free_port();
    let settings = format!(
        "policy_interval = \"100ms\"\nevent_retention = 5000\nmetrics_listen = \"{addr}\"\nadmin_group = \"root\""
    );
    write_config_with_settings(sup.config(), &state, &settings, &body);
    let text = wfhost_tests::ok("reload", &sup.client(&["reload"]));
    for said in [
        "policy_interval 1d → 100ms",
        "event_retention 100000 → 5000",
        &format!("metrics_listen none → {addr}"),
        "admin_group none → root",
    ] {
        assert!(text.contains(said), "{said}: {text}");
    }
    assert!(text.contains("unchanged: aging"), "{text}");
    // Applied: the bound is checked at the new interval, metrics are
    // served, the socket admits the group.
    sup.wait_deployment("aging", "recycled by max_uptime", LONG, |d| {
        d["recycles"]["policy"].as_u64() >= Some(1)
    });
    let scraped = wait_for("metrics at the new address", LONG, || scrape(addr));
    assert!(scraped.starts_with("HTTP/1.1 200"), "{scraped}");
    assert_eq!(socket_mode(&sup), 0o660);
    let body_of = reloads(&sup)
        .into_iter()
        .find(|b| b["accepted"] == true)
        .expect("reloaded");
    assert_eq!(
        body_of["settings"].as_array().map(Vec::len),
        Some(4),
        "{body_of}"
    );

    // Only a restart applies state_dir: refused, nothing changed.
    let moved = sup.dir().join("elsewhere");
    write_config_with_settings(sup.config(), &moved, &settings, &body);
    let out = wfhost_tests::wfhost(&[
        "reload",
        "--socket",
        state.join("wfhost.sock").to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = stderr(&out);
    assert!(
        err.contains("state_dir")
            && err.contains("restart the supervisor")
            && err.contains("nothing was reloaded"),
        "{err}"
    );
    sup.wait_log("the new config is refused");
    assert!(scrape(addr).is_some(), "metrics still served");
}

/// Before: a config path that is a FIFO froze the supervisor on SIGHUP
/// (no status, no pings, no signals) and `check-config` hung forever.
/// Now a FIFO is refused at once, naming what it is.
#[test]
fn a_fifo_config_is_refused_at_once_and_freezes_nothing() {
    let sup = Supervisor::start(&two_deployments());
    sup.ready_pid("steady", LONG);
    let fifo = sup.dir().join("fifo.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let fifo_arg = fifo.to_str().expect("utf-8");
    let check = wfhost_within(&["check-config", fifo_arg], Duration::from_secs(10))
        .expect("check-config on a FIFO hung");
    assert_eq!(check.status.code(), Some(2), "{}", describe(&check));
    assert!(
        stderr(&check).contains("is a FIFO (named pipe), not a regular file"),
        "{}",
        describe(&check)
    );

    std::fs::remove_file(sup.config()).expect("rm config");
    std::fs::rename(&fifo, sup.config()).expect("the config becomes a FIFO");
    sup.signal(Signal::SIGHUP);
    let (took, out) = by_socket(&sup, &["status", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(took < Duration::from_secs(3), "status took {took:?}");
    sup.wait_log("is a FIFO (named pipe), not a regular file");
    let (took, out) = by_socket(&sup, &["reload"]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(took < Duration::from_secs(3), "reload took {took:?}");
    // A client pointed at the FIFO is told, not hung.
    let out = wfhost_within(
        &["status", "--config", sup.config().to_str().expect("utf-8")],
        Duration::from_secs(10),
    )
    .expect("a client reading a FIFO config hung");
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let (_, out) = by_socket(&sup, &["status", "--json"]);
    let status: Value = serde_json::from_str(&stdout(&out)).expect("status JSON");
    assert_eq!(ids(&status), ["second", "steady"], "{status}");
}

/// Makes every `openat` of `path` by process `pid` (any thread) wait
/// `delay` before it runs, as a hung network filesystem would, until
/// dropped.
struct StuckFile(Child);

impl StuckFile {
    fn on(pid: u32, path: &Path, delay: &str) -> Self {
        let mut strace = Command::new("strace")
            .args(["-f", "-p", &pid.to_string(), "-o", "/dev/null", "-P"])
            .arg(path)
            .args([
                "-e",
                "trace=openat",
                "-e",
                &format!("inject=openat:delay_enter={delay}"),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("strace is missing: install it (apt-get install strace); .ci/run does");
        let err = strace.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
                if line.contains("attached") {
                    let _ = tx.send(());
                }
            }
        });
        rx.recv_timeout(LONG).expect("strace did not attach");
        Self(strace)
    }
}

impl Drop for StuckFile {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Before: the config was read on the runtime thread, so a filesystem
/// that stops answering stopped the supervisor with it. Now the read runs
/// on a thread of its own: status, signals and children carry on, and
/// the reload is refused once the read times out.
#[test]
fn a_stuck_config_read_freezes_nothing() {
    let sup = Supervisor::start(&deployment(
        "steady",
        &testchild("well-behaved"),
        "liveness_interval = \"100ms\"\nliveness_timeout = \"1s\"",
    ));
    let pid = sup.ready_pid("steady", LONG);
    let stuck = StuckFile::on(sup.pid(), sup.config(), "8s");
    let hup = Instant::now();
    sup.signal(Signal::SIGHUP);
    let mut slowest = Duration::ZERO;
    while hup.elapsed() < Duration::from_secs(4) {
        let (took, out) = by_socket(&sup, &["status", "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
        slowest = slowest.max(took);
        std::thread::sleep(Duration::from_millis(200));
    }
    sup.signal(Signal::SIGUSR2);
    wait_for(
        "the SIGUSR2 dump during the stuck read",
        Duration::from_secs(3),
        || {
            sup.plain_log()
                .contains("SIGUSR2: status dump")
                .then_some(())
        },
    );
    eprintln!("stuck config read: slowest status {slowest:?} while the read hung");
    assert!(slowest < Duration::from_secs(2), "status took {slowest:?}");
    let line = wait_for("the timed-out read", LONG, || {
        sup.plain_log()
            .lines()
            .find(|l| l.contains("took longer than 5s"))
            .map(str::to_owned)
    });
    assert!(line.contains("new config is refused"), "{line}");
    let d = sup.deployment("steady");
    assert_eq!(
        (
            d["state"].as_str(),
            d["pid"].as_u64(),
            d["restarts"].as_u64()
        ),
        (Some("ready"), Some(u64::from(pid)), Some(0)),
        "pings went on: {d}"
    );
    drop(stuck);
}

/// A supervisor with one deployment `holder` whose grants file is
/// `grants.json` beside its config; its ready child's pid.
fn holder_with_grants() -> (Supervisor, PathBuf, u32) {
    let dir = wfhost_tests::TempDir::new();
    let grants_path = dir.join("grants.json");
    std::fs::write(&grants_path, br#"{"token":"a"}"#).expect("grants");
    let config = dir.join("wfhost.toml");
    write_config_with_settings(
        &config,
        &dir.join("state"),
        "",
        &deployment(
            "holder",
            &testchild("well-behaved"),
            &format!("grants_file = \"{}\"", grants_path.display()),
        ),
    );
    let sup = Supervisor::start_in(dir, config);
    let pid = sup.ready_pid("holder", LONG);
    (sup, grants_path, pid)
}

/// `wfhost recycle holder` is refused at once saying `said`, and the old
/// child `pid` keeps serving.
fn recycle_refused(sup: &Supervisor, pid: u32, said: &str) {
    let config = sup.config().to_str().expect("utf-8");
    let started = Instant::now();
    let out = wfhost_within(&["recycle", "holder", "--config", config], LONG)
        .expect("the recycle hung reading the grants");
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(stderr(&out).contains(said), "{}", describe(&out));
    assert!(started.elapsed() < Duration::from_secs(5));
    let d = sup.deployment("holder");
    assert_eq!(
        (d["state"].as_str(), d["pid"].as_u64()),
        (Some("ready"), Some(u64::from(pid))),
        "{d}"
    );
}

/// A grants file that turns into a FIFO once the supervisor runs: the
/// recycle that reads it is refused and the old child keeps serving;
/// nothing waits on the FIFO.
#[test]
fn a_grants_file_turned_into_a_fifo_refuses_the_recycle_and_freezes_nothing() {
    let (sup, grants_path, pid) = holder_with_grants();
    std::fs::remove_file(&grants_path).expect("rm grants");
    nix::unistd::mkfifo(
        &grants_path,
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .expect("mkfifo");
    recycle_refused(&sup, pid, "is a FIFO (named pipe), not a regular file");
}

/// Before: a grants file near 1 MiB could not fit the 1 MiB Welcome frame
/// (the child got a frame it must refuse). Now one that grew past what the
/// Welcome carries once the supervisor runs refuses the spawn, saying so
/// and how to fix it, and the old child keeps serving.
#[test]
fn a_grants_file_grown_past_the_welcome_frame_refuses_the_recycle() {
    let (sup, grants_path, pid) = holder_with_grants();
    let big = format!("{{\"token\":\"{}\"}}", "a".repeat((1 << 20) - 20));
    std::fs::write(&grants_path, big).expect("grants");
    recycle_refused(&sup, pid, "its Welcome frame must fit max_frame_bytes");
}

/// Before: `ready_timeout = "0.000000001s"`, `kill_timeout` of a
/// nanosecond and a grants file the Welcome frame cannot carry all passed
/// `check-config`. Now each is refused at its line and column, with why.
#[test]
fn check_config_refuses_what_no_child_could_meet() {
    let dir = wfhost_tests::TempDir::new();
    let path = dir.join("wfhost.toml");
    let path_arg = path.to_str().expect("utf-8");
    let cases: [(&str, &str); 5] = [
        (
            "ready_timeout = \"0.000000001s\"",
            "ready_timeout 0.000001ms is shorter than 100ms",
        ),
        (
            "kill_timeout = \"0.000001ms\"",
            "kill_timeout 0.000001ms is shorter than 10ms",
        ),
        (
            "liveness_interval = \"0.001ms\"",
            "liveness_interval 0.001ms is shorter than 10ms",
        ),
        (
            "restart = { period = \"10ms\" }",
            "restart.period 10ms is shorter than 1s",
        ),
        (
            "max_mail_bytes = \"20MiB\"\nmax_frame_bytes = \"32MiB\"",
            "max_mail_bytes 20MiB is more than the control socket carries in one send (16MiB)",
        ),
    ];
    for (extra, said) in cases {
        write_config_with_settings(
            &path,
            &dir.join("state"),
            "",
            &deployment("a", &exec("true"), extra),
        );
        let out = wfhost_within(&["check-config", path_arg], LONG).expect("check-config hung");
        assert_eq!(out.status.code(), Some(2), "{extra}: {}", describe(&out));
        let err = stderr(&out);
        assert!(err.contains(said), "{extra}: {err}");
        assert!(
            err.contains(&format!("{path_arg}:")) && err.contains("help: give at least")
                || said.contains("control socket"),
            "{err}"
        );
    }
    let grants = dir.join("grants.json");
    std::fs::write(&grants, vec![b' '; 1 << 20]).expect("grants");
    write_config_with_settings(
        &path,
        &dir.join("state"),
        "",
        &deployment("a", &exec("true"), "grants_file = \"grants.json\""),
    );
    let out = wfhost_within(&["check-config", path_arg], LONG).expect("check-config hung");
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("more than a Welcome frame carries"),
        "{}",
        describe(&out)
    );
}
