//! The orphans the supervisor adopts as a child subreaper: processes that
//! left a child's process group and lost their parent. Each descends from
//! one child, named by its `WFHOST_ORIGIN`: it lives while that child
//! lives and dies with it. Without cgroups, an orphan whose child is gone
//! (or that hid its origin, so none can vouch for it) is killed by the
//! next sweep; with them, its cgroup holds it and dies with its child.
//! A dead orphan is reaped by pid either way.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use tokio::signal::unix::{SignalKind, signal};
use tracing::{info, warn};
use wfhost_process::{Spawner, is_zombie, kill_tree, origin_of, processes_from, try_reap};

use super::{Containment, host};

/// How often adopted orphans are checked besides every SIGCHLD, without
/// cgroups: catches one that outlived its child's clean-up by forking
/// while it was killed (a cgroup holds those). Each sweep lists the
/// supervisor's children: about 1 ms with 1,000 of them.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// How long the processes of an exited child may take to be gone.
const GONE_WITHIN: Duration = Duration::from_secs(10);

/// SIGKILLs every live adopted orphan that descends from `channel_id`,
/// with its tree; reaps the dead ones. Returns how many it killed.
pub fn kill_adopted(spawner: &Spawner, channel_id: &str) -> usize {
    let mut killed = 0;
    for pid in spawner.adopted() {
        if is_zombie(pid) {
            try_reap(pid);
        } else if origin_of(pid).as_deref() == Some(channel_id) {
            kill_tree(pid);
            killed += 1;
        }
    }
    killed
}

/// Kills adopted orphans of `channel_id` until none is left (one that
/// forks while it is killed leaves a new orphan behind), reaping them.
pub async fn until_gone(spawner: &Spawner, channel_id: &str, deployment: &str) {
    let deadline = Instant::now() + GONE_WITHIN;
    let mut pause = Duration::from_millis(1);
    let mut total = 0;
    loop {
        let killed = kill_adopted(spawner, channel_id);
        total += killed;
        let zombies = spawner.adopted().into_iter().any(is_zombie);
        if killed == 0 && !zombies {
            break;
        }
        if Instant::now() >= deadline {
            warn!(deployment, channel = %channel_id, "processes of an exited child are still there {}s after SIGKILL",
                GONE_WITHIN.as_secs());
            break;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
    if total > 0 {
        info!(deployment, channel = %channel_id, killed = total,
            "killed processes the child left behind outside its process group");
    }
}

/// One look at every adopted orphan: reaps the dead and, without cgroups,
/// kills those whose child is gone or whose origin cannot be told.
pub fn sweep(host: &Containment, spawner: &Spawner) {
    let by_origin = host.root().is_none();
    for pid in spawner.adopted() {
        if is_zombie(pid) {
            try_reap(pid);
            continue;
        }
        if !by_origin {
            continue;
        }
        match origin_of(pid) {
            Some(origin) if host.is_live(&origin) => {}
            origin => {
                warn!(
                    pid,
                    origin = origin.as_deref().unwrap_or("unknown"),
                    "killing an adopted process whose deployment's child is gone"
                );
                kill_tree(pid);
            }
        }
    }
}

/// At the end, when no child is left to own anything: kills every adopted
/// orphan and reaps it, until none is left.
pub async fn end_all(spawner: &Spawner) {
    let deadline = Instant::now() + GONE_WITHIN;
    let mut told = HashSet::new();
    loop {
        let adopted = spawner.adopted();
        if adopted.is_empty() || Instant::now() >= deadline {
            return;
        }
        for pid in adopted {
            if is_zombie(pid) {
                try_reap(pid);
                continue;
            }
            if told.insert(pid) {
                warn!(
                    pid,
                    origin = origin_of(pid).as_deref().unwrap_or("unknown"),
                    "killing an adopted process still there at the end"
                );
            }
            kill_tree(pid);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Sweeps at every SIGCHLD (an adopted orphan died) and, without cgroups,
/// every [`SWEEP_EVERY`], until the task is dropped.
pub async fn watch(spawner: Spawner) {
    let periodic = host().root().is_none();
    let mut sigchld = signal(SignalKind::child())
        .map_err(|e| warn!(error = %e, "cannot watch SIGCHLD; adopted processes are reaped once a second"))
        .ok();
    let mut ticker = tokio::time::interval(SWEEP_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            Some(()) = async { match sigchld.as_mut() {
                Some(s) => s.recv().await,
                None => std::future::pending().await,
            } } => {}
            _ = ticker.tick(), if periodic => {}
        }
        sweep(host(), &spawner);
    }
}

/// At start-up: kills every process on the machine descending from one of
/// `channels` (children a previous supervisor recorded) that a SIGKILL of
/// that supervisor left running, and waits until they are gone. They are
/// not this process's children, so they are not reaped here.
pub async fn kill_left_behind(channels: &HashSet<String>) -> usize {
    if channels.is_empty() {
        return 0;
    }
    let mut seen = HashSet::new();
    let deadline = Instant::now() + GONE_WITHIN;
    loop {
        let left = processes_from(channels);
        if left.is_empty() {
            break;
        }
        for (pid, origin) in &left {
            if seen.insert(*pid) {
                warn!(pid, channel = %origin, "killing a process a previous supervisor's child left behind");
            }
            kill_tree(*pid);
        }
        if Instant::now() >= deadline {
            warn!(
                processes = left.len(),
                "processes left by a previous supervisor survive SIGKILL"
            );
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    seen.len()
}
