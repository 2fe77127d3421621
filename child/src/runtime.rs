//! The runtime: the handle an application holds to talk to its supervisor.
//! It owns the handshake, a background task that answers the supervisor
//! (Ping, Drain, Cancel, Mail, Shutdown) even while steps run, and the
//! application-facing calls (ready, steps, runs, recycle, custom events).

use std::future::Future;
use std::sync::{Arc, Mutex};

use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};
use wfhost_ipc::{DrainBehavior, Event, Outcome, Welcome, Welcomed};

pub use crate::cause::CloseReason;
use crate::connection;
use crate::dispatch;
use crate::env::ChildEnv;
use crate::error::{ConnectError, RuntimeError, StepError};
use crate::mail::{MailLedger, MailShared, MailStream};
pub use crate::options::Options;
use crate::outbox::Outbox;
use crate::shared::Shared;
use crate::step::Step;
use crate::token::CancelToken;
use crate::work::Work;

/// A connected child runtime; cheap to clone, every clone drives the same
/// channel.
#[derive(Debug, Clone)]
pub struct Runtime {
    shared: Arc<Shared>,
    mail: MailStream,
}

impl Runtime {
    /// Connects to the supervisor through the inherited control fd named by
    /// the `WFHOST_*` environment and completes the handshake.
    pub async fn connect() -> Result<Self, ConnectError> {
        Self::connect_as(Options::default()).await
    }

    /// [`Self::connect`], telling the supervisor `options` in `Hello`.
    pub async fn connect_as(options: Options) -> Result<Self, ConnectError> {
        let env = ChildEnv::from_env()?.speaking_at_most(options.newest_protocol)?;
        let stream = connection::take_control_fd(env.control_fd)?;
        Self::connect_with(env, stream, options).await
    }

    /// Completes the handshake over an already-open stream (for embedding
    /// and tests; `control_fd` in `env` is ignored).
    pub async fn connect_with(
        env: ChildEnv,
        stream: UnixStream,
        options: Options,
    ) -> Result<Self, ConnectError> {
        let env = env.speaking_at_most(options.newest_protocol)?;
        let Welcomed {
            reader,
            writer,
            welcome,
        } = connection::handshake(stream, &env, &options).await?;
        let outbox = Outbox::spawn(writer, welcome.limits.max_frame_bytes);
        let (mail_tx, mail_rx) = mpsc::unbounded_channel();
        let work = Arc::new(Mutex::new(Work::default()));
        let mail_shared = MailShared {
            ledger: Arc::new(Mutex::new(MailLedger::default())),
            work: work.clone(),
            outbox: outbox.clone(),
            protocol: env.protocol,
            max_frame_bytes: welcome.limits.max_frame_bytes,
        };
        let mail = MailStream::new(mail_rx, mail_shared.clone());
        let shared = Arc::new(Shared {
            deployment: env.deployment,
            channel_id: env.channel_id,
            supervisor_key: env.supervisor_key,
            welcome,
            protocol: env.protocol,
            mail: mail_shared,
            outbox,
            work,
            draining: watch::Sender::new(false),
            closed: watch::Sender::new(None),
        });
        tokio::spawn(dispatch::read_loop(
            reader,
            shared.clone(),
            mail_tx,
            mail.clone(),
        ));
        Ok(Self { shared, mail })
    }

    /// The supervisor's `Welcome`: deployment, grants snapshot, limits.
    pub fn welcome(&self) -> &Welcome {
        &self.shared.welcome
    }

    /// The protocol version spoken with the supervisor: the newest both
    /// speak, at most [`Options::newest_protocol`]. From 3 on, mail items
    /// start (`MailStarted`) and end with a result (`MailDone`).
    pub fn protocol(&self) -> u32 {
        self.shared.protocol
    }

    /// The deployment this child serves.
    pub fn deployment(&self) -> &str {
        &self.shared.deployment
    }

    /// This spawn's channel id.
    pub fn channel_id(&self) -> &str {
        &self.shared.channel_id
    }

    /// Tells the supervisor this child can take work (`Ready`).
    pub async fn ready(&self) -> Result<(), RuntimeError> {
        self.shared.outbox.send(Event::Ready).await
    }

    /// Runs one step of `run`: reports `StepStarted`, runs `body` with the
    /// step's token, reports `StepFinished`. When the token fires (drain of
    /// a cancel-behaviour step, a verified cancel of the run, shutdown or
    /// the channel lost) the body's future is dropped at its next await and
    /// the step ends as `Cancelled`; use the token to stop work that lives
    /// outside the future (threads, processes).
    pub async fn step<T, E, F, Fut>(
        &self,
        run: &str,
        name: &str,
        drain: DrainBehavior,
        body: F,
    ) -> Result<T, StepError<E>>
    where
        F: FnOnce(CancelToken) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: std::fmt::Display,
    {
        let step = self.start_step(run, name, drain).await?;
        let token = step.token().clone();
        if let Some(cause) = token.cause() {
            let _ = step.finish(Outcome::Cancelled).await;
            return Err(StepError::Cancelled(cause));
        }
        let body = body(token.clone());
        let result = tokio::select! {
            biased;
            out = body => Ok(out),
            cause = token.cancelled() => Err(cause),
        };
        // A failure to report the end is the runtime's closure, which the
        // application sees through `closed()`; the step's result stands.
        match result {
            Ok(Ok(value)) => {
                let _ = step.finish(Outcome::Succeeded).await;
                Ok(value)
            }
            Ok(Err(e)) => {
                let _ = step.finish(Outcome::Failed(e.to_string())).await;
                Err(StepError::Failed(e))
            }
            Err(cause) => {
                let _ = step.finish(Outcome::Cancelled).await;
                Err(StepError::Cancelled(cause))
            }
        }
    }

    /// Starts a step by hand (reports `StepStarted`) for work that does not
    /// fit one future; finish it with [`Step::finish`]. Its token may
    /// already have fired: new cancel-behaviour work during a drain, a step
    /// of a cancelled run, or any step after close.
    pub async fn start_step(
        &self,
        run: &str,
        name: &str,
        drain: DrainBehavior,
    ) -> Result<Step, RuntimeError> {
        let (id, token, pending) = {
            let mut work = self.shared.work();
            let (id, token, events) = work.start(run, name, drain);
            let mut pending = None;
            for event in events {
                pending = Some(self.shared.outbox.post_tracked(event));
            }
            (id, token, pending)
        };
        let step = Step::new(self.shared.clone(), id, run, token);
        if let Some(pending) = pending {
            pending.wait().await?;
        }
        Ok(step)
    }

    /// Reports that `run` reached a terminal state (`RunTerminal`). A run
    /// already reported cancelled by the cascade is not reported twice.
    pub async fn run_terminal(&self, run: &str, outcome: Outcome) -> Result<(), RuntimeError> {
        self.shared
            .send_all(|work| work.run_terminal(run, outcome))
            .await
    }

    /// Asks the supervisor to replace this child (`RecycleRequest`).
    pub async fn request_recycle(&self, reason: &str) -> Result<(), RuntimeError> {
        self.shared
            .outbox
            .send(Event::RecycleRequest {
                reason: reason.to_owned(),
            })
            .await
    }

    /// Sends an application-defined event for the supervisor's observers.
    pub async fn custom(&self, kind: &str, bytes: Vec<u8>) -> Result<(), RuntimeError> {
        self.shared
            .outbox
            .send(Event::Custom {
                kind: kind.to_owned(),
                bytes,
            })
            .await
    }

    /// Whether the supervisor has asked this child to drain (from then on
    /// the mail stream hands out nothing more).
    pub fn is_draining(&self) -> bool {
        *self.shared.draining.borrow()
    }

    /// Resolves once the supervisor asks this child to drain: stop taking
    /// new work.
    pub async fn draining(&self) {
        let mut rx = self.shared.draining.subscribe();
        if rx.wait_for(|d| *d).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Why the runtime closed, or `None` while it is open.
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.shared.closed.borrow().clone()
    }

    /// Resolves when the runtime closes (`Shutdown`, the supervisor gone, a
    /// broken channel), with the reason: time to exit.
    pub async fn closed(&self) -> CloseReason {
        let mut rx = self.shared.closed.subscribe();
        let reason = match rx.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone(),
            // The sender lives in `shared`, which `self` keeps alive.
            Err(_) => None,
        };
        match reason {
            Some(reason) => reason,
            None => std::future::pending().await,
        }
    }

    /// The mail stream (every clone shares one queue). Mail it hands out is
    /// held, delaying `Drained`, until acknowledged or dropped.
    pub fn mail(&self) -> MailStream {
        self.mail.clone()
    }

    /// Waits until every event queued so far is written.
    pub async fn flush(&self) -> Result<(), RuntimeError> {
        self.shared.outbox.flush().await
    }

    /// Flushes and closes the sending direction: the supervisor reads end
    /// of stream, as when this child exits.
    pub async fn close(&self) -> Result<(), RuntimeError> {
        self.shared.outbox.close().await
    }
}
