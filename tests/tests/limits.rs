//! A deployment's `limits` (issue 14): rlimits (`nofile`, `core`, `as`)
//! set in the child before it runs, with or without cgroups; cgroup limits
//! (`memory_max`, `memory_high`, `pids_max`, `cpu_weight`) written to the
//! child's cgroup where the controllers are enabled; each limit that
//! cannot apply named, with why, in status and once in the log. The
//! `memory_max` test runs only where the memory controller is delegated
//! (it prints why it is skipped elsewhere).

#[path = "contain/support.rs"]
mod support;

use serde_json::Value;
use support::{Markers, Mode, QUICK, Strays, cgroup_of, limit_row, sleeper};
use wfhost_tests::{LONG, Supervisor, deployment, ok, wait_for};

#[test]
fn an_unusable_cgroup_root_falls_back_to_the_process_tree_and_says_why() {
    let markers = Markers::new();
    let _strays = Strays(markers);
    let body = deployment(
        "plain",
        &sleeper(markers),
        &format!("{QUICK}\nlimits = {{ memory_max = \"64MiB\", nofile = 512 }}"),
    );
    let sup = Supervisor::start_with_settings("cgroup_root = \"/tmp/wfh-not-a-cgroup\"", &body);
    let pid = sup.ready_pid("plain", LONG);
    let d = sup.deployment("plain");
    assert_eq!(d["containment"], "process-tree", "{d}");
    let log = sup.plain_log();
    assert!(
        log.contains("/tmp/wfh-not-a-cgroup") && log.contains("process-tree"),
        "the log says why there are no cgroups:\n{log}"
    );
    let not_applied = d["limits_not_applied"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        not_applied.iter().any(|l| l["limit"] == "memory_max"
            && l["why"].as_str().is_some_and(|w| w.contains("cgroup"))),
        "status says memory_max cannot apply, and why: {d}"
    );
    assert!(
        !not_applied.iter().any(|l| l["limit"] == "nofile"),
        "an rlimit applies without cgroups: {d}"
    );
    let (nofile, limits) = limit_row(pid, "Max open files");
    assert_eq!(nofile, ["512", "512"], "nofile applies: {limits}");
    // Said once, not at every spawn.
    ok("recycle", &sup.client(&["recycle", "plain"]));
    sup.ready_pid("plain", LONG);
    let said = sup
        .plain_log()
        .lines()
        .filter(|l| l.contains("memory_max") && l.contains("cannot apply"))
        .count();
    assert_eq!(
        said,
        1,
        "the limit's problem is logged once:\n{}",
        sup.log()
    );
}

#[test]
fn rlimits_apply_in_the_child_before_it_runs() {
    let markers = Markers::new();
    let _strays = Strays(markers);
    let body = deployment(
        "limited",
        &sleeper(markers),
        &format!("{QUICK}\nlimits = {{ nofile = 300, core = 0, as = \"2GiB\" }}"),
    );
    let sup = Supervisor::start_with_settings("cgroup_root = \"none\"", &body);
    sup.ready_pid("limited", LONG);
    // The hosted command inherits them from wfhost-child.
    let command = wait_for("the hosted sleep", LONG, || {
        markers.live().get(&markers.main(0)).map(|p| p[0])
    });
    for (row, expected) in [
        ("Max open files", "300"),
        ("Max core file size", "0"),
        ("Max address space", "2147483648"),
    ] {
        let (values, text) = limit_row(command, row);
        assert_eq!(values, [expected, expected], "{row}: {text}");
    }
}

#[test]
fn limits_the_hierarchy_cannot_enforce_are_named_in_status_and_the_log() {
    let Some(mode) =
        Mode::cgroup("limits_the_hierarchy_cannot_enforce_are_named_in_status_and_the_log")
    else {
        return;
    };
    let Mode::Cgroup(root) = &mode else {
        unreachable!()
    };
    let controllers = root.controllers();
    let markers = Markers::new();
    let _strays = Strays(markers);
    let body = deployment(
        "limited",
        &sleeper(markers),
        &format!(
            "{QUICK}\nlimits = {{ memory_max = \"256MiB\", memory_high = \"200MiB\", pids_max = 64, cpu_weight = 50 }}"
        ),
    );
    let sup = Supervisor::start_with_settings(&mode.settings(), &body);
    sup.ready_pid("limited", LONG);
    let d = sup.deployment("limited");
    let cgroup = cgroup_of(&sup, "limited");
    let not_applied: Vec<Value> = d["limits_not_applied"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for (limit, controller, file, value) in [
        ("memory_max", "memory", "memory.max", "268435456"),
        ("memory_high", "memory", "memory.high", "209715200"),
        ("pids_max", "pids", "pids.max", "64"),
        ("cpu_weight", "cpu", "cpu.weight", "50"),
    ] {
        let refused = not_applied.iter().find(|l| l["limit"] == limit);
        if controllers.split_whitespace().any(|c| c == controller) {
            assert!(refused.is_none(), "{limit} applies: {d}");
            let written = std::fs::read_to_string(cgroup.join(file)).unwrap_or_default();
            assert_eq!(written.trim(), value, "{limit} is written to {file}");
        } else {
            let why = refused
                .and_then(|l| l["why"].as_str())
                .unwrap_or_else(|| panic!("status says {limit} cannot apply: {d}"));
            assert!(why.contains(controller), "{limit}: {why}");
            assert!(
                sup.plain_log()
                    .lines()
                    .any(|l| l.contains(limit) && l.contains("cannot apply")),
                "the log says {limit} cannot apply:\n{}",
                sup.log()
            );
        }
    }
    println!(
        "controllers available under {}: {controllers:?}",
        root.0.display()
    );
}

#[test]
fn memory_max_stops_a_child_that_allocates_past_it() {
    let Some(mode) = Mode::cgroup("memory_max_stops_a_child_that_allocates_past_it") else {
        return;
    };
    let Mode::Cgroup(root) = &mode else {
        unreachable!()
    };
    let controllers = root.controllers();
    if !controllers.split_whitespace().any(|c| c == "memory") {
        println!(
            "SKIPPED memory_max_stops_a_child_that_allocates_past_it: the memory controller is not \
             available under {} (controllers: {:?}); it runs where the cgroup v2 memory controller \
             is delegated (systemd with Delegate=yes)",
            root.0.display(),
            controllers
        );
        return;
    }
    let body = deployment(
        "greedy",
        "['{bin}/wfhost-child', 'exec', '--', '/usr/bin/perl', '-e', '$x = q(a) x (256 * 1024 * 1024); sleep 60']",
        &format!(
            "{QUICK}\nlimits = {{ memory_max = \"64MiB\" }}\nrestart = {{ backoff_initial = \"1s\", backoff_max = \"5s\", max_restarts = 100, period = \"60s\" }}"
        ),
    );
    let sup = Supervisor::start_with_settings(&mode.settings(), &body);
    let pid = sup.ready_pid("greedy", LONG);
    let cgroup = cgroup_of(&sup, "greedy");
    assert_eq!(
        std::fs::read_to_string(cgroup.join("memory.max"))
            .unwrap_or_default()
            .trim(),
        (64u64 << 20).to_string(),
        "memory_max is the cgroup's memory.max"
    );
    // The kernel holds the cgroup to memory.max: it OOM-kills the
    // allocation, or (with swap) pushes the rest out; either way the
    // `max` event counts the times it stopped the child growing.
    let count = |text: &str, key: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
            .unwrap_or(0)
    };
    let events = wait_for("the limit to stop the allocation", LONG, || {
        let text = std::fs::read_to_string(cgroup.join("memory.events")).ok()?;
        (count(&text, "oom_kill ") > 0 || count(&text, "max ") > 0).then_some(text)
    });
    println!("memory.events of {}: {events}", cgroup.display());
    if count(&events, "oom_kill ") > 0 {
        let d = sup.wait_deployment("greedy", "a restart after the OOM kill", LONG, |d| {
            d["restarts"].as_u64() >= Some(1) || d["pid"].as_u64() != Some(u64::from(pid))
        });
        assert!(d["last_exit"].is_string(), "{d}");
    } else {
        let current: u64 = std::fs::read_to_string(cgroup.join("memory.current"))
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap_or(u64::MAX);
        assert!(
            current <= 64 << 20,
            "memory.current {current} stays within memory.max"
        );
    }
}
