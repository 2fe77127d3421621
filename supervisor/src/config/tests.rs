use std::os::unix::fs::PermissionsExt;

use std::path::Path;
use std::time::Duration;

use super::error::line_column;
use super::resolve::{CHILD_PROGRAM, Lookup};
use super::*;

/// A lookup that finds `sh` on the host's PATH and nothing beside the
/// executable.
fn lookup() -> Lookup {
    Lookup {
        exe_dir: None,
        path_var: Some("/usr/bin:/bin".into()),
    }
}

fn ok(text: &str) -> Config {
    match parse_with(text, Path::new("/etc/wfhost/wfhost.toml"), &lookup()) {
        Ok(c) => c,
        Err(e) => panic!("expected ok, got:\n{e}"),
    }
}

/// Parses `text`, expects an `Invalid` error, returns (line, column,
/// message, hint).
fn bad(text: &str) -> (usize, usize, String, String) {
    match parse_with(text, Path::new("/etc/wfhost/wfhost.toml"), &lookup()) {
        Ok(c) => panic!("expected an error, got {c:#?}"),
        Err(ConfigError::Invalid {
            line,
            column,
            message,
            hint,
            ..
        }) => (line, column, message, hint),
        Err(e) => panic!("expected Invalid, got {e}"),
    }
}

/// The deployment named `id`.
fn find<'a>(c: &'a Config, id: &str) -> &'a DeploymentConfig {
    c.deployments.iter().find(|d| d.id == id).unwrap()
}

/// One deployment with `extra` lines appended to its table.
fn one(extra: &str) -> String {
    format!("[[deployment]]\nid = \"a\"\ncommand = [\"/bin/sh\", \"-c\", \"true\"]\n{extra}\n")
}

#[test]
fn an_empty_file_has_defaults_and_no_deployments() {
    let c = ok("");
    assert_eq!(c.supervisor.state_dir, PathBuf::from(DEFAULT_STATE_DIR));
    assert_eq!(c.supervisor.signing_key, None);
    assert_eq!(c.supervisor.policy_interval, Duration::from_secs(60));
    assert_eq!(c.supervisor.event_retention, 100_000);
    assert_eq!(c.supervisor.mail_retention, Duration::from_secs(7 * 86_400));
    assert_eq!(c.supervisor.admin_group, None);
    assert_eq!(c.supervisor.metrics_listen, None);
    assert!(c.deployments.is_empty());
    assert_eq!(c.source, PathBuf::from("/etc/wfhost/wfhost.toml"));
}

#[test]
fn a_minimal_deployment_gets_every_documented_default() {
    let c = ok(&one(""));
    let d = &c.deployments[0];
    assert_eq!(d.id, "a");
    assert_eq!(d.command, ["/bin/sh", "-c", "true"]);
    assert!(d.env.is_empty());
    assert_eq!(
        (d.user.as_deref(), d.group.as_deref(), d.uid, d.gid),
        (None, None, None, None)
    );
    assert_eq!(
        (d.working_dir.as_deref(), d.grants_file.as_deref()),
        (Some(Path::new("/etc/wfhost")), None),
        "a child starts in the config file's directory"
    );
    assert_eq!(d.drain_timeout, Duration::from_secs(60));
    assert_eq!(d.drain_deadline, Duration::from_secs(90));
    assert_eq!(d.kill_timeout, Duration::from_secs(10));
    assert_eq!(d.ready_timeout, Duration::from_secs(10));
    assert_eq!(d.liveness_interval, Duration::from_secs(10));
    assert_eq!(d.liveness_timeout, Duration::from_secs(30));
    assert_eq!(d.max_frame_bytes, 1 << 20);
    assert_eq!(d.max_mail_bytes, 256 << 10);
    assert_eq!(d.max_inbox, 10_000);
    assert_eq!(
        d.recycle,
        RecycleSettings {
            max_uptime: None,
            max_rss: None,
            max_grants_age: None,
            jitter_percent: 0,
            max_mail: None,
            at: wfhost_policy::schedule::Schedule::parse::<&str>(&[]).unwrap(),
            overlap: false,
        }
    );
    assert_eq!(d.replicas, 1);
    assert_eq!(
        d.restart,
        RestartSettings {
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(30),
            max_restarts: 5,
            period: Duration::from_secs(60),
            healthy_after: Duration::from_secs(1),
        }
    );
}

#[test]
fn the_design_example_parses_with_every_key() {
    let text = r#"
[supervisor]
state_dir = "/var/lib/wfhost"
signing_key = "/etc/wfhost/supervisor.key"
policy_interval = "60s"
admin_group = "root"
metrics_listen = "127.0.0.1:9464"
event_retention = 100000

[defaults]
drain_timeout = "60s"
drain_deadline = "90s"
kill_timeout = "10s"
ready_timeout = "10s"
liveness_interval = "10s"
liveness_timeout = "30s"
max_frame_bytes = "1MiB"
max_mail_bytes = "256KiB"
max_inbox = 10000

[[deployment]]
id = "billing"
command = ["sh", "-c", "exec sleep 100"]
env = { RUST_LOG = "info" }
user = "root"
grants_file = "/etc/wfhost/grants/billing.json"
recycle = { max_uptime = "6h", max_rss = "512MiB", max_grants_age = "1h", jitter = "10%" }
restart = { backoff_initial = "100ms", backoff_max = "30s", max_restarts = 5, period = "60s" }
kill_timeout = "20s"
"#;
    let c = ok(text);
    assert_eq!(
        c.supervisor.signing_key,
        Some(PathBuf::from("/etc/wfhost/supervisor.key"))
    );
    assert_eq!(c.supervisor.admin_group.as_deref(), Some("root"));
    assert_eq!(
        c.supervisor.metrics_listen,
        Some("127.0.0.1:9464".parse().unwrap())
    );
    let d = &c.deployments[0];
    assert!(
        d.command[0].ends_with("/sh") && d.command[0].starts_with('/'),
        "{:?}",
        d.command
    );
    assert_eq!(d.env.get("RUST_LOG").map(String::as_str), Some("info"));
    assert_eq!((d.uid, d.gid), (Some(0), Some(0)));
    assert_eq!(d.kill_timeout, Duration::from_secs(20));
    assert_eq!(d.recycle.max_uptime, Some(Duration::from_secs(6 * 3600)));
    assert_eq!(d.recycle.max_rss, Some(512 << 20));
    assert_eq!(d.recycle.max_grants_age, Some(Duration::from_secs(3600)));
    assert_eq!(d.recycle.jitter_percent, 10);
}

#[test]
fn defaults_apply_and_each_key_can_be_overridden_per_deployment() {
    let text = r#"
[defaults]
kill_timeout = "3s"
max_inbox = 50
env = { A = "from-defaults", B = "from-defaults" }
recycle = { max_uptime = "1h", jitter = "5%" }
restart = { max_restarts = 3, period = "10s" }

[[deployment]]
id = "plain"
command = ["/bin/sh"]

[[deployment]]
id = "custom"
command = ["/bin/sh"]
kill_timeout = "7s"
env = { B = "own", C = "own" }
recycle = { jitter = "20%" }
restart = { period = "20s" }
"#;
    let c = ok(text);
    let plain = find(&c, "plain");
    assert_eq!(plain.kill_timeout, Duration::from_secs(3));
    assert_eq!(plain.max_inbox, 50);
    assert_eq!(plain.recycle.max_uptime, Some(Duration::from_secs(3600)));
    assert_eq!(plain.recycle.jitter_percent, 5);
    assert_eq!(plain.restart.max_restarts, 3);
    assert_eq!(plain.restart.period, Duration::from_secs(10));
    assert_eq!(plain.env["A"], "from-defaults");

    let custom = find(&c, "custom");
    assert_eq!(custom.kill_timeout, Duration::from_secs(7));
    assert_eq!(custom.max_inbox, 50);
    // Tables merge field by field: the deployment's jitter, the defaults' uptime.
    assert_eq!(custom.recycle.max_uptime, Some(Duration::from_secs(3600)));
    assert_eq!(custom.recycle.jitter_percent, 20);
    assert_eq!(custom.restart.max_restarts, 3);
    assert_eq!(custom.restart.period, Duration::from_secs(20));
    // The environment merges key by key.
    let env: Vec<_> = custom.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    assert_eq!(env, ["A=from-defaults", "B=own", "C=own"]);
}

#[test]
fn defaults_accept_every_overridable_key() {
    let text = r#"
[defaults]
env = { X = "1" }
user = "root"
group = "root"
working_dir = "/"
grants_file = "grants.json"
recycle = { max_uptime = "6h", max_rss = "512MiB", max_grants_age = "1h", jitter = "10%" }
restart = { backoff_initial = "1s", backoff_max = "1m", max_restarts = 2, period = "5m" }
drain_timeout = "1s"
drain_deadline = "2s"
kill_timeout = "3s"
ready_timeout = "4s"
liveness_interval = "5s"
liveness_timeout = "6s"
max_frame_bytes = "2MiB"
max_mail_bytes = "1MiB"
max_inbox = 7
"#;
    let c = ok(&format!("{text}\n{}", one("")));
    let d = &c.deployments[0];
    assert_eq!(d.env["X"], "1");
    assert_eq!((d.uid, d.gid), (Some(0), Some(0)));
    assert_eq!(d.working_dir.as_deref(), Some(Path::new("/")));
    assert_eq!(
        d.grants_file.as_deref(),
        Some(Path::new("/etc/wfhost/grants.json"))
    );
    assert_eq!(d.restart.backoff_initial, Duration::from_secs(1));
    assert_eq!(d.restart.backoff_max, Duration::from_secs(60));
    assert_eq!(d.drain_timeout, Duration::from_secs(1));
    assert_eq!(d.drain_deadline, Duration::from_secs(2));
    assert_eq!(d.ready_timeout, Duration::from_secs(4));
    assert_eq!(d.liveness_interval, Duration::from_secs(5));
    assert_eq!(d.liveness_timeout, Duration::from_secs(6));
    assert_eq!(d.max_frame_bytes, 2 << 20);
    assert_eq!(d.max_mail_bytes, 1 << 20);
    assert_eq!(d.max_inbox, 7);
}

#[test]
fn relative_paths_resolve_against_the_config_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("work")).unwrap();
    std::fs::create_dir(dir.path().join("bin")).unwrap();
    let prog = dir.path().join("bin/worker");
    std::fs::write(&prog, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let text = r#"
[supervisor]
state_dir = "state"
signing_key = "keys/supervisor.key"

[[deployment]]
id = "a"
command = ["bin/worker", "relative-arg"]
working_dir = "work"
grants_file = "../grants.json"
"#;
    let c = parse_with(text, &dir.path().join("wfhost.toml"), &lookup()).unwrap();
    assert_eq!(c.supervisor.state_dir, dir.path().join("state"));
    assert_eq!(
        c.supervisor.signing_key,
        Some(dir.path().join("keys/supervisor.key"))
    );
    let d = &c.deployments[0];
    assert_eq!(d.command, [prog.to_str().unwrap(), "relative-arg"]);
    assert_eq!(d.working_dir, Some(dir.path().join("work")));
    assert_eq!(d.grants_file, Some(dir.path().join("../grants.json")));
}

#[test]
fn user_without_group_runs_with_the_users_primary_group() {
    let c = ok(&one("user = \"root\""));
    assert_eq!(
        (c.deployments[0].uid, c.deployments[0].gid),
        (Some(0), Some(0))
    );
    let c = ok(&one("group = \"root\""));
    assert_eq!(
        (c.deployments[0].uid, c.deployments[0].gid),
        (None, Some(0))
    );
}

#[test]
fn unknown_users_and_groups_are_refused_where_they_are_named() {
    let (line, col, msg, hint) = bad(&one("user = \"wfhost-no-such-user\""));
    assert_eq!((line, col), (4, 8));
    assert!(msg.contains("no user named"), "{msg}");
    assert!(hint.contains("useradd"), "{hint}");
    let (line, _, msg, _) = bad(&format!(
        "[defaults]\ngroup = \"wfhost-no-such-group\"\n{}",
        one("")
    ));
    assert_eq!(line, 2, "an error from [defaults] points into [defaults]");
    assert!(msg.contains("no group named"), "{msg}");
    let (line, _, msg, _) = bad("[supervisor]\nadmin_group = \"wfhost-no-such-group\"\n");
    assert_eq!(line, 2);
    assert!(msg.contains("no group named"), "{msg}");
}

#[test]
fn syntax_errors_carry_line_and_column() {
    let (line, col, _, hint) = bad("[supervisor]\nstate_dir = /var/lib\n");
    assert_eq!((line, col), (2, 13));
    assert!(hint.contains("TOML syntax"), "{hint}");
}

#[test]
fn unknown_keys_are_refused_in_every_table() {
    for (text, line, col) in [
        ("[supervisor]\nstate_dri = \"x\"\n".to_string(), 2, 1),
        ("[defaults]\nkill_timout = \"1s\"\n".to_string(), 2, 1),
        (one("kill_timout = \"1s\""), 4, 1),
        (one("recycle = { max_uptme = \"1h\" }"), 4, 13),
        (one("restart = { retries = 1 }"), 4, 13),
        ("[supervisorr]\n".to_string(), 1, 2),
        ("[[deployments]]\nid = \"a\"\n".to_string(), 1, 3),
    ] {
        let (l, c, msg, hint) = bad(&text);
        assert!(msg.starts_with("unknown field"), "{text}: {msg}");
        assert!(hint.contains("spelling"), "{hint}");
        assert_eq!((l, c), (line, col), "{text}: {msg}");
    }
}

#[test]
fn missing_id_or_command_is_refused_at_the_deployment() {
    let (line, col, msg, hint) = bad("\n[[deployment]]\nid = \"a\"\n");
    assert_eq!((line, col), (2, 1));
    assert!(msg.contains("missing field `command`"), "{msg}");
    assert!(hint.contains("add the key"), "{hint}");
}

#[test]
fn wrong_value_types_are_refused_with_a_type_hint() {
    let (line, _, msg, hint) = bad(&one("max_inbox = \"lots\""));
    assert_eq!(line, 4);
    assert!(msg.contains("invalid type"), "{msg}");
    assert!(hint.contains("examples/wfhost.toml"), "{hint}");
    let (_, _, msg, _) = bad("[[deployment]]\nid = \"a\"\ncommand = \"/bin/sh\"\n");
    assert!(msg.contains("invalid type"), "{msg}");
}

#[test]
fn bad_units_point_at_the_value_with_the_fix() {
    let (line, col, msg, hint) = bad(&one("kill_timeout = \"10\""));
    assert_eq!((line, col), (4, 16));
    assert!(msg.contains("no unit"), "{msg}");
    assert!(hint.contains("\"10s\""), "{hint}");

    let (line, col, msg, hint) = bad(&one("kill_timeout = 10"));
    assert_eq!((line, col), (4, 16));
    assert!(msg.contains("bare number"), "{msg}");
    assert!(hint.contains("\"10s\""), "{hint}");

    let (line, col, msg, hint) = bad(&one("recycle = { max_rss = \"512M\" }"));
    assert_eq!((line, col), (4, 23));
    assert!(msg.contains("ambiguous"), "{msg}");
    assert!(hint.contains("\"512MiB\""), "{hint}");

    let (_, _, msg, hint) = bad(&one("max_mail_bytes = \"64kb\""));
    assert!(msg.contains("ambiguous"), "{msg}");
    assert!(hint.contains("\"64KiB\""), "{hint}");

    let (_, _, msg, hint) = bad(&one("recycle = { jitter = \"10\" }"));
    assert!(msg.contains("percent"), "{msg}");
    assert!(hint.contains("\"10%\""), "{hint}");

    let (_, _, _, hint) = bad("[supervisor]\nmetrics_listen = \"localhost:9464\"\n");
    assert!(hint.contains("IP:PORT"), "{hint}");
}

#[test]
fn sizes_may_be_plain_byte_counts() {
    let c = ok(&one("max_mail_bytes = 1000\nmax_frame_bytes = \"65536\""));
    assert_eq!(c.deployments[0].max_mail_bytes, 1000);
    assert_eq!(c.deployments[0].max_frame_bytes, 65536);
}

#[test]
fn deployment_ids_are_checked_and_unique() {
    for id in ["", "has space", "a/b", ".", "..", "ünï", &"x".repeat(65)] {
        let text = format!("[[deployment]]\nid = {id:?}\ncommand = [\"/bin/sh\"]\n");
        let (line, col, msg, hint) = bad(&text);
        assert_eq!((line, col), (2, 6), "{id}");
        assert!(msg.contains("invalid deployment id"), "{msg}");
        assert!(hint.contains("A-Z"), "{hint}");
    }
    ok(&format!(
        "[[deployment]]\nid = \"{}\"\ncommand = [\"/bin/sh\"]\n",
        "A-z_0.9".repeat(9)
    ));

    let text = format!("{}\n{}", one(""), one(""));
    let (line, col, msg, hint) = bad(&text);
    assert_eq!((line, col), (7, 6), "points at the second id");
    assert!(msg.contains("used twice"), "{msg}");
    assert!(hint.contains("its own id"), "{hint}");
}

#[test]
fn commands_must_name_a_program_that_exists() {
    let (line, col, msg, _) = bad("[[deployment]]\nid = \"a\"\ncommand = []\n");
    assert_eq!((line, col), (3, 11));
    assert!(msg.contains("command is empty"), "{msg}");

    let (line, col, msg, hint) =
        bad("[[deployment]]\nid = \"a\"\ncommand = [\"wfhost-no-such-program\", \"x\"]\n");
    assert_eq!((line, col), (3, 12));
    assert!(msg.contains("not on PATH"), "{msg}");
    assert!(hint.contains("absolute path"), "{hint}");

    let (_, _, msg, _) = bad("[[deployment]]\nid = \"a\"\ncommand = [\"/nonexistent/prog\"]\n");
    assert!(msg.contains("cannot be found"), "{msg}");

    let (_, _, msg, hint) =
        bad("[[deployment]]\nid = \"a\"\ncommand = [\"wfhost-child\", \"exec\"]\n");
    assert!(msg.contains("wfhost-child"), "{msg}");
    assert!(hint.contains("beside wfhost"), "{hint}");
}

#[test]
fn strings_are_bounded_and_free_of_nul() {
    let long = "x".repeat(raw::PATH_MAX + 1);
    let (_, _, msg, _) = bad(&one(&format!("working_dir = \"{long}\"")));
    assert!(msg.contains("more than the limit"), "{msg}");
    let (_, _, msg, _) = bad(&one("env = { A = \"a\\u0000b\" }"));
    assert!(msg.contains("NUL"), "{msg}");
    let many: Vec<String> = (0..=MAX_ARGS).map(|_| "\"x\"".to_string()).collect();
    let text = format!(
        "[[deployment]]\nid = \"a\"\ncommand = [\"/bin/sh\", {}]\n",
        many.join(",")
    );
    let (_, _, msg, _) = bad(&text);
    assert!(msg.contains("arguments"), "{msg}");
}

#[test]
fn env_keys_must_be_names_and_not_reserved() {
    for (key, what) in [
        ("WFHOST_CONTROL_FD", "reserved"),
        ("NOTIFY_SOCKET", "reserved"),
        ("LISTEN_FDS", "reserved"),
        ("\"1ABC\"", "invalid environment variable name"),
        ("\"A=B\"", "invalid environment variable name"),
        ("\"\"", "invalid environment variable name"),
    ] {
        let (line, col, msg, _) = bad(&one(&format!("env = {{ {key} = \"v\" }}")));
        assert_eq!((line, col), (4, 9), "{key}");
        assert!(msg.contains(what), "{key}: {msg}");
    }
}

#[test]
fn durations_too_short_to_work_are_refused_where_written() {
    // Each key, a value below its floor (the issue's "1ns", "1µs"), the
    // floor the hint names.
    for (key, written, floor) in [
        ("ready_timeout", "\"0.000000001s\"", "100ms"),
        ("ready_timeout", "\"99ms\"", "100ms"),
        ("liveness_interval", "\"0.001ms\"", "10ms"),
        ("liveness_timeout", "\"50ms\"", "100ms"),
        ("kill_timeout", "\"0.000001ms\"", "10ms"),
        ("drain_timeout", "\"9ms\"", "10ms"),
        ("drain_deadline", "\"1ms\"", "10ms"),
    ] {
        let extra = if key == "liveness_timeout" {
            format!("liveness_interval = \"10ms\"\n{key} = {written}")
        } else if key == "drain_deadline" {
            format!("drain_timeout = \"10ms\"\n{key} = {written}")
        } else {
            format!("{key} = {written}")
        };
        let (line, col, msg, hint) = bad(&one(&extra));
        let want_line = if extra.contains('\n') { 5 } else { 4 };
        assert_eq!((line, col), (want_line, key.len() + 4), "{key}: {msg}");
        assert!(msg.starts_with(key) && msg.contains(floor), "{key}: {msg}");
        assert!(
            hint.starts_with(&format!("give at least \"{floor}\"")),
            "{key}: {hint}"
        );
    }
    let (_, _, msg, _) = bad(&one("kill_timeout = \"0s\""));
    assert_eq!(msg, "kill_timeout is zero");
    for (table, key, floor) in [
        ("restart", "period", "1s"),
        ("restart", "backoff_max", "10ms"),
        ("restart", "healthy_after", "100ms"),
        ("recycle", "max_uptime", "100ms"),
    ] {
        let (line, _, msg, hint) = bad(&one(&format!(
            "{table} = {{ {key} = \"1ms\", backoff_initial = \"0s\" }}"
        )
        .replace(
            ", backoff_initial = \"0s\"",
            if table == "restart" {
                ", backoff_initial = \"0s\""
            } else {
                ""
            },
        )));
        assert_eq!(line, 4);
        assert!(
            msg.contains(&format!("{table}.{key} 1ms is shorter than {floor}")),
            "{msg}"
        );
        assert!(hint.contains(floor), "{hint}");
    }
    // The floors themselves are accepted.
    ok(&one(
        "ready_timeout = \"100ms\"\nliveness_interval = \"10ms\"\nliveness_timeout = \"100ms\"\n\
         kill_timeout = \"10ms\"\ndrain_timeout = \"10ms\"\ndrain_deadline = \"10ms\"\n\
         restart = { period = \"1s\", backoff_initial = \"0s\", backoff_max = \"10ms\", healthy_after = \"100ms\" }\n\
         recycle = { max_uptime = \"100ms\" }",
    ));
}

#[test]
fn a_grants_file_must_be_regular_and_fit_the_welcome_frame() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wfhost.toml");
    let grants = dir.path().join("grants.json");
    let write = |extra: &str| {
        std::fs::write(
            &path,
            format!("{}grants_file = \"grants.json\"\n{extra}", one("")),
        )
        .unwrap();
    };
    write("");
    assert!(
        load(&path).is_ok(),
        "a missing grants file is checked at spawn"
    );
    std::fs::write(&grants, vec![b' '; 1 << 20]).unwrap();
    let err = load(&path).unwrap_err().to_string();
    assert!(
        err.contains(":5:15: grants_file")
            && err.contains("1048576 bytes, more than a Welcome frame carries"),
        "{err}"
    );
    assert!(err.contains("raise max_frame_bytes"), "{err}");
    write("max_frame_bytes = \"2MiB\"");
    assert!(load(&path).is_ok(), "1 MiB fits a 2 MiB frame");
    std::fs::write(&grants, vec![b' '; (1 << 20) + 1]).unwrap();
    let err = load(&path).unwrap_err().to_string();
    assert!(err.contains("never more than 1048576"), "{err}");
    write("");
    std::fs::write(&grants, vec![b' '; (1 << 20) - 200]).unwrap();
    assert!(
        load(&path).is_ok(),
        "the room is the frame less about 100 bytes"
    );
    std::fs::remove_file(&grants).unwrap();
    nix::unistd::mkfifo(&grants, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let err = load(&path).unwrap_err().to_string();
    assert!(
        err.contains("is a FIFO (named pipe), not a regular file"),
        "{err}"
    );
}

#[test]
fn a_config_that_is_not_a_regular_file_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("wfhost.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    for path in [fifo.as_path(), dir.path(), Path::new("/dev/zero")] {
        for err in [
            load(path).unwrap_err(),
            locations_of(path).unwrap_err(),
            store_url_of(path).unwrap_err(),
        ] {
            assert!(matches!(err, ConfigError::NotRegular { .. }), "{err}");
            let text = err.to_string();
            assert!(
                text.contains("not a regular file") && text.contains("help:"),
                "{text}"
            );
        }
    }
}

#[test]
fn allow_empty_is_off_unless_set() {
    assert!(!ok("").allow_empty);
    assert!(ok("[supervisor]\nallow_empty = true\n").allow_empty);
    let (_, _, msg, _) = bad("[supervisor]\nallow_empty = \"yes\"\n");
    assert!(msg.contains("invalid type"), "{msg}");
}

#[test]
fn liveness_timeout_must_exceed_the_interval() {
    let (line, col, msg, hint) = bad(&one(
        "liveness_interval = \"30s\"\nliveness_timeout = \"30s\"",
    ));
    assert_eq!((line, col), (5, 20), "points at the timeout");
    assert!(
        msg.contains("liveness_timeout (30s) must be longer than liveness_interval (30s)"),
        "{msg}"
    );
    assert!(hint.contains("missed ping"), "{hint}");
    // Only the interval written: the error points at it.
    let (line, _, _, _) = bad(&one("liveness_interval = \"1m\""));
    assert_eq!(line, 4);
}

#[test]
fn drain_deadline_must_cover_the_drain_budget() {
    let (line, _, msg, hint) = bad(&one("drain_timeout = \"5m\""));
    assert_eq!(line, 4);
    assert!(
        msg.contains("drain_deadline (90s) is shorter than drain_timeout (5m)"),
        "{msg}"
    );
    assert!(hint.contains("at least drain_timeout"), "{hint}");
    ok(&one("drain_timeout = \"5m\"\ndrain_deadline = \"6m\""));
}

#[test]
fn frame_and_mail_sizes_are_bounded() {
    let (_, _, msg, hint) = bad(&one("max_frame_bytes = \"65MiB\""));
    assert!(msg.contains("above the protocol's limit"), "{msg}");
    assert!(hint.contains("64MiB"), "{hint}");
    ok(&one("max_frame_bytes = \"64MiB\""));

    let (line, _, msg, hint) = bad(&one("max_mail_bytes = \"1MiB\""));
    assert_eq!(
        line, 4,
        "points at the mail size: the frame size was not written"
    );
    assert!(msg.contains("leaves no room"), "{msg}");
    assert!(hint.contains("1052672 bytes"), "{hint}");
    ok(&one("max_mail_bytes = \"1020KiB\""));

    let (_, _, msg, _) = bad(&one("max_mail_bytes = 0"));
    assert!(msg.contains("max_mail_bytes is zero"), "{msg}");

    // What the control socket carries in one send.
    let (_, _, msg, hint) = bad(&one(
        "max_mail_bytes = \"17MiB\"\nmax_frame_bytes = \"32MiB\"",
    ));
    assert!(
        msg.contains("more than the control socket carries in one send (16MiB)"),
        "{msg}"
    );
    assert!(hint.contains("at most \"16MiB\""), "{hint}");
    ok(&one(
        "max_mail_bytes = \"16MiB\"\nmax_frame_bytes = \"17MiB\"",
    ));
}

#[test]
fn counts_are_bounded() {
    let (_, _, msg, _) = bad(&one("max_inbox = 0"));
    assert!(msg.contains("max_inbox 0"), "{msg}");
    let (_, _, msg, _) = bad(&one("max_inbox = -1"));
    assert!(msg.contains("invalid"), "{msg}");
    let (_, _, msg, _) = bad(&one("restart = { max_restarts = 0 }"));
    assert!(msg.contains("max_restarts 0"), "{msg}");
    let (_, _, msg, _) = bad("[supervisor]\nevent_retention = 0\n");
    assert!(msg.contains("event_retention 0"), "{msg}");
    let (_, _, msg, _) = bad("[supervisor]\nmail_retention = \"500ms\"\n");
    assert!(msg.contains("mail_retention 500ms is too short"), "{msg}");
    let (_, _, msg, _) = bad("[supervisor]\npolicy_interval = \"1ms\"\n");
    assert!(msg.contains("policy_interval 1ms"), "{msg}");
}

#[test]
fn restart_backoff_must_be_ordered() {
    let (line, col, msg, _) = bad(&one("restart = { backoff_initial = \"1m\" }"));
    assert_eq!((line, col), (4, 31));
    assert!(
        msg.contains("backoff_initial (1m) is longer than restart.backoff_max (30s)"),
        "{msg}"
    );
}

#[test]
fn recycle_bounds_are_checked() {
    let (_, _, msg, hint) = bad(&one("recycle = { jitter = \"51%\" }"));
    assert!(msg.contains("51%"), "{msg}");
    assert!(hint.contains("50%"), "{hint}");
    ok(&one("recycle = { jitter = \"50%\" }"));

    let (_, _, msg, _) = bad(&one("recycle = { max_rss = \"4KiB\" }"));
    assert!(msg.contains("below 1MiB"), "{msg}");

    let (_, _, msg, hint) = bad(&one("recycle = { max_grants_age = \"1h\" }"));
    assert!(msg.contains("no grants_file"), "{msg}");
    assert!(hint.contains("set grants_file"), "{hint}");
}

#[test]
fn working_dir_must_exist() {
    let (line, _, msg, _) = bad(&one("working_dir = \"/nonexistent-wfhost-dir\""));
    assert_eq!(line, 4);
    assert!(msg.contains("working_dir"), "{msg}");
    let (_, _, msg, _) = bad(&one("working_dir = \"/bin/sh\""));
    assert!(msg.contains("not a directory"), "{msg}");
}

#[test]
fn empty_paths_are_refused() {
    let (_, _, msg, _) = bad("[supervisor]\nstate_dir = \"\"\n");
    assert!(msg.contains("state_dir is empty"), "{msg}");
    let (_, _, msg, _) = bad(&one("grants_file = \"\""));
    assert!(msg.contains("grants_file is empty"), "{msg}");
}

#[test]
fn columns_count_characters_not_bytes() {
    let (line, col, _, _) =
        bad("# ünïcödé\n[supervisor] # é\nstate_dir = \"x\"\npolicy_interval = \"1x\"\n");
    assert_eq!((line, col), (4, 19));
    assert_eq!(line_column("é = 1", 3), (1, 3));
    assert_eq!(line_column("a\nb", 99), (2, 2));
}

#[test]
fn errors_display_as_file_line_column_then_help() {
    let err = parse_with(
        &one("kill_timeout = \"10\""),
        Path::new("conf/w.toml"),
        &lookup(),
    )
    .unwrap_err()
    .to_string();
    let mut lines = err.lines();
    assert_eq!(
        lines.next(),
        Some("conf/w.toml:4:16: duration \"10\" has no unit")
    );
    assert!(
        lines
            .next()
            .is_some_and(|l| l.starts_with("  help: write \"10s\"")),
        "{err}"
    );
}

#[test]
fn unreadable_and_oversized_files_name_the_file() {
    let err = load(Path::new("/nonexistent/wfhost.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("/nonexistent/wfhost.toml: cannot read the config file: No such file"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.toml");
    std::fs::write(&big, vec![b'#'; (MAX_CONFIG_BYTES + 1) as usize]).unwrap();
    assert!(matches!(load(&big), Err(ConfigError::TooLarge { .. })));
    let latin1 = dir.path().join("latin1.toml");
    std::fs::write(&latin1, b"# ok\n# caf\xe9\n").unwrap();
    match load(&latin1) {
        Err(ConfigError::Invalid {
            line,
            column,
            message,
            ..
        }) => {
            assert_eq!((line, column), (2, 6));
            assert!(message.contains("UTF-8"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn load_reads_a_file_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wfhost.toml");
    std::fs::write(&path, "[supervisor]\nstate_dir = \"s\"\n").unwrap();
    let c = load(&path).unwrap();
    assert_eq!(c.source, path);
    assert_eq!(c.supervisor.state_dir, dir.path().join("s"));
}

#[test]
fn the_shipped_example_is_valid_wherever_wfhost_child_is() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/wfhost.toml");
    let text = std::fs::read_to_string(&example).unwrap();
    let fake_bin = tempfile::tempdir().unwrap();
    let child = fake_bin.path().join(CHILD_PROGRAM);
    std::fs::write(&child, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&child, std::fs::Permissions::from_mode(0o755)).unwrap();
    let lookup = Lookup {
        exe_dir: Some(fake_bin.path().to_path_buf()),
        path_var: Some("/usr/bin:/bin".into()),
    };
    let c = match parse_with(&text, &example, &lookup) {
        Ok(c) => c,
        Err(e) => panic!("{e}"),
    };
    assert!(!c.deployments.is_empty());
    assert!(
        c.supervisor.state_dir.ends_with("examples/state"),
        "{:?}",
        c.supervisor.state_dir
    );
    for d in &c.deployments {
        assert_eq!(d.command[0], child.to_str().unwrap());
    }
}

#[test]
fn locations_are_read_even_when_the_rest_would_not_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wfhost.toml");
    // A deployment whose program is gone, and a key named relatively.
    std::fs::write(
        &path,
        "[supervisor]\nstate_dir = \"state\"\nsigning_key = \"keys/k.pem\"\n\n\
         [[deployment]]\nid = \"gone\"\ncommand = [\"/nonexistent/program\"]\n",
    )
    .unwrap();
    assert!(load(&path).is_err(), "the full load refuses it");
    assert_eq!(
        locations_of(&path).unwrap(),
        Locations {
            state_dir: dir.path().join("state"),
            signing_key: Some(dir.path().join("keys/k.pem")),
        }
    );
    // Without them: the defaults.
    std::fs::write(&path, "").unwrap();
    let l = locations_of(&path).unwrap();
    assert_eq!(l.state_dir, PathBuf::from(DEFAULT_STATE_DIR));
    assert_eq!(l.signing_key, None);
    // Of the wrong kind, or not TOML: the full parse names the place.
    std::fs::write(&path, "[supervisor]\nsigning_key = 7\n").unwrap();
    let e = locations_of(&path).unwrap_err().to_string();
    assert!(e.contains("wfhost.toml:2:15"), "{e}");
    std::fs::write(&path, "[supervisor\n").unwrap();
    assert!(locations_of(&path).is_err());
}

#[test]
fn replicas_overlap_max_mail_and_schedules_parse_and_bad_ones_are_pointed_at() {
    let c = ok(&one(
        "replicas = 3\nrecycle = { overlap = true, max_mail = 25, at = [\"03:00\", \"0 */6 * * *\"] }",
    ));
    let d = find(&c, "a");
    assert_eq!(d.replicas, 3);
    assert!(d.recycle.overlap);
    assert_eq!(d.recycle.max_mail, Some(25));
    assert!(!d.recycle.at.is_empty());
    for (extra, says) in [
        ("replicas = 0", "replicas 0 is out of range"),
        ("replicas = 1000", "replicas 1000 is out of range"),
        (
            "recycle = { max_mail = 0 }",
            "recycle.max_mail 0 is out of range",
        ),
        (
            "recycle = { at = [\"25:00\"] }",
            "recycle.at \"25:00\": hour",
        ),
        ("recycle = { at = [\"0 0 31 2 *\"] }", "never fires"),
    ] {
        let (line, _, message, hint) = bad(&one(extra));
        assert_eq!(line, 4, "{extra}: {message}");
        assert!(message.contains(says), "{extra}: {message}");
        assert!(!hint.is_empty(), "{extra}");
    }
}
