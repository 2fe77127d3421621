//! The kit as a black box: the real `wfhost-conformance` binary against the
//! real Rust conformance child (every scenario passes), and against children
//! that do not conform (the kit says which scenarios fail, and exits 1).
//!
//! `wfhost-child` belongs to another package, so it is found beside this
//! test's own binary in the target directory: build the binaries first
//! (`cargo build --workspace --bins && cargo nextest run --workspace`).

use std::path::PathBuf;
use std::process::{Command, Output};

const KIT: &str = env!("CARGO_BIN_EXE_wfhost-conformance");

/// The target directory this test was built into (`target/<profile>`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    // target/<profile>/deps/kit-<hash>
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary lives in target/<profile>/deps")
        .to_path_buf()
}

/// The `wfhost-child` binary of this build.
fn wfhost_child() -> PathBuf {
    let path = target_dir().join("wfhost-child");
    assert!(
        path.is_file(),
        "{} is missing: build the binaries first (cargo build --workspace --bins)",
        path.display()
    );
    path
}

/// Runs the kit with `args`, its PATH led by the target directory.
fn kit(args: &[&str]) -> Output {
    let path = std::env::var("PATH").unwrap_or_default();
    Command::new(KIT)
        .args(args)
        .env("PATH", format!("{}:{path}", target_dir().display()))
        .output()
        .expect("run wfhost-conformance")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every scenario's name, from `--list`.
fn scenarios() -> Vec<String> {
    let out = kit(&["--list"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).lines().map(str::to_owned).collect()
}

#[test]
fn the_list_names_every_scenario_of_the_brief_once() {
    let names = scenarios();
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "{names:?}");
    for name in [
        "handshake",
        "wrong-version-welcome",
        "ping-during-cancel-step",
        "ping-during-wait-step",
        "mail-acked-once",
        "redelivery-processed-once",
        "attempt-visible",
        "drain",
        "signed-cancel",
        "forged-cancel-bad-signature",
        "forged-cancel-other-key",
        "forged-cancel-claimed-key-id",
        "forged-cancel-other-deployment",
        "forged-cancel-unknown-run",
        "forged-cancel-malleated",
        "forged-cancel-short-signature",
        "forged-cancel-wrong-domain",
        "forged-cancel-small-order-r",
        "lease-expiry",
        "shutdown",
        "eof",
        "oversize-frame",
        "undecodable-frame",
    ]
    .into_iter()
    .chain(V3)
    .chain(["handshake-v2-supervisor"])
    {
        assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
    }
}

/// The scenarios only a child that speaks protocol 3 passes.
const V3: [&str; 14] = [
    "handshake-v3",
    "mail-started-and-done",
    "result-too-large",
    "cancel-mail-acknowledged",
    "cancel-mail-not-supported",
    "cancel-mail-unknown-item",
    "cancel-mail-forged",
    "redelivery-done-again",
    "ask-answered",
    "ask-answered-at-once",
    "ask-given-back-on-drain",
    "progress",
    "ask-bad-key",
    "ask-cancelled",
];

#[test]
fn with_protocol_2_the_list_leaves_out_the_scenarios_of_version_3() {
    let all = scenarios();
    let out = kit(&["--protocol", "2", "--list"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v2: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    let expected: Vec<String> = all
        .iter()
        .filter(|n| !V3.contains(&n.as_str()))
        .cloned()
        .collect();
    assert_eq!(v2, expected);
    assert!(v2.iter().any(|n| n == "handshake-v2-supervisor"), "{v2:?}");
    let out = kit(&["--protocol", "4", "--list"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
}

/// The Rust child held to protocol 2 (`--protocol 2`, what stands in for
/// a child deployed before version 3) passes the kit told so, under an
/// environment that offers 3; and fails the scenarios of version 3, by
/// name, when the kit is not told.
#[test]
fn the_rust_child_held_to_protocol_2_passes_as_a_child_of_version_2() {
    let child = wfhost_child();
    let child = child.to_str().expect("utf-8 path");
    let out = kit(&[
        "--protocol",
        "2",
        "--",
        child,
        "conformance",
        "--protocol",
        "2",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let count = scenarios().len() - V3.len();
    assert!(
        stdout.ends_with(&format!("{count} passed, 0 failed\n")),
        "{stdout}"
    );

    let out = kit(&[
        "--only",
        "handshake-v3",
        "--only",
        "mail-started-and-done",
        "--only",
        "handshake-v2-supervisor",
        "--",
        child,
        "conformance",
        "--protocol",
        "2",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.starts_with(' ')).collect();
    assert!(
        lines[0].starts_with("FAIL handshake-v3: expected a Hello of protocol 3")
            && lines[0].ends_with("got a Hello of protocol 2"),
        "{stdout}"
    );
    // In the kit's order, not --only's.
    assert!(
        lines[1].starts_with("PASS handshake-v2-supervisor ("),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with("FAIL mail-started-and-done: expected a child that speaks protocol 3"),
        "{stdout}"
    );
    assert_eq!(lines[3], "1 passed, 2 failed");

    // A child of version 3 fails where the kit was told to expect 2.
    let out = kit(&[
        "--protocol",
        "2",
        "--only",
        "handshake",
        "--",
        child,
        "conformance",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.starts_with(
            "FAIL handshake: expected a Hello of protocol 2 (the kit was told --protocol 2), got a Hello of protocol 3"
        ),
        "{stdout}"
    );
}

#[test]
fn the_rust_conformance_child_passes_every_scenario() {
    let child = wfhost_child();
    let names = scenarios();
    let out = kit(&["--", child.to_str().expect("utf-8 path"), "conformance"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    for name in &names {
        let prefix = format!("PASS {name} (");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(&prefix) && l.ends_with(" ms)")),
            "no {prefix}… line:\n{stdout}"
        );
    }
    assert!(!stdout.contains("FAIL"), "{stdout}");
    assert_eq!(
        lines.last().copied(),
        Some(format!("{} passed, 0 failed", names.len()).as_str()),
        "{stdout}"
    );
}

#[test]
fn a_child_that_exits_at_once_fails_every_scenario() {
    let names = scenarios();
    let out = kit(&[
        "--",
        "sh",
        "-c",
        "echo started; echo going away >&2; exit 0",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    for name in &names {
        let prefix = format!("FAIL {name}: expected ");
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with(&prefix) && l.contains(", got ")),
            "no {prefix}… line:\n{stdout}"
        );
    }
    // The child's output is shown under each failure.
    assert!(stdout.contains("    | started"), "{stdout}");
    assert!(stdout.contains("    | going away"), "{stdout}");
    assert!(
        stdout.ends_with(&format!("0 passed, {} failed\n", names.len())),
        "{stdout}"
    );
}

/// The demo workflow speaks the protocol but is no conformance child: the
/// kit passes what it does and fails, by name, what it does not.
#[test]
fn the_demo_child_passes_the_handshake_and_fails_what_it_does_not_do() {
    let child = wfhost_child();
    let out = kit(&[
        "--only",
        "handshake",
        "--only",
        "attempt-visible",
        "--only",
        "shutdown",
        "--",
        child.to_str().expect("utf-8 path"),
        "demo",
    ]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.starts_with(' ')).collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert!(lines[0].starts_with("PASS handshake ("), "{stdout}");
    assert!(
        lines[1].starts_with("FAIL attempt-visible: expected Custom(conformance.took"),
        "{stdout}"
    );
    assert!(lines[2].starts_with("PASS shutdown ("), "{stdout}");
    assert_eq!(lines[3], "2 passed, 1 failed");
}

/// The child's environment is cleared and then given PATH, the `--env`
/// pairs and the contract; and the pid it reports is its own after `exec`.
#[test]
fn the_child_gets_a_cleared_environment_plus_env_pairs() {
    let script = r#"[ -z "$HOME" ] && [ "$WFH_KIT_TEST" = yes ] && [ "$WFHOST_CONTROL_FD" = 3 ] && exec wfhost-child conformance"#;
    // The kit's own environment has HOME; the child's must not.
    let out = kit(&[
        "--only",
        "handshake",
        "--env",
        "WFH_KIT_TEST=yes",
        "--",
        "sh",
        "-c",
        script,
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.starts_with("PASS handshake ("), "{stdout}");
    let out = kit(&["--only", "handshake", "--", "sh", "-c", script]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
}

#[test]
fn usage_errors_exit_2_and_say_what_to_do() {
    for (args, says) in [
        (
            &["--only", "nope", "--", "true"][..],
            "unknown scenario \"nope\"",
        ),
        (
            &["--env", "WFHOST_PROTOCOL=1", "--", "true"][..],
            "set by the kit",
        ),
        (&["--env", "NOEQUALS", "--", "true"][..], "is not K=V"),
        (&["--only", "eof"][..], "no child command given"),
    ] {
        let out = kit(args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    let out = kit(&["--only", "shutdown", "--", "/nonexistent/child"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAIL shutdown: expected the child \"/nonexistent/child\" to start"),
        "{stdout}"
    );
}
