//! A supervisor whose store is PostgreSQL (`[store] url`), on a throwaway
//! server the test starts itself: single-host use works as on SQLite
//! (mail in FIFO order through recycles, the journal and `journal verify`,
//! the start-up check, the event log), and a bad or unreachable url is
//! named.

mod support;

use nix::sys::signal::Signal;
use support::supervise_until_exit;
use wfhost_tests::postgres::PgServer;
use wfhost_tests::{
    LONG, Supervisor, TempDir, demo, deployment, describe, mail_counts, ok, stderr, wfhost,
    write_config,
};

/// A config body with `[store] url` and a mail-taking deployment `orders`.
fn body(url: &str) -> String {
    format!(
        "[store]\nurl = \"{url}\"\n\n{}",
        deployment(
            "orders",
            &demo(&["--step-ms", "1", "--approve-ms", "1"]),
            ""
        )
    )
}

/// Sends `n` items to `orders`; returns their ids.
fn send(sup: &Supervisor, n: usize, tag: &str) -> Vec<u64> {
    (0..n)
        .map(|i| {
            let out = sup.client(&["send", "orders", &format!("{tag}-{i}")]);
            let text = ok("send", &out);
            text.trim()
                .strip_prefix("accepted mail ")
                .and_then(|rest| rest.split(' ').next())
                .and_then(|id| id.parse().ok())
                .unwrap_or_else(|| panic!("unexpected send output: {}", describe(&out)))
        })
        .collect()
}

/// Waits until `orders` has `done` items done and none waiting.
fn wait_done(sup: &Supervisor, done: u64) {
    sup.wait_deployment("orders", "all mail done", LONG, |d| {
        mail_counts(d) == (0, 0, done)
    });
}

#[test]
fn a_supervisor_on_postgres_takes_mail_through_recycles_and_its_journal_verifies() {
    let pg = PgServer::start();
    let sup = Supervisor::start(&body(&pg.url("postgres")));
    let first = sup.ready_pid("orders", LONG);
    let mut ids = send(&sup, 5, "before");
    wait_done(&sup, 5);
    ok("recycle", &sup.client(&["recycle", "orders"]));
    let second = sup.ready_pid("orders", LONG);
    assert_ne!(first, second);
    ids.extend(send(&sup, 5, "after"));
    wait_done(&sup, 10);
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    // Delivered in order, each once, across the recycle.
    assert_eq!(sup.received_mail(None), ids);
    let done: Vec<u64> = sup
        .events()
        .iter()
        .filter(|e| e["kind"] == "mail_done")
        .filter_map(|e| e["body"]["id"].as_u64())
        .collect();
    assert_eq!(done, ids);

    // The store is PostgreSQL's: no SQLite database in state_dir.
    assert!(!sup.db().exists(), "{}", sup.db().display());
    let rows = pg.psql("postgres", "SELECT count(*) FROM mail WHERE state = 'done'");
    assert_eq!(rows, "10");

    // The journal: spawns and the recycle, one verified chain.
    let records = sup.journal();
    let kinds: Vec<&str> = records.iter().filter_map(|r| r["kind"].as_str()).collect();
    assert!(
        kinds.contains(&"recycled") && kinds.contains(&"spawned"),
        "{kinds:?}"
    );
    let out = sup.client(&["journal", "verify"]);
    let text = ok("journal verify", &out);
    assert!(
        text.starts_with(&format!("journal ok: {} records", records.len())),
        "{text}"
    );
    let last = records.last().expect("records");
    let head = format!("{}:{}", last["seq"], last["hash"].as_str().unwrap_or(""));
    let out = sup.client(&["journal", "verify", "--expect-head", &head]);
    assert!(
        ok("verify --expect-head", &out).contains("present and unchanged"),
        "{}",
        describe(&out)
    );
}

/// The `key=value` fields of the log line that says `what`.
fn fields<'a>(log: &'a str, what: &str) -> Vec<(&'a str, &'a str)> {
    let line = log
        .lines()
        .find(|l| l.contains(what))
        .unwrap_or_else(|| panic!("no {what:?} in the log:\n{log}"));
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .collect()
}

#[test]
fn a_restarted_supervisor_checks_the_journal_from_where_it_left_off() {
    let pg = PgServer::start();
    let url = pg.uri("postgres");
    let mut sup = Supervisor::start(&body(&url));
    let mut sent = 0;
    let mut heads: Vec<String> = Vec::new();
    for run in 0..3 {
        sup.ready_pid("orders", LONG);
        let log = sup.plain_log();
        let start = fields(&log, "journal verified at start");
        let field = |k: &str| start.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        // Each stop verifies what its run wrote, so each start checks
        // from that head: the first finds an empty journal, the later
        // ones nothing new since the stop before them.
        let from: u64 = field("from_seq")
            .and_then(|v| v.parse().ok())
            .expect("from_seq");
        let checked: u64 = field("records")
            .and_then(|v| v.parse().ok())
            .expect("records");
        let head = field("head").expect("head").to_owned();
        let head_seq: u64 = head
            .split(':')
            .next()
            .and_then(|s| s.parse().ok())
            .expect("seq");
        match heads.last() {
            None => assert_eq!((from, checked, head_seq), (0, 0, 0), "{log}"),
            Some(stopped_at) => {
                assert_eq!(&head, stopped_at, "{log}");
                assert_eq!((from, checked), (head_seq, 0), "{log}");
            }
        }
        send(&sup, 2, &format!("run{run}"));
        sent += 2;
        wait_done(&sup, sent);
        sup.signal(Signal::SIGTERM);
        assert!(sup.wait_exit(LONG).success(), "{}", sup.log());
        // The stop verified this run's records and logged the new head.
        let log = sup.plain_log();
        let stop = fields(&log, "journal verified at stop");
        let field = |k: &str| stop.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
        let stopped_at = field("head").expect("head at stop").to_owned();
        let records: u64 = field("records")
            .and_then(|v| v.parse().ok())
            .expect("records");
        assert!(records > 0 && stopped_at != head, "{log}");
        heads.push(stopped_at);
        let (dir, config) = sup.into_parts();
        sup = Supervisor::start_in(dir, config);
    }
    sup.ready_pid("orders", LONG);
    ok("journal verify", &sup.client(&["journal", "verify"]));
    // Every head logged at a stop is still in the journal, unchanged.
    for head in &heads {
        ok(
            "verify --expect-head",
            &sup.client(&["journal", "verify", "--expect-head", head]),
        );
    }
}

#[test]
fn an_unreachable_server_is_named_and_nothing_starts() {
    let pg = PgServer::start();
    let url = pg.url("postgres");
    pg.stop();
    let dir = TempDir::new();
    let config = dir.join("wfhost.toml");
    write_config(&config, &dir.join("state"), &body(&url));
    let (code, said) = supervise_until_exit(&config);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("connecting to the database failed: unavailable")
            && said.contains("pg_isready"),
        "{said}"
    );
    assert!(!said.contains("spawned"), "{said}");
    // The journal commands say the same, and create nothing.
    let out = wfhost(&[
        "journal",
        "verify",
        "--config",
        config.to_str().unwrap_or(""),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("unavailable"), "{}", stderr(&out));
}

#[test]
fn journal_commands_name_a_database_wfhost_never_used() {
    let pg = PgServer::start();
    pg.create_database("empty");
    let dir = TempDir::new();
    let config = dir.join("wfhost.toml");
    write_config(&config, &dir.join("state"), &body(&pg.url("empty")));
    for cmd in ["verify", "show"] {
        let out = wfhost(&["journal", cmd, "--config", config.to_str().unwrap_or("")]);
        assert_eq!(out.status.code(), Some(1), "{cmd}");
        let err = stderr(&out);
        assert!(
            err.starts_with("error: no journal at postgresql://wfhost@") && err.contains("/empty"),
            "{err}"
        );
    }
    let tables = pg.psql(
        "empty",
        "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'",
    );
    assert_eq!(tables, "0", "nothing was created");
}

#[test]
fn check_config_names_a_bad_store_url_with_its_line() {
    let dir = TempDir::new();
    let config = dir.join("wfhost.toml");
    for (url, why) in [
        ("dbname=wfhost", "[store] url names no server"),
        ("host=/run/postgresql", "[store] url names no database"),
        (
            "postgresql://h:port/db",
            "[store] url is not a PostgreSQL connection string",
        ),
    ] {
        std::fs::write(
            &config,
            format!("[supervisor]\nstate_dir = \"state\"\n\n[store]\nurl = \"{url}\"\n"),
        )
        .expect("write config");
        let out = wfhost(&["check-config", config.to_str().unwrap_or("")]);
        assert_eq!(out.status.code(), Some(2), "{url}: {}", describe(&out));
        let err = stderr(&out);
        assert!(
            err.starts_with(&format!("{}:5:7: {why}", config.display())) && err.contains("help:"),
            "{url}: {err}"
        );
    }
    std::fs::write(
        &config,
        "[supervisor]\nstate_dir = \"state\"\n\n[store]\nurl = \"host=/run/postgresql dbname=w\"\nport = 5\n",
    )
    .expect("write config");
    let out = wfhost(&["check-config", config.to_str().unwrap_or("")]);
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(
        stderr(&out).contains("unknown field `port`"),
        "{}",
        stderr(&out)
    );
}
