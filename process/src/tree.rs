//! A process's descendants, read from `/proc`.

/// Most processes of one tree that are walked, so a fork bomb cannot stall
/// the caller.
const MAX_TREE: usize = 4096;

/// Every descendant of `pid` (at most 4,096), parents before their
/// children. Children forked by any thread of a process are found.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut out = children(pid);
    let mut next = 0;
    while next < out.len() && out.len() < MAX_TREE {
        let more = children(out[next]);
        for child in more {
            // A pid seen twice (reused mid-walk) would loop forever.
            if child != pid && !out.contains(&child) {
                out.push(child);
            }
        }
        next += 1;
    }
    out.truncate(MAX_TREE);
    out
}

/// Direct children of every thread of `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}
