//! PostgreSQL's errors in the store's neutral terms: the SQLSTATE picks
//! the [`ErrorKind`] (a lost or refused connection is "unavailable"), the
//! server's message is kept.

use crate::store::StoreError;
use crate::store::error::{ErrorKind, Failure, Location};

/// The kind of a SQLSTATE.
pub fn kind_of_code(code: &str) -> ErrorKind {
    match code {
        "53100" => ErrorKind::DiskFull,
        "25006" => ErrorKind::ReadOnly,
        "42501" | "28000" | "28P01" => ErrorKind::Permission,
        "40001" | "40P01" | "55P03" | "57014" => ErrorKind::Busy,
        "XX001" | "XX002" => ErrorKind::Corrupt,
        "58030" => ErrorKind::Io,
        "53300" => ErrorKind::Unavailable,
        // Raised by `wfhost_fence` (the fleet's migration).
        super::fence::FENCED => ErrorKind::Fenced,
        c if c.starts_with("08") || c.starts_with("57P") => ErrorKind::Unavailable,
        _ => ErrorKind::Other,
    }
}

/// The kind and message of `err`.
pub fn describe(err: &postgres::Error) -> (ErrorKind, String) {
    if let Some(db) = err.as_db_error() {
        let mut message = format!("{} (SQLSTATE {})", db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            message.push_str(": ");
            message.push_str(detail);
        }
        return (kind_of_code(db.code().code()), message);
    }
    let mut message = err.to_string();
    let mut io = false;
    let mut source = std::error::Error::source(err);
    while let Some(s) = source {
        io |= s.is::<std::io::Error>();
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    // No server error: the connection could not be made or was lost, or
    // the client refused (a value it cannot convert: ours to fix).
    let kind = if err.is_closed() || io {
        ErrorKind::Unavailable
    } else {
        ErrorKind::Other
    };
    // A server or client message never shows a password, whatever it echoes.
    (kind, crate::config::conninfo::redact(&message))
}

/// `err` from `action` on the database at `location`, as a store error.
pub fn failure(location: &Location, action: &'static str, err: &postgres::Error) -> StoreError {
    let (kind, message) = describe(err);
    StoreError::Backend(Failure {
        location: location.clone(),
        action,
        kind,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlstates_map_to_kinds() {
        assert_eq!(kind_of_code("25006"), ErrorKind::ReadOnly);
        assert_eq!(kind_of_code("53100"), ErrorKind::DiskFull);
        assert_eq!(kind_of_code("42501"), ErrorKind::Permission);
        assert_eq!(kind_of_code("55P03"), ErrorKind::Busy);
        assert_eq!(kind_of_code("40001"), ErrorKind::Busy);
        assert_eq!(kind_of_code("08006"), ErrorKind::Unavailable);
        assert_eq!(kind_of_code("57P01"), ErrorKind::Unavailable);
        assert_eq!(kind_of_code("XX001"), ErrorKind::Corrupt);
        assert_eq!(kind_of_code("23505"), ErrorKind::Other);
        assert_eq!(kind_of_code("WF001"), ErrorKind::Fenced);
    }
}
