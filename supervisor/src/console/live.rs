//! `GET /live`: the durable event stream as server-sent events, from the
//! cursor the page was made at (`?after=SEQ`) or, after a reconnect,
//! from the last event the browser saw (`Last-Event-ID`), so nothing
//! committed in between is missed. The stream is read from the store on
//! every commit tick, exactly as `wfhost events --follow` is: subscribed
//! first, then read from the cursor. Each event names only its sequence
//! number, deployment and kind: the script refetches the page (whose
//! every child-written word is escaped) rather than putting a child's
//! words into it. A stream ends with the session that opened it.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::http::{self, Request};
use crate::control::handlers::Context;

/// Events read from the store at a time.
const PAGE: usize = 1000;

/// A comment this often keeps proxies from closing a quiet stream and
/// finds a browser that went away.
const KEEPALIVE: Duration = Duration::from_secs(15);

/// Streams events after the cursor until the browser goes away or
/// `open` says its session has ended (asked at every wake-up: a commit
/// tick or the keep-alive).
pub async fn stream<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    request: &Request,
    ctx: &Context,
    tls: bool,
    open: impl Fn() -> bool,
) {
    let cursor = request
        .header("last-event-id")
        .or(request.query.get("after").map(String::as_str))
        .and_then(|v| v.trim().parse::<u64>().ok());
    let mut ticks = ctx.shared.events.subscribe();
    let mut last = match cursor {
        Some(c) => c,
        None => match ctx.shared.reader.call(|s| s.last_event_seq()).await {
            Ok(Ok(seq)) => seq,
            _ => 0,
        },
    };
    if http::write_stream_head(&mut s, tls).await.is_err() {
        return;
    }
    // How long the browser waits before it reconnects.
    if s.write_all(b"retry: 1000\n\n").await.is_err() {
        return;
    }
    loop {
        if !open() {
            return;
        }
        loop {
            let after = last;
            let page = match ctx
                .shared
                .reader
                .call(move |st| st.events_after(after, PAGE))
                .await
            {
                Ok(Ok(page)) => page,
                _ => return,
            };
            let mut out = String::new();
            for e in &page {
                last = e.seq;
                let data = json!({"seq": e.seq, "deployment": e.deployment, "kind": e.kind});
                out.push_str(&format!("id: {}\nevent: fact\ndata: {data}\n\n", e.seq));
            }
            if !out.is_empty()
                && (s.write_all(out.as_bytes()).await.is_err() || s.flush().await.is_err())
            {
                return;
            }
            if page.len() < PAGE {
                break;
            }
        }
        tokio::select! {
            tick = ticks.changed() => if tick.is_err() { return },
            _ = tokio::time::sleep(KEEPALIVE) => {
                if s.write_all(b": alive\n\n").await.is_err() || s.flush().await.is_err() {
                    return;
                }
            }
        }
    }
}
