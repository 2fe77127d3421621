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
//! - the kernel maps a binary's code and read-only data in 64 KiB runs
//!   around each page a fault touches, so what ran once at start-up
//!   (config parsing, schema migrations, the first spawns) stays mapped.
//!   [`trim`] drops the pages of every read-only private file mapping (the
//!   binary's and its libraries' code and constants: `MADV_DONTNEED` on
//!   clean pages of the file, which stay in the page cache and fault back
//!   in, without I/O, when used again), so what stays resident is what the
//!   idle loop uses: with 100 children 4.6 → 2.1 MiB of the binary's code.
//!
//! Only mappings that can hold nothing but the file's own bytes are
//! touched: private, not writable, backed by a file, and without a single
//! anonymous (copied-on-write) page, which rules out the relocated
//! read-only data (RELRO).

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

/// Returns the allocator's free memory and drops the pages of read-only
/// file mappings (see the module docs); returns the resident size before
/// and after.
pub fn trim() -> io::Result<Trimmed> {
    let before_kib = resident_kib()?;
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases free memory of the allocator.
    unsafe {
        libc::malloc_trim(0);
    }
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    for (start, end) in clean_file_ranges(&smaps) {
        // SAFETY: the range is a read-only private file mapping without
        // anonymous pages (checked by `clean_file_ranges`): it holds only
        // the file's bytes, so dropping its pages loses nothing; they
        // fault back in from the page cache. A refusal (a locked mapping)
        // only leaves it resident.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
        }
    }
    Ok(Trimmed {
        before_kib,
        after_kib: resident_kib()?,
    })
}

/// The read-only private file mappings in a `/proc/self/smaps` text that
/// hold no anonymous page.
fn clean_file_ranges(smaps: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, usize)> = None;
    for line in smaps.lines() {
        if let Some(rest) = line.strip_prefix("Anonymous:") {
            let anon_kib = rest.trim().trim_end_matches("kB").trim();
            if let (Some(range), "0") = (current.take(), anon_kib) {
                out.push(range);
            }
            continue;
        }
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        // A mapping's header: range perms offset dev inode [path].
        let path = fields.nth(3).unwrap_or("");
        let read_only_private =
            perms.starts_with('r') && perms.get(1..2) == Some("-") && perms.ends_with('p');
        current =
            (read_only_private && path.starts_with('/') && end > start).then_some((start, end));
    }
    out
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
    fn only_clean_read_only_file_mappings_are_chosen() {
        let smaps = "\
55d0a0000000-55d0a0100000 r--p 00000000 fd:00 12 /usr/bin/wfhost
Rss:                 100 kB
Anonymous:             0 kB
55d0a0100000-55d0a0500000 r-xp 00100000 fd:00 12 /usr/bin/wfhost
Anonymous:             0 kB
55d0a0500000-55d0a0600000 r--p 00500000 fd:00 12 /usr/bin/wfhost
Anonymous:            64 kB
55d0a0600000-55d0a0610000 rw-p 00600000 fd:00 12 /usr/bin/wfhost
Anonymous:            16 kB
55d0a0610000-55d0a0620000 rw-p 00000000 00:00 0 [heap]
Anonymous:            16 kB
7f0000000000-7f0000100000 r-xp 00000000 fd:00 40 /usr/lib/libc.so.6
Anonymous:             0 kB
7f0000100000-7f0000110000 rw-s 00000000 fd:00 41 /var/lib/wfhost/wfhost.db-shm
Anonymous:             0 kB
7f0000200000-7f0000300000 r-xp 00000000 00:00 0 [vdso]
Anonymous:             0 kB
7f0000300000-7f0000400000 r--s 00000000 fd:00 42 /dev/shm/x
Anonymous:             0 kB
";
        assert_eq!(
            clean_file_ranges(smaps),
            [
                (0x55d0a0000000, 0x55d0a0100000),
                (0x55d0a0100000, 0x55d0a0500000),
                (0x7f0000000000, 0x7f0000100000),
            ],
            "the binary's constants and code and libc's code; not RELRO (copied pages), data, heap, shared or special mappings"
        );
    }

    #[test]
    fn trimming_keeps_the_process_running_its_code() {
        let t = trim().expect("trim");
        assert!(t.before_kib > 0 && t.after_kib > 0, "{t:?}");
        // Code that ran before the trim runs again after it.
        let again = trim().expect("trim again");
        assert!(again.after_kib > 0);
        assert_eq!(clean_file_ranges(""), []);
    }
}
