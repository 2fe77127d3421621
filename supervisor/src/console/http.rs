//! The HTTP/1.1 the console speaks, written here rather than taken from
//! hyper: one request per connection (`Connection: close`), `GET` and
//! form `POST`s with a `Content-Length` body, and one long response for
//! server-sent events. That is all a console needs, and it is about 300
//! lines with every bound in sight (head size and time, body size),
//! where hyper with hyper-util adds a dozen crates and their build time
//! to every build of the supervisor, as the metrics endpoint's own
//! little HTTP already decided (`observe/metrics/http.rs`).

use std::collections::HashMap;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The largest request head read.
pub const MAX_HEAD: usize = 16 << 10;

/// The largest request body read: a form with an answer of 64 KiB of
/// JSON, percent-encoded, fits.
pub const MAX_BODY: usize = 256 << 10;

/// How long a client may take to send its whole request.
pub const REQUEST_TIME: Duration = Duration::from_secs(10);

/// The policy every response carries: nothing but this origin's own
/// script and style, no inline script, no frames, forms only to here.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// A request read in full.
#[derive(Debug, Default)]
pub struct Request {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path, percent-decoded.
    pub path: String,
    /// The query's fields.
    pub query: HashMap<String, String>,
    /// Headers, names lower-cased (a repeated one keeps its last value).
    pub headers: HashMap<String, String>,
    /// The body (at most [`MAX_BODY`] bytes).
    pub body: Vec<u8>,
}

impl Request {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// The value of cookie `name`.
    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.header("cookie")?.split(';').find_map(|pair| {
            let (k, v) = pair.trim().split_once('=')?;
            (k == name).then_some(v)
        })
    }

    /// The body's fields, as an HTML form sends them.
    pub fn form(&self) -> HashMap<String, String> {
        fields(&String::from_utf8_lossy(&self.body))
    }
}

/// Why no request was read.
#[derive(Debug, PartialEq, Eq)]
pub enum Unread {
    /// The client closed, or was too slow, or the bytes were not HTTP:
    /// nothing is answered.
    Gone,
    /// A request that must be refused with this status and reason.
    Refuse(u16, &'static str),
}

/// Reads one request, bounded in size (the caller bounds the time).
pub async fn read<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Request, Unread> {
    let mut buf = Vec::with_capacity(2048);
    let mut chunk = [0u8; 4096];
    let head_len = loop {
        if let Some(end) = head_end(&buf) {
            break end;
        }
        if buf.len() >= MAX_HEAD {
            return Err(Unread::Refuse(431, "the request head is too large"));
        }
        let n = reader.read(&mut chunk).await.map_err(|_| Unread::Gone)?;
        if n == 0 {
            return Err(Unread::Gone);
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    if head_len > MAX_HEAD {
        return Err(Unread::Refuse(431, "the request head is too large"));
    }
    let mut body = buf.split_off(head_len);
    let head =
        std::str::from_utf8(&buf).map_err(|_| Unread::Refuse(400, "the head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let start = lines.next().unwrap_or_default();
    let mut parts = start.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(Unread::Refuse(400, "not an HTTP request"));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(Unread::Refuse(505, "only HTTP/1.x is spoken here"));
    }
    let mut headers = HashMap::new();
    for line in lines.filter(|l| !l.is_empty()) {
        // A name is a token: no space before the colon, no folded line
        // (RFC 9112 §5.1, 5.2), which a proxy in front might read
        // otherwise than this server does.
        let Some((name, value)) = line
            .split_once(':')
            .filter(|(name, _)| !name.is_empty() && name.bytes().all(is_tchar))
        else {
            return Err(Unread::Refuse(400, "a malformed header"));
        };
        let name = name.to_ascii_lowercase();
        if name == "content-length" && headers.contains_key(&name) {
            return Err(Unread::Refuse(400, "more than one Content-Length"));
        }
        headers.insert(name, value.trim().to_owned());
    }
    if headers.contains_key("transfer-encoding") {
        return Err(Unread::Refuse(
            411,
            "send a Content-Length, not a chunked body",
        ));
    }
    let length: usize = match headers.get("content-length") {
        // Digits only: `usize::from_str` would take "+5" too.
        Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
            v.parse().map_err(|_| {
                Unread::Refuse(
                    413,
                    "the request body is larger than the console reads (256 KiB)",
                )
            })?
        }
        Some(_) => return Err(Unread::Refuse(400, "a malformed Content-Length")),
        None => 0,
    };
    if length > MAX_BODY {
        return Err(Unread::Refuse(
            413,
            "the request body is larger than the console reads (256 KiB)",
        ));
    }
    body.truncate(length);
    while body.len() < length {
        let want = (length - body.len()).min(chunk.len());
        let n = reader
            .read(&mut chunk[..want])
            .await
            .map_err(|_| Unread::Gone)?;
        if n == 0 {
            return Err(Unread::Gone);
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Ok(Request {
        method: method.to_owned(),
        path: decode(path),
        query: fields(query),
        headers,
        body,
    })
}

/// A byte a header name may hold (RFC 9110 §5.6.2, `tchar`).
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The length of the head in `buf`, through its blank line.
fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// `a=1&b=x+y` as fields, percent-decoded (a repeated field keeps its
/// last value).
pub fn fields(text: &str) -> HashMap<String, String> {
    text.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(&k.replace('+', " ")), decode(&v.replace('+', " ")))
        })
        .collect()
}

/// Percent-decoding (invalid escapes are kept as they are).
pub fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Percent-encoding for a query value.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A response: status, extra headers, body.
#[derive(Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// Headers beyond the ones every response has.
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// An HTML page.
    pub fn html(status: u16, body: String) -> Self {
        Self {
            status,
            headers: vec![("Content-Type", "text/html; charset=utf-8".into())],
            body: body.into_bytes(),
        }
    }

    /// A redirect to `to` (303: the browser follows with a GET).
    pub fn see_other(to: &str) -> Self {
        Self {
            status: 303,
            headers: vec![("Location", to.to_owned())],
            body: Vec::new(),
        }
    }

    /// A plain-text refusal.
    pub fn text(status: u16, text: &str) -> Self {
        Self {
            status,
            headers: vec![("Content-Type", "text/plain; charset=utf-8".into())],
            body: format!("{text}\n").into_bytes(),
        }
    }
}

/// The reason phrase of `status`.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        303 => "See Other",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Status",
    }
}

/// The headers every response carries, after its status line.
fn common(out: &mut String, tls: bool) {
    out.push_str(&format!("Content-Security-Policy: {CSP}\r\n"));
    out.push_str("X-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\n");
    out.push_str("Referrer-Policy: no-referrer\r\nCross-Origin-Opener-Policy: same-origin\r\n");
    if tls {
        out.push_str("Strict-Transport-Security: max-age=31536000\r\n");
    }
}

/// Writes `response` and ends the connection's part of it.
pub async fn write<W: AsyncWrite + Unpin>(
    w: &mut W,
    response: &Response,
    tls: bool,
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\n",
        response.status,
        reason(response.status)
    );
    common(&mut head, tls);
    if !response.headers.iter().any(|(k, _)| *k == "Cache-Control") {
        head.push_str("Cache-Control: no-store\r\n");
    }
    for (k, v) in &response.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        response.body.len()
    ));
    w.write_all(head.as_bytes()).await?;
    w.write_all(&response.body).await?;
    w.flush().await
}

/// Writes the head of an event stream (no length: it lasts until either
/// side closes).
pub async fn write_stream_head<W: AsyncWrite + Unpin>(w: &mut W, tls: bool) -> std::io::Result<()> {
    let mut head = "HTTP/1.1 200 OK\r\n".to_owned();
    common(&mut head, tls);
    head.push_str(
        "Content-Type: text/event-stream\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
    );
    w.write_all(head.as_bytes()).await?;
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_form_post_is_read_with_its_body() {
        let raw = b"POST /do?x=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 16\r\nCookie: a=1; s=xyz\r\n\r\ncsrf=a%2Bb&v=c+d";
        let r = read(&mut &raw[..]).await.unwrap();
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", "/do"));
        assert_eq!(r.query["x"], "1");
        assert_eq!(r.cookie("s"), Some("xyz"));
        assert_eq!(r.form()["csrf"], "a+b");
        assert_eq!(r.form().get("v").map(String::as_str), Some("c d"));
    }

    #[tokio::test]
    async fn bounds_are_refused_before_reading_on() {
        let raw = format!(
            "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        assert_eq!(
            read(&mut raw.as_bytes()).await.unwrap_err(),
            Unread::Refuse(
                413,
                "the request body is larger than the console reads (256 KiB)"
            )
        );
        let raw = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD));
        assert!(matches!(
            read(&mut raw.as_bytes()).await,
            Err(Unread::Refuse(431, _))
        ));
    }

    #[tokio::test]
    async fn a_length_read_two_ways_is_refused() {
        for raw in [
            "POST / HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\nabcd",
            "POST / HTTP/1.1\r\nContent-Length: 4\r\ncontent-length: 4\r\n\r\nabcd",
            "POST / HTTP/1.1\r\nContent-Length: +4\r\n\r\nabcd",
            "POST / HTTP/1.1\r\nContent-Length: 4, 4\r\n\r\nabcd",
            "POST / HTTP/1.1\r\nContent-Length : 4\r\n\r\nabcd",
            "POST / HTTP/1.1\r\nX: a\r\n Content-Length: 4\r\n\r\nabcd",
            "POST / HTTP/1.1\r\n: 4\r\n\r\nabcd",
        ] {
            assert!(
                matches!(read(&mut raw.as_bytes()).await, Err(Unread::Refuse(400, _))),
                "{raw:?}"
            );
        }
        let huge = "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n";
        assert!(matches!(
            read(&mut huge.as_bytes()).await,
            Err(Unread::Refuse(413, _))
        ));
        let chunked = "POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(matches!(
            read(&mut chunked.as_bytes()).await,
            Err(Unread::Refuse(411, _))
        ));
    }

    #[tokio::test]
    async fn malformed_bytes_are_refused_or_kept_never_a_panic() {
        let raw = b"GET /d/%ff%fe%2 HTTP/1.1\r\nCookie: =; ;a\r\n\r\n";
        let r = read(&mut &raw[..]).await.unwrap();
        assert_eq!(r.path, "/d/\u{fffd}\u{fffd}%2");
        assert_eq!(r.cookie("a"), None);
        let raw = b"GET / HTTP/1.1\r\nX: \xff\r\n\r\n";
        assert!(matches!(
            read(&mut &raw[..]).await,
            Err(Unread::Refuse(400, _))
        ));
        let f = fields("=&&a&%=%%3D");
        assert_eq!((f["%"].as_str(), f["a"].as_str()), ("%=", ""));
    }

    #[test]
    fn percent_coding_round_trips() {
        let s = "a b&c=d/é<>";
        assert_eq!(decode(&encode(s)), s);
        assert_eq!(decode("%zz%4"), "%zz%4");
    }
}
