//! `events`: the durable event stream from a cursor, optionally followed
//! live, with no gap and no duplicate.

use tokio::net::UnixStream;

use crate::control::protocol::{self, Response};
use crate::shared::Shared;

/// Events from the cursor, then (with `follow`) new ones as they are
/// committed, with no gap and no duplicate: the follower subscribes to the
/// commit ticks first, then reads the durable log from its cursor, and
/// reads from the cursor again after every tick.
pub async fn stream(mut stream: UnixStream, shared: &Shared, after: u64, follow: bool) {
    let mut ticks = shared.events.subscribe();
    let started = Response::ok(serde_json::json!({"streaming": true}));
    if protocol::write_message(&mut stream, &started)
        .await
        .is_err()
    {
        return;
    }
    let mut last = after;
    if backlog(&mut stream, shared, &mut last).await.is_err() || !follow {
        return;
    }
    let mut probe = [0u8; 1];
    loop {
        tokio::select! {
            tick = ticks.changed() => {
                if tick.is_err() || backlog(&mut stream, shared, &mut last).await.is_err() {
                    return;
                }
            }
            // The follower hung up (or sent something it should not): done.
            _ = tokio::io::AsyncReadExt::read(&mut stream, &mut probe) => return,
        }
    }
}

/// Writes every stored event after `*last`, advancing it.
async fn backlog(stream: &mut UnixStream, shared: &Shared, last: &mut u64) -> Result<(), ()> {
    const PAGE: usize = 1000;
    loop {
        let after = *last;
        let page = match shared
            .reader
            .call(move |s| s.events_after(after, PAGE))
            .await
        {
            Ok(Ok(page)) => page,
            _ => return Err(()),
        };
        for event in &page {
            *last = event.seq;
            protocol::write_message(stream, event)
                .await
                .map_err(|_| ())?;
        }
        if page.len() < PAGE {
            return Ok(());
        }
    }
}
