//! One replica of a deployment as `status` lists it, with its role and
//! the memory cell the policy tick writes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use serde::Serialize;

use super::State;

/// Resident memory of one child's process tree, written by the policy
/// tick and read by status and metrics without waking the deployment.
#[derive(Debug, Clone)]
pub struct RssCell(Arc<AtomicU64>);

/// What the cell holds before the first read.
const UNREAD: u64 = u64::MAX;

impl Default for RssCell {
    fn default() -> Self {
        Self(Arc::new(AtomicU64::new(UNREAD)))
    }
}

impl RssCell {
    /// The last reading, if any.
    pub fn get(&self) -> Option<u64> {
        Some(self.0.load(Ordering::Relaxed)).filter(|&b| b != UNREAD)
    }

    /// A new reading (`None`: the read failed).
    pub fn set(&self, bytes: Option<u64>) {
        self.0.store(bytes.unwrap_or(UNREAD), Ordering::Relaxed);
    }
}

/// What a replica is to its deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Takes mail.
    Serving,
    /// Started to replace another (an overlapping recycle), not ready yet.
    Successor,
    /// Being drained and stopped for good (replaced, or scaled away).
    Retiring,
}

/// One replica as `status` lists it.
#[derive(Debug, Clone)]
pub struct ReplicaView {
    /// Its index (`DEP/INDEX`).
    pub index: u32,
    /// Serving, successor or retiring.
    pub role: Role,
    /// Its life's state.
    pub state: State,
    /// Its live child's pid.
    pub pid: Option<u32>,
    /// Its live child's channel id.
    pub channel_id: Option<String>,
    /// When its child was spawned.
    pub started_at: Option<Instant>,
    /// Its child's resident memory.
    pub rss: Option<RssCell>,
    /// Mail items its child holds.
    pub in_hand: usize,
    /// Mail its child acknowledged.
    pub mail_done: u64,
    /// Steps in flight in its child.
    pub steps_in_flight: usize,
    /// Its child is draining.
    pub draining: bool,
}
