//! Nothing is lost (DESIGN §6), proved by counting: a thousand mail items
//! sent to a demo deployment while it is recycled by operators and by
//! policy and its child SIGKILLed at random moments, and a run in which the
//! supervisor itself is SIGKILLed and restarted on the same state dir.
//! Every accepted id must end done exactly once, with the inbox and
//! processing empty and the journal intact.
//!
//! The chaos is driven by a seeded generator, so a failing run's schedule
//! can be replayed from the seed printed with it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::Value;
use wfhost_tests::{
    LONG, Supervisor, alive, client, demo, deployment, describe, mail_counts, poll, query, signal,
    stderr, stdout, wait_for,
};

const SEED: u64 = 0x5eed_2024_0005;

/// A demo deployment with the given step times, a short uptime bound, and
/// restarts that never give up (SIGKILLs are expected here).
fn soak_body(step_ms: u32, approve_ms: u32) -> String {
    deployment(
        "soak",
        &demo(&[
            "--step-ms",
            &step_ms.to_string(),
            "--approve-ms",
            &approve_ms.to_string(),
        ]),
        "recycle = { max_uptime = \"150ms\" }\n\
         restart = { backoff_initial = \"10ms\", backoff_max = \"100ms\", max_restarts = 10000, period = \"60s\" }\n\
         drain_timeout = \"2s\"\n\
         drain_deadline = \"3s\"\n\
         kill_timeout = \"2s\"",
    )
}

const SETTINGS: &str = "policy_interval = \"100ms\"";

/// xorshift64*: a tiny deterministic generator (no new dependency).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// The id `wfhost send` printed, if it succeeded.
fn sent_id(out: &Output) -> Option<u64> {
    if !out.status.success() {
        return None;
    }
    stdout(out)
        .trim()
        .strip_prefix("accepted mail ")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Every row of the `mail` table: `(id, state, deliveries)`.
fn db_rows(state_dir: &Path) -> Vec<(u64, String, u64)> {
    let rows = query(
        &state_dir.join("wfhost.db"),
        "SELECT id, state, deliveries FROM mail ORDER BY id",
    );
    serde_json::from_value(Value::Array(rows)).expect("rows JSON")
}

/// `mail_done` events per id once there are at least `n` ids, or whatever
/// there is after `patience` (the event log is written just behind the
/// mail table).
fn mail_done_events_settled(sup: &Supervisor, n: usize, patience: Duration) -> BTreeMap<u64, u32> {
    poll(patience, Duration::from_millis(50), || {
        let mut per_id = BTreeMap::new();
        for e in sup.events_so_far() {
            if e["kind"] == "mail_done" && e["deployment"] == "soak" {
                *per_id
                    .entry(e["body"]["id"].as_u64().expect("mail id"))
                    .or_default() += 1;
            }
        }
        if per_id.len() >= n {
            Ok(per_id)
        } else {
            Err(per_id)
        }
    })
    .unwrap_or_else(|per_id| per_id)
}

/// How often the demo child printed "mail N: received" (redeliveries show
/// up as repeats).
fn received_lines(sup: &Supervisor) -> usize {
    sup.plain_log()
        .lines()
        .filter(|l| l.contains("mail ") && l.contains(": received \""))
        .count()
}

/// Sends `payloads` one by one, retrying a payload whose send failed (the
/// supervisor may be gone for a moment); returns the accepted ids and how
/// many sends failed. A failed send may still have been accepted, so its
/// retry can add mail no id was printed for: that is checked separately.
fn sender(config: PathBuf, payloads: Vec<String>, retry: bool) -> (Vec<u64>, Vec<String>) {
    let mut ids = Vec::with_capacity(payloads.len());
    let mut failures = Vec::new();
    for p in payloads {
        loop {
            let out = client(&config, &["send", "soak", &p]);
            match sent_id(&out) {
                Some(id) => {
                    ids.push(id);
                    break;
                }
                None => {
                    failures.push(describe(&out));
                    assert!(retry, "send of {p} failed: {}", describe(&out));
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }
    (ids, failures)
}

/// `wfhost recycle soak`, which waits for the new child: killed and
/// reported if it takes longer than `limit` (a recycle must never hang).
fn recycle_within(config: &Path, limit: Duration) -> Output {
    let mut child = Command::new(wfhost_tests::bin("wfhost"))
        .args(["recycle", "soak", "--reason", "soak", "--config"])
        .arg(config)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn wfhost recycle");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!("wfhost recycle hung for {limit:?}: {}", describe(&out));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("wait for wfhost recycle")
}

/// Waits until the control socket answers (after a restart the stale
/// socket file of the killed supervisor may still be there).
fn wait_reachable(config: &Path) {
    wait_for("the supervisor to answer", LONG, || {
        client(config, &["status", "--json"])
            .status
            .success()
            .then_some(())
    });
}

#[test]
fn a_thousand_mail_items_survive_recycles_and_child_kills() {
    const ITEMS: usize = 1000;
    const SENDERS: usize = 2;
    let started = Instant::now();
    let sup = Supervisor::start_with_settings(SETTINGS, &soak_body(1, 1));
    sup.ready_pid("soak", LONG);
    let config = sup.config().to_path_buf();

    let done_sending = Arc::new(AtomicBool::new(false));
    let senders: Vec<_> = (0..SENDERS)
        .map(|t| {
            let config = config.clone();
            let payloads = (0..ITEMS / SENDERS)
                .map(|i| format!("item-{t}-{i}"))
                .collect();
            std::thread::spawn(move || sender(config, payloads, false))
        })
        .collect();
    let watcher = {
        let done = done_sending.clone();
        let handles: Vec<_> = senders;
        std::thread::spawn(move || {
            // Joined before judged: a failed sender still ends the chaos.
            let results: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
            done.store(true, Ordering::SeqCst);
            results
        })
    };

    // Chaos until every item is sent.
    let mut rng = Rng(SEED);
    let (mut kills, mut asked, mut recycled) = (0u32, 0u32, 0u32);
    let mut refusals: BTreeMap<String, u32> = BTreeMap::new();
    while !done_sending.load(Ordering::SeqCst) {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the senders did not finish"
        );
        std::thread::sleep(Duration::from_millis(10 + rng.below(150)));
        match rng.below(100) {
            0..35 => {
                asked += 1;
                let out = recycle_within(&config, LONG);
                if out.status.success() {
                    recycled += 1;
                } else {
                    // A recycle asked for while the child restarts or stops
                    // may be refused; that is not a loss.
                    let why = stderr(&out);
                    let key = why.split(';').next().unwrap_or("").trim().to_owned();
                    *refusals.entry(key).or_default() += 1;
                }
            }
            35..70 => {
                if let Some(pid) = sup.deployment("soak")["pid"].as_u64() {
                    signal(pid as u32, Signal::SIGKILL);
                    kills += 1;
                }
            }
            _ => {}
        }
    }
    let results = watcher.join().expect("watcher thread");
    let mut accepted: Vec<u64> = results
        .into_iter()
        .flat_map(|r| r.expect("sender thread").0)
        .collect();
    accepted.sort_unstable();
    accepted.dedup();
    assert_eq!(accepted.len(), ITEMS, "every send printed a distinct id");

    let d = sup.wait_deployment("soak", "every item done", Duration::from_secs(60), |d| {
        mail_counts(d) == (0, 0, ITEMS as u64)
    });
    // Once idle, the uptime bound recycles it (policy) in any case.
    let d = if d["recycles"]["policy"].as_u64().unwrap_or(0) == 0 {
        sup.wait_deployment("soak", "a policy recycle", LONG, |d| {
            d["recycles"]["policy"].as_u64().unwrap_or(0) >= 1
        })
    } else {
        d
    };

    // Counted three ways: status, the mail table, the event log.
    let rows = db_rows(&sup.dir().join("state"));
    let ids: Vec<u64> = rows.iter().map(|r| r.0).collect();
    assert_eq!(ids, accepted, "the store holds exactly the accepted mail");
    let not_done: Vec<_> = rows.iter().filter(|r| r.1 != "done").collect();
    assert!(not_done.is_empty(), "not done: {not_done:?}");
    let deliveries: u64 = rows.iter().map(|r| r.2).sum();
    let events = mail_done_events_settled(&sup, ITEMS, LONG);
    let wrong: Vec<_> = accepted
        .iter()
        .filter(|id| events.get(id) != Some(&1))
        .map(|id| (id, events.get(id).copied().unwrap_or(0)))
        .collect();
    assert!(wrong.is_empty(), "ids not done exactly once: {wrong:?}");
    assert_eq!(events.len(), ITEMS, "no mail_done for an unknown id");

    let out = sup.client(&["journal", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        kills > 0 && recycled > 0,
        "kills {kills}, recycles {recycled}"
    );

    let r = &d["recycles"];
    eprintln!(
        "soak (seed {SEED:#x}): {ITEMS} items done exactly once in {:.1} s; \
         recycles: policy {}, operator {} ({recycled} of {asked} asked succeeded, refused: {refusals:?}), self {}; \
         child SIGKILLs {kills}, restarts {}; deliveries {deliveries} ({} redelivered), child received-lines {}",
        started.elapsed().as_secs_f64(),
        r["policy"],
        r["operator"],
        r["self"],
        d["restarts"],
        deliveries - ITEMS as u64,
        received_lines(&sup),
    );
}

/// What a run with supervisor kills left behind.
struct KilledRun {
    /// Ids `wfhost send` printed.
    accepted: Vec<u64>,
    /// Sends that failed while the supervisor was down (then retried).
    failed_sends: usize,
    /// `(id, state, deliveries)` of every stored item, all done.
    rows: Vec<(u64, String, u64)>,
    /// `mail_done` events per id.
    events: BTreeMap<u64, u32>,
    /// Items in the child's hands at each kill.
    in_flight_at_kill: Vec<u64>,
    /// The last supervisor, still running.
    sup: Supervisor,
}

/// Sends `items` mail items while SIGKILLing the supervisor once `done`
/// passes each of `kill_at` (with mail in processing) and restarting it on
/// the same state dir; returns once every stored item is done.
fn run_with_supervisor_kills(items: usize, kill_at: &[u64]) -> KilledRun {
    // approve (20 ms) is slower than sending: a backlog builds, so the
    // child has mail in its hands when the supervisor is killed.
    let mut sup = Supervisor::start_with_settings(SETTINGS, &soak_body(1, 20));
    sup.ready_pid("soak", LONG);
    let config = sup.config().to_path_buf();
    let state_dir = sup.dir().join("state");

    let sent_all = Arc::new(AtomicBool::new(false));
    let sending = {
        let (config, sent_all) = (config.clone(), sent_all.clone());
        let payloads = (0..items).map(|i| format!("item-{i}")).collect();
        std::thread::spawn(move || {
            let r = sender(config, payloads, true);
            sent_all.store(true, Ordering::SeqCst);
            r
        })
    };

    let mut in_flight_at_kill = Vec::new();
    for &threshold in kill_at {
        let d = sup.wait_deployment("soak", "mail flowing", LONG, |d| {
            let (_, processing, done) = mail_counts(d);
            done >= threshold && (processing > 0 || sent_all.load(Ordering::SeqCst))
        });
        let child = d["pid"].as_u64();
        in_flight_at_kill.push(mail_counts(&d).1);
        let (dir, config_path) = sup.into_parts();
        // The dead supervisor's child dies with it (parent-death signal).
        if let Some(pid) = child {
            wait_for("the orphaned child to die", LONG, || {
                (!alive(pid as u32)).then_some(())
            });
        }
        sup = Supervisor::start_in(dir, config_path);
        wait_reachable(&config);
        sup.ready_pid("soak", LONG);
    }

    let (mut accepted, failures) = sending.join().expect("sender thread");
    accepted.sort_unstable();
    let rows = wait_for("every stored item done", Duration::from_secs(60), || {
        let rows = db_rows(&state_dir);
        rows.iter().all(|r| r.1 == "done").then_some(rows)
    });
    let d = sup.wait_deployment("soak", "empty inbox and processing", LONG, |d| {
        let (inbox, processing, _) = mail_counts(d);
        inbox == 0 && processing == 0
    });
    assert_eq!(mail_counts(&d).2, rows.len() as u64, "{d}");
    let events = mail_done_events_settled(&sup, rows.len(), Duration::from_secs(5));
    KilledRun {
        accepted,
        failed_sends: failures.len(),
        rows,
        events,
        in_flight_at_kill,
        sup,
    }
}

#[test]
fn nothing_is_lost_when_the_supervisor_itself_is_killed_mid_flow() {
    const ITEMS: usize = 300;
    let started = Instant::now();
    let run = run_with_supervisor_kills(ITEMS, &[80, 180]);

    // Every accepted id is done exactly once in the store; a send that
    // failed while the supervisor was down may still have been stored
    // (its reply was lost), and then it is done too.
    let stored: Vec<u64> = run.rows.iter().map(|r| r.0).collect();
    let missing: Vec<_> = run
        .accepted
        .iter()
        .filter(|id| stored.binary_search(id).is_err())
        .collect();
    assert!(missing.is_empty(), "accepted but not stored: {missing:?}");
    assert_eq!(run.accepted.len(), ITEMS);
    assert!(
        stored.len() <= ITEMS + run.failed_sends,
        "{} stored, {ITEMS} accepted, {} failed sends",
        stored.len(),
        run.failed_sends
    );
    // The event log never reports an item done twice.
    let twice: Vec<_> = run.events.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "mail_done more than once: {twice:?}");
    assert!(
        run.events.keys().all(|id| stored.binary_search(id).is_ok()),
        "mail_done for an id never stored"
    );
    let out = run.sup.client(&["journal", "verify"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));

    // The ack and its event share one transaction: every done item has one.
    let without_event: Vec<_> = stored
        .iter()
        .filter(|id| !run.events.contains_key(id))
        .collect();
    assert!(
        without_event.is_empty(),
        "done without a mail_done event: {without_event:?}"
    );
    let deliveries: u64 = run.rows.iter().map(|r| r.2).sum();
    eprintln!(
        "supervisor SIGKILLed {} times (items in processing at the kills: {:?}): \
         {} items stored and done, {ITEMS} accepted with an id, {} sends failed while it was down; \
         deliveries {deliveries}; done ids without a mail_done event: {without_event:?}; {:.1} s",
        run.in_flight_at_kill.len(),
        run.in_flight_at_kill,
        stored.len(),
        run.failed_sends,
        started.elapsed().as_secs_f64()
    );
}

/// Polls the store from outside and SIGKILLs the supervisor at the first
/// moment the mail table holds more done items than the event log holds
/// `mail_done` events (one read snapshot per check); prints `killed D E`
/// or `none` after the timeout.
const KILL_IN_THE_GAP: &str = "import os, signal, sqlite3, sys, time
db, pid, deadline = sys.argv[1], int(sys.argv[2]), time.time() + float(sys.argv[3])
c = None
while time.time() < deadline:
    try:
        if c is None:
            c = sqlite3.connect(db, timeout=0.01)
        d, e = c.execute(\"SELECT (SELECT count(*) FROM mail WHERE state = 'done'), (SELECT count(*) FROM events WHERE kind = 'mail_done')\").fetchone()
    except sqlite3.Error:
        time.sleep(0.01)
        continue
    if d > e:
        os.kill(pid, signal.SIGKILL)
        print('killed', d, e)
        sys.exit(0)
    time.sleep(0.0002)
print('none')
";

#[test]
fn every_done_item_keeps_its_mail_done_event_across_a_supervisor_kill() {
    let sup = Supervisor::start_with_settings(SETTINGS, &soak_body(1, 1));
    let child = sup.ready_pid("soak", LONG);
    let config = sup.config().to_path_buf();
    let state_dir = sup.dir().join("state");
    let watcher = Command::new("python3")
        .args(["-c", KILL_IN_THE_GAP])
        .arg(state_dir.join("wfhost.db"))
        .arg(sup.pid().to_string())
        .arg("20")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn python3");
    let sending = {
        let config = config.clone();
        let payloads = (0..300).map(|i| format!("item-{i}")).collect();
        std::thread::spawn(move || sender(config, payloads, true))
    };
    let out = watcher.wait_with_output().expect("python3 watcher");
    let verdict = stdout(&out);
    let sup = if verdict.starts_with("killed") {
        let (dir, config_path) = sup.into_parts();
        wait_for("the orphaned child to die", LONG, || {
            (!alive(child)).then_some(())
        });
        let sup = Supervisor::start_in(dir, config_path);
        wait_reachable(&config);
        sup
    } else {
        sup
    };
    let (accepted, _) = sending.join().expect("sender thread");
    let rows = wait_for("every stored item done", Duration::from_secs(60), || {
        let rows = db_rows(&state_dir);
        (rows.len() >= accepted.len() && rows.iter().all(|r| r.1 == "done")).then_some(rows)
    });
    sup.wait_deployment("soak", "empty inbox and processing", LONG, |d| {
        let (inbox, processing, _) = mail_counts(d);
        inbox == 0 && processing == 0
    });
    let events = mail_done_events_settled(&sup, rows.len(), Duration::from_secs(5));
    let wrong: Vec<_> = rows
        .iter()
        .map(|r| r.0)
        .filter(|id| events.get(id) != Some(&1))
        .collect();
    assert!(
        wrong.is_empty(),
        "supervisor {}: done in the store without exactly one mail_done event: {wrong:?}",
        verdict.trim()
    );
}
