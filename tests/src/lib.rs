//! Helpers for black-box tests: find the built binaries, make short temp
//! dirs, write configs, run commands with deadlines, and read what an
//! operator reads (command output, the journal, the event log, the store).
//! Tests drive only the binaries.

pub mod certs;
pub mod control;
pub mod fleet;
pub mod netns;
pub mod node;
pub mod postgres;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a test waits for anything a supervisor or its children do.
pub const LONG: Duration = Duration::from_secs(30);

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

/// Runs `wfhost ARGS` to completion and returns its output, which must
/// hold no Rust debug form (see [`debug_forms`]).
pub fn wfhost(args: &[&str]) -> Output {
    let out = Command::new(bin("wfhost"))
        .args(args)
        .output()
        .expect("run wfhost");
    // `logs` prints what hosted programs wrote, which is theirs to word.
    let stdout = if args.first() == Some(&"logs") {
        String::new()
    } else {
        text(&out.stdout)
    };
    for (name, text) in [("stdout", stdout), ("stderr", text(&out.stderr))] {
        let found = debug_forms(&text);
        assert!(
            found.is_empty(),
            "`wfhost {}` wrote Rust debug forms on {name}:\n{}",
            args.join(" "),
            found.join("\n")
        );
    }
    out
}

/// The lines of `text` (a log or a command's output) that hold a Rust
/// debug form an operator should never read: `Some(…)` or a bare `None`.
/// What a hosted program wrote (`id[pid] stdout: …`, a JSON line with a
/// `stream`) is its own and is skipped, but not wfhost-child's own words.
pub fn debug_forms(text: &str) -> Vec<String> {
    let word = |line: &str, w: &str| {
        line.match_indices(w).any(|(i, _)| {
            let before = line[..i].chars().next_back();
            let after = line[i + w.len()..].chars().next();
            let edge = |c: Option<char>| c.is_none_or(|c| !c.is_alphanumeric() && c != '_');
            edge(before) && edge(after)
        })
    };
    text.lines()
        .map(strip_ansi)
        .filter(|line| {
            let hosted = ["] stdout: ", "] stderr: "].iter().any(|tag| {
                line.split_once(tag)
                    .is_some_and(|(_, said)| !said.starts_with("wfhost-child: "))
            }) || line.contains("\"stream\":\"stdout\"")
                || (line.contains("\"stream\":\"stderr\"") && !line.contains("wfhost-child: "));
            !hosted && (line.contains("Some(") || word(line, "None"))
        })
        .collect()
}

/// Runs `wfhost keygen --out PATH`; returns its output, the public key
/// and the key id it printed (empty where it printed none).
pub fn keygen(path: &Path) -> (Output, String, String) {
    let out = wfhost(&["keygen", "--out", path.to_str().expect("utf-8 path")]);
    let text = stdout(&out);
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_default()
            .to_string()
    };
    let (public, id) = (field("public key: "), field("key id: "));
    (out, public, id)
}

/// Runs `wfhost ARGS --config CONFIG` to completion.
pub fn client(config: &Path, args: &[&str]) -> Output {
    let mut full = args.to_vec();
    full.extend(["--config", config.to_str().expect("utf-8 path")]);
    wfhost(&full)
}

/// Bytes a command wrote, as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A command's stdout, as text.
pub fn stdout(out: &Output) -> String {
    text(&out.stdout)
}

/// A command's stderr, as text.
pub fn stderr(out: &Output) -> String {
    text(&out.stderr)
}

/// A command's exit code, stdout and stderr, for assertion messages.
pub fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        stdout(out),
        stderr(out)
    )
}

/// Asserts that the command `what` succeeded; returns its stdout.
pub fn ok(what: &str, out: &Output) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({:?}): {}{}",
        out.status.code(),
        stdout(out),
        stderr(out)
    );
    stdout(out)
}

/// Every non-blank line of `text` parsed as JSON (`--json` output).
pub fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON line {l:?}: {e}")))
        .collect()
}

/// Wall-clock Unix milliseconds, the clock of journal and event times.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// Whether `v` is a channel id: a string of 32 hex digits.
pub fn is_channel_id(v: &Value) -> bool {
    v.as_str()
        .is_some_and(|s| s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The bytes a hex string spells.
pub fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex {s}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// `(inbox, processing, done)` from a deployment's status (`u64::MAX`
/// for a count that is missing).
pub fn mail_counts(d: &Value) -> (u64, u64, u64) {
    let m = &d["mail"];
    let n = |k: &str| m[k].as_u64().unwrap_or(u64::MAX);
    (n("inbox"), n("processing"), n("done"))
}

/// The rows of `sql` (JSON arrays), read by python3's sqlite3 from the
/// store `db` on a connection of its own (WAL readers are never blocked by
/// a writer).
pub fn query(db: &Path, sql: &str) -> Vec<Value> {
    let script = format!(
        "import json, sqlite3, sys\n\
         c = sqlite3.connect(sys.argv[1], timeout=30)\n\
         print(json.dumps(c.execute({sql:?}).fetchall()))\n"
    );
    let out = python(db, &script);
    serde_json::from_str(&ok("python3 query", &out)).expect("rows")
}

/// Runs a python3 script (python3 ships sqlite3) with the store `db` as
/// `sys.argv[1]`.
pub fn python(db: &Path, script: &str) -> Output {
    Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(db)
        .output()
        .expect("run python3 (it ships sqlite3)")
}

/// Reads with `read` until two reads 100 ms apart are as long: the event
/// log and the journal are written just after what they describe. Panics
/// if it is still growing after [`LONG`].
fn settled(read: impl Fn() -> Vec<Value>) -> Vec<Value> {
    let mut last = read().len();
    poll(LONG, Duration::ZERO, || {
        std::thread::sleep(Duration::from_millis(100));
        let now = read();
        if now.len() == last {
            Ok(now)
        } else {
            last = now.len();
            Err(())
        }
    })
    .unwrap_or_else(|()| panic!("the log was still growing after {LONG:?}"))
}

/// A `[[deployment]]` table: `id`, `command` (a TOML array, see
/// [`command`]) and `extra` lines.
pub fn deployment(id: &str, command: &str, extra: &str) -> String {
    format!("[[deployment]]\nid = \"{id}\"\ncommand = {command}\n{extra}\n")
}

/// A TOML array of `parts`, each quoted as is (none may hold `"` or `\`);
/// `{bin}` stands for the binaries' directory.
pub fn command(parts: &[&str]) -> String {
    let quoted: Vec<String> = parts.iter().map(|p| format!("\"{p}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

/// `wfhost-child exec -- sh -c CMD` (no `"` or `\` in CMD).
pub fn exec(cmd: &str) -> String {
    exec_with(&[], cmd)
}

/// `wfhost-child exec FLAGS -- sh -c CMD`, e.g. with `["--drain", "wait"]`.
pub fn exec_with(flags: &[&str], cmd: &str) -> String {
    let mut parts = vec!["{bin}/wfhost-child", "exec"];
    parts.extend_from_slice(flags);
    parts.extend(["--", "sh", "-c", cmd]);
    command(&parts)
}

/// `wfhost-child demo ARGS`.
pub fn demo(args: &[&str]) -> String {
    let mut parts = vec!["{bin}/wfhost-child", "demo"];
    parts.extend_from_slice(args);
    command(&parts)
}

/// `wfh-testchild MODE`.
pub fn testchild(mode: &str) -> String {
    command(&["{bin}/wfh-testchild", mode])
}

/// Calls `f` every `every` until it returns `Ok`; once `timeout` has
/// passed, returns its last `Err` instead.
pub fn poll<T, E>(
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(every),
        }
    }
}

/// Polls `f` every 20 ms until it returns `Some`, or panics naming `what`
/// after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    poll(timeout, Duration::from_millis(20), || f().ok_or(()))
        .unwrap_or_else(|()| panic!("timed out after {timeout:?} waiting for {what}"))
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
        Self::start_with("", body, &[])
    }

    /// Writes a config with `settings` in its `[supervisor]` table (see
    /// [`write_config_with_settings`]) in a fresh temp dir and starts a
    /// supervisor on it with extra environment variables `env`.
    fn start_with(settings: &str, body: &str, env: &[(&str, &str)]) -> Self {
        let dir = TempDir::new();
        let config = dir.join("wfhost.toml");
        write_config_with_settings(&config, &dir.join("state"), settings, body);
        Self::launch(dir, config, env)
    }

    /// Starts a supervisor on an existing dir and config.
    pub fn start_in(dir: TempDir, config: PathBuf) -> Self {
        Self::launch(dir, config, &[])
    }

    /// Writes a config like [`Supervisor::start`] and starts `wfhost
    /// supervise` under `wrapper` (e.g. `ip netns exec NS`, which execs it
    /// in place, so the pid is the supervisor's).
    pub fn start_wrapped(body: &str, wrapper: &[&str]) -> Self {
        let dir = TempDir::new();
        let config = dir.join("wfhost.toml");
        write_config(&config, &dir.join("state"), body);
        Self::launch_with(dir, config, &[], wrapper)
    }

    /// Starts `wfhost supervise` with extra environment variables, logging
    /// to a fresh file in `dir`, and waits until its socket listens.
    fn launch(dir: TempDir, config: PathBuf, env: &[(&str, &str)]) -> Self {
        Self::launch_with(dir, config, env, &[])
    }

    fn launch_with(dir: TempDir, config: PathBuf, env: &[(&str, &str)], wrapper: &[&str]) -> Self {
        let log = dir.join(&format!(
            "supervisor-{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        ));
        let log_file = std::fs::File::create(&log).expect("create log");
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(bin("wfhost"));
                c
            }
            None => Command::new(bin("wfhost")),
        };
        let child = cmd
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
        client(&self.config, args)
    }

    /// `wfhost journal show --json`: every journal record, oldest first,
    /// once it has settled: records describing what already happened
    /// (spawn, exit, resume…) are committed just after it, so the journal
    /// is read until two reads 100 ms apart agree.
    pub fn journal(&self) -> Vec<Value> {
        settled(|| self.journal_so_far())
    }

    /// `wfhost journal show --json` as it stands now, for a journal that
    /// never settles (a deployment recycled all the time): it may lag
    /// behind what was just done.
    pub fn journal_so_far(&self) -> Vec<Value> {
        json_lines(&ok(
            "journal show",
            &self.client(&["journal", "show", "--json"]),
        ))
    }

    /// `wfhost events --json` (the whole durable backlog), once it has
    /// settled: events are written in batches just after what they
    /// describe, so the log is read until two reads 100 ms apart agree.
    pub fn events(&self) -> Vec<Value> {
        settled(|| self.events_so_far())
    }

    /// `wfhost events --json` as it stands now, for a log that never
    /// settles (a deployment recycled all the time): it may lag behind what
    /// was just done.
    pub fn events_so_far(&self) -> Vec<Value> {
        json_lines(&ok("events", &self.client(&["events", "--json"])))
    }

    /// Like [`Supervisor::events`], only the events after seq `after`.
    pub fn events_after(&self, after: u64) -> Vec<Value> {
        let after = after.to_string();
        settled(|| {
            json_lines(&ok(
                "events",
                &self.client(&["events", "--json", "--after", &after]),
            ))
        })
    }

    /// The store's database file.
    pub fn db(&self) -> PathBuf {
        self.dir.join("state/wfhost.db")
    }

    /// The ids of the `mail N: received` lines the demo children printed
    /// (only child `pid`'s, when given), in log order.
    pub fn received_mail(&self, pid: Option<u32>) -> Vec<u64> {
        let tag = pid.map(|pid| format!("[{pid}] stdout: "));
        self.plain_log()
            .lines()
            .filter(|l| tag.as_ref().is_none_or(|tag| l.contains(tag)))
            .filter_map(|l| {
                let rest = &l[l.find("mail ")? + 5..];
                let (n, _) = rest.split_once(": received ")?;
                n.parse().ok()
            })
            .collect()
    }

    /// `wfhost status --json`, parsed.
    pub fn status(&self) -> serde_json::Value {
        let out = ok("status", &self.client(&["status", "--json"]));
        let v: Value = serde_json::from_str(&out).expect("status JSON");
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
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        poll(timeout, Duration::from_millis(50), || {
            let d = self.deployment(id);
            if pred(&d) { Ok(d) } else { Err(d) }
        })
        .unwrap_or_else(|d| {
            panic!(
                "timed out after {timeout:?} waiting for {id}: {what}; last status {d}\nlog:\n{}",
                self.log()
            )
        })
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
        poll(timeout, Duration::from_millis(20), || {
            self.child.try_wait().expect("try_wait").ok_or(())
        })
        .unwrap_or_else(|()| {
            panic!(
                "supervisor did not exit within {timeout:?}\nlog:\n{}",
                self.log()
            )
        })
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
        // Every supervisor log of every test is scanned for debug forms.
        if !std::thread::panicking() {
            let found = debug_forms(&self.log());
            assert!(
                found.is_empty(),
                "the supervisor logged Rust debug forms:\n{}",
                found.join("\n")
            );
        }
    }
}

/// Writes a config file: a `[supervisor]` table with `state_dir`, then
/// `body` with `{bin}` replaced by the binaries' directory.
pub fn write_config(path: &Path, state_dir: &Path, body: &str) {
    write_config_with_settings(path, state_dir, "", body);
}

impl Supervisor {
    /// Like [`Supervisor::start`], with extra environment variables for the
    /// supervisor process (e.g. `NOTIFY_SOCKET`, `WATCHDOG_USEC`).
    pub fn start_with_env(body: &str, env: &[(&str, &str)]) -> Self {
        Self::start_with("", body, env)
    }

    /// The control socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("state/wfhost.sock")
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

    /// The plain log once it contains `text`. The supervisor writes its
    /// log from a thread of its own, so a line may land just after the
    /// answer or event that follows it; panics with the log if it never
    /// comes.
    pub fn wait_log(&self, text: &str) -> String {
        let found = poll(LONG, Duration::from_millis(20), || {
            let log = self.plain_log();
            if log.contains(text) { Ok(log) } else { Err(()) }
        });
        found.unwrap_or_else(|()| panic!("the log never said {text:?}:\n{}", self.plain_log()))
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
    let mut text = format!("[supervisor]\nstate_dir = \"{}\"\n", state_dir.display());
    let settings = settings.trim_end();
    if !settings.is_empty() {
        text.push_str(settings);
        text.push('\n');
    }
    text.push('\n');
    text.push_str(&body.replace("{bin}", &bin_dir().display().to_string()));
    std::fs::write(path, text).expect("write config");
}

impl Supervisor {
    /// Like [`Supervisor::start`], with `settings` added to the
    /// `[supervisor]` table (see [`write_config_with_settings`]).
    pub fn start_with_settings(settings: &str, body: &str) -> Self {
        Self::start_with(settings, body, &[])
    }
}

/// `wfhost mail result ID --json`: the item's end (its outcome, state and
/// reason) and its result parsed as JSON (an example's result); the exit
/// code is checked against the outcome.
pub fn mail_result_json(sup: &Supervisor, id: u64) -> (Value, Value) {
    let out = sup.client(&["mail", "result", &id.to_string(), "--json"]);
    let end: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("mail result {id} --json: {e}: {}", describe(&out)));
    let code = if end["outcome"] == "succeeded" { 0 } else { 1 };
    assert_eq!(out.status.code(), Some(code), "{}", describe(&out));
    let text = end["result_text"]
        .as_str()
        .unwrap_or_else(|| panic!("mail {id} has a UTF-8 result: {end}"));
    let result = serde_json::from_str(text).unwrap_or_else(|e| panic!("mail {id}: {e}: {text}"));
    (end, result)
}

/// Checks that `result` has the orders examples' shape (the same whatever
/// ended the order and however its steps were done), each step with
/// `step_keys`, and returns its steps' names.
pub fn example_steps(result: &Value, step_keys: &[&str]) -> Vec<String> {
    let keys = |v: &Value| -> Vec<String> {
        let mut k: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
        k.sort_unstable();
        k
    };
    assert_eq!(
        keys(result),
        ["attempt", "mail", "order", "status", "steps", "stopped"],
        "{result}"
    );
    let steps = result["steps"].as_array().expect("steps");
    steps
        .iter()
        .map(|s| {
            assert_eq!(keys(s), step_keys, "{result}");
            s["step"].as_str().expect("step").to_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::debug_forms;

    #[test]
    fn debug_forms_are_found_and_hosted_output_is_not_blamed() {
        let log = "\
2026-01-01T00:00:00Z  INFO a[1]: recycled old_pid=Some(5) new_pid=6
2026-01-01T00:00:00Z  INFO a[1]: ready run=None
2026-01-01T00:00:00Z  INFO a[1] stdout: print(None) from python
2026-01-01T00:00:00Z  INFO a[1] stderr: wfhost-child: step=Some(x)
2026-01-01T00:00:00Z  INFO a[1]: Nonexistent NoneSuch runs in flight: none
{\"message\":\"None\",\"stream\":\"stdout\"}
";
        let found = debug_forms(log);
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(found[0].contains("Some(5)") && found[1].contains("run=None"));
        assert!(found[2].contains("wfhost-child: step=Some(x)"));
    }
}
