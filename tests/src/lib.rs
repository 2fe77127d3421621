//! Helpers for black-box tests: find the built binaries, make short temp
//! dirs, and run commands with deadlines. Tests drive only the binaries.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The directory holding the workspace's built binaries: the test
/// executable lives in `target/<profile>/deps`, the binaries one level up.
pub fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("WFHOST_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    deps.parent().expect("profile dir").to_path_buf()
}

/// Path of a built binary of the workspace; panics with the build command
/// to run when it is missing.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins` before the tests",
        path.display()
    );
    path
}

/// A short temporary directory (Unix socket paths must stay under 107
/// bytes), removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Makes `/tmp/wfh-XXXXXX`.
    pub fn new() -> Self {
        let mut template = *b"/tmp/wfh-XXXXXX\0";
        // SAFETY: the template is a writable NUL-terminated buffer.
        let p = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
        assert!(
            !p.is_null(),
            "mkdtemp failed: {}",
            std::io::Error::last_os_error()
        );
        let s = std::str::from_utf8(&template[..template.len() - 1]).expect("ascii path");
        Self(PathBuf::from(s))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Default for TempDir {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if self.0.as_os_str().is_empty() {
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `wfhost ARGS` to completion and returns its output.
pub fn wfhost(args: &[&str]) -> Output {
    Command::new(bin("wfhost"))
        .args(args)
        .output()
        .expect("run wfhost")
}

/// Polls `f` every 20 ms until it returns `Some`, or panics naming `what`
/// after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The parent pid of `pid`, from `/proc/PID/stat`; `None` once it is gone.
pub fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Whether `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next());
    state.is_some_and(|s| s != "Z")
}

/// Every process whose parent is `pid` (zombies included).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| parent_of(p) == Some(pid))
        .collect()
}

/// Sends `signal` to `pid`, ignoring a process already gone.
pub fn signal(pid: u32, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), signal);
}

/// A running `wfhost supervise` with its own temp dir and config, killed
/// with everything it started when dropped (even when a test fails).
pub struct Supervisor {
    child: std::process::Child,
    dir: TempDir,
    config: PathBuf,
    log: PathBuf,
    seen: std::cell::RefCell<Vec<u32>>,
}

impl Supervisor {
    /// Writes a config with `state_dir` in a fresh temp dir plus `body`
    /// (deployment tables; `{bin}` is replaced by the binaries' directory)
    /// and starts a supervisor on it.
    pub fn start(body: &str) -> Self {
        let dir = TempDir::new();
        let config = dir.join("wfhost.toml");
        write_config(&config, &dir.join("state"), body);
        Self::start_in(dir, config)
    }

    /// Starts a supervisor on an existing dir and config.
    pub fn start_in(dir: TempDir, config: PathBuf) -> Self {
        Self::launch(dir, config, &[])
    }

    /// Starts `wfhost supervise` with extra environment variables, logging
    /// to a fresh file in `dir`, and waits until its socket listens.
    fn launch(dir: TempDir, config: PathBuf, env: &[(&str, &str)]) -> Self {
        let log = dir.join(&format!(
            "supervisor-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        let log_file = std::fs::File::create(&log).expect("create log");
        let child = Command::new(bin("wfhost"))
            .args(["supervise", "--config"])
            .arg(&config)
            .env("RUST_LOG", "debug")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::null())
            .stdout(log_file.try_clone().expect("dup log"))
            .stderr(log_file)
            .spawn()
            .expect("spawn wfhost supervise");
        let mut sup = Self {
            child,
            dir,
            config,
            log,
            seen: Default::default(),
        };
        sup.wait_listening();
        sup
    }

    /// The supervisor's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The config file path.
    pub fn config(&self) -> &Path {
        &self.config
    }

    /// The temp dir.
    pub fn dir(&self) -> &TempDir {
        &self.dir
    }

    /// Everything the supervisor has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Runs a client command against this supervisor (`--config` added).
    pub fn client(&self, args: &[&str]) -> Output {
        let mut full: Vec<&str> = args.to_vec();
        let config = self.config.to_str().expect("utf-8 path");
        full.extend(["--config", config]);
        wfhost(&full)
    }

    /// `wfhost status --json`, parsed.
    pub fn status(&self) -> serde_json::Value {
        let out = self.client(&["status", "--json"]);
        assert!(
            out.status.success(),
            "status failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("status JSON");
        for d in v["deployments"].as_array().into_iter().flatten() {
            if let Some(pid) = d["pid"].as_u64() {
                let mut seen = self.seen.borrow_mut();
                if !seen.contains(&(pid as u32)) {
                    seen.push(pid as u32);
                }
            }
        }
        v
    }

    /// One deployment's status object.
    pub fn deployment(&self, id: &str) -> serde_json::Value {
        let status = self.status();
        status["deployments"]
            .as_array()
            .and_then(|a| a.iter().find(|d| d["id"] == id).cloned())
            .unwrap_or_else(|| panic!("no deployment {id} in status: {status}"))
    }

    /// Waits until `pred` holds for deployment `id`, returning its status.
    pub fn wait_deployment(
        &self,
        id: &str,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            let d = self.deployment(id);
            if pred(&d) {
                return d;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {id}: {what}; last status {d}\nlog:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until `id` is ready and returns its pid.
    pub fn ready_pid(&self, id: &str, timeout: Duration) -> u32 {
        let d = self.wait_deployment(id, "ready", timeout, |d| {
            d["state"] == "ready" && d["pid"].is_u64()
        });
        d["pid"].as_u64().expect("pid") as u32
    }

    /// Sends `sig` to the supervisor.
    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        signal(self.pid(), sig);
    }

    /// Waits for the supervisor to exit and returns its status.
    pub fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() > deadline {
                panic!(
                    "supervisor did not exit within {timeout:?}\nlog:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Hands back the temp dir and config for a successor supervisor.
    /// Kills this supervisor but leaves its children to the successor.
    pub fn into_parts(mut self) -> (TempDir, PathBuf) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.seen.borrow_mut().clear();
        let dir = std::mem::replace(&mut self.dir, TempDir(PathBuf::new()));
        let config = self.config.clone();
        (dir, config)
    }

    fn kill_everything(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for &pid in self.seen.borrow().iter() {
            for c in children_of(pid) {
                signal(c, nix::sys::signal::Signal::SIGKILL);
            }
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.kill_everything();
    }
}

/// Writes a config file: a `[supervisor]` table with `state_dir`, then
/// `body` with `{bin}` replaced by the binaries' directory.
pub fn write_config(path: &Path, state_dir: &Path, body: &str) {
    let text = format!(
        "[supervisor]\nstate_dir = \"{}\"\n\n{}",
        state_dir.display(),
        body.replace("{bin}", &bin_dir().display().to_string())
    );
    std::fs::write(path, text).expect("write config");
}

impl Supervisor {
    /// Like [`Supervisor::start`], with extra environment variables for the
    /// supervisor process (e.g. `NOTIFY_SOCKET`, `WATCHDOG_USEC`).
    pub fn start_with_env(body: &str, env: &[(&str, &str)]) -> Self {
        let dir = TempDir::new();
        let config = dir.join("wfhost.toml");
        write_config(&config, &dir.join("state"), body);
        Self::launch(dir, config, env)
    }

    /// Waits until the control socket accepts connections: the file
    /// appears at bind(), a moment before listen(), and a client that
    /// connects in between is refused.
    pub fn wait_listening(&mut self) {
        let socket = self.dir.join("state/wfhost.sock");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "wfhost supervise exited ({status}) before listening:\n{}",
                    self.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "the control socket never listened:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The log with terminal colour codes removed, so `key=value` fields
    /// can be matched as plain text.
    pub fn plain_log(&self) -> String {
        strip_ansi(&self.log())
    }
}

/// Removes ANSI escape sequences (`ESC [ … letter`) from `text`.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Writes a config like [`write_config`], with `settings` (lines such as
/// `metrics_listen = "127.0.0.1:9464"`) added to the `[supervisor]` table.
pub fn write_config_with_settings(path: &Path, state_dir: &Path, settings: &str, body: &str) {
    let text = format!(
        "[supervisor]\nstate_dir = \"{}\"\n{}\n\n{}",
        state_dir.display(),
        settings.trim_end(),
        body.replace("{bin}", &bin_dir().display().to_string())
    );
    std::fs::write(path, text).expect("write config");
}

impl Supervisor {
    /// Like [`Supervisor::start`], with `settings` added to the
    /// `[supervisor]` table (see [`write_config_with_settings`]).
    pub fn start_with_settings(settings: &str, body: &str) -> Self {
        let dir = TempDir::new();
        let config = dir.join("wfhost.toml");
        write_config_with_settings(&config, &dir.join("state"), settings, body);
        Self::start_in(dir, config)
    }
}
