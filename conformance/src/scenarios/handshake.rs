//! `handshake` and `wrong-version-welcome`.

use std::time::Duration;

use wfhost_ipc::OLDEST_PROTOCOL;
use wfhost_ipc::handshake::MAX_IMPLEMENTATION_BYTES;

use super::refuses;
use crate::failure::{Failure, ensure};
use crate::subject::{Launcher, Subject};

/// How long a child that refused a Welcome may take to exit.
const EXIT_WITHIN: Duration = Duration::from_secs(5);

/// Hello is the first frame (seq 1) with protocol 2 or 3 (the one
/// `--protocol` names, if it does), the minted channel id (both checked by
/// the supervisor end), the child's real pid, `takes_mail` and an
/// implementation of 1–128 bytes; Ready follows a Welcome of its version.
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
    let mut welcome = l.welcome();
    welcome.protocol = hello.protocol;
    s.welcome(welcome).await?;
    s.await_ready().await
}

/// A Welcome of another protocol than the Hello's makes the child exit
/// non-zero, with a message on stderr, without sending Ready. The other
/// version is one the child may well speak too (2 for a Hello of 3, 3 for a
/// Hello of 2): the Welcome must be of the Hello's version exactly.
pub async fn wrong_version_welcome(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    let hello = s.read_hello().await?;
    let other = if hello.protocol > OLDEST_PROTOCOL {
        hello.protocol - 1
    } else {
        hello.protocol + 1
    };
    let mut welcome = l.welcome();
    welcome.protocol = other;
    s.welcome(welcome).await?;
    let what = format!(
        "a Welcome of protocol {other} (the Hello said {})",
        hello.protocol
    );
    // `await_ready` fails on whatever is not Ready, or on the end.
    if let Ok(Ok(())) = tokio::time::timeout(EXIT_WITHIN, s.await_ready()).await {
        return Err(Failure::new(format!("no Ready after {what}"), "Ready"));
    }
    refuses(s, &what, EXIT_WITHIN).await
}
