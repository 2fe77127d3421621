//! `wfhost journal verify` and `wfhost journal show` as an operator runs
//! them against a store. Journals with records come from a running
//! supervisor (see the supervisor tests); here: locating the store and the
//! key, empty stores, and every way the commands refuse.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

mod support;

use nix::sys::signal::Signal;
use serde_json::Value;
use support::supervise_until_exit;
use wfhost_ipc::signed::{Canonical, Signable, Signed, signing_bytes};
use wfhost_tests::{
    LONG, Supervisor, TempDir, demo, deployment, exec, keygen, ok, python, stderr, stdout, wfhost,
};

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

// ---- The journal guards itself (issue 13, findings 4 and 5) ----

/// Lower-case hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A supervisor whose one deployment `job` is up, with its journal holding
/// at least its spawn record.
fn running() -> Supervisor {
    let sup = Supervisor::start(&deployment("job", &exec("sleep 1000"), ""));
    sup.ready_pid("job", LONG);
    sup
}

/// `(seq, hash)` of every journal record, oldest first.
fn heads(records: &[Value]) -> Vec<(u64, String)> {
    records
        .iter()
        .map(|r| {
            let seq = r["seq"].as_u64().expect("seq");
            (seq, r["hash"].as_str().expect("hash").to_owned())
        })
        .collect()
}

/// `wfhost journal verify --config CONFIG EXTRA...` of `sup`.
fn verify_of(sup: &Supervisor, extra: &[&str]) -> Output {
    let mut args = vec!["journal", "verify"];
    args.extend_from_slice(extra);
    sup.client(&args)
}

/// Recycles `job` and waits until the journal has grown past `after`.
fn recycle_and_wait(sup: &Supervisor, after: usize) -> Vec<Value> {
    ok("recycle", &sup.client(&["recycle", "job"]));
    sup.ready_pid("job", LONG);
    let records = sup.journal();
    assert!(records.len() > after, "{records:#?}");
    records
}

#[test]
fn a_cut_tail_never_gets_its_seqs_reused_and_verify_names_it() {
    let sup = running();
    let before = heads(&recycle_and_wait(&sup, 1));
    let (last, last_hash) = before.last().cloned().expect("records");
    assert!(last >= 3, "{before:?}");
    let saved = format!("{last}:{last_hash}");
    // Someone with access to the database cuts the newest two records.
    let cut = last - 1;
    let script = format!(
        "import sqlite3, sys\n\
         c = sqlite3.connect(sys.argv[1], timeout=30)\n\
         assert c.execute('DELETE FROM journal WHERE seq >= {cut}').rowcount == 2\n\
         c.commit()\n"
    );
    ok("cut the tail", &python(&sup.db(), &script));
    let out = verify_of(&sup, &["--expect-head", &saved]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "journal broken at record {cut}: records {cut} to {last} were cut from the end of the journal"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!("expected head {saved}: record {last} is missing")),
        "{err}"
    );

    // New records are numbered after the cut ones, never over them.
    let after = heads(&recycle_and_wait(&sup, before.len() - 2));
    let new: Vec<u64> = after.iter().map(|h| h.0).filter(|&s| s >= cut).collect();
    assert!(!new.is_empty(), "{after:?}");
    assert!(
        new.iter().all(|&s| s > last),
        "seqs {new:?} reuse the cut {cut}..={last}"
    );
    let out = verify_of(&sup, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "journal broken at record {}: records {cut} to {last} are missing",
            new[0]
        )),
        "{err}"
    );
}

#[test]
fn expect_head_checks_a_head_saved_earlier() {
    let sup = running();
    let records = recycle_and_wait(&sup, 1);
    let all = heads(&records);
    let (seq, hash) = all.last().cloned().expect("records");
    let out = verify_of(&sup, &[]);
    let text = ok("verify", &out);
    assert!(
        text.contains(&format!("head: seq {seq} hash {hash}"))
            && text.contains(&format!("--expect-head {seq}:{hash}")),
        "{text}"
    );
    // The current head and any earlier one are present and unchanged.
    for (s, h) in [(seq, &hash), (all[0].0, &all[0].1)] {
        let out = verify_of(&sup, &["--expect-head", &format!("{s}:{h}")]);
        let text = ok("verify --expect-head", &out);
        assert!(
            text.contains(&format!("expected head {s}: present and unchanged")),
            "{text}"
        );
    }
    // A record that differs from the saved head.
    let wrong = format!("{seq}:{}", "ab".repeat(32));
    let out = verify_of(&sup, &["--expect-head", &wrong]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!("expected head {wrong}: record {seq} has changed")),
        "{}",
        stderr(&out)
    );
    // A head the journal never reached (or lost).
    let beyond = format!("{}:{hash}", seq + 1000);
    let out = verify_of(&sup, &["--expect-head", &beyond]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("is missing"), "{}", stderr(&out));
    // Not a head at all.
    let out = verify_of(&sup, &["--expect-head", "12"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--expect-head"), "{}", stderr(&out));
}

/// A journal record as a forger with database access and the format, but
/// not the supervisor's key, writes it.
struct Forged {
    seq: u64,
    at_ms: u64,
    body: String,
    prev_hash: [u8; 32],
}

impl Signable for Forged {
    const DOMAIN: &'static str = "wfhost/journal/v1";

    fn write_canonical(&self, out: &mut Canonical) {
        out.u64(self.seq)
            .u64(self.at_ms)
            .str("cancel")
            .opt_str(Some("job"))
            .str(&self.body)
            .bytes(&self.prev_hash);
    }
}

#[test]
fn the_supervisor_refuses_to_start_on_a_forged_record_and_says_why() {
    // Two runs: the second start verifies the first run's records.
    let mut sup = running();
    sup.signal(Signal::SIGTERM);
    assert!(sup.wait_exit(LONG).success());
    let (dir, config) = sup.into_parts();
    let mut sup = Supervisor::start_in(dir, config);
    sup.ready_pid("job", LONG);
    let log = sup.plain_log();
    assert!(
        log.contains("journal verified at start") && log.contains("head="),
        "{log}"
    );
    sup.signal(Signal::SIGTERM);
    assert!(sup.wait_exit(LONG).success());
    let records = sup.journal();
    let (seq, hash) = heads(&records).last().cloned().expect("records");

    // A cancel record forged with another key, chained to the real head,
    // and the head row moved to it.
    let prev: [u8; 32] = wfhost_tests::unhex(&hash).try_into().expect("32 bytes");
    let forged = Forged {
        seq: seq + 1,
        at_ms: wfhost_tests::unix_ms(),
        body: r#"{"origin":"operator","run":"all"}"#.into(),
        prev_hash: prev,
    };
    let bytes = hex(&signing_bytes(&forged));
    let foreign = wfhost_ipc::key::generate().expect("a key");
    let signed = Signed::sign(forged, &foreign);
    let script = format!(
        "import hashlib, sqlite3, sys\n\
         b = bytes.fromhex('{bytes}')\n\
         h = hashlib.sha256(b).digest()\n\
         c = sqlite3.connect(sys.argv[1])\n\
         c.execute('INSERT INTO journal VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)', \
             ({seq}, {at}, 'cancel', 'job', {body:?}, bytes.fromhex('{hash}'), h, \
              bytes.fromhex('{key_id}'), bytes.fromhex('{sig}')))\n\
         c.execute('UPDATE journal_head SET seq = ?, hash = ?', ({seq}, h))\n\
         c.commit()\n",
        seq = signed.record.seq,
        at = signed.record.at_ms,
        body = signed.record.body,
        key_id = hex(&signed.key_id.0),
        sig = hex(&signed.signature),
    );
    let db = sup.db();
    ok("forge a record", &python(&db, &script));
    let (dir, config) = sup.into_parts();

    let (code, said) = supervise_until_exit(&config);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "journal broken at record {}: it is signed by unknown key {}",
            seq + 1,
            signed.key_id
        )),
        "{said}"
    );
    assert!(
        said.contains("wfhost journal verify") && said.contains("move the store aside"),
        "{said}"
    );
    // Nothing was appended to it, and no child was started.
    let out = wfhost(&["journal", "show", "--json", "--config", s(&config)]);
    let shown = wfhost_tests::json_lines(&stdout(&out));
    assert_eq!(shown.len(), records.len() + 1, "{shown:#?}");
    assert!(!said.contains("spawned"), "{said}");
    drop(dir);
}

#[test]
fn the_wal_and_shared_memory_files_are_as_private_as_the_database() {
    let sup = running();
    let db = sup.db();
    for suffix in ["", "-wal", "-shm"] {
        let mut p = db.clone().into_os_string();
        p.push(suffix);
        let mode = std::fs::metadata(&p)
            .unwrap_or_else(|e| panic!("{}: {e}", Path::new(&p).display()))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{}", Path::new(&p).display());
    }
}

/// strace, if this machine has it (CI installs it).
fn strace() -> Option<std::path::PathBuf> {
    ["/usr/bin/strace", "/bin/strace"]
        .into_iter()
        .map(std::path::PathBuf::from)
        .find(|p| p.exists())
}

#[test]
fn a_store_that_turns_read_only_is_named_read_only() {
    let Some(strace) = strace() else {
        panic!("strace is missing: apt-get install -y strace");
    };
    let sup = Supervisor::start(&deployment(
        "inbox",
        &demo(&["--step-ms", "1", "--approve-ms", "1"]),
        "",
    ));
    sup.ready_pid("inbox", LONG);
    ok("send", &sup.client(&["send", "inbox", "before"]));
    // Every write and sync of the supervisor now fails with EROFS, as on a
    // filesystem the kernel remounted read-only.
    let mut tracer = Command::new(strace)
        .args(["-f", "-qq", "-o", "/dev/null", "-p", &sup.pid().to_string()])
        .arg("-e")
        .arg("inject=pwrite64,fsync,fdatasync:error=EROFS")
        .arg("-e")
        .arg("trace=pwrite64,fsync,fdatasync")
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn strace");
    // strace attaches asynchronously: wait until every thread is traced.
    let tasks = format!("/proc/{}/task", sup.pid());
    let traced = |task: std::fs::DirEntry| {
        let text = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix("TracerPid:"))
            .is_some_and(|pid| pid.trim() != "0")
    };
    wfhost_tests::wait_for("strace to attach to every thread", LONG, || {
        let mut all = std::fs::read_dir(&tasks).ok()?.filter_map(Result::ok);
        all.all(traced).then_some(())
    });
    let out = sup.client(&["send", "inbox", "during"]);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(tracer.id() as i32),
        Signal::SIGTERM,
    );
    let _ = tracer.wait();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains("accepting mail failed: the store is read-only"),
        "{err}"
    );
    assert!(err.contains("mount -o remount,rw"), "{err}");
    assert!(!err.contains("check the disk"), "{err}");
    // Writable again: the store takes mail with no operator action.
    wfhost_tests::wait_for("the store to accept mail again", LONG, || {
        sup.client(&["send", "inbox", "after"])
            .status
            .success()
            .then_some(())
    });
}
