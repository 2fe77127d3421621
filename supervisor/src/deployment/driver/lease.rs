//! A fleet lease reaching the children (DESIGN §10b): each ready child is
//! told how long its supervisor still holds the deployment (`Lease {
//! valid_ms }`, up to the host's self-fence deadline), once it is ready
//! (before any mail) and again after each renewal. A child that hears
//! no newer lease by then drains on its own: its supervisor may be frozen
//! or cut off, and another host may take the deployment over.

use std::time::Instant;

use tracing::debug;
use wfhost_ipc::Control;

use super::Driver;

impl Driver {
    /// Sends the lease to every ready child that has not heard the latest.
    pub(super) async fn send_leases(&mut self) {
        let Some(fleet) = self.parts.shared.fleet.clone() else {
            return;
        };
        let renewed = std::mem::take(&mut self.lease_due);
        // Not held: the lease loop's `LeaseLost` follows.
        let Some(until) = fleet.fence.deadline(&self.id) else {
            return;
        };
        for r in &mut self.replicas {
            let Some(w) = r.wired.as_mut() else { continue };
            if w.liveness.is_none() || (w.lease_told && !renewed) {
                continue;
            }
            let left = until.saturating_duration_since(Instant::now());
            let valid_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
            if let Err(e) = w.io.send(&r.cfg, Control::Lease { valid_ms }).await {
                debug!(deployment = %r.label, pid = w.io.pid, error = %e, "lease not sent");
            }
            w.lease_told = true;
        }
    }
}
