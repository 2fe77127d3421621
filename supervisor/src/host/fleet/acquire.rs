//! Taking a lease: the takeover, the previous owner's unacknowledged mail
//! back in the inbox, then the deployment's task started here.

use std::time::Instant;

use tracing::{debug, info, warn};
use wfhost_policy::Fact;

use super::{Entry, Leases, State};
use crate::clock::unix_ms;
use crate::deployment::DeploymentHandle;
use crate::store::fence::Held;
use wfhost_policy::lease::Claim;

impl Leases {
    /// Takes `d`'s lease by `claim`; once the previous owner's
    /// unacknowledged mail is back in the inbox, starts its task.
    pub(super) async fn acquire(&mut self, d: String, claim: Claim) {
        let Some(cfg) = self.fleet.config(&d) else {
            return;
        };
        let (host, id, ttl, grace) = (
            self.fleet.host().to_owned(),
            d.clone(),
            self.fleet.ttl_ms(),
            self.fleet.grace_ms(),
        );
        let how = claim.how();
        let started = Instant::now();
        let taken = self
            .call(move |s| s.fleet_acquire(&host, &id, &claim, ttl, grace))
            .await;
        let acquired = match taken {
            Some(Ok(Some(a))) => a,
            Some(Ok(None)) => return debug!(deployment = %d, "another host took the lease first"),
            Some(Err(e)) => return warn!(deployment = %d, error = %e, "cannot take the lease"),
            None => return,
        };
        let until = self.fleet.timing.deadline(started);
        self.fleet.fence.hold(
            &d,
            Held {
                epoch: acquired.epoch,
                until,
            },
        );
        let (id, fence, at) = (d.clone(), self.fleet.fence.clone(), unix_ms());
        let replayed = self
            .call(move |s| s.fleet_return_mail(&fence, &id, at))
            .await;
        match replayed {
            Some(Ok(n)) if n > 0 => {
                info!(deployment = %d, items = n, "mail the previous owner left unacknowledged returned to the inbox")
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                warn!(deployment = %d, error = %e, "cannot return the previous owner's unacknowledged mail to the inbox; it returns when this host next takes the lease")
            }
            None => warn!(deployment = %d, "the lease connection's thread is gone"),
        }
        let (handle, join) =
            DeploymentHandle::start(cfg, self.shared.clone(), self.watchlist.clone());
        self.registry
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(d.clone(), handle.clone());
        let name = d.clone();
        self.tasks.spawn(async move {
            let _ = join.await;
            name
        });
        let epoch = acquired.epoch;
        self.held.insert(
            d.clone(),
            Entry {
                epoch,
                acquired_ms: self.db_now(),
                handle,
                state: State::Running,
                status_sent: None,
            },
        );
        self.fact(
            &d,
            Fact::LeaseAcquired {
                host: self.fleet.host().to_owned(),
                epoch: epoch.unsigned_abs(),
                how,
                from: acquired.previous,
            },
        );
    }
}
