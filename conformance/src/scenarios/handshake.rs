//! `handshake` and `wrong-version-welcome`.

use std::time::Duration;

use wfhost_ipc::PROTOCOL_VERSION;
use wfhost_ipc::handshake::MAX_IMPLEMENTATION_BYTES;

use super::refuses;
use crate::failure::{Failure, ensure};
use crate::subject::{Launcher, Subject};

/// How long a child that refused a Welcome may take to exit.
const EXIT_WITHIN: Duration = Duration::from_secs(5);

/// Hello is the first frame (seq 1) with protocol 2, the minted channel id
/// (both checked by the supervisor end), the child's real pid, `takes_mail`
/// and an implementation of 1–128 bytes; Ready follows the Welcome.
pub async fn handshake(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    let hello = s.read_hello().await?;
    ensure(
        hello.pid == s.pid,
        format!("the Hello to carry the child's pid {}", s.pid),
        || {
            format!(
                "pid {} (a wrapper that starts the child instead of exec-ing it?)",
                hello.pid
            )
        },
    )?;
    ensure(
        hello.takes_mail,
        "takes_mail true in the Hello (a conformance child takes mail)",
        || "false".into(),
    )?;
    let len = hello.implementation.len();
    ensure(
        (1..=MAX_IMPLEMENTATION_BYTES).contains(&len),
        format!("an implementation of 1–{MAX_IMPLEMENTATION_BYTES} bytes in the Hello"),
        || format!("{len} bytes ({:?})", hello.implementation),
    )?;
    s.welcome(l.welcome()).await?;
    s.await_ready().await
}

/// A Welcome of another protocol makes the child exit non-zero, with a
/// message on stderr, without sending Ready.
pub async fn wrong_version_welcome(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    s.read_hello().await?;
    let mut welcome = l.welcome();
    welcome.protocol = PROTOCOL_VERSION + 1;
    s.welcome(welcome).await?;
    // `await_ready` fails on whatever is not Ready, or on the end.
    if let Ok(Ok(())) = tokio::time::timeout(EXIT_WITHIN, s.await_ready()).await {
        return Err(Failure::new(
            format!(
                "no Ready after a Welcome of protocol {}",
                PROTOCOL_VERSION + 1
            ),
            "Ready",
        ));
    }
    refuses(
        s,
        &format!("a Welcome of protocol {}", PROTOCOL_VERSION + 1),
        EXIT_WITHIN,
    )
    .await
}
