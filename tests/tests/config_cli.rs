//! `wfhost check-config` and `wfhost keygen` as an operator runs them.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use wfhost_tests::{TempDir, keygen, stderr, stdout, wfhost};

/// Writes `text` as a config in `dir` and runs `wfhost check-config` on it.
fn check(dir: &TempDir, text: &str) -> (Output, String) {
    let path = dir.join("wfhost.toml");
    std::fs::write(&path, text).unwrap();
    let path = path.to_str().unwrap().to_string();
    (wfhost(&["check-config", &path]), path)
}

/// Like [`check`], for a config `wfhost check-config` must refuse (exit
/// 2); returns its stderr and the config's path.
fn check_refused(dir: &TempDir, text: &str) -> (String, String) {
    let (out, path) = check(dir, text);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    (stderr(&out), path)
}

#[test]
fn check_config_accepts_the_shipped_example() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/wfhost.toml");
    let out = wfhost(&["check-config", example.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "ok: 3 deployments: ticker, greeter, orders\n");
}

#[test]
fn check_config_summarises_a_good_file() {
    let dir = TempDir::new();
    let (out, _) = check(
        &dir,
        "[supervisor]\nstate_dir = \"state\"\n\n[[deployment]]\nid = \"a\"\ncommand = [\"sh\", \"-c\", \"true\"]\n\n[[deployment]]\nid = \"b\"\ncommand = [\"/bin/sh\"]\n",
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert_eq!(stdout(&out), "ok: 2 deployments: a, b\n");
    assert!(
        !dir.join("state").exists(),
        "checking must not create the state dir"
    );

    let (out, _) = check(
        &dir,
        "[[deployment]]\nid = \"solo\"\ncommand = [\"/bin/sh\"]\n",
    );
    assert_eq!(stdout(&out), "ok: 1 deployment: solo\n");
}

#[test]
fn a_bad_value_is_reported_as_file_line_column_with_help() {
    let dir = TempDir::new();
    let (out, path) = check(
        &dir,
        "[[deployment]]\nid = \"a\"\ncommand = [\"/bin/sh\"]\nkill_timeout = \"10\"\n",
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stdout(&out), "");
    let err = stderr(&out);
    let mut lines = err.lines();
    assert_eq!(
        lines.next(),
        Some(format!("{path}:4:16: duration \"10\" has no unit").as_str())
    );
    assert!(
        lines
            .next()
            .is_some_and(|l| l.starts_with("  help: write \"10s\"")),
        "{err}"
    );
}

#[test]
fn an_unknown_key_is_refused_with_its_position() {
    let dir = TempDir::new();
    let (err, path) = check_refused(
        &dir,
        "[supervisor]\nstate_dir = \"s\"\npolicy_intervall = \"5s\"\n",
    );
    assert!(
        err.starts_with(&format!("{path}:3:1: unknown field `policy_intervall`")),
        "{err}"
    );
    assert!(
        err.contains("help: did you mean `policy_interval`?"),
        "the nearest key, not all of them: {err}"
    );
    assert!(!err.contains("expected one of"), "{err}");
}

#[test]
fn an_ambiguous_size_asks_for_mib() {
    let dir = TempDir::new();
    let (err, path) = check_refused(
        &dir,
        "[[deployment]]\nid = \"a\"\ncommand = [\"/bin/sh\"]\nrecycle = { max_rss = \"512M\" }\n",
    );
    assert!(
        err.starts_with(&format!("{path}:4:23: size \"512M\" is ambiguous")),
        "{err}"
    );
    assert!(err.contains("write \"512MiB\""), "{err}");
}

#[test]
fn a_semantic_error_points_at_the_offending_value() {
    let dir = TempDir::new();
    let (err, path) = check_refused(
        &dir,
        "[defaults]\nliveness_interval = \"10s\"\n\n[[deployment]]\nid = \"a\"\ncommand = [\"/bin/sh\"]\nliveness_timeout = \"5s\"\n",
    );
    assert!(
        err.starts_with(&format!(
            "{path}:7:20: liveness_timeout (5s) must be longer than liveness_interval (10s)"
        )),
        "{err}"
    );
    let (err, path) = check_refused(
        &dir,
        "[[deployment]]\nid = \"a\"\ncommand = [\"/bin/sh\"]\n[[deployment]]\nid = \"a\"\ncommand = [\"/bin/sh\"]\n",
    );
    assert!(
        err.starts_with(&format!("{path}:5:6: deployment id \"a\" is used twice")),
        "{err}"
    );
}

#[test]
fn a_missing_program_is_a_config_error() {
    let dir = TempDir::new();
    let (err, path) = check_refused(
        &dir,
        "[[deployment]]\nid = \"a\"\ncommand = [\"./not-there\"]\n",
    );
    assert!(
        err.starts_with(&format!("{path}:3:12: deployment \"a\": program ")),
        "{err}"
    );
    assert!(
        err.contains(&format!("{}/not-there", dir.path().display())),
        "{err}"
    );
}

#[test]
fn an_unreadable_file_names_the_file_and_the_os_error() {
    let out = wfhost(&["check-config", "/nonexistent/wfhost.toml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.starts_with(
            "/nonexistent/wfhost.toml: cannot read the config file: No such file or directory"
        ),
        "{err}"
    );
}

#[test]
fn check_config_without_a_path_says_where_it_looked() {
    if Path::new("/etc/wfhost/wfhost.toml").exists() {
        return;
    }
    let out = std::process::Command::new(wfhost_tests::bin("wfhost"))
        .arg("check-config")
        .env_remove("WFHOST_CONFIG")
        .output()
        .expect("run wfhost");
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("no config file: --config is not given, WFHOST_CONFIG is not set, and /etc/wfhost/wfhost.toml does not exist"),
        "{err}"
    );
}

#[test]
fn keygen_writes_a_private_pem_key_and_prints_its_public_half() {
    let dir = TempDir::new();
    let path = dir.join("supervisor.key");
    let (out, public, id) = keygen(&path);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let pem = std::fs::read_to_string(&path).unwrap();
    assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{pem}");
    assert_eq!(public.len(), 64, "{}", stdout(&out));
    assert_eq!(id.len(), 16, "{}", stdout(&out));
    assert!(
        public
            .chars()
            .chain(id.chars())
            .all(|c| c.is_ascii_hexdigit())
    );

    let (_, other_public, other_id) = keygen(&dir.join("other.key"));
    assert_ne!(public, other_public, "every key is fresh");
    assert_ne!(id, other_id);
}

#[test]
fn keygen_refuses_to_overwrite() {
    let dir = TempDir::new();
    let path = dir.join("supervisor.key");
    std::fs::write(&path, "precious").unwrap();
    let (out, _, _) = keygen(&path);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("refusing to overwrite"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
}

#[test]
fn keygen_into_a_missing_directory_fails_with_the_reason() {
    let dir = TempDir::new();
    let (out, _, _) = keygen(&dir.join("no/such/dir/k.key"));
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("cannot write signing key"), "{err}");
    assert!(err.contains("No such file or directory"), "{err}");
}

#[test]
fn keygen_needs_out() {
    let out = wfhost(&["keygen"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--out"), "{}", stderr(&out));
}
