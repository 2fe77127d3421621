//! A fleet lease reaching the children (DESIGN §10b): each ready child is
//! told how long its supervisor still holds the deployment (`Lease {
//! valid_ms }`, up to the host's self-fence deadline), once it is ready
//! (before any mail) and again after each renewal. A child that hears
//! no newer lease by then drains on its own: its supervisor may be frozen
//! or cut off, and another host may take the deployment over.

use std::time::Instant;

use tracing::{debug, warn};
use wfhost_ipc::Control;
use wfhost_policy::crew::Which;
use wfhost_policy::life::RecycleCause;

use super::Driver;

impl Driver {
    /// Sends the lease to every ready child that has not heard the latest;
    /// replaces a child whose deadline passed while this host still holds
    /// the lease (a renewal reached it late: it drained on its own, and
    /// would take no mail again).
    pub(super) async fn send_leases(&mut self) {
        let Some(fleet) = self.parts.shared.fleet.clone() else {
            return;
        };
        let renewed = std::mem::take(&mut self.lease_due);
        // Not held: the lease loop's `LeaseLost` follows.
        let Some(until) = fleet.fence.deadline(&self.id) else {
            return;
        };
        let now = Instant::now();
        let mut outlived = Vec::new();
        for r in &mut self.replicas {
            let Some(w) = r.wired.as_mut() else { continue };
            if w.liveness.is_none() {
                continue;
            }
            if let Some(told) = w.lease_until
                && told <= now
                && until > now
                && !w.lease_replaced
            {
                w.lease_replaced = true;
                outlived.push(r.index);
            }
            if w.lease_until.is_some() && !renewed {
                continue;
            }
            let left = until.saturating_duration_since(now);
            let valid_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
            if let Err(e) = w.io.send(&r.cfg, Control::Lease { valid_ms }).await {
                debug!(deployment = %r.label, pid = w.io.pid, error = %e, "lease not sent");
            }
            w.lease_until = Some(until);
        }
        for index in outlived {
            warn!(deployment = %self.id, replica = index,
                "a child's lease deadline passed before a renewal reached it (this host still holds the lease): it drained on its own, so a new child replaces it");
            self.recycle(
                Which::One(index),
                RecycleCause::Child,
                "its fleet lease ran out before a renewal reached it".into(),
                None,
            );
        }
    }
}
