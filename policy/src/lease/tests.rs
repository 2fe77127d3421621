//! The rules, table by table: who counts as live, each lease row's claim,
//! fair shares and shedding, the deadline and what a renewal lost.

use super::*;

const TIMING: Timing = Timing {
    ttl: Duration::from_secs(15),
    renew: Duration::from_secs(5),
};
const NOW: i64 = 1_000_000;

fn host(id: &str, heartbeat_ago_ms: i64, stopping: bool) -> HostRow {
    HostRow {
        host: id.into(),
        heartbeat_ms: NOW - heartbeat_ago_ms,
        stopping,
        paused: false,
        capacity: 1,
    }
}

fn drained(id: &str) -> HostRow {
    HostRow {
        paused: true,
        ..host(id, 0, false)
    }
}

fn lease(d: &str, epoch: i64, holder: Option<&str>, expires_in_ms: i64) -> LeaseRow {
    LeaseRow {
        deployment: d.into(),
        epoch,
        holder: holder.map(str::to_owned),
        expires_ms: NOW + expires_in_ms,
        reserved_for: None,
    }
}

fn mine(host: &str, configured: &[&str], held: &[&str]) -> Mine {
    Mine {
        host: host.into(),
        configured: configured.iter().map(|d| (*d).to_owned()).collect(),
        held: held
            .iter()
            .map(|d| ((*d).to_owned(), NOW - 60_000))
            .collect(),
        ..Mine::default()
    }
}

fn view(hosts: Vec<HostRow>, leases: Vec<LeaseRow>) -> View {
    View {
        now_ms: NOW,
        hosts,
        leases,
    }
}

fn names(acquire: &[(String, Claim)]) -> Vec<&str> {
    let mut v: Vec<&str> = acquire.iter().map(|(d, _)| d.as_str()).collect();
    v.sort_unstable();
    v
}

#[test]
fn timing_follows_from_ttl_and_renew() {
    assert_eq!(TIMING.grace(), Duration::from_millis(2500));
    assert_eq!(TIMING.cooldown(), Duration::from_secs(15));
    assert_eq!(TIMING.fence_after(), Duration::from_secs(10));
    let t0 = Instant::now();
    assert_eq!(TIMING.deadline(t0), t0 + Duration::from_secs(10));
    // The old holder stops `renew` before the expiry; the next one starts
    // `grace` after it: 7.5 s apart with the defaults.
    let gap = TIMING.ttl - TIMING.fence_after() + TIMING.grace();
    assert_eq!(gap, Duration::from_millis(7500));
}

#[test]
fn live_hosts_heartbeated_within_the_ttl_and_are_not_stopping() {
    let table = [
        // (heartbeat ago ms, stopping, live)
        (0, false, true),
        (14_999, false, true),
        (15_000, false, false),
        (60_000, false, false),
        (0, true, false),
    ];
    for (ago, stopping, live) in table {
        let v = view(vec![host("b", ago, stopping)], vec![]);
        let got = live_hosts(&v, "a", false, &TIMING);
        assert_eq!(
            got.contains(&"b"),
            live,
            "heartbeat {ago} ms ago, stopping {stopping}"
        );
        assert!(got.contains(&"a"), "this host always counts");
    }
    let v = view(vec![host("a", 90_000, false)], vec![]);
    assert_eq!(
        live_hosts(&v, "a", true, &TIMING),
        Vec::<&str>::new(),
        "a stopping host does not"
    );
}

#[test]
fn fair_shares_round_up() {
    let table = [
        (6, 3, 2),
        (7, 3, 3),
        (6, 1, 6),
        (1, 3, 1),
        (0, 2, 0),
        (5, 0, 5),
    ];
    for (deployments, live, share) in table {
        assert_eq!(
            fair_share(deployments, live),
            share,
            "{deployments} over {live}"
        );
    }
}

#[test]
fn each_lease_row_is_claimed_by_its_rule() {
    let grace = 2_500;
    let reserved = |to: &str, expires_in: i64| LeaseRow {
        reserved_for: Some(to.into()),
        ..lease("d", 4, None, expires_in)
    };
    type Case = (&'static str, Option<LeaseRow>, Result<Claim, Option<i64>>);
    let table: Vec<Case> = vec![
        ("never held", None, Ok(Claim::New)),
        (
            "released",
            Some(lease("d", 4, None, 0)),
            Ok(Claim::Released { epoch: 4 }),
        ),
        (
            "handed to me",
            Some(reserved("a", 10_000)),
            Ok(Claim::Released { epoch: 4 }),
        ),
        (
            "handed to b",
            Some(reserved("b", 10_000)),
            Err(Some(NOW + 10_000)),
        ),
        (
            "hand-off to b over",
            Some(reserved("b", -1)),
            Ok(Claim::Released { epoch: 4 }),
        ),
        (
            "b holds it",
            Some(lease("d", 4, Some("b"), 5_000)),
            Err(Some(NOW + 7_501)),
        ),
        (
            "b's ran out, in grace",
            Some(lease("d", 4, Some("b"), -2_500)),
            Err(Some(NOW + 1)),
        ),
        (
            "b's ran out, grace over",
            Some(lease("d", 4, Some("b"), -2_501)),
            Ok(Claim::Expired {
                epoch: 4,
                holder: "b".into(),
            }),
        ),
        (
            "mine, not acted on",
            Some(lease("d", 4, Some("a"), 5_000)),
            Ok(Claim::Stale { epoch: 4 }),
        ),
    ];
    for (what, row, want) in table {
        assert_eq!(claim(row.as_ref(), "a", NOW, grace), want, "{what}");
    }
}

#[test]
fn three_hosts_take_two_of_six_each_and_prefer_different_ones() {
    let all = ["d1", "d2", "d3", "d4", "d5", "d6"];
    let hosts = vec![
        host("a", 0, false),
        host("b", 0, false),
        host("c", 0, false),
    ];
    let v = view(hosts, vec![]);
    let mut taken = BTreeSet::new();
    for h in ["a", "b", "c"] {
        let p = plan(&v, &mine(h, &all, &[]), &TIMING);
        assert_eq!(p.acquire.len(), 2, "{h}: {p:?}");
        assert!(p.acquire.iter().all(|(_, c)| *c == Claim::New));
        assert!(p.shed.is_empty());
        taken.extend(names(&p.acquire).into_iter().map(str::to_owned));
    }
    // Rendezvous ranks spread the first reach (the CAS settles the rest).
    assert!(taken.len() >= 4, "{taken:?}");
}

#[test]
fn a_host_fills_its_share_and_waits_for_leases_still_held() {
    let all = ["d1", "d2", "d3", "d4"];
    let leases = vec![
        lease("d1", 1, Some("b"), 10_000),
        lease("d2", 1, Some("b"), -5_000),
        lease("d3", 2, None, 0),
    ];
    let v = view(vec![host("b", 0, false)], leases);
    let p = plan(&v, &mine("a", &all, &[]), &TIMING);
    // Share 2: of the claimable d2 (expired), d3 (released), d4 (new).
    assert_eq!(p.acquire.len(), 2, "{p:?}");
    assert_eq!(p.wake_ms, None, "the share is full: nothing to wait for");
    let p = plan(&v, &mine("a", &all, &["d4"]), &TIMING);
    assert_eq!(p.acquire.len(), 1, "{p:?}");

    // Alone in its share with d1 still held by b: it wakes for d1's takeover.
    let v = view(vec![], vec![lease("d1", 1, Some("b"), 10_000)]);
    let p = plan(&v, &mine("a", &["d1"], &[]), &TIMING);
    assert!(p.acquire.is_empty());
    assert_eq!(p.wake_ms, Some(NOW + 12_501));
}

#[test]
fn cooldown_busy_and_stopping_keep_a_host_off() {
    let all = ["d1"];
    let v = view(vec![], vec![lease("d1", 3, None, 0)]);
    let mut m = mine("a", &all, &[]);
    m.cooldown.insert("d1".into(), NOW + 1_000);
    let p = plan(&v, &m, &TIMING);
    assert!(p.acquire.is_empty());
    assert_eq!(p.wake_ms, Some(NOW + 1_000), "wakes when the cooldown ends");
    m.cooldown.insert("d1".into(), NOW);
    assert_eq!(plan(&v, &m, &TIMING).acquire.len(), 1, "cooldown over");

    let mut m = mine("a", &all, &[]);
    m.busy.insert("d1".into());
    assert!(
        plan(&v, &m, &TIMING).acquire.is_empty(),
        "its old task still ends"
    );

    let mut m = mine("a", &all, &[]);
    m.stopping = true;
    assert_eq!(
        plan(&v, &m, &TIMING),
        Plan::default(),
        "a stopping host takes nothing"
    );
}

#[test]
fn a_hand_off_is_taken_above_the_share_and_through_the_cooldown() {
    let all = ["d1", "d2"];
    let v = view(
        vec![host("b", 0, false)],
        vec![LeaseRow {
            reserved_for: Some("a".into()),
            ..lease("d2", 5, None, 10_000)
        }],
    );
    let mut m = mine("a", &all, &["d1"]);
    m.cooldown.insert("d2".into(), NOW + 60_000);
    let p = plan(&v, &m, &TIMING);
    assert_eq!(
        p.acquire,
        vec![("d2".to_owned(), Claim::Released { epoch: 5 })]
    );
    // b may not take it meanwhile.
    let p = plan(&v, &mine("b", &all, &[]), &TIMING);
    assert!(names(&p.acquire).iter().all(|d| *d != "d2"), "{p:?}");
}

#[test]
fn above_its_share_a_host_sheds_what_others_have_room_for() {
    let all = ["d1", "d2", "d3", "d4", "d5", "d6"];
    let held = vec![
        lease("d1", 1, Some("a"), 10_000),
        lease("d2", 1, Some("a"), 10_000),
        lease("d3", 1, Some("a"), 10_000),
        lease("d4", 1, Some("a"), 10_000),
        lease("d5", 1, Some("b"), 10_000),
        lease("d6", 1, Some("b"), 10_000),
    ];
    let table = [
        // (live hosts besides a, shed count)
        (vec![host("b", 0, false)], 1),
        (vec![host("b", 0, false), host("c", 0, false)], 2),
        (vec![host("b", 0, false), host("c", 90_000, false)], 1),
        (vec![], 0),
    ];
    for (hosts, want) in table {
        let n = hosts.len();
        let v = view(hosts, held.clone());
        let p = plan(&v, &mine("a", &all, &["d1", "d2", "d3", "d4"]), &TIMING);
        assert_eq!(p.shed.len(), want, "{n} other hosts: {p:?}");
        assert!(p.acquire.is_empty());
    }
    // Never one taken within the cooldown.
    let v = view(vec![host("b", 0, false)], held);
    let mut m = mine("a", &all, &["d1", "d2", "d3", "d4"]);
    for t in m.held.values_mut() {
        *t = NOW - 1_000;
    }
    assert!(plan(&v, &m, &TIMING).shed.is_empty());
}

#[test]
fn a_renewal_loses_what_it_did_not_renew() {
    let held = vec![
        ("a".to_owned(), 1),
        ("b".to_owned(), 4),
        ("c".to_owned(), 2),
    ];
    let renewed = vec![("a".to_owned(), 1), ("b".to_owned(), 5)];
    assert_eq!(lost(&held, &renewed), vec!["b".to_owned(), "c".to_owned()]);
    assert!(lost(&held, &held).is_empty());
}

#[test]
fn ranks_differ_by_host_and_are_stable() {
    assert_eq!(rank("a", "d1"), rank("a", "d1"));
    assert_ne!(rank("a", "d1"), rank("b", "d1"));
    assert_ne!(
        rank("ab", "c"),
        rank("a", "bc"),
        "the separator keeps them apart"
    );
    assert_eq!(
        [Claim::New.how(), Claim::Released { epoch: 1 }.how()],
        ["unowned", "released"]
    );
}

#[test]
fn a_drained_host_takes_nothing_hands_everything_off_and_counts_for_no_share() {
    let ds = ["d1", "d2", "d3", "d4"];
    // a holds two it took a moment ago (within the cooldown): drained, it
    // hands both off anyway, and takes neither the free ones nor a hand-off.
    let mut a = mine("a", &ds, &["d1", "d2"]);
    a.held.insert("d1".into(), NOW - 10);
    let mut handed = lease("d3", 4, None, 5_000);
    handed.reserved_for = Some("a".into());
    let v = view(
        vec![drained("a"), host("b", 0, false)],
        vec![
            lease("d1", 1, Some("a"), 9_000),
            lease("d2", 1, Some("a"), 9_000),
            handed,
        ],
    );
    let p = plan(&v, &a, &TIMING);
    assert!(p.acquire.is_empty(), "{p:?}");
    let mut shed = p.shed.clone();
    shed.sort();
    assert_eq!(shed, ["d1", "d2"]);
    // b alone is live: its share is all four.
    assert_eq!(live_hosts(&v, "b", false, &TIMING), ["b"]);
    let b = mine("b", &ds, &[]);
    let v = view(vec![drained("a"), host("b", 0, false)], vec![]);
    assert_eq!(names(&plan(&v, &b, &TIMING).acquire), ds);
    assert!(paused(&v, "a") && !paused(&v, "b"));
}

#[test]
fn capacity_weighs_the_share_and_a_joining_host_gets_it_a_few_at_a_time() {
    let w = [("a", 1), ("b", 1), ("c", 1), ("d", 2)];
    assert_eq!(weighted_share(10, &w, "a"), 2);
    assert_eq!(weighted_share(10, &w, "d"), 4);
    assert_eq!(weighted_share(10, &w, "zz"), 0);
    // a holds five, long held; d just joined with capacity 2: a's share
    // is 2, but it hands off at most SHED_PER_ROUND a round.
    let ds: Vec<String> = (1..=10).map(|i| format!("d{i}")).collect();
    let refs: Vec<&str> = ds.iter().map(String::as_str).collect();
    let a = mine("a", &refs, &refs[..5]);
    let mut big = host("d", 0, false);
    big.capacity = 2;
    let leases: Vec<LeaseRow> = refs[..5]
        .iter()
        .map(|d| lease(d, 1, Some("a"), 9_000))
        .chain(refs[5..].iter().map(|d| lease(d, 1, Some("b"), 9_000)))
        .collect();
    let v = view(
        vec![
            host("a", 0, false),
            host("b", 0, false),
            host("c", 0, false),
            big,
        ],
        leases,
    );
    let p = plan(&v, &a, &TIMING);
    assert_eq!(p.shed.len(), SHED_PER_ROUND, "{p:?}");
    // Each released for the host with room: d (b holds five too, so it
    // has none; c holds none, and has two).
    assert!(
        p.shed
            .iter()
            .all(|s| p.to.get(s).is_some_and(|h| h == "d" || h == "c")),
        "{p:?}"
    );
    assert_eq!(p.to.get(&p.shed[0]).map(String::as_str), Some("d"));
    // Two already on their way count: nothing more this round.
    let mut busy = a.clone();
    busy.leaving = p.shed.iter().cloned().collect();
    assert!(plan(&v, &busy, &TIMING).shed.is_empty());
    // Taken a moment ago: nothing moves twice within the cooldown.
    let mut fresh = a.clone();
    for t in fresh.held.values_mut() {
        *t = NOW - 10;
    }
    assert!(plan(&v, &fresh, &TIMING).shed.is_empty());
}

#[test]
fn hosts_limit_where_a_deployment_runs_even_beyond_the_share() {
    let mut allowed = BTreeMap::new();
    allowed.insert("pinned".to_owned(), vec!["c".to_owned()]);
    let ds = ["pinned", "x1", "x2"];
    // a may not take it, whatever its room.
    let mut a = mine("a", &ds, &[]);
    a.allowed = allowed.clone();
    let v = view(vec![host("a", 0, false), host("c", 0, false)], vec![]);
    assert!(!names(&plan(&v, &a, &TIMING).acquire).contains(&"pinned"));
    // c holds its share already, and still takes it: no one else may.
    let mut c = mine("c", &ds, &["x1", "x2"]);
    c.allowed = allowed.clone();
    let v = view(
        vec![host("a", 0, false), host("c", 0, false)],
        vec![
            lease("x1", 1, Some("c"), 9_000),
            lease("x2", 1, Some("c"), 9_000),
        ],
    );
    assert_eq!(names(&plan(&v, &c, &TIMING).acquire), ["pinned"]);
    // Holding one it may no longer run (a reload moved it), it hands it off.
    let mut a = mine("a", &ds, &["pinned"]);
    a.allowed = allowed.clone();
    assert_eq!(plan(&v, &a, &TIMING).shed, ["pinned"]);
    // Above its share, c never sheds the pinned one.
    let mut c = mine("c", &ds, &["pinned", "x1", "x2"]);
    c.allowed = allowed;
    assert!(!plan(&v, &c, &TIMING).shed.contains(&"pinned".to_owned()));
}

#[test]
fn placement_says_why_a_deployment_is_where_it_is_or_nowhere() {
    let pinned = vec!["c".to_owned()];
    let v = view(vec![host("a", 0, false), host("c", 0, false)], vec![]);
    assert_eq!(
        placement(&v, "p", &pinned, Some("c"), &TIMING),
        "on c, one of its hosts (c)"
    );
    assert_eq!(
        placement(&v, "p", &[], Some("a"), &TIMING),
        "on a: its share of the fleet (any host may run p)"
    );
    assert_eq!(
        placement(&v, "p", &pinned, None, &TIMING),
        "runs nowhere yet: free, c takes it"
    );
    // c's heartbeat is older than the TTL: gone.
    let v = view(vec![host("a", 0, false), host("c", 20_000, false)], vec![]);
    assert_eq!(
        placement(&v, "p", &pinned, None, &TIMING),
        "runs nowhere: none of its hosts (c) is live; it waits for one"
    );
    let v = view(vec![host("a", 0, false), drained("c")], vec![]);
    assert_eq!(
        placement(&v, "p", &pinned, None, &TIMING),
        "runs nowhere: none of its hosts (c) is live; drained: c; it waits for one"
    );
}
