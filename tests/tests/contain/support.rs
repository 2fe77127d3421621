//! What the containment tests share: telling their processes apart, a
//! cgroup subtree of their own, and the two ways a supervisor contains its
//! children.

#![allow(
    dead_code,
    reason = "included by each containment test file, each of which uses part of it"
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use wfhost_tests::{Supervisor, signal};

/// How long a process killed by the supervisor may take to be gone.
pub const GONE_WITHIN: Duration = Duration::from_secs(10);

/// Short drains and kills: the commands stop at once on SIGTERM anyway.
pub const QUICK: &str = "drain_timeout = \"1s\"\ndrain_deadline = \"3s\"\nkill_timeout = \"2s\"";

/// The sleep times of one test process: the stray and the command of case
/// `i` sleep `base + 2i` and `base + 2i + 1` seconds.
#[derive(Clone, Copy)]
pub struct Markers {
    base: u64,
}

impl Markers {
    pub fn new() -> Self {
        Self {
            base: 10_000_000 + u64::from(std::process::id() % 100_000) * 10,
        }
    }

    pub fn stray(self, i: usize) -> u64 {
        self.base + 2 * i as u64
    }

    pub fn main(self, i: usize) -> u64 {
        self.base + 2 * i as u64 + 1
    }

    /// Every live (not zombie) `sleep` of this test, by the time it sleeps.
    pub fn live(self) -> BTreeMap<u64, Vec<u32>> {
        let mut found: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return found;
        };
        for pid in dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                continue;
            };
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            if args.len() < 2 || !args[0].ends_with(b"sleep") {
                continue;
            }
            let Some(n) = std::str::from_utf8(args[1])
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
            else {
                continue;
            };
            if (self.base..self.base + 10).contains(&n) && wfhost_tests::alive(pid) {
                found.entry(n).or_default().push(pid);
            }
        }
        found
    }

    /// The pids of `pids` still alive.
    pub fn surviving(self, pids: &[u32]) -> Vec<u32> {
        let live: Vec<u32> = self.live().into_values().flatten().collect();
        pids.iter().copied().filter(|p| live.contains(p)).collect()
    }
}

/// Kills every process of the test's markers when dropped, so a failing
/// test leaves no stray behind for the next one.
pub struct Strays(pub Markers);

impl Drop for Strays {
    fn drop(&mut self) {
        for pid in self.0.live().into_values().flatten() {
            signal(pid, Signal::SIGKILL);
        }
    }
}

/// A fresh cgroup subtree for one supervisor, emptied and removed when
/// dropped.
pub struct CgroupRoot(pub PathBuf);

impl CgroupRoot {
    /// A new directory below this process's own cgroup in the cgroup v2
    /// hierarchy, or why there is none to be had.
    pub fn create() -> Result<Self, String> {
        let mount = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?
            .lines()
            .find_map(|line| {
                let (left, right) = line.split_once(" - ")?;
                let point = left.split_whitespace().nth(4)?;
                (right.split_whitespace().next() == Some("cgroup2")).then(|| PathBuf::from(point))
            })
            .ok_or("no cgroup v2 hierarchy is mounted")?;
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?
            .lines()
            .find_map(|l| l.strip_prefix("0::").map(str::to_owned))
            .ok_or("this process is in no cgroup v2 group")?;
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = mount
            .join(own.trim_start_matches('/'))
            .join(format!("wfh-test-{}-{n}", std::process::id()));
        std::fs::create_dir(&path).map_err(|e| {
            format!(
                "cannot create {} in the cgroup v2 hierarchy at {}: {e}",
                path.display(),
                mount.display()
            )
        })?;
        Ok(Self(path))
    }

    /// The controllers its children may use.
    pub fn controllers(&self) -> String {
        std::fs::read_to_string(self.0.join("cgroup.controllers"))
            .unwrap_or_default()
            .trim()
            .to_owned()
    }

    /// The cgroups in it.
    pub fn children(&self) -> Vec<PathBuf> {
        std::fs::read_dir(&self.0)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for CgroupRoot {
    fn drop(&mut self) {
        for child in self.children() {
            let _ = std::fs::write(child.join("cgroup.kill"), "1");
            let deadline = Instant::now() + Duration::from_secs(5);
            while std::fs::remove_dir(&child).is_err() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// How a test's supervisor contains its children.
pub enum Mode {
    Cgroup(CgroupRoot),
    ProcessTree,
}

impl Mode {
    /// Cgroups, or `None` after printing why the test is skipped.
    pub fn cgroup(test: &str) -> Option<Self> {
        match CgroupRoot::create() {
            Ok(root) => Some(Self::Cgroup(root)),
            Err(why) => {
                println!(
                    "SKIPPED {test}: {why} (needs a writable cgroup v2 hierarchy, e.g. as root)"
                );
                None
            }
        }
    }

    pub fn settings(&self) -> String {
        match self {
            Self::Cgroup(root) => format!("cgroup_root = \"{}\"", root.0.display()),
            Self::ProcessTree => "cgroup_root = \"none\"".into(),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Cgroup(_) => "cgroup",
            Self::ProcessTree => "process-tree",
        }
    }
}

/// The cgroup of the live child of `id`, from status.
pub fn cgroup_of(sup: &Supervisor, id: &str) -> PathBuf {
    let d = sup.deployment(id);
    PathBuf::from(
        d["cgroup"]
            .as_str()
            .unwrap_or_else(|| panic!("status names the child's cgroup: {d}")),
    )
}

/// Whether `pid` is listed in `cgroup`'s `cgroup.procs`.
pub fn in_cgroup(cgroup: &Path, pid: u32) -> bool {
    std::fs::read_to_string(cgroup.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .any(|l| l.trim() == pid.to_string())
}

/// `wfhost-child exec -- /bin/sleep M`, M the command marker of case 0.
pub fn sleeper(markers: Markers) -> String {
    format!(
        "['{{bin}}/wfhost-child', 'exec', '--', '/bin/sleep', '{}']",
        markers.main(0)
    )
}

/// The soft and hard limit in row `name` (e.g. `Max open files`) of
/// `/proc/PID/limits`, and the whole file for messages.
pub fn limit_row(pid: u32, name: &str) -> (Vec<String>, String) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap_or_default();
    let row = text
        .lines()
        .find(|l| l.starts_with(name))
        .map(|l| {
            l[name.len()..]
                .split_whitespace()
                .take(2)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    (row, text)
}
