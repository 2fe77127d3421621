//! The wall clock, as records meant to outlive this process keep it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in milliseconds (0 for a clock set before 1970).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}
