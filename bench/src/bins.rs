//! Where the release binaries the benchmarks drive live, and what to do
//! when they are missing.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// The command that builds what the benchmarks run.
pub const BUILD_COMMAND: &str = "cargo build --release --workspace --bins";

/// The release binaries of the workspace.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// `target/release/wfhost`.
    pub wfhost: PathBuf,
    /// `target/release/wfhost-child`.
    pub child: PathBuf,
}

/// The directory holding the release binaries: `WFHOST_BIN_DIR` if set,
/// else the profile directory above this bench executable
/// (`target/release/deps/<bench>` → `target/release`).
pub fn release_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("WFHOST_BIN_DIR") {
        return PathBuf::from(dir);
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.to_path_buf()))
        .unwrap_or_else(|| PathBuf::from("target/release"))
}

/// Finds `wfhost` and `wfhost-child`; when either is missing, prints the
/// exact build command and exits with status 2. Warns (without stopping)
/// when a binary is older than the newest source file.
pub fn locate() -> Binaries {
    let dir = release_dir();
    let bins = Binaries {
        wfhost: dir.join("wfhost"),
        child: dir.join("wfhost-child"),
    };
    let missing: Vec<&Path> = [bins.wfhost.as_path(), bins.child.as_path()]
        .into_iter()
        .filter(|p| !p.is_file())
        .collect();
    if !missing.is_empty() {
        for p in &missing {
            eprintln!("wfhost-bench: {} is missing.", p.display());
        }
        eprintln!(
            "wfhost-bench: the benchmarks drive the real release binaries; build them first:"
        );
        eprintln!("    {BUILD_COMMAND}");
        eprintln!("then run the benchmarks again: cargo bench -p wfhost-bench");
        std::process::exit(2);
    }
    warn_if_stale(&bins);
    bins
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

fn newest_source(dir: &Path, newest: &mut Option<(SystemTime, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            newest_source(&path, newest);
        } else if path.extension().is_some_and(|e| e == "rs")
            && let Some(t) = mtime(&path)
            && newest.as_ref().is_none_or(|(n, _)| t > *n)
        {
            *newest = Some((t, path));
        }
    }
}

fn warn_if_stale(bins: &Binaries) {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = here.parent().unwrap_or(here);
    // Each binary against the crates it is built from.
    let sources: [(&PathBuf, &[&str]); 2] = [
        (&bins.wfhost, &["ipc", "policy", "supervisor"]),
        (&bins.child, &["ipc", "child"]),
    ];
    for (bin, crates) in sources {
        let mut newest = None;
        for krate in crates {
            newest_source(&root.join(krate).join("src"), &mut newest);
        }
        let Some((src_time, src)) = newest else {
            continue;
        };
        if mtime(bin).is_some_and(|t| t < src_time) {
            eprintln!(
                "wfhost-bench: warning: {} is older than {}; the figures may not match the sources (rebuild: {BUILD_COMMAND})",
                bin.display(),
                src.display()
            );
        }
    }
}
