//! A fleet on PostgreSQL (issue 12), through the real release binaries
//! and a throwaway PostgreSQL server (fsync on) started by the benchmark:
//!
//! - **F1** lease renewal for 1,000 deployments on one host: the duration
//!   of each renewal (heartbeat and every lease in one statement, as the
//!   host logs it) in steady state, beside one `SELECT 1` round trip to
//!   the same server.
//! - **F2** takeover after a SIGKILL, median of 10: two hosts, one
//!   deployment; from the SIGKILL of its owner to `ready` on the other
//!   host, beside the bound the lease timing sets (`lease_ttl` plus the
//!   grace of half a renewal).
//! - **F3a**, **F3** mail throughput through PostgreSQL, 8 senders on
//!   kept connections: one host beside SQLite, and a fleet host (fenced
//!   writes) beside the one host, in the same run.
//! - **F4**, **F5** what TLS costs: a fleet host's mail throughput (8
//!   senders) and its lease renewal (200 deployments), over TCP to one
//!   server, plaintext (`sslmode = "disable"`) beside TLS (`verify-full`)
//!   in the same run.
//!
//! `cargo bench -p wfhost-bench --bench fleet -- F2` runs one figure.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use wfhost_bench::control;
use wfhost_bench::procs::{self, CleanupGuard};
use wfhost_bench::stats::{Summary, dur};
use wfhost_bench::supervisor::{Supervisor, TempDir, deployment, toml_str};
use wfhost_bench::{Binaries, Report, Verdict};
use wfhost_tests::postgres::PgServer;

const RENEWAL_DEPLOYMENTS: usize = 1000;
const RENEWALS: usize = 10;
const TAKEOVERS: usize = 10;
const SENDERS: usize = 8;
const PER_SENDER: usize = 250;
/// The lease timing of F2: short, for a short takeover.
const TTL_MS: u64 = 2000;
const RENEW_MS: u64 = 500;
/// F1's: 1,000 children starting on a small machine need the room.
const F1_TTL_MS: u64 = 6000;
const F1_RENEW_MS: u64 = 2000;

/// One figure's measurement, into the report.
type Figure = fn(&Binaries, &PgServer, &mut Report) -> anyhow::Result<()>;

fn main() -> ExitCode {
    let bins = wfhost_bench::bins::locate();
    procs::become_subreaper();
    procs::raise_nofile();
    let cleanup = CleanupGuard;
    eprintln!(
        "wfhost-bench fleet: {}",
        wfhost_bench::report::machine_line()
    );
    // Figures named on the command line (`-- F2 F3`) run alone; none: all.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a.starts_with('F'))
        .collect();
    let wanted = |f: &str| only.is_empty() || only.iter().any(|o| o == f);
    let pg = PgServer::start_durable();
    let mut report = Report::new();
    let figures: [(&str, &str, &str, Figure); 4] = [
        (
            "F1",
            "lease renewal, 1,000 deployments on one host, p50",
            "≤ 50 ms (1% of the default lease_renew)",
            renewal,
        ),
        (
            "F2",
            "takeover after SIGKILL, median of 10",
            "≤ lease_ttl + lease_renew + 1 s (ready)",
            takeover,
        ),
        (
            "F3",
            "mail through PostgreSQL (fleet host), 8 senders: throughput",
            "≥ 0.5× SQLite",
            throughput,
        ),
        (
            "F4",
            "TLS beside plaintext, one run: mail throughput and lease renewal",
            "TLS ≥ 0.8× plaintext throughput",
            tls_cost,
        ),
    ];
    for (id, what, target, figure) in figures {
        if wanted(id) {
            report.run(id, what, target, |r| figure(&bins, &pg, r));
        }
    }
    drop(cleanup);
    println!("{}", report.render("wfhost-bench fleet"));
    if report.has_errors() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// A fleet host's config body on database `db`: `[store]`, `[fleet]`
/// with `lease_ttl` and `lease_renew` in ms.
fn fleet_body(pg: &PgServer, db: &str, host: &str, (ttl, renew): (u64, u64)) -> String {
    format!(
        "[store]\nurl = {}\n\n[fleet]\nhost_id = {}\nlease_ttl = \"{ttl}ms\"\nlease_renew = \"{renew}ms\"\n\n",
        toml_str(&pg.url(db)),
        toml_str(host)
    )
}

fn socket(dir: &TempDir) -> PathBuf {
    dir.path().join("state/wfhost.sock")
}

/// `SELECT 1` round trips to `url`, in seconds.
fn round_trips(url: &str, n: usize) -> anyhow::Result<Vec<f64>> {
    let mut client = postgres::Client::connect(url, postgres::NoTls)?;
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        client.simple_query("SELECT 1")?;
        samples.push(t.elapsed().as_secs_f64());
    }
    Ok(samples)
}

fn renewal(bins: &Binaries, pg: &PgServer, report: &mut Report) -> anyhow::Result<()> {
    pg.create_database("renewal");
    let dir = TempDir::new()?;
    let child = bins.child.to_str().context("non-UTF-8 path")?;
    let mut body = fleet_body(pg, "renewal", "solo", (F1_TTL_MS, F1_RENEW_MS));
    let ids: Vec<String> = (0..RENEWAL_DEPLOYMENTS)
        .map(|i| format!("d{i:04}"))
        .collect();
    for id in &ids {
        body.push_str(&deployment(id, &[child, "conformance"], ""));
    }
    let mut sup = Supervisor::start(bins, &dir, "", &body, "info,wfhost::host::fleet=debug")?;
    sup.wait_ready(&ids, sup.started_us, Duration::from_secs(120))?;
    // Steady state: every lease held, every status snapshot stored once.
    let samples = renewals(&mut sup, RENEWAL_DEPLOYMENTS)?;
    let steady = Summary::of(&samples[1..]).context("no renewals measured")?;
    let reference =
        Summary::of(&round_trips(&pg.url("renewal"), 200)?).context("no round trips")?;
    report.row(
        "F1",
        "lease renewal, 1,000 deployments on one host, p50",
        format!(
            "{} (p99 {}, {:.0}× one round trip)",
            dur(steady.p50),
            dur(steady.p99),
            steady.p50 / reference.p50
        ),
        format!("SELECT 1 round trip p50 {}", dur(reference.p50)),
        "≤ 50 ms (1% of the default lease_renew)",
        Verdict::of(steady.p50 <= 0.050),
    );
    report.note(
        "F1",
        format!(
            "{RENEWALS} renewals after the first; each is one statement: the heartbeat and every lease at its epoch, locked and extended; the first full one took {} (it also stores each deployment's status snapshot)",
            dur(samples[0])
        ),
    );
    sup.kill_alone();
    Ok(())
}

/// The durations (s) of the first `RENEWALS + 1` renewals of all
/// `leases`, as the host logs them; the first also stores every status
/// snapshot, so steady state is after it.
fn renewals(sup: &mut Supervisor, leases: usize) -> anyhow::Result<Vec<f64>> {
    let mut scanned = 0;
    let mut samples = Vec::with_capacity(RENEWALS + 1);
    sup.wait_for(
        "10 renewals of every lease",
        Duration::from_secs(60),
        |lines| {
            for l in &lines[scanned..] {
                let full = l.fields.get("renewed").and_then(|v| v.as_u64()) == Some(leases as u64);
                if l.msg == "leases renewed" && full {
                    samples.push(
                        l.fields
                            .get("took_us")
                            .and_then(|v| v.as_u64())
                            .unwrap_or(0) as f64
                            / 1e6,
                    );
                }
            }
            scanned = lines.len();
            (samples.len() > RENEWALS).then_some(())
        },
    )?;
    Ok(samples)
}

/// Which of `socks` runs `deployment` ready, by its status.
fn ready_on(socks: &[&Path], deployment: &str) -> Option<usize> {
    socks.iter().position(|s| {
        control::status(s).is_ok_and(|ds| {
            ds.iter().any(|d| {
                d["id"] == deployment
                    && d["state"] == "ready"
                    && d["owner"]["host"].is_string()
                    && d["uptime_ms"].is_u64()
            })
        })
    })
}

fn takeover(bins: &Binaries, pg: &PgServer, report: &mut Report) -> anyhow::Result<()> {
    pg.create_database("takeover");
    let child = bins.child.to_str().context("non-UTF-8 path")?;
    let dirs = [TempDir::new()?, TempDir::new()?];
    let start = |i: usize| -> anyhow::Result<Supervisor> {
        let mut body = fleet_body(pg, "takeover", &format!("h{i}"), (TTL_MS, RENEW_MS));
        body.push_str(&deployment("orders", &[child, "conformance"], ""));
        Supervisor::start(bins, &dirs[i], "", &body, "info")
    };
    let mut hosts = [Some(start(0)?), Some(start(1)?)];
    let socks: Vec<PathBuf> = dirs.iter().map(socket).collect();
    let mut samples = Vec::with_capacity(TAKEOVERS);
    for _ in 0..TAKEOVERS {
        let deadline = Instant::now() + Duration::from_secs(30);
        let owner = loop {
            let refs: Vec<&Path> = socks.iter().map(PathBuf::as_path).collect();
            if let Some(i) = ready_on(&refs, "orders") {
                break i;
            }
            if Instant::now() > deadline {
                let seen: Vec<String> = socks
                    .iter()
                    .map(|s| match control::status(s) {
                        Ok(ds) => serde_json::Value::Array(ds).to_string(),
                        Err(e) => format!("{e:#}"),
                    })
                    .collect();
                let logs: Vec<String> = hosts
                    .iter_mut()
                    .flatten()
                    .map(|h| {
                        h.log.poll();
                        h.tail(10)
                    })
                    .collect();
                bail!(
                    "orders never became ready on either host; their status:\n{}\ntheir logs:\n{}",
                    seen.join("\n"),
                    logs.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let other = 1 - owner;
        let mut victim = hosts[owner].take().context("the owner runs")?;
        let killed = Instant::now();
        victim.kill_alone();
        loop {
            if ready_on(&[socks[other].as_path()], "orders").is_some() {
                break;
            }
            if killed.elapsed() > Duration::from_secs(30) {
                bail!("orders was not taken over within 30 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        samples.push(killed.elapsed().as_secs_f64());
        hosts[owner] = Some(start(owner)?);
    }
    let s = Summary::of(&samples).context("no takeovers measured")?;
    let bound = (TTL_MS + RENEW_MS / 2) as f64 / 1000.0;
    let target = (TTL_MS + RENEW_MS + 1000) as f64 / 1000.0;
    report.row(
        "F2",
        "takeover after SIGKILL, median of 10",
        format!("{} (min {}, max {})", dur(s.p50), dur(s.min), dur(s.max)),
        format!(
            "lease_ttl + grace = {} (lease_ttl {TTL_MS} ms, lease_renew {RENEW_MS} ms)",
            dur(bound)
        ),
        "≤ lease_ttl + lease_renew + 1 s (ready)",
        Verdict::of(s.p50 <= target),
    );
    report.note(
        "F2",
        "from the SIGKILL of the owner to its deployment ready on the other host: the lease runs out (up to lease_ttl after the last renewal), the grace passes, the survivor takes it at the instant it planned for, replays the mail and starts the child",
    );
    // Not `drop`: that kills every process of the benchmark, the
    // database included, which the next figure needs.
    for h in hosts.iter_mut().flatten() {
        h.kill_alone();
    }
    Ok(())
}

/// Items per second through the supervisor at `socket`, 8 senders.
fn flow(socket: &Path) -> anyhow::Result<f64> {
    let took = control::flood(
        socket,
        "orders",
        SENDERS,
        PER_SENDER,
        control::Senders::Kept,
    )?;
    Ok((SENDERS * PER_SENDER) as f64 / took.as_secs_f64())
}

fn throughput(bins: &Binaries, pg: &PgServer, report: &mut Report) -> anyhow::Result<()> {
    pg.create_database("single");
    pg.create_database("mail");
    let child = bins.child.to_str().context("non-UTF-8 path")?;
    let orders = deployment("orders", &[child, "conformance"], "");
    let store = |db: &str| format!("[store]\nurl = {}\n\n", toml_str(&pg.url(db)));
    // The fleet host at the default lease timing: a throughput figure,
    // not a timing one.
    let fleet = format!("{}[fleet]\nhost_id = \"solo\"\n\n{orders}", store("mail"));
    let mut rates = Vec::new();
    for body in [
        orders.clone(),
        format!("{}{orders}", store("single")),
        fleet,
    ] {
        let dir = TempDir::new()?;
        let mut sup = Supervisor::start(bins, &dir, "", &body, "info")?;
        sup.wait_for("orders ready", Duration::from_secs(30), |lines| {
            lines.iter().find(|l| l.is("ready", "orders")).map(|_| ())
        })?;
        let rate = flow(&socket(&dir));
        sup.kill_alone();
        rates.push(rate?);
    }
    let (sqlite, single, fleet) = (rates[0], rates[1], rates[2]);
    let single_ratio = single / sqlite;
    report.row(
        "F3a",
        "mail through PostgreSQL (one host), 8 senders: throughput",
        format!("{single:.0} items/s ({single_ratio:.2}× SQLite)"),
        format!("SQLite in state_dir {sqlite:.0} items/s"),
        "≥ 0.8× SQLite and ≥ 2,000 items/s",
        Verdict::of(single_ratio >= 0.8 && single >= 2000.0),
    );
    let fence_ratio = fleet / single;
    report.row(
        "F3",
        "mail through PostgreSQL (fleet host), 8 senders: throughput",
        format!(
            "{fleet:.0} items/s ({fence_ratio:.2}× PostgreSQL without [fleet]; {:.2}× SQLite)",
            fleet / sqlite
        ),
        format!("PostgreSQL, one host, no fence {single:.0} items/s"),
        "the fence costs ≤ 1.1× (≥ 0.91× the unfenced rate)",
        Verdict::of(fence_ratio >= 1.0 / 1.1),
    );
    report.note(
        "F3",
        format!(
            "{} items each, from the first send to the last mail_done; PostgreSQL with fsync on; the fleet host fences every take and ack on the lease's epoch",
            SENDERS * PER_SENDER
        ),
    );
    Ok(())
}

/// F5's deployments.
const TLS_RENEWAL_DEPLOYMENTS: usize = 200;

/// F4 and F5: one durable server over TCP, the same fleet host config but
/// for `sslmode`, plaintext then TLS.
fn tls_cost(bins: &Binaries, _: &PgServer, report: &mut Report) -> anyhow::Result<()> {
    let user = wfhost_tests::postgres::USER;
    let dir = TempDir::new()?;
    let certs = wfhost_tests::certs::make(&dir.path().join("certs"), user);
    let port = PgServer::free_port();
    // `host` lines take TLS and plaintext alike.
    let pg = PgServer::start_tls_durable(
        port,
        &certs.server_crt,
        &certs.server_key,
        "host all all 127.0.0.1/32 trust",
    );
    let child = bins.child.to_str().context("non-UTF-8 path")?;
    let ca = certs.ca.to_str().context("non-UTF-8 path")?;
    let modes = [
        "sslmode = \"disable\"".to_owned(),
        format!("sslmode = \"verify-full\"\nsslrootcert = {}", toml_str(ca)),
    ];
    let mut rates = Vec::new();
    let mut renewal = Vec::new();
    for (i, tls) in modes.iter().enumerate() {
        let store = |db: &str| {
            pg.create_database(db);
            let url = format!("postgresql://{user}@localhost:{port}/{db}");
            format!("[store]\nurl = {}\n{tls}\n\n", toml_str(&url))
        };
        // Throughput: a fleet host at the default lease timing.
        let body = format!(
            "{}[fleet]\nhost_id = \"solo\"\n\n{}",
            store(&format!("mail{i}")),
            deployment("orders", &[child, "conformance"], "")
        );
        let run = TempDir::new()?;
        let mut sup = Supervisor::start(bins, &run, "", &body, "info")?;
        sup.wait_for("orders ready", Duration::from_secs(30), |lines| {
            lines.iter().find(|l| l.is("ready", "orders")).map(|_| ())
        })?;
        let rate = flow(&socket(&run));
        sup.kill_alone();
        rates.push(rate?);
        // Renewal: 200 leases, each renewal timed by the host itself.
        let mut body = format!(
            "{}[fleet]\nhost_id = \"solo\"\nlease_ttl = \"{F1_TTL_MS}ms\"\nlease_renew = \"{F1_RENEW_MS}ms\"\n\n",
            store(&format!("renewal{i}"))
        );
        let ids: Vec<String> = (0..TLS_RENEWAL_DEPLOYMENTS)
            .map(|i| format!("d{i:03}"))
            .collect();
        for id in &ids {
            body.push_str(&deployment(id, &[child, "conformance"], ""));
        }
        let run = TempDir::new()?;
        let mut sup = Supervisor::start(bins, &run, "", &body, "info,wfhost::host::fleet=debug")?;
        sup.wait_ready(&ids, sup.started_us, Duration::from_secs(120))?;
        let samples = renewals(&mut sup, TLS_RENEWAL_DEPLOYMENTS)?;
        sup.kill_alone();
        renewal.push(Summary::of(&samples[1..]).context("no renewals measured")?);
    }
    let (plain, tls) = (rates[0], rates[1]);
    let ratio = tls / plain;
    report.row(
        "F4",
        "TLS beside plaintext, one run: mail throughput (fleet host, 8 senders, TCP)",
        format!("{tls:.0} items/s over TLS ({ratio:.2}× plaintext)"),
        format!("plaintext over TCP to the same server {plain:.0} items/s"),
        "TLS ≥ 0.8× plaintext throughput",
        Verdict::of(ratio >= 0.8),
    );
    let (p, t) = (&renewal[0], &renewal[1]);
    report.row(
        "F5",
        "TLS beside plaintext, one run: lease renewal, 200 deployments, p50",
        format!(
            "{} over TLS (p99 {}, {:.2}× plaintext)",
            dur(t.p50),
            dur(t.p99),
            t.p50 / p.p50
        ),
        format!("plaintext {} (p99 {})", dur(p.p50), dur(p.p99)),
        "≤ 50 ms",
        Verdict::of(t.p50 <= 0.050),
    );
    report.note(
        "F4",
        "one durable PostgreSQL on 127.0.0.1 with ssl = on; the same config but for sslmode (disable, or verify-full with a CA made by openssl in the run); TLS 1.3, rustls on ring, for every connection of the host (store, reader, leases, queries, listener)",
    );
    Ok(())
}
