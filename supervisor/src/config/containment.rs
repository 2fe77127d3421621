//! What holds a deployment's child and what it may use: the supervisor's
//! `cgroup_root`, and each deployment's `limits`, merged key by key with
//! `[defaults]` like `recycle` and `restart`.
//!
//! | key | bound | applies through |
//! |---|---|---|
//! | `memory_max`, `memory_high` | ≥ 1MiB; high ≤ max | cgroup `memory.max`, `memory.high` |
//! | `pids_max` | 1 to 4194304 | cgroup `pids.max` |
//! | `cpu_weight` | 1 to 10000 (100 is the kernel's default) | cgroup `cpu.weight` |
//! | `nofile` | 8 to 2^30 | `RLIMIT_NOFILE` (soft and hard) |
//! | `core` | a size; 0 turns core dumps off | `RLIMIT_CORE` |
//! | `as` | ≥ 16MiB | `RLIMIT_AS` |

use std::ops::Range;
use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::build::{pick_opt, size};
use super::error::Problem;
use super::raw::{PATH_MAX, Text};
use super::units::{SizeValue, format_size};

/// Where the supervisor makes a cgroup per child.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CgroupRoot {
    /// Its own cgroup, if systemd delegated it (`Delegate=yes`); else no
    /// cgroups.
    #[default]
    Delegated,
    /// This cgroup v2 directory (created if missing); no cgroups if it is
    /// not usable.
    At(PathBuf),
    /// No cgroups: the process tree alone contains children.
    Off,
}

/// `limits = { .. }` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    /// cgroup `memory.max`.
    pub memory_max: Option<Spanned<SizeValue>>,
    /// cgroup `memory.high`.
    pub memory_high: Option<Spanned<SizeValue>>,
    /// cgroup `pids.max`.
    pub pids_max: Option<Spanned<u64>>,
    /// cgroup `cpu.weight`.
    pub cpu_weight: Option<Spanned<u64>>,
    /// `RLIMIT_NOFILE`.
    pub nofile: Option<Spanned<u64>>,
    /// `RLIMIT_CORE`.
    pub core: Option<Spanned<SizeValue>>,
    /// `RLIMIT_AS`.
    #[serde(rename = "as")]
    pub address_space: Option<Spanned<SizeValue>>,
}

/// What a deployment's child may use; `None` is unbounded (or inherited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResourceLimits {
    /// Hard memory bound of its cgroup, in bytes: past it, the OOM killer.
    pub memory_max: Option<u64>,
    /// Memory above which its cgroup is throttled and reclaimed, in bytes.
    pub memory_high: Option<u64>,
    /// Most processes and threads in its cgroup.
    pub pids_max: Option<u64>,
    /// Its cgroup's share of CPU time against its siblings'.
    pub cpu_weight: Option<u64>,
    /// Most open files of each of its processes.
    pub nofile: Option<u64>,
    /// Largest core dump, in bytes.
    pub core: Option<u64>,
    /// Largest address space of each of its processes, in bytes.
    pub address_space: Option<u64>,
}

/// Reads `cgroup_root`: `"none"`, or an absolute path.
pub(super) fn cgroup_root(raw: Option<Spanned<Text<PATH_MAX>>>) -> Result<CgroupRoot, Problem> {
    let Some(s) = raw else {
        return Ok(CgroupRoot::Delegated);
    };
    let text = &s.get_ref().0;
    if text == "none" {
        return Ok(CgroupRoot::Off);
    }
    let path = PathBuf::from(text);
    if !path.is_absolute() {
        return Err(Problem::new(
            s.span(),
            format!("cgroup_root {text:?} is not an absolute path"),
            "name a directory of the cgroup v2 hierarchy, e.g. \"/sys/fs/cgroup/wfhost\", or write \"none\" to use no cgroups",
        ));
    }
    Ok(CgroupRoot::At(path))
}

/// Merges the deployment's `limits` with `[defaults]`' and checks each.
pub(super) fn limits(
    own: Option<RawLimits>,
    defaults: &Option<RawLimits>,
    table: &Range<usize>,
) -> Result<ResourceLimits, Problem> {
    let own = own.unwrap_or_default();
    let def = defaults.clone().unwrap_or_default();
    let int = |v: &u64| *v;
    let memory_max = pick_opt(own.memory_max, &def.memory_max, size);
    let memory_high = pick_opt(own.memory_high, &def.memory_high, size);
    let pids_max = pick_opt(own.pids_max, &def.pids_max, int);
    let cpu_weight = pick_opt(own.cpu_weight, &def.cpu_weight, int);
    let nofile = pick_opt(own.nofile, &def.nofile, int);
    let core = pick_opt(own.core, &def.core, size);
    let address_space = pick_opt(own.address_space, &def.address_space, size);

    let sizes_at_least = [
        ("memory_max", &memory_max, 1 << 20),
        ("memory_high", &memory_high, 1 << 20),
        ("as", &address_space, 16 << 20),
    ];
    for (key, s, min) in sizes_at_least {
        if let Some(v) = s.value.filter(|v| *v < min) {
            return Err(out_of_range(
                key,
                &format_size(v),
                s.at(table),
                &format!("give it at least \"{}\"", format_size(min)),
            ));
        }
    }
    let counts = [
        ("pids_max", &pids_max, 1, 4_194_304),
        ("cpu_weight", &cpu_weight, 1, 10_000),
        ("nofile", &nofile, 8, 1 << 30),
    ];
    for (key, s, min, max) in counts {
        if let Some(v) = s.value.filter(|v| !(min..=max).contains(v)) {
            return Err(out_of_range(
                key,
                &v.to_string(),
                s.at(table),
                &format!("choose between {min} and {max}"),
            ));
        }
    }
    if let (Some(high), Some(max)) = (memory_high.value, memory_max.value)
        && high > max
    {
        return Err(Problem::new(
            memory_high.at(table),
            format!(
                "limits.memory_high ({}) is above limits.memory_max ({})",
                format_size(high),
                format_size(max)
            ),
            "memory_high throttles before memory_max kills: make it smaller than memory_max, or remove it",
        ));
    }
    Ok(ResourceLimits {
        memory_max: memory_max.value,
        memory_high: memory_high.value,
        pids_max: pids_max.value,
        cpu_weight: cpu_weight.value,
        nofile: nofile.value,
        core: core.value,
        address_space: address_space.value,
    })
}

fn out_of_range(key: &str, shown: &str, span: Range<usize>, hint: &str) -> Problem {
    Problem::new(
        span,
        format!("limits.{key} {shown} is out of range"),
        format!("{hint}, or remove it to leave it unbounded"),
    )
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{Config, ConfigError, parse};
    use super::*;

    fn load(text: &str) -> Result<Config, ConfigError> {
        parse(text, Path::new("/etc/wfhost/wfhost.toml"))
    }

    fn one(limits: &str) -> String {
        format!(
            "[defaults]\nlimits = {{ nofile = 4096, memory_max = \"1GiB\" }}\n\
             [[deployment]]\nid = \"a\"\ncommand = [\"/bin/sh\"]\n{limits}\n"
        )
    }

    fn refused(text: &str) -> String {
        match load(text) {
            Ok(c) => panic!("expected a refusal, got {c:#?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn limits_merge_key_by_key_with_the_defaults() {
        let c = load(&one(
            "limits = { memory_max = \"512MiB\", pids_max = 64, as = \"2GiB\", core = 0 }",
        ))
        .expect("valid");
        let l = c.deployments[0].limits;
        assert_eq!(l.memory_max, Some(512 << 20), "its own value wins");
        assert_eq!(l.nofile, Some(4096), "the default fills the gap");
        assert_eq!(l.pids_max, Some(64));
        assert_eq!(l.address_space, Some(2 << 30));
        assert_eq!(l.core, Some(0));
        assert_eq!(l.memory_high, None);
        assert_eq!(l.cpu_weight, None);
    }

    #[test]
    fn limits_out_of_range_are_refused_at_their_value() {
        let e = refused(&one("limits = { cpu_weight = 0 }"));
        assert!(
            e.contains("wfhost.toml:6:25:") && e.contains("limits.cpu_weight 0 is out of range"),
            "{e}"
        );
        assert!(e.contains("between 1 and 10000"), "{e}");
        let e = refused(&one("limits = { memory_max = \"64KiB\" }"));
        assert!(
            e.contains("limits.memory_max 64KiB") && e.contains("at least \"1MiB\""),
            "{e}"
        );
        let e = refused(&one("limits = { memory_high = \"2GiB\" }"));
        assert!(
            e.contains("memory_high (2GiB) is above limits.memory_max (1GiB)"),
            "{e}"
        );
        let e = refused(&one("limits = { swap = 1 }"));
        assert!(e.contains("unknown field `swap`"), "{e}");
    }

    #[test]
    fn cgroup_root_is_a_path_or_none() {
        let at = |v: &str| {
            load(&format!("[supervisor]\ncgroup_root = {v}\n")).map(|c| c.supervisor.cgroup_root)
        };
        assert_eq!(
            load("").expect("empty").supervisor.cgroup_root,
            CgroupRoot::Delegated
        );
        assert_eq!(at("\"none\"").expect("none"), CgroupRoot::Off);
        assert_eq!(
            at("\"/sys/fs/cgroup/wfhost\"").expect("path"),
            CgroupRoot::At("/sys/fs/cgroup/wfhost".into())
        );
        let e = at("\"wfhost\"").expect_err("relative").to_string();
        assert!(
            e.contains("not an absolute path") && e.contains("\"none\""),
            "{e}"
        );
    }
}
