//! `call` round trip at a light load: a keyed `send` and a `mail-result`
//! that waits for the item's end, through the real `wfhost supervise`
//! (release build) and the Rust conformance child (`wfhost-child
//! conformance`, protocol 3), which returns the payload's `result_hex`
//! (`6f6b`, "ok") as the item's result. The calls go over the control
//! socket straight from this process, so the figures are the supervisor's,
//! not the CLI's process start; the CLI is timed apart (C5).
//!
//! For each store, SQLite in the state dir (the default) and a throwaway
//! PostgreSQL server (fsync on), the reference measured in the same run is
//! one durable commit of a mail-sized row to the same store: an INSERT in
//! its own transaction from this process, on the same disk (SQLite: WAL,
//! `synchronous=FULL`) or the same server (PostgreSQL), measured in blocks
//! that alternate with the calls'. The send's own share (the keyed send
//! answered: the mail is durable) is printed beside it.
//!
//! - **C1, C3** one caller, one call at a time, 300 calls (after 20 not
//!   counted), 2 ms apart: SQLite, PostgreSQL.
//! - **C2, C4** 4 callers at once, 100 calls each, back to back.
//! - **C5** `wfhost call` (the CLI, a process per call) ×10 on each store,
//!   beside `wfhost --version` (the CLI's start alone) and C1/C3.
//!
//! `cargo bench -p wfhost-bench --bench call -- sqlite` (or `postgres`)
//! runs one store.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use wfhost_bench::control::{self, Called};
use wfhost_bench::procs::{self, CleanupGuard};
use wfhost_bench::stats::{Summary, dur};
use wfhost_bench::supervisor::{Supervisor, TempDir, deployment, toml_str};
use wfhost_bench::{Binaries, Report, Verdict};
use wfhost_tests::postgres::PgServer;

/// The item: no steps, the result "ok".
const PAYLOAD: &[u8] = br#"{"result_hex":"6f6b"}"#;
/// "ok" in base64, as `mail-result` answers it.
const RESULT_B64: &str = "b2s=";
const WARMUP: usize = 20;
/// One caller: blocks of calls alternating with blocks of commits.
const BLOCKS: usize = 6;
const PER_BLOCK: usize = 50;
const GAP: Duration = Duration::from_millis(2);
const CALLERS: usize = 4;
const PER_CALLER: usize = 100;
const CLI_CALLS: usize = 10;
/// How long one `mail-result` waits before the bench calls it a failure.
const WAIT_MS: u64 = 30_000;
/// The target of figure 14 (send → mail_done at a light load), which a
/// call contains: DESIGN §10 sets none for `call` yet.
const TARGET: &str = "p50 ≤ 3× one durable commit (as 14)";
const TARGET_RATIO: f64 = 3.0;

fn main() -> ExitCode {
    let bins = wfhost_bench::bins::locate();
    procs::become_subreaper();
    let cleanup = CleanupGuard;
    eprintln!(
        "wfhost-bench call: {}",
        wfhost_bench::report::machine_line()
    );
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a == "sqlite" || a == "postgres")
        .collect();
    let wanted = |s: &str| only.is_empty() || only.iter().any(|o| o == s);
    let mut report = Report::new();
    if wanted("sqlite") {
        report.run_many(
            &[
                ("C1", "call round trip, SQLite, 1 caller", TARGET),
                ("C2", "call round trip, SQLite, 4 callers", TARGET),
                ("C5a", "`wfhost call` CLI wall time, SQLite", "-"),
            ],
            |r| store(&bins, Store::Sqlite, r),
        );
    }
    if wanted("postgres") {
        report.run_many(
            &[
                ("C3", "call round trip, PostgreSQL, 1 caller", TARGET),
                ("C4", "call round trip, PostgreSQL, 4 callers", TARGET),
                ("C5b", "`wfhost call` CLI wall time, PostgreSQL", "-"),
            ],
            |r| {
                let pg = PgServer::start_durable();
                store(&bins, Store::Postgres(&pg), r)
            },
        );
        // The server and the supervisor's child, adopted by this subreaper
        // and exited by now, are reaped here rather than by the guard.
        std::thread::sleep(Duration::from_millis(100));
        procs::reap_exited();
    }
    drop(cleanup);
    println!("{}", report.render("wfhost-bench call"));
    if report.has_errors() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[derive(Clone, Copy)]
enum Store<'a> {
    Sqlite,
    Postgres(&'a PgServer),
}

impl Store<'_> {
    fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "SQLite",
            Self::Postgres(_) => "PostgreSQL",
        }
    }

    /// The figures' ids: one caller, 4 callers, the CLI.
    fn ids(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Self::Sqlite => ("C1", "C2", "C5a"),
            Self::Postgres(_) => ("C3", "C4", "C5b"),
        }
    }
}

/// Durable commits of a mail-sized row, one transaction each.
enum Committer {
    Sqlite(rusqlite::Connection),
    Postgres(postgres::Client),
}

impl Committer {
    fn open(store: Store<'_>, dir: &Path) -> anyhow::Result<Self> {
        Ok(match store {
            Store::Sqlite => {
                let conn = rusqlite::Connection::open(dir.join("reference.db"))?;
                conn.pragma_update(None, "journal_mode", "WAL")?;
                conn.pragma_update(None, "synchronous", "FULL")?;
                conn.execute_batch(
                    "CREATE TABLE IF NOT EXISTS mail (id INTEGER PRIMARY KEY, state TEXT NOT NULL, payload BLOB NOT NULL)",
                )?;
                Self::Sqlite(conn)
            }
            Store::Postgres(pg) => {
                // Its own database on the same server (same WAL, same fsync).
                pg.create_database("reference");
                let mut client = postgres::Client::connect(&pg.url("reference"), postgres::NoTls)?;
                client.batch_execute(
                    "CREATE TABLE mail (id BIGSERIAL PRIMARY KEY, state TEXT NOT NULL, payload BYTEA NOT NULL)",
                )?;
                Self::Postgres(client)
            }
        })
    }

    /// `n` commits; samples in seconds.
    fn commits(&mut self, n: usize) -> anyhow::Result<Vec<f64>> {
        let mut samples = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            match self {
                Self::Sqlite(conn) => {
                    conn.execute(
                        "INSERT INTO mail (state, payload) VALUES ('inbox', ?1)",
                        rusqlite::params![PAYLOAD],
                    )?;
                }
                Self::Postgres(client) => {
                    client.execute(
                        "INSERT INTO mail (state, payload) VALUES ('inbox', $1)",
                        &[&PAYLOAD],
                    )?;
                }
            }
            samples.push(t.elapsed().as_secs_f64());
        }
        Ok(samples)
    }
}

fn socket_of(dir: &TempDir) -> PathBuf {
    dir.path().join("state/wfhost.sock")
}

/// One call with a fresh key, checked: a new item that succeeded with
/// the result "ok".
fn one_call(socket: &Path, key: &str) -> anyhow::Result<Called> {
    let c = control::call_item(socket, "orders", PAYLOAD, key, WAIT_MS)?;
    if !c.new {
        bail!("key {key} named an existing item {}", c.id);
    }
    if c.end["outcome"] != "succeeded" || c.end["result"] != RESULT_B64 {
        bail!(
            "mail {} did not end with the result \"ok\": {}",
            c.id,
            c.end
        );
    }
    Ok(c)
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn store(bins: &Binaries, store: Store<'_>, report: &mut Report) -> anyhow::Result<()> {
    let (id1, id4, id_cli) = store.ids();
    let name = store.name();
    let dir = TempDir::new()?;
    let child = bins.child.to_str().context("non-UTF-8 path")?;
    let mut body = String::new();
    if let Store::Postgres(pg) = store {
        pg.create_database("wfhost");
        body.push_str(&format!(
            "[store]\nurl = {}\n\n",
            toml_str(&pg.url("wfhost"))
        ));
    }
    body.push_str(&deployment("orders", &[child, "conformance"], ""));
    let mut sup = Supervisor::start(bins, &dir, "", &body, "info")?;
    sup.wait_for("orders ready", Duration::from_secs(30), |lines| {
        lines.iter().find(|l| l.is("ready", "orders")).map(|_| ())
    })?;
    let socket = socket_of(&dir);
    let mut committer = Committer::open(store, dir.path())?;
    let run = procs::realtime_us();
    let key = |caller: usize, i: usize| format!("bench-{run}-{caller}-{i}");

    // Warm-up: the first calls open the reader, fill caches.
    for i in 0..WARMUP {
        one_call(&socket, &key(9, i))?;
    }
    committer.commits(WARMUP)?;

    // One caller, blocks alternating with the reference's.
    let mut calls: Vec<Called> = Vec::with_capacity(BLOCKS * PER_BLOCK);
    let mut commits = Vec::with_capacity(BLOCKS * PER_BLOCK);
    for b in 0..BLOCKS {
        commits.extend(committer.commits(PER_BLOCK)?);
        for i in 0..PER_BLOCK {
            calls.push(one_call(&socket, &key(0, b * PER_BLOCK + i))?);
            std::thread::sleep(GAP);
        }
    }
    let reference = Summary::of(&commits).context("no commits measured")?;
    let total = Summary::of(&calls.iter().map(|c| secs(c.total)).collect::<Vec<_>>())
        .context("no calls measured")?;
    let sent = Summary::of(&calls.iter().map(|c| secs(c.sent)).collect::<Vec<_>>())
        .context("no calls measured")?;
    let waited = Summary::of(
        &calls
            .iter()
            .map(|c| secs(c.total - c.sent))
            .collect::<Vec<_>>(),
    )
    .context("no calls measured")?;
    let ratio = total.p50 / reference.p50;
    let reference_text = format!(
        "one durable commit p50 {} (p99 {}); the call's send alone p50 {}",
        dur(reference.p50),
        dur(reference.p99),
        dur(sent.p50)
    );
    report.row(
        id1,
        &format!("call round trip, {name}, 1 caller"),
        format!(
            "p50 {} ({ratio:.2}×), p99 {}",
            dur(total.p50),
            dur(total.p99)
        ),
        reference_text.clone(),
        TARGET,
        Verdict::of(ratio <= TARGET_RATIO),
    );
    report.note(
        id1,
        format!(
            "{} calls, one at a time, {} ms apart, in {BLOCKS} blocks alternating with blocks of {PER_BLOCK} commits; send (durable accept) p50 {}, p99 {}; then mail-result (wait for the end) p50 {}, p99 {}; max {}; the commit INSERTs a {}-byte row in its own transaction{}",
            total.n,
            GAP.as_millis(),
            dur(sent.p50),
            dur(sent.p99),
            dur(waited.p50),
            dur(waited.p99),
            dur(total.max),
            PAYLOAD.len(),
            match store {
                Store::Sqlite => " (WAL, synchronous=FULL, a file beside the state dir)",
                Store::Postgres(_) =>
                    " on the same server (fsync on, another database), over its Unix socket",
            }
        ),
    );

    // 4 callers at once.
    let barrier = Arc::new(Barrier::new(CALLERS));
    let started = Instant::now();
    let threads: Vec<_> = (0..CALLERS)
        .map(|c| {
            let socket = socket.clone();
            let barrier = Arc::clone(&barrier);
            let keys: Vec<String> = (0..PER_CALLER).map(|i| key(c + 1, i)).collect();
            std::thread::spawn(move || -> anyhow::Result<Vec<Called>> {
                barrier.wait();
                keys.iter().map(|k| one_call(&socket, k)).collect()
            })
        })
        .collect();
    let mut concurrent = Vec::with_capacity(CALLERS * PER_CALLER);
    for t in threads {
        concurrent.extend(
            t.join()
                .map_err(|_| anyhow::anyhow!("a caller panicked"))??,
        );
    }
    let took = started.elapsed();
    let commits4 = Summary::of(&committer.commits(PER_BLOCK * 2)?).context("no commits")?;
    let total4 = Summary::of(&concurrent.iter().map(|c| secs(c.total)).collect::<Vec<_>>())
        .context("no calls measured")?;
    let sent4 = Summary::of(&concurrent.iter().map(|c| secs(c.sent)).collect::<Vec<_>>())
        .context("no calls measured")?;
    let ratio4 = total4.p50 / reference.p50;
    report.row(
        id4,
        &format!("call round trip, {name}, 4 callers"),
        format!(
            "p50 {} ({ratio4:.2}×), p99 {}",
            dur(total4.p50),
            dur(total4.p99)
        ),
        format!(
            "one durable commit p50 {} (as {id1}); the call's send alone p50 {}",
            dur(reference.p50),
            dur(sent4.p50)
        ),
        TARGET,
        Verdict::of(ratio4 <= TARGET_RATIO),
    );
    report.note(
        id4,
        format!(
            "{CALLERS} callers × {PER_CALLER} calls back to back: {} calls in {:.2} s ({:.0} calls/s); send p99 {}; max {}; commits measured right after: p50 {}",
            total4.n,
            took.as_secs_f64(),
            total4.n as f64 / took.as_secs_f64(),
            dur(sent4.p99),
            dur(total4.max),
            dur(commits4.p50),
        ),
    );

    // The CLI, a process per call, beside its start alone.
    let mut cli = Vec::with_capacity(CLI_CALLS);
    let mut starts = Vec::with_capacity(CLI_CALLS);
    let payload = std::str::from_utf8(PAYLOAD)?;
    for i in 0..CLI_CALLS {
        let t = Instant::now();
        let out = Command::new(&bins.wfhost)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .context("running wfhost --version")?;
        starts.push(t.elapsed().as_secs_f64());
        if !out.status.success() {
            bail!("wfhost --version failed: {}", out.status);
        }
        let k = key(8, i);
        let (out, took) = sup.client(&["call", "orders", payload, "--key", &k])?;
        if out.stdout != b"ok" {
            bail!(
                "wfhost call printed {:?}, not \"ok\"",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        cli.push(took.as_secs_f64());
    }
    let cli = Summary::of(&cli).context("no CLI calls")?;
    let starts = Summary::of(&starts).context("no CLI starts")?;
    report.row(
        id_cli,
        &format!("`wfhost call` CLI wall time, {name}"),
        format!("p50 {} (max {}, n={})", dur(cli.p50), dur(cli.max), cli.n),
        format!(
            "`wfhost --version` p50 {}; over the socket ({id1}) p50 {}",
            dur(starts.p50),
            dur(total.p50)
        ),
        "- (no target: process start-up included)",
        Verdict::Info,
    );

    match store {
        Store::Sqlite => drop(sup),
        // Not `drop`: that kills every process of the benchmark, the
        // database included, which `PgServer`'s drop stops cleanly.
        Store::Postgres(_) => {
            drop(committer);
            sup.kill_alone();
        }
    }
    Ok(())
}
