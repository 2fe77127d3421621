//! Reads from `/proc` that identify and measure processes.

use std::io;

/// The start time of `pid` in clock ticks since boot (field 22 of
/// `/proc/PID/stat`). Together with the pid it names one process for good:
/// a recycled pid has a different start time.
pub fn start_time(pid: u32) -> io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_start_time(&stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("unparsable /proc/{pid}/stat"),
        )
    })
}

/// Field 22 of a stat line. The command name (field 2) may hold spaces and
/// parentheses, so fields are counted from the last `)`.
fn parse_start_time(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    // After the comm come field 3 (state) onwards; field 22 is the 20th.
    after_comm.split_whitespace().nth(19)?.parse().ok()
}

/// Whether `pid` is still the process that started at `start_time` and
/// is not a zombie (a zombie has already let go of everything but its pid).
pub fn is_same_process(pid: u32, start_time: u64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let zombie = stat
        .rfind(')')
        .and_then(|i| stat[i + 1..].split_whitespace().next())
        == Some("Z");
    !zombie && parse_start_time(&stat) == Some(start_time)
}

/// Resident memory of one process tree, read cheaply: the leader's
/// `/proc/PID/statm` stays open and is re-read with `pread` each tick (a
/// kept fd reads fresh values, and fails once the pid is reaped, so a
/// reused pid is never misread); descendants are found through
/// `/proc/PID/task/TID/children`, so a command hosted by `wfhost-child exec`
/// counts too.
#[derive(Debug)]
pub struct RssReader {
    pid: u32,
    statm: std::fs::File,
    page_size: u64,
}

impl RssReader {
    /// Opens the leader's `statm`.
    pub fn open(pid: u32) -> io::Result<Self> {
        let statm = std::fs::File::open(format!("/proc/{pid}/statm"))?;
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        Ok(Self {
            pid,
            statm,
            page_size: u64::try_from(page).unwrap_or(4096),
        })
    }

    /// Resident bytes of the leader and all its descendants.
    pub fn tree_rss(&self) -> io::Result<u64> {
        let mut total = read_resident(&self.statm)? * self.page_size;
        let mut stack = children(self.pid);
        let mut seen = 0;
        while let Some(pid) = stack.pop() {
            // A bounded walk: a fork bomb must not stall the policy tick.
            seen += 1;
            if seen > 4096 {
                break;
            }
            if let Ok(f) = std::fs::File::open(format!("/proc/{pid}/statm"))
                && let Ok(pages) = read_resident(&f)
            {
                total += pages * self.page_size;
            }
            stack.extend(children(pid));
        }
        Ok(total)
    }
}

/// The resident-pages field of a `statm` file, read from offset 0.
fn read_resident(file: &std::fs::File) -> io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 256];
    let n = file.read_at(&mut buf, 0)?;
    let text =
        std::str::from_utf8(&buf[..n]).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    text.split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_start_time_with_odd_comm() {
        let line =
            "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 100";
        assert_eq!(parse_start_time(line), Some(987_654));
    }

    #[test]
    fn own_start_time_is_stable() {
        let me = std::process::id();
        let t = start_time(me).expect("own stat");
        assert!(is_same_process(me, t));
        assert!(!is_same_process(me, t + 1));
    }

    #[test]
    fn rss_of_a_tree_includes_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("spawn sleep");
        let me = RssReader::open(std::process::id()).expect("own statm");
        let alone = read_resident(&me.statm).expect("read") * me.page_size;
        let tree = me.tree_rss().expect("tree");
        let _ = child.kill();
        let _ = child.wait();
        assert!(alone > 0);
        assert!(
            tree > alone,
            "the sleeping child adds its pages: {tree} vs {alone}"
        );
    }
}
