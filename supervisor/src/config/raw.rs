//! The config file exactly as written: serde structs that refuse unknown
//! keys and keep each value's position, so every later check can point at
//! the line and column it is about. Nothing here is resolved or merged.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use toml::Spanned;

use super::units::{DurationValue, HINT_SEP, PercentValue, SizeValue};

/// Longest path, user or group name the config accepts.
pub const PATH_MAX: usize = 4096;
/// Longest single command argument.
pub const ARG_MAX: usize = 32 * 1024;
/// Longest environment value.
pub const ENV_VALUE_MAX: usize = 32 * 1024;

/// Builds a serde error carrying a message and a hint (see [`HINT_SEP`]).
fn hinted<E: de::Error>(message: impl fmt::Display, hint: impl fmt::Display) -> E {
    E::custom(format!("{message}{HINT_SEP}{hint}"))
}

/// A string of at most `MAX` bytes with no NUL byte (which no path,
/// argument or environment value can carry).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Text<const MAX: usize>(pub String);

impl<'de, const MAX: usize> Deserialize<'de> for Text<MAX> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        if s.len() > MAX {
            return Err(hinted(
                format!(
                    "string is {} bytes long, more than the limit of {MAX}",
                    s.len()
                ),
                "shorten it",
            ));
        }
        if s.contains('\0') {
            return Err(hinted(
                "string contains a NUL character",
                "remove the \\u0000 escape: paths, arguments and environment values cannot carry it",
            ));
        }
        Ok(Self(s))
    }
}

/// A deployment id: 1 to 64 of `A-Z a-z 0-9 _ . -`, not `.` or `..`
/// (ids name things in logs, metrics and paths).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentId(pub String);

impl<'de> Deserialize<'de> for DeploymentId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        let hint = "use 1 to 64 characters from A-Z, a-z, 0-9, '_', '.' and '-', e.g. \"billing\"";
        let valid_chars = s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
        if s.is_empty() || s.len() > 64 || !valid_chars || s == "." || s == ".." {
            let shown: String = s.chars().take(80).collect();
            return Err(hinted(format!("invalid deployment id {shown:?}"), hint));
        }
        Ok(Self(s))
    }
}

/// An environment variable name: `[A-Za-z_][A-Za-z0-9_]*`, not reserved
/// for wfhost (`WFHOST_*`) or systemd's notification and socket passing.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct EnvKey(pub String);

/// Variables systemd sets for the supervisor itself; a child must never
/// see them, or it could notify or take sockets in the supervisor's name.
const SYSTEMD_RESERVED: &[&str] = &[
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
];

impl<'de> Deserialize<'de> for EnvKey {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        let mut bytes = s.bytes();
        let valid = s.len() <= 256
            && bytes
                .next()
                .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            let shown: String = s.chars().take(80).collect();
            return Err(hinted(
                format!("invalid environment variable name {shown:?}"),
                "use letters, digits and '_', not starting with a digit (at most 256)",
            ));
        }
        if s.starts_with("WFHOST_") {
            return Err(hinted(
                format!("environment variable {s} is reserved"),
                "WFHOST_* variables are set by the supervisor for every child; choose another name",
            ));
        }
        if SYSTEMD_RESERVED.contains(&s.as_str()) {
            return Err(hinted(
                format!("environment variable {s} is reserved"),
                "systemd sets it for the supervisor only; a child must not inherit it",
            ));
        }
        Ok(Self(s))
    }
}

/// A socket address such as `127.0.0.1:9464` or `[::1]:9464`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenAddr(pub SocketAddr);

impl<'de> Deserialize<'de> for ListenAddr {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = ListenAddr;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an address such as \"127.0.0.1:9464\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ListenAddr, E> {
                v.parse().map(ListenAddr).map_err(|_| {
                    hinted(
                        format!("{:?} is not an IP address and port", v.chars().take(80).collect::<String>()),
                        "write IP:PORT, e.g. \"127.0.0.1:9464\" or \"[::1]:9464\" (host names are not resolved)",
                    )
                })
            }
        }
        deserializer.deserialize_str(V)
    }
}

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFile {
    /// `[supervisor]`.
    pub supervisor: Option<RawSupervisor>,
    /// `[defaults]`.
    pub defaults: Option<RawCommon>,
    /// `[store]`.
    pub store: Option<RawStore>,
    /// `[fleet]`: this host is one of several sharing the store.
    pub fleet: Option<Spanned<RawFleet>>,
    /// `[console]`: the browser console (`config/console.rs`).
    pub console: Option<Spanned<RawConsole>>,
    /// Every `[[deployment]]`.
    #[serde(default)]
    pub deployment: Vec<Spanned<RawDeployment>>,
}

/// `[supervisor]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSupervisor {
    /// Store, default key and control socket directory.
    pub state_dir: Option<Spanned<Text<PATH_MAX>>>,
    /// Signing key file.
    pub signing_key: Option<Spanned<Text<PATH_MAX>>>,
    /// Recycle-bound check period.
    pub policy_interval: Option<Spanned<DurationValue>>,
    /// Group admitted to the control socket.
    pub admin_group: Option<Spanned<Text<PATH_MAX>>>,
    /// Prometheus endpoint.
    pub metrics_listen: Option<Spanned<ListenAddr>>,
    /// Events kept.
    pub event_retention: Option<Spanned<u64>>,
    /// How long done mail is kept.
    pub mail_retention: Option<Spanned<DurationValue>>,
    /// `text` or `json` log lines.
    pub log_format: Option<Spanned<Text<PATH_MAX>>>,
    /// Where children's cgroups are made, or `"none"`.
    pub cgroup_root: Option<Spanned<Text<PATH_MAX>>>,
    /// A reload may stop every running deployment.
    pub allow_empty: Option<Spanned<bool>>,
}

/// `[store]`: where the durable store lives.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawStore {
    /// A PostgreSQL connection string; none means SQLite in `state_dir`.
    pub url: Option<Spanned<Text<PATH_MAX>>>,
    /// libpq's `sslmode` (`config/conninfo.rs`).
    pub sslmode: Option<Spanned<Text<PATH_MAX>>>,
    /// The CA certificates that verify the server (PEM), or `system`.
    pub sslrootcert: Option<Spanned<Text<PATH_MAX>>>,
    /// This host's client certificate (PEM).
    pub sslcert: Option<Spanned<Text<PATH_MAX>>>,
    /// Its private key (PEM, mode 0600).
    pub sslkey: Option<Spanned<Text<PATH_MAX>>>,
    /// A file holding only the password (mode 0600).
    pub password_file: Option<Spanned<Text<PATH_MAX>>>,
}

/// `[fleet]`: the host's name and its leases (`config/fleet.rs`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFleet {
    /// This host's name in the fleet (default: the hostname).
    pub host_id: Option<Spanned<Text<PATH_MAX>>>,
    /// How long a lease lasts unless renewed.
    pub lease_ttl: Option<Spanned<DurationValue>>,
    /// How often leases are renewed.
    pub lease_renew: Option<Spanned<DurationValue>>,
    /// This host's weight in the fair share.
    pub capacity: Option<Spanned<u32>>,
}

/// `[console]`: where the browser console listens, and its TLS files.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConsole {
    /// `IP:PORT` or a Unix socket path.
    pub listen: Option<Spanned<Text<PATH_MAX>>>,
    /// A PEM certificate chain.
    pub tls_cert: Option<Spanned<Text<PATH_MAX>>>,
    /// Its PEM private key.
    pub tls_key: Option<Spanned<Text<PATH_MAX>>>,
}

/// `recycle = { .. }`: each key merged on its own with `[defaults]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRecycle {
    /// Uptime bound.
    pub max_uptime: Option<Spanned<DurationValue>>,
    /// RSS bound.
    pub max_rss: Option<Spanned<SizeValue>>,
    /// Grant age bound.
    pub max_grants_age: Option<Spanned<DurationValue>>,
    /// Spread of policy recycles.
    pub jitter: Option<Spanned<PercentValue>>,
    /// Mail bound: items acknowledged since `Ready`.
    pub max_mail: Option<Spanned<u64>>,
    /// Clock times (`"HH:MM"` or five cron fields), local time.
    pub at: Option<Spanned<Vec<Text<SCHEDULE_ENTRY_MAX>>>>,
    /// Make-before-break: the successor is ready before the old child drains.
    pub overlap: Option<Spanned<bool>>,
}

/// Longest `recycle.at` entry.
pub const SCHEDULE_ENTRY_MAX: usize = 256;

/// `restart = { .. }`: each key merged on its own with `[defaults]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRestart {
    /// First backoff delay.
    pub backoff_initial: Option<Spanned<DurationValue>>,
    /// Longest backoff delay.
    pub backoff_max: Option<Spanned<DurationValue>>,
    /// Restart intensity limit.
    pub max_restarts: Option<Spanned<u32>>,
    /// Window of the intensity limit.
    pub period: Option<Spanned<DurationValue>>,
    /// Uptime after which a crash starts afresh.
    pub healthy_after: Option<Spanned<DurationValue>>,
}

/// Declares the keys both `[defaults]` and `[[deployment]]` accept, once,
/// so the two tables can never drift apart.
macro_rules! deployment_keys {
    ($($(#[$doc:meta])* $field:ident: $ty:ty,)*) => {
        /// `[defaults]`, and the overridable part of a `[[deployment]]`.
        #[derive(Debug, Clone, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct RawCommon {
            $($(#[$doc])* pub $field: Option<$ty>,)*
        }

        /// One `[[deployment]]`.
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct RawDeployment {
            /// Unique name.
            pub id: Spanned<DeploymentId>,
            /// Program and arguments.
            pub command: Spanned<Vec<Spanned<Text<ARG_MAX>>>>,
            $($(#[$doc])* pub $field: Option<$ty>,)*
        }

        impl RawDeployment {
            /// Splits off the keys `[defaults]` may also set.
            pub fn split(
                self,
            ) -> (Spanned<DeploymentId>, Spanned<Vec<Spanned<Text<ARG_MAX>>>>, RawCommon) {
                (self.id, self.command, RawCommon { $($field: self.$field,)* })
            }
        }
    };
}

deployment_keys! {
    /// In a fleet, the only hosts that may run it.
    hosts: Spanned<Vec<Spanned<Text<PATH_MAX>>>>,
    /// Extra environment (merged key by key with `[defaults]`).
    env: Spanned<BTreeMap<EnvKey, Text<ENV_VALUE_MAX>>>,
    /// Run as this user.
    user: Spanned<Text<PATH_MAX>>,
    /// Run as this group.
    group: Spanned<Text<PATH_MAX>>,
    /// Working directory.
    working_dir: Spanned<Text<PATH_MAX>>,
    /// Credential grants handed over at every spawn.
    grants_file: Spanned<Text<PATH_MAX>>,
    /// Recycle bounds.
    recycle: RawRecycle,
    /// Restart backoff and intensity.
    restart: RawRestart,
    /// Drain budget.
    drain_timeout: Spanned<DurationValue>,
    /// How long a recycle waits for `Drained`.
    drain_deadline: Spanned<DurationValue>,
    /// SIGTERM to SIGKILL.
    kill_timeout: Spanned<DurationValue>,
    /// Spawn to `Ready`.
    ready_timeout: Spanned<DurationValue>,
    /// Ping period.
    liveness_interval: Spanned<DurationValue>,
    /// Silence after which a child is hung.
    liveness_timeout: Spanned<DurationValue>,
    /// Largest frame on the control channel.
    max_frame_bytes: Spanned<SizeValue>,
    /// Largest mail payload.
    max_mail_bytes: Spanned<SizeValue>,
    /// Largest result an item may end with.
    max_result_bytes: Spanned<SizeValue>,
    /// How long an item may run, from its first delivery.
    mail_deadline: Spanned<DurationValue>,
    /// What becomes of a started item whose child ended before it did:
    /// `auto` (delivered again) or `hold` (held for an operator).
    redeliver: Spanned<Text<PATH_MAX>>,
    /// Most mail waiting in the inbox.
    max_inbox: Spanned<u64>,
    /// How many children share the deployment's inbox.
    replicas: Spanned<u32>,
    /// What the child may use (cgroup limits and rlimits).
    limits: super::containment::RawLimits,
    /// Failed deliveries after which mail is quarantined as dead.
    max_deliveries: Spanned<u64>,
}
