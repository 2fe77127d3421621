//! Helpers for black-box tests: find the built binaries, make short temp
//! dirs, and run commands with deadlines. Tests drive only the binaries.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The directory holding the workspace's built binaries: the test
/// executable lives in `target/<profile>/deps`, the binaries one level up.
pub fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("WFHOST_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let deps = exe.parent().expect("deps dir");
    deps.parent().expect("profile dir").to_path_buf()
}

/// Path of a built binary of the workspace; panics with the build command
/// to run when it is missing.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins` before the tests",
        path.display()
    );
    path
}

/// A short temporary directory (Unix socket paths must stay under 107
/// bytes), removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Makes `/tmp/wfh-XXXXXX`.
    pub fn new() -> Self {
        let mut template = *b"/tmp/wfh-XXXXXX\0";
        // SAFETY: the template is a writable NUL-terminated buffer.
        let p = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
        assert!(
            !p.is_null(),
            "mkdtemp failed: {}",
            std::io::Error::last_os_error()
        );
        let s = std::str::from_utf8(&template[..template.len() - 1]).expect("ascii path");
        Self(PathBuf::from(s))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Default for TempDir {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `wfhost ARGS` to completion and returns its output.
pub fn wfhost(args: &[&str]) -> Output {
    Command::new(bin("wfhost"))
        .args(args)
        .output()
        .expect("run wfhost")
}

/// Polls `f` every 20 ms until it returns `Some`, or panics naming `what`
/// after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
