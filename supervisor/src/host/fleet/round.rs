//! A round of the lease loop: renew every lease held, then read the fleet
//! and take or hand off leases as `wfhost_policy::lease::plan` decides.

use std::time::{Duration, Instant};

use tracing::{debug, error, info};

use super::{Leases, State, tell};
use crate::deployment::{Ask, DeploymentHandle};
use crate::store::MailCounts;
use wfhost_policy::lease::{self, Mine};

impl Leases {
    /// One round: renew, then (unless stopping) read the fleet and take or
    /// hand off leases as the rules say.
    pub(super) async fn round(&mut self) {
        let started = Instant::now();
        self.round_now = false;
        self.next_round = started + self.fleet.timing.renew;
        self.renew().await;
        self.write_facts().await;
        self.serve_requests();
        // Hosts starting together see each other's heartbeat first.
        if self.stopping || started < self.joined + self.fleet.timing.renew {
            return;
        }
        let read_at = Instant::now();
        let Some(Ok(view)) = self.call(|s| s.fleet_view()).await else {
            return;
        };
        self.clock = (view.now_ms, read_at);
        let mine = self.mine();
        let plan = lease::plan(&view, &mine, &self.fleet.timing);
        self.wake = plan.wake_ms.map(|at| {
            let ahead = u64::try_from(at.saturating_sub(view.now_ms)).unwrap_or(0);
            read_at + Duration::from_millis(ahead)
        });
        // Taking many leases (each a takeover and a replay) must not hold
        // back the renewal of those held: past half a renewal, the rest
        // wait for the next round, which comes at once and renews first.
        for (d, claim) in plan.acquire {
            if started.elapsed() >= self.fleet.timing.renew / 2 {
                self.round_now = true;
                break;
            }
            self.acquire(d, claim).await;
        }
        let drained = lease::paused(&view, self.fleet.host());
        for d in plan.shed {
            if !self
                .held
                .get(&d)
                .is_some_and(|e| matches!(e.state, State::Running))
            {
                continue;
            }
            if drained {
                info!(deployment = %d, host = %self.fleet.host(), "this host is drained for maintenance: handing it off");
                self.hand_off(&d, "drain", None, None);
            } else {
                let to = plan.to.get(&d).cloned();
                info!(deployment = %d, host = %self.fleet.host(), to = to.as_deref().unwrap_or("any host"), "above this host's fair share: handing it off");
                self.hand_off(&d, "shed", to, None);
            }
        }
    }

    /// What the rules need to know of this host.
    fn mine(&mut self) -> Mine {
        let now = self.db_now();
        self.cooldown.retain(|_, until| *until > now);
        Mine {
            host: self.fleet.host().to_owned(),
            configured: self.fleet.deployments(),
            held: self
                .held
                .iter()
                .filter(|(_, e)| !matches!(e.state, State::Lost))
                .map(|(d, e)| (d.clone(), e.acquired_ms))
                .collect(),
            cooldown: self.cooldown.clone(),
            leaving: self
                .held
                .iter()
                .filter(|(_, e)| matches!(e.state, State::Leaving { .. }))
                .map(|(d, _)| d.clone())
                .collect(),
            busy: self
                .held
                .iter()
                .filter(|(_, e)| matches!(e.state, State::Lost))
                .map(|(d, _)| d.clone())
                .collect(),
            stopping: self.stopping,
            allowed: self.fleet.placement(),
        }
    }

    /// Heartbeats and renews every lease acted on, in one statement.
    async fn renew(&mut self) {
        let now = std::time::Instant::now();
        let held: Vec<(String, i64, Option<String>)> = self
            .held
            .iter()
            .filter(|(_, e)| !matches!(e.state, State::Lost))
            .map(|(d, e)| {
                let snapshot = snapshot(&e.handle, now);
                let changed = (e.status_sent.as_ref() != Some(&snapshot)).then_some(snapshot);
                (d.clone(), e.epoch, changed)
            })
            .collect();
        let pairs: Vec<(String, i64)> = held.iter().map(|(d, e, _)| (d.clone(), *e)).collect();
        let (host, ttl, stopping) = (
            self.fleet.host().to_owned(),
            self.fleet.ttl_ms(),
            self.stopping,
        );
        let sent: Vec<(String, Option<String>)> = held
            .iter()
            .map(|(d, _, s)| (d.clone(), s.clone()))
            .collect();
        let started = Instant::now();
        let renewed = self
            .call(move |s| s.fleet_renew(&host, ttl, &held, stopping))
            .await;
        let renewed = match renewed {
            Some(Ok(r)) => r,
            Some(Err(e)) => return self.renew_failed(&e.to_string()),
            None => return self.renew_failed("the lease connection's thread is gone"),
        };
        if self.renew_failing {
            self.renew_failing = false;
            info!(host = %self.fleet.host(), "the database renews leases again");
        }
        debug!(
            leases = pairs.len(),
            renewed = renewed.len(),
            took_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            "leases renewed"
        );
        let until = self.fleet.timing.deadline(started);
        self.fleet.fence.renewed(&renewed, until);
        for d in lease::lost(&pairs, &renewed) {
            self.lose(&d, "its lease was not renewed: another host took it over, or it ran out in the database".into());
        }
        for (d, status) in sent {
            if let Some(e) = self.held.get_mut(&d)
                && matches!(e.state, State::Running | State::Leaving { .. })
            {
                if status.is_some() {
                    e.status_sent = status;
                }
                tell(&e.handle, Ask::LeaseRenewed);
            }
        }
    }

    fn renew_failed(&mut self, error: &str) {
        if !self.renew_failing {
            self.renew_failing = true;
            // Left out while it holds no lease.
            let at = self
                .first_deadline()
                .map(|at| crate::fleet::ms(at.saturating_duration_since(Instant::now())));
            error!(host = %self.fleet.host(), error, self_fence_in_ms = at,
                "cannot renew this host's leases; it keeps trying, and stops every deployment it holds before its leases can run out");
        }
    }
}

/// The status the owner stores with a lease for other hosts' `status`:
/// what changes rarely (state, pids, counts), not uptimes or budgets used.
fn snapshot(handle: &DeploymentHandle, now: Instant) -> String {
    let mut json = handle.with_status(|s| s.to_json(now, &MailCounts::default()));
    if let Some(map) = json.as_object_mut() {
        for volatile in [
            "uptime_ms",
            "rss_bytes",
            "grants_age_ms",
            "mail",
            "replicas",
        ] {
            map.remove(volatile);
        }
        if let Some(drain) = map.get_mut("drain").and_then(|d| d.as_object_mut()) {
            drain.remove("used_ms");
        }
    }
    json.to_string()
}
