//! The scenarios, each played against a fresh child: what a supervisor
//! does, and what a conforming child must answer. Every wait is bounded.

mod cancel;
mod drain;
mod ending;
mod handshake;
mod liveness;
mod mail;

use std::process::ExitStatus;
use std::time::Duration;

use serde_json::{Value, json};
use wfhost_ipc::DrainBehavior;

use crate::failure::Failure;
use crate::forgery::Forgery;
use crate::subject::{Launcher, Subject};

/// How long an expected event may take when nothing slow is under way.
pub const EVENT_WITHIN: Duration = Duration::from_secs(5);

/// How long the kit watches for something that must not come (a second
/// ack, mail taken after a drain).
pub const QUIET_FOR: Duration = Duration::from_millis(400);

/// One scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Hello fields, then Ready after the Welcome.
    Handshake,
    /// A Welcome of protocol 3 is refused.
    WrongVersionWelcome,
    /// Pings answered while a step of this behaviour runs.
    PingDuringStep(DrainBehavior),
    /// One ack per item, with its outcome, after the run's events.
    MailAckedOnce,
    /// A redelivery after the ack is acknowledged again, not processed.
    RedeliveryProcessedOnce,
    /// `Mail.attempt` reaches the application.
    AttemptVisible,
    /// Drain: cancel steps stop, wait steps finish, `Drained` last.
    Drain,
    /// Valid signed cancels cancel their runs.
    SignedCancel,
    /// A forged cancel changes nothing.
    ForgedCancel(Forgery),
    /// A lease that runs out drains the child; a renewed one does not.
    LeaseExpiry,
    /// `Shutdown` is exit 0, promptly.
    Shutdown,
    /// End of stream ends the child.
    Eof,
    /// A frame over the Welcome's limit is a broken channel.
    OversizeFrame,
    /// A frame of an unknown variant is a broken channel.
    UndecodableFrame,
}

impl Scenario {
    /// Every scenario, in the order the kit plays them.
    pub fn all() -> Vec<Self> {
        let mut all = vec![
            Self::Handshake,
            Self::WrongVersionWelcome,
            Self::PingDuringStep(DrainBehavior::Cancel),
            Self::PingDuringStep(DrainBehavior::Wait),
            Self::MailAckedOnce,
            Self::RedeliveryProcessedOnce,
            Self::AttemptVisible,
            Self::Drain,
            Self::SignedCancel,
        ];
        all.extend(Forgery::ALL.map(Self::ForgedCancel));
        all.extend([
            Self::LeaseExpiry,
            Self::Shutdown,
            Self::Eof,
            Self::OversizeFrame,
            Self::UndecodableFrame,
        ]);
        all
    }

    /// The name printed and accepted by `--only`.
    pub fn name(&self) -> String {
        match self {
            Self::Handshake => "handshake".into(),
            Self::WrongVersionWelcome => "wrong-version-welcome".into(),
            Self::PingDuringStep(drain) => format!("ping-during-{}-step", drain.as_str()),
            Self::MailAckedOnce => "mail-acked-once".into(),
            Self::RedeliveryProcessedOnce => "redelivery-processed-once".into(),
            Self::AttemptVisible => "attempt-visible".into(),
            Self::Drain => "drain".into(),
            Self::SignedCancel => "signed-cancel".into(),
            Self::ForgedCancel(forgery) => format!("forged-cancel-{}", forgery.name()),
            Self::LeaseExpiry => "lease-expiry".into(),
            Self::Shutdown => "shutdown".into(),
            Self::Eof => "eof".into(),
            Self::OversizeFrame => "oversize-frame".into(),
            Self::UndecodableFrame => "undecodable-frame".into(),
        }
    }

    /// Plays the scenario against `s`, a child `launcher` just started.
    pub async fn play(&self, s: &mut Subject, launcher: &Launcher) -> Result<(), Failure> {
        match *self {
            Self::Handshake => handshake::handshake(s, launcher).await,
            Self::WrongVersionWelcome => handshake::wrong_version_welcome(s, launcher).await,
            Self::PingDuringStep(drain) => liveness::ping_during_step(s, launcher, drain).await,
            Self::MailAckedOnce => mail::acked_once(s, launcher).await,
            Self::RedeliveryProcessedOnce => mail::redelivery_processed_once(s, launcher).await,
            Self::AttemptVisible => mail::attempt_visible(s, launcher).await,
            Self::Drain => drain::drain(s, launcher).await,
            Self::SignedCancel => cancel::signed_cancel(s, launcher).await,
            Self::ForgedCancel(forgery) => cancel::forged_cancel(s, launcher, forgery).await,
            Self::LeaseExpiry => drain::lease_expiry(s, launcher).await,
            Self::Shutdown => ending::shutdown(s, launcher).await,
            Self::Eof => ending::eof(s, launcher).await,
            Self::OversizeFrame => ending::oversize_frame(s, launcher).await,
            Self::UndecodableFrame => ending::undecodable_frame(s, launcher).await,
        }
    }
}

/// The payload of an item whose run `run` is one step.
pub fn one_step(run: &str, step: &str, drain: DrainBehavior, ms: u64) -> Vec<u8> {
    payload(json!({
        "run": run,
        "steps": [{"name": step, "drain": drain.as_str(), "ms": ms}],
    }))
}

/// `value` as payload bytes.
pub fn payload(value: Value) -> Vec<u8> {
    value.to_string().into_bytes()
}

/// An exit status, as an operator reads it.
pub fn status_text(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("death by signal {signal}"),
        (None, None) => status.to_string(),
    }
}

/// Fails unless the child exits within `within`, after `what`, with a
/// non-zero code of its own (a crash by signal is no clean refusal) and a
/// message on stderr.
pub async fn refuses(s: &mut Subject, what: &str, within: Duration) -> Result<(), Failure> {
    let after = |f: Failure| Failure::new(format!("{} after {what}", f.expected), f.got);
    let status = s.wait_exit(within).await.map_err(after)?;
    if status.code().is_none_or(|code| code == 0) {
        return Err(after(Failure::new(
            "a non-zero exit code",
            status_text(status),
        )));
    }
    let stderr = s.stderr().await;
    if stderr.trim().is_empty() {
        return Err(after(Failure::new(
            "a message on stderr",
            "nothing on stderr",
        )));
    }
    Ok(())
}
