//! Child-side runtime for wfhost workflow processes.
//!
//! A workflow child is started by `wfhost supervise` with its control
//! channel at fd 3 and the `WFHOST_*` environment. [`Runtime::connect`]
//! takes the channel and completes the handshake (`Hello` → `Welcome`); a
//! background task then answers the supervisor: `Ping` at once, `Drain`
//! (cancel-behaviour steps stop, wait-behaviour steps go on, `Drained` once
//! none of the former is left), signed `Cancel` (verified against
//! `WFHOST_SUPERVISOR_KEY`, then every step of the run is cancelled),
//! `Mail` (to [`MailStream`], each id once) and `Shutdown` (the runtime
//! closes).
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
//!     mail.ack(outcome).await?;
//!     if rt.is_draining() {
//!         break;
//!     }
//! }
//! rt.close().await?;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod connection;
mod dispatch;
pub mod env;
pub mod error;
pub mod mail;
mod outbox;
pub mod runtime;
pub mod step;
pub mod token;
mod work;

pub use env::{ChildEnv, EnvError};
pub use error::{ConnectError, RuntimeError, StepError};
pub use mail::{Mail, MailStream};
pub use runtime::{CloseReason, Runtime};
pub use step::Step;
pub use token::{CancelCause, CancelToken};
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
}
