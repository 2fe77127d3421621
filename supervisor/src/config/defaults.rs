//! Built-in defaults, used where neither the deployment nor `[defaults]`
//! sets a key. Where the pure policy has a default of its own, it is the
//! one source and these name it.

use std::time::Duration;

/// `policy_interval`.
pub const POLICY_INTERVAL: Duration = Duration::from_secs(60);
/// `event_retention`.
pub const EVENT_RETENTION: u64 = 100_000;
/// `mail_retention`: a week of retries stay idempotent.
pub const MAIL_RETENTION: Duration = Duration::from_secs(7 * 86_400);
/// `drain_timeout`.
pub const DRAIN_TIMEOUT: Duration = wfhost_policy::DEFAULT_DRAIN_TIMEOUT;
/// `drain_deadline`.
pub const DRAIN_DEADLINE: Duration = Duration::from_secs(90);
/// `kill_timeout`.
pub const KILL_TIMEOUT: Duration = wfhost_policy::DEFAULT_KILL_TIMEOUT;
/// `ready_timeout`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// `liveness_interval`.
pub const LIVENESS_INTERVAL: Duration = wfhost_policy::DEFAULT_LIVENESS_INTERVAL;
/// `liveness_timeout`.
pub const LIVENESS_TIMEOUT: Duration = wfhost_policy::DEFAULT_LIVENESS_TIMEOUT;
/// `max_frame_bytes`.
pub const MAX_FRAME_BYTES: u64 = 1 << 20;
/// `max_mail_bytes`.
pub const MAX_MAIL_BYTES: u64 = 256 << 10;
/// `max_result_bytes`.
pub const MAX_RESULT_BYTES: u64 = 1 << 20;
/// `max_inbox`.
pub const MAX_INBOX: u64 = 10_000;
/// `max_deliveries`: with the default restart intensity (5 in 60 s), a
/// poison item is quarantined before its crashes could fail the deployment.
pub const MAX_DELIVERIES: u64 = 5;
/// `restart.backoff_initial`.
pub const BACKOFF_INITIAL: Duration = wfhost_policy::restart::DEFAULT_BACKOFF_INITIAL;
/// `restart.backoff_max`.
pub const BACKOFF_MAX: Duration = wfhost_policy::restart::DEFAULT_BACKOFF_MAX;
/// `restart.max_restarts`.
pub const MAX_RESTARTS: u32 = wfhost_policy::restart::DEFAULT_MAX_RESTARTS;
/// `restart.period`.
pub const RESTART_PERIOD: Duration = wfhost_policy::restart::DEFAULT_PERIOD;
/// `restart.healthy_after`.
pub const HEALTHY_AFTER: Duration = wfhost_policy::restart::DEFAULT_HEALTHY_AFTER;
/// The PATH a child gets when its `env` sets none (systemd's default).
pub const CHILD_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Largest `send` payload the control socket carries, so the largest
/// `max_mail_bytes` a config may set.
pub const MAX_SEND_PAYLOAD: u64 = 16 << 20;
