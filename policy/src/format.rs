//! How durations are shown to operators: the way they write them in the
//! config (`"90s"`, `"1.500s"`, `"250ms"`), so a message quotes a setting
//! as it was set.

use std::time::Duration;

/// A duration as operators write it, for error messages: `"90s"`,
/// `"100ms"`, `"1.5s"`.
#[allow(clippy::arithmetic_side_effects)] // divisions by non-zero constants
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    let nanos = d.as_nanos();
    if !nanos.is_multiple_of(1_000_000) {
        let frac = format!("{:06}", nanos % 1_000_000);
        format!("{}.{}ms", nanos / 1_000_000, frac.trim_end_matches('0'))
    } else if ms.is_multiple_of(86_400_000) && ms > 0 {
        format!("{}d", ms / 86_400_000)
    } else if ms.is_multiple_of(3_600_000) && ms > 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else if ms > 1000 {
        format!("{}.{:03}s", ms / 1000, ms % 1000)
    } else {
        format!("{ms}ms")
    }
}
