//! `shutdown`, `eof`, `oversize-frame` and `undecodable-frame`: how a child
//! ends.

use std::time::Duration;

use wfhost_ipc::Control;

use super::{refuses, status_text};
use crate::failure::{Failure, ensure};
use crate::subject::{Launcher, Subject};

/// How soon after `Shutdown` the child must have exited.
const SHUTDOWN_WITHIN: Duration = Duration::from_secs(2);
/// How soon after the end of its channel, or a broken frame, it must exit.
const EXIT_WITHIN: Duration = Duration::from_secs(5);
/// The `max_frame_bytes` of the oversize scenario's Welcome.
const SMALL_FRAME_LIMIT: u32 = 64 * 1024;
/// A Control variant no protocol version has.
const UNKNOWN_VARIANT: u8 = 200;

/// `Shutdown` → exit 0 within 2 s.
pub async fn shutdown(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    s.handshake_with(l.welcome()).await?;
    s.send(Control::Shutdown).await?;
    let status = s.wait_exit(SHUTDOWN_WITHIN).await?;
    ensure(
        status.code() == Some(0),
        "exit code 0 after Shutdown",
        || status_text(status),
    )
}

/// Closing the channel → the child exits within 5 s.
pub async fn eof(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    s.handshake_with(l.welcome()).await?;
    s.close_channel();
    s.wait_exit(EXIT_WITHIN).await.map(|_| ())
}

/// A header announcing more than the Welcome's `max_frame_bytes` (64 KiB
/// here) → exit non-zero within 5 s, with a message.
pub async fn oversize_frame(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    let mut welcome = l.welcome();
    welcome.limits.max_frame_bytes = SMALL_FRAME_LIMIT;
    s.handshake_with(welcome).await?;
    // The header alone: the child must refuse it before any body comes.
    s.send_raw(&(SMALL_FRAME_LIMIT + 1).to_be_bytes())?;
    refuses(
        s,
        &format!(
            "a frame header announcing {} bytes (max_frame_bytes {SMALL_FRAME_LIMIT})",
            SMALL_FRAME_LIMIT + 1
        ),
        EXIT_WITHIN,
    )
    .await
}

/// A frame of an unknown variant → exit non-zero within 5 s, with a message.
pub async fn undecodable_frame(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    s.handshake_with(l.welcome()).await?;
    let next = s.next_seq();
    let seq = u8::try_from(next)
        .ok()
        .filter(|b| *b < 251)
        .ok_or_else(|| Failure::new("a sequence number below 251", next.to_string()))?;
    // Body: the sequence number (a one-byte varint below 251), then the
    // variant index.
    s.send_raw(&[0, 0, 0, 2, seq, UNKNOWN_VARIANT])?;
    refuses(
        s,
        &format!("a frame of the unknown Control variant {UNKNOWN_VARIANT}"),
        EXIT_WITHIN,
    )
    .await
}
