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
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
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
            assert_eq!(d["owner"]["host"].as_str(), owners.get(id).map(String::as_str), "h{}: {d}", i + 1);
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
        sent.push((deployment.clone(), fleet.send(via, deployment, &format!("item-{n}"))));
    }
    let done = fleet.wait_done(0, &sent, WAIT);
    assert_eq!(done.len(), 300, "each id done once: {} done events", done.len());
    let unique: BTreeSet<_> = done.iter().collect();
    assert_eq!(unique.len(), 300);
    // Each deployment's items were worked on by its owner's child only.
    let work = fleet.work();
    assert_no_overlap(&work);
    for (d, id) in &sent {
        let by: Vec<_> = work.iter().filter(|w| &w.deployment == d && w.id == *id && w.outcome == "done").collect();
        assert_eq!(by.len(), 1, "{d} mail {id}: {by:?}");
    }
    // One chain, signed by three hosts, verifies from any host.
    let out = fleet.host(1).client(&["journal", "verify"]);
    let text = ok("journal verify", &out);
    for i in 0..3 {
        assert!(text.contains(&format!("host {}: key id", Fleet::id(i))), "{text}");
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
    let _ = (TTL, RENEW, Instant::now(), Duration::ZERO, stderr);
}
