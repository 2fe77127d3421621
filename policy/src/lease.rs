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
    /// Its weight in the fair share (`[fleet] capacity`, at least 1).
    pub capacity: u32,
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
    /// Held leases already being handed off (draining, then released):
    /// they count against what this host still has to give.
    pub leaving: BTreeSet<String>,
    /// It is stopping: it takes nothing.
    pub stopping: bool,
    /// The deployments that may run only on some hosts (`hosts = [..]`),
    /// with those hosts; any other may run anywhere.
    pub allowed: BTreeMap<String, Vec<String>>,
}

/// How many leases a host hands off in one round to make room for others
/// (a host joining, one resumed): a few at a time, so the fleet never
/// drains many deployments at once.
pub const SHED_PER_ROUND: usize = 2;

/// Whether `host` may run `deployment` under `allowed`.
pub fn eligible(allowed: &BTreeMap<String, Vec<String>>, deployment: &str, host: &str) -> bool {
    allowed
        .get(deployment)
        .is_none_or(|hosts| hosts.iter().any(|h| h == host))
}

/// What to do now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Leases to take, in this order.
    pub acquire: Vec<(String, Claim)>,
    /// Held leases to hand off (drain, then release), above the fair share.
    pub shed: Vec<String>,
    /// The host each shed lease is released for (the one with room for
    /// it): only it may take it for a lease's time, so a deployment
    /// shed for a joining host moves once, not through a third host.
    pub to: BTreeMap<String, String>,
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

/// Each live host's weight: its `capacity` (at least 1; 1 for a host
/// the view does not have yet, this one before its first heartbeat).
fn weights<'a>(view: &View, live: &[&'a str]) -> Vec<(&'a str, u64)> {
    live.iter()
        .map(|h| {
            let cap = view
                .hosts
                .iter()
                .find(|r| r.host == *h)
                .map_or(1, |r| r.capacity.max(1));
            (*h, u64::from(cap))
        })
        .collect()
}

/// `host`'s share of `deployments` by weight: its capacity over the live
/// hosts' total, rounded up, so every deployment has room somewhere.
pub fn weighted_share(deployments: usize, weights: &[(&str, u64)], host: &str) -> usize {
    let total: u64 = weights.iter().map(|(_, w)| *w).sum();
    let mine = weights
        .iter()
        .find(|(h, _)| *h == host)
        .map_or(0, |(_, w)| *w);
    if total == 0 || mine == 0 {
        return 0;
    }
    let n = u64::try_from(deployments).unwrap_or(u64::MAX);
    usize::try_from(n.saturating_mul(mine).div_ceil(total)).unwrap_or(usize::MAX)
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
    let weights = weights(view, &live);
    let share = weighted_share(mine.configured.len(), &weights, me);
    let grace = Timing::ms(timing.grace());
    let mut handed = Vec::new();
    let mut sole = Vec::new();
    let mut open = Vec::new();
    for d in &mine.configured {
        if mine.held.contains_key(d) || mine.busy.contains(d) || !eligible(&mine.allowed, d, me) {
            continue;
        }
        let row = rows.get(d.as_str()).copied();
        let for_me =
            row.is_some_and(|r| r.holder.is_none() && r.reserved_for.as_deref() == Some(me));
        let cooling = mine.cooldown.get(d).is_some_and(|until| now < *until);
        // Only this host of the live ones may run it: taken whatever the
        // share, or it would run nowhere.
        let only_here = live
            .iter()
            .all(|h| *h == me || !eligible(&mine.allowed, d, h));
        match claim(row, me, now, grace) {
            Ok(c) if for_me => handed.push((d.clone(), c)),
            Ok(_) if cooling => {
                plan.wake_ms = earliest(plan.wake_ms, mine.cooldown.get(d).copied());
            }
            Ok(c) if only_here => sole.push((d.clone(), c)),
            Ok(c) => open.push((d.clone(), c)),
            Err(at) => plan.wake_ms = earliest(plan.wake_ms, at),
        }
    }
    // A hand-off, and what only this host may run, are taken whatever the
    // share; the rest up to it.
    let room = share.saturating_sub(
        mine.held
            .len()
            .saturating_add(handed.len())
            .saturating_add(sole.len()),
    );
    open.sort_by_key(|(d, _)| std::cmp::Reverse(rank(me, d)));
    if open.len() >= room {
        // The share fills now: nothing later is worth waking for.
        plan.wake_ms = None;
    }
    plan.acquire = handed;
    plan.acquire.extend(sole);
    plan.acquire.extend(open.into_iter().take(room));
    let (gone, handed) = shed(view, mine, &weights, share, timing);
    plan.shed = gone;
    for (d, to) in handed {
        plan.shed.push(d.clone());
        plan.to.insert(d, to);
    }
    plan
}

/// Held leases to hand off: any this host may no longer run (its `hosts`
/// changed), released for anyone; and, above the fair share, those
/// another live host may run and has room for, each for that host, the
/// ones this host prefers least first, a few a round, never one taken
/// within the cooldown.
fn shed(
    view: &View,
    mine: &Mine,
    weights: &[(&str, u64)],
    share: usize,
    timing: &Timing,
) -> (Vec<String>, Vec<(String, String)>) {
    let me = mine.host.as_str();
    let out: Vec<String> = mine
        .held
        .keys()
        .filter(|d| !eligible(&mine.allowed, d, me))
        .cloned()
        .collect();
    let kept = mine.held.len().saturating_sub(out.len());
    let excess = kept.saturating_sub(share);
    if excess == 0 {
        return (out, Vec::new());
    }
    let now = view.now_ms;
    let configured = mine.configured.len();
    // What each live host has: the leases it holds, and those released
    // for it that it has not taken yet (a shed or a move on its way).
    let has = |h: &str| {
        view.leases
            .iter()
            .filter(|l| l.expires_ms > now)
            .filter(|l| match &l.holder {
                Some(holder) => holder == h,
                None => l.reserved_for.as_deref() == Some(h),
            })
            .count()
    };
    let share_of = |h: &str| weighted_share(configured, weights, h);
    // Each other live host's room under its share.
    let mut room: Vec<(&str, usize)> = weights
        .iter()
        .map(|(h, _)| *h)
        .filter(|h| *h != me)
        .map(|h| (h, share_of(h).saturating_sub(has(h))))
        .filter(|(_, r)| *r > 0)
        .collect();
    // Every host above its share reads the same rows: the room is given
    // out to them in the order of their names, so hosts shedding at the
    // same moment never send one host more than it has room for.
    let mut left: usize = room.iter().map(|(_, r)| *r).sum();
    let mut mine_to_give = 0;
    for (h, _) in weights {
        let over = if *h == me {
            excess
        } else {
            has(h).saturating_sub(share_of(h))
        };
        let give = over.min(left);
        left = left.saturating_sub(give);
        if *h == me {
            mine_to_give = give;
            break;
        }
    }
    let cooldown = Timing::ms(timing.cooldown());
    let mut movable: Vec<&String> = mine
        .held
        .iter()
        .filter(|(d, acquired)| {
            acquired.saturating_add(cooldown) <= now
                && eligible(&mine.allowed, d, me)
                && !mine.leaving.contains(*d)
        })
        .map(|(d, _)| d)
        .collect();
    movable.sort_by_key(|d| rank(me, d));
    let mut shed = Vec::new();
    for d in movable {
        // Those already on their way count: hosts see them as still
        // this one's, above its share, until released.
        let on_their_way = mine
            .leaving
            .iter()
            .filter(|d| eligible(&mine.allowed, d, me))
            .count();
        let new = mine_to_give
            .min(SHED_PER_ROUND)
            .saturating_sub(on_their_way);
        if shed.len() >= new {
            break;
        }
        // The eligible host with the most room, by name when tied.
        let best = room
            .iter_mut()
            .filter(|(h, r)| *r > 0 && eligible(&mine.allowed, d, h))
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)));
        if let Some((h, r)) = best {
            *r = r.saturating_sub(1);
            shed.push((d.clone(), (*h).to_owned()));
        }
    }
    (out, shed)
}

/// Why `deployment` (which may run only on `hosts`, or anywhere when
/// empty) runs on `holder`, or runs nowhere, for `status`.
pub fn placement(
    view: &View,
    deployment: &str,
    hosts: &[String],
    holder: Option<&str>,
    timing: &Timing,
) -> String {
    let live = live_hosts(view, "", true, timing);
    let list = hosts.join(", ");
    let drained: Vec<&str> = view
        .hosts
        .iter()
        .filter(|h| h.paused && (hosts.is_empty() || hosts.contains(&h.host)))
        .map(|h| h.host.as_str())
        .collect();
    let note = if drained.is_empty() {
        String::new()
    } else {
        format!("; drained: {}", drained.join(", "))
    };
    match holder {
        Some(h) if paused(view, h) => {
            format!("on {h}, which is drained: being handed to another host")
        }
        Some(h) if hosts.is_empty() => {
            format!("on {h}: its share of the fleet (any host may run {deployment})")
        }
        Some(h) if hosts.iter().any(|a| a == h) => format!("on {h}, one of its hosts ({list})"),
        Some(h) => format!("on {h}, which is not one of its hosts ({list}): being handed off"),
        None if hosts.is_empty() && live.is_empty() => {
            format!("runs nowhere: no host is live (every one is stopped, drained or gone){note}")
        }
        None if hosts.is_empty() => "runs nowhere yet: free, a live host takes it".to_owned(),
        None => {
            let up: Vec<&str> = live
                .iter()
                .copied()
                .filter(|h| hosts.iter().any(|a| a == h))
                .collect();
            if up.is_empty() {
                format!("runs nowhere: none of its hosts ({list}) is live{note}; it waits for one")
            } else {
                format!("runs nowhere yet: free, {} takes it", up.join(" or "))
            }
        }
    }
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
