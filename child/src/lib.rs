//! Child-side runtime for wfhost workflow processes.
//!
//! A workflow child is started by `wfhost supervise` with its control
//! channel at fd 3 and the `WFHOST_*` environment. [`Runtime::connect`]
//! takes the channel and completes the handshake (`Hello` → `Welcome`); a
//! background task then answers the supervisor: `Ping` at once, `Drain`
//! (see below), signed `Cancel` (verified against `WFHOST_SUPERVISOR_KEY`,
//! then every step of the run is cancelled), `Mail` (to [`MailStream`], each
//! id once) and `Shutdown` (the runtime closes).
//!
//! On `Drain`, cancel-behaviour steps are cancelled, wait-behaviour steps go
//! on, and the child stops taking mail: [`MailStream::next`] returns `None`,
//! mail queued but not yet handed out is dropped, and mail arriving later is
//! not taken (all of it stays unacknowledged, so the supervisor delivers it
//! to the next child; redeliveries of acknowledged mail are still
//! acknowledged again). `Drained` means nothing is left that the drain must
//! wait for; it is sent once, as soon as no cancel-behaviour step is in
//! flight and no [`Mail`] is held by the application (handed out by
//! [`MailStream::next`] and neither acknowledged nor dropped). So a mail
//! item's `MailAck` always precedes `Drained`, and a run that holds its mail
//! (even through a wait-behaviour step) finishes before `Drained`. Settle
//! held mail promptly after a drain starts: until then the drain waits.
//!
//! In a fleet the supervisor also sends `Lease { valid_ms }`: if no newer
//! lease arrives within `valid_ms`, the child drains on its own exactly as
//! above, its cancel-behaviour steps cancelled with
//! [`CancelCause::LeaseExpired`], since its supervisor may have lost the
//! deployment to another host.
//!
//! The child speaks the newest protocol version it shares with the
//! supervisor (`WFHOST_PROTOCOL` to `WFHOST_PROTOCOL_MAX`), at most
//! [`Options::newest_protocol`] ([`Runtime::protocol`] says which). In
//! protocol 3 an item [`MailStream::next`] hands out is started
//! (`MailStarted`; [`MailStream::next_with`] and [`Start`] declare a
//! handler that cannot be cancelled, and the item's run), and ends with
//! the handler's result ([`Mail::done`]: `MailDone`; in protocol 2
//! `MailAck`, the result dropped). A verified `CancelMail` of one item is
//! answered with one verdict: the item's [`Mail::token`] fires and its
//! run's steps are cancelled, or an item not started yet ends `Cancelled`
//! at once, or a handler declared not cancellable runs on
//! (`NotSupported`).
//!
//! Also in protocol 3, a handler may ask a person a question about its item
//! and wait as long as it takes ([`Mail::ask`]: `Ask` up, the supervisor's
//! `Answer` back, remembered for the item), and report progress
//! ([`Mail::progress`]). An item whose handler waits in `ask` does not hold
//! a drain: when the drain begins (or the lease runs out) it is given back
//! (`GiveBack { awaiting_answer: true }`), its `ask` fails with
//! [`AskError::GivenBack`], and its end is never reported by this child;
//! the supervisor delivers it again, as its next attempt, once the question
//! is answered. A cancel of the item while its handler waits fails the
//! `ask` with [`AskError::Cancelled`]. Under a supervisor of protocol 2
//! both fail at once ([`AskError::Unsupported`]).
//!
//! The library logs through `tracing`; the application chooses the
//! subscriber (the `wfhost-child` binary writes one line per event to
//! stderr, which the supervisor keeps in its log).
//!
//! ```no_run
//! use std::convert::Infallible;
//!
//! use wfhost_child::{DrainBehavior, Outcome, Runtime, StepError};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let rt = Runtime::connect().await?;
//! rt.ready().await?;
//! let mut inbox = rt.mail();
//! while let Some(mail) = inbox.next().await {
//!     let run = format!("mail-{}", mail.id());
//!     let payload = mail.payload().to_vec();
//!     // Cancelled on drain: fetching can be redone by the next child.
//!     let fetched = rt
//!         .step(&run, "fetch", DrainBehavior::Cancel, |token| async move {
//!             let _ = token; // pass it to work outside this future
//!             Ok::<_, Infallible>(payload.len())
//!         })
//!         .await;
//!     // Waited for on drain: a person is deciding.
//!     let approved = rt
//!         .step(&run, "approve", DrainBehavior::Wait, |_token| async move {
//!             Ok::<_, String>(true)
//!         })
//!         .await;
//!     let outcome = match (fetched, approved) {
//!         (Ok(_), Ok(_)) => Outcome::Succeeded,
//!         (Err(StepError::Cancelled(_)), _) | (_, Err(StepError::Cancelled(_))) => {
//!             Outcome::Cancelled
//!         }
//!         (Err(e), _) => Outcome::Failed(e.to_string()),
//!         (_, Err(e)) => Outcome::Failed(e.to_string()),
//!     };
//!     rt.run_terminal(&run, outcome.clone()).await?;
//!     // Settling the mail (ack, or drop to leave it for the next child) is
//!     // what lets a drain report `Drained`; `next()` then ends the loop.
//!     mail.ack(outcome).await?;
//! }
//! rt.close().await?;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

// The layers, top to bottom: a module imports only from the rows below its
// own (docs/design.md §1). The bottom two rows hold nothing of the async
// runtime: the exec shim uses them alone.
//
//   runtime                  the application's handle
//   dispatch · step          the reader task · a step started by hand
//   shared                   what one connection's handles share
//   mail · connection        mail handed out and settled · the handshake
//   work · outbox            steps and runs in flight · events on their way
//   · question               · an item's questions and their answers
//   token                    a step's cancellation token
//   drain · error            the drain rules · what can go wrong
//   cause · env · options    why work stops · WFHOST_* · what Hello says
//   · remembered             · a bounded memory of what was settled
pub mod cause;
mod connection;
mod dispatch;
pub mod drain;
pub mod env;
pub mod error;
pub mod mail;
mod options;
mod outbox;
mod question;
pub mod remembered;
pub mod runtime;
mod shared;
pub mod step;
pub mod token;
mod work;

pub use cause::{CancelCause, CloseReason};
pub use env::{ChildEnv, EnvError};
pub use error::{AskError, ConnectError, RuntimeError, StepError};
pub use mail::{Mail, MailStream, Start};
pub use options::Options;
pub use runtime::Runtime;
pub use step::Step;
pub use token::CancelToken;
pub use wfhost_ipc::{DrainBehavior, Outcome};

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_can_move_between_threads() {
        send_sync::<Runtime>();
        send_sync::<Step>();
        send_sync::<Mail>();
        send_sync::<MailStream>();
        send_sync::<CancelToken>();
    }

    /// A handler asking runs on any task: the futures of `ask` are `Send`.
    #[allow(dead_code, clippy::let_underscore_future)]
    fn asking_can_move_between_threads(mail: &Mail) {
        fn send<T: Send>(_: T) {}
        send(mail.ask("k", &serde_json::Value::Null));
    }
}
