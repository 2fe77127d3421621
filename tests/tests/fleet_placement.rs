//! Placement in a fleet (issue 25): real hosts on one real PostgreSQL.
//! A deployment with `hosts = ["h3"]` runs only on h3, through a SIGKILL
//! of h3 too (it waits, running nowhere, `status` says why, and returns
//! with h3); a fourth host with `capacity = 2` joining takes its weighted
//! share by graceful hand-offs, and no deployment moves twice.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use wfhost_tests::fleet::{Fleet, RENEW, TTL, WAIT};
use wfhost_tests::postgres::PgServer;

/// `(deployment, host)` of every `lease_acquired` record, in order.
fn acquisitions(fleet: &Fleet, i: usize) -> Vec<(String, String)> {
    fleet
        .host(i)
        .journal()
        .iter()
        .filter(|r| r["kind"] == "lease_acquired")
        .map(|r| {
            (
                r["deployment"].as_str().unwrap_or_default().to_owned(),
                r["body"]["host"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Deployment `id`'s object in host `i`'s status.
fn deployment(fleet: &Fleet, i: usize, id: &str) -> serde_json::Value {
    fleet.status(i)["deployments"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("no {id} in status"))
}

#[test]
fn a_deployment_with_hosts_runs_only_there_through_a_sigkill_and_returns_with_its_host() {
    let lock = Fleet::lock();
    let pg = PgServer::start();
    let url = pg.url("postgres");
    let mut fleet = Fleet::empty(pg, url.clone(), 6, "", lock);
    fleet
        .deployment_extra
        .insert("d1".into(), "hosts = [\"h3\"]".into());
    for _ in 0..3 {
        fleet.add(&url, &[]);
    }
    let owners = fleet.wait_owners(0, "every deployment owned", WAIT, |o| {
        Fleet::per_host(o).len() == 3
    });
    assert_eq!(owners["d1"], "h3", "{owners:?}");
    let d1 = deployment(&fleet, 0, "d1");
    assert_eq!(d1["placement"], "on h3, one of its hosts (h3)", "{d1}");
    let text = wfhost_tests::ok("status", &fleet.host(1).client(&["status"]));
    assert!(text.contains("d1: on h3, one of its hosts (h3)"), "{text}");
    // h3 dies: its other deployments go to h1 and h2; d1 waits.
    let mut h3 = fleet.take(2);
    h3.signal(Signal::SIGKILL);
    h3.wait_exit(WAIT);
    let killed = Instant::now();
    let deadline = killed + TTL + RENEW * 4 + Duration::from_secs(5);
    loop {
        let d1 = deployment(&fleet, 0, "d1");
        let owners = fleet.owners(0);
        let others_moved = owners
            .iter()
            .filter(|(d, _)| *d != "d1")
            .all(|(_, h)| h.as_deref().is_some_and(|h| h != "h3"));
        if d1["state"] == "unowned" && others_moved {
            assert_eq!(
                d1["placement"], "runs nowhere: none of its hosts (h3) is live; it waits for one",
                "{d1}"
            );
            let text = wfhost_tests::ok("status", &fleet.host(1).client(&["status"]));
            assert!(
                text.contains("d1: runs nowhere: none of its hosts (h3) is live"),
                "{text}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "d1: {d1}; owners {owners:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Still nowhere a few renewals later: h1 and h2 never take it.
    std::thread::sleep(RENEW * 4);
    assert_eq!(deployment(&fleet, 1, "d1")["state"], "unowned");
    // h3 back: d1 returns to it.
    fleet.restart(2, h3);
    let owners = fleet.wait_owners(0, "d1 back on h3", WAIT, |o| o["d1"] == "h3");
    assert_eq!(owners["d1"], "h3");
    let d1_hosts: Vec<String> = acquisitions(&fleet, 0)
        .into_iter()
        .filter(|(d, _)| d == "d1")
        .map(|(_, h)| h)
        .collect();
    assert!(
        d1_hosts.len() >= 2 && d1_hosts.iter().all(|h| h == "h3"),
        "{d1_hosts:?}"
    );
}

#[test]
fn a_fourth_host_joining_takes_its_weighted_share_and_nothing_moves_twice() {
    let fleet_lock = Fleet::lock();
    let pg = PgServer::start();
    let url = pg.url("postgres");
    let mut fleet = Fleet::empty(pg, url.clone(), 10, "", fleet_lock);
    for _ in 0..3 {
        fleet.add(&url, &[]);
    }
    let before = fleet.wait_owners(0, "10 over three hosts", WAIT, |o| {
        let n = Fleet::per_host(o);
        n.len() == 3 && n.values().all(|c| *c <= 4)
    });
    let taken_before = acquisitions(&fleet, 0).len();
    // h4 weighs 2: its share is 10 × 2/5 = 4, the others' 2 each.
    fleet.add_with_fleet("capacity = 2");
    let after = fleet.wait_owners(0, "h4 holds four, the others two each", WAIT, |o| {
        let n = Fleet::per_host(o);
        n.get("h4") == Some(&4) && ["h1", "h2", "h3"].iter().all(|h| n.get(*h) == Some(&2))
    });
    // Stays so for a cooldown and more.
    std::thread::sleep(TTL + RENEW * 2);
    let settled = fleet.wait_owners(0, "all owned", WAIT, |_| true);
    assert_eq!(settled, after);
    // Every deployment moved at most once since the join, and only those
    // h4 took moved at all.
    let moves: Vec<(String, String)> = acquisitions(&fleet, 0)
        .into_iter()
        .skip(taken_before)
        .collect();
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for (d, h) in &moves {
        *count.entry(d).or_default() += 1;
        if h != "h4" {
            let mut why = String::new();
            for i in 0..4 {
                for l in fleet.host(i).plain_log().lines() {
                    if l.contains("handing it off")
                        || l.contains("lease acquired")
                        || l.contains("lease released")
                    {
                        why.push_str(&format!("h{}: {l}\n", i + 1));
                    }
                }
            }
            panic!("{d} moved to {h}: {moves:?}\n{why}");
        }
    }
    assert!(count.values().all(|n| *n == 1), "{moves:?}");
    assert_eq!(count.len(), 4, "{moves:?}");
    for (d, h) in &before {
        if after[d] != "h4" {
            assert_eq!(&after[d], h, "{d} moved between the old hosts");
        }
    }
    let hosts = wfhost_tests::ok("hosts", &fleet.host(3).client(&["hosts", "--json"]));
    let v: serde_json::Value = serde_json::from_str(&hosts).expect("hosts JSON");
    let h4 = v["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|h| h["host"] == "h4")
        .cloned()
        .expect("h4 listed");
    assert_eq!(h4["leases"], 4);
}
