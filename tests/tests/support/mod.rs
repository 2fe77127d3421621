//! What the store's black-box test files share: running a supervisor that
//! is expected to refuse to start.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wfhost_tests::{LONG, bin, stderr, stdout};

/// Runs `wfhost supervise --config CONFIG` until it exits, at most
/// [`LONG`] (then it is killed and the test fails); returns its exit code
/// and everything it wrote.
pub fn supervise_until_exit(config: &Path) -> (Option<i32>, String) {
    let mut child = Command::new(bin("wfhost"))
        .args(["supervise", "--config"])
        .arg(config)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wfhost supervise");
    let deadline = Instant::now() + LONG;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("wfhost supervise did not refuse to start within {LONG:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.code(),
        format!("{}{}", stdout(&out), stderr(&out)),
    )
}
