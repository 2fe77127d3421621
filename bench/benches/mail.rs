//! Mail end to end (issue 16): `send` accepted → `mail_done`, through the
//! real `wfhost supervise` (release build) and the Rust conformance child
//! (`wfhost-child conformance`, which acknowledges an item `{}` at once).
//! Mail goes over the control socket (protocol 2) straight from this
//! process, so the figures are the supervisor's, not the CLI's process
//! start. The reference, measured in this same run on the same disk, is
//! one durable SQLite commit (WAL, `synchronous=FULL`) of a mail-sized row.
//!
//! - **13** throughput: 8 senders, 250 items each, as fast as they are
//!   answered, each on one kept connection (as the SDK clients send);
//!   from the first send to the last `mail_done`. **13b**: the same with a
//!   connection per send.
//! - **14** latency at a light load: one item at a time, 20 ms apart; from
//!   the send to its `mail_done` read on an `events --follow` stream.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use wfhost_bench::control::{Follow, last_seq};
use wfhost_bench::procs::{self, CleanupGuard};
use wfhost_bench::stats::{Summary, dur};
use wfhost_bench::supervisor::{Supervisor, TempDir, deployment};
use wfhost_bench::{Binaries, Report, Verdict};

const SENDERS: usize = 8;
const PER_SENDER: usize = 250;
const LATENCY_SAMPLES: usize = 50;
const COMMITS: usize = 400;

fn main() -> ExitCode {
    let bins = wfhost_bench::bins::locate();
    procs::become_subreaper();
    let cleanup = CleanupGuard;
    eprintln!(
        "wfhost-bench mail: {}",
        wfhost_bench::report::machine_line()
    );
    let mut report = Report::new();
    report.run_many(
        &[
            (
                "13",
                "mail end to end, 8 senders: throughput",
                "≥ 5× one durable commit/s",
            ),
            (
                "13b",
                "the same, each send on a connection of its own",
                "≥ 5× one durable commit/s",
            ),
            (
                "14",
                "mail end to end at a light load: latency p50",
                "≤ 3× one durable commit",
            ),
        ],
        |r| mail(&bins, r),
    );
    drop(cleanup);
    println!("{}", report.render("wfhost-bench mail"));
    if report.has_errors() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// One durable commit of a mail-sized row, `n` times; samples in seconds.
fn commits(dir: &Path, n: usize) -> anyhow::Result<Vec<f64>> {
    let conn = rusqlite::Connection::open(dir.join("reference.db"))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS mail (id INTEGER PRIMARY KEY, state TEXT NOT NULL, payload BLOB NOT NULL)",
    )?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        conn.execute(
            "INSERT INTO mail (state, payload) VALUES ('inbox', ?1)",
            rusqlite::params![b"{}".as_slice()],
        )?;
        samples.push(t.elapsed().as_secs_f64());
    }
    Ok(samples)
}

fn socket_of(dir: &TempDir) -> PathBuf {
    dir.path().join("state/wfhost.sock")
}

fn mail(bins: &Binaries, report: &mut Report) -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let child = bins.child.to_str().context("non-UTF-8 path")?;
    let body = deployment("orders", &[child, "conformance"], "");
    let mut sup = Supervisor::start(bins, &dir, "", &body, "info")?;
    sup.wait_for("orders ready", Duration::from_secs(30), |lines| {
        lines.iter().find(|l| l.is("ready", "orders")).map(|_| ())
    })?;
    let socket = socket_of(&dir);

    let reference = Summary::of(&commits(dir.path(), COMMITS)?).context("no commits measured")?;
    let commit_rate = 1.0 / reference.mean;

    // 14: latency, one item at a time.
    let mut follow = Follow::open(&socket, last_seq(&socket)?)?;
    let mut latencies = Vec::with_capacity(LATENCY_SAMPLES);
    for _ in 0..LATENCY_SAMPLES {
        let t = Instant::now();
        let id = wfhost_bench::control::send(&socket, "orders")?;
        follow.until(|e| e["kind"] == "mail_done" && e["body"]["id"] == id)?;
        latencies.push(t.elapsed().as_secs_f64());
        std::thread::sleep(Duration::from_millis(20));
    }
    let latency = Summary::of(&latencies).context("no latencies measured")?;
    let ratio = latency.p50 / reference.p50;
    report.row(
        "14",
        "mail end to end at a light load: latency p50",
        format!(
            "{} ({ratio:.2}×; p99 {})",
            dur(latency.p50),
            dur(latency.p99)
        ),
        format!("one durable commit p50 {}", dur(reference.p50)),
        "≤ 3× one durable commit",
        Verdict::of(ratio <= 3.0),
    );

    // 13: throughput, 8 senders at once, each on a kept connection (as
    // the SDK clients send); 13b: each send on a connection of its own.
    use wfhost_bench::control::{Senders, flood};
    let each = flood(&socket, "orders", SENDERS, PER_SENDER, Senders::ConnectEach)?;
    let took = flood(&socket, "orders", SENDERS, PER_SENDER, Senders::Kept)?;
    for (row, what, took) in [
        ("13", "mail end to end, 8 senders: throughput", took),
        (
            "13b",
            "the same, each send on a connection of its own",
            each,
        ),
    ] {
        let rate = (SENDERS * PER_SENDER) as f64 / took.as_secs_f64();
        let ratio = rate / commit_rate;
        report.row(
            row,
            what,
            format!("{rate:.0} items/s ({ratio:.2}×)"),
            format!(
                "one durable commit: {commit_rate:.0}/s (mean {})",
                dur(reference.mean)
            ),
            "≥ 5× one durable commit/s",
            Verdict::of(ratio >= 5.0),
        );
        report.note(
            row,
            format!(
                "{} items in {:.2} s; accept and take share a commit, acks and events share the next group",
                SENDERS * PER_SENDER,
                took.as_secs_f64()
            ),
        );
    }
    drop(sup);
    Ok(())
}
