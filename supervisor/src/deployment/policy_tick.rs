//! The policy tick (DESIGN §5): one supervisor-wide timer reads every live
//! child's resident memory and checks its recycle bounds in the fixed order
//! uptime, RSS, grant age, and asks a deployment for a recycle only when a
//! bound is passed. One wake-up per tick for the whole fleet, rather than
//! one per child, keeps a tick over a thousand children to the cost of the
//! reads themselves.
//!
//! Between ticks, a child with an RSS bound is watched on its own schedule
//! (issue 16: a reaction within [`RSS_TICK`] without reading every child
//! every 100 ms, which cost 0.7 % of a core for 100 children): its next
//! read comes when it could have grown from its last reading to its bound
//! at [`RSS_GROWTH_CEILING`], clamped to one [`RSS_TICK`] at the soonest
//! and one policy tick at the latest. A child far below its bound is read
//! about once a second; one near it every 100 ms.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tracing::info;
use wfhost_policy::recycle::{Jitter, RecycleBounds};

use wfhost_policy::life::{RecycleCause, Request};

use super::{Ask, recycle};
use crate::procfs::RssReader;
use crate::status::RssCell;

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
    /// Reads RSS into status and asks for a recycle if a bound is passed;
    /// returns the reading.
    fn check(&self, now: Instant) -> Option<u64> {
        let rss_bytes = self
            .rss
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
            .and_then(|r| r.bytes(now).ok());
        self.rss_bytes.set(rss_bytes);
        if self.asked.load(Ordering::Relaxed) {
            return rss_bytes;
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
            return rss_bytes;
        };
        let reason = recycle::policy_reason(bound, &sample, &self.bounds, planned);
        let Some(asks) = self.asks.upgrade() else {
            return rss_bytes;
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
        rss_bytes
    }

    /// When this child's RSS is read next between policy ticks: `None`
    /// when it has no RSS bound or was already asked to recycle.
    fn next_rss_read(&self, rss: Option<u64>, now: Instant, interval: Duration) -> Option<Instant> {
        if self.asked.load(Ordering::Relaxed) {
            return None;
        }
        let bound = self.bounds.max_rss?;
        rss_read_in(rss, bound, interval).map(|d| now + d)
    }
}

/// The soonest a bounded child's RSS is read again after a reading, and
/// the reaction time of the RSS bound for a child growing no faster than
/// [`RSS_GROWTH_CEILING`].
pub const RSS_TICK: Duration = Duration::from_millis(100);

/// The fastest growth, in bytes per second, the RSS schedule allows for: a
/// child growing faster passes its bound between two reads by more than
/// one [`RSS_TICK`] of growth. 1 GiB/s is what one thread reaches by
/// faulting in fresh pages on this kind of machine.
pub const RSS_GROWTH_CEILING: u64 = 1 << 30;

/// How long after a reading of `rss` (bytes; `None`: unreadable) a child
/// bounded at `bound` is read again, between policy ticks `interval`
/// apart; `None` when the policy tick itself is often enough.
fn rss_read_in(rss: Option<u64>, bound: u64, interval: Duration) -> Option<Duration> {
    if interval <= RSS_TICK {
        return None;
    }
    // Unreadable (e.g. exiting): the policy tick tries again.
    let headroom = bound.saturating_sub(rss?);
    let secs = headroom as f64 / RSS_GROWTH_CEILING as f64;
    Some(Duration::from_secs_f64(secs).clamp(RSS_TICK, interval))
}

/// Every live child, by pid, with the time of its next RSS read between
/// policy ticks.
#[derive(Default)]
pub struct Watchlist {
    children: Mutex<BTreeMap<u32, Entry>>,
    /// The policy tick's interval, once it runs (a child added before
    /// gets its RSS schedule when it starts).
    interval: Mutex<Option<Duration>>,
    /// Wakes the tick's task when a child's schedule is sooner than its
    /// sleep.
    added: tokio::sync::Notify,
}

struct Entry {
    watched: Arc<Watched>,
    next_rss: Option<Instant>,
}

impl Watchlist {
    /// Starts watching a child that just became ready; its RSS is read at
    /// once so status shows it from the start.
    pub fn add(&self, watched: Watched) {
        let watched = Arc::new(watched);
        let now = Instant::now();
        let rss = watched.check(now);
        let interval = *self.interval.lock().unwrap_or_else(|p| p.into_inner());
        let next_rss = interval.and_then(|i| watched.next_rss_read(rss, now, i));
        self.children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(watched.pid, Entry { watched, next_rss });
        if next_rss.is_some() {
            self.added.notify_one();
        }
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
        if let Some(entry) = self
            .children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&pid)
        {
            entry.watched.asked.store(false, Ordering::Relaxed);
        }
    }

    /// One policy tick over every child; `interval` is the tick's.
    pub fn tick(&self, now: Instant, interval: Duration) {
        *self.interval.lock().unwrap_or_else(|p| p.into_inner()) = Some(interval);
        self.check(now, interval, |_| true);
    }

    /// Reads the bounded children whose RSS read is due, between ticks.
    pub fn watch_rss(&self, now: Instant, interval: Duration) {
        self.check(now, interval, |e| e.next_rss.is_some_and(|at| at <= now));
    }

    /// The soonest RSS read due between ticks, if any.
    pub fn next_rss_read(&self) -> Option<Instant> {
        self.children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter_map(|e| e.next_rss)
            .min()
    }

    /// Checks the children `due` picks, outside the lock (each check reads
    /// `/proc` or a cgroup file), then sets their next RSS reads.
    fn check(&self, now: Instant, interval: Duration, due: impl Fn(&Entry) -> bool) {
        let picked: Vec<Arc<Watched>> = self
            .children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|e| due(e))
            .map(|e| e.watched.clone())
            .collect();
        if picked.is_empty() {
            return;
        }
        let next: Vec<(u32, Option<Instant>)> = picked
            .iter()
            .map(|w| {
                let rss = w.check(now);
                (w.pid, w.next_rss_read(rss, now, interval))
            })
            .collect();
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        for (pid, at) in next {
            if let Some(entry) = children.get_mut(&pid) {
                entry.next_rss = at;
            }
        }
    }
}

/// Ticks every `interval`, and reads bounded children's RSS on their own
/// schedule in between, until the task is dropped.
pub async fn run(list: Arc<Watchlist>, interval: Duration) {
    // Children added before this task ran get their RSS schedule now.
    let start = Instant::now();
    list.tick(start, interval);
    let mut next_tick = start + interval;
    loop {
        // RSS reads wake the task on a grid of RSS_TICKs, so reads due
        // close together share one wake-up (at most ten a second).
        let wake = list
            .next_rss_read()
            .map_or(next_tick, |at| on_grid(start, at).min(next_tick));
        tokio::select! {
            _ = tokio::time::sleep_until(wake.into()) => {}
            // A new child may be due sooner than the sleep: look again.
            _ = list.added.notified() => continue,
        }
        let now = Instant::now();
        if now >= next_tick {
            list.tick(now, interval);
            // A late tick delays the next one rather than bunching them.
            next_tick = now + interval;
        } else {
            list.watch_rss(now, interval);
        }
    }
}

/// The first point of the RSS_TICK grid from `start` at or after `at`.
fn on_grid(start: Instant, at: Instant) -> Instant {
    let tick = RSS_TICK.as_nanos();
    let since = at.saturating_duration_since(start).as_nanos();
    let steps = since.div_ceil(tick);
    let nanos = u64::try_from(steps.saturating_mul(tick)).unwrap_or(u64::MAX);
    start + Duration::from_nanos(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn a_child_near_its_bound_is_read_every_rss_tick() {
        assert_eq!(
            rss_read_in(Some(95 * MIB), 100 * MIB, MINUTE),
            Some(RSS_TICK)
        );
        assert_eq!(
            rss_read_in(Some(200 * MIB), 100 * MIB, MINUTE),
            Some(RSS_TICK),
            "past the bound but not yet asked (a full queue): soon again"
        );
    }

    #[test]
    fn a_child_far_below_its_bound_is_read_when_it_could_have_reached_it() {
        let d = rss_read_in(Some(24 * MIB), 1024 * MIB, MINUTE).expect("watched");
        assert!(
            d > Duration::from_millis(970) && d < Duration::from_millis(980),
            "1000 MiB of headroom at 1 GiB/s: {d:?}"
        );
        assert_eq!(
            rss_read_in(Some(0), 1 << 40, MINUTE),
            Some(MINUTE),
            "never later than the policy tick"
        );
    }

    #[test]
    fn reads_due_close_together_share_a_wake_up() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(on_grid(t0, t0 + ms(1)), t0 + RSS_TICK);
        assert_eq!(on_grid(t0, t0 + ms(99)), t0 + RSS_TICK);
        assert_eq!(on_grid(t0, t0 + RSS_TICK), t0 + RSS_TICK);
        assert_eq!(on_grid(t0, t0 + ms(250)), t0 + 3 * RSS_TICK);
        assert_eq!(on_grid(t0, t0), t0, "a read due now is read now");
    }

    #[test]
    fn a_short_policy_interval_or_an_unreadable_child_is_left_to_the_tick() {
        assert_eq!(rss_read_in(Some(0), 100 * MIB, RSS_TICK), None);
        assert_eq!(
            rss_read_in(Some(0), 100 * MIB, Duration::from_millis(50)),
            None
        );
        assert_eq!(rss_read_in(None, 100 * MIB, MINUTE), None);
    }
}
