//! SQLite's errors in the store's neutral terms: the result code (and,
//! for an I/O error, the errno of the system call that failed) picks the
//! [`ErrorKind`], SQLite's message is kept as it is.

use rusqlite::{Connection, ErrorCode};

use crate::store::StoreError;
use crate::store::error::{ErrorKind, Failure, Location};

/// The kind of `err`, given the errno SQLite saw last on its connection
/// (`sqlite3_system_errno`, 0 when unknown): an EROFS write is SQLite's
/// generic "disk I/O error", and only the errno says it is read-only.
pub fn kind_of(err: &rusqlite::Error, errno: i32) -> ErrorKind {
    let from_errno = match errno {
        libc::EROFS => Some(ErrorKind::ReadOnly),
        libc::ENOSPC | libc::EDQUOT => Some(ErrorKind::DiskFull),
        libc::EACCES | libc::EPERM => Some(ErrorKind::Permission),
        _ => None,
    };
    match err.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => ErrorKind::DiskFull,
        Some(ErrorCode::ReadOnly) => ErrorKind::ReadOnly,
        Some(ErrorCode::PermissionDenied | ErrorCode::AuthorizationForStatementDenied) => {
            ErrorKind::Permission
        }
        Some(ErrorCode::CannotOpen) => from_errno.unwrap_or(ErrorKind::Permission),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => ErrorKind::Busy,
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => ErrorKind::Corrupt,
        Some(ErrorCode::SystemIoFailure) => from_errno.unwrap_or(ErrorKind::Io),
        // The errno may be stale from an earlier, harmless failure (a
        // probe for a hot journal): it only refines I/O and open errors.
        _ => ErrorKind::Other,
    }
}

/// The errno of the last failed system call on `conn`'s database.
pub fn system_errno(conn: &Connection) -> i32 {
    // SAFETY: `handle` is the live connection's pointer, used only for
    // this read-only call on the thread that owns the connection.
    unsafe { rusqlite::ffi::sqlite3_system_errno(conn.handle()) }
}

/// `err` from `action` on the database at `location`, as a store error.
pub fn failure(
    location: &Location,
    action: &'static str,
    err: &rusqlite::Error,
    errno: i32,
) -> StoreError {
    StoreError::Backend(Failure {
        location: location.clone(),
        action,
        kind: kind_of(err, errno),
        message: err.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(primary: i32, extended: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error {
                code: rusqlite::ffi::Error::new(primary).code,
                extended_code: extended,
            },
            None,
        )
    }

    #[test]
    fn an_erofs_io_error_is_read_only_and_other_io_errors_are_io() {
        use rusqlite::ffi;
        let write = code(ffi::SQLITE_IOERR, ffi::SQLITE_IOERR_WRITE);
        assert_eq!(kind_of(&write, libc::EROFS), ErrorKind::ReadOnly);
        assert_eq!(kind_of(&write, libc::ENOSPC), ErrorKind::DiskFull);
        assert_eq!(kind_of(&write, libc::EIO), ErrorKind::Io);
        assert_eq!(kind_of(&write, 0), ErrorKind::Io);
        let readonly = code(ffi::SQLITE_READONLY, ffi::SQLITE_READONLY);
        assert_eq!(kind_of(&readonly, 0), ErrorKind::ReadOnly);
        let busy = code(ffi::SQLITE_BUSY, ffi::SQLITE_BUSY);
        assert_eq!(kind_of(&busy, 0), ErrorKind::Busy);
        let full = code(ffi::SQLITE_FULL, ffi::SQLITE_FULL);
        assert_eq!(kind_of(&full, 0), ErrorKind::DiskFull);
        let open = code(ffi::SQLITE_CANTOPEN, ffi::SQLITE_CANTOPEN);
        assert_eq!(kind_of(&open, libc::EROFS), ErrorKind::ReadOnly);
        assert_eq!(kind_of(&open, 0), ErrorKind::Permission);
        let garbage = code(ffi::SQLITE_NOTADB, ffi::SQLITE_NOTADB);
        assert_eq!(kind_of(&garbage, 0), ErrorKind::Corrupt);
        assert_eq!(
            kind_of(&rusqlite::Error::QueryReturnedNoRows, 0),
            ErrorKind::Other
        );
    }
}
