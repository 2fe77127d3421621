//! The RSS bound between policy ticks (issue 16): at the default
//! `policy_interval` (60 s) a child that grows past `recycle.max_rss`
//! after it became ready is recycled within a fraction of a second, not at
//! the next tick, and a child far below its bound is left alone.

use std::time::{Duration, Instant};

use wfhost_tests::{LONG, Supervisor, command, deployment, wait_for};

/// `wfhost-child exec -- python3`: ready at once, allocates 200 MiB after
/// `delay` seconds, then sleeps.
fn grows_after(delay: &str) -> String {
    let script = format!(
        "import time; time.sleep({delay}); x = bytearray(200 << 20); x[::4096] = b'\\x01' * (len(x) // 4096); time.sleep(1000)"
    );
    command(&["{bin}/wfhost-child", "exec", "--", "python3", "-c", &script])
}

/// Policy recycles of `d` in its status.
fn policy_recycles(d: &serde_json::Value) -> u64 {
    d["recycles"]["policy"].as_u64().unwrap_or(0)
}

#[test]
fn a_child_passing_its_rss_bound_between_policy_ticks_is_recycled_within_a_second() {
    // No policy_interval setting: the default minute between ticks.
    let body = deployment(
        "hungry",
        &grows_after("1.5"),
        "recycle = { max_rss = \"100MiB\" }",
    ) + &deployment(
        "modest",
        &grows_after("1.5"),
        "recycle = { max_rss = \"4GiB\" }",
    );
    let sup = Supervisor::start_with_settings("", &body);
    let pid0 = sup.ready_pid("hungry", LONG);
    let ready_at = Instant::now();
    let modest = sup.ready_pid("modest", LONG);

    let d = sup.wait_deployment("hungry", "a policy recycle", LONG, |d| {
        policy_recycles(d) >= 1
    });
    let took = ready_at.elapsed();
    let reason = d["last_recycle"]["reason"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(reason.starts_with("max_rss:"), "{d}");
    assert_eq!(
        d["last_recycle"]["old_pid"].as_u64(),
        Some(u64::from(pid0)),
        "{d}"
    );
    // 1.5 s of sleep, the allocation (~0.1–0.3 s), then at most one RSS
    // tick (100 ms) before the ask: far from the 60 s of a policy tick.
    assert!(
        took < Duration::from_secs(5),
        "recycled {took:?} after ready ({reason})"
    );
    println!("max_rss passed and recycled {took:?} after ready (1.5 s of it asleep): {reason}");

    // The other child holds its 200 MiB well under its 4 GiB bound.
    std::thread::sleep(Duration::from_secs(1));
    let m = sup.deployment("modest");
    assert_eq!(policy_recycles(&m), 0, "{m}");
    assert_eq!(m["pid"].as_u64(), Some(u64::from(modest)), "{m}");
    let rss = wait_for("modest's RSS to show its 200 MiB", LONG, || {
        sup.deployment("modest")["rss_bytes"]
            .as_u64()
            .filter(|&b| b > 200 << 20)
    });
    assert!(rss < 4 << 30, "{rss}");
}
