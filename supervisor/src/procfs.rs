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
}
