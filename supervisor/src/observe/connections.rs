//! Control-socket connections and the requests they carried, since start:
//! counted by the control server, read by metrics (their ratio is how
//! many requests a client's connection carries; one means every request
//! paid its own connect and credential check).

use std::sync::atomic::{AtomicU64, Ordering};

static CONNECTIONS: AtomicU64 = AtomicU64::new(0);
static REQUESTS: AtomicU64 = AtomicU64::new(0);

/// A connection was admitted.
pub fn admitted() {
    CONNECTIONS.fetch_add(1, Ordering::Relaxed);
}

/// A request was read on one.
pub fn request() {
    REQUESTS.fetch_add(1, Ordering::Relaxed);
}

/// (admitted connections, requests read on them) since start.
pub fn served() -> (u64, u64) {
    (
        CONNECTIONS.load(Ordering::Relaxed),
        REQUESTS.load(Ordering::Relaxed),
    )
}
