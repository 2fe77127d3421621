//! The lease and heartbeat rules of a fleet (DESIGN §10b), as pure
//! decisions over what the database said, with time passed in: expiry is
//! judged by the database's clock (`now_ms` of the read), a host's own
//! deadline by its monotonic clock from the start of its last successful
//! renewal. The I/O that runs them is the supervisor's lease loop
//! (`host::fleet`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// A host's lease timing (`[fleet] lease_ttl`, `lease_renew`) and what
/// follows from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long a lease lasts unless renewed.
    pub ttl: Duration,
    /// How often leases are renewed.
    pub renew: Duration,
}

impl Timing {
    /// How long past its expiry another host waits before taking a lease
    /// over: the old holder stopped a whole `renew` before the expiry
    /// ([`Timing::fence_after`]), so the two never overlap even if their
    /// clocks run at slightly different rates.
    pub fn grace(&self) -> Duration {
        self.renew.checked_div(2).unwrap_or_default()
    }

    /// How long a host leaves a deployment alone after losing, shedding or
    /// handing it off, and keeps one it just took before shedding it: no
    /// two hosts pass a deployment back and forth.
    pub fn cooldown(&self) -> Duration {
        self.ttl
    }

    /// How long after the start of its last successful renewal a host
    /// stops acting on a lease by itself: one renewal before the lease
    /// can run out in the database.
    pub fn fence_after(&self) -> Duration {
        self.ttl.saturating_sub(self.renew)
    }

    /// The self-fence deadline of a lease renewed (or acquired) by a
    /// statement that started at `started`.
    pub fn deadline(&self, started: Instant) -> Instant {
        started.checked_add(self.fence_after()).unwrap_or(started)
    }

    fn ms(d: Duration) -> i64 {
        i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
    }
}

/// A host as the database has it; times are database milliseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRow {
    /// Its id.
    pub host: String,
    /// Its last heartbeat.
    pub heartbeat_ms: i64,
    /// It is stopping: it takes nothing more, and hands its leases off.
    pub stopping: bool,
    /// An operator drained it (`wfhost host drain`): it takes nothing and
    /// hands every lease it holds to the others, until `host resume`.
    pub paused: bool,
}

/// A deployment's lease row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRow {
    /// The deployment.
    pub deployment: String,
    /// Raised by every acquisition.
    pub epoch: i64,
    /// Who holds it; none once released.
    pub holder: Option<String>,
    /// When it runs out (or, released, when a hand-off reservation ends).
    pub expires_ms: i64,
    /// A released lease handed to this host (`wfhost move`): only it may
    /// take it until `expires_ms`.
    pub reserved_for: Option<String>,
}

/// What one read of the fleet's tables said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    /// The database's clock at the read.
    pub now_ms: i64,
    /// Every host that has heartbeated.
    pub hosts: Vec<HostRow>,
    /// Every lease row.
    pub leases: Vec<LeaseRow>,
}

/// How a lease may be taken: the compare-and-set the database runs
/// (`store::postgres::lease`) re-checks the same condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// No host ever held it: create its row at epoch 1.
    New,
    /// Released by its holder (a graceful stop, a shed, a move).
    Released {
        /// The epoch it was released at.
        epoch: i64,
    },
    /// Its holder's lease ran out, and the grace after it passed.
    Expired {
        /// The epoch that ran out.
        epoch: i64,
        /// Who held it.
        holder: String,
    },
    /// This host still holds it in the database, but stopped acting on it
    /// (it self-fenced, or its task could not start): safe to take again.
    Stale {
        /// The epoch this host stopped acting on.
        epoch: i64,
    },
}

impl Claim {
    /// How it is said in the `lease_acquired` fact.
    pub fn how(&self) -> &'static str {
        match self {
            Self::New => "unowned",
            Self::Released { .. } => "released",
            Self::Expired { .. } => "expired",
            Self::Stale { .. } => "stale",
        }
    }
}

/// What this host knows of itself when it plans.
#[derive(Debug, Clone, Default)]
pub struct Mine {
    /// Its id.
    pub host: String,
    /// Every deployment of the config (every host runs the same).
    pub configured: Vec<String>,
    /// The leases it holds, with when (database ms) each was acquired.
    pub held: BTreeMap<String, i64>,
    /// Deployments it leaves alone until then (database ms).
    pub cooldown: BTreeMap<String, i64>,
    /// Deployments whose previous task is still ending: not taken again yet.
    pub busy: BTreeSet<String>,
    /// It is stopping: it takes nothing.
    pub stopping: bool,
}

/// What to do now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Leases to take, in this order.
    pub acquire: Vec<(String, Claim)>,
    /// Held leases to hand off (drain, then release), above the fair share.
    pub shed: Vec<String>,
    /// When (database ms) a lease this host would take becomes claimable.
    pub wake_ms: Option<i64>,
}

/// The hosts that count for the fair share: heartbeated within the TTL,
/// neither stopping nor drained, this one always (unless it is stopping
/// or drained).
pub fn live_hosts<'a>(
    view: &'a View,
    me: &'a str,
    stopping: bool,
    timing: &Timing,
) -> Vec<&'a str> {
    let ttl = Timing::ms(timing.ttl);
    let mut live: Vec<&str> = view
        .hosts
        .iter()
        .filter(|h| {
            h.host != me
                && !h.stopping
                && !h.paused
                && h.heartbeat_ms.saturating_add(ttl) > view.now_ms
        })
        .map(|h| h.host.as_str())
        .collect();
    if !stopping && !paused(view, me) {
        live.push(me);
    }
    live.sort_unstable();
    live
}

/// Whether `host` is drained by an operator (`wfhost host drain`).
pub fn paused(view: &View, host: &str) -> bool {
    view.hosts.iter().any(|h| h.host == host && h.paused)
}

/// Each live host's fair share of `deployments`: rounded up, so every
/// deployment has room somewhere.
pub fn fair_share(deployments: usize, live: usize) -> usize {
    deployments.div_ceil(live.max(1))
}

/// A host's preference for a deployment (rendezvous hashing, FNV-1a): the
/// hosts of a fleet starting together reach for different deployments.
pub fn rank(host: &str, deployment: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in host.bytes().chain([0]).chain(deployment.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// How `row` could be taken by `me` now, or when it could be (database ms).
fn claim(
    row: Option<&LeaseRow>,
    me: &str,
    now_ms: i64,
    grace_ms: i64,
) -> Result<Claim, Option<i64>> {
    let Some(row) = row else {
        return Ok(Claim::New);
    };
    match &row.holder {
        None => match &row.reserved_for {
            Some(to) if to != me && now_ms < row.expires_ms => Err(Some(row.expires_ms)),
            _ => Ok(Claim::Released { epoch: row.epoch }),
        },
        Some(holder) if holder == me => Ok(Claim::Stale { epoch: row.epoch }),
        Some(holder) => {
            let free_at = row.expires_ms.saturating_add(grace_ms);
            if free_at < now_ms {
                Ok(Claim::Expired {
                    epoch: row.epoch,
                    holder: holder.clone(),
                })
            } else {
                Err(Some(free_at.saturating_add(1)))
            }
        }
    }
}

/// What `mine` should acquire and shed given `view`.
pub fn plan(view: &View, mine: &Mine, timing: &Timing) -> Plan {
    let mut plan = Plan::default();
    if mine.stopping {
        return plan;
    }
    let me = mine.host.as_str();
    if paused(view, me) {
        // Drained: everything goes to the others at once, cooldown or not
        // (an operator asked), and nothing is taken.
        plan.shed = mine.held.keys().cloned().collect();
        return plan;
    }
    let now = view.now_ms;
    let rows: BTreeMap<&str, &LeaseRow> = view
        .leases
        .iter()
        .map(|l| (l.deployment.as_str(), l))
        .collect();
    let live = live_hosts(view, me, false, timing);
    let share = fair_share(mine.configured.len(), live.len());
    let grace = Timing::ms(timing.grace());
    let mut handed = Vec::new();
    let mut open = Vec::new();
    for d in &mine.configured {
        if mine.held.contains_key(d) || mine.busy.contains(d) {
            continue;
        }
        let row = rows.get(d.as_str()).copied();
        let for_me =
            row.is_some_and(|r| r.holder.is_none() && r.reserved_for.as_deref() == Some(me));
        let cooling = mine.cooldown.get(d).is_some_and(|until| now < *until);
        match claim(row, me, now, grace) {
            Ok(c) if for_me => handed.push((d.clone(), c)),
            Ok(_) if cooling => {
                plan.wake_ms = earliest(plan.wake_ms, mine.cooldown.get(d).copied());
            }
            Ok(c) => open.push((d.clone(), c)),
            Err(at) => plan.wake_ms = earliest(plan.wake_ms, at),
        }
    }
    // A hand-off is taken whatever the share; the rest up to it.
    let room = share.saturating_sub(mine.held.len().saturating_add(handed.len()));
    open.sort_by_key(|(d, _)| std::cmp::Reverse(rank(me, d)));
    if open.len() >= room {
        // The share fills now: nothing later is worth waking for.
        plan.wake_ms = None;
    }
    plan.acquire = handed;
    plan.acquire.extend(open.into_iter().take(room));
    plan.shed = shed(view, mine, &live, share, timing);
    plan
}

/// Held leases above the fair share that other live hosts have room for,
/// the ones this host prefers least first, never one taken within the
/// cooldown.
fn shed(view: &View, mine: &Mine, live: &[&str], share: usize, timing: &Timing) -> Vec<String> {
    let excess = mine.held.len().saturating_sub(share);
    if excess == 0 {
        return Vec::new();
    }
    let now = view.now_ms;
    let room_elsewhere: usize = live
        .iter()
        .filter(|h| **h != mine.host)
        .map(|h| {
            let holds = view
                .leases
                .iter()
                .filter(|l| l.holder.as_deref() == Some(*h) && l.expires_ms > now)
                .count();
            share.saturating_sub(holds)
        })
        .sum();
    let cooldown = Timing::ms(timing.cooldown());
    let mut movable: Vec<&String> = mine
        .held
        .iter()
        .filter(|(_, acquired)| acquired.saturating_add(cooldown) <= now)
        .map(|(d, _)| d)
        .collect();
    movable.sort_by_key(|d| rank(&mine.host, d));
    movable
        .into_iter()
        .take(excess.min(room_elsewhere))
        .cloned()
        .collect()
}

fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The held leases (deployment, epoch) a renewal did not renew: another
/// host took them, or they ran out in the database.
pub fn lost(held: &[(String, i64)], renewed: &[(String, i64)]) -> Vec<String> {
    held.iter()
        .filter(|h| !renewed.contains(h))
        .map(|(d, _)| d.clone())
        .collect()
}

#[cfg(test)]
mod tests;
