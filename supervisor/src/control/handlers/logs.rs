//! `logs`: a deployment's recent child output (the newest `lines` kept),
//! then, with `follow`, each new line as it is read, until the client
//! hangs up. A follower too slow for the buffer is told how many lines it
//! missed instead of being stalled or fed a gap silently.

use serde_json::json;
use tokio::net::UnixStream;

use super::{Context, lookup};
use crate::control::protocol::{self, Response};
use crate::deployment::output::{self, Line};

/// Streams `deployment`'s recent output; refused (in the one response)
/// for an unknown deployment.
pub async fn stream(
    mut stream: UnixStream,
    ctx: &Context,
    deployment: &str,
    lines: u64,
    follow: bool,
) {
    if let Err(refusal) = lookup(&ctx.registry, deployment) {
        let _ = protocol::write_message(&mut stream, &refusal).await;
        return;
    }
    let recent = output::recent(deployment);
    let mut newest = recent.subscribe();
    let started = Response::ok(json!({"streaming": true, "deployment": deployment}));
    if protocol::write_message(&mut stream, &started)
        .await
        .is_err()
    {
        return;
    }
    let first = recent.last(usize::try_from(lines).unwrap_or(usize::MAX));
    let mut last = first.last().map_or(*newest.borrow_and_update(), |l| l.seq);
    if send(&mut stream, &first).await.is_err() || !follow {
        return;
    }
    let mut probe = [0u8; 1];
    loop {
        tokio::select! {
            changed = newest.changed() => {
                if changed.is_err() {
                    return;
                }
                let (lines, missed) = recent.after(last);
                if missed > 0 {
                    let note = json!({"missed": missed, "kept": output::MAX_LINES});
                    if protocol::write_message(&mut stream, &note).await.is_err() {
                        return;
                    }
                }
                if let Some(l) = lines.last() {
                    last = l.seq;
                }
                if send(&mut stream, &lines).await.is_err() {
                    return;
                }
            }
            // The follower hung up (or sent something it should not): done.
            _ = tokio::io::AsyncReadExt::read(&mut stream, &mut probe) => return,
        }
    }
}

async fn send(stream: &mut UnixStream, lines: &[Line]) -> std::io::Result<()> {
    for line in lines {
        protocol::write_message(stream, line).await?;
    }
    Ok(())
}
