//! `wfhost journal verify` and `wfhost journal show` as an operator runs
//! them against a store. Journals with records come from a running
//! supervisor (see the supervisor tests); here: locating the store and the
//! key, empty stores, and every way the commands refuse.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use wfhost_tests::{TempDir, keygen, stderr, stdout, wfhost};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A state dir holding an empty database file (SQLite treats it as a new,
/// empty database) and a signing key; returns the key's public hex and id.
fn empty_store(dir: &TempDir) -> (String, String) {
    std::fs::write(dir.join("wfhost.db"), b"").unwrap();
    let (out, public, id) = keygen(&dir.join("supervisor.key"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!public.is_empty() && !id.is_empty(), "{}", stdout(&out));
    (public, id)
}

/// Runs `wfhost journal CMD --state-dir DIR EXTRA...`.
fn journal(cmd: &str, dir: &TempDir, extra: &[&str]) -> Output {
    let mut args = vec!["journal", cmd, "--state-dir", s(dir.path())];
    args.extend_from_slice(extra);
    wfhost(&args)
}

#[test]
fn verify_needs_to_know_which_journal() {
    for cmd in ["verify", "show"] {
        let out = wfhost(&["journal", cmd]);
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        let err = stderr(&out);
        assert!(
            err.contains("--config") && err.contains("--state-dir"),
            "{err}"
        );
    }
}

#[test]
fn verify_never_creates_a_journal() {
    let dir = TempDir::new();
    let out = journal("verify", &dir, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!(
            "error: no journal at {}/wfhost.db",
            dir.path().display()
        )),
        "{err}"
    );
    assert!(err.contains("help:"), "{err}");
    assert!(!dir.join("wfhost.db").exists());
    let out = journal("show", &dir, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(!dir.join("wfhost.db").exists());
}

#[test]
fn an_empty_journal_verifies_with_the_state_dirs_key() {
    let dir = TempDir::new();
    let (_, key_id) = empty_store(&dir);
    let out = journal("verify", &dir, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("journal ok: 0 records\n"), "{text}");
    assert!(text.contains(&format!("key id: {key_id}")), "{text}");
}

#[test]
fn verify_takes_a_key_file_or_a_public_key() {
    let dir = TempDir::new();
    let (public, key_id) = empty_store(&dir);
    let out = journal("verify", &dir, &["--public-key", &public]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains(&key_id));

    let elsewhere = TempDir::new();
    std::fs::rename(dir.join("supervisor.key"), elsewhere.join("k")).unwrap();
    let out = journal("verify", &dir, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("does not exist"), "{err}");
    assert!(err.contains("--public-key"), "{err}");
    let out = journal("verify", &dir, &["--key", s(&elsewhere.join("k"))]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let out = journal("verify", &dir, &["--key", "k", "--public-key", &public]);
    assert_eq!(out.status.code(), Some(2), "the two key options conflict");

    let out = journal("verify", &dir, &["--public-key", "zz"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--public-key"), "{}", stderr(&out));
}

#[test]
fn verify_finds_the_store_and_key_through_the_config() {
    let dir = TempDir::new();
    let state = dir.join("state");
    std::fs::create_dir(&state).unwrap();
    std::fs::write(state.join("wfhost.db"), b"").unwrap();
    let (out, _, _) = keygen(&dir.join("signing.key"));
    assert_eq!(out.status.code(), Some(0));
    let config = dir.join("wfhost.toml");
    std::fs::write(
        &config,
        "[supervisor]\nstate_dir = \"state\"\nsigning_key = \"signing.key\"\n",
    )
    .unwrap();
    let out = wfhost(&["journal", "verify", "--config", s(&config)]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).starts_with("journal ok: 0 records"));

    // --state-dir overrides the config's.
    let out = wfhost(&[
        "journal",
        "verify",
        "--config",
        s(&config),
        "--state-dir",
        s(dir.path()),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no journal at"), "{}", stderr(&out));
}

#[test]
fn a_bad_config_is_a_config_error() {
    let dir = TempDir::new();
    let config = dir.join("wfhost.toml");
    std::fs::write(&config, "[supervisor]\nstate_dir = 5\n").unwrap();
    let out = wfhost(&["journal", "verify", "--config", s(&config)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with(&format!("{}:2:13: invalid type", config.display())),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_key_others_can_read_is_refused() {
    let dir = TempDir::new();
    empty_store(&dir);
    let key = dir.join("supervisor.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = journal("verify", &dir, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!("chmod 600 {}", key.display())),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_file_that_is_not_a_database_is_named() {
    let dir = TempDir::new();
    std::fs::write(dir.join("wfhost.db"), vec![b'x'; 4096]).unwrap();
    let out = journal("verify", &dir, &[]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{}/wfhost.db", dir.path().display())),
        "{err}"
    );
    assert!(err.contains("not a wfhost database"), "{err}");
}

#[test]
fn show_lists_an_empty_journal() {
    let dir = TempDir::new();
    empty_store(&dir);
    let out = journal("show", &dir, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>().len(),
        1,
        "header only"
    );
    assert!(stdout(&out).starts_with("SEQ  TIME"), "{}", stdout(&out));
    assert!(stderr(&out).contains("no records"), "{}", stderr(&out));

    let out = journal("show", &dir, &["--json", "--deployment", "x"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
}

#[test]
fn journal_help_documents_both_commands() {
    let out = wfhost(&["journal", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    assert!(text.contains("verify") && text.contains("show"), "{text}");
    let out = wfhost(&["journal", "verify", "--help"]);
    let text = stdout(&out);
    for flag in [
        "--config",
        "--state-dir",
        "--key",
        "--public-key",
        "Exit status",
    ] {
        assert!(text.contains(flag), "{flag}: {text}");
    }
}
