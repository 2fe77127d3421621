//! The foot-guns of a newcomer's first hour, each caught before it bites:
//! `check-config` lists every program it cannot find (the command, the
//! command `wfhost-child exec` hosts, an interpreter's script); a program
//! that does not speak the protocol is named as such with the fix; a child
//! starts in the config file's directory so relative arguments work from
//! any directory; `exec` tells its command who it works for; every command
//! finds the config through `WFHOST_CONFIG`.

use std::process::{Command, Output};

use wfhost_tests::{
    LONG, Supervisor, TempDir, bin, bin_dir, command, deployment, exec_with, ok, stderr, stdout,
    wait_for, write_config,
};

/// Runs `wfhost ARGS` with `WFHOST_CONFIG` set to `config` (or unset).
fn wfhost_env(args: &[&str], config: Option<&std::path::Path>) -> Output {
    let mut cmd = Command::new(bin("wfhost"));
    cmd.args(args);
    match config {
        Some(path) => cmd.env("WFHOST_CONFIG", path),
        None => cmd.env_remove("WFHOST_CONFIG"),
    };
    cmd.output().expect("run wfhost")
}

#[test]
fn check_config_names_every_missing_program_with_its_position() {
    let dir = TempDir::new();
    let path = dir.join("wfhost.toml");
    let child = bin("wfhost-child");
    let child = child.display();
    std::fs::write(
        &path,
        format!(
            "[[deployment]]\nid = \"typo\"\ncommand = [\"{child}\", \"exec\", \"--drain\", \"wait\", \"--\", \"shh\", \"-c\", \"true\"]\n\n\
             [[deployment]]\nid = \"script\"\ncommand = [\"sh\", \"jobs/nightly.sh\"]\n\n\
             [[deployment]]\nid = \"hosted-script\"\ncommand = [\"{child}\", \"exec\", \"--\", \"sh\", \"gone.sh\"]\n\n\
             [[deployment]]\nid = \"fine\"\ncommand = [\"{child}\", \"exec\", \"--\", \"sleep\", \"1\"]\n"
        ),
    )
    .unwrap();
    let out = wfhost_env(&["check-config", path.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    let p = path.display();
    for expected in [
        format!("{p}:3:"),
        "deployment \"typo\": program \"shh\" run by `wfhost-child exec` is not on the child's PATH".to_owned(),
        format!("{p}:7:18: deployment \"script\": script \"jobs/nightly.sh\" for sh cannot be found at {}/jobs/nightly.sh", dir.path().display()),
        "deployment \"hosted-script\": script \"gone.sh\" for sh cannot be found".to_owned(),
        "3 programs are missing; the rest of".to_owned(),
    ] {
        assert!(err.contains(&expected), "missing {expected:?} in\n{err}");
    }
    assert!(
        !err.contains("\"fine\""),
        "sleep is on the child's PATH: {err}"
    );
    assert!(err.contains("help: install it, fix its spelling"), "{err}");
    assert_eq!(stdout(&out), "", "no ok line");

    // Fixed, the same file passes.
    std::fs::create_dir(dir.join("jobs")).unwrap();
    std::fs::write(dir.join("jobs/nightly.sh"), "exit 0\n").unwrap();
    std::fs::write(dir.join("gone.sh"), "exit 0\n").unwrap();
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("\"shh\"", "\"sh\"");
    std::fs::write(&path, text).unwrap();
    let out = wfhost_env(&["check-config", "--config", path.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "ok: 4 deployments: typo, script, hosted-script, fine\n"
    );
}

#[test]
fn a_missing_command_is_listed_with_the_others_once() {
    let dir = TempDir::new();
    let path = dir.join("wfhost.toml");
    std::fs::write(
        &path,
        "[[deployment]]\nid = \"a\"\ncommand = [\"no-such-program-x\"]\n\n[[deployment]]\nid = \"b\"\ncommand = [\"no-such-program-y\"]\n",
    )
    .unwrap();
    let out = wfhost_env(&["check-config", path.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(
        err.matches("no-such-program-x").count(),
        1,
        "said once: {err}"
    );
    assert!(
        err.contains("no-such-program-y"),
        "the second is listed too: {err}"
    );
}

#[test]
fn a_program_that_does_not_speak_the_protocol_is_named_with_the_fix() {
    let sup = Supervisor::start(&format!(
        "{}{}",
        deployment(
            "quits",
            &command(&["sh", "-c", "echo plain program; exit 3"]),
            ""
        ),
        deployment(
            "lingers",
            &command(&["sleep", "1000"]),
            "ready_timeout = \"500ms\""
        ),
    ));
    let hint = "it never sent a Hello on fd 3, so it does not speak the wfhost protocol";
    let fix = "command = [\"wfhost-child\", \"exec\", \"--\", PROGRAM, ARGS…]";
    for (id, first) in [
        ("quits", "exited unexpectedly: exit status 3; "),
        ("lingers", "no Ready within ready_timeout; "),
    ] {
        let d = sup.wait_deployment(id, "a last exit", LONG, |d| d["last_exit"].is_string());
        let last = d["last_exit"].as_str().unwrap_or_default();
        // A closed channel may be seen before the exit: both name the fix.
        assert!(
            last.starts_with(first)
                || id == "quits" && last.contains("channel closed before Hello"),
            "{id}: {last}"
        );
        assert!(last.contains(hint) && last.contains(fix), "{id}: {last}");
    }
    wait_for("the log to say it too", LONG, || {
        let log = sup.plain_log();
        log.lines()
            .any(|l| l.contains("quits[") && l.contains(hint))
            .then_some(())
    });
}

#[test]
fn a_child_starts_in_the_config_directory_so_relative_arguments_work() {
    let dir = TempDir::new();
    let script = format!(
        "pwd > where.txt\nexec {}/wfhost-child exec -- sleep 1000\n",
        bin_dir().display()
    );
    std::fs::write(dir.join("run.sh"), &script).unwrap();
    std::fs::create_dir(dir.join("work")).unwrap();
    std::fs::write(dir.join("work/run.sh"), &script).unwrap();
    let config = dir.join("wfhost.toml");
    write_config(
        &config,
        &dir.join("state"),
        &(deployment("here", &command(&["sh", "run.sh"]), "")
            + &deployment(
                "there",
                &command(&["sh", "run.sh"]),
                "working_dir = \"work\"",
            )),
    );
    // The supervisor runs from another directory (the test's own).
    assert_ne!(std::env::current_dir().unwrap(), dir.path());
    let sup = Supervisor::start_in(dir, config);
    sup.ready_pid("here", LONG);
    sup.ready_pid("there", LONG);
    let root = sup.dir().path().to_path_buf();
    for (file, want) in [
        ("where.txt", root.clone()),
        ("work/where.txt", root.join("work")),
    ] {
        let got = wait_for(file, LONG, || std::fs::read_to_string(root.join(file)).ok());
        assert_eq!(got.trim(), want.to_str().unwrap(), "{file}");
    }
}

#[test]
fn exec_tells_its_command_who_it_works_for_and_never_hands_on_the_channel() {
    let report = "echo dep=$WFHOST_DEPLOYMENT chan=$WFHOST_CHANNEL_ID run=$WFHOST_RUN \
                  fd=${WFHOST_CONTROL_FD:-none} key=${WFHOST_SUPERVISOR_KEY:-none} \
                  proto=${WFHOST_PROTOCOL:-none}; exec sleep 1000";
    let sup = Supervisor::start(&format!(
        "{}{}",
        deployment("named", &exec_with(&["--run", "nightly"], report), ""),
        deployment("plain", &exec_with(&[], report), ""),
    ));
    for (id, run) in [("named", "nightly".to_owned()), ("plain", String::new())] {
        let pid = sup.ready_pid(id, LONG);
        let channel = sup.deployment(id)["channel_id"]
            .as_str()
            .expect("channel id")
            .to_owned();
        let run = if run.is_empty() {
            format!("exec-{pid}")
        } else {
            run
        };
        let want = format!("dep={id} chan={channel} run={run} fd=none key=none proto=none");
        wait_for(&format!("{id}'s report"), LONG, || {
            sup.plain_log().contains(&want).then_some(())
        });
    }
}

#[test]
fn every_command_finds_the_config_through_wfhost_config() {
    let sup = Supervisor::start(&deployment("svc", &exec_with(&[], "sleep 1000"), ""));
    sup.ready_pid("svc", LONG);
    let config = sup.config().to_path_buf();
    let out = wfhost_env(&["status", "--json"], Some(&config));
    let v: serde_json::Value = serde_json::from_str(&ok("status", &out)).expect("JSON");
    assert_eq!(v["deployments"][0]["id"], "svc");
    ok(
        "check-config",
        &wfhost_env(&["check-config"], Some(&config)),
    );
    // --config and --socket still win over it.
    let elsewhere = std::path::Path::new("/nonexistent/wfhost.toml");
    let out = wfhost_env(
        &["status", "--config", config.to_str().unwrap()],
        Some(elsewhere),
    );
    ok("status --config", &out);

    // Neither: the error says where it looked.
    let out = wfhost_env(&["status"], None);
    if std::path::Path::new("/etc/wfhost/wfhost.toml").exists() {
        return;
    }
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    for word in [
        "--config",
        "WFHOST_CONFIG",
        "/etc/wfhost/wfhost.toml",
        "--socket",
    ] {
        assert!(err.contains(word), "{word} in {err}");
    }
    // And every client command's --help says the order.
    for cmd in ["status", "recycle", "drain", "send", "events", "supervise"] {
        let out = wfhost_env(&[cmd, "--help"], None);
        let help = stdout(&out);
        assert!(
            help.contains("$WFHOST_CONFIG") && help.contains("/etc/wfhost/wfhost.toml"),
            "{cmd} --help:\n{help}"
        );
    }
}
