//! The optional Prometheus endpoint (DESIGN §8, `metrics_listen`): a tiny
//! HTTP/1.1 server answering `GET /metrics` with the text exposition format
//! (version 0.0.4), rendered from the same snapshots as `wfhost status`.
//!
//! The endpoint has no authentication, so it is meant for a loopback
//! address; any other configured address is bound as asked, with a warning
//! in the log. A client gets at most [`MAX_HEAD`] bytes of request head and
//! [`HEAD_TIMEOUT`] to send it, each connection runs on its own task, and at
//! most [`MAX_CONNECTIONS`] are served at once (more are closed at once), so
//! slow or hostile clients cannot hold the supervisor's resources.
//!
//! Answers: `GET /metrics` (query ignored) → 200; any other well-formed
//! request → 404; a malformed one → 400; a head over [`MAX_HEAD`] → 431;
//! the store unreachable → 500. Every answer closes the connection.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::{debug, warn};

mod fleet;
mod http;
mod render;
#[cfg(test)]
mod tests;

use http::{Head, Route, read_head, response, route};
pub use render::render;

use crate::clock::unix_ms;
use crate::deployment::Registry;
use crate::shared::Shared;
use crate::status::Status;
use crate::store::MailCounts;

/// The most request-head bytes read from a client.
pub const MAX_HEAD: usize = 8 * 1024;

/// How long a client has to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one connection may last in all, answer included.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(15);

/// How long, and how much, a refused client's input is drained before closing.
const LINGER_TIME: Duration = Duration::from_secs(2);
/// See [`LINGER_TIME`].
const LINGER_BYTES: usize = 64 * 1024;

/// Connections served at once; more are closed without an answer.
pub const MAX_CONNECTIONS: usize = 64;

/// The exposition format's content type.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Binds the endpoint on `addr`, warning when it is not a loopback address
/// (the endpoint has no authentication).
pub async fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    if !addr.ip().is_loopback() {
        warn!(%addr, "metrics_listen is not a loopback address: anyone who can reach it can read the metrics");
    }
    TcpListener::bind(addr).await.with_context(|| {
        format!("cannot bind metrics_listen {addr}; choose a free port or remove the setting")
    })
}

/// Accepts and answers scrapers until the task is aborted.
pub async fn serve(listener: TcpListener, registry: Registry, shared: Arc<Shared>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    debug!(%peer, "metrics: too many connections; closing this one");
                    continue;
                };
                let (registry, shared) = (registry.clone(), shared.clone());
                tokio::spawn(async move {
                    let answered = tokio::time::timeout(
                        CONNECTION_TIMEOUT,
                        serve_connection(stream, &registry, &shared),
                    )
                    .await;
                    match answered {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => debug!(%peer, error = %e, "metrics: connection failed"),
                        Err(_) => debug!(%peer, "metrics: connection timed out"),
                    }
                    drop(slot);
                });
            }
            Err(e) => {
                warn!(error = %e, "metrics accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Reads one request, answers it and closes.
async fn serve_connection(
    mut stream: TcpStream,
    registry: &Registry,
    shared: &Shared,
) -> std::io::Result<()> {
    let head = match tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await {
        Ok(head) => head?,
        Err(_) => Head::TimedOut,
    };
    let answer = match head {
        Head::Closed => return Ok(()),
        Head::TimedOut => response("408 Request Timeout", "text/plain", "request timed out\n"),
        Head::TooLarge => response(
            "431 Request Header Fields Too Large",
            "text/plain",
            "request head too large\n",
        ),
        Head::Truncated => response("400 Bad Request", "text/plain", "bad request\n"),
        Head::Complete(head) => match route(&head) {
            Route::BadRequest => response("400 Bad Request", "text/plain", "bad request\n"),
            Route::NotFound => response("404 Not Found", "text/plain", "not found; try /metrics\n"),
            Route::Metrics => match collect(registry, shared).await {
                Ok(snapshots) => {
                    let host = crate::observe::host::now();
                    let mut text = render(&snapshots, host.as_ref(), Instant::now());
                    let acks = snapshots.iter().map(|(s, _)| s.acks_pending).sum();
                    text.push_str(&render::store(&shared.store_view(acks), unix_ms()));
                    text.push_str(&render::grouping(crate::store::handle::grouping()));
                    text.push_str(&render::control(crate::observe::connections::served()));
                    if let Some(f) = &shared.fleet {
                        text.push_str(&fleet::render(f).await);
                    }
                    response("200 OK", CONTENT_TYPE, &text)
                }
                Err(e) => {
                    warn!(error = %e, "metrics: cannot read the mail counts");
                    response(
                        "500 Internal Server Error",
                        "text/plain",
                        "the store is unavailable\n",
                    )
                }
            },
        },
    };
    stream.write_all(&answer).await?;
    stream.shutdown().await?;
    if !answer.starts_with(b"HTTP/1.1 200 ") {
        linger(&mut stream).await;
    }
    Ok(())
}

/// Reads and drops what a refused client still sends, for a moment: closing
/// with unread input would reset the connection, and the client could lose
/// the answer before reading it.
async fn linger(stream: &mut TcpStream) {
    let mut sink = [0u8; 1024];
    let mut left = LINGER_BYTES;
    let _ = tokio::time::timeout(LINGER_TIME, async {
        while left > 0 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

/// Every deployment's snapshot with its mail counts, in id order.
async fn collect(
    registry: &Registry,
    shared: &Shared,
) -> anyhow::Result<Vec<(Status, MailCounts)>> {
    let snapshots: Vec<Status> = registry
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .map(|h| h.snapshot())
        .collect();
    let ids: Vec<String> = snapshots.iter().map(|s| s.id.clone()).collect();
    let counts = shared
        .reader
        .call(move |s| {
            ids.iter()
                .map(|id| s.mail_counts(id))
                .collect::<Result<Vec<_>, _>>()
        })
        .await??;
    Ok(snapshots.into_iter().zip(counts).collect())
}
