//! The scenarios, each played against a fresh child: what a supervisor
//! does, and what a conforming child must answer. Every wait is bounded.

mod asking;
mod cancel;
mod drain;
mod ending;
mod handshake;
mod liveness;
mod mail;
mod v3;

use std::process::ExitStatus;
use std::time::Duration;

use serde_json::{Value, json};
use wfhost_ipc::DrainBehavior;

use crate::events::{describe, of_v3};
use crate::failure::Failure;
use crate::forgery::Forgery;
use crate::subject::{Launcher, Subject, Supervisor};

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
    /// Version 3: Hello says 3 when the environment offers 2 to 3.
    HandshakeV3,
    /// Version 3: under a supervisor of version 2 the child speaks 2.
    HandshakeV2Supervisor,
    /// Version 3: `MailStarted` first, `MailDone` with the result last.
    MailStartedAndDone,
    /// Version 3: a result too large for a frame ends the item `Failed`.
    ResultTooLarge,
    /// Version 3: a valid cancel of one item cancels it alone.
    CancelMailAcknowledged,
    /// Version 3: an item declared not cancellable answers `NotSupported`.
    CancelMailNotSupported,
    /// Version 3: a cancel of an item the child does not hold is refused.
    CancelMailUnknownItem,
    /// Version 3: a forged cancel of one item is refused.
    CancelMailForged,
    /// Version 3: a redelivery after `MailDone` is done again, not run.
    RedeliveryDoneAgain,
    /// Version 3: a question asked, answered and remembered; the last
    /// answer is the result.
    AskAnswered,
    /// Version 3: a redelivered item's question answered as it is asked.
    AskAnsweredAtOnce,
    /// Version 3: items waiting for answers are given back on a drain.
    AskGivenBackOnDrain,
    /// Version 3: progress reports, exact, and one too large refused.
    Progress,
    /// Version 3: a key out of bounds is refused before sending.
    AskBadKey,
    /// Version 3: a cancel of an item waiting for an answer.
    AskCancelled,
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
            Self::HandshakeV3,
            Self::HandshakeV2Supervisor,
            Self::MailStartedAndDone,
            Self::ResultTooLarge,
            Self::CancelMailAcknowledged,
            Self::CancelMailNotSupported,
            Self::CancelMailUnknownItem,
            Self::CancelMailForged,
            Self::RedeliveryDoneAgain,
            Self::AskAnswered,
            Self::AskAnsweredAtOnce,
            Self::AskGivenBackOnDrain,
            Self::Progress,
            Self::AskBadKey,
            Self::AskCancelled,
        ]);
        all
    }

    /// The scenarios a child that speaks only `protocol` is held to:
    /// every one for 3; for 2, those of version 2 and
    /// `handshake-v2-supervisor`.
    pub fn for_protocol(protocol: u32) -> Vec<Self> {
        Self::all()
            .into_iter()
            .filter(|s| protocol >= 3 || !s.needs_v3())
            .collect()
    }

    /// Whether only a child that speaks protocol 3 can pass it.
    pub fn needs_v3(&self) -> bool {
        matches!(
            self,
            Self::HandshakeV3
                | Self::MailStartedAndDone
                | Self::ResultTooLarge
                | Self::CancelMailAcknowledged
                | Self::CancelMailNotSupported
                | Self::CancelMailUnknownItem
                | Self::CancelMailForged
                | Self::RedeliveryDoneAgain
                | Self::AskAnswered
                | Self::AskAnsweredAtOnce
                | Self::AskGivenBackOnDrain
                | Self::Progress
                | Self::AskBadKey
                | Self::AskCancelled
        )
    }

    /// The supervisor the scenario's child is started under.
    pub fn supervisor(&self) -> Supervisor {
        match self {
            Self::HandshakeV2Supervisor => Supervisor::Version2,
            _ => Supervisor::Current,
        }
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
            Self::HandshakeV3 => "handshake-v3".into(),
            Self::HandshakeV2Supervisor => "handshake-v2-supervisor".into(),
            Self::MailStartedAndDone => "mail-started-and-done".into(),
            Self::ResultTooLarge => "result-too-large".into(),
            Self::CancelMailAcknowledged => "cancel-mail-acknowledged".into(),
            Self::CancelMailNotSupported => "cancel-mail-not-supported".into(),
            Self::CancelMailUnknownItem => "cancel-mail-unknown-item".into(),
            Self::CancelMailForged => "cancel-mail-forged".into(),
            Self::RedeliveryDoneAgain => "redelivery-done-again".into(),
            Self::AskAnswered => "ask-answered".into(),
            Self::AskAnsweredAtOnce => "ask-answered-at-once".into(),
            Self::AskGivenBackOnDrain => "ask-given-back-on-drain".into(),
            Self::Progress => "progress".into(),
            Self::AskBadKey => "ask-bad-key".into(),
            Self::AskCancelled => "ask-cancelled".into(),
        }
    }

    /// Plays the scenario against `s`, a child `launcher` just started
    /// under [`Self::supervisor`]; then a child that speaks protocol 2
    /// must have sent no message of version 3.
    pub async fn play(&self, s: &mut Subject, launcher: &Launcher) -> Result<(), Failure> {
        self.play_only(s, launcher).await?;
        s.events.poll();
        if s.protocol < 3
            && let Some(seen) = s.events.seen().iter().find(|seen| of_v3(&seen.event))
        {
            return Err(Failure::new(
                format!(
                    "no message of protocol 3 from a child that speaks protocol {}",
                    s.protocol
                ),
                describe(&seen.event),
            ));
        }
        Ok(())
    }

    async fn play_only(&self, s: &mut Subject, launcher: &Launcher) -> Result<(), Failure> {
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
            Self::HandshakeV3 => v3::handshake_v3(s, launcher).await,
            Self::HandshakeV2Supervisor => v3::handshake_v2_supervisor(s, launcher).await,
            Self::MailStartedAndDone => v3::mail_started_and_done(s, launcher).await,
            Self::ResultTooLarge => v3::result_too_large(s, launcher).await,
            Self::CancelMailAcknowledged => v3::cancel_mail_acknowledged(s, launcher).await,
            Self::CancelMailNotSupported => v3::cancel_mail_not_supported(s, launcher).await,
            Self::CancelMailUnknownItem => v3::cancel_mail_unknown_item(s, launcher).await,
            Self::CancelMailForged => v3::cancel_mail_forged(s, launcher).await,
            Self::RedeliveryDoneAgain => v3::redelivery_done_again(s, launcher).await,
            Self::AskAnswered => asking::answered(s, launcher).await,
            Self::AskAnsweredAtOnce => asking::answered_at_once(s, launcher).await,
            Self::AskGivenBackOnDrain => asking::given_back_on_drain(s, launcher).await,
            Self::Progress => asking::progress(s, launcher).await,
            Self::AskBadKey => asking::bad_key(s, launcher).await,
            Self::AskCancelled => asking::cancelled(s, launcher).await,
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
