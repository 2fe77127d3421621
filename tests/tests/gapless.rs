//! Recycling without a gap (issue 17): `recycle.overlap` starts the new
//! child and waits for its Ready before the old one drains, so mail keeps
//! flowing through a recycle; `replicas = N` runs N children on one inbox,
//! recycled one at a time, each restarted alone; scaling on reload leaves
//! the others alone. Each test drives the real supervisor and the
//! `worker` test child (5 ms per item, a 2 s wind-down on a drain).

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use wfhost_tests::{
    LONG, Supervisor, bin, control, deployment, describe, stderr, stdout, testchild, wait_for,
    write_config,
};

/// The worker's settings, and drains long enough for its wind-down.
const WORKER: &str = "env = { WFH_WORK_MS = \"5\", WFH_DRAIN_MS = \"2000\" }\ndrain_timeout = \"10s\"\ndrain_deadline = \"15s\"";

/// What the workers printed: for each mail id, who acked it and when.
fn acks(sup: &Supervisor) -> BTreeMap<u64, Vec<(u32, u64)>> {
    let mut acks: BTreeMap<u64, Vec<(u32, u64)>> = BTreeMap::new();
    for line in sup.plain_log().lines() {
        let Some(at) = line.find("wfh-testchild worker id=") else {
            continue;
        };
        let field = |name: &str| -> Option<u64> {
            line[at..]
                .split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .and_then(|v| v.parse().ok())
        };
        if let (Some(id), Some(pid), Some(ms)) = (field("id="), field("pid="), field("at_ms=")) {
            acks.entry(id).or_default().push((pid as u32, ms));
        }
    }
    acks
}

/// The `mail_done` ids of the event log, with how often each is done.
fn done_counts(sup: &Supervisor) -> BTreeMap<u64, usize> {
    let mut done = BTreeMap::new();
    for e in sup.events() {
        if e["kind"] == "mail_done"
            && let Some(id) = e["body"]["id"].as_u64()
        {
            *done.entry(id).or_insert(0) += 1;
        }
    }
    done
}

/// The live children of `d`'s replicas.
fn live(d: &Value) -> Vec<(u64, u32, String, String)> {
    d["replicas"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| {
            Some((
                r["index"].as_u64()?,
                r["pid"].as_u64()? as u32,
                r["role"].as_str()?.to_owned(),
                r["state"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// `wfhost recycle ARGS` in the background.
fn recycle(sup: &Supervisor, target: &str) -> std::process::Child {
    Command::new(bin("wfhost"))
        .args(["recycle", target, "--config"])
        .arg(sup.config())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wfhost recycle")
}

struct Run {
    /// The longest time between two consecutive acks while recycles ran.
    largest_gap: Duration,
    /// The most children alive at once (sampled every 20 ms).
    most_alive: usize,
}

/// 1,000 items at a steady rate while 10 recycles run one after another.
fn recycles_under_load(overlap: bool) -> Run {
    let sup = Supervisor::start(&deployment(
        "steady",
        &testchild("worker"),
        &format!("{WORKER}\nrecycle = {{ overlap = {overlap} }}"),
    ));
    sup.ready_pid("steady", LONG);
    let socket = sup.socket();
    let stop = Arc::new(AtomicBool::new(false));
    let most_alive = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (stop, most_alive, config) =
            (stop.clone(), most_alive.clone(), sup.config().to_owned());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let out = wfhost_tests::client(&config, &["status", "--json"]);
                if let Ok(v) = serde_json::from_slice::<Value>(&out.stdout)
                    && let Some(d) = v["deployments"].as_array().and_then(|a| a.first())
                {
                    most_alive.fetch_max(live(d).len(), Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let sender = std::thread::spawn(move || {
        let mut ids = Vec::with_capacity(1000);
        let start = Instant::now();
        for i in 0..1000u32 {
            let id = control::send(&socket, "steady", format!("m{i}").as_bytes())
                .unwrap_or_else(|e| panic!("item {i}: {e}"));
            ids.push(id);
            let next = start + Duration::from_millis(20) * (i + 1);
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        ids
    });
    std::thread::sleep(Duration::from_millis(500));
    let recycles_from = acks(&sup).values().flatten().map(|(_, ms)| *ms).max();
    for n in 0..10 {
        let out = recycle(&sup, "steady").wait_with_output().expect("recycle");
        assert_eq!(
            out.status.code(),
            Some(0),
            "recycle {n}: {}",
            describe(&out)
        );
    }
    let ids = sender.join().expect("sender");
    stop.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    sup.wait_deployment("steady", "all 1000 done", LONG * 2, |d| {
        d["mail"]["done"] == 1000
    });

    let done = done_counts(&sup);
    let sent: BTreeSet<u64> = ids.iter().copied().collect();
    assert_eq!(sent.len(), 1000);
    assert_eq!(
        done.keys().copied().collect::<BTreeSet<_>>(),
        sent,
        "every id done"
    );
    assert!(
        done.values().all(|&n| n == 1),
        "each exactly once: {done:?}"
    );
    let recycled = sup
        .journal()
        .into_iter()
        .filter(|r| r["kind"] == "recycled")
        .count();
    assert_eq!(recycled, 10);

    // Gaps between consecutive acks from the first recycle on.
    let mut times: Vec<u64> = acks(&sup)
        .values()
        .flatten()
        .map(|(_, ms)| *ms)
        .filter(|ms| recycles_from.is_none_or(|from| *ms >= from))
        .collect();
    times.sort_unstable();
    let largest = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    Run {
        largest_gap: Duration::from_millis(largest),
        most_alive: most_alive.load(Ordering::Relaxed),
    }
}

#[test]
fn overlapping_recycles_hold_no_mail_back_and_lose_none() {
    let with = recycles_under_load(true);
    let without = recycles_under_load(false);
    println!(
        "largest gap between consecutive acks during 10 recycles (items every 20 ms, 5 ms each, 2 s drains): \
         with overlap {:?} ({} children at most), without {:?} ({} at most)",
        with.largest_gap, with.most_alive, without.largest_gap, without.most_alive
    );
    assert!(with.most_alive <= 2, "never more than two children");
    assert!(without.most_alive <= 1, "break before make: one child");
    // Without overlap each drain holds mail back for its whole wind-down;
    // with it, the new child serves while the old one winds down.
    assert!(
        without.largest_gap >= Duration::from_millis(1900),
        "{:?}",
        without.largest_gap
    );
    assert!(
        with.largest_gap < Duration::from_millis(500),
        "{:?}",
        with.largest_gap
    );
}

#[test]
fn a_successor_that_never_becomes_ready_leaves_the_old_child_serving() {
    let dir = wfhost_tests::TempDir::new();
    let broken = dir.join("broken");
    let command = format!(
        "[\"/bin/sh\", \"-c\", \"if [ -e {} ]; then exec {{bin}}/wfh-testchild no-ready; else exec {{bin}}/wfh-testchild worker; fi\"]",
        broken.display()
    );
    let sup = Supervisor::start(&deployment(
        "careful",
        &command,
        &format!("{WORKER}\nready_timeout = \"1s\"\nrecycle = {{ overlap = true }}"),
    ));
    let pid = sup.ready_pid("careful", LONG);
    std::fs::write(&broken, b"").expect("mark");
    let out = recycle(&sup, "careful")
        .wait_with_output()
        .expect("recycle");
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(
        stderr(&out).contains("never became ready"),
        "{}",
        describe(&out)
    );
    let d = sup.wait_deployment("careful", "one serving child again", LONG, |d| {
        live(d).len() == 1
    });
    assert_eq!(
        d["pid"].as_u64(),
        Some(u64::from(pid)),
        "the old child serves: {d}"
    );
    assert_eq!(d["state"], "ready", "{d}");
    let id = control::send(&sup.socket(), "careful", b"after").expect("send");
    wait_for("the old child to do it", LONG, || {
        acks(&sup)
            .get(&id)
            .filter(|a| a.iter().any(|(p, _)| *p == pid))
            .map(|_| ())
    });
    assert!(
        sup.journal().iter().all(|r| r["kind"] != "recycled"),
        "a refused recycle is no recycle"
    );
}

#[test]
fn three_replicas_share_the_inbox_restart_alone_roll_and_scale_down() {
    let body = |replicas: u32| {
        deployment(
            "pool",
            &testchild("worker"),
            &format!("{WORKER}\nreplicas = {replicas}"),
        )
    };
    let sup = Supervisor::start(&body(3));
    let d = sup.wait_deployment("pool", "three replicas ready", LONG, |d| {
        live(d).iter().filter(|r| r.3 == "ready").count() == 3
    });
    let pids: Vec<u32> = live(&d).iter().map(|r| r.1).collect();
    let socket = sup.socket();

    // Mail is spread: every replica does a share.
    let first: Vec<u64> = (0..60)
        .map(|i| control::send(&socket, "pool", format!("a{i}").as_bytes()).expect("send"))
        .collect();
    sup.wait_deployment("pool", "60 done", LONG, |d| d["mail"]["done"] == 60);
    let by_pid = |ids: &[u64]| {
        let acks = acks(&sup);
        let mut n: BTreeMap<u32, usize> = BTreeMap::new();
        for id in ids {
            for (pid, _) in acks.get(id).into_iter().flatten() {
                *n.entry(*pid).or_default() += 1;
            }
        }
        n
    };
    let shares = by_pid(&first);
    println!("60 items over 3 replicas: {shares:?}");
    for pid in &pids {
        assert!(
            shares.get(pid).is_some_and(|&n| n >= 5),
            "{pid} did a share: {shares:?}"
        );
    }

    // A SIGKILL of one replica restarts only it.
    wfhost_tests::signal(pids[1], Signal::SIGKILL);
    let d = sup.wait_deployment("pool", "replica 2 replaced", LONG, |d| {
        let l = live(d);
        l.len() == 3 && l.iter().all(|r| r.3 == "ready") && !l.iter().any(|r| r.1 == pids[1])
    });
    let after: Vec<u32> = live(&d).iter().map(|r| r.1).collect();
    assert_eq!(
        (after[0], after[2]),
        (pids[0], pids[2]),
        "the others untouched: {d}"
    );
    assert_eq!(d["restarts"], 1, "{d}");

    // A rolling recycle keeps at least two serving, with mail flowing.
    let mut rolling = recycle(&sup, "pool");
    let sending = {
        let socket = socket.clone();
        std::thread::spawn(move || {
            (0..200)
                .map(|i| {
                    std::thread::sleep(Duration::from_millis(15));
                    control::send(&socket, "pool", format!("b{i}").as_bytes()).expect("send")
                })
                .collect::<Vec<u64>>()
        })
    };
    let mut least_serving = usize::MAX;
    let deadline = Instant::now() + LONG;
    let out = loop {
        let d = sup.deployment("pool");
        let serving = live(&d)
            .iter()
            .filter(|r| r.2 == "serving" && r.3 == "ready")
            .count();
        least_serving = least_serving.min(serving);
        if rolling.try_wait().expect("try_wait").is_some() {
            break rolling.wait_with_output().expect("recycle");
        }
        assert!(Instant::now() < deadline, "the rolling recycle never ended");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        stdout(&out).starts_with("recycled pool: pids "),
        "{}",
        stdout(&out)
    );
    println!("serving during the rolling recycle: at least {least_serving}");
    assert!(
        least_serving >= 2,
        "at least N - 1 = 2 serving: {least_serving}"
    );
    let second = sending.join().expect("sender");
    sup.wait_deployment("pool", "all 260 done", LONG, |d| d["mail"]["done"] == 260);
    let done = done_counts(&sup);
    for id in first.iter().chain(&second) {
        assert_eq!(done.get(id), Some(&1), "mail {id} done exactly once");
    }

    // One replica by name: only its child is replaced.
    let d = sup.deployment("pool");
    let before = live(&d);
    let out = recycle(&sup, "pool/2").wait_with_output().expect("recycle");
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let d = sup.deployment("pool");
    let now = live(&d);
    for (b, n) in before.iter().zip(&now) {
        assert_eq!(b.0, n.0);
        if b.0 == 2 {
            assert_ne!(b.1, n.1, "replica 2 replaced");
        } else {
            assert_eq!(b.1, n.1, "replica {} untouched", b.0);
        }
    }

    // Reload 3 -> 1 drains two and leaves the first alone.
    let keep = now.iter().find(|r| r.0 == 1).map(|r| r.1);
    let state = sup.dir().join("state");
    write_config(sup.config(), &state, &body(1));
    let out = sup.client(&["reload"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let d = sup.wait_deployment("pool", "one replica left", LONG, |d| live(d).len() == 1);
    assert_eq!(
        live(&d)[0].1,
        keep.expect("replica 1"),
        "replica 1 kept: {d}"
    );
}
