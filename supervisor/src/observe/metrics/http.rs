//! The little HTTP this endpoint speaks: one GET of `/metrics` per
//! connection, the head read within bounds, a plain response.

use tokio::io::{AsyncRead, AsyncReadExt};

use super::MAX_HEAD;

/// How reading a request head ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Head {
    /// The head, up to and including the blank line.
    Complete(Vec<u8>),
    /// No blank line within [`MAX_HEAD`] bytes.
    TooLarge,
    /// The client closed before sending anything.
    Closed,
    /// The client closed in the middle of the head.
    Truncated,
    /// The client was too slow.
    TimedOut,
}

/// Reads until the blank line ending the head, at most [`MAX_HEAD`] bytes.
pub(super) async fn read_head<R: AsyncRead + Unpin>(reader: &mut R) -> std::io::Result<Head> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let room = (MAX_HEAD - buf.len()).min(chunk.len());
        if room == 0 {
            return Ok(Head::TooLarge);
        }
        let n = reader.read(&mut chunk[..room]).await?;
        if n == 0 {
            return Ok(if buf.is_empty() {
                Head::Closed
            } else {
                Head::Truncated
            });
        }
        // A blank line may straddle two reads: look a little back.
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = head_end(&buf[from..]) {
            buf.truncate(from + end);
            return Ok(Head::Complete(buf));
        }
    }
}

/// The length of the head in `buf` (through `\r\n\r\n` or a bare `\n\n`).
pub(super) fn head_end(buf: &[u8]) -> Option<usize> {
    (0..buf.len()).find_map(|i| {
        if buf[i..].starts_with(b"\r\n\r\n") {
            Some(i + 4)
        } else if buf[i..].starts_with(b"\n\n") {
            Some(i + 2)
        } else {
            None
        }
    })
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// `GET /metrics`.
    Metrics,
    /// A well-formed request for anything else.
    NotFound,
    /// Not an HTTP/1.x request.
    BadRequest,
}

/// Routes a complete request head.
pub(super) fn route(head: &[u8]) -> Route {
    let Ok(text) = std::str::from_utf8(head) else {
        return Route::BadRequest;
    };
    let mut lines = text.lines();
    let mut parts = lines.next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    let is_token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    let version_ok = version.len() == 8
        && version.starts_with("HTTP/1.")
        && version.as_bytes()[7].is_ascii_digit();
    if !is_token(method) || !target.starts_with('/') || !version_ok {
        return Route::BadRequest;
    }
    // Header fields: `name: value`; folded lines are obsolete and refused.
    for line in lines.take_while(|l| !l.is_empty()) {
        match line.split_once(':') {
            Some((name, _)) if is_token(name) => {}
            _ => return Route::BadRequest,
        }
    }
    let path = target.split('?').next().unwrap_or(target);
    if method == "GET" && path == "/metrics" {
        Route::Metrics
    } else {
        Route::NotFound
    }
}

/// A whole response that closes the connection.
pub(super) fn response(status: &str, content_type: &str, body: &str) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}
