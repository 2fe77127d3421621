//! Letting go of a lease: handed off (shed, moved, removed, stopped) once
//! its task ends, or lost at once (its children killed); and leaving the
//! fleet once nothing is held.

use tokio::sync::oneshot;
use tracing::{debug, info, warn};
use wfhost_policy::Fact;
use wfhost_policy::life::Request;

use super::{Leases, State, tell};
use crate::deployment::{Ask, DeploymentHandle};

impl Leases {
    /// Stops `d` here for good and releases its lease once its task ends.
    pub(super) fn hand_off(
        &mut self,
        d: &str,
        why: &'static str,
        to: Option<String>,
        reply: Option<oneshot::Sender<Result<i64, String>>>,
    ) {
        let Some(e) = self.held.get_mut(d) else {
            if let Some(r) = reply {
                let _ = r.send(Err(format!("{d} does not run on this host")));
            }
            return;
        };
        if !matches!(e.state, State::Running) {
            if let Some(r) = reply {
                let _ = r.send(Err(format!("{d} is already being stopped on this host")));
            }
            return;
        }
        e.state = State::Leaving { why, to, reply };
        tell(&e.handle, Ask::Life(Request::Stop));
    }

    /// `d`'s lease is gone: every write for it is refused from now on,
    /// requests for it go to its new owner, its children are killed.
    pub(super) fn lose(&mut self, d: &str, why: String) {
        let Some(e) = self.held.get_mut(d) else {
            return;
        };
        if matches!(e.state, State::Lost) {
            return;
        }
        self.fleet.fence.release(d);
        self.registry
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(d);
        // At once, from here: the deployment's task may be waiting on a
        // store that cannot answer (a partition). They are this process's
        // unreaped children, so their pids cannot have been reused.
        for pid in live_pids(&e.handle) {
            let killed = wfhost_process::kill_tree(pid);
            debug!(deployment = %d, pid, descendants = killed, "lease lost: child's tree SIGKILLed");
        }
        tell(&e.handle, Ask::LeaseLost);
        if let State::Leaving { reply: Some(r), .. } = std::mem::replace(&mut e.state, State::Lost)
        {
            let _ = r.send(Err(format!(
                "{d}'s lease was lost before it was handed off: {why}"
            )));
        }
        let epoch = e.epoch.unsigned_abs();
        let until = self
            .db_now()
            .saturating_add(crate::fleet::ms(self.fleet.timing.cooldown()));
        self.cooldown.insert(d.to_owned(), until);
        let host = self.fleet.host().to_owned();
        self.fact(d, Fact::LeaseLost { host, epoch, why });
    }

    /// A write for `d` was refused by the fence.
    pub(super) fn refused(&mut self, d: String) {
        self.lose(
            &d,
            "a write for it was refused by the fence: this host no longer holds its lease".into(),
        );
    }

    /// `d`'s task ended: its lease is released (unless it was lost), once
    /// everything the task wrote has reached the store.
    pub(super) async fn ended(&mut self, d: String) {
        let d = d.as_str();
        let Some(e) = self.held.remove(d) else {
            return;
        };
        self.registry
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(d);
        let (why, to, reply) = match e.state {
            State::Lost => return,
            // Not asked by this loop: the supervisor is stopping.
            State::Running => {
                self.stopping = true;
                ("stop", None, None)
            }
            State::Leaving { why, to, reply } => (why, to, reply),
        };
        // The store thread writes in order: once this returns, so has
        // everything the task queued before it ended.
        let store = self.shared.store.clone();
        let _ = self.guarded(store.call(|_| ())).await;
        self.fleet.fence.release(d);
        let (host, id, epoch, ttl) = (
            self.fleet.host().to_owned(),
            d.to_owned(),
            e.epoch,
            self.fleet.ttl_ms(),
        );
        let target = to.clone();
        let released = self
            .call(move |s| s.fleet_release(&host, &id, epoch, target.as_deref(), ttl))
            .await;
        let answer = match released {
            Some(Ok(true)) => {
                let host = self.fleet.host().to_owned();
                let epoch_u = epoch.unsigned_abs();
                self.fact(
                    d,
                    Fact::LeaseReleased {
                        host,
                        epoch: epoch_u,
                        why,
                        to: to.clone(),
                    },
                );
                Ok(epoch)
            }
            Some(Ok(false)) => Err(format!("{d}'s lease was no longer this host's to release")),
            Some(Err(e)) => {
                warn!(deployment = %d, error = %e, "cannot release the lease; it runs out by itself and another host takes it then");
                Err(format!("cannot release {d}'s lease: {e}"))
            }
            None => Err("the lease connection's thread is gone".into()),
        };
        if why != "stop" {
            let until = self
                .db_now()
                .saturating_add(crate::fleet::ms(self.fleet.timing.cooldown()));
            self.cooldown.insert(d.to_owned(), until);
        }
        if let Some(r) = reply {
            let _ = r.send(answer);
        }
    }

    /// Leaves the fleet (the host row goes) once nothing is held.
    pub(super) async fn leave(&mut self) {
        self.write_facts().await;
        let host = self.fleet.host().to_owned();
        match self.call(move |s| s.fleet_leave(&host)).await {
            Some(Ok(())) => info!(host = %self.fleet.host(), "left the fleet"),
            Some(Err(e)) => {
                warn!(error = %e, "cannot remove this host from the fleet's hosts; it counts as gone once its heartbeat is older than lease_ttl")
            }
            None => {}
        }
    }
}

/// The pids of a deployment's live children.
fn live_pids(handle: &DeploymentHandle) -> Vec<u32> {
    handle.with_status(|s| {
        let mut pids: Vec<u32> = s
            .replicas
            .iter()
            .filter_map(|r| r.pid)
            .chain(s.pid)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    })
}
