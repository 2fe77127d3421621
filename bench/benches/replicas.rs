//! Replicas of a CPU-bound Python workflow (issue 17): one Python process
//! uses one core, so `replicas = 2` on a 2-core machine should nearly
//! double what a deployment gets through. The child is the repository's
//! own example, `examples/python-orders/orders.py` on the Python SDK, with
//! `--crunch`: each item is a fixed number of chained SHA-256 rounds in a
//! cancel-behaviour step.
//!
//! - **17a** one replica: items/s from the first send to the last
//!   `mail_done`, beside the same work done by a bare Python loop (no
//!   wfhost, no SDK) measured in this run: the host's overhead.
//! - **17b** two replicas: the same items/s beside one replica's.
//!
//! Needs the SDK's venv (`target/venv`, made by `.ci/run` or
//! `python3 -m venv target/venv && target/venv/bin/pip install ./sdk/python`).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;
use wfhost_bench::control::{self, Follow};
use wfhost_bench::procs::{self, CleanupGuard};
use wfhost_bench::supervisor::{Supervisor, TempDir, deployment, toml_str};
use wfhost_bench::{Binaries, Report, Verdict};

/// Items per run.
const ITEMS: usize = 40;
/// SHA-256 rounds per item: about 70 ms of one core here.
const ROUNDS: u64 = 200_000;

fn main() -> ExitCode {
    let bins = wfhost_bench::bins::locate();
    procs::become_subreaper();
    let cleanup = CleanupGuard;
    eprintln!(
        "wfhost-bench replicas: {}",
        wfhost_bench::report::machine_line()
    );
    let mut report = Report::new();
    report.run_many(
        &[
            (
                "17a",
                "CPU-bound Python example, 1 replica: throughput",
                "≥ 0.9× the bare loop",
            ),
            (
                "17b",
                "CPU-bound Python example, 2 replicas: throughput",
                "≥ 1.6× one replica",
            ),
        ],
        |r| replicas(&bins, r),
    );
    drop(cleanup);
    println!("{}", report.render("wfhost-bench replicas"));
    if report.has_errors() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

fn python() -> anyhow::Result<PathBuf> {
    let p = repo().join("target/venv/bin/python");
    if !p.is_file() {
        bail!(
            "{} is missing: make the SDK's venv first (python3 -m venv target/venv && \
             target/venv/bin/pip install ./sdk/python)",
            p.display()
        );
    }
    Ok(p)
}

/// The same work as one run's items, in one bare Python process; seconds.
fn bare_loop(python: &Path) -> anyhow::Result<f64> {
    let script = format!(
        "import hashlib, time\n\
         t = time.perf_counter()\n\
         for _ in range({ITEMS}):\n\
         \x20   d = b'wfhost'\n\
         \x20   for i in range({ROUNDS}):\n\
         \x20       d = hashlib.sha256(d).digest()\n\
         print(time.perf_counter() - t)\n"
    );
    let out = Command::new(python)
        .args(["-c", &script])
        .output()
        .context("running the bare Python loop")?;
    if !out.status.success() {
        bail!(
            "the bare Python loop failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
}

/// Items/s through a deployment of `n` replicas of the example, and how
/// many items each child logged as done.
fn through(bins: &Binaries, python: &Path, n: usize) -> anyhow::Result<(f64, Vec<usize>)> {
    let dir = TempDir::new()?;
    let example = repo().join("examples/python-orders/orders.py");
    let rounds = ROUNDS.to_string();
    let argv = [
        python.to_str().context("non-UTF-8 path")?,
        example.to_str().context("non-UTF-8 path")?,
        "--crunch",
        &rounds,
        "--fetch-ms",
        "0",
        "--approve-ms",
        "0",
    ];
    let markers = dir.path().join("markers");
    let extra = format!(
        "replicas = {n}\nenv = {{ ORDERS_MARKERS = {} }}",
        toml_str(&markers.to_string_lossy())
    );
    let body = deployment("orders-py", &argv, &extra);
    let mut sup = Supervisor::start(bins, &dir, "", &body, "info")?;
    sup.wait_for(
        &format!("{n} replicas ready"),
        Duration::from_secs(60),
        |lines| {
            // A replica logs as `orders-py/N`, a lone child as `orders-py`.
            let ready = lines.iter().filter(|l| {
                l.msg == "ready"
                    && l.deployment()
                        .is_some_and(|d| d.split('/').next() == Some("orders-py"))
            });
            (ready.count() >= n).then_some(())
        },
    )?;
    let socket = dir.path().join("state/wfhost.sock");
    let mut follow = Follow::open(&socket, control::last_seq(&socket)?)?;
    let payload = serde_json::to_vec(&json!({"order": "bench"}))?;
    let t = Instant::now();
    for _ in 0..ITEMS {
        let answer = control::call(
            &socket,
            &json!({"v": 2, "cmd": "send", "deployment": "orders-py", "payload_bytes": payload.len()}),
            &payload,
        )?;
        if answer["ok"] != true {
            bail!("send refused: {answer}");
        }
    }
    let mut done = 0;
    follow.until(|e| {
        if e["kind"] == "mail_done" {
            done += 1;
        }
        done == ITEMS
    })?;
    let rate = ITEMS as f64 / t.elapsed().as_secs_f64();
    let mut per_child = std::collections::BTreeMap::<u64, usize>::new();
    sup.wait_for(
        "the children's last lines",
        Duration::from_secs(10),
        |lines| {
            per_child.clear();
            for l in lines.iter().filter(|l| l.msg.contains("order bench done")) {
                *per_child.entry(l.pid().unwrap_or(0)).or_default() += 1;
            }
            (per_child.values().sum::<usize>() >= ITEMS).then_some(())
        },
    )?;
    Ok((rate, per_child.into_values().collect()))
}

fn replicas(bins: &Binaries, report: &mut Report) -> anyhow::Result<()> {
    let python = python()?;
    let bare = ITEMS as f64 / bare_loop(&python)?;
    let (one, _) = through(bins, &python, 1)?;
    let (two, shares) = through(bins, &python, 2)?;
    report.row(
        "17a",
        "CPU-bound Python example, 1 replica: throughput",
        format!("{one:.2} items/s ({:.2}×)", one / bare),
        format!("bare Python loop {bare:.2} items/s"),
        "≥ 0.9× the bare loop",
        Verdict::of(one / bare >= 0.9),
    );
    report.row(
        "17b",
        "CPU-bound Python example, 2 replicas: throughput",
        format!("{two:.2} items/s ({:.2}×)", two / one),
        format!("1 replica {one:.2} items/s"),
        "≥ 1.6× one replica",
        Verdict::of(two / one >= 1.6),
    );
    report.note(
        "17",
        format!(
            "{ITEMS} items of {ROUNDS} SHA-256 rounds each, sent at once; {} cores; \
             items per replica with 2: {shares:?}",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        ),
    );
    Ok(())
}
