//! Mail delivery to one live child: FIFO from the durable inbox, a bounded
//! window in flight, acknowledgements recorded in the store, and, whatever
//! ends a child, its unacknowledged mail back at the head of the inbox
//! (DESIGN §6).

use tracing::{debug, info};
use wfhost_ipc::Outcome;
use wfhost_policy::fact::outcome_text;

use crate::shared::{Shared, unix_ms};

/// Most mail items in flight to one child at once.
pub const WINDOW: usize = 32;

/// What the dispatcher knows between store calls.
#[derive(Debug)]
pub struct Dispatch {
    in_flight: usize,
    wanted: bool,
}

impl Default for Dispatch {
    fn default() -> Self {
        // A new child may have a backlog waiting.
        Self {
            in_flight: 0,
            wanted: true,
        }
    }
}

impl Dispatch {
    /// Items in flight to the child.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// New mail may be waiting (accepted, acked, or replayed).
    pub fn want(&mut self) {
        self.wanted = true;
    }

    /// How many items to take from the inbox now, if any.
    pub fn to_take(&self) -> Option<usize> {
        (self.wanted && self.in_flight < WINDOW).then(|| WINDOW - self.in_flight)
    }

    /// `got` items of `asked` were taken and sent; fewer means the inbox is
    /// empty for now.
    pub fn took(&mut self, got: usize, asked: usize) {
        self.in_flight += got;
        if got < asked {
            self.wanted = false;
        }
    }

    /// One item was acknowledged: room for another.
    pub fn acked(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.wanted = true;
    }
}

/// Moves acknowledged mail to done: true when it was in processing (false
/// for a duplicate or unknown ack), or why the store refused.
pub async fn write_ack(
    shared: &Shared,
    deployment: &str,
    id: u64,
    outcome: &Outcome,
) -> Result<bool, String> {
    let (owner, text, at) = (deployment.to_owned(), outcome_text(outcome), unix_ms());
    let landed = shared
        .store
        .call(move |s| s.ack_mail(&owner, id, &text, at))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    if landed {
        // The store wrote the `mail_done` event with the ack.
        shared.events_written();
    } else {
        debug!(
            deployment,
            mail = id,
            "ack for mail not in processing; ignored"
        );
    }
    Ok(landed)
}

/// Returns a gone child's unacknowledged mail to the head of the inbox.
pub async fn replay(shared: &Shared, deployment: &str) -> Result<(), String> {
    let owner = deployment.to_owned();
    let n = shared
        .store
        .call(move |s| s.replay_mail(&owner))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    if n > 0 {
        info!(
            deployment,
            items = n,
            "unacknowledged mail returned to the head of the inbox"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_bounds_what_is_in_flight() {
        let mut d = Dispatch::default();
        assert_eq!(d.to_take(), Some(WINDOW));
        d.took(WINDOW, WINDOW);
        assert_eq!(d.to_take(), None, "window full");
        d.acked();
        assert_eq!(d.to_take(), Some(1));
        d.took(0, 1);
        assert_eq!(d.to_take(), None, "inbox empty until new mail");
        d.want();
        assert_eq!(d.to_take(), Some(1));
    }
}
