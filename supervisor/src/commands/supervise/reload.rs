//! SIGHUP or `wfhost reload`: the config file is read again, off the
//! runtime thread and under a timeout (a stuck filesystem delays the
//! answer, never the supervisor), and taken only if everything it changes
//! can be applied:
//!
//! - a file with no deployment while some run (an emptied or truncated
//!   file, most likely) is refused unless it says `allow_empty = true`;
//! - a change to what the supervisor opened at start (`state_dir` with its
//!   store and socket, `signing_key`, `[store] url`, `cgroup_root`,
//!   `log_format`) is refused, naming the key: a restart applies it;
//! - the rest of `[supervisor]` is applied (`policy_interval`,
//!   `mail_retention` and `metrics_listen` restart their tasks,
//!   `admin_group` re-admits and re-modes the socket, `event_retention`
//!   holds from the next pruning); a new `metrics_listen` that cannot be
//!   bound, or an `admin_group` the socket cannot be given, refuses the
//!   whole reload before anything changed;
//! - then the deployments are started, stopped and recycled.
//!
//! Every outcome is logged, journaled (`config_reloaded`) and answered.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use tokio::task::JoinHandle;
use tracing::{error, info, warn};

use wfhost_policy::{Fact, format_duration};

use crate::config::changes::{self, Change};
use crate::config::file::{self, READ_TIMEOUT};
use crate::config::{self, Config};
use crate::control::admission::Admission;
use crate::control::host::Reloaded;
use crate::host::Supervisor;
use crate::shared::Shared;

/// The config in force and the tasks that carry its `[supervisor]`
/// settings, for a reload to change.
pub struct InForce {
    /// The config last taken (at start, or by a reload).
    pub config: Config,
    /// Checks the recycle bounds every `policy_interval`.
    pub policy: JoinHandle<()>,
    /// Prunes done mail past `mail_retention`.
    pub retention: JoinHandle<()>,
    /// Serves `metrics_listen`, if set.
    pub metrics: Option<JoinHandle<()>>,
    /// Who may use the control socket (`admin_group`).
    pub admission: Admission,
}

impl InForce {
    /// Stops every task (the supervisor is exiting).
    pub fn abort(&self) {
        self.policy.abort();
        self.retention.abort();
        if let Some(m) = &self.metrics {
            m.abort();
        }
    }

    /// Applies `changed` settings of `new`: the fallible ones first (bind
    /// the new metrics address, give the socket its group), so a refusal
    /// leaves everything as it was; then the tasks are replaced.
    async fn apply(
        &mut self,
        new: &Config,
        changed: &[Change],
        sup: &Supervisor,
        shared: &Arc<Shared>,
    ) -> Result<(), String> {
        let changes = |key: &str| changed.iter().any(|c| c.key == key);
        let settings = &new.supervisor;
        let listener = match settings.metrics_listen {
            Some(addr) if changes("metrics_listen") => Some(
                crate::observe::metrics::bind(addr)
                    .await
                    .map_err(|e| format!("{e:#}; nothing was reloaded"))?,
            ),
            _ => None,
        };
        if changes("admin_group") {
            self.admission
                .set_group(settings.admin_group.as_deref())
                .map_err(|e| format!("{e:#}; nothing was reloaded"))?;
        }
        if changes("metrics_listen") {
            if let Some(old) = self.metrics.take() {
                old.abort();
            }
            if let (Some(listener), Some(addr)) = (listener, settings.metrics_listen) {
                info!(listen = %addr, "serving Prometheus metrics at /metrics");
                self.metrics = Some(tokio::spawn(crate::observe::metrics::serve(
                    listener,
                    sup.registry(),
                    shared.clone(),
                )));
            }
        }
        if changes("policy_interval") {
            self.policy.abort();
            self.policy = tokio::spawn(crate::deployment::policy_tick::run(
                sup.watchlist(),
                settings.policy_interval,
            ));
        }
        if changes("mail_retention") {
            self.retention.abort();
            self.retention = tokio::spawn(crate::store::retention::run(
                shared.store.clone(),
                settings.mail_retention,
            ));
        }
        shared.set_event_retention(settings.event_retention);
        Ok(())
    }
}

/// What the file held: the config, whether it was blank, and the
/// programs it names that cannot be found.
type Read = (Config, bool, Vec<String>);

/// Reads and checks the file at `path` on a thread of its own.
async fn read(path: &Path) -> Result<Read, String> {
    let owned = path.to_path_buf();
    let what = format!("the config file {}", path.display());
    file::off_thread(&what, READ_TIMEOUT, move || read_now(&owned))
        .await
        .and_then(|r| r)
}

fn read_now(path: &Path) -> Result<Read, String> {
    let text = config::read(path).map_err(|e| e.to_string())?;
    let new = config::parse(&text, path).map_err(|e| e.to_string())?;
    let missing = missing_programs(path);
    Ok((new, text.trim().is_empty(), missing))
}

/// The programs the config at `path` names that cannot be found, each
/// said on one line (a spawn of theirs would fail and be restarted until
/// the deployment is failed).
pub fn missing_programs(path: &Path) -> Vec<String> {
    let Ok(checked) = config::programs(path) else {
        return Vec::new();
    };
    checked
        .into_iter()
        .filter_map(|c| {
            let e = c.found.err()?;
            let problem = e.to_string().replace("\n  help: ", "; help: ");
            Some(format!("{}: {problem}", c.deployment))
        })
        .collect()
}

/// A file with no deployment while some run is refused, unless it says
/// it means it.
fn refuse_empty(new: &Config, blank: bool, path: &Path, sup: &Supervisor) -> Result<(), String> {
    if !new.deployments.is_empty() || new.allow_empty {
        return Ok(());
    }
    let running: Vec<String> = sup
        .handles()
        .iter()
        .map(|h| h.config().id.clone())
        .collect();
    if running.is_empty() {
        return Ok(());
    }
    let what = if blank {
        format!("{} is empty", path.display())
    } else {
        format!("{} has no [[deployment]]", path.display())
    };
    Err(format!(
        "{what}: reloading it would stop every running deployment ({}); nothing was reloaded\n  help: if that is \
         meant, add `allow_empty = true` to its [supervisor] table and reload again (or stop the supervisor: \
         `wfhost stop`); otherwise restore the file",
        running.join(", ")
    ))
}

/// Reloads the config file at `path`: refused (the running config kept,
/// nothing changed) or applied; said in the log, the journal and the
/// answer either way.
pub async fn reload(
    sup: &mut Supervisor,
    path: &Path,
    shared: &Arc<Shared>,
    in_force: &mut InForce,
) -> Result<Reloaded, String> {
    let started = Instant::now();
    let outcome = take(sup, path, shared, in_force).await;
    let fact = |accepted, r: &Reloaded, error| Fact::ConfigReloaded {
        accepted,
        added: r.added.clone(),
        removed: r.removed.clone(),
        changed: r.changed.clone(),
        settings: r.settings.clone(),
        error,
    };
    match &outcome {
        Err(why) => {
            error!(error = %why.replace("\n  help: ", "; help: "), "the new config is refused; keeping the running one");
            shared.record(None, &fact(false, &Reloaded::default(), Some(why.clone())));
        }
        Ok(r) => {
            let list = |ids: &[String]| {
                if ids.is_empty() {
                    "none".to_owned()
                } else {
                    ids.join(", ")
                }
            };
            info!(added = %list(&r.added), removed = %list(&r.removed),
                changed = %list(&r.changed), settings = %list(&r.settings),
                took = %format_duration(started.elapsed()), "config reloaded");
            shared.record(None, &fact(true, r, None));
        }
    }
    outcome
}

/// The reload proper: read, check, apply.
async fn take(
    sup: &mut Supervisor,
    path: &Path,
    shared: &Arc<Shared>,
    in_force: &mut InForce,
) -> Result<Reloaded, String> {
    let (new, blank, missing) = read(path).await?;
    refuse_empty(&new, blank, path, sup)?;
    let changes = changes::compare(&in_force.config, &new);
    if !changes.restart_only.is_empty() {
        return Err(changes::restart_only_refusal(&changes.restart_only));
    }
    in_force.apply(&new, &changes.applied, sup, shared).await?;
    for m in &missing {
        warn!("{m}");
    }
    let summary = sup.reload(&new).await;
    let unchanged: Vec<String> = new
        .deployments
        .iter()
        .map(|d| d.id.clone())
        .filter(|id| !summary.added.contains(id) && !summary.changed.contains(id))
        .collect();
    in_force.config = new;
    Ok(Reloaded {
        path: path.display().to_string(),
        added: summary.added,
        removed: summary.removed,
        changed: summary.changed,
        unchanged,
        settings: changes.applied.iter().map(Change::to_string).collect(),
    })
}
