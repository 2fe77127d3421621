//! A fleet for black-box tests: one throwaway PostgreSQL server and
//! several real `wfhost supervise` processes (distinct `host_id`s and
//! state dirs) sharing it, each with the same mail-taking deployments of
//! `wfh-fleetchild`, which record which pid worked on which item when in
//! one file. Fleet tests take a lock for their whole run, so two never
//! load the machine at once (their timing is lease timing).

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::postgres::PgServer;
use crate::{LONG, Supervisor, TempDir, command, describe, ok, poll};

/// The lease timing of test fleets: short, and with room for a loaded
/// machine (a host self-fences 2.5 s after its last renewal began).
pub const TTL: Duration = Duration::from_secs(3);
/// How often test fleets renew.
pub const RENEW: Duration = Duration::from_millis(500);

/// One line a `wfh-fleetchild` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Work {
    /// The child.
    pub pid: u32,
    /// Its deployment.
    pub deployment: String,
    /// The mail item.
    pub id: u64,
    /// When it began (Unix ms).
    pub start_ms: u64,
    /// When it ended.
    pub end_ms: u64,
    /// `done`, or `cancelled:CAUSE`.
    pub outcome: String,
}

/// A running fleet, stopped (every supervisor and child killed, the
/// server stopped) when dropped.
pub struct Fleet {
    /// The hosts, in order (`h1`, `h2`, …); `None` once taken out.
    pub hosts: Vec<Option<Supervisor>>,
    /// The deployments every host runs.
    pub deployments: Vec<String>,
    /// The shared server.
    pub pg: PgServer,
    dir: TempDir,
    url: String,
    extra: String,
    /// Lines added to a deployment's table (e.g. `hosts = ["h3"]`), by id.
    pub deployment_extra: BTreeMap<String, String>,
    _lock: std::fs::File,
}

/// Serializes fleet tests across test processes.
fn lock() -> std::fs::File {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open("/tmp/wfhost-fleet-tests.lock")
        .expect("open the fleet tests' lock file");
    // SAFETY: flock on an open fd has no memory-safety preconditions.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock: {}", std::io::Error::last_os_error());
    file
}

impl Fleet {
    /// A server and `hosts` supervisors, each with `deployments`
    /// deployments `d1`…; `extra` lines go into `[defaults]`.
    pub fn start(hosts: usize, deployments: usize, extra: &str) -> Self {
        let lock = lock();
        let pg = PgServer::start();
        let url = pg.url("postgres");
        Self::on(pg, url, hosts, deployments, extra, lock)
    }

    /// Like [`Fleet::start`] on a server already running at `url`.
    pub fn on(
        pg: PgServer,
        url: String,
        hosts: usize,
        deployments: usize,
        extra: &str,
        lock: std::fs::File,
    ) -> Self {
        let mut fleet = Self::empty(pg, url, deployments, extra, lock);
        for _ in 0..hosts {
            let url = fleet.url.clone();
            fleet.add(&url, &[]);
        }
        fleet
    }

    /// A fleet with no host yet, on a server at `url`.
    pub fn empty(
        pg: PgServer,
        url: String,
        deployments: usize,
        extra: &str,
        lock: std::fs::File,
    ) -> Self {
        Self {
            hosts: Vec::new(),
            deployments: (1..=deployments).map(|i| format!("d{i}")).collect(),
            pg,
            dir: TempDir::new(),
            url,
            extra: extra.to_owned(),
            deployment_extra: BTreeMap::new(),
            _lock: lock,
        }
    }

    /// Starts the next host (`h1`, `h2`, …) on the server at `url`, under
    /// `wrapper` if any (see [`Supervisor::start_wrapped`]).
    pub fn add(&mut self, url: &str, wrapper: &[&str]) {
        let id = Self::id(self.hosts.len());
        let body = self.body(&id, url);
        let sup = if wrapper.is_empty() {
            Supervisor::start(&body)
        } else {
            Supervisor::start_wrapped(&body, wrapper)
        };
        self.hosts.push(Some(sup));
    }

    /// Starts the next host with `lines` in its `[fleet]` table (e.g.
    /// `capacity = 2`).
    pub fn add_with_fleet(&mut self, lines: &str) {
        let id = Self::id(self.hosts.len());
        let body = self.body(&id, &self.url).replacen(
            "\n\n[defaults]",
            &format!("\n{lines}\n\n[defaults]"),
            1,
        );
        self.hosts.push(Some(Supervisor::start(&body)));
    }

    /// Starts the next host with `settings` in its `[supervisor]` table
    /// (e.g. `metrics_listen`).
    pub fn add_with_settings(&mut self, settings: &str) {
        let id = Self::id(self.hosts.len());
        let body = self.body(&id, &self.url);
        self.hosts
            .push(Some(Supervisor::start_with_settings(settings, &body)));
    }

    /// The lock of a fleet test, for tests that build their own server.
    pub fn lock() -> std::fs::File {
        lock()
    }

    /// The file every child records its work in.
    pub fn record(&self) -> PathBuf {
        self.dir.join("work.log")
    }

    /// A host's config body: the store, `[fleet]` and the deployments.
    pub fn body(&self, host: &str, url: &str) -> String {
        let child = command(&[
            "{bin}/wfh-fleetchild",
            "--record",
            self.record().to_str().unwrap_or(""),
            "--work-ms",
            "20",
        ]);
        let mut body = format!(
            "[store]\nurl = \"{url}\"\n\n[fleet]\nhost_id = \"{host}\"\nlease_ttl = \"{}ms\"\nlease_renew = \"{}ms\"\n\n\
             [defaults]\ndrain_timeout = \"1s\"\ndrain_deadline = \"2s\"\nkill_timeout = \"1s\"\n{}\n",
            TTL.as_millis(),
            RENEW.as_millis(),
            self.extra
        );
        for d in &self.deployments {
            let extra = self.deployment_extra.get(d).map_or("", String::as_str);
            body.push_str(&format!(
                "[[deployment]]\nid = \"{d}\"\ncommand = {child}\n{extra}\n"
            ));
        }
        body
    }

    /// Host `i` (0-based), which must be running.
    pub fn host(&self, i: usize) -> &Supervisor {
        self.hosts[i].as_ref().expect("a running host")
    }

    /// `host_id` of host `i`.
    pub fn id(i: usize) -> String {
        format!("h{}", i + 1)
    }

    /// The running hosts' indexes.
    pub fn running(&self) -> Vec<usize> {
        (0..self.hosts.len())
            .filter(|i| self.hosts[*i].is_some())
            .collect()
    }

    /// `wfhost status --json` on host `i`, parsed; retried for a while
    /// if it fails (the first call after a database outage names it).
    pub fn status(&self, i: usize) -> Value {
        let out = poll(LONG, Duration::from_millis(100), || {
            let out = self.host(i).client(&["status", "--json"]);
            if out.status.success() {
                Ok(out)
            } else {
                Err(out)
            }
        })
        .unwrap_or_else(|out| panic!("status on h{} failed: {}", i + 1, describe(&out)));
        serde_json::from_str(&ok("status", &out)).expect("status JSON")
    }

    /// Each deployment's owner as host `i`'s status shows it: the lease's
    /// holder if it has not run out and the deployment is ready there.
    pub fn owners(&self, i: usize) -> BTreeMap<String, Option<String>> {
        let status = self.status(i);
        status["deployments"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|d| {
                let id = d["id"].as_str().unwrap_or_default().to_owned();
                let owner = &d["owner"];
                let held = owner["expired"] == false && d["state"] == "ready";
                let host = owner["host"].as_str().filter(|_| held).map(str::to_owned);
                (id, host)
            })
            .collect()
    }

    /// Waits until every deployment is ready on a live host, as host `i`
    /// sees it, with `pred` true of the owners; returns them.
    pub fn wait_owners(
        &self,
        i: usize,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&BTreeMap<String, String>) -> bool,
    ) -> BTreeMap<String, String> {
        poll(timeout, Duration::from_millis(50), || {
            let owners = self.owners(i);
            let all: BTreeMap<String, String> = owners
                .iter()
                .filter_map(|(d, h)| Some((d.clone(), h.clone()?)))
                .collect();
            if all.len() == self.deployments.len() && pred(&all) {
                Ok(all)
            } else {
                Err(owners)
            }
        })
        .unwrap_or_else(|last| {
            panic!(
                "timed out after {timeout:?} waiting for {what}; owners as h{} sees them: {last:?}\n{}",
                i + 1,
                self.logs()
            )
        })
    }

    /// How many deployments each host owns.
    pub fn per_host(owners: &BTreeMap<String, String>) -> BTreeMap<String, usize> {
        let mut n = BTreeMap::new();
        for h in owners.values() {
            *n.entry(h.clone()).or_insert(0) += 1;
        }
        n
    }

    /// Sends `payload` to `deployment` through host `i`; returns the id.
    pub fn send(&self, i: usize, deployment: &str, payload: &str) -> u64 {
        let out = self.host(i).client(&["send", deployment, payload]);
        let text = ok("send", &out);
        text.trim()
            .strip_prefix("accepted mail ")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("unexpected send output: {}", describe(&out)))
    }

    /// Every line the children wrote so far.
    pub fn work(&self) -> Vec<Work> {
        let text = std::fs::read_to_string(self.record()).unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                Some(Work {
                    pid: f.first()?.parse().ok()?,
                    deployment: (*f.get(1)?).to_owned(),
                    id: f.get(2)?.parse().ok()?,
                    start_ms: f.get(3)?.parse().ok()?,
                    end_ms: f.get(4)?.parse().ok()?,
                    outcome: (*f.get(5)?).to_owned(),
                })
            })
            .collect()
    }

    /// `(deployment, id)` of every `mail_done` event, as host `i` reads the
    /// shared event log (one per acknowledgement that counted).
    pub fn done(&self, i: usize) -> Vec<(String, u64)> {
        self.host(i)
            .events()
            .iter()
            .filter(|e| e["kind"] == "mail_done")
            .map(|e| {
                (
                    e["deployment"].as_str().unwrap_or_default().to_owned(),
                    e["body"]["id"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    }

    /// Waits until every id of `sent` is done (each `mail_done` event
    /// counted), as host `i` reads the event log; returns them.
    pub fn wait_done(
        &self,
        i: usize,
        sent: &[(String, u64)],
        timeout: Duration,
    ) -> Vec<(String, u64)> {
        let deadline = Instant::now() + timeout;
        loop {
            let done = self.done(i);
            if sent.iter().all(|s| done.contains(s)) {
                return done;
            }
            assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?}: {} of {} items done; missing {:?}\n{}",
                sent.iter().filter(|s| done.contains(s)).count(),
                sent.len(),
                sent.iter()
                    .filter(|s| !done.contains(s))
                    .take(10)
                    .collect::<Vec<_>>(),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every running host's log, for failure messages.
    pub fn logs(&self) -> String {
        let mut all = String::new();
        for (i, h) in self.hosts.iter().enumerate() {
            if let Some(h) = h {
                let log = h.plain_log();
                let tail: Vec<&str> = log.lines().rev().take(60).collect();
                all.push_str(&format!("--- h{} (last lines)\n", i + 1));
                for l in tail.into_iter().rev() {
                    all.push_str(l);
                    all.push('\n');
                }
            }
        }
        all
    }

    /// Takes host `i` out of the fleet's list (the caller kills or stops it).
    pub fn take(&mut self, i: usize) -> Supervisor {
        self.hosts[i].take().expect("a running host")
    }

    /// Starts host `i` again on its own state dir and config.
    pub fn restart(&mut self, i: usize, sup: Supervisor) {
        let (dir, config) = sup.into_parts();
        self.hosts[i] = Some(Supervisor::start_in(dir, config));
    }
}

/// Waits (as host `i` reads the event log, up to `timeout`) until every
/// item of `sent` is done, and asserts each was done exactly once: one
/// `mail_done` event each, one child's `done` line each, and no two
/// children of one deployment working at once.
pub fn assert_done_once(fleet: &Fleet, i: usize, sent: &[(String, u64)], timeout: Duration) {
    let done = fleet.wait_done(i, sent, timeout);
    assert_eq!(
        done.len(),
        sent.len(),
        "each id done once: {} done events",
        done.len()
    );
    let unique: std::collections::BTreeSet<_> = done.iter().collect();
    assert_eq!(unique.len(), sent.len());
    let work = fleet.work();
    assert_no_overlap(&work);
    for (d, id) in sent {
        let by: Vec<_> = work
            .iter()
            .filter(|w| &w.deployment == d && w.id == *id && w.outcome == "done")
            .collect();
        assert_eq!(by.len(), 1, "{d} mail {id}: {by:?}");
    }
}

/// Asserts that no two pids of one deployment worked at the same time:
/// at most one child per deployment ran anywhere at any moment.
pub fn assert_no_overlap(work: &[Work]) {
    let mut by: BTreeMap<&str, Vec<&Work>> = BTreeMap::new();
    for w in work {
        by.entry(&w.deployment).or_default().push(w);
    }
    for (d, items) in by {
        for a in &items {
            for b in &items {
                if a.pid != b.pid && a.start_ms < b.end_ms && b.start_ms < a.end_ms {
                    panic!(
                        "{d}: pid {} and pid {} worked at the same time: {a:?} and {b:?}",
                        a.pid, b.pid
                    );
                }
            }
        }
    }
}

/// How long a fleet test waits for anything (a takeover included).
pub const WAIT: Duration = LONG;
