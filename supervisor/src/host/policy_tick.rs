//! The policy tick (DESIGN §5): one supervisor-wide timer reads every live
//! child's resident memory and checks its recycle bounds in the fixed order
//! uptime, RSS, grant age, and asks a deployment for a recycle only when a
//! bound is passed. One wake-up per tick for the whole fleet, rather than
//! one per child, keeps a tick over a thousand children to the cost of the
//! reads themselves.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tracing::info;
use wfhost_policy::recycle::{Jitter, RecycleBounds};

use wfhost_policy::life::{RecycleCause, Request};

use crate::deployment::{Ask, recycle};
use crate::observe::status::RssCell;
use crate::procfs::RssReader;

/// One live child under the policy's eye.
pub struct Watched {
    /// Its deployment, for the log.
    pub deployment: String,
    /// Its pid.
    pub pid: u32,
    /// When it was spawned.
    pub started_at: Instant,
    /// When its grants were read.
    pub grants_read_at: Option<Instant>,
    /// The deployment's bounds.
    pub bounds: RecycleBounds,
    /// This child's jitter.
    pub jitter: Jitter,
    /// Its moment by `recycle.at`, if the deployment has a schedule.
    pub planned: Option<recycle::Planned>,
    /// Kept-open reader of its memory (cgroup `memory.current`, or its
    /// process tree's RSS).
    pub rss: Mutex<Option<RssReader>>,
    /// Where RSS is shown.
    pub rss_bytes: RssCell,
    /// Where a recycle is asked for (weak: the deployment's task owns the
    /// channel's life).
    pub asks: mpsc::WeakSender<Ask>,
    /// A recycle was asked for this child: later ticks only read RSS.
    pub asked: AtomicBool,
}

impl Watched {
    /// Reads RSS into status and asks for a recycle if a bound is passed.
    fn check(&self, now: Instant) {
        let rss_bytes = self
            .rss
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
            .and_then(|r| r.bytes(now).ok());
        self.rss_bytes.set(rss_bytes);
        if self.asked.load(Ordering::Relaxed) {
            return;
        }
        let planned = self.planned.as_ref();
        let sample = recycle::sample(
            self.started_at,
            rss_bytes,
            self.grants_read_at,
            planned,
            now,
        );
        let Some(bound) = self.bounds.check(&sample, self.jitter) else {
            return;
        };
        let reason = recycle::policy_reason(bound, &sample, &self.bounds, planned);
        let Some(asks) = self.asks.upgrade() else {
            return;
        };
        let request = Request::Recycle {
            cause: RecycleCause::Bound(bound),
            reason: reason.clone(),
            waiter: None,
        };
        // A full queue is tried again at the next tick.
        let ask = Ask::ForChild {
            pid: self.pid,
            request,
        };
        if asks.try_send(ask).is_ok() {
            self.asked.store(true, Ordering::Relaxed);
            info!(deployment = %self.deployment, pid = self.pid, reason = %reason, "recycle bound passed");
        }
    }
}

/// Every live child, by pid.
#[derive(Default)]
pub struct Watchlist {
    children: Mutex<BTreeMap<u32, Arc<Watched>>>,
}

impl Watchlist {
    /// Starts watching a child that just became ready; its RSS is read at
    /// once so status shows it from the start.
    pub fn add(&self, watched: Watched) {
        let watched = Arc::new(watched);
        watched.check(Instant::now());
        self.children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(watched.pid, watched);
    }

    /// Stops watching a child whose wiring ended.
    pub fn remove(&self, pid: u32) {
        self.children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&pid);
    }

    /// Lets the policy ask again for a child whose recycle was refused:
    /// the next tick that finds a bound passed asks anew.
    pub fn rearm(&self, pid: u32) {
        if let Some(watched) = self
            .children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&pid)
        {
            watched.asked.store(false, Ordering::Relaxed);
        }
    }

    /// One tick over every child.
    pub fn tick(&self, now: Instant) {
        let children: Vec<Arc<Watched>> = self
            .children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for child in children {
            child.check(now);
        }
    }
}

/// Ticks every `interval` until the task is dropped.
pub async fn run(list: Arc<Watchlist>, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        list.tick(Instant::now());
    }
}
