//! The runtime: the handle an application holds to talk to its supervisor.
//! It owns the handshake, a background task that answers the supervisor
//! (Ping, Drain, Cancel, Mail, Shutdown) even while steps run, and the
//! application-facing calls (ready, steps, runs, recycle, custom events).

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use ed25519_dalek::VerifyingKey;
use tokio::net::UnixStream;
use tokio::sync::{mpsc, watch};
use wfhost_ipc::{DrainBehavior, Event, Outcome, Welcome, Welcomed};

use crate::connection;
use crate::dispatch;
use crate::env::ChildEnv;
use crate::error::{ConnectError, RuntimeError, StepError};
use crate::mail::{MailLedger, MailShared, MailStream};
use crate::outbox::Outbox;
use crate::step::Step;
use crate::token::{CancelCause, CancelToken};
use crate::work::Work;

/// Why the runtime closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseReason {
    /// The supervisor sent `Shutdown`: finish up and exit now.
    Shutdown,
    /// The supervisor closed the channel (it stopped or died).
    Disconnected,
    /// The channel failed or the supervisor broke the protocol.
    Failed(String),
}

impl CloseReason {
    /// The cause given to step tokens when the runtime closes for this reason.
    pub fn cancel_cause(&self) -> CancelCause {
        match self {
            Self::Shutdown => CancelCause::Shutdown,
            Self::Disconnected | Self::Failed(_) => CancelCause::Disconnected,
        }
    }
}

/// What a child tells the supervisor about itself in `Hello`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Whether the application takes mail; when false the supervisor
    /// refuses `wfhost send` to the deployment instead of accepting mail
    /// nobody will process.
    pub takes_mail: bool,
    /// The implementation shown in `wfhost status`.
    pub implementation: String,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            takes_mail: true,
            implementation: concat!("wfhost-child-rust/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}

/// State shared by the runtime handles, steps and the reader task.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) deployment: String,
    pub(crate) channel_id: String,
    pub(crate) supervisor_key: VerifyingKey,
    pub(crate) welcome: Welcome,
    pub(crate) outbox: Outbox,
    pub(crate) work: Arc<Mutex<Work>>,
    pub(crate) mail: MailShared,
    pub(crate) draining: watch::Sender<bool>,
    pub(crate) closed: watch::Sender<Option<CloseReason>>,
}

impl Shared {
    /// The work ledger; a poisoned lock is still consistent (every change
    /// is made before any event is queued), so it is used as is.
    pub(crate) fn work(&self) -> MutexGuard<'_, Work> {
        self.work.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues events in order (callers hold the work lock, so ordering
    /// between tasks is the ledger's order).
    pub(crate) fn post_all(&self, events: Vec<Event>) {
        for event in events {
            self.outbox.post(event);
        }
    }

    /// Queues events in order, like [`Self::post_all`], and waits until
    /// each is written. `events` takes the work lock and returns what the
    /// ledger decided; the lock is released before waiting.
    pub(crate) async fn send_all(
        &self,
        events: impl FnOnce(&mut Work) -> Vec<Event>,
    ) -> Result<(), RuntimeError> {
        let pending: Vec<_> = {
            let mut work = self.work();
            events(&mut work)
                .into_iter()
                .map(|e| self.outbox.post_tracked(e))
                .collect()
        };
        for p in pending {
            p.wait().await?;
        }
        Ok(())
    }

    /// Marks the runtime closed (the first reason wins) and fires every
    /// step token with the reason's cause.
    pub(crate) fn close(&self, reason: CloseReason) {
        self.work().close(reason.cancel_cause());
        self.closed.send_if_modified(|current| {
            if current.is_none() {
                *current = Some(reason);
                true
            } else {
                false
            }
        });
    }
}

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
        let env = ChildEnv::from_env()?;
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
        };
        let mail = MailStream::new(mail_rx, mail_shared.clone());
        let shared = Arc::new(Shared {
            deployment: env.deployment,
            channel_id: env.channel_id,
            supervisor_key: env.supervisor_key,
            welcome,
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
