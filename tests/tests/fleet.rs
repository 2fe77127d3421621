//! A fleet (issue 12): three real supervisors with distinct `host_id`s
//! and state dirs on one real PostgreSQL, six mail-taking deployments.
//! Each deployment has exactly one owner; mail sent through any host is
//! done exactly once; a host that dies, freezes, is cut off or stops hands
//! its deployments over without two children of one deployment ever
//! working at once; PostgreSQL going away and coming back loses nothing.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use wfhost_tests::fleet::{Fleet, RENEW, TTL, WAIT, assert_no_overlap};
use wfhost_tests::{ok, stderr};

/// A small deterministic generator (tests must be repeatable).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

fn two_each(owners: &std::collections::BTreeMap<String, String>) -> bool {
    let n = Fleet::per_host(owners);
    n.len() == 3 && n.values().all(|c| *c == 2)
}

#[test]
fn each_deployment_has_one_owner_two_per_host_and_mail_through_any_host_is_done_once() {
    let fleet = Fleet::start(3, 6, "");
    let owners = fleet.wait_owners(0, "two deployments per host", WAIT, two_each);
    // Every host shows all six, with the same owners, epochs and expiries.
    for i in 0..3 {
        let status = fleet.status(i);
        assert_eq!(status["host"], Fleet::id(i));
        let ds = status["deployments"].as_array().expect("deployments");
        assert_eq!(ds.len(), 6, "{status}");
        for d in ds {
            let id = d["id"].as_str().unwrap_or_default();
            assert_eq!(
                d["owner"]["host"].as_str(),
                owners.get(id).map(String::as_str),
                "h{}: {d}",
                i + 1
            );
            assert!(d["owner"]["epoch"].as_i64().unwrap_or(0) >= 1, "{d}");
            assert!(d["owner"]["expires_ms"].as_i64().unwrap_or(0) > 0, "{d}");
            assert_eq!(d["state"], "ready", "{d}");
        }
    }
    // 300 items through random hosts to random deployments.
    let mut rng = Lcg(12);
    let mut sent = Vec::new();
    for n in 0..300 {
        let (via, d) = (rng.below(3), rng.below(6));
        let deployment = &fleet.deployments[d];
        sent.push((
            deployment.clone(),
            fleet.send(via, deployment, &format!("item-{n}")),
        ));
    }
    // Each deployment's items were worked on by its owner's child only.
    wfhost_tests::fleet::assert_done_once(&fleet, 0, &sent, WAIT);
    // One chain, signed by three hosts, verifies from any host.
    let out = fleet.host(1).client(&["journal", "verify"]);
    let text = ok("journal verify", &out);
    for i in 0..3 {
        assert!(
            text.contains(&format!("host {}: key id", Fleet::id(i))),
            "{text}"
        );
    }
    let acquired: Vec<_> = fleet
        .host(2)
        .journal()
        .into_iter()
        .filter(|r| r["kind"] == "lease_acquired")
        .collect();
    assert!(acquired.len() >= 6, "{acquired:?}");
    let signers: BTreeSet<_> = acquired.iter().map(|r| r["key_id"].to_string()).collect();
    assert_eq!(signers.len(), 3, "each host signs its own: {acquired:?}");
}

/// `GET /metrics` on 127.0.0.1:`port`.
fn metrics(port: u16) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to metrics");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("request");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("response");
    text
}

/// Which deployments `host` owns.
fn owned_by(owners: &std::collections::BTreeMap<String, String>, host: &str) -> Vec<String> {
    owners
        .iter()
        .filter(|(_, h)| *h == host)
        .map(|(d, _)| d.clone())
        .collect()
}

/// The pids host `i` runs, by deployment.
fn pids(fleet: &Fleet, i: usize) -> std::collections::BTreeMap<String, u32> {
    fleet.status(i)["deployments"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["owner"]["host"] == Fleet::id(i).as_str())
        .filter_map(|d| Some((d["id"].as_str()?.to_owned(), d["pid"].as_u64()? as u32)))
        .collect()
}

/// Sends `n` items, round robin over deployments and hosts `via`.
fn send_some(fleet: &Fleet, via: &[usize], n: usize, tag: &str) -> Vec<(String, u64)> {
    (0..n)
        .map(|k| {
            let d = &fleet.deployments[k % fleet.deployments.len()];
            (
                d.clone(),
                fleet.send(via[k % via.len()], d, &format!("{tag}-{k}")),
            )
        })
        .collect()
}

/// Asserts each id of `sent` is done exactly once in `done`.
fn exactly_once(sent: &[(String, u64)], done: &[(String, u64)]) {
    for s in sent {
        let n = done.iter().filter(|d| *d == s).count();
        assert_eq!(n, 1, "{s:?} done {n} times");
    }
}

#[test]
fn a_killed_host_s_deployments_run_on_the_others_within_ttl_renew_and_ready() {
    let mut fleet = Fleet::start(3, 6, "");
    let owners = fleet.wait_owners(0, "two deployments per host", WAIT, two_each);
    let victims = owned_by(&owners, "h3");
    let mut sent = send_some(&fleet, &[0, 1, 2], 30, "before");
    let h3 = fleet.take(2);
    let killed = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(h3.pid() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("SIGKILL h3");
    let owners = fleet.wait_owners(0, "h3's deployments taken over", WAIT, |o| {
        !Fleet::per_host(o).contains_key("h3")
    });
    let took = killed.elapsed();
    // ready: a child on the Rust runtime is ready within a second here.
    let bound = TTL + RENEW + Duration::from_secs(1);
    assert!(
        took <= bound,
        "taken over after {took:?}, more than lease_ttl + lease_renew + ready ({bound:?})"
    );
    eprintln!("takeover after SIGKILL: {took:?} (bound {bound:?})");
    for d in &victims {
        assert!(owners[d] == "h1" || owners[d] == "h2", "{d}: {owners:?}");
    }
    sent.extend(send_some(&fleet, &[0, 1], 30, "after"));
    let done = fleet.wait_done(0, &sent, WAIT);
    exactly_once(&sent, &done);
    assert_no_overlap(&fleet.work());
    // The takeovers are journaled, from the dead host's expired leases.
    let taken: Vec<_> = fleet
        .host(0)
        .journal()
        .into_iter()
        .filter(|r| r["kind"] == "lease_acquired" && r["body"]["how"] == "expired")
        .filter_map(|r| r["deployment"].as_str().map(str::to_owned))
        .collect();
    for d in &victims {
        assert!(taken.contains(d), "{d} taken over: {taken:?}");
    }
    drop(h3);
}

#[test]
fn a_stopping_host_hands_off_without_waiting_for_the_ttl_and_move_hands_one_over() {
    let mut fleet = Fleet::start(3, 6, "");
    let owners = fleet.wait_owners(0, "two deployments per host", WAIT, two_each);
    let leaving = owned_by(&owners, "h3");
    let mut sent = send_some(&fleet, &[0, 1, 2], 30, "before");
    let mut h3 = fleet.take(2);
    let stopped = Instant::now();
    h3.signal(nix::sys::signal::Signal::SIGTERM);
    let owners = fleet.wait_owners(0, "h3's deployments handed off", WAIT, |o| {
        !Fleet::per_host(o).contains_key("h3")
    });
    let took = stopped.elapsed();
    eprintln!("handoff after SIGTERM: {took:?}");
    assert!(
        took < TTL,
        "handed off after {took:?}: a graceful stop must not wait out the lease ({TTL:?})"
    );
    assert!(h3.wait_exit(WAIT).success(), "{}", h3.log());
    for d in &leaving {
        assert!(owners[d] == "h1" || owners[d] == "h2", "{d}: {owners:?}");
    }
    let log = h3.plain_log();
    assert!(
        log.contains("lease released") && log.contains("left the fleet"),
        "{log}"
    );

    // move, asked of the host that does not own it: forwarded, done at once.
    let (d, from) = owners
        .iter()
        .find(|(_, h)| *h == "h1")
        .map(|(d, h)| (d.clone(), h.clone()))
        .expect("one on h1");
    let started = Instant::now();
    let out = fleet.host(1).client(&["move", &d, "--to", "h2"]);
    let text = ok("move", &out);
    assert!(
        text.starts_with(&format!("moved {d} from {from} to h2 (epoch ")),
        "{text}"
    );
    assert!(started.elapsed() < TTL, "{:?}", started.elapsed());
    fleet.wait_owners(0, "the moved deployment ready on h2", WAIT, |o| {
        o[&d] == "h2"
    });
    // A move to a host that is not in the fleet is refused, naming it.
    let out = fleet.host(0).client(&["move", &d, "--to", "h9"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("\"h9\" is not a live host of the fleet"),
        "{}",
        stderr(&out)
    );

    sent.extend(send_some(&fleet, &[0, 1], 20, "after"));
    let done = fleet.wait_done(0, &sent, WAIT);
    exactly_once(&sent, &done);
    assert_no_overlap(&fleet.work());
    drop(h3);
}

#[test]
fn operator_requests_for_a_deployment_owned_elsewhere_are_answered_by_its_owner() {
    let pg = wfhost_tests::postgres::PgServer::start();
    let url = pg.url("postgres");
    let mut fleet = Fleet::empty(pg, url, 2, "", Fleet::lock());
    let port = 19000 + (std::process::id() % 1000) as u16;
    fleet.add_with_settings(&format!("metrics_listen = \"127.0.0.1:{port}\""));
    fleet.add_with_settings("");
    let owners = fleet.wait_owners(0, "one deployment per host", WAIT, |o| {
        Fleet::per_host(o).values().all(|n| *n == 1)
    });
    let remote = owned_by(&owners, "h2").pop().expect("one on h2");
    let pid = pids(&fleet, 1)[&remote];
    // Metrics on h1 say which host owns what, h2's deployment included.
    let scrape = metrics(port);
    assert!(
        scrape.contains(&format!(
            "wfhost_fleet_lease_owner{{deployment=\"{remote}\",host=\"h2\"}} 1"
        )),
        "{scrape}"
    );
    assert!(
        scrape.contains("wfhost_fleet_leases_held{host=\"h1\"} 1"),
        "{scrape}"
    );
    // The table names every owner too.
    let table = ok("status", &fleet.host(0).client(&["status"]));
    assert!(
        table.contains(&format!("{remote}: owned by h2 (epoch ")),
        "{table}"
    );
    // Asked of h1, carried out by h2.
    let out = fleet.host(0).client(&["recycle", &remote]);
    let text = ok("recycle", &out);
    assert!(
        text.starts_with(&format!("recycled {remote}: pid {pid} -> ")),
        "{text}"
    );
    let out = fleet.host(0).client(&["drain", &remote]);
    ok("drain", &out);
    fleet
        .host(1)
        .wait_deployment(&remote, "drained", WAIT, |d| d["state"] == "drained");
    let out = fleet.host(0).client(&["resume", &remote]);
    ok("resume", &out);
    let new_pid = fleet.host(1).ready_pid(&remote, WAIT);
    let out = fleet.host(0).client(&["cancel", &remote]);
    assert!(
        ok("cancel", &out).contains("journal"),
        "{}",
        ok("cancel", &out)
    );
    let out = fleet.host(0).client(&["kill", &remote]);
    ok("kill", &out);
    fleet
        .host(1)
        .wait_deployment(&remote, "restarted after the kill", WAIT, |d| {
            d["state"] == "ready" && d["pid"].as_u64().is_some_and(|p| p as u32 != new_pid)
        });
    // What only the owner keeps (its children's output, its dead mail)
    // is refused here with the host to ask instead.
    for args in [
        vec!["logs", remote.as_str()],
        vec!["mail", "retry", "--dead", remote.as_str()],
    ] {
        let out = fleet.host(0).client(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            stderr(&out).contains(&format!("{remote} runs on h2, not on this host (h1)"))
                && stderr(&out).contains("run the same command on h2"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    // Unknown deployments are named with the fleet's list.
    let out = fleet.host(0).client(&["kill", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("unknown deployment \"nope\"; the fleet's deployments: d1, d2"),
        "{}",
        stderr(&out)
    );
    // h1 follows h2's events live.
    let mut follow = std::process::Command::new(wfhost_tests::bin("wfhost"))
        .args(["events", "--follow", "--json", "--config"])
        .arg(fleet.host(0).config())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("events --follow");
    let stdout = follow.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    std::thread::sleep(Duration::from_millis(300));
    ok(
        "recycle",
        &fleet
            .host(1)
            .client(&["recycle", &remote, "--reason", "seen from h1"]),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = false;
    while Instant::now() < deadline && !seen {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            seen = line.contains("\"recycled\"") && line.contains("seen from h1");
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();
    assert!(seen, "h1's follower did not see h2's recycle");
}

/// What a [`Sender`] sent: the items accepted, and the errors of the rest.
type Flowed = (Vec<(String, u64)>, Vec<String>);

/// Sends round robin through `via` until told to stop, every `every`;
/// returns what was accepted and the errors of what was not.
struct Sender {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Flowed>,
}

impl Sender {
    fn start(configs: Vec<std::path::PathBuf>, deployments: Vec<String>, every: Duration) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let (mut sent, mut failed) = (Vec::new(), Vec::new());
            let mut k = 0usize;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let d = &deployments[k % deployments.len()];
                let config = &configs[k % configs.len()];
                let out = wfhost_tests::client(config, &["send", d, &format!("flow-{k}")]);
                let text = wfhost_tests::stdout(&out);
                match text
                    .trim()
                    .strip_prefix("accepted mail ")
                    .and_then(|r| r.split(' ').next())
                    .and_then(|id| id.parse().ok())
                {
                    Some(id) if out.status.success() => sent.push((d.clone(), id)),
                    _ => failed.push(stderr(&out)),
                }
                k += 1;
                std::thread::sleep(every);
            }
            (sent, failed)
        });
        Self { stop, thread }
    }

    fn finish(self) -> Flowed {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().expect("sender")
    }
}

#[test]
fn a_frozen_host_is_taken_over_its_children_stop_by_the_deadline_and_it_rejoins_writing_nothing() {
    let fleet = Fleet::start(3, 6, "");
    let owners = fleet.wait_owners(0, "two deployments per host", WAIT, two_each);
    let frozen = owned_by(&owners, "h3");
    let old = pids(&fleet, 2);
    assert_eq!(old.len(), 2, "{old:?}");
    let h3_key = fleet
        .host(0)
        .journal()
        .iter()
        .find(|r| r["kind"] == "lease_acquired" && r["body"]["host"] == "h3")
        .map(|r| r["key_id"].clone())
        .expect("h3 journaled its leases");
    let sender = Sender::start(
        vec![
            fleet.host(0).config().to_path_buf(),
            fleet.host(1).config().to_path_buf(),
        ],
        fleet.deployments.clone(),
        Duration::from_millis(15),
    );
    std::thread::sleep(Duration::from_secs(1));
    let h3 = fleet.host(2);
    let stopped_at = wfhost_tests::unix_ms();
    h3.signal(nix::sys::signal::Signal::SIGSTOP);
    std::thread::sleep(TTL * 2);
    let owners = fleet.wait_owners(0, "h3's deployments taken over", WAIT, |o| {
        !Fleet::per_host(o).contains_key("h3")
    });
    for d in &frozen {
        assert!(owners[d] != "h3", "{d}: {owners:?}");
    }
    // Its children stopped working by the lease deadline, by themselves.
    let deadline = stopped_at + (TTL - RENEW).as_millis() as u64;
    for w in fleet
        .work()
        .iter()
        .filter(|w| old.values().any(|p| *p == w.pid))
    {
        assert!(
            w.end_ms <= deadline + 500,
            "pid {} of frozen h3 worked past the lease deadline ({deadline}): {w:?}",
            w.pid
        );
    }
    let continued = wfhost_tests::unix_ms();
    h3.signal(nix::sys::signal::Signal::SIGCONT);
    // It finds its leases gone and kills its children...
    wfhost_tests::wait_for("h3's old children killed", WAIT, || {
        old.values().all(|p| !wfhost_tests::alive(*p)).then_some(())
    });
    // ...and rejoins: the others hand it its share again.
    fleet.wait_owners(0, "h3 back with its share", WAIT, two_each);
    let (sent, failed) = sender.finish();
    assert!(
        failed.is_empty(),
        "sends through h1 and h2 failed: {failed:?}"
    );
    assert!(sent.len() > 100, "{} sent", sent.len());
    let done = fleet.wait_done(0, &sent, WAIT);
    exactly_once(&sent, &done);
    assert_no_overlap(&fleet.work());
    // Nothing h3 journaled after it woke up concerns what it lost, but
    // the loss itself.
    let late: Vec<_> = fleet
        .host(0)
        .journal()
        .into_iter()
        .filter(|r| r["key_id"] == h3_key && r["at_ms"].as_u64().unwrap_or(0) >= continued)
        .filter(|r| frozen.iter().any(|d| r["deployment"] == d.as_str()))
        .filter(|r| {
            r["kind"] != "lease_lost" && r["kind"] != "lease_acquired" && r["kind"] != "spawned"
        })
        .collect();
    // Anything after h3 took a deployment again is its new owner's writing.
    let retaken: Vec<_> = fleet
        .host(0)
        .journal()
        .into_iter()
        .filter(|r| {
            r["key_id"] == h3_key
                && r["kind"] == "lease_acquired"
                && r["at_ms"].as_u64().unwrap_or(0) >= continued
        })
        .filter_map(|r| r["deployment"].as_str().map(str::to_owned))
        .collect();
    let stale: Vec<_> = late
        .iter()
        .filter(|r| !retaken.iter().any(|d| r["deployment"] == d.as_str()))
        .collect();
    assert!(
        stale.is_empty(),
        "h3 wrote for deployments it had lost: {stale:?}"
    );
    let lost: Vec<_> = fleet
        .host(0)
        .journal()
        .into_iter()
        .filter(|r| r["kind"] == "lease_lost" && r["body"]["host"] == "h3")
        .collect();
    assert_eq!(lost.len(), 2, "{lost:?}");
    fleet.host(2).wait_log("lease lost");
}

#[test]
fn a_host_cut_off_from_postgresql_self_fences_before_its_ttl_and_rejoins() {
    let lock = Fleet::lock();
    let ns = match wfhost_tests::netns::Netns::create() {
        Ok(ns) => ns,
        Err(why) => {
            eprintln!("SKIPPED: network namespaces are impossible here: {why}");
            return;
        }
    };
    let port = 20000 + (std::process::id() % 20000) as u16;
    let pg = wfhost_tests::postgres::PgServer::start_listening(&ns.outside, port);
    let local = pg.url("postgres");
    let mut fleet = Fleet::empty(pg, local.clone(), 6, "", lock);
    fleet.add(&local, &[]);
    fleet.add(&local, &[]);
    // A plaintext test server on a non-local address: TLS (verify-full by
    // default there) is turned off by name.
    let tcp = format!(
        "host={} port={port} user=wfhost dbname=postgres sslmode=disable",
        ns.outside
    );
    fleet.add(&tcp, &ns.exec());
    let owners = fleet.wait_owners(0, "two deployments per host", WAIT, two_each);
    let cut = owned_by(&owners, "h3");
    let old = pids(&fleet, 2);
    assert_eq!(old.len(), 2, "{old:?}");
    let sent = send_some(&fleet, &[0, 1], 30, "before");
    ns.link(false);
    let down = Instant::now();
    let fenced = wfhost_tests::poll(WAIT, Duration::from_millis(20), || {
        if old.values().all(|p| !wfhost_tests::alive(*p)) {
            Ok(down.elapsed())
        } else {
            Err(())
        }
    })
    .unwrap_or_else(|()| {
        panic!(
            "h3's children still run after the link went down\n{}",
            fleet.logs()
        )
    });
    eprintln!("self-fenced {fenced:?} after the link went down (lease_ttl {TTL:?})");
    assert!(
        fenced < TTL,
        "h3 self-fenced only after {fenced:?}, not before its TTL ({TTL:?})"
    );
    assert!(
        wfhost_tests::alive(fleet.host(2).pid()),
        "h3 must still run"
    );
    let owners = fleet.wait_owners(0, "h3's deployments taken over", WAIT, |o| {
        !Fleet::per_host(o).contains_key("h3")
    });
    for d in &cut {
        assert!(owners[d] != "h3");
    }
    fleet.host(2).wait_log("self-fenced");
    ns.link(true);
    fleet.wait_owners(0, "h3 back with its share", WAIT, two_each);
    let done = fleet.wait_done(0, &sent, WAIT);
    exactly_once(&sent, &done);
    assert_no_overlap(&fleet.work());
}

#[test]
fn a_postgresql_restart_fails_sends_clearly_and_loses_nothing_accepted() {
    let fleet = Fleet::start(3, 6, "");
    fleet.wait_owners(0, "two deployments per host", WAIT, two_each);
    let sender = Sender::start(
        (0..3)
            .map(|i| fleet.host(i).config().to_path_buf())
            .collect(),
        fleet.deployments.clone(),
        Duration::from_millis(20),
    );
    std::thread::sleep(Duration::from_secs(1));
    fleet.pg.stop();
    // Longer than a lease: every host self-fences meanwhile.
    std::thread::sleep(TTL + Duration::from_secs(1));
    fleet.pg.start_again();
    fleet.wait_owners(0, "every deployment running again", WAIT, |_| true);
    std::thread::sleep(Duration::from_secs(1));
    let (sent, failed) = sender.finish();
    assert!(
        !failed.is_empty(),
        "no send failed while PostgreSQL was down"
    );
    for f in &failed {
        assert!(
            f.contains("failed: unavailable") && f.contains("pg_isready"),
            "a send during the outage must say the store is unavailable and what to check: {f}"
        );
    }
    let done = fleet.wait_done(0, &sent, WAIT);
    exactly_once(&sent, &done);
    assert_no_overlap(&fleet.work());
    for i in 0..3 {
        let out = fleet.host(i).client(&["journal", "verify"]);
        assert!(ok("journal verify", &out).starts_with("journal ok: "));
    }
    let log = fleet.host(0).wait_log("self-fenced");
    assert!(log.contains("cannot renew this host's leases"), "{log}");
}
