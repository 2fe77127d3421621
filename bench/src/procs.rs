//! Processes: clocks, `/proc` readings (CPU time, RSS, syscall counts),
//! spawning with an inherited fd 3, and making sure nothing a benchmark
//! started outlives it.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Unix time in microseconds from CLOCK_REALTIME, the clock of the
/// supervisor's log timestamps.
pub fn realtime_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// CPU time of every thread of `pid` in nanoseconds, from
/// `/proc/PID/task/*/schedstat` (first field: time on CPU, ns precision;
/// `/proc/PID/stat` counts in 10 ms clock ticks, too coarse for an idle
/// process).
pub fn cpu_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0u64;
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("schedstat"))
            && let Some(ns) = text
                .split_whitespace()
                .next()
                .and_then(|f| f.parse::<u64>().ok())
        {
            total += ns;
        }
    }
    Some(total)
}

/// `utime + stime` of `pid` from `/proc/PID/stat`, in seconds.
pub fn stat_cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of stat; after the comm, field 3 is index 0.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some((utime + stime) / hz)
}

/// Resident set size of `pid` (`VmRSS` of `/proc/PID/status`) in bytes.
pub fn vm_rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `RssAnon`, `RssFile` and `RssShmem` (bytes) and `Threads` of `pid`,
/// from `/proc/PID/status`: what its resident memory is made of.
pub fn rss_parts(pid: u32) -> Option<(u64, u64, u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let get = |key: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some((
        get("RssAnon:")? * 1024,
        get("RssFile:")? * 1024,
        get("RssShmem:")? * 1024,
        get("Threads:")?,
    ))
}

/// Resident bytes of the mappings of `file` in `pid` (its code and data
/// pages), summed from `/proc/PID/smaps`.
pub fn rss_of_file(pid: u32, file: &std::path::Path) -> Option<u64> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let want = std::fs::canonicalize(file).ok()?;
    let want = want.to_str()?;
    let mut inside = false;
    let mut total = 0;
    for line in smaps.lines() {
        let mut f = line.split_whitespace();
        let first = f.next().unwrap_or("");
        if first.contains('-') && first.chars().next().is_some_and(|c| c.is_ascii_hexdigit()) {
            inside = line.split_whitespace().nth(5) == Some(want);
        } else if inside && first == "Rss:" {
            total += f.next().and_then(|k| k.parse::<u64>().ok()).unwrap_or(0) * 1024;
        }
    }
    Some(total)
}

/// CPU time (user + system) this process has used, in seconds.
pub fn self_cpu_secs() -> f64 {
    // SAFETY: getrusage writes into the struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The parent of every process, from `/proc/*/stat`.
pub fn parents() -> HashMap<u32, u32> {
    let mut map = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return map;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            && let Some(i) = stat.rfind(')')
            && let Some(ppid) = stat[i + 1..]
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.parse().ok())
        {
            map.insert(pid, ppid);
        }
    }
    map
}

/// Every descendant of `root` (children, grandchildren, …), zombies included.
pub fn descendants(root: u32) -> Vec<u32> {
    let parents = parents();
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (&pid, &ppid) in &parents {
        children.entry(ppid).or_default().push(pid);
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        if let Some(kids) = children.get(&p) {
            for &k in kids {
                out.push(k);
                stack.push(k);
            }
        }
    }
    out
}

/// Makes this process a child subreaper: whatever a benchmark's processes
/// orphan (a grandchild whose parent was SIGKILLed) is reparented here
/// instead of to init, so [`kill_all_descendants`] can find and reap it.
pub fn become_subreaper() {
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (a thousand kept-open
/// `statm` files need more than the default 1,024). Returns the new limit.
pub fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
    lim.rlim_cur
}

/// SIGKILLs every descendant of this process and reaps the ones that are
/// (or became) its children, for up to `timeout`. Returns how many
/// processes were found. Call only when no `std::process::Child` of this
/// process is still to be waited for.
pub fn kill_all_descendants(timeout: Duration) -> usize {
    let me = std::process::id();
    let deadline = Instant::now() + timeout;
    let mut seen = std::collections::HashSet::new();
    loop {
        let procs = descendants(me);
        if procs.is_empty() {
            return seen.len();
        }
        for &pid in &procs {
            seen.insert(pid);
            // SAFETY: plain kill(2) of a descendant of ours.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        let parents = parents();
        for &pid in &procs {
            if parents.get(&pid) == Some(&me) {
                let mut status = 0;
                // SAFETY: waitpid on our own child.
                unsafe { libc::waitpid(pid as i32, &mut status, libc::WNOHANG) };
            }
        }
        if Instant::now() > deadline {
            eprintln!(
                "wfhost-bench: warning: {} processes still alive after cleanup: {procs:?}",
                procs.len()
            );
            return seen.len();
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reaps every child of this process that has exited (the orphans a
/// subreaper adopts among them), leaving the running ones alone.
pub fn reap_exited() {
    let mut status = 0;
    // SAFETY: waitpid without blocking; it only collects exited children.
    while unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } > 0 {}
}

/// A process reparented to this one (a subreaper).
#[derive(Debug, Clone)]
pub struct Adopted {
    /// Its pid.
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`).
    pub comm: String,
    /// Whether it was still running (not a zombie) when found.
    pub alive: bool,
}

/// SIGKILLs and reaps the processes that were reparented to this process
/// (it is a subreaper) — orphans some benchmark process left — except the
/// children in `ours`.
pub fn reap_adopted(ours: &[u32]) -> Vec<Adopted> {
    let me = std::process::id();
    let adopted: Vec<Adopted> = parents()
        .into_iter()
        .filter(|&(pid, ppid)| ppid == me && !ours.contains(&pid))
        .map(|(pid, _)| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().next())
                == Some("Z");
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map(|c| c.trim().to_owned())
                .unwrap_or_default();
            Adopted {
                pid,
                comm,
                alive: !zombie,
            }
        })
        .collect();
    for a in &adopted {
        // SAFETY: kill(2) and waitpid(2) of our own (adopted) child.
        unsafe {
            libc::kill(a.pid as i32, libc::SIGKILL);
            let mut status = 0;
            libc::waitpid(a.pid as i32, &mut status, 0);
        }
    }
    adopted
}

/// Kills (and reaps) everything this process started when dropped, also
/// when a benchmark panics.
#[derive(Debug, Default)]
pub struct CleanupGuard;

impl Drop for CleanupGuard {
    fn drop(&mut self) {
        let n = kill_all_descendants(Duration::from_secs(10));
        if n > 0 {
            eprintln!("wfhost-bench: cleaned up {n} leftover processes");
        }
    }
}

/// Spawns `cmd` with `fd` as its fd 3 (and close-on-exec cleared there),
/// in its own process group, dying with this process (`PR_SET_PDEATHSIG`).
pub fn spawn_with_fd3(cmd: &mut Command, fd: OwnedFd) -> std::io::Result<Child> {
    let raw = fd.as_raw_fd();
    cmd.process_group(0);
    // SAFETY: only async-signal-safe calls on integers between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            if raw == 3 {
                if libc::fcntl(3, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            } else if libc::dup2(raw, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn();
    drop(fd);
    child
}

/// Sends `sig` to `pid`, ignoring a process that is already gone.
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: plain kill(2).
    unsafe { libc::kill(pid as i32, sig) };
}

/// Median time of `n` runs of fork + exec + wait of `/bin/true`
/// (`std::process::Command`), in seconds, with every sample.
pub fn fork_exec_true(n: usize) -> Vec<f64> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let ok = Command::new("/bin/true")
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            samples.push(t.elapsed().as_secs_f64());
        }
    }
    samples
}
