//! What the control socket holds for all its clients together: at most
//! [`MAX_CLIENTS`] connections, and at most [`MAX_BUFFERED`] bytes of
//! requests and `send` payloads read but not yet answered. Each request
//! is read as it arrives and charged as it grows (never by what its length
//! prefix announces), so a client that announces much and sends little
//! holds little, and clients that stall mid-request hold no more than the
//! budget between them. The first [`FREE_BYTES`] of every request are not
//! charged: a small request (`status`, `stop`) is served however full the
//! budget is, so stalled senders never lock an operator out.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt};

use super::protocol::MAX_REQUEST;
use crate::config::format_size;

/// Connections served at once; more are refused at once.
pub const MAX_CLIENTS: usize = 256;

/// Request and payload bytes held for all clients together.
pub const MAX_BUFFERED: usize = 32 << 20;

/// Bytes of each request read without charge.
pub const FREE_BYTES: usize = 4 << 10;

/// Most bytes read from a client in one go.
const CHUNK: usize = 64 << 10;

/// The socket's shared budget.
#[derive(Debug, Default)]
pub struct Budget {
    clients: AtomicUsize,
    bytes: AtomicUsize,
}

/// One connection's place among [`MAX_CLIENTS`]; freed when dropped.
#[derive(Debug)]
pub struct Seat(Arc<Budget>);

impl Drop for Seat {
    fn drop(&mut self) {
        self.0.clients.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Why a client's request was not read.
#[derive(Debug)]
pub enum ReadError {
    /// The client's connection failed or ended early.
    Io(std::io::Error),
    /// The request breaks the protocol (its length).
    Invalid(String),
    /// The budget is spent: the refusal to send.
    Full(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => e.fmt(f),
            Self::Invalid(m) | Self::Full(m) => f.write_str(m),
        }
    }
}

impl From<std::io::Error> for ReadError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

impl Budget {
    /// A place for one more connection, or `None` at [`MAX_CLIENTS`].
    pub fn seat(self: &Arc<Self>) -> Option<Seat> {
        let before = self.clients.fetch_add(1, Ordering::Relaxed);
        if before >= MAX_CLIENTS {
            self.clients.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        Some(Seat(self.clone()))
    }

    /// Connections open now.
    pub fn clients(&self) -> usize {
        self.clients.load(Ordering::Relaxed)
    }

    /// Bytes charged now.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// The refusal of a connection over [`MAX_CLIENTS`].
    pub fn too_many_clients() -> String {
        format!(
            "the control socket is serving its limit of {MAX_CLIENTS} connections; try again in a moment, \
             and if this persists, find the clients holding it open (`ss -xp | grep wfhost.sock`)"
        )
    }

    fn charge(&self, n: usize, want: usize) -> Result<(), ReadError> {
        let before = self.bytes.fetch_add(n, Ordering::Relaxed);
        if before.saturating_add(n) > MAX_BUFFERED {
            self.bytes.fetch_sub(n, Ordering::Relaxed);
            return Err(ReadError::Full(format!(
                "the control socket holds {} of unanswered requests from its clients, its limit is {}, and \
                 this request needs {} more; nothing was done: try again in a moment (other clients' \
                 requests are being read), or send less at once",
                format_size(before as u64),
                format_size(MAX_BUFFERED as u64),
                format_size(want as u64)
            )));
        }
        Ok(())
    }
}

/// The bytes one request holds, charged beyond its free allowance and
/// released when dropped.
#[derive(Debug)]
struct Held<'a> {
    budget: &'a Budget,
    free: usize,
    charged: usize,
}

impl Held<'_> {
    /// Makes the charge cover `total` bytes held.
    fn cover(&mut self, total: usize) -> Result<(), ReadError> {
        let owed = total.saturating_sub(self.free);
        if owed > self.charged {
            let more = owed - self.charged;
            self.budget.charge(more, total)?;
            self.charged = owed;
        }
        Ok(())
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.budget.bytes.fetch_sub(self.charged, Ordering::Relaxed);
    }
}

/// Reads `len` bytes as they arrive, charging each chunk before it is
/// kept; returns them with what they hold released (the caller answers
/// next: its work on them is not charged).
async fn read_charged(
    stream: &mut (impl AsyncRead + Unpin),
    len: usize,
    budget: &Budget,
    free: usize,
) -> Result<Vec<u8>, ReadError> {
    let mut held = Held {
        budget,
        free,
        charged: 0,
    };
    let mut out: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; CHUNK.min(len)];
    while out.len() < len {
        let want = (len - out.len()).min(chunk.len());
        let n = stream.read(&mut chunk[..want]).await?;
        if n == 0 {
            return Err(ReadError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "the client announced {len} bytes but sent only {}",
                    out.len()
                ),
            )));
        }
        // Grows geometrically, capped at what was announced, and charged
        // by capacity: what is held is what is counted.
        if out.capacity() < out.len() + n {
            let target = (out.capacity() * 2).max(out.len() + n).min(len);
            held.cover(target)?;
            out.reserve_exact(target - out.len());
        }
        out.extend_from_slice(&chunk[..n]);
    }
    Ok(out)
}

/// Reads one length-prefixed request (at most [`MAX_REQUEST`] bytes) and
/// parses it.
#[cfg(test)]
async fn read_request<T: for<'de> serde::Deserialize<'de>>(
    stream: &mut (impl AsyncRead + Unpin),
    budget: &Budget,
) -> Result<T, ReadError> {
    let len = stream.read_u32().await?;
    read_request_of(stream, len, budget).await
}

/// Reads the request of `len` bytes (at most [`MAX_REQUEST`]) that
/// follows its length prefix, and parses it.
pub async fn read_request_of<T: for<'de> serde::Deserialize<'de>>(
    stream: &mut (impl AsyncRead + Unpin),
    len: u32,
    budget: &Budget,
) -> Result<T, ReadError> {
    if len == 0 || len > MAX_REQUEST {
        return Err(ReadError::Invalid(format!(
            "control request of {len} bytes: a request is 1 to {MAX_REQUEST} bytes of JSON (a send's payload \
             follows its request, outside that limit)"
        )));
    }
    let bytes = read_charged(stream, len as usize, budget, FREE_BYTES).await?;
    serde_json::from_slice(&bytes).map_err(|e| ReadError::Invalid(e.to_string()))
}

/// Reads a `send`'s `len` payload bytes (already checked against the
/// deployment's `max_mail_bytes`), charged from its first byte.
pub async fn read_payload(
    stream: &mut (impl AsyncRead + Unpin),
    len: u64,
    budget: &Budget,
) -> Result<Vec<u8>, ReadError> {
    let len = usize::try_from(len)
        .map_err(|_| ReadError::Invalid(format!("a payload of {len} bytes cannot be held here")))?;
    read_charged(stream, len, budget, 0).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    #[test]
    fn seats_are_capped_and_freed() {
        let budget = Arc::new(Budget::default());
        let seats: Vec<Seat> = (0..MAX_CLIENTS).filter_map(|_| budget.seat()).collect();
        assert_eq!(seats.len(), MAX_CLIENTS);
        assert!(budget.seat().is_none());
        drop(seats);
        assert_eq!(budget.clients(), 0);
        assert!(budget.seat().is_some());
    }

    #[test]
    fn bytes_are_charged_as_they_arrive_and_released_after() {
        let rt = runtime();
        let budget = Budget::default();
        // A request of 10 bytes: free.
        let mut small: &[u8] = b"\0\0\0\x0a{\"v\":2}   ";
        let v: serde_json::Value = rt
            .block_on(read_request(&mut small, &budget))
            .expect("small");
        assert_eq!(v["v"], 2);
        assert_eq!(budget.bytes(), 0);
        // A payload that would pass the budget is refused, nothing kept.
        budget.bytes.store(MAX_BUFFERED - 10, Ordering::Relaxed);
        let big = vec![7u8; 100];
        let e = rt
            .block_on(read_payload(&mut &big[..], 100, &budget))
            .expect_err("over the budget");
        assert!(
            matches!(&e, ReadError::Full(m) if m.contains("32MiB")),
            "{e}"
        );
        assert_eq!(budget.bytes(), MAX_BUFFERED - 10);
        // ...but a small request is still read.
        let mut status: &[u8] = b"\0\0\0\x02{}";
        rt.block_on(read_request::<serde_json::Value>(&mut status, &budget))
            .expect("status still served");
        budget.bytes.store(0, Ordering::Relaxed);
        let got = rt
            .block_on(read_payload(&mut &big[..], 100, &budget))
            .expect("payload");
        assert_eq!(got, big);
        assert_eq!(budget.bytes(), 0, "released once read");
        // Announced but never sent: an error, nothing held.
        let e = rt
            .block_on(read_payload(&mut &big[..10], 100, &budget))
            .expect_err("short");
        assert!(e.to_string().contains("sent only 10"), "{e}");
        assert_eq!(budget.bytes(), 0);
        let mut huge: &[u8] = &(MAX_REQUEST + 1).to_be_bytes();
        let e = rt
            .block_on(read_request::<serde_json::Value>(&mut huge, &budget))
            .expect_err("too long");
        assert!(matches!(e, ReadError::Invalid(_)), "{e}");
    }
}
