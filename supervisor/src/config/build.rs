//! Turning the raw tables into checked settings.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;

use super::containment;
use super::error::Problem;
use super::raw::{RawCommon, RawDeployment, RawSupervisor};
use super::resolve::{self, Lookup};
use super::tunables::Tunables;
use super::units;
use super::*;
use crate::logging::LogFormat;

/// A merged setting: its value and, when written in the file, where.
#[derive(Debug, Clone)]
pub(super) struct Setting<T> {
    pub(super) value: T,
    pub(super) span: Option<Range<usize>>,
}

impl<T> Setting<T> {
    /// Where to point an error about this setting: at the value when it
    /// was written, else at the deployment.
    pub(super) fn at(&self, fallback: &Range<usize>) -> Range<usize> {
        self.span.clone().unwrap_or_else(|| fallback.clone())
    }
}

/// The deployment's own value, else `[defaults]`'s, else `builtin`.
pub(super) fn pick<V, T>(
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
pub(super) fn pick_opt<V: Clone, T>(
    own: Option<Spanned<V>>,
    defaults: &Option<Spanned<V>>,
    convert: impl Fn(&V) -> T,
) -> Setting<Option<T>> {
    pick(own, defaults, None, |v| Some(convert(v)))
}

/// A duration value.
pub(super) fn dur(v: &units::DurationValue) -> Duration {
    *v.get()
}

/// A size value.
pub(super) fn size(v: &units::SizeValue) -> u64 {
    *v.get()
}

/// Turns raw tables into checked settings.
pub(super) struct Build<'a> {
    pub(super) dir: &'a Path,
    pub(super) lookup: &'a Lookup,
}

impl Build<'_> {
    /// `[supervisor]`, each key checked; the built-in settings without it.
    pub(super) fn supervisor(
        &self,
        raw: Option<RawSupervisor>,
    ) -> Result<SupervisorSettings, Problem> {
        let Some(raw) = raw else {
            return Ok(SupervisorSettings {
                state_dir: PathBuf::from(DEFAULT_STATE_DIR),
                signing_key: None,
                policy_interval: defaults::POLICY_INTERVAL,
                admin_group: None,
                metrics_listen: None,
                event_retention: defaults::EVENT_RETENTION,
                mail_retention: defaults::MAIL_RETENTION,
                cgroup_root: CgroupRoot::default(),
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
        Ok(SupervisorSettings {
            state_dir,
            signing_key,
            policy_interval: policy_interval(raw.policy_interval)?,
            admin_group: admin_group(raw.admin_group)?,
            metrics_listen: raw.metrics_listen.map(|s| s.get_ref().0),
            event_retention: event_retention(raw.event_retention)?,
            mail_retention: mail_retention(raw.mail_retention)?,
            cgroup_root: containment::cgroup_root(raw.cgroup_root)?,
        })
    }

    /// `[supervisor] log_format`.
    pub(super) fn log_format(&self, raw: Option<&RawSupervisor>) -> Result<LogFormat, Problem> {
        let Some(s) = raw.and_then(|r| r.log_format.as_ref()) else {
            return Ok(LogFormat::default());
        };
        match s.get_ref().0.as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(Problem::new(
                s.span(),
                format!(
                    "log_format {:?} is not known",
                    other.chars().take(80).collect::<String>()
                ),
                "write \"text\" (one readable line per event, the default) or \"json\" (one JSON object \
                 per line, for journald or a log collector)",
            )),
        }
    }

    /// A path setting, absolute against the config file's directory.
    pub(super) fn path(
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

    /// One `[[deployment]]` over `[defaults]`, every key checked; `seen`
    /// holds the ids taken so far.
    pub(super) fn deployment(
        &self,
        dep: Spanned<RawDeployment>,
        defaults: &RawCommon,
        seen: &mut HashMap<String, Range<usize>>,
    ) -> Result<DeploymentConfig, Problem> {
        let table = dep.span();
        let (id, command, mut own) = dep.into_inner().split();
        let id = claim_id(id, seen)?;
        let command = self.command(command)?;
        let hosts = super::fleet::hosts(own.hosts.take(), &defaults.hosts)?;
        let env = merge_env(own.env.take(), &defaults.env)?;
        let user = pick_opt(own.user.take(), &defaults.user, |t| t.0.clone());
        let group = pick_opt(own.group.take(), &defaults.group, |t| t.0.clone());
        let (uid, gid) = ids(&user, &group, &table)?;
        let working_dir = pick_opt(own.working_dir.take(), &defaults.working_dir, |t| {
            t.0.clone()
        });
        let working_dir = self.working_dir(&working_dir, &table)?;
        let grants = pick_opt(own.grants_file.take(), &defaults.grants_file, |t| {
            t.0.clone()
        });
        let grants_file = self.grants_file(&grants, &table)?;
        let redeliver = pick_opt(own.redeliver.take(), &defaults.redeliver, |t| t.0.clone());
        let hold = redeliver_hold(&redeliver, &table)?;

        let resources = containment::limits(own.limits.take(), &defaults.limits, &table)?;
        let limits = Tunables::merge(own, defaults);
        limits.check(&table, grants_file.is_some())?;
        let at = limits.schedule(&table)?;
        // Checked to be at most MAX_FRAME_BYTES (64 MiB) above.
        let max_frame_bytes = u32::try_from(limits.max_frame_bytes.value).unwrap_or(u32::MAX);
        if let Some(path) = &grants_file {
            check_grants(path, &id, max_frame_bytes, grants.at(&table))?;
        }

        Ok(DeploymentConfig {
            id,
            command,
            hosts,
            env,
            user: user.value,
            group: group.value,
            uid,
            gid,
            working_dir,
            grants_file,
            recycle: limits.recycle(at),
            replicas: limits.replicas.value,
            restart: limits.restart(),
            drain_timeout: limits.drain_timeout.value,
            drain_deadline: limits.drain_deadline.value,
            kill_timeout: limits.kill_timeout.value,
            ready_timeout: limits.ready_timeout.value,
            liveness_interval: limits.liveness_interval.value,
            liveness_timeout: limits.liveness_timeout.value,
            max_frame_bytes,
            // Checked to be at most MAX_SEND_PAYLOAD (16 MiB) above.
            max_mail_bytes: u32::try_from(limits.max_mail_bytes.value).unwrap_or(u32::MAX),
            max_result_bytes: limits.max_result_bytes.value,
            mail_deadline: limits.mail_deadline.value,
            hold,
            max_inbox: limits.max_inbox.value,
            limits: resources,
            // Checked to be at most 1000 above.
            max_deliveries: u32::try_from(limits.max_deliveries.value).unwrap_or(u32::MAX),
        })
    }

    /// `working_dir`, absolute and an existing directory; without it,
    /// the config file's directory.
    fn working_dir(
        &self,
        setting: &Setting<Option<String>>,
        table: &Range<usize>,
    ) -> Result<Option<PathBuf>, Problem> {
        let Some(text) = &setting.value else {
            // The child starts where the config file is, so a relative
            // argument means the same from whatever directory the
            // supervisor was started in.
            return Ok(Some(self.dir.to_path_buf()));
        };
        let span = setting.at(table);
        if text.is_empty() {
            return Err(Problem::new(
                span,
                "working_dir is empty",
                "write a directory, or remove the key",
            ));
        }
        let path = resolve::relative_to(self.dir, text);
        resolve::directory(&path).map_err(|f| Problem::failure(span, f))?;
        Ok(Some(path))
    }

    /// `grants_file`, absolute, if set (its contents are checked once the
    /// frame size is known).
    fn grants_file(
        &self,
        setting: &Setting<Option<String>>,
        table: &Range<usize>,
    ) -> Result<Option<PathBuf>, Problem> {
        match &setting.value {
            Some(text) if text.is_empty() => Err(Problem::new(
                setting.at(table),
                "grants_file is empty",
                "write a path, or remove the key",
            )),
            Some(text) => Ok(Some(resolve::relative_to(self.dir, text))),
            None => Ok(None),
        }
    }

    /// The command, its program resolved to an absolute path.
    pub(super) fn command(
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

/// `[supervisor] policy_interval`, between 10ms and a day.
fn policy_interval(raw: Option<Spanned<units::DurationValue>>) -> Result<Duration, Problem> {
    let Some(s) = raw else {
        return Ok(defaults::POLICY_INTERVAL);
    };
    let d = dur(s.get_ref());
    if d < Duration::from_millis(10) || d > Duration::from_secs(86_400) {
        return Err(Problem::new(
            s.span(),
            format!("policy_interval {} is out of range", format_duration(d)),
            "choose between \"10ms\" and \"1d\" (the default is \"60s\")",
        ));
    }
    Ok(d)
}

/// `[supervisor] admin_group`, a group that exists.
fn admin_group(
    raw: Option<Spanned<raw::Text<{ raw::PATH_MAX }>>>,
) -> Result<Option<String>, Problem> {
    let Some(s) = raw else {
        return Ok(None);
    };
    let name = s.get_ref().0.clone();
    resolve::group(&name).map_err(|f| Problem::failure(s.span(), f))?;
    Ok(Some(name))
}

/// `[supervisor] event_retention`, between 1 and a billion events.
fn event_retention(raw: Option<Spanned<u64>>) -> Result<u64, Problem> {
    let Some(s) = raw else {
        return Ok(defaults::EVENT_RETENTION);
    };
    let n = *s.get_ref();
    if !(1..=1_000_000_000).contains(&n) {
        return Err(Problem::new(
            s.span(),
            format!("event_retention {n} is out of range"),
            "keep between 1 and 1000000000 events (the default is 100000)",
        ));
    }
    Ok(n)
}

/// `[supervisor] mail_retention`, at least a second.
fn mail_retention(raw: Option<Spanned<units::DurationValue>>) -> Result<Duration, Problem> {
    let Some(s) = raw else {
        return Ok(defaults::MAIL_RETENTION);
    };
    let d = dur(s.get_ref());
    if d < Duration::from_secs(1) {
        return Err(Problem::new(
            s.span(),
            format!("mail_retention {} is too short", format_duration(d)),
            "keep done mail at least \"1s\" (the default is \"7d\"; a retried `send --key` is idempotent for that long)",
        ));
    }
    Ok(d)
}

/// The deployment's id, refused if an earlier deployment has it.
fn claim_id(
    id: Spanned<raw::DeploymentId>,
    seen: &mut HashMap<String, Range<usize>>,
) -> Result<String, Problem> {
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
    seen.insert(id.clone(), id_span);
    Ok(id)
}

/// The uid and gid the child runs as: the user's own, its gid replaced
/// by `group`'s when that is set too.
fn ids(
    user: &Setting<Option<String>>,
    group: &Setting<Option<String>>,
    table: &Range<usize>,
) -> Result<(Option<u32>, Option<u32>), Problem> {
    let (mut uid, mut gid) = (None, None);
    if let Some(name) = &user.value {
        let (u, g) = resolve::user(name).map_err(|f| Problem::failure(user.at(table), f))?;
        uid = Some(u);
        gid = Some(g);
    }
    if let Some(name) = &group.value {
        gid = Some(resolve::group(name).map_err(|f| Problem::failure(group.at(table), f))?);
    }
    Ok((uid, gid))
}

/// A grants file that exists must be a regular file its `Welcome` frame
/// can carry (one that does not exist yet is checked at every spawn).
fn check_grants(
    path: &Path,
    id: &str,
    max_frame_bytes: u32,
    span: Range<usize>,
) -> Result<(), Problem> {
    let room = super::grants::room(id, max_frame_bytes);
    match file::regular_len(path) {
        Ok(Some(len)) if len > room => Err(Problem::new(
            span,
            format!(
                "grants_file {} is {len} bytes, more than a Welcome frame carries for it ({room})",
                path.display()
            ),
            super::grants::too_large_hint(max_frame_bytes, room),
        )),
        Ok(_) => Ok(()),
        Err(file::ReadError::NotRegular(what)) => Err(Problem::new(
            span,
            format!(
                "grants_file {} is {what}, not a regular file",
                path.display()
            ),
            "point grants_file at a JSON file (a symbolic link to one is fine)",
        )),
        Err(_) => Ok(()),
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

/// `redeliver`: `"auto"` (the default: a started item whose child ended
/// before it did is delivered again) or `"hold"` (held for an operator).
fn redeliver_hold(
    setting: &Setting<Option<String>>,
    table: &Range<usize>,
) -> Result<bool, Problem> {
    match setting.value.as_deref() {
        None | Some("auto") => Ok(false),
        Some("hold") => Ok(true),
        Some(other) => Err(Problem::new(
            setting.at(table),
            format!(
                "redeliver {:?} is not known",
                other.chars().take(80).collect::<String>()
            ),
            "write \"auto\" (the default: an item whose child ended mid-item is delivered again) or \
             \"hold\" (it waits as interrupted until `wfhost mail retry ID` or `mail cancel ID`: for work \
             that must not run twice, such as a payment)",
        )),
    }
}
