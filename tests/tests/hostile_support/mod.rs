//! What the hostile-input test files share: reading the supervisor's
//! memory as the kernel counts it.

/// A `/proc/PID/status` field in KiB (`VmRSS`, `VmHWM`); 0 when the
/// process or the field is gone.
pub fn kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
