//! A real `wfhost supervise` for a benchmark: its own short temp dir and
//! config, JSON log lines (µs timestamps) in a file read as it grows, the
//! CLI against it, and a guard that stops it and everything it started on
//! every exit path.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::bins::Binaries;
use crate::log::{Line, LogTail};
use crate::procs;

/// A short temporary directory (`/tmp/wfb-XXXXXX`; Unix socket paths must
/// stay under 107 bytes), removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// Makes a fresh directory.
    pub fn new() -> anyhow::Result<Self> {
        let mut template = *b"/tmp/wfb-XXXXXX\0";
        // SAFETY: the template is a writable NUL-terminated buffer.
        let p = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
        if p.is_null() {
            bail!("mkdtemp failed: {}", std::io::Error::last_os_error());
        }
        let s = std::str::from_utf8(&template[..template.len() - 1])?;
        Ok(Self(PathBuf::from(s)))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A TOML string literal (JSON string syntax is valid TOML basic-string
/// syntax).
pub fn toml_str(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// One `[[deployment]]` table: `id`, `command`, then `extra` lines verbatim.
pub fn deployment(id: &str, command: &[&str], extra: &str) -> String {
    let argv: Vec<String> = command.iter().map(|a| toml_str(a)).collect();
    format!(
        "[[deployment]]\nid = {}\ncommand = [{}]\n{extra}\n\n",
        toml_str(id),
        argv.join(", ")
    )
}

/// A running supervisor.
#[derive(Debug)]
pub struct Supervisor {
    child: Option<Child>,
    /// Its pid.
    pub pid: u32,
    /// The config file it runs with.
    pub config: PathBuf,
    /// Its log, read as it grows.
    pub log: LogTail,
    /// CLOCK_REALTIME (µs) taken right before the spawn.
    pub started_us: i64,
    wfhost: PathBuf,
}

impl Supervisor {
    /// Writes `dir/wfhost.toml` (a `[supervisor]` table with `state_dir =
    /// dir/state` and `supervisor_extra`, then `body`) and starts
    /// `wfhost supervise --log-format json` on it with `RUST_LOG=rust_log`,
    /// its log going to a new file in `dir`.
    pub fn start(
        bins: &Binaries,
        dir: &TempDir,
        supervisor_extra: &str,
        body: &str,
        rust_log: &str,
    ) -> anyhow::Result<Self> {
        let config = dir.path().join("wfhost.toml");
        let state = dir.path().join("state");
        let text = format!(
            "[supervisor]\nstate_dir = {}\n{supervisor_extra}\n\n{body}",
            toml_str(&state.to_string_lossy())
        );
        std::fs::write(&config, text).context("writing the config")?;
        let log_path = dir
            .path()
            .join(format!("supervisor-{}.log", procs::realtime_us()));
        let log_file = std::fs::File::create(&log_path).context("creating the log file")?;
        let mut cmd = Command::new(&bins.wfhost);
        cmd.args(["supervise", "--log-format", "json", "--config"])
            .arg(&config)
            .env("RUST_LOG", rust_log)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone()?)
            .stderr(log_file);
        // SAFETY: prctl with integers between fork and exec: the supervisor
        // (and through its own death signal, its children) dies with us.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                );
                Ok(())
            });
        }
        let started_us = procs::realtime_us();
        let child = cmd.spawn().context("spawning wfhost supervise")?;
        let pid = child.id();
        let log = LogTail::open(&log_path)?;
        Ok(Self {
            child: Some(child),
            pid,
            config,
            log,
            started_us,
            wfhost: bins.wfhost.clone(),
        })
    }

    /// Polls the log (every 2 ms) until `f` finds something in the lines
    /// read so far; fails naming `what` after `timeout` or if the
    /// supervisor exits.
    pub fn wait_for<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut f: impl FnMut(&[Line]) -> Option<T>,
    ) -> anyhow::Result<T> {
        let deadline = Instant::now() + timeout;
        loop {
            self.log.poll();
            if let Some(v) = f(&self.log.lines) {
                return Ok(v);
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.log.poll();
                bail!(
                    "the supervisor exited ({status}) while waiting for {what}; last log lines:\n{}",
                    self.tail(15)
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "timed out after {timeout:?} waiting for {what}; last log lines:\n{}",
                    self.tail(15)
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// The last `n` log lines, as text.
    pub fn tail(&self, n: usize) -> String {
        let start = self.log.lines.len().saturating_sub(n);
        let mut out: Vec<String> = self.log.lines[start..]
            .iter()
            .map(|l| format!("  {} {} {:?}", l.level, l.msg, l.fields))
            .collect();
        out.extend(
            self.log
                .other
                .iter()
                .rev()
                .take(5)
                .map(|l| format!("  {l}")),
        );
        out.join("\n")
    }

    /// Waits until every id in `ids` has logged "ready" at or after `since`
    /// (µs); returns the ready lines' timestamps and pids by id order.
    pub fn wait_ready(
        &mut self,
        ids: &[String],
        since: i64,
        timeout: Duration,
    ) -> anyhow::Result<Vec<(i64, u64)>> {
        let index: std::collections::HashMap<&str, usize> = ids
            .iter()
            .enumerate()
            .map(|(i, s)| (s.as_str(), i))
            .collect();
        let mut found: Vec<Option<(i64, u64)>> = vec![None; ids.len()];
        let mut scanned = 0;
        let mut missing = ids.len();
        self.wait_for(
            &format!("{} deployments to be ready", ids.len()),
            timeout,
            |lines| {
                for l in &lines[scanned..] {
                    if l.msg == "ready"
                        && l.ts_us >= since
                        && let Some(&i) = l.deployment().and_then(|d| index.get(d))
                        && found[i].is_none()
                    {
                        found[i] = Some((l.ts_us, l.pid().unwrap_or(0)));
                        missing -= 1;
                    }
                }
                scanned = lines.len();
                (missing == 0).then_some(())
            },
        )?;
        Ok(found.into_iter().flatten().collect())
    }

    /// Runs `wfhost ARGS --config CONFIG` to completion; returns its output
    /// and wall time.
    pub fn client(&self, args: &[&str]) -> anyhow::Result<(Output, Duration)> {
        let t = Instant::now();
        let out = Command::new(&self.wfhost)
            .args(args)
            .arg("--config")
            .arg(&self.config)
            .stdin(Stdio::null())
            .output()
            .context("running the wfhost CLI")?;
        let took = t.elapsed();
        if !out.status.success() {
            bail!(
                "`wfhost {}` failed ({}): {}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok((out, took))
    }

    /// Stops the supervisor now (SIGQUIT: SIGKILL every child, exit;
    /// SIGKILL if it lingers), then kills and reaps anything left of what
    /// it started.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            procs::signal(self.pid, libc::SIGQUIT);
            let deadline = Instant::now() + Duration::from_secs(20);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) | Err(_) => break,
                    Ok(None) if Instant::now() > deadline => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                    Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            procs::kill_all_descendants(Duration::from_secs(10));
        }
    }
}

impl Supervisor {
    /// SIGKILLs this supervisor alone and waits for it, leaving the rest
    /// of the benchmark's processes running (a fleet's database, its
    /// other hosts): what it started dies with it (`PR_SET_PDEATHSIG`)
    /// and is reaped once exited.
    pub fn kill_alone(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        procs::reap_exited();
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop();
    }
}
