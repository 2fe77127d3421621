//! Mail a deployment's previous owner left in processing (DESIGN §10b):
//! when a fleet host takes a lease, whatever the old owner's children held
//! (their holders are another host's spawns, unknown here) goes back to
//! the head of the inbox before the new owner starts its child. Not
//! counted as a failure: the old host died, stopped or lost the lease,
//! which is no item's fault. Fenced on the new epoch, so a host that lost
//! the lease again meanwhile changes nothing.

use super::session::Statements;
use super::{PostgresStore, fence, signed};
use crate::store::StoreError;
use crate::store::fence::Fence;
use crate::store::questions::OPEN_QUESTION;

/// The history's words for a delivery the new owner returned.
const RETURNED_AT_TAKEOVER: &str = "returned, not counted: the host that sent it stopped, died or lost the lease before it was acknowledged";

impl PostgresStore {
    /// Every processing item of `deployment`, whoever holds it, back to the
    /// inbox at `at_ms`, fenced by `fence` (this host's leases); how many.
    pub fn fleet_return_mail(
        &mut self,
        fence: &Fence,
        deployment: &str,
        at_ms: u64,
    ) -> Result<u64, StoreError> {
        let session = self.session()?;
        let result = (|| -> Result<u64, postgres::Error> {
            let mut tx = session.begin()?;
            fence::check(&mut tx, Some(fence), deployment)?;
            tx.execute(
                "UPDATE mail_history SET ended_at_ms = $2, how = $3
                 WHERE ended_at_ms IS NULL AND attempt IS NOT NULL
                   AND mail_id IN (SELECT id FROM mail
                                   WHERE deployment = $1 AND state = 'processing')",
                &[&deployment, &signed(at_ms), &RETURNED_AT_TAKEOVER],
            )?;
            let changed = tx.execute(
                &format!(
                    "UPDATE mail SET state = 'inbox', holder_channel = NULL, holder_pid = NULL,
                         started = false, awaiting = {OPEN_QUESTION}
                     WHERE deployment = $1 AND state = 'processing'"
                ),
                &[&deployment],
            )?;
            tx.commit()?;
            Ok(changed)
        })();
        result.map_err(|e| self.fail("returning the previous owner's unacknowledged mail", &e))
    }
}
