//! The config file (DESIGN §8): `[supervisor]`, `[defaults]` and one
//! `[[deployment]]` per workflow. Loading parses, merges the defaults,
//! resolves paths, programs, users and groups, and checks every bound, so a
//! config that loads is one the supervisor can run. Every error names the
//! file, line and column, what is wrong, and what to do.
//!
//! Each setting, with its default:
//!
//! | key | default | bound |
//! |---|---|---|
//! | `state_dir` | `/var/lib/wfhost` | |
//! | `signing_key` | `state_dir/supervisor.key`, created on first start | |
//! | `policy_interval` | 60s | 10ms to 1d |
//! | `admin_group` | none | must exist |
//! | `metrics_listen` | none | `IP:PORT` |
//! | `event_retention` | 100000 | 1 to 10^9 |
//! | `mail_retention` | 7d | ≥ 1s; done mail (and its idempotency key) older than this is deleted |
//! | `drain_timeout` | 60s | > 0 |
//! | `drain_deadline` | 90s | ≥ `drain_timeout` |
//! | `kill_timeout` | 10s | > 0 |
//! | `ready_timeout` | 10s | > 0 |
//! | `liveness_interval` | 10s | > 0 |
//! | `liveness_timeout` | 30s | > `liveness_interval` |
//! | `max_frame_bytes` | 1MiB | ≤ 64MiB, ≥ `max_mail_bytes` + 4KiB |
//! | `max_mail_bytes` | 256KiB | ≥ 1 |
//! | `max_inbox` | 10000 | 1 to 10^8 |
//! | `recycle.max_uptime`, `.max_grants_age` | none | > 0; grant age needs `grants_file` |
//! | `recycle.max_rss` | none | ≥ 1MiB |
//! | `recycle.jitter` | 0% | ≤ 50% |
//! | `restart.backoff_initial` / `backoff_max` | 100ms / 30s | 0 < initial ≤ max |
//! | `restart.max_restarts` in `restart.period` | 5 in 60s | 1 to 10000; period > 0 |
//! | `[store] url` | none: SQLite in `state_dir` | a PostgreSQL URL or `key=value` string naming a server and database |

mod raw;
mod resolve;
mod units;

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use thiserror::Error;
use toml::Spanned;

use raw::{RawCommon, RawDeployment, RawFile, RawStore, RawSupervisor};
use resolve::Lookup;
use units::HINT_SEP;
pub use units::{format_duration, format_size};

/// `state_dir` when the config names none (systemd's `StateDirectory=wfhost`).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/wfhost";
/// The largest config file read: anything bigger is not a config.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Room a frame needs beyond a mail payload for the message around it.
pub const FRAME_HEADROOM: u64 = 4 << 10;
/// The largest `max_frame_bytes` the protocol allows.
pub const MAX_FRAME_BYTES: u64 = wfhost_ipc::MAX_FRAME_LIMIT as u64;
/// Most arguments, and most total bytes, in one `command`.
const MAX_ARGS: usize = 4096;
const MAX_COMMAND_BYTES: usize = 256 << 10;
/// Most variables, and most total bytes, in one deployment's `env`.
const MAX_ENV_VARS: usize = 1024;
const MAX_ENV_BYTES: usize = 256 << 10;

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
    /// Every `[[deployment]]`, in file order, with `[defaults]` merged in.
    pub deployments: Vec<DeploymentConfig>,
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
}

/// One deployment: a workflow child to keep running, with `[defaults]` merged in.
#[derive(Debug, Clone, PartialEq)]
pub struct DeploymentConfig {
    /// Unique name, `[A-Za-z0-9_.-]{1,64}`.
    pub id: String,
    /// Program (resolved to an absolute path) and arguments.
    pub command: Vec<String>,
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
    /// Working directory (absolute); `None` inherits the supervisor's.
    pub working_dir: Option<PathBuf>,
    /// Credential grants read fresh at every spawn (absolute).
    pub grants_file: Option<PathBuf>,
    /// When the policy recycles the child.
    pub recycle: RecycleSettings,
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
    /// Most mail waiting in the inbox before senders are told it is full.
    pub max_inbox: u64,
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
}

/// Built-in defaults, used where neither the deployment nor `[defaults]` sets a key.
pub mod defaults {
    use std::time::Duration;

    /// `policy_interval`.
    pub const POLICY_INTERVAL: Duration = Duration::from_secs(60);
    /// `event_retention`.
    pub const EVENT_RETENTION: u64 = 100_000;
    /// `mail_retention`: a week of retries stay idempotent.
    pub const MAIL_RETENTION: Duration = Duration::from_secs(7 * 86_400);
    /// `drain_timeout`.
    pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);
    /// `drain_deadline`.
    pub const DRAIN_DEADLINE: Duration = Duration::from_secs(90);
    /// `kill_timeout`.
    pub const KILL_TIMEOUT: Duration = Duration::from_secs(10);
    /// `ready_timeout`.
    pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
    /// `liveness_interval`.
    pub const LIVENESS_INTERVAL: Duration = Duration::from_secs(10);
    /// `liveness_timeout`.
    pub const LIVENESS_TIMEOUT: Duration = Duration::from_secs(30);
    /// `max_frame_bytes`.
    pub const MAX_FRAME_BYTES: u64 = 1 << 20;
    /// `max_mail_bytes`.
    pub const MAX_MAIL_BYTES: u64 = 256 << 10;
    /// `max_inbox`.
    pub const MAX_INBOX: u64 = 10_000;
    /// `restart.backoff_initial`.
    pub const BACKOFF_INITIAL: Duration = Duration::from_millis(100);
    /// `restart.backoff_max`.
    pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
    /// `restart.max_restarts`.
    pub const MAX_RESTARTS: u32 = 5;
    /// `restart.period`.
    pub const RESTART_PERIOD: Duration = Duration::from_secs(60);
}

/// Why a config was refused.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error(
        "{}: cannot read the config file: {source}\n  help: check the path and that this user may read the file",
        path.display()
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is too big to be a config.
    #[error(
        "{}: the file is larger than {} bytes, too large for a config\n  help: check that this is the right file",
        path.display(), MAX_CONFIG_BYTES
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The file has a syntax error, an unknown key, or a value out of bounds.
    #[error("{}:{line}:{column}: {message}\n  help: {hint}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line of the offending text.
        line: usize,
        /// 1-based column (in characters) of the offending text.
        column: usize,
        /// What is wrong.
        message: String,
        /// What to do about it.
        hint: String,
    },
}

/// Where a config keeps the supervisor's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locations {
    /// `state_dir`, absolute.
    pub state_dir: PathBuf,
    /// `signing_key`, absolute, if the config names one.
    pub signing_key: Option<PathBuf>,
}

/// The `state_dir` and `signing_key` a config names, read leniently:
/// client and journal commands need only these, and must still work when
/// the file on disk has since been broken (a refused reload) or names a
/// program that is gone. Falls back to the full parse for the error when
/// even the TOML syntax is broken.
pub fn locations_of(path: &Path) -> Result<Locations, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let full = || {
        load(path).map(|c| Locations {
            state_dir: c.supervisor.state_dir,
            signing_key: c.supervisor.signing_key,
        })
    };
    let Ok(table) = toml::from_str::<toml::Table>(&text) else {
        return full();
    };
    let supervisor = table.get("supervisor");
    let value = |key: &str| supervisor.and_then(|s| s.get(key));
    // Either setting of the wrong kind: the full parse names it.
    if supervisor.is_some_and(|s| !s.is_table())
        || ["state_dir", "signing_key"]
            .into_iter()
            .any(|key| value(key).is_some_and(|v| !v.is_str()))
    {
        return full();
    }
    let dir = resolve::config_dir(path);
    let setting = |key: &str| {
        value(key)
            .and_then(|v| v.as_str())
            .map(|p| resolve::relative_to(&dir, p))
    };
    Ok(Locations {
        state_dir: setting("state_dir").unwrap_or_else(|| PathBuf::from(DEFAULT_STATE_DIR)),
        signing_key: setting("signing_key"),
    })
}

/// The `[store] url` a config names (`None`: SQLite in `state_dir`), read
/// leniently like [`locations_of`]: a missing or well-formed url needs no
/// full load; anything else gets the full load's error.
pub fn store_url_of(path: &Path) -> Result<Option<String>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let full = || load(path).map(|c| c.store_url);
    let Ok(table) = toml::from_str::<toml::Table>(&text) else {
        return full();
    };
    let Some(store) = table.get("store") else {
        return Ok(None);
    };
    match store.get("url").and_then(|u| u.as_str()) {
        Some(url) if store.is_table() && resolve::store_url(url).is_ok() => {
            Ok(Some(url.to_owned()))
        }
        _ => full(),
    }
}

/// Reads, parses and validates the config file at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let read_err = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let valid = e.utf8_error().valid_up_to();
            let prefix = String::from_utf8_lossy(&e.as_bytes()[..valid]).into_owned();
            return Err(Problem::new(
                valid..valid,
                "the file is not valid UTF-8",
                "save the config as UTF-8 text",
            )
            .into_error(&prefix, path));
        }
    };
    parse(&text, path)
}

/// Parses and validates config `text` as if read from `path` (which names
/// the file in errors and anchors relative paths).
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    parse_with(text, path, &Lookup::from_process())
}

/// [`parse`] with an explicit program lookup (tests).
fn parse_with(text: &str, path: &Path, lookup: &Lookup) -> Result<Config, ConfigError> {
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        Problem::from_message(span, e.message()).into_error(text, path)
    })?;
    let dir = resolve::config_dir(path);
    let build = Build { dir: &dir, lookup };
    let supervisor = build
        .supervisor(raw.supervisor)
        .map_err(|p| p.into_error(text, path))?;
    let store_url = store_url(raw.store).map_err(|p| p.into_error(text, path))?;
    let defaults = raw.defaults.unwrap_or_default();
    let mut seen: HashMap<String, Range<usize>> = HashMap::new();
    let mut deployments = Vec::with_capacity(raw.deployment.len());
    for dep in raw.deployment {
        let d = build
            .deployment(dep, &defaults, &mut seen)
            .map_err(|p| p.into_error(text, path))?;
        deployments.push(d);
    }
    Ok(Config {
        source: std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
        supervisor,
        store_url,
        deployments,
    })
}

/// `[store] url`, checked.
fn store_url(raw: Option<RawStore>) -> Result<Option<String>, Problem> {
    let Some(url) = raw.and_then(|s| s.url) else {
        return Ok(None);
    };
    let text = &url.get_ref().0;
    resolve::store_url(text).map_err(|f| Problem::failure(url.span(), f))?;
    Ok(Some(text.clone()))
}

/// A refused value: where it is, what is wrong, what to do.
#[derive(Debug)]
struct Problem {
    span: Range<usize>,
    message: String,
    hint: String,
}

impl Problem {
    fn new(span: Range<usize>, message: impl Into<String>, hint: impl Into<String>) -> Self {
        Self {
            span,
            message: message.into(),
            hint: hint.into(),
        }
    }

    /// A problem from a TOML or serde message: our own values carry their
    /// hint after [`HINT_SEP`]; toml's own messages get one by their kind.
    fn from_message(span: Range<usize>, message: &str) -> Self {
        if let Some((message, hint)) = message.split_once(HINT_SEP) {
            return Self::new(span, message, hint);
        }
        let message = message.trim_end();
        let hint = if message.starts_with("unknown field") {
            "remove the key or fix its spelling: unknown keys are refused so a typo never goes unnoticed"
        } else if message.starts_with("missing field") {
            "add the key (see examples/wfhost.toml for a complete config)"
        } else if message.starts_with("invalid type") {
            "give the value the type shown in examples/wfhost.toml (durations and sizes are quoted strings such as \"90s\" and \"512MiB\"; command is a list of strings)"
        } else if message.starts_with("duplicate key") {
            "each key may appear once per table: remove one"
        } else {
            "fix the TOML syntax here (strings need double quotes; tables are [supervisor], [defaults] and [[deployment]])"
        };
        Self::new(span, message, hint)
    }

    fn failure(span: Range<usize>, (message, hint): resolve::Failure) -> Self {
        Self::new(span, message, hint)
    }

    fn into_error(self, text: &str, path: &Path) -> ConfigError {
        let (line, column) = line_column(text, self.span.start);
        ConfigError::Invalid {
            path: path.to_path_buf(),
            line,
            column,
            message: self.message,
            hint: self.hint,
        }
    }
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

/// A merged setting: its value and, when written in the file, where.
#[derive(Debug, Clone)]
struct Setting<T> {
    value: T,
    span: Option<Range<usize>>,
}

impl<T> Setting<T> {
    /// Where to point an error about this setting: at the value when it
    /// was written, else at the deployment.
    fn at(&self, fallback: &Range<usize>) -> Range<usize> {
        self.span.clone().unwrap_or_else(|| fallback.clone())
    }
}

/// The deployment's own value, else `[defaults]`'s, else `builtin`.
fn pick<V, T>(
    own: Option<Spanned<V>>,
    defaults: &Option<Spanned<V>>,
    builtin: T,
    convert: impl Fn(&V) -> T,
) -> Setting<T>
where
    V: Clone,
{
    match own.or_else(|| defaults.clone()) {
        Some(s) => Setting {
            value: convert(s.get_ref()),
            span: Some(s.span()),
        },
        None => Setting {
            value: builtin,
            span: None,
        },
    }
}

/// [`pick`] for an optional setting with no built-in value.
fn pick_opt<V: Clone, T>(
    own: Option<Spanned<V>>,
    defaults: &Option<Spanned<V>>,
    convert: impl Fn(&V) -> T,
) -> Setting<Option<T>> {
    pick(own, defaults, None, |v| Some(convert(v)))
}

/// A duration value.
fn dur(v: &units::DurationValue) -> Duration {
    *v.get()
}

/// A size value.
fn size(v: &units::SizeValue) -> u64 {
    *v.get()
}

/// Turns raw tables into checked settings.
struct Build<'a> {
    dir: &'a Path,
    lookup: &'a Lookup,
}

impl Build<'_> {
    fn supervisor(&self, raw: Option<RawSupervisor>) -> Result<SupervisorSettings, Problem> {
        let Some(raw) = raw else {
            return Ok(SupervisorSettings {
                state_dir: PathBuf::from(DEFAULT_STATE_DIR),
                signing_key: None,
                policy_interval: defaults::POLICY_INTERVAL,
                admin_group: None,
                metrics_listen: None,
                event_retention: defaults::EVENT_RETENTION,
                mail_retention: defaults::MAIL_RETENTION,
            });
        };
        let state_dir = match raw.state_dir {
            Some(s) => self.path(&s, "state_dir")?,
            None => PathBuf::from(DEFAULT_STATE_DIR),
        };
        let signing_key = raw
            .signing_key
            .map(|s| self.path(&s, "signing_key"))
            .transpose()?;
        let policy_interval = match raw.policy_interval {
            Some(s) => {
                let d = dur(s.get_ref());
                if d < Duration::from_millis(10) || d > Duration::from_secs(86_400) {
                    return Err(Problem::new(
                        s.span(),
                        format!("policy_interval {} is out of range", format_duration(d)),
                        "choose between \"10ms\" and \"1d\" (the default is \"60s\")",
                    ));
                }
                d
            }
            None => defaults::POLICY_INTERVAL,
        };
        let admin_group = match raw.admin_group {
            Some(s) => {
                let name = s.get_ref().0.clone();
                resolve::group(&name).map_err(|f| Problem::failure(s.span(), f))?;
                Some(name)
            }
            None => None,
        };
        let event_retention = match raw.event_retention {
            Some(s) => {
                let n = *s.get_ref();
                if !(1..=1_000_000_000).contains(&n) {
                    return Err(Problem::new(
                        s.span(),
                        format!("event_retention {n} is out of range"),
                        "keep between 1 and 1000000000 events (the default is 100000)",
                    ));
                }
                n
            }
            None => defaults::EVENT_RETENTION,
        };
        let mail_retention = match raw.mail_retention {
            Some(s) => {
                let d = dur(s.get_ref());
                if d < Duration::from_secs(1) {
                    return Err(Problem::new(
                        s.span(),
                        format!("mail_retention {} is too short", format_duration(d)),
                        "keep done mail at least \"1s\" (the default is \"7d\"; a retried `send --key` is idempotent for that long)",
                    ));
                }
                d
            }
            None => defaults::MAIL_RETENTION,
        };
        Ok(SupervisorSettings {
            state_dir,
            signing_key,
            policy_interval,
            admin_group,
            metrics_listen: raw.metrics_listen.map(|s| s.get_ref().0),
            event_retention,
            mail_retention,
        })
    }

    /// A path setting, absolute against the config file's directory.
    fn path(
        &self,
        s: &Spanned<raw::Text<{ raw::PATH_MAX }>>,
        key: &str,
    ) -> Result<PathBuf, Problem> {
        let text = &s.get_ref().0;
        if text.is_empty() {
            return Err(Problem::new(
                s.span(),
                format!("{key} is empty"),
                "write a path, or remove the key to use the default",
            ));
        }
        Ok(resolve::relative_to(self.dir, text))
    }

    fn deployment(
        &self,
        dep: Spanned<RawDeployment>,
        defaults: &RawCommon,
        seen: &mut HashMap<String, Range<usize>>,
    ) -> Result<DeploymentConfig, Problem> {
        let table = dep.span();
        let (id, command, mut own) = dep.into_inner().split();
        let id_span = id.span();
        let id = id.into_inner().0;
        if let Some(first) = seen.get(&id) {
            return Err(Problem::new(
                id_span,
                format!("deployment id {id:?} is used twice"),
                format!(
                    "give each [[deployment]] its own id (the first {id:?} starts at byte {})",
                    first.start
                ),
            ));
        }
        seen.insert(id.clone(), id_span.clone());

        let command = self.command(command)?;
        let env = merge_env(own.env.take(), &defaults.env)?;

        let user = pick_opt(own.user.take(), &defaults.user, |t| t.0.clone());
        let group = pick_opt(own.group.take(), &defaults.group, |t| t.0.clone());
        let (mut uid, mut gid) = (None, None);
        if let Some(name) = &user.value {
            let (u, g) = resolve::user(name).map_err(|f| Problem::failure(user.at(&table), f))?;
            uid = Some(u);
            gid = Some(g);
        }
        if let Some(name) = &group.value {
            gid = Some(resolve::group(name).map_err(|f| Problem::failure(group.at(&table), f))?);
        }

        let working_dir = pick_opt(own.working_dir.take(), &defaults.working_dir, |t| {
            t.0.clone()
        });
        let working_dir = match &working_dir.value {
            Some(text) => {
                let span = working_dir.at(&table);
                if text.is_empty() {
                    return Err(Problem::new(
                        span,
                        "working_dir is empty",
                        "write a directory, or remove the key",
                    ));
                }
                let path = resolve::relative_to(self.dir, text);
                resolve::directory(&path).map_err(|f| Problem::failure(span, f))?;
                Some(path)
            }
            None => None,
        };
        let grants = pick_opt(own.grants_file.take(), &defaults.grants_file, |t| {
            t.0.clone()
        });
        let grants_file = match &grants.value {
            Some(text) if text.is_empty() => {
                return Err(Problem::new(
                    grants.at(&table),
                    "grants_file is empty",
                    "write a path, or remove the key",
                ));
            }
            Some(text) => Some(resolve::relative_to(self.dir, text)),
            None => None,
        };

        let limits = Limits::merge(own, defaults);
        limits.check(&table, grants_file.is_some())?;

        Ok(DeploymentConfig {
            id,
            command,
            env,
            user: user.value,
            group: group.value,
            uid,
            gid,
            working_dir,
            grants_file,
            recycle: RecycleSettings {
                max_uptime: limits.max_uptime.value,
                max_rss: limits.max_rss.value,
                max_grants_age: limits.max_grants_age.value,
                jitter_percent: limits.jitter.value,
            },
            restart: RestartSettings {
                backoff_initial: limits.backoff_initial.value,
                backoff_max: limits.backoff_max.value,
                max_restarts: limits.max_restarts.value,
                period: limits.period.value,
            },
            drain_timeout: limits.drain_timeout.value,
            drain_deadline: limits.drain_deadline.value,
            kill_timeout: limits.kill_timeout.value,
            ready_timeout: limits.ready_timeout.value,
            liveness_interval: limits.liveness_interval.value,
            liveness_timeout: limits.liveness_timeout.value,
            // Both checked to be at most MAX_FRAME_BYTES (64 MiB) above.
            max_frame_bytes: u32::try_from(limits.max_frame_bytes.value).unwrap_or(u32::MAX),
            max_mail_bytes: u32::try_from(limits.max_mail_bytes.value).unwrap_or(u32::MAX),
            max_inbox: limits.max_inbox.value,
        })
    }

    /// The command, its program resolved to an absolute path.
    fn command(
        &self,
        command: Spanned<Vec<Spanned<raw::Text<{ raw::ARG_MAX }>>>>,
    ) -> Result<Vec<String>, Problem> {
        let span = command.span();
        let args = command.into_inner();
        let Some(program) = args.first() else {
            return Err(Problem::new(
                span,
                "command is empty",
                "name the program and its arguments, e.g. command = [\"/usr/local/bin/worker\", \"--flag\"]",
            ));
        };
        let total: usize = args.iter().map(|a| a.get_ref().0.len()).sum();
        if args.len() > MAX_ARGS || total > MAX_COMMAND_BYTES {
            return Err(Problem::new(
                span,
                format!("command has {} arguments and {total} bytes", args.len()),
                format!(
                    "keep it within {MAX_ARGS} arguments and {MAX_COMMAND_BYTES} bytes; pass bulk data in a file"
                ),
            ));
        }
        let resolved = resolve::program(&program.get_ref().0, self.dir, self.lookup)
            .map_err(|f| Problem::failure(program.span(), f))?;
        let mut out = Vec::with_capacity(args.len());
        out.push(resolved.to_string_lossy().into_owned());
        out.extend(args.iter().skip(1).map(|a| a.get_ref().0.clone()));
        Ok(out)
    }
}

/// `[defaults]`'s environment overlaid by the deployment's, key by key.
fn merge_env(
    own: Option<Spanned<BTreeMap<raw::EnvKey, raw::Text<{ raw::ENV_VALUE_MAX }>>>>,
    defaults: &Option<Spanned<BTreeMap<raw::EnvKey, raw::Text<{ raw::ENV_VALUE_MAX }>>>>,
) -> Result<BTreeMap<String, String>, Problem> {
    let mut env = BTreeMap::new();
    let mut span = 0..0;
    for table in [defaults.as_ref(), own.as_ref()].into_iter().flatten() {
        span = table.span();
        for (k, v) in table.get_ref() {
            env.insert(k.0.clone(), v.0.clone());
        }
    }
    let bytes: usize = env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    if env.len() > MAX_ENV_VARS || bytes > MAX_ENV_BYTES {
        return Err(Problem::new(
            span,
            format!("env has {} variables and {bytes} bytes", env.len()),
            format!(
                "keep it within {MAX_ENV_VARS} variables and {MAX_ENV_BYTES} bytes; pass bulk data in a file"
            ),
        ));
    }
    Ok(env)
}

/// The scalar (non-path, non-identity) settings of a deployment, merged.
struct Limits {
    drain_timeout: Setting<Duration>,
    drain_deadline: Setting<Duration>,
    kill_timeout: Setting<Duration>,
    ready_timeout: Setting<Duration>,
    liveness_interval: Setting<Duration>,
    liveness_timeout: Setting<Duration>,
    max_frame_bytes: Setting<u64>,
    max_mail_bytes: Setting<u64>,
    max_inbox: Setting<u64>,
    max_uptime: Setting<Option<Duration>>,
    max_rss: Setting<Option<u64>>,
    max_grants_age: Setting<Option<Duration>>,
    jitter: Setting<u32>,
    backoff_initial: Setting<Duration>,
    backoff_max: Setting<Duration>,
    max_restarts: Setting<u32>,
    period: Setting<Duration>,
}

impl Limits {
    /// Merges the deployment's own scalar keys with `[defaults]`.
    fn merge(own: RawCommon, d: &RawCommon) -> Self {
        let own_recycle = own.recycle.unwrap_or_default();
        let def_recycle = d.recycle.clone().unwrap_or_default();
        let own_restart = own.restart.unwrap_or_default();
        let def_restart = d.restart.clone().unwrap_or_default();
        Self {
            drain_timeout: pick(
                own.drain_timeout,
                &d.drain_timeout,
                defaults::DRAIN_TIMEOUT,
                dur,
            ),
            drain_deadline: pick(
                own.drain_deadline,
                &d.drain_deadline,
                defaults::DRAIN_DEADLINE,
                dur,
            ),
            kill_timeout: pick(
                own.kill_timeout,
                &d.kill_timeout,
                defaults::KILL_TIMEOUT,
                dur,
            ),
            ready_timeout: pick(
                own.ready_timeout,
                &d.ready_timeout,
                defaults::READY_TIMEOUT,
                dur,
            ),
            liveness_interval: pick(
                own.liveness_interval,
                &d.liveness_interval,
                defaults::LIVENESS_INTERVAL,
                dur,
            ),
            liveness_timeout: pick(
                own.liveness_timeout,
                &d.liveness_timeout,
                defaults::LIVENESS_TIMEOUT,
                dur,
            ),
            max_frame_bytes: pick(
                own.max_frame_bytes,
                &d.max_frame_bytes,
                defaults::MAX_FRAME_BYTES,
                size,
            ),
            max_mail_bytes: pick(
                own.max_mail_bytes,
                &d.max_mail_bytes,
                defaults::MAX_MAIL_BYTES,
                size,
            ),
            max_inbox: pick(own.max_inbox, &d.max_inbox, defaults::MAX_INBOX, |n| *n),
            max_uptime: pick_opt(own_recycle.max_uptime, &def_recycle.max_uptime, dur),
            max_rss: pick_opt(own_recycle.max_rss, &def_recycle.max_rss, size),
            max_grants_age: pick_opt(own_recycle.max_grants_age, &def_recycle.max_grants_age, dur),
            jitter: pick(own_recycle.jitter, &def_recycle.jitter, 0, |p| *p.get()),
            backoff_initial: pick(
                own_restart.backoff_initial,
                &def_restart.backoff_initial,
                defaults::BACKOFF_INITIAL,
                dur,
            ),
            backoff_max: pick(
                own_restart.backoff_max,
                &def_restart.backoff_max,
                defaults::BACKOFF_MAX,
                dur,
            ),
            max_restarts: pick(
                own_restart.max_restarts,
                &def_restart.max_restarts,
                defaults::MAX_RESTARTS,
                |n| *n,
            ),
            period: pick(
                own_restart.period,
                &def_restart.period,
                defaults::RESTART_PERIOD,
                dur,
            ),
        }
    }

    /// Checks every bound; errors point at the value that breaks it.
    fn check(&self, table: &Range<usize>, has_grants_file: bool) -> Result<(), Problem> {
        let positive = [
            ("drain_timeout", &self.drain_timeout),
            ("drain_deadline", &self.drain_deadline),
            ("kill_timeout", &self.kill_timeout),
            ("ready_timeout", &self.ready_timeout),
            ("liveness_interval", &self.liveness_interval),
            ("liveness_timeout", &self.liveness_timeout),
            ("restart.backoff_initial", &self.backoff_initial),
            ("restart.backoff_max", &self.backoff_max),
            ("restart.period", &self.period),
        ];
        for (key, s) in positive {
            if s.value.is_zero() {
                return Err(Problem::new(
                    s.at(table),
                    format!("{key} is zero"),
                    "give it a positive duration, e.g. \"10s\"",
                ));
            }
        }
        for (key, s) in [
            ("recycle.max_uptime", &self.max_uptime),
            ("recycle.max_grants_age", &self.max_grants_age),
        ] {
            if s.value.is_some_and(|d| d.is_zero()) {
                return Err(Problem::new(
                    s.at(table),
                    format!("{key} is zero, which would recycle on every policy tick"),
                    "give it a positive duration such as \"6h\", or remove it to disable this bound",
                ));
            }
        }
        if self.drain_deadline.value < self.drain_timeout.value {
            let s = if self.drain_deadline.span.is_some() {
                &self.drain_deadline
            } else {
                &self.drain_timeout
            };
            return Err(Problem::new(
                s.at(table),
                format!(
                    "drain_deadline ({}) is shorter than drain_timeout ({})",
                    format_duration(self.drain_deadline.value),
                    format_duration(self.drain_timeout.value)
                ),
                "a recycle would kill the child before its drain budget could escalate to a signed cancel: make drain_deadline at least drain_timeout",
            ));
        }
        if self.liveness_timeout.value <= self.liveness_interval.value {
            let s = if self.liveness_timeout.span.is_some() {
                &self.liveness_timeout
            } else {
                &self.liveness_interval
            };
            return Err(Problem::new(
                s.at(table),
                format!(
                    "liveness_timeout ({}) must be longer than liveness_interval ({})",
                    format_duration(self.liveness_timeout.value),
                    format_duration(self.liveness_interval.value)
                ),
                "allow at least one missed ping, e.g. liveness_interval = \"10s\", liveness_timeout = \"30s\"",
            ));
        }
        let frame = self.max_frame_bytes.value;
        let mail = self.max_mail_bytes.value;
        if frame > MAX_FRAME_BYTES {
            return Err(Problem::new(
                self.max_frame_bytes.at(table),
                format!(
                    "max_frame_bytes {} is above the protocol's limit",
                    format_size(frame)
                ),
                "use at most \"64MiB\" (the default is \"1MiB\")",
            ));
        }
        if mail == 0 {
            return Err(Problem::new(
                self.max_mail_bytes.at(table),
                "max_mail_bytes is zero, so no mail could ever be sent",
                "allow at least one byte (the default is \"256KiB\")",
            ));
        }
        if frame < mail.saturating_add(FRAME_HEADROOM) {
            let s = if self.max_frame_bytes.span.is_some() {
                &self.max_frame_bytes
            } else {
                &self.max_mail_bytes
            };
            return Err(Problem::new(
                s.at(table),
                format!(
                    "max_frame_bytes ({}) leaves no room for a max_mail_bytes ({}) payload",
                    format_size(frame),
                    format_size(mail)
                ),
                format!(
                    "make max_frame_bytes at least max_mail_bytes + 4KiB ({} bytes), or lower max_mail_bytes",
                    mail.saturating_add(FRAME_HEADROOM)
                ),
            ));
        }
        if !(1..=100_000_000).contains(&self.max_inbox.value) {
            return Err(Problem::new(
                self.max_inbox.at(table),
                format!("max_inbox {} is out of range", self.max_inbox.value),
                "keep between 1 and 100000000 messages (the default is 10000)",
            ));
        }
        if let Some(rss) = self.max_rss.value
            && rss < 1 << 20
        {
            return Err(Problem::new(
                self.max_rss.at(table),
                format!("recycle.max_rss {} is below 1MiB", format_size(rss)),
                "no process runs in less: the child would be recycled on every tick; use e.g. \"512MiB\"",
            ));
        }
        if self.max_grants_age.value.is_some() && !has_grants_file {
            return Err(Problem::new(
                self.max_grants_age.at(table),
                "recycle.max_grants_age is set but the deployment has no grants_file",
                "set grants_file, or remove max_grants_age",
            ));
        }
        if self.jitter.value > 50 {
            return Err(Problem::new(
                self.jitter.at(table),
                format!("recycle.jitter {}% is above 50%", self.jitter.value),
                "use at most \"50%\": more would let a bound be overshot by half again",
            ));
        }
        if self.backoff_initial.value > self.backoff_max.value {
            let s = if self.backoff_initial.span.is_some() {
                &self.backoff_initial
            } else {
                &self.backoff_max
            };
            return Err(Problem::new(
                s.at(table),
                format!(
                    "restart.backoff_initial ({}) is longer than restart.backoff_max ({})",
                    format_duration(self.backoff_initial.value),
                    format_duration(self.backoff_max.value)
                ),
                "make backoff_initial at most backoff_max",
            ));
        }
        if !(1..=10_000).contains(&self.max_restarts.value) {
            return Err(Problem::new(
                self.max_restarts.at(table),
                format!(
                    "restart.max_restarts {} is out of range",
                    self.max_restarts.value
                ),
                "allow between 1 and 10000 restarts per period (the default is 5)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
