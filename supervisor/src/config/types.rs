//! What a loaded config holds: the supervisor's settings and each
//! deployment's, with `[defaults]` merged in.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use super::containment::{CgroupRoot, ResourceLimits};

/// A loaded, validated config: what the supervisor runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file it came from (absolute), for reloads and messages.
    pub source: PathBuf,
    /// `[supervisor]`.
    pub supervisor: SupervisorSettings,
    /// `[store] url`: the PostgreSQL store's connection string; `None`
    /// keeps the store in SQLite in `state_dir`.
    pub store_url: Option<String>,
    /// `[fleet]`: this host shares the store's deployments with others.
    pub fleet: Option<FleetSettings>,
    /// `[console]`: the browser console, off without the table.
    pub console: Option<ConsoleSettings>,
    /// `[supervisor] log_format`: how log lines are written
    /// (`supervise --log-format` overrides it). Kept beside the settings,
    /// which the supervisor's parts take, since only start-up reads it.
    pub log_format: crate::logging::LogFormat,
    /// Every `[[deployment]]`, in file order, with `[defaults]` merged in.
    pub deployments: Vec<DeploymentConfig>,
    /// `[supervisor] allow_empty`: a reload of this file may stop every
    /// running deployment (without it, a file with none is refused by a
    /// reload while any run: an emptied file is more often an accident).
    pub allow_empty: bool,
}

/// `[console]`: where the browser console listens, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSettings {
    /// A TCP address (loopback unless TLS is set) or a Unix socket.
    pub listen: ConsoleListen,
    /// The certificate and key files, for HTTPS.
    pub tls: Option<ConsoleTls>,
}

/// Where the console listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsoleListen {
    /// `IP:PORT`.
    Tcp(SocketAddr),
    /// A Unix socket path, absolute.
    Unix(PathBuf),
}

/// The console's TLS files (PEM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleTls {
    /// The certificate chain.
    pub cert: PathBuf,
    /// The private key.
    pub key: PathBuf,
}

/// `[fleet]`: one host of several that share one PostgreSQL store, each
/// deployment owned by one host at a time through a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetSettings {
    /// This host's name, unique in the fleet.
    pub host_id: String,
    /// How long a lease lasts unless renewed (judged by the database).
    pub lease_ttl: Duration,
    /// How often this host renews its leases and heartbeats.
    pub lease_renew: Duration,
    /// Its weight in the fair share (1 to 1000).
    pub capacity: u32,
}

/// `[supervisor]`: settings of the supervisor process itself.
#[derive(Debug, Clone, PartialEq)]
pub struct SupervisorSettings {
    /// Holds the SQLite store, the default signing key and the control socket.
    pub state_dir: PathBuf,
    /// The signing key file; `None` means `state_dir/supervisor.key`, created on first start.
    pub signing_key: Option<PathBuf>,
    /// How often recycle bounds are checked.
    pub policy_interval: Duration,
    /// A group whose members may use the control socket, besides root and the service user.
    pub admin_group: Option<String>,
    /// Where the Prometheus endpoint listens, if anywhere.
    pub metrics_listen: Option<SocketAddr>,
    /// How many events `wfhost events` keeps.
    pub event_retention: u64,
    /// How long done mail (and so its idempotency key) is kept.
    pub mail_retention: Duration,
    /// Where each child gets a cgroup of its own.
    pub cgroup_root: CgroupRoot,
}

/// One deployment: a workflow child to keep running, with `[defaults]` merged in.
#[derive(Debug, Clone, PartialEq)]
pub struct DeploymentConfig {
    /// Unique name, `[A-Za-z0-9_.-]{1,64}`.
    pub id: String,
    /// Program (resolved to an absolute path) and arguments.
    pub command: Vec<String>,
    /// In a fleet, the only hosts that may run it (empty: any host).
    pub hosts: Vec<String>,
    /// Environment besides `WFHOST_*` (children start from an empty one).
    pub env: BTreeMap<String, String>,
    /// User name to run as, if any.
    pub user: Option<String>,
    /// Group name to run as, if any.
    pub group: Option<String>,
    /// Resolved uid of `user`.
    pub uid: Option<u32>,
    /// Resolved gid: of `group`, else `user`'s primary group.
    pub gid: Option<u32>,
    /// Working directory (absolute): `working_dir` resolved against the
    /// config file's directory, or that directory itself. Always set by
    /// `load`; an `Option` only because the spawn spec's is.
    pub working_dir: Option<PathBuf>,
    /// Credential grants read fresh at every spawn (absolute).
    pub grants_file: Option<PathBuf>,
    /// When the policy recycles the child.
    pub recycle: RecycleSettings,
    /// How many children share the inbox (each a replica, `DEP/N`).
    pub replicas: u32,
    /// How crashes are restarted.
    pub restart: RestartSettings,
    /// Drain budget: cancel-behaviour time allowed before a signed cancel.
    pub drain_timeout: Duration,
    /// How long a recycle waits for `Drained` before killing.
    pub drain_deadline: Duration,
    /// SIGTERM to SIGKILL.
    pub kill_timeout: Duration,
    /// Spawn to `Ready`, else the spawn failed.
    pub ready_timeout: Duration,
    /// How often a ready child is pinged.
    pub liveness_interval: Duration,
    /// Silence after which a child is hung and killed.
    pub liveness_timeout: Duration,
    /// Largest frame on the control channel, either way.
    pub max_frame_bytes: u32,
    /// Largest mail payload accepted.
    pub max_mail_bytes: u32,
    /// Largest result an item may end with: a larger one ends it failed,
    /// naming this bound (never truncated).
    pub max_result_bytes: u64,
    /// How long an item may run, counted from its first delivery, when its
    /// sender gave no deadline of its own: past it the item is cancelled;
    /// not ended `drain_timeout` later, it ends failed and its child is
    /// recycled. `None`: no deadline.
    pub mail_deadline: Option<Duration>,
    /// `redeliver = "hold"`: a started item whose child ended before it
    /// did waits as `interrupted` for an operator instead of running again.
    pub hold: bool,
    /// Most mail waiting in the inbox before senders are told it is full.
    pub max_inbox: u64,
    /// What the child may use.
    pub limits: ResourceLimits,
    /// Failed deliveries (its child ended before acknowledging it) after
    /// which a mail item is quarantined as dead instead of redelivered.
    pub max_deliveries: u32,
}

/// The recycle bounds of one deployment (DESIGN §5); `None` is unbounded.
#[derive(Debug, Clone, PartialEq)]
pub struct RecycleSettings {
    /// Recycle after this much uptime.
    pub max_uptime: Option<Duration>,
    /// Recycle above this RSS, in bytes.
    pub max_rss: Option<u64>,
    /// Recycle when the grants snapshot is older than this.
    pub max_grants_age: Option<Duration>,
    /// Spreads policy recycles by up to this percentage of the bound.
    pub jitter_percent: u32,
    /// Recycle after this many acknowledged items.
    pub max_mail: Option<u64>,
    /// Recycle at these clock times (empty: never).
    pub at: wfhost_policy::schedule::Schedule,
    /// Start the successor and wait for its `Ready` before draining the
    /// child it replaces.
    pub overlap: bool,
}

/// Restart backoff and intensity of one deployment (DESIGN §3).
#[derive(Debug, Clone, PartialEq)]
pub struct RestartSettings {
    /// Delay before the second restart of a crash series (the first is immediate).
    pub backoff_initial: Duration,
    /// Longest delay between restarts.
    pub backoff_max: Duration,
    /// More restarts than this within `period` marks the deployment failed.
    pub max_restarts: u32,
    /// The window `max_restarts` is counted in.
    pub period: Duration,
    /// A child up this long ran healthily: its crash restarts at once and
    /// does not count towards `max_restarts`.
    pub healthy_after: Duration,
}
