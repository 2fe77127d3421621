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
//! | `log_format` | `text` | `text` or `json`; `supervise --log-format` overrides it |
//! | `allow_empty` | false | true: a reload of a file with no deployment may stop every running one |
//! | `drain_timeout` | 60s | ≥ 10ms |
//! | `drain_deadline` | 90s | ≥ 10ms, ≥ `drain_timeout` |
//! | `kill_timeout` | 10s | ≥ 10ms |
//! | `ready_timeout` | 10s | ≥ 100ms |
//! | `liveness_interval` | 10s | ≥ 10ms |
//! | `liveness_timeout` | 30s | ≥ 100ms, > `liveness_interval` |
//! | `max_frame_bytes` | 1MiB | ≤ 64MiB, ≥ `max_mail_bytes` + 4KiB |
//! | `max_mail_bytes` | 256KiB | 1 to 16MiB (what the control socket carries in one send) |
//! | `max_result_bytes` | 1MiB | ≤ 64MiB; a larger result ends its item failed (a result must also fit one frame) |
//! | `mail_deadline` | none | ≥ 100ms; an item's time from its first delivery: past it the item is cancelled, and `drain_timeout` later failed (its child recycled) |
//! | `redeliver` | `auto` | `auto` or `hold`: a started item whose child ended first is delivered again, or held (`interrupted`) for an operator |
//! | `max_inbox` | 10000 | 1 to 10^8 |
//! | `max_deliveries` | 5 | 1 to 1000; failed deliveries before mail is quarantined as dead |
//! | `recycle.max_uptime`, `.max_grants_age` | none | ≥ 100ms; grant age needs `grants_file` |
//! | `recycle.max_rss` | none | ≥ 1MiB |
//! | `recycle.jitter` | 0% | ≤ 50% |
//! | `recycle.max_mail` | none | 1 to 10⁹ items acknowledged since `Ready` |
//! | `recycle.at` | none | `"HH:MM[:SS]"` or five cron fields, local time; must fire within 8 years |
//! | `recycle.overlap` | false | true: the successor is ready before the old child drains |
//! | `replicas` | 1 | 1 to 256 children sharing the inbox |
//! | `restart.backoff_initial` / `backoff_max` | 100ms / 30s | 0 ≤ initial ≤ max; max ≥ 10ms (initial 0: every restart at once) |
//! | `restart.healthy_after` | 1s | ≥ 100ms; a run this long was healthy: its crash restarts at once and is not counted |
//! | `restart.max_restarts` in `restart.period` | 5 in 60s | 1 to 10000; period ≥ 1s |
//! | `[store] url` | none: SQLite in `state_dir` | a PostgreSQL URL or `key=value` string naming a server and database |
//! | `[store] sslmode` | `verify-full`, or `prefer` for a local server (a socket, `localhost`, a loopback address) | libpq's `disable`, `prefer`, `require`, `verify-ca`, `verify-full` |
//! | `[store] sslrootcert`, `sslcert`, `sslkey` | none | PEM files, relative to the config file's directory; `sslrootcert = "system"`: the system's CAs; the key must not be readable by group or others |
//! | `[store] password_file` | none (then `PGPASSWORD`, then `PGPASSFILE` or `~/.pgpass`) | a file holding the password, mode 0600 or stricter |
//! | `[fleet] host_id` | the hostname | 1 to 64 of `A-Za-z0-9_.-`; `[fleet]` needs `[store] url` |
//! | `[fleet] lease_ttl` | 15s | 1s to 1h |
//! | `[fleet] capacity` | 1 | 1 to 1000: this host's weight in the fair share |
//! | `hosts` | none: any host | in a fleet, the only hosts (their `host_id`s) that may run the deployment |
//! | `[fleet] lease_renew` | 5s | ≥ 100ms, ≤ a third of `lease_ttl` |
//! | `[console] listen` | none: the console is off | `IP:PORT` on loopback, any address with TLS, or a Unix socket path |
//! | `[console] tls_cert`, `tls_key` | none: plain HTTP | both or neither; PEM files; needed for a non-loopback `listen` |
//! | `cgroup_root` | the supervisor's own cgroup if delegated, else none | an absolute path, or `"none"` |
//! | `limits.*` | none | see `containment.rs` |
//! | `working_dir` | the config file's directory | must exist; relative to the config file's directory |
//! | `grants_file` | none | a regular file of JSON that fits the `Welcome` frame (`max_frame_bytes` less about 100 bytes, at most 1MiB) |
//!
//! The lower bounds on durations are the least a working child can meet
//! (a spawn and handshake take milliseconds, tens of them on a busy
//! machine; a child needs a few to act on a signal or a drain), or, for
//! `restart.period` and `healthy_after`, the least that still lets a crash
//! loop be counted and failed: below them a deployment could only fail or
//! restart-loop at once. Each refusal names file:line:column and says why.
//!
//! The config file and grants files must be regular files (a FIFO, device
//! or directory is refused at once: a FIFO would block the reader), and the
//! supervisor reads them on a thread of its own with a timeout, so a stuck
//! filesystem never freezes it.

mod build;
pub mod changes;
pub mod conninfo;
mod console;
mod containment;
pub mod defaults;
mod error;
pub mod file;
mod fleet;
pub mod grants;
mod programs;
mod raw;
mod resolve;
mod tunables;
mod types;
mod units;

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use raw::{RawFile, RawStore};
use resolve::Lookup;
pub use units::{format_duration, format_size, parse_duration};

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

use build::Build;
pub use error::ConfigError;
use error::Problem;
pub use fleet::hostname;
pub use programs::{missing as missing_program, programs};
pub use types::*;

/// The config file used when none is named: where packages and
/// `contrib/README.md` install it.
pub const DEFAULT_CONFIG: &str = "/etc/wfhost/wfhost.toml";

/// The environment variable naming the config file when `--config` does not.
pub const CONFIG_ENV: &str = "WFHOST_CONFIG";

/// How every command finds its config, for `--help`.
pub const FINDING: &str = "Without --config (or --socket), the config file is $WFHOST_CONFIG, else /etc/wfhost/wfhost.toml.";

/// Which config file to use: the one named on the command line, else
/// `$WFHOST_CONFIG`, else [`DEFAULT_CONFIG`]; an error that names all
/// three when none of them gives a readable file.
pub fn find(named: Option<&Path>) -> Result<PathBuf, ConfigError> {
    if let Some(path) = named {
        return Ok(path.to_path_buf());
    }
    if let Some(path) = std::env::var_os(CONFIG_ENV).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let default = PathBuf::from(DEFAULT_CONFIG);
    if default.exists() {
        Ok(default)
    } else {
        Err(ConfigError::NotFound)
    }
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
    let text = read(path)?;
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
    let text = read(path)?;
    let full = || load(path).map(|c| c.store_url);
    let Ok(table) = toml::from_str::<toml::Table>(&text) else {
        return full();
    };
    let Some(store) = table.get("store") else {
        return Ok(None);
    };
    let only_url = store.as_table().is_some_and(|t| t.len() == 1);
    match store.get("url").and_then(|u| u.as_str()) {
        Some(url) if only_url && resolve::store_url(url).is_ok() => Ok(Some(url.to_owned())),
        _ => full(),
    }
}

/// Reads, parses and validates the config file at `path`.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = read(path)?;
    parse(&text, path)
}

/// The config file's text: at most [`MAX_CONFIG_BYTES`] of UTF-8, from a
/// regular file (a FIFO, device or directory is refused at once, never
/// waited on).
pub fn read(path: &Path) -> Result<String, ConfigError> {
    let bytes = file::read_regular(path, MAX_CONFIG_BYTES).map_err(|e| match e {
        file::ReadError::Io(source) => ConfigError::Read {
            path: path.to_path_buf(),
            source,
        },
        file::ReadError::NotRegular(what) => ConfigError::NotRegular {
            path: path.to_path_buf(),
            what,
        },
        file::ReadError::TooLarge => ConfigError::TooLarge {
            path: path.to_path_buf(),
        },
    })?;
    String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        let prefix = String::from_utf8_lossy(&e.as_bytes()[..valid]).into_owned();
        Problem::new(
            valid..valid,
            "the file is not valid UTF-8",
            "save the config as UTF-8 text",
        )
        .into_error(&prefix, path)
    })
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
    let log_format = build
        .log_format(raw.supervisor.as_ref())
        .map_err(|p| p.into_error(text, path))?;
    let allow_empty = raw
        .supervisor
        .as_ref()
        .and_then(|s| s.allow_empty.as_ref())
        .is_some_and(|b| *b.get_ref());
    let supervisor = build
        .supervisor(raw.supervisor)
        .map_err(|p| p.into_error(text, path))?;
    let store_url = store_url(raw.store, path).map_err(|p| p.into_error(text, path))?;
    let fleet = fleet::settings(raw.fleet, store_url.is_some(), &fleet::hostname)
        .map_err(|p| p.into_error(text, path))?;
    let console = console::settings(raw.console, &dir).map_err(|p| p.into_error(text, path))?;
    let defaults = raw.defaults.unwrap_or_default();
    // `hosts` places a deployment among a fleet's hosts: a single host
    // would ignore it, so it is refused there.
    let hosts_set = defaults
        .hosts
        .as_ref()
        .map(toml::Spanned::span)
        .or_else(|| {
            raw.deployment
                .iter()
                .find_map(|d| d.get_ref().hosts.as_ref().map(toml::Spanned::span))
        });
    if let (None, Some(span)) = (&fleet, hosts_set) {
        return Err(Problem::new(
            span,
            "hosts names the fleet hosts that may run a deployment, and this config has no [fleet]",
            "add [fleet] (and [store] url) to run on several hosts, or remove hosts",
        )
        .into_error(text, path));
    }
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
        fleet,
        console,
        log_format,
        deployments,
        allow_empty,
    })
}

/// `[store] url` with the other `[store]` keys folded in
/// (`config/conninfo.rs`), checked; paths relative to the config file.
fn store_url(raw: Option<RawStore>, path: &Path) -> Result<Option<String>, Problem> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let dir = absolute.parent().unwrap_or(Path::new("/"));
    let keys = [
        ("sslmode", raw.sslmode, false),
        ("sslrootcert", raw.sslrootcert, true),
        ("sslcert", raw.sslcert, true),
        ("sslkey", raw.sslkey, true),
        ("password_file", raw.password_file, true),
    ];
    let Some(url) = raw.url else {
        if let Some((key, Some(v), _)) = keys.into_iter().find(|(_, v, _)| v.is_some()) {
            return Err(Problem::failure(
                v.span(),
                (
                    format!("[store] {key} is set but [store] url is not"),
                    "add [store] url naming the PostgreSQL server, or remove the key".into(),
                ),
            ));
        }
        return Ok(None);
    };
    let mut text = url.get_ref().0.clone();
    for (key, value, is_path) in keys {
        let Some(value) = value else { continue };
        let value = &value.get_ref().0;
        let value = if is_path && value != "system" {
            resolve::relative_to(dir, value).display().to_string()
        } else {
            value.clone()
        };
        text = conninfo::with(&text, key, &value);
    }
    resolve::store_url(&text).map_err(|f| Problem::failure(url.span(), f))?;
    Ok(Some(text))
}

#[cfg(test)]
mod example_tests;
#[cfg(test)]
mod tests;
