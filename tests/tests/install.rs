//! The one documented way to install: `contrib/install.sh` puts both
//! binaries, every manual page (generated from the clap definitions) and
//! the completions under a prefix, and what it installs runs.

use std::path::Path;
use std::process::Command;

use wfhost_tests::{TempDir, bin_dir, ok, stderr};

#[test]
fn install_sh_installs_both_binaries_their_pages_and_completions() {
    let prefix = TempDir::new();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../contrib/install.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(["--bin-dir", bin_dir().to_str().unwrap(), "--prefix"])
        .arg(prefix.path())
        .output()
        .expect("run contrib/install.sh");
    let said = ok("contrib/install.sh", &out);
    assert!(said.contains("installed wfhost and wfhost-child"), "{said}");
    let p = prefix.path();
    for file in [
        "bin/wfhost",
        "bin/wfhost-child",
        "share/man/man1/wfhost.1",
        "share/man/man1/wfhost-status.1",
        "share/man/man1/wfhost-logs.1",
        "share/man/man1/wfhost-reload.1",
        "share/man/man1/wfhost-journal-verify.1",
        "share/man/man1/wfhost-child-exec.1",
        "share/bash-completion/completions/wfhost",
        "share/zsh/site-functions/_wfhost",
        "share/fish/vendor_completions.d/wfhost.fish",
    ] {
        assert!(p.join(file).is_file(), "{file} not installed");
    }
    // The pages are the --help text, rendered for man.
    let status = std::fs::read_to_string(p.join("share/man/man1/wfhost-status.1")).unwrap();
    assert!(status.starts_with(".ie \\n(.g .ds Aq"), "roff: {status}");
    assert!(status.contains("WFHOST_CONFIG"), "{status}");
    let exec = std::fs::read_to_string(p.join("share/man/man1/wfhost-child-exec.1")).unwrap();
    assert!(exec.contains("WFHOST_RUN"), "{exec}");
    let bash = std::fs::read_to_string(p.join("share/bash-completion/completions/wfhost")).unwrap();
    for word in ["reload", "logs", "stop", "man"] {
        assert!(bash.contains(word), "bash completes {word}");
    }
    // The installed wfhost finds the installed wfhost-child beside it.
    let config = prefix.join("wfhost.toml");
    std::fs::write(
        &config,
        "[[deployment]]\nid = \"a\"\ncommand = [\"wfhost-child\", \"exec\", \"--\", \"sleep\", \"1\"]\n",
    )
    .unwrap();
    let out = Command::new(p.join("bin/wfhost"))
        .args(["check-config", config.to_str().unwrap()])
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("run the installed wfhost");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    // A wrong option is refused with a hint.
    let out = Command::new("bash")
        .arg(&script)
        .arg("--nope")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown argument --nope (try --help)"));
}

#[test]
fn completions_help_says_where_each_shell_looks() {
    let help = ok(
        "completions --help",
        &wfhost_tests::wfhost(&["completions", "--help"]),
    );
    for shell in ["bash:", "zsh:", "fish:"] {
        assert!(help.contains(shell), "{help}");
    }
    assert!(
        help.contains("bash-completion/completions/wfhost"),
        "{help}"
    );
}
