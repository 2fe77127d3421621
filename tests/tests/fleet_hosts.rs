//! Host maintenance in a fleet (issue 25): three real hosts on one real
//! PostgreSQL. `wfhost host drain HOST` hands every deployment HOST holds
//! to the others within a drain and a renewal, keeps it from taking any
//! (through its own restart too) until `wfhost host resume HOST`; `wfhost
//! hosts` lists them; a rolling drain of every host with mail flowing
//! does every item exactly once.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wfhost_tests::fleet::{Fleet, RENEW, WAIT, assert_done_once};
use wfhost_tests::{bin, ok};

fn two_each(owners: &BTreeMap<String, String>) -> bool {
    let n = Fleet::per_host(owners);
    n.len() == 3 && n.values().all(|c| *c == 2)
}

fn holds(owners: &BTreeMap<String, String>, host: &str) -> usize {
    owners.values().filter(|h| *h == host).count()
}

/// `wfhost hosts --json` on host `i`: each host's object by id.
fn hosts(fleet: &Fleet, i: usize) -> BTreeMap<String, serde_json::Value> {
    let text = ok("hosts --json", &fleet.host(i).client(&["hosts", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&text).expect("hosts JSON");
    v["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| (h["host"].as_str().unwrap_or_default().to_owned(), h.clone()))
        .collect()
}

/// `wfhost ARGS` against host `i`, running in the background.
fn spawn_client(fleet: &Fleet, i: usize, args: &[&str]) -> Child {
    Command::new(bin("wfhost"))
        .args(args)
        .arg("--config")
        .arg(fleet.host(i).config())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wfhost")
}

#[test]
fn host_drain_hands_everything_off_keeps_it_through_a_restart_and_resume_takes_again() {
    let mut fleet = Fleet::start(3, 6, "");
    let before = fleet.wait_owners(0, "two deployments per host", WAIT, two_each);
    let h2: Vec<String> = before
        .iter()
        .filter(|(_, h)| *h == "h2")
        .map(|(d, _)| d.clone())
        .collect();
    // Asked on h1, for h2.
    let started = Instant::now();
    let text = ok(
        "host drain",
        &fleet.host(0).client(&["host", "drain", "h2", "--wait"]),
    );
    assert!(text.contains("drained h2"), "{text}");
    let moved = fleet.wait_owners(0, "h2 holds nothing", WAIT, |o| holds(o, "h2") == 0);
    let took = started.elapsed();
    // Drain (the children drain at once) plus one renewal, with room for
    // a loaded machine: far below a lease's expiry and takeover.
    let bound = Duration::from_secs(2) + RENEW + Duration::from_secs(2);
    assert!(took < bound, "took {took:?}: {moved:?}");
    for d in &h2 {
        assert_ne!(moved[d], "h2");
        assert!(text.contains(&format!("{d}: now on ")), "{text}");
    }
    // Everything else stayed where it was.
    for (d, h) in &before {
        if h != "h2" {
            assert_eq!(&moved[d], h, "{d} moved though its host was not drained");
        }
    }
    let list = hosts(&fleet, 2);
    assert_eq!(list["h2"]["state"], "drained", "{list:?}");
    assert_eq!(list["h2"]["leases"], 0);
    assert_eq!(list["h1"]["state"], "serving");
    assert_eq!(list["h1"]["leases"], 3);
    assert_eq!(list["h2"]["live"], true);
    assert!(
        list["h2"]["drained_by"]
            .as_str()
            .is_some_and(|b| b.starts_with("uid ") && b.ends_with("on h1")),
        "{list:?}"
    );
    let table = ok("hosts", &fleet.host(1).client(&["hosts"]));
    assert!(
        table.contains("HEARTBEAT") && table.contains("drained (by uid"),
        "{table}"
    );
    // Journaled with who asked.
    let journal = fleet.host(2).journal();
    let record = journal
        .iter()
        .find(|r| r["kind"] == "host_maintenance")
        .expect("a host_maintenance record");
    assert_eq!(record["body"]["host"], "h2");
    assert_eq!(record["body"]["action"], "drain");
    assert!(
        journal
            .iter()
            .any(|r| r["kind"] == "lease_released" && r["body"]["why"] == "drain")
    );
    // Durable: restarted, h2 still takes nothing.
    let mut sup = fleet.take(1);
    sup.signal(nix::sys::signal::Signal::SIGTERM);
    sup.wait_exit(WAIT);
    fleet.restart(1, sup);
    std::thread::sleep(RENEW * 6);
    let owners = fleet.wait_owners(0, "all owned", WAIT, |_| true);
    assert_eq!(holds(&owners, "h2"), 0, "{owners:?}");
    // Resumed, it takes its share back by graceful hand-offs.
    let text = ok(
        "host resume",
        &fleet.host(2).client(&["host", "resume", "h2"]),
    );
    assert!(text.contains("resumed h2"), "{text}");
    fleet.wait_owners(0, "two each again", WAIT, two_each);
    assert_eq!(hosts(&fleet, 0)["h2"]["state"], "serving");
    let journal = fleet.host(0).journal();
    assert!(
        journal
            .iter()
            .any(|r| r["kind"] == "host_maintenance" && r["body"]["action"] == "resume")
    );
}

#[test]
fn a_rolling_drain_of_every_host_with_mail_flowing_does_every_item_once() {
    let fleet = Fleet::start(3, 6, "");
    fleet.wait_owners(0, "two deployments per host", WAIT, two_each);
    let mut sent = Vec::new();
    let mut n = 0;
    let mut send = |fleet: &Fleet, via: usize, count: usize| {
        for _ in 0..count {
            let d = &fleet.deployments[n % fleet.deployments.len()];
            sent.push((d.clone(), fleet.send(via, d, &format!("item-{n}"))));
            n += 1;
        }
    };
    for i in 0..3 {
        let host = Fleet::id(i);
        let asker = (i + 1) % 3;
        // Mail goes in while the host drains (sent through the others and
        // through the draining host itself: its control socket serves on).
        let drain = spawn_client(&fleet, asker, &["host", "drain", &host, "--wait"]);
        send(&fleet, i, 40);
        send(&fleet, (i + 2) % 3, 20);
        let out = drain.wait_with_output().expect("host drain");
        ok("host drain --wait", &out);
        let owners = fleet.wait_owners(asker, "the drained host holds none", WAIT, |o| {
            holds(o, &host) == 0
        });
        assert_eq!(Fleet::per_host(&owners).len(), 2, "{owners:?}");
        send(&fleet, asker, 20);
        ok(
            "host resume",
            &fleet.host(asker).client(&["host", "resume", &host]),
        );
        fleet.wait_owners(asker, "two each after the resume", WAIT, two_each);
        send(&fleet, i, 20);
    }
    assert_eq!(sent.len(), 300);
    assert_done_once(&fleet, 0, &sent, WAIT * 2);
}
