//! Reading the files an operator names (the config, a grants file) so
//! that no file can hang the supervisor: only regular files are read (a
//! FIFO would block `open` until some writer came, a device such as a
//! terminal could block any read, a directory is no file at all), at most
//! a bounded number of bytes, and, from the supervisor's runtime, on a
//! thread of their own under a timeout, so a stuck filesystem (a dead NFS
//! server, a hung FUSE mount) delays the answer, never the supervisor.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How long the supervisor waits for a file to be read before it says
/// the filesystem is stuck and carries on without it.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads still stuck, across every file: past this many, a new read is
/// refused at once rather than given one more thread to hang.
const MAX_STUCK_READS: usize = 4;

/// Reads under way on a thread of their own.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Why a file was not read.
#[derive(Debug)]
pub enum ReadError {
    /// The OS refused (missing, permissions, I/O error).
    Io(std::io::Error),
    /// It is not a regular file: what it is instead.
    NotRegular(&'static str),
    /// It holds more than the limit.
    TooLarge,
}

/// What kind of non-regular file a file type is, for messages.
fn kind(t: std::fs::FileType) -> Option<&'static str> {
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a FIFO (named pipe)")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("not a regular file")
    }
}

/// Opens `path` for reading if it is a regular file. `O_NONBLOCK` makes
/// the open of a FIFO return at once (instead of waiting for a writer)
/// so that it can be refused; it changes nothing for a regular file.
pub fn open_regular(path: &Path) -> Result<File, ReadError> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(ReadError::Io)?;
    let meta = file.metadata().map_err(ReadError::Io)?;
    match kind(meta.file_type()) {
        None => Ok(file),
        Some(what) => Err(ReadError::NotRegular(what)),
    }
}

/// The bytes of the regular file `path`, at most `limit` of them.
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, ReadError> {
    let file = open_regular(path)?;
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge);
    }
    Ok(bytes)
}

/// The size of `path` if it is a regular file that exists (`None` when it
/// is missing or unreadable: its reader names that problem later).
pub fn regular_len(path: &Path) -> Result<Option<u64>, ReadError> {
    match std::fs::metadata(path) {
        Ok(meta) => match kind(meta.file_type()) {
            None => Ok(Some(meta.len())),
            Some(what) => Err(ReadError::NotRegular(what)),
        },
        Err(_) => Ok(None),
    }
}

/// Runs the blocking read `f` (of `what`, for messages) on a thread of
/// its own and waits at most `timeout` for it. A read that does not
/// finish in time is left to finish on its thread (a blocked `read` cannot
/// be interrupted) and its result dropped; the caller hears why.
pub async fn off_thread<T: Send + 'static>(
    what: &str,
    timeout: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    {
        let stuck = IN_FLIGHT.load(Ordering::Relaxed);
        if stuck >= MAX_STUCK_READS {
            return Err(format!(
                "{stuck} earlier file reads are still stuck, so {what} is not read; check the filesystem \
                 it is on (a hung network or FUSE mount?) and try again once it answers"
            ));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
        let spawned = std::thread::Builder::new()
            .name("wfhost-read".into())
            .spawn(move || {
                let out = f();
                IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
                let _ = tx.send(out);
            });
        if let Err(e) = spawned {
            IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
            return Err(format!(
                "cannot start a thread to read {what}: {e}; the system is out of threads"
            ));
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(_)) => Err(format!(
                "reading {what} failed: its thread ended without an answer"
            )),
            Err(_) => Err(format!(
                "reading {what} took longer than {}: its filesystem is stuck or very slow; \
                 check the mount (dmesg, `stat` the file) and try again",
                super::format_duration(timeout)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_are_read_and_within_the_limit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("f");
        std::fs::write(&file, b"hello").expect("write");
        assert_eq!(read_regular(&file, 5).expect("read"), b"hello");
        assert!(matches!(read_regular(&file, 4), Err(ReadError::TooLarge)));
        assert!(matches!(
            read_regular(dir.path(), 10),
            Err(ReadError::NotRegular("a directory"))
        ));
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .expect("mkfifo");
        // Returns at once: nobody writes to the FIFO.
        assert!(matches!(
            read_regular(&fifo, 10),
            Err(ReadError::NotRegular("a FIFO (named pipe)"))
        ));
        assert!(matches!(regular_len(&fifo), Err(ReadError::NotRegular(_))));
        assert!(matches!(
            read_regular(Path::new("/dev/null"), 10),
            Err(ReadError::NotRegular("a character device"))
        ));
        assert!(matches!(
            read_regular(&dir.path().join("missing"), 10),
            Err(ReadError::Io(_))
        ));
        assert_eq!(regular_len(&file).expect("len"), Some(5));
        assert_eq!(regular_len(&dir.path().join("missing")).expect("len"), None);
    }

    #[test]
    fn a_read_that_hangs_times_out_and_the_caller_carries_on() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let slow = off_thread("the slow file", Duration::from_millis(50), move || {
            let _ = wait.recv();
            1
        });
        let e = rt.block_on(slow).expect_err("timed out");
        assert!(e.contains("the slow file") && e.contains("50ms"), "{e}");
        let quick = off_thread("the quick file", Duration::from_secs(5), || 2);
        assert_eq!(rt.block_on(quick), Ok(2));
        drop(release);
    }
}
