//! What a fleet host holds: for each deployment whose lease it holds, the
//! exact epoch and the instant it must stop (its self-fence deadline, by
//! the monotonic clock). The store conditions every write concerning a
//! deployment on that epoch (DESIGN §10b), so a host that lost a lease,
//! or is past its deadline, cannot write for it; the host's lease loop
//! is the only writer of this table, and it hears
//! every refusal (`refused`) so it can kill what the refused write was for.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use tokio::sync::mpsc;

/// One held lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    /// The lease's epoch: writes are conditioned on exactly this one.
    pub epoch: i64,
    /// When this host must stop acting on it, renewed or not.
    pub until: Instant,
}

/// The leases one host holds, shared by its store connections and its
/// lease loop.
#[derive(Debug)]
pub struct Fence {
    host: String,
    held: Mutex<HashMap<String, Held>>,
    refusals: mpsc::UnboundedSender<String>,
}

impl Fence {
    /// The fence of `host`, holding nothing; refused deployments are sent
    /// to the returned receiver.
    pub fn new(host: &str) -> (Self, mpsc::UnboundedReceiver<String>) {
        let (refusals, rx) = mpsc::unbounded_channel();
        let fence = Self {
            host: host.to_owned(),
            held: Mutex::default(),
            refusals,
        };
        (fence, rx)
    }

    /// This host's id: the `holder` of its lease rows.
    pub fn host(&self) -> &str {
        &self.host
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The epoch to condition a write for `deployment` on, while it is held
    /// and its deadline has not passed; `None` means the write is fenced.
    pub fn epoch(&self, deployment: &str) -> Option<i64> {
        let now = Instant::now();
        self.map()
            .get(deployment)
            .filter(|h| now < h.until)
            .map(|h| h.epoch)
    }

    /// Every held lease whose deadline has not passed, as (deployment,
    /// epoch), sorted by deployment (the order rows are locked in).
    pub fn epochs(&self) -> Vec<(String, i64)> {
        let now = Instant::now();
        let mut all: Vec<(String, i64)> = self
            .map()
            .iter()
            .filter(|(_, h)| now < h.until)
            .map(|(d, h)| (d.clone(), h.epoch))
            .collect();
        all.sort();
        all
    }

    /// When this host must stop acting on `deployment`, while it holds it.
    pub fn deadline(&self, deployment: &str) -> Option<Instant> {
        self.map().get(deployment).map(|h| h.until)
    }

    /// `deployment` is held at `held` (acquired, or renewed).
    pub fn hold(&self, deployment: &str, held: Held) {
        self.map().insert(deployment.to_owned(), held);
    }

    /// A renewal that started before `until`'s reckoning renewed these
    /// leases: each still held at that epoch may be acted on until then
    /// (never less than a later acquisition already allowed).
    pub fn renewed(&self, renewed: &[(String, i64)], until: Instant) {
        let mut map = self.map();
        for (deployment, epoch) in renewed {
            if let Some(held) = map.get_mut(deployment)
                && held.epoch == *epoch
            {
                held.until = held.until.max(until);
            }
        }
    }

    /// `deployment` is no longer held: every write for it is refused from
    /// now on.
    pub fn release(&self, deployment: &str) -> Option<Held> {
        self.map().remove(deployment)
    }

    /// A write for `deployment` was refused by the fence: the lease loop
    /// hears it and kills whatever is still running for it.
    pub fn refused(&self, deployment: &str) {
        let _ = self.refusals.send(deployment.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_lease_fences_writes_once_released_or_past_its_deadline() {
        let (fence, mut refused) = Fence::new("a");
        assert_eq!(fence.epoch("orders"), None, "nothing held");
        let later = Instant::now() + Duration::from_secs(60);
        fence.hold(
            "orders",
            Held {
                epoch: 3,
                until: later,
            },
        );
        fence.hold(
            "billing",
            Held {
                epoch: 1,
                until: later,
            },
        );
        assert_eq!(fence.epoch("orders"), Some(3));
        assert_eq!(
            fence.epochs(),
            vec![("billing".to_owned(), 1), ("orders".to_owned(), 3)]
        );
        let now = Instant::now();
        fence.hold(
            "orders",
            Held {
                epoch: 3,
                until: now,
            },
        );
        assert_eq!(fence.epoch("orders"), None, "past its deadline");
        assert_eq!(fence.epochs(), vec![("billing".to_owned(), 1)]);
        fence.renewed(&[("orders".to_owned(), 2)], later);
        assert_eq!(fence.epoch("orders"), None, "another epoch is not renewed");
        fence.renewed(&[("orders".to_owned(), 3)], later);
        assert_eq!(fence.epoch("orders"), Some(3));
        fence.renewed(&[("billing".to_owned(), 1)], now);
        assert_eq!(fence.epoch("billing"), Some(1), "a renewal never shortens");
        assert_eq!(fence.release("orders").map(|h| h.epoch), Some(3));
        assert_eq!(fence.epoch("orders"), None, "released");
        fence.refused("orders");
        assert_eq!(refused.try_recv().ok().as_deref(), Some("orders"));
        assert_eq!(fence.host(), "a");
    }
}
