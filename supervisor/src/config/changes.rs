//! What a reload would change outside the deployments: each setting of
//! `[supervisor]` (and `[store]`) whose value differs between the config
//! in force and the new file, sorted into the ones a running supervisor
//! applies and the ones only a restart can (what it opened at start: the
//! state directory with its store and socket, the signing key, the store
//! connection, the cgroup root, the log writer).

use super::{CgroupRoot, Config, SupervisorSettings, format_duration};
use crate::logging::LogFormat;

/// One setting that differs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The key, as written in the file.
    pub key: &'static str,
    /// The value in force, as an operator writes it.
    pub from: String,
    /// The new file's value.
    pub to: String,
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} → {}", self.key, self.from, self.to)
    }
}

/// The settings a reload would change, by whether it can.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Only a restart applies these: a reload changing any is refused.
    pub restart_only: Vec<Change>,
    /// A reload applies these.
    pub applied: Vec<Change>,
}

fn none_or(v: Option<String>) -> String {
    v.unwrap_or_else(|| "none".to_owned())
}

fn cgroup_root(r: &CgroupRoot) -> String {
    match r {
        CgroupRoot::Delegated => "the supervisor's own cgroup, if delegated".to_owned(),
        CgroupRoot::At(p) => p.display().to_string(),
        CgroupRoot::Off => "none".to_owned(),
    }
}

fn log_format(f: LogFormat) -> String {
    match f {
        LogFormat::Text => "text".to_owned(),
        LogFormat::Json => "json".to_owned(),
    }
}

/// Every `[supervisor]` and `[store]` setting that differs from `running`
/// in `new`. The store URL's values are never shown (one may hold a
/// password).
pub fn compare(running: &Config, new: &Config) -> Changes {
    let (a, b): (&SupervisorSettings, &SupervisorSettings) = (&running.supervisor, &new.supervisor);
    let differ = |key, from: String, to: String| (from != to).then_some(Change { key, from, to });
    let path = |p: &std::path::Path| p.display().to_string();
    let store = |u: &Option<String>| match u {
        Some(_) => "a PostgreSQL URL".to_owned(),
        None => "none (SQLite in state_dir)".to_owned(),
    };
    let store_url = match (&running.store_url, &new.store_url) {
        (Some(x), Some(y)) if x != y => Some(Change {
            key: "[store] url",
            from: "one URL".to_owned(),
            to: "another".to_owned(),
        }),
        (x, y) => differ("[store] url", store(x), store(y)),
    };
    let restart_only = [
        differ("state_dir", path(&a.state_dir), path(&b.state_dir)),
        differ(
            "signing_key",
            none_or(a.signing_key.as_deref().map(path)),
            none_or(b.signing_key.as_deref().map(path)),
        ),
        store_url,
        differ(
            "cgroup_root",
            cgroup_root(&a.cgroup_root),
            cgroup_root(&b.cgroup_root),
        ),
        differ(
            "log_format",
            log_format(running.log_format),
            log_format(new.log_format),
        ),
        differ(
            "[console]",
            super::console::describe(running.console.as_ref()),
            super::console::describe(new.console.as_ref()),
        ),
    ];
    let applied = [
        differ(
            "policy_interval",
            format_duration(a.policy_interval),
            format_duration(b.policy_interval),
        ),
        differ(
            "admin_group",
            none_or(a.admin_group.clone()),
            none_or(b.admin_group.clone()),
        ),
        differ(
            "metrics_listen",
            none_or(a.metrics_listen.map(|m| m.to_string())),
            none_or(b.metrics_listen.map(|m| m.to_string())),
        ),
        differ(
            "event_retention",
            a.event_retention.to_string(),
            b.event_retention.to_string(),
        ),
        differ(
            "mail_retention",
            format_duration(a.mail_retention),
            format_duration(b.mail_retention),
        ),
    ];
    Changes {
        restart_only: restart_only.into_iter().flatten().collect(),
        applied: applied.into_iter().flatten().collect(),
    }
}

/// Why a reload changing `restart_only` settings is refused, and what to
/// do.
pub fn restart_only_refusal(restart_only: &[Change]) -> String {
    let list: Vec<String> = restart_only.iter().map(Change::to_string).collect();
    let keys: Vec<&str> = restart_only.iter().map(|c| c.key).collect();
    format!(
        "the new file changes what a reload cannot apply ({}); nothing was reloaded\n  help: restart the \
         supervisor to apply {} (`systemctl restart wfhost`, or stop it and start it again), or put the \
         value in force back and reload",
        list.join("; "),
        keys.join(", ")
    )
}

/// What a reload changed.
#[derive(Debug, Default)]
pub struct ReloadSummary {
    /// Deployments started.
    pub added: Vec<String>,
    /// Deployments stopped.
    pub removed: Vec<String>,
    /// Deployments recycled onto their new configuration.
    pub changed: Vec<String>,
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn config(supervisor: &str, store: &str) -> Config {
        let text = format!("[supervisor]\n{supervisor}\n{store}");
        super::super::parse(&text, Path::new("/etc/wfhost/wfhost.toml")).expect("config")
    }

    #[test]
    fn restart_only_settings_are_told_apart_from_applied_ones() {
        let running = config("state_dir = \"/a\"\npolicy_interval = \"60s\"", "");
        assert_eq!(compare(&running, &running), Changes::default());
        let new = config(
            "state_dir = \"/b\"\npolicy_interval = \"10s\"\nevent_retention = 5\nlog_format = \"json\"",
            "[store]\nurl = \"postgresql://u:secret@db/wfhost\"",
        );
        let changes = compare(&running, &new);
        let keys = |c: &[Change]| c.iter().map(|c| c.key).collect::<Vec<_>>();
        assert_eq!(
            keys(&changes.restart_only),
            ["state_dir", "[store] url", "log_format"]
        );
        assert_eq!(
            keys(&changes.applied),
            ["policy_interval", "event_retention"]
        );
        assert_eq!(changes.applied[0].to_string(), "policy_interval 1m → 10s");
        let refusal = restart_only_refusal(&changes.restart_only);
        assert!(
            refusal.contains("state_dir /a → /b") && refusal.contains("restart the supervisor"),
            "{refusal}"
        );
        assert!(!refusal.contains("secret"), "never the URL: {refusal}");
    }
}
