//! The cgroup root the supervisor makes children's cgroups in: found (and
//! prepared) once at start-up, never assumed. A root is usable when it is
//! a directory of the cgroup v2 hierarchy the supervisor may write to;
//! which controllers it can hand to children is whatever it offers.

use std::path::Path;
use std::time::{Duration, Instant};

use tracing::{info, warn};
use wfhost_process::Cgroup;

use crate::config::CgroupRoot;

/// The controllers children are given where the root offers them: memory
/// (for `memory.current` and `memory_max`/`memory_high`), pids, cpu.
const WANTED: [&str; 3] = ["memory", "pids", "cpu"];

/// Name of the leaf the supervisor moves itself to when it ran in the
/// root: cgroup v2 hands resources only to cgroups without processes of
/// their own.
const SUPERVISOR_LEAF: &str = "supervisor";

/// How long the processes of a killed cgroup may take to go.
const EMPTY_WITHIN: Duration = Duration::from_secs(10);

/// Where children's cgroups are made.
pub struct Root {
    cgroup: Cgroup,
    /// Controllers enabled for children.
    enabled: Vec<String>,
    /// Controllers it offers at all (`cgroup.controllers`).
    offered: Vec<String>,
}

impl Root {
    /// The root `setting` names, prepared for children; or why there is
    /// none, in words for the log and status.
    pub fn find(setting: &CgroupRoot) -> Result<Self, String> {
        let cgroup = match setting {
            CgroupRoot::Off => return Err("cgroup_root = \"none\"".into()),
            CgroupRoot::At(path) => configured(path)?,
            CgroupRoot::Delegated => delegated()?,
        };
        let probe = cgroup.path().join("cgroup.procs");
        if !writable(&probe) {
            return Err(format!(
                "{} is not writable by the supervisor (run it as root or as the owner of the delegated cgroup)",
                probe.display()
            ));
        }
        leave_root(&cgroup)?;
        let offered = cgroup.controllers().unwrap_or_default();
        for c in WANTED {
            let on = cgroup.subtree_controllers().unwrap_or_default();
            if offered.iter().any(|o| o == c)
                && !on.iter().any(|o| o == c)
                && let Err(e) = cgroup.enable(c)
            {
                warn!(root = %cgroup.path().display(), controller = c, error = %e,
                    "cannot enable a controller for children's cgroups; limits that need it will not apply");
            }
        }
        let enabled = cgroup.subtree_controllers().unwrap_or_default();
        if !cgroup.has("cgroup.kill") {
            info!(root = %cgroup.path().display(),
                "this kernel has no cgroup.kill (Linux < 5.14): a cgroup is frozen and each member killed");
        }
        Ok(Self {
            cgroup,
            enabled,
            offered,
        })
    }

    /// The root directory.
    pub fn path(&self) -> &Path {
        self.cgroup.path()
    }

    /// Controllers children's cgroups have.
    pub fn enabled(&self) -> &[String] {
        &self.enabled
    }

    /// Why `controller` is not available to children, or `None` if it is.
    pub fn missing(&self, controller: &str) -> Option<String> {
        if self.enabled.iter().any(|c| c == controller) {
            return None;
        }
        let offered = if self.offered.is_empty() {
            "none".to_owned()
        } else {
            self.offered.join(" ")
        };
        Some(format!(
            "the {controller} controller is not enabled below {} (it offers: {offered}); delegate it (systemd: Delegate=yes) or choose another cgroup_root",
            self.path().display()
        ))
    }

    /// A fresh cgroup for the child of `deployment` spawned with
    /// `channel_id`.
    pub fn child(&self, deployment: &str, channel_id: &str) -> std::io::Result<Cgroup> {
        self.cgroup
            .create_child(&format!("{deployment}.{channel_id}"))
    }

    /// Kills what is in every child cgroup (`<deployment>.<channel_id>`)
    /// and returns them, to be removed once empty; `what` says in the log
    /// how they came to be there.
    pub fn kill_stale(&self, what: &str) -> Vec<Cgroup> {
        let children = self.cgroup.children().unwrap_or_default();
        let stale: Vec<Cgroup> = children
            .into_iter()
            .filter(|c| child_name(&c.name()).is_some())
            .collect();
        for cg in &stale {
            match cg.kill() {
                Ok(0) => {}
                Ok(killed) => warn!(cgroup = %cg.path().display(), processes = killed,
                    "killing the processes in a child's cgroup {what}"),
                Err(e) => warn!(cgroup = %cg.path().display(), error = %e,
                    "cannot kill the processes in a child's cgroup {what}"),
            }
        }
        stale
    }
}

/// Removes each of `stale` once its processes are gone.
pub async fn remove_all(stale: Vec<Cgroup>) {
    for cg in stale {
        if let Err(e) = remove_when_empty(&cg).await {
            warn!(cgroup = %cg.path().display(), error = %e, "cannot remove a child's cgroup");
        }
    }
}

/// Waits until `cg` is empty (its processes killed), then removes it.
pub async fn remove_when_empty(cg: &Cgroup) -> std::io::Result<()> {
    let deadline = Instant::now() + EMPTY_WITHIN;
    let mut pause = Duration::from_millis(1);
    while cg.populated().unwrap_or(false) {
        if Instant::now() >= deadline {
            return Err(std::io::Error::other(format!(
                "processes still in it {} after SIGKILL",
                wfhost_policy::format_duration(EMPTY_WITHIN)
            )));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
    cg.remove()
}

/// Whether `name` is a child's cgroup: `<deployment>.<32 hex digits>`.
fn child_name(name: &str) -> Option<(&str, &str)> {
    let (deployment, channel) = name.rsplit_once('.')?;
    (!deployment.is_empty()
        && channel.len() == 32
        && channel.bytes().all(|b| b.is_ascii_hexdigit()))
    .then_some((deployment, channel))
}

/// A configured root: created if missing (its parent must be a cgroup).
fn configured(path: &Path) -> Result<Cgroup, String> {
    if !path.exists() {
        let parent = path.parent().unwrap_or(Path::new("/"));
        match wfhost_process::is_cgroup2(parent) {
            Ok(true) => {}
            Ok(false) => {
                return Err(format!(
                    "cgroup_root {} does not exist and {} is not in a cgroup v2 hierarchy",
                    path.display(),
                    parent.display()
                ));
            }
            Err(e) => {
                return Err(format!(
                    "cgroup_root {}: cannot look at {}: {e}",
                    path.display(),
                    parent.display()
                ));
            }
        }
        std::fs::create_dir(path)
            .map_err(|e| format!("cannot create cgroup_root {}: {e}", path.display()))?;
    }
    Cgroup::open(path).map_err(|e| format!("cgroup_root {}: {e}", path.display()))
}

/// The supervisor's own cgroup, if systemd delegated it.
fn delegated() -> Result<Cgroup, String> {
    let own = wfhost_process::own_cgroup()
        .map_err(|e| format!("no cgroup v2 hierarchy to use ({e}); set cgroup_root"))?;
    let at_top = wfhost_process::unified_mount().is_some_and(|m| m == own.path());
    if at_top {
        return Err(format!(
            "the supervisor runs in the root cgroup ({}), which is not its own to divide; run it under systemd with Delegate=yes, or set cgroup_root",
            own.path().display()
        ));
    }
    // The leaf a previous start moved us to: the delegated cgroup is above.
    let own = if own.name() == SUPERVISOR_LEAF {
        own.path()
            .parent()
            .and_then(|p| Cgroup::open(p).ok())
            .unwrap_or(own)
    } else {
        own
    };
    if !is_delegated(own.path()) {
        return Err(format!(
            "its own cgroup {} is not delegated to it (no user.delegate or trusted.delegate mark); run it under systemd with Delegate=yes, or set cgroup_root",
            own.path().display()
        ));
    }
    Ok(own)
}

/// Whether systemd marked `path` as delegated (`Delegate=yes` sets
/// `trusted.delegate`, and from v251 `user.delegate`, to `1`).
fn is_delegated(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let mut c = path.as_os_str().as_bytes().to_vec();
    c.push(0);
    ["user.delegate\0", "trusted.delegate\0"]
        .iter()
        .any(|name| {
            let mut buf = [0u8; 8];
            // SAFETY: NUL-terminated path and name; the kernel writes at most
            // `buf.len()` bytes into `buf`.
            let n = unsafe {
                libc::getxattr(
                    c.as_ptr().cast(),
                    name.as_ptr().cast(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            n > 0 && buf[0] == b'1'
        })
}

/// Whether this process may write `path`.
fn writable(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let mut c = path.as_os_str().as_bytes().to_vec();
    c.push(0);
    // SAFETY: access reads the NUL-terminated path.
    unsafe { libc::access(c.as_ptr().cast(), libc::W_OK) == 0 }
}

/// Moves the supervisor out of `root` into its own leaf, if it is in
/// `root`: controllers can be enabled only for a cgroup without
/// processes. Other processes in `root` are left where they are (the
/// controllers then stay off, and limits say why).
fn leave_root(root: &Cgroup) -> Result<(), String> {
    let me = std::process::id();
    if !root.pids().unwrap_or_default().contains(&me) {
        return Ok(());
    }
    let leaf = root.create_child(SUPERVISOR_LEAF).map_err(|e| {
        format!(
            "cannot create {}/{SUPERVISOR_LEAF}: {e}",
            root.path().display()
        )
    })?;
    leaf.adopt(me).map_err(|e| {
        format!(
            "cannot move the supervisor into {}: {e}",
            leaf.path().display()
        )
    })?;
    info!(cgroup = %leaf.path().display(), "the supervisor moved into a leaf of its cgroup, so its children's cgroups can share resources");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_cgroups_are_told_apart_by_their_channel_id() {
        assert_eq!(
            child_name("billing.v2.0123456789abcdef0123456789abcdef"),
            Some(("billing.v2", "0123456789abcdef0123456789abcdef"))
        );
        assert_eq!(child_name("supervisor"), None);
        assert_eq!(child_name("billing.0123"), None);
        assert_eq!(child_name(".0123456789abcdef0123456789abcdef"), None);
        assert_eq!(child_name("x.0123456789abcdef0123456789abcdeg"), None);
    }

    #[test]
    fn no_cgroups_when_turned_off_or_pointing_nowhere_usable() {
        let off = Root::find(&CgroupRoot::Off).err().expect("off");
        assert!(off.contains("none"), "{off}");
        let nowhere = Root::find(&CgroupRoot::At("/tmp/wfh-not-a-cgroup".into()))
            .err()
            .expect("not a cgroup");
        assert!(
            nowhere.contains("not in a cgroup v2 hierarchy"),
            "{nowhere}"
        );
    }
}
