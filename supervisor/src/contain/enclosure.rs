//! What holds one child: made before it is spawned (its cgroup, with the
//! deployment's limits written to it), told how to place the child, and
//! emptied once the child has exited.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use tracing::warn;
use wfhost_process::{Cgroup, ChildSpec, Counter, Rlimits, Spawner};

use super::{Containment, cgroups, host, orphans};
use crate::config::{DeploymentConfig, ResourceLimits};

/// A limit of the deployment that this child does not get as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NotApplied {
    /// The key under `limits`: `memory_max`, `nofile`, …
    pub limit: &'static str,
    /// Why, and what to do about it.
    pub why: String,
}

/// What holds one child and everything it starts.
pub struct Enclosure {
    deployment: String,
    channel_id: String,
    /// Its cgroup, in cgroup containment.
    cgroup: Option<Cgroup>,
    /// Whether the memory controller is on for its cgroup.
    memory: bool,
    /// Its cgroup's `cgroup.procs`, open until the child is spawned.
    procs: Option<Arc<File>>,
    rlimits: Rlimits,
    not_applied: Vec<NotApplied>,
    spawner: Spawner,
    /// The child's pid, once spawned.
    leader: Option<u32>,
    released: AtomicBool,
}

impl Enclosure {
    /// Makes what will hold the child of `cfg` spawned with `channel_id`:
    /// in cgroup containment its cgroup, with the limits the controllers
    /// allow written to it. Never fails: a cgroup that cannot be made
    /// leaves this child to its process tree, loudly.
    pub fn prepare(cfg: &DeploymentConfig, channel_id: &str, spawner: &Spawner) -> Self {
        let host = host();
        let mut not_applied = Vec::new();
        let (mut cgroup, mut memory, mut procs) = (None, false, None);
        let without = match host.root() {
            None => host
                .without_cgroups()
                .map(|why| format!("no cgroups: {why}")),
            Some(root) => match made(root, &cfg.id, channel_id) {
                Ok((cg, file)) => {
                    memory = root.missing("memory").is_none();
                    write_limits(&cg, &cfg.limits, |c| root.missing(c), &mut not_applied);
                    cgroup = Some(cg);
                    procs = Some(Arc::new(file));
                    None
                }
                Err(why) => {
                    warn!(deployment = %cfg.id, why = %why,
                        "cannot make the child's cgroup; this child is contained by its process tree only");
                    Some(why)
                }
            },
        };
        if let Some(why) = without {
            for (limit, set) in cgroup_limits(&cfg.limits) {
                if set {
                    not_applied.push(NotApplied {
                        limit,
                        why: why.clone(),
                    });
                }
            }
        }
        let rlimits = fit_rlimits(&cfg.limits, &mut not_applied);
        for n in &not_applied {
            host.say_once(&cfg.id, n);
        }
        host.set_live(channel_id, Some(&cfg.id));
        Self {
            deployment: cfg.id.clone(),
            channel_id: channel_id.to_owned(),
            cgroup,
            memory,
            procs,
            rlimits,
            not_applied,
            spawner: spawner.clone(),
            leader: None,
            released: AtomicBool::new(false),
        }
    }

    /// Tells `spec` where the child starts and with which rlimits.
    pub fn place(&self, spec: &mut ChildSpec) {
        spec.cgroup_procs = self.procs.clone();
        spec.rlimits = self.rlimits;
    }

    /// The child was spawned as `leader` (or not at all): the
    /// `cgroup.procs` kept open for its start is closed.
    pub fn spawned(&mut self, leader: Option<u32>) {
        self.procs = None;
        self.leader = leader;
    }

    /// `cgroup` or `process-tree`, for this child.
    pub fn kind(&self) -> &'static str {
        if self.cgroup.is_some() {
            "cgroup"
        } else {
            "process-tree"
        }
    }

    /// Its cgroup's directory, if it has one.
    pub fn cgroup_path(&self) -> Option<String> {
        self.cgroup.as_ref().map(|c| c.path().display().to_string())
    }

    /// The deployment's limits this child does not get, and why.
    pub fn not_applied(&self) -> &[NotApplied] {
        &self.not_applied
    }

    /// Its cgroup's `memory.current`, kept open, where the memory
    /// controller is on: one read per child per policy tick.
    pub fn memory_current(&self) -> Option<Counter> {
        let cg = self.cgroup.as_ref().filter(|_| self.memory)?;
        Counter::open(cg, "memory.current").ok()
    }

    /// SIGKILLs the live child `leader` and everything it started, now.
    pub fn kill(&self, leader: u32) {
        self.kill_contents();
        wfhost_process::kill_tree(leader);
    }

    /// SIGKILLs everything in its cgroup and every adopted orphan that
    /// descends from its child.
    fn kill_contents(&self) {
        if let Some(cg) = &self.cgroup
            && let Err(e) = cg.kill()
        {
            warn!(deployment = %self.deployment, cgroup = %cg.path().display(), error = %e,
                "cannot kill the child's cgroup; killing what it adopted instead");
        }
        orphans::kill_adopted(&self.spawner, &self.channel_id);
    }

    /// The child `leader` has been reaped: whatever it left behind is
    /// killed now, and reaped and its cgroup removed in the background
    /// (tracked, so a stopping supervisor waits for it). Once only.
    pub fn release(&self, leader: u32) {
        if self.released.swap(true, Ordering::SeqCst) {
            return;
        }
        self.spawner.released(leader);
        let host: &'static Containment = host();
        // The leader's pid is free for reuse now: only its group (which
        // keeps the id reserved while it has members) is signalled.
        let _ = wfhost_process::signal_group(leader, wfhost_process::Signal::SIGKILL);
        self.kill_contents();
        host.set_live(&self.channel_id, None);
        let (deployment, channel_id) = (self.deployment.clone(), self.channel_id.clone());
        let (cgroup, spawner) = (self.cgroup.clone(), self.spawner.clone());
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        host.track(rt.spawn(async move {
            orphans::until_gone(&spawner, &channel_id, &deployment).await;
            if let Some(cg) = cgroup
                && let Err(e) = cgroups::remove_when_empty(&cg).await
            {
                warn!(deployment = %deployment, cgroup = %cg.path().display(), error = %e,
                    "cannot remove the child's cgroup; it is tried again at the next start");
            }
        }));
    }
}

impl Drop for Enclosure {
    /// A child never reaped (its task ended early) still takes everything
    /// it started with it.
    fn drop(&mut self) {
        if !self.released.load(Ordering::SeqCst) {
            match self.leader {
                // Not reaped, so the pid is still this child's.
                Some(leader) => self.kill(leader),
                None => self.kill_contents(),
            }
            host().set_live(&self.channel_id, None);
            if let Some(cg) = &self.cgroup {
                let _ = cg.remove();
            }
        }
    }
}

/// A fresh cgroup for the child, with its `cgroup.procs` open for the
/// spawn; or why not.
fn made(
    root: &cgroups::Root,
    deployment: &str,
    channel_id: &str,
) -> Result<(Cgroup, File), String> {
    root.child(deployment, channel_id)
        .and_then(|cg| {
            let procs = cg.procs_for_spawn()?;
            Ok((cg, procs))
        })
        .map_err(|e| format!("cannot make its cgroup in {}: {e}", root.path().display()))
}

/// Each cgroup limit, and whether it is set.
fn cgroup_limits(limits: &ResourceLimits) -> [(&'static str, bool); 4] {
    [
        ("memory_max", limits.memory_max.is_some()),
        ("memory_high", limits.memory_high.is_some()),
        ("pids_max", limits.pids_max.is_some()),
        ("cpu_weight", limits.cpu_weight.is_some()),
    ]
}

/// Writes each cgroup limit that is set to `cg` where its controller is on
/// (`missing` says why one is not), noting the rest in `not_applied`.
fn write_limits(
    cg: &Cgroup,
    limits: &ResourceLimits,
    missing: impl Fn(&str) -> Option<String>,
    not_applied: &mut Vec<NotApplied>,
) {
    let knobs = [
        ("memory_max", "memory", "memory.max", limits.memory_max),
        ("memory_high", "memory", "memory.high", limits.memory_high),
        ("pids_max", "pids", "pids.max", limits.pids_max),
        ("cpu_weight", "cpu", "cpu.weight", limits.cpu_weight),
    ];
    for (limit, controller, file, value) in knobs {
        let Some(value) = value else { continue };
        if let Some(why) = missing(controller) {
            not_applied.push(NotApplied { limit, why });
            continue;
        }
        if let Err(e) = cg.write(file, &value.to_string()) {
            not_applied.push(NotApplied {
                limit,
                why: format!(
                    "writing {value} to {}/{file} failed: {e}",
                    cg.path().display()
                ),
            });
        }
    }
}

/// The rlimits of `limits`, lowered to what the supervisor can give;
/// each lowered one is noted in `not_applied`.
fn fit_rlimits(limits: &ResourceLimits, not_applied: &mut Vec<NotApplied>) -> Rlimits {
    let asked = Rlimits {
        nofile: limits.nofile,
        core: limits.core,
        address_space: limits.address_space,
    };
    match asked.fitted() {
        Ok((fitted, capped)) => {
            for c in capped {
                not_applied.push(NotApplied {
                    limit: c.limit,
                    why: format!(
                        "{} is above the supervisor's own hard limit {}, which the child gets instead; raise the supervisor's limit (e.g. Limit{}= in its unit)",
                        c.asked,
                        c.hard,
                        match c.limit {
                            "nofile" => "NOFILE",
                            "core" => "CORE",
                            _ => "AS",
                        }
                    ),
                });
            }
            fitted
        }
        Err(e) => {
            for (limit, set) in [
                ("nofile", asked.nofile.is_some()),
                ("core", asked.core.is_some()),
                ("as", asked.address_space.is_some()),
            ] {
                if set {
                    not_applied.push(NotApplied {
                        limit,
                        why: format!("cannot read the supervisor's own limits: {e}"),
                    });
                }
            }
            Rlimits::default()
        }
    }
}
