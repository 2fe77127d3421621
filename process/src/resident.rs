//! What a long-lived process keeps resident that it does not use: memory
//! the allocator holds free, and the code pages its start-up touched.
//!
//! The supervisor runs for months beside its children (issue 16: at most
//! 6 MiB RSS with 100 of them). Two things inflate it after start-up:
//!
//! - glibc's allocator gives every thread that allocates an arena of its
//!   own, each keeping its free memory; [`one_arena`] makes every thread
//!   share the main one (the supervisor's threads are few and rarely
//!   allocate at once), and [`trim`] returns the free top of the heap;
//! - the kernel maps a binary's code in 64 KiB runs around each page a
//!   fault touches, so code run once at start-up (config parsing, schema
//!   migrations, the first spawns) stays mapped. [`trim`] unmaps this
//!   executable's code pages (`MADV_DONTNEED` on its read-only executable
//!   mapping: clean pages of the file, which stay in the page cache and
//!   fault back in, without I/O, when run again), so what stays resident
//!   is what the idle loop runs.
//!
//! Only mappings that can hold nothing but the file's own bytes are
//! touched: executable, not writable, backed by this process's binary.

use std::io;

/// Makes every thread allocate from the main arena. Call first thing in
/// `main`, before any thread is started. Not glibc: nothing to do.
pub fn one_arena() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes allocator tuning; called before any
    // other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// What [`trim`] gave back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Trimmed {
    /// Resident KiB before.
    pub before_kib: u64,
    /// Resident KiB after.
    pub after_kib: u64,
}

/// Returns the allocator's free memory and unmaps this executable's code
/// pages (see the module docs); returns the resident size before and after.
pub fn trim() -> io::Result<Trimmed> {
    let before_kib = resident_kib()?;
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory of the allocator.
    unsafe {
        libc::malloc_trim(0);
    }
    let exe = std::fs::read_link("/proc/self/exe")?;
    let maps = std::fs::read_to_string("/proc/self/maps")?;
    for (start, end) in code_ranges(&maps, &exe.to_string_lossy()) {
        // SAFETY: the range is a read-only, executable, private mapping of
        // our own binary file (checked by `code_ranges`): it holds only the
        // file's bytes, so dropping its pages loses nothing; they fault
        // back in from the page cache.
        let done =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        if done != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(Trimmed {
        before_kib,
        after_kib: resident_kib()?,
    })
}

/// The `r-xp` mappings of `exe` in a `/proc/self/maps` text.
fn code_ranges(maps: &str, exe: &str) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let perms = fields.next()?;
            let path = fields.nth(3)?;
            if perms != "r-xp" || path != exe {
                return None;
            }
            let (start, end) = range.split_once('-')?;
            let start = usize::from_str_radix(start, 16).ok()?;
            let end = usize::from_str_radix(end, 16).ok()?;
            (end > start).then_some((start, end))
        })
        .collect()
}

/// This process's resident set in KiB (`/proc/self/statm`).
fn resident_kib() -> io::Result<u64> {
    let text = std::fs::read_to_string("/proc/self/statm")?;
    let pages: u64 = text
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unparsable statm"))?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Ok(pages * u64::try_from(page).unwrap_or(4096) / 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_executable_mapping_of_the_binary_is_chosen() {
        let maps = "\
55d0a0000000-55d0a0100000 r--p 00000000 fd:00 12 /usr/bin/wfhost
55d0a0100000-55d0a0500000 r-xp 00100000 fd:00 12 /usr/bin/wfhost
55d0a0500000-55d0a0600000 r--p 00500000 fd:00 12 /usr/bin/wfhost
55d0a0600000-55d0a0610000 rw-p 00600000 fd:00 12 /usr/bin/wfhost
7f0000000000-7f0000100000 r-xp 00000000 fd:00 40 /usr/lib/libc.so.6
7f0000200000-7f0000300000 rwxp 00000000 00:00 0
";
        assert_eq!(
            code_ranges(maps, "/usr/bin/wfhost"),
            [(0x55d0a0100000, 0x55d0a0500000)]
        );
    }

    #[test]
    fn trimming_keeps_the_process_running_its_code() {
        let t = trim().expect("trim");
        assert!(t.before_kib > 0 && t.after_kib > 0, "{t:?}");
        // Code that ran before the trim runs again after it.
        let again = trim().expect("trim again");
        assert!(again.after_kib > 0);
        assert_eq!(code_ranges("", "x"), []);
    }
}
