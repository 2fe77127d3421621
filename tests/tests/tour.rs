//! `wfhost demo` tells the story on a real supervisor, one plain sentence
//! a stage, and cleans up after itself.

use wfhost_tests::{ok, wfhost};

#[test]
fn the_demo_tells_each_stage_and_exits_0() {
    let out = ok("wfhost demo", &wfhost(&["demo"]));
    let mut stages = out.lines().filter(|l| l.starts_with('['));
    for (what, words) in [
        (
            "start",
            "started five workflow children, each on a private socketpair at fd 3",
        ),
        (
            "mail",
            "each was durable in the inbox before `send` returned",
        ),
        (
            "self-recycle",
            "the child asked to be replaced (self-recycle)",
        ),
        (
            "policy",
            "ran past its max_uptime of 6s, so the policy recycled it",
        ),
        (
            "wait step",
            "We drained approvals while its approve step ran",
        ),
        ("paused", "the budget is paused at 0 ms"),
        (
            "outlasted",
            "drained with 0 ms of its budget used and no cancel (escalated: false)",
        ),
        (
            "asked",
            "signoff's handler asked a person to approve order D-7",
        ),
        (
            "given back",
            "because the child gave the waiting item back instead of holding the drain",
        ),
        (
            "answered",
            "got the stored answer at once, and mail 9 ended succeeded with the result {\"approved\":true}",
        ),
        (
            "escalation",
            "used the whole 1500 ms budget, so the supervisor signed a cancel",
        ),
        ("verified", "cancel of run exec-"),
        ("gapless", "checkout (recycle.overlap = true) while pid"),
        ("nothing lost", "4 of 4 carts done, none lost, none twice"),
        (
            "stop",
            "`wfhost stop`: the supervisor drained and stopped every child",
        ),
        ("journal", "journal ok: "),
    ] {
        assert!(
            stages.by_ref().any(|l| l.contains(words)),
            "the {what} stage ({words:?}) is missing or out of order:\n{out}"
        );
    }
    assert!(out.ends_with("demo complete\n"), "{out}");
    let dir = out
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("wfhost demo: a supervisor on "))
        .expect("the tour's directory");
    assert!(!std::path::Path::new(dir).exists(), "{dir} removed");
}
