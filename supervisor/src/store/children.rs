//! The children table as the store sees it: every child a supervisor
//! started and has not yet reaped, so a later supervisor can kill it if
//! this one dies first.

/// A child the supervisor started, kept so a later supervisor can kill it
/// if this one dies without reaping it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildRecord {
    /// The deployment it belongs to.
    pub deployment: String,
    /// Its pid (also its process group id).
    pub pid: u32,
    /// Field 22 of `/proc/PID/stat` (clock ticks since boot): with the pid,
    /// tells our child from an unrelated process that reused the pid.
    pub start_time: u64,
    /// The channel id it was spawned with.
    pub channel_id: String,
    /// Unix time in milliseconds of the spawn.
    pub spawned_at_ms: u64,
}
