//! What a newcomer tripped on in the second hour, each shown as the
//! operator sees it: a crash's exception beside its exit in status, a
//! missing script named instead of the advice to wrap a plain program,
//! dead mail in the status people read, and the hints of refusals.

use wfhost_tests::{LONG, Supervisor, TempDir, command, deployment, ok, stderr, stdout, testchild};

#[test]
fn a_crashs_last_stderr_lines_are_shown_beside_its_exit() {
    let script = "echo 'Traceback (most recent call last):' >&2; \
                  echo 'ValueError: order 7 is malformed' >&2; echo fine; exit 1";
    let sup = Supervisor::start(&deployment(
        "throws",
        &command(&["sh", "-c", script]),
        "restart = { backoff_initial = \"50ms\", max_restarts = 1, period = \"60s\" }",
    ));
    let d = sup.wait_deployment("throws", "failed", LONG, |d| {
        d["state"] == "failed" && d["last_stderr"].as_array().is_some_and(|t| t.len() == 2)
    });
    assert_eq!(
        d["last_stderr"],
        serde_json::json!([
            "Traceback (most recent call last):",
            "ValueError: order 7 is malformed"
        ]),
        "stderr only, oldest first: {d}"
    );
    let detail = ok("status throws", &sup.client(&["status", "throws"]));
    assert!(
        detail.contains("its stderr   | Traceback (most recent call last):\n")
            && detail.contains("             | ValueError: order 7 is malformed\n")
            && detail.contains("`wfhost logs throws` has the rest"),
        "{detail}"
    );
    let table = ok("status", &sup.client(&["status"]));
    let words = table.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("throws: its last stderr line: ValueError: order 7 is malformed (`wfhost logs throws` has the rest)"),
        "{table}"
    );
}

#[test]
fn a_missing_script_is_named_instead_of_the_advice_to_wrap_a_plain_program() {
    let dir = TempDir::new();
    let sup = Supervisor::start(&deployment(
        "summary",
        &command(&["python3", "sumarize.py"]),
        &format!(
            "working_dir = \"{}\"\nrestart = {{ backoff_initial = \"50ms\", max_restarts = 1, period = \"60s\" }}",
            dir.path().display()
        ),
    ));
    let d = sup.wait_deployment("summary", "failed", LONG, |d| {
        d["state"] == "failed" && d["last_stderr"].as_array().is_some_and(|t| !t.is_empty())
    });
    let last = d["last_exit"].as_str().unwrap_or_default();
    // (The closed channel may be seen before the exit: either way.)
    assert!(
        last.contains("; it never wrote on its channel (fd 3), most likely because script \"sumarize.py\" for python3 cannot be found at ")
            && last.contains("fix the path or set working_dir"),
        "{last}"
    );
    assert!(
        !last.contains("wfhost-child"),
        "no advice to wrap it: {last}"
    );
    assert_eq!(d["last_exit_brief"], "program missing", "{d}");
    assert!(
        d["last_stderr"].to_string().contains("can't open file"),
        "the interpreter's own words: {d}"
    );
    let why = d["why"].as_str().unwrap_or_default();
    assert!(
        why.contains("sumarize.py") && !why.contains("wfhost-child"),
        "{why}"
    );
    assert!(
        sup.plain_log()
            .contains("the child ended without a word on its channel: script \"sumarize.py\""),
        "{}",
        sup.plain_log()
    );
}

#[test]
fn dead_mail_is_counted_wherever_mail_is_with_the_next_step() {
    let dir = TempDir::new();
    let cured = dir.join("cured");
    let sup = Supervisor::start(&deployment(
        "orders",
        &testchild("poison"),
        &format!(
            "env = {{ WFH_CURED = \"{}\" }}\nmax_deliveries = 1\nrestart = {{ backoff_initial = \"10ms\" }}",
            cured.display()
        ),
    ));
    sup.ready_pid("orders", LONG);
    ok("send", &sup.client(&["send", "orders", "fine"]));
    ok("send", &sup.client(&["send", "orders", "poison"]));
    sup.wait_deployment("orders", "one dead, one done", LONG, |d| {
        d["mail"]["dead"] == 1 && d["mail"]["done"] == 1 && d["state"] == "ready"
    });
    let table = ok("status", &sup.client(&["status"]));
    let row = table
        .lines()
        .find(|l| l.starts_with("orders "))
        .unwrap_or_default();
    assert!(row.contains(" 0/0/0/1/1 "), "{table}");
    assert!(
        table.contains("MAIL waiting/in a child/working/done/dead"),
        "{table}"
    );
    assert!(
        table.contains("in a child: sent ahead to it, not started; working: its handler started it; up to 32 are sent"),
        "the legend says what the second number counts: {table}"
    );
    // (Notes fold at 100 columns.)
    let words = table.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("orders: 1 mail item is dead")
            && words.contains("`wfhost mail list orders --state dead` shows why"),
        "{table}"
    );
    let detail = ok("status orders", &sup.client(&["status", "orders"]));
    assert!(
        detail.contains(
            "mail         0 waiting, 0 in its child (0 being worked on, 0 sent ahead, not started), 1 done, 1 dead\n"
        ) && detail.contains("`wfhost mail retry --dead orders`"),
        "{detail}"
    );
}

#[test]
fn a_payload_over_max_mail_bytes_is_refused_with_the_settings_to_raise() {
    let sup = Supervisor::start(&deployment(
        "orders",
        &testchild("well-behaved"),
        "max_mail_bytes = \"1KiB\"",
    ));
    sup.ready_pid("orders", LONG);
    let big = "x".repeat(2000);
    let out = sup.client(&["send", "orders", &big]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("exceeds max_mail_bytes (1024 bytes) of orders; nothing was accepted")
            && err.contains("help: raise max_mail_bytes for orders")
            && err.contains("max_frame_bytes"),
        "{err}"
    );
    assert!(stdout(&out).is_empty());
}
