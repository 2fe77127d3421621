//! Issue 16's goals, each beside peers run in this same bench on this same
//! machine: runit (`runsvdir`, one `runsv` per service) and horust, where
//! they are installed (`bench/peers/run --install` puts them in place;
//! horust is looked for in `target/peers/horust/bin` and on `PATH`). The
//! full comparison with every peer is the peer kit (`bench/peers/run`);
//! this is its part that fits in `cargo bench`.
//!
//! - **start 100** (16a, 16b): every service is `bash` appending
//!   `$EPOCHREALTIME` to a file, then `exec sleep`: t0 right before the
//!   supervisor's spawn, the last and first stamps, median of 3 starts.
//!   wfhost hosts it under `wfhost-child exec`, runit runs it as the
//!   service's `run` script.
//! - **idle, 100 children** (16c–16e): `sleep` under each; after the
//!   start-up trim and a round of pings, the supervisor's RSS and PSS
//!   (`smaps_rollup`), and the PSS of one per-service process (the exec
//!   shim; runit's `runsv`).
//! - **RSS bound between ticks** (16f): 100 children with `max_rss = 1GiB`
//!   at the default policy_interval, beside the same fleet polled with
//!   `policy_interval = "100ms"`.
//!
//! `cargo bench -p wfhost-bench --bench peers -- PHASE…` runs only the
//! phases named (start, idle, rss).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use wfhost_bench::procs::{self, CleanupGuard, realtime_us};
use wfhost_bench::stats::{Summary, dur, mib};
use wfhost_bench::supervisor::{Supervisor, TempDir, deployment};
use wfhost_bench::{Binaries, Report, Verdict};

/// Services per fleet.
const N: usize = 100;
/// Timed starts of each supervisor (after one warm-up).
const STARTS: usize = 3;
/// CPU window.
const WINDOW: Duration = Duration::from_secs(10);
/// How long after every child is up the idle figures are read: past the
/// supervisor's start-up trim (3 s) and its first round of pings (10 s).
const SETTLE: Duration = Duration::from_secs(12);

fn main() -> ExitCode {
    let bins = wfhost_bench::bins::locate();
    procs::become_subreaper();
    procs::raise_nofile();
    let cleanup = CleanupGuard;
    eprintln!(
        "wfhost-bench peers: {}",
        wfhost_bench::report::machine_line()
    );
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |phase: &str| filters.is_empty() || filters.iter().any(|f| f == phase);
    let mut report = Report::new();
    if wanted("start") {
        report.run_many(
            &[
                ("16a", "start 100 → all running", "≤ 0.75× runit"),
                ("16b", "start 100 → first child running", "≤ 0.75× runit"),
            ],
            |r| start(&bins, r),
        );
    }
    if wanted("idle") {
        report.run_many(
            &[
                ("16c", "idle supervisor, 100 children: RSS", "≤ 6 MiB"),
                (
                    "16d",
                    "idle supervisor, 100 children: PSS",
                    "≤ horust's PSS",
                ),
                (
                    "16e",
                    "per-service overhead of a plain command: PSS",
                    "≤ 0.15 MiB",
                ),
            ],
            |r| idle(&bins, r),
        );
    }
    if wanted("rss") {
        report.run(
            "16f",
            "RSS bound watched between ticks, 100 children: CPU",
            "≤ 0.2 % of a core",
            |r| rss_watch(&bins, r),
        );
    }
    drop(cleanup);
    print!(
        "{}",
        report.render("wfhost beside its peers, same run (issue 16)")
    );
    if report.has_errors() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

// ------------------------------------------------------------- helpers

/// `PROGRAM` on `PATH`, if there.
fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// horust: `target/peers/horust/bin/horust` (where `bench/peers/run`
/// installs it) or on `PATH`.
fn horust() -> Option<PathBuf> {
    let release = wfhost_bench::bins::release_dir();
    release
        .parent()
        .map(|t| t.join("peers/horust/bin/horust"))
        .filter(|p| p.is_file())
        .or_else(|| on_path("horust"))
}

/// `Pss` of `pid` from `/proc/PID/smaps_rollup`, bytes.
fn pss_bytes(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let line = text.lines().find(|l| l.starts_with("Pss:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The command name of `pid`.
fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim().to_owned())
        .unwrap_or_default()
}

/// The median of `v` (bytes).
fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// Waits until `n` processes named `name` descend from `root`.
fn wait_descendants(root: u32, name: &str, n: usize, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let found = procs::descendants(root)
            .into_iter()
            .filter(|&p| comm(p) == name)
            .count();
        if found >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {found} of {n} {name} processes after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A peer supervisor process, killed with everything it started on drop.
struct Peer(Option<Child>);

impl Peer {
    fn spawn(cmd: &mut Command) -> anyhow::Result<Self> {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("spawning {cmd:?}"))?;
        Ok(Self(Some(child)))
    }

    fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        procs::kill_all_descendants(Duration::from_secs(10));
    }
}

/// runit's service dir for `n` services running `run` (a script body).
fn runit_dir(dir: &Path, n: usize, run: &str) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let sv = dir.join("service");
    for i in 0..n {
        let d = sv.join(format!("s{i:03}"));
        std::fs::create_dir_all(&d)?;
        let script = d.join("run");
        std::fs::write(&script, run)?;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    }
    // runsvdir waits for a dir younger than a second to settle: backdate
    // it, as an installed service dir is old.
    let old = std::time::SystemTime::now() - Duration::from_secs(10);
    std::fs::File::open(&sv)?.set_modified(old)?;
    Ok(sv)
}

/// The stamps (µs) in `file`, once there are `n`.
fn wait_stamps(file: &Path, n: usize, timeout: Duration) -> anyhow::Result<Vec<i64>> {
    let deadline = Instant::now() + timeout;
    loop {
        let stamps: Vec<i64> = std::fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse::<f64>().ok())
            .map(|s| (s * 1e6) as i64)
            .collect();
        if stamps.len() >= n {
            return Ok(stamps);
        }
        if Instant::now() > deadline {
            bail!(
                "only {} of {n} services started after {timeout:?}",
                stamps.len()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// (all running, first running) in seconds from t0 (µs).
fn span(t0: i64, stamps: &[i64]) -> (f64, f64) {
    let last = stamps.iter().copied().max().unwrap_or(t0);
    let first = stamps.iter().copied().min().unwrap_or(t0);
    ((last - t0) as f64 / 1e6, (first - t0) as f64 / 1e6)
}

// ------------------------------------------------------- phase: start

/// Figures 16a and 16b.
fn start(bins: &Binaries, report: &mut Report) -> anyhow::Result<()> {
    let runsvdir = on_path("runsvdir").context(
        "runit is not installed (bench/peers/run --install installs it): no same-run reference",
    )?;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for run in 0..=STARTS {
        // wfhost: a state dir that exists (store and key made by an
        // earlier start), as a restarted supervisor finds it.
        let dir = TempDir::new()?;
        let stamps = dir.path().join("stamps");
        let script = format!(
            "echo $EPOCHREALTIME >> {}; exec sleep 1000",
            stamps.display()
        );
        let body: String = (0..N)
            .map(|i| {
                deployment(
                    &format!("d{i:03}"),
                    &[
                        &bins.child.to_string_lossy(),
                        "exec",
                        "--",
                        "bash",
                        "-c",
                        &script,
                    ],
                    "",
                )
            })
            .collect();
        let mut warm = Supervisor::start(bins, &dir, "", &body, "warn")?;
        wait_stamps(&stamps, N, Duration::from_secs(60))?;
        warm.stop();
        drop(warm);
        std::fs::remove_file(&stamps)?;
        let sup = Supervisor::start(bins, &dir, "", &body, "warn")?;
        let t0 = sup.started_us;
        let got = wait_stamps(&stamps, N, Duration::from_secs(60))?;
        drop(sup);
        if run > 0 {
            ours.push(span(t0, &got));
        }

        let rdir = TempDir::new()?;
        let rstamps = rdir.path().join("stamps");
        let sv = runit_dir(
            rdir.path(),
            N,
            &format!(
                "#!/bin/bash\necho $EPOCHREALTIME >> {}\nexec sleep 1000\n",
                rstamps.display()
            ),
        )?;
        let t0 = realtime_us();
        let peer = Peer::spawn(Command::new(&runsvdir).arg("-P").arg(&sv))?;
        let got = wait_stamps(&rstamps, N, Duration::from_secs(60))?;
        drop(peer);
        if run > 0 {
            theirs.push(span(t0, &got));
        }
    }
    let p50 = |v: &[(f64, f64)], f: fn(&(f64, f64)) -> f64| -> anyhow::Result<f64> {
        let s: Vec<f64> = v.iter().map(f).collect();
        Ok(Summary::of(&s).context("no starts")?.p50)
    };
    for (id, what, pick) in [
        (
            "16a",
            "start 100 → all running",
            (|s: &(f64, f64)| s.0) as fn(&(f64, f64)) -> f64,
        ),
        ("16b", "start 100 → first child running", |s| s.1),
    ] {
        let (a, b) = (p50(&ours, pick)?, p50(&theirs, pick)?);
        let ratio = a / b;
        report.row(
            id,
            what,
            format!("{} ({ratio:.2}× runit, median of {STARTS})", dur(a)),
            format!("runit {}", dur(b)),
            "≤ 0.75× runit",
            Verdict::of(ratio <= 0.75),
        );
    }
    report.note(
        "16a",
        format!(
            "t0 right before the supervisor's spawn → each service's bash appending $EPOCHREALTIME before \
             exec sleep. wfhost (all, first): {:?}; runit: {:?}. wfhost's state dir exists (a warm-up start \
             made the store and key); runit's service dir is backdated (runsvdir waits a second for a new one).",
            ours.iter()
                .map(|s| (dur(s.0), dur(s.1)))
                .collect::<Vec<_>>(),
            theirs
                .iter()
                .map(|s| (dur(s.0), dur(s.1)))
                .collect::<Vec<_>>(),
        ),
    );
    Ok(())
}

// -------------------------------------------------------- phase: idle

/// Figures 16c, 16d and 16e.
fn idle(bins: &Binaries, report: &mut Report) -> anyhow::Result<()> {
    let dir = TempDir::new()?;
    let ids: Vec<String> = (0..N).map(|i| format!("d{i:03}")).collect();
    let child = bins.child.to_string_lossy();
    let body: String = ids
        .iter()
        .map(|id| deployment(id, &[&child, "exec", "--", "sleep", "1000"], ""))
        .collect();
    let mut sup = Supervisor::start(bins, &dir, "", &body, "info")?;
    sup.wait_ready(&ids, sup.started_us, Duration::from_secs(60))?;
    std::thread::sleep(SETTLE);
    let c0 = procs::cpu_ns(sup.pid).context("supervisor schedstat")?;
    let t0 = Instant::now();
    std::thread::sleep(WINDOW);
    let cpu = (procs::cpu_ns(sup.pid).context("supervisor schedstat")? - c0) as f64
        / 1e9
        / t0.elapsed().as_secs_f64();
    let rss = procs::vm_rss_bytes(sup.pid).context("supervisor VmRSS")?;
    let pss = pss_bytes(sup.pid).context("supervisor Pss")?;
    let shims: Vec<u64> = procs::descendants(sup.pid)
        .into_iter()
        .filter(|&p| comm(p) == "wfhost-child")
        .filter_map(pss_bytes)
        .collect();
    if shims.len() < N {
        bail!("only {} exec shims of {N} found", shims.len());
    }
    let shim = median(shims);
    let parts = procs::rss_parts(sup.pid);
    sup.stop();
    drop(sup);

    // runit: runsvdir and one runsv per service.
    let runit = match on_path("runsvdir") {
        Some(runsvdir) => {
            let rdir = TempDir::new()?;
            let sv = runit_dir(rdir.path(), N, "#!/bin/sh\nexec sleep 1000\n")?;
            let peer = Peer::spawn(Command::new(&runsvdir).arg("-P").arg(&sv))?;
            wait_descendants(peer.pid(), "sleep", N, Duration::from_secs(30))?;
            std::thread::sleep(Duration::from_secs(2));
            let runsv: Vec<u64> = procs::descendants(peer.pid())
                .into_iter()
                .filter(|&p| comm(p) == "runsv")
                .filter_map(pss_bytes)
                .collect();
            let root = pss_bytes(peer.pid()).unwrap_or(0);
            Some((root, median(runsv)))
        }
        None => None,
    };
    // horust: one process for every service.
    let horust_pss = match horust() {
        Some(horust) => {
            let hdir = TempDir::new()?;
            let services = hdir.path().join("services");
            std::fs::create_dir_all(&services)?;
            std::fs::create_dir_all(hdir.path().join("uds"))?;
            for i in 0..N {
                std::fs::write(
                    services.join(format!("s{i:03}.toml")),
                    "command = \"/bin/sleep 1000\"\nstdout = \"/dev/null\"\nstderr = \"/dev/null\"\n",
                )?;
            }
            let peer = Peer::spawn(
                Command::new(&horust)
                    .arg("--services-path")
                    .arg(&services)
                    .arg("--uds-folder-path")
                    .arg(hdir.path().join("uds"))
                    .arg("--config-path")
                    .arg(hdir.path().join("horust.toml")),
            )?;
            wait_descendants(peer.pid(), "sleep", N, Duration::from_secs(30))?;
            std::thread::sleep(Duration::from_secs(3));
            pss_bytes(peer.pid())
        }
        None => None,
    };

    report.row(
        "16c",
        "idle supervisor, 100 children: RSS",
        mib(rss as f64),
        runit.map_or("runit not installed".into(), |(root, _)| {
            format!("runsvdir PSS {}", mib(root as f64))
        }),
        "≤ 6 MiB",
        Verdict::of(rss <= 6 << 20),
    );
    match horust_pss {
        Some(h) => report.row(
            "16d",
            "idle supervisor, 100 children: PSS",
            format!("{} ({:.2}× horust)", mib(pss as f64), pss as f64 / h as f64),
            format!("horust {}", mib(h as f64)),
            "≤ horust's PSS",
            Verdict::of(pss <= h),
        ),
        None => report.error(
            "16d",
            "idle supervisor, 100 children: PSS",
            "≤ horust's PSS",
            &anyhow::anyhow!(
                "horust not found (bench/peers/run --install builds it into target/peers/horust); wfhost's PSS {}",
                mib(pss as f64)
            ),
        ),
    }
    report.row(
        "16e",
        "per-service overhead of a plain command: PSS",
        format!("{} (wfhost-child exec, median of {N})", mib(shim as f64)),
        runit.map_or("runit not installed".into(), |(_, runsv)| {
            format!("runsv {}", mib(runsv as f64))
        }),
        "≤ 0.15 MiB",
        Verdict::of(shim as f64 <= 0.15 * 1024.0 * 1024.0),
    );
    report.note(
        "16c",
        format!(
            "{} s after the last Ready (the start-up trim runs 3 s after it, the first pings at 10 s): VmRSS {}, \
             Pss {}, {}; CPU over {:.0} s {:.4} % of a core (goal ≤ 0.03 % at the default policy_interval: {}).",
            SETTLE.as_secs(),
            mib(rss as f64),
            mib(pss as f64),
            parts.map_or("-".into(), |(anon, file, _, threads)| format!(
                "RssAnon {} + RssFile {}, {threads} threads",
                mib(anon as f64),
                mib(file as f64)
            )),
            WINDOW.as_secs_f64(),
            100.0 * cpu,
            if 100.0 * cpu <= 0.03 { "met" } else { "missed" },
        ),
    );
    Ok(())
}

// --------------------------------------------------------- phase: rss

/// Figure 16f.
fn rss_watch(bins: &Binaries, report: &mut Report) -> anyhow::Result<()> {
    let ids: Vec<String> = (0..N).map(|i| format!("d{i:03}")).collect();
    let child = bins.child.to_string_lossy();
    let body: String = ids
        .iter()
        .map(|id| {
            deployment(
                id,
                &[&child, "exec", "--", "sleep", "1000"],
                "recycle = { max_rss = \"1GiB\" }",
            )
        })
        .collect();
    let cpu_of = |settings: &str| -> anyhow::Result<f64> {
        let dir = TempDir::new()?;
        let mut sup = Supervisor::start(bins, &dir, settings, &body, "info")?;
        sup.wait_ready(&ids, sup.started_us, Duration::from_secs(60))?;
        std::thread::sleep(Duration::from_secs(3));
        let c0 = procs::cpu_ns(sup.pid).context("supervisor schedstat")?;
        let t0 = Instant::now();
        std::thread::sleep(WINDOW);
        let c1 = procs::cpu_ns(sup.pid).context("supervisor schedstat")?;
        sup.stop();
        Ok(100.0 * (c1 - c0) as f64 / 1e9 / t0.elapsed().as_secs_f64())
    };
    let watched = cpu_of("")?;
    let polled = cpu_of("policy_interval = \"100ms\"")?;
    report.row(
        "16f",
        "RSS bound watched between ticks, 100 children: CPU",
        format!("{watched:.3} % of a core"),
        format!("polled every 100 ms: {polled:.3} %"),
        "≤ 0.2 % of a core",
        Verdict::of(watched <= 0.2),
    );
    report.note(
        "16f",
        "100 × exec -- sleep with recycle.max_rss = 1GiB, CPU over 10 s from schedstat. Default policy_interval \
         (60 s): each child is read when it could have grown to its bound at 1 GiB/s (here about once a \
         second), on a 100 ms grid, so a crossing is seen within 100 ms for a child growing no faster; the \
         reference reads every child every 100 ms. tests/tests/rss_watch.rs checks the reaction end to end.",
    );
    Ok(())
}
